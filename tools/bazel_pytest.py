"""Runs test files under pytest as a Bazel py_test: BUILD's py_test targets name this file
as their main and their test file as args (tools/update_build.py writes them).

    bazel test --python_path=$PWD/.venv/bin/python //...    (what `make bazel-test` runs)
"""

import sys

import pytest


def main(argv):
    # `pip install -e .` put a finder for bert_tf and data_prep in the virtualenv: a module
    # missing from this test's runfiles (a dep BUILD does not declare) would quietly import
    # from the checkout. Without it, a missing dep fails the test.
    sys.meta_path[:] = [finder for finder in sys.meta_path
                        if not getattr(finder, "__module__", "").startswith("__editable__")]
    return pytest.main(["-q", "-p", "no:cacheprovider", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
