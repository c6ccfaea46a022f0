# The rules Bazel 4.2.3's own @bazel_tools load from @rules_cc, as the built-in rules they wrap.
cc_binary = native.cc_binary
cc_library = native.cc_library
cc_test = native.cc_test
cc_proto_library = native.cc_proto_library
cc_toolchain = native.cc_toolchain
cc_toolchain_suite = native.cc_toolchain_suite
objc_library = native.objc_library
