# The rules Bazel 4.2.3's own @bazel_tools load from @rules_java, as the built-in rules they wrap.
java_binary = native.java_binary
java_import = native.java_import
java_library = native.java_library
java_proto_library = native.java_proto_library
java_runtime = native.java_runtime
java_toolchain = native.java_toolchain
