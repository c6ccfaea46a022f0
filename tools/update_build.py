"""Regenerates BUILD from the tree: one Bazel target per module, deps from imports.

Run after adding or moving a module:  python tools/update_build.py
tests/test_build.py checks that BUILD names every module and only existing files.

BUILD uses Bazel's built-in Python rules (no rules_python: Bazel runs offline here, see
WORKSPACE); third-party packages come from the virtualenv that `make bazel-test` passes as
--python_path, so deps name only our own modules. Each test file, and each module's
docstring examples, is a py_test running pytest (tools/bazel_pytest.py). Those that reach
TensorFlow or another heavy framework (HEAVY, IMPORT_TENSORFLOW_WHEN_RUN), start our
commands or build models are tagged manual: `bazel test //...` skips them (minutes each;
`make test` runs them), `bazel test //:tests_test_x` runs one. The others run with pytest's
--without_tensorflow, which fails them if TensorFlow is imported after all.
"""

import ast
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("bert_tf", "data_prep", "demo", "benchmarks", "tools")
# Modules run as programs (python -m ...) become py_binary; tests py_test.
BINARIES = {"bert_tf/convert_checkpoint.py", "bert_tf/pretrain.py", "bert_tf/finetune.py",
            "bert_tf/export_model.py", "bert_tf/extract_features.py", "bert_tf/sweep.py",
            "data_prep/create_pretraining_data.py", "data_prep/build_vocab.py",
            "data_prep/beam_pipeline.py", "data_prep/create_finetuning_data.py",
            "bert_tf/extend_vocab.py", "bert_tf/pre_tokenizers.py",
            "demo/run_demo.py", "demo/classify.py", "tools/update_build.py"}
# Third-party packages (top-level import names) whose import alone takes seconds or that
# train or convert models: a test file reaching one at import time is tagged manual.
HEAVY = {"tensorflow", "tensorflow_text", "keras", "keras_hub", "tensorflow_serving", "torch",
         "transformers", "apache_beam", "onnx", "onnxruntime", "openvino", "ai_edge_litert",
         "nncf", "tf2onnx"}
# A test file naming one of these starts our commands in Python processes of their own
# (TensorFlow is imported there, out of --without_tensorflow's sight) or builds models:
# tagged manual as well.
STARTS_COMMANDS_OR_MODELS = ("sys.executable", "run_command(", "make_model_dir(",
                             "run_demo_process(")
# Test files whose imports are light but whose tests import TensorFlow when they run (one
# builds a model, compares with tf.train.Example, defines flags whose choices live beside
# TensorFlow, or imports every benchmark dependency).
# --without_tensorflow fails a file missing here; tagged manual.
IMPORT_TENSORFLOW_WHEN_RUN = {"tests/test_benchmark_dependencies.py", "tests/test_config.py",
                              "tests/test_pretrain_config.py", "tests/test_settings.py",
                              "tests/test_tfrecord_writer.py", "tests/test_command_flags.py",
                              # and modules whose docstring examples do
                              "bert_tf/extract_features.py", "bert_tf/app/settings.py",
                              "data_prep/tfrecord_writer.py"}
# Files tests read through the repository's paths (golden files, configs): data of every test.
TEST_DATA = ("tests/data/**", "official_configs/**")
PYTEST_MAIN = "tools/bazel_pytest.py"
DOTTED_NAME = re.compile(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)+")


def python_files():
    """Tracked .py files of the packages (untracked work in progress is left out)."""
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    return sorted(f for f in tracked if f.split("/")[0] in PACKAGES + ("tests",))


def target_name(path: str) -> str:
    return path[:-3].replace("/", "_")


def imports_of(path: str, at_import_time: bool = False):
    """Modules the file imports; with at_import_time, only those imported when the file
    itself is imported (not inside functions, which import lazily when called)."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"), filename=path)
    names = set()
    nodes = list(ast.iter_child_nodes(tree))
    while nodes:
        node = nodes.pop()
        if at_import_time and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        nodes.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "importorskip" and node.args
              and isinstance(node.args[0], ast.Constant)):
            names.add(node.args[0].value)  # pytest.importorskip("torch") imports torch
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    if not at_import_time:
        # importlib.import_module("bert_tf.x") and tables of such names: an exact module
        # name in a string counts as an import (a lazy one).
        names.update(node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                     and isinstance(node.value, str) and DOTTED_NAME.fullmatch(node.value)
                     and node.value.split(".")[0] in PACKAGES + ("tests",))
    return names


def our_modules_imported(path: str, modules: dict, at_import_time: bool = False) -> set:
    """Files of our own modules (keys of modules) that path imports."""
    found = set()
    # A script's own folder is on sys.path: benchmarks import their sibling scripts.
    script = path.startswith(("benchmarks/", "tools/"))
    folders = ("", path.split("/")[0] + "/") if script else ("",)
    for name in imports_of(path, at_import_time):
        candidate = name.replace(".", "/")
        found.update(option for f in folders for ext in (".py", "/__init__.py")
                     if (option := f + candidate + ext) in modules and option != path)
        # Importing a.b.c runs a/__init__.py and a/b/__init__.py first.
        parts = name.split(".")
        found.update(init for i in range(1, len(parts))
                     if (init := "/".join(parts[:i]) + "/__init__.py") in modules)
    # A module inside a/ has a/ imported already, and a/__init__.py may import it (Bazel
    # allows no cycle): its package's __init__.py is not its dep.
    return {f for f in found
            if not (f.endswith("/__init__.py") and path.startswith(f[:-len("__init__.py")]))}


def deps_of(path: str, modules: dict) -> list:
    return sorted(":" + target_name(f) for f in our_modules_imported(path, modules))


def imports_heavy(path: str, modules: dict) -> bool:
    """Whether importing path imports a HEAVY package, through our modules too."""
    seen, todo = set(), [path]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if any(name.split(".")[0] in HEAVY for name in imports_of(current, at_import_time=True)):
            return True
        todo.extend(our_modules_imported(current, modules, at_import_time=True))
    return False


def pytest_target(name: str, srcs: list, args: list, heavy: bool, deps: set) -> list:
    """Lines of a py_test that runs pytest with args (tools/bazel_pytest.py)."""
    args = args if heavy else args + ["--without_tensorflow"]
    lines = ["py_test(", f'    name = "{name}",',
             "    srcs = [" + ", ".join(f'"{s}"' for s in srcs + [PYTEST_MAIN]) + "],",
             f'    main = "{PYTEST_MAIN}",',
             "    args = [" + ", ".join(f'"{a}"' for a in args) + "],",
             "    data = [\":test_data\"],",
             '    size = "large",' if heavy else '    size = "small",']
    if heavy:
        lines.append('    tags = ["manual"],')
    return lines + ["    deps = ["] + [f'        "{d}",' for d in sorted(deps)] + ["    ],", ")", ""]


def render() -> str:
    files = python_files()
    modules = {f: True for f in files}
    out = ["# Bazel targets for every module (generated by tools/update_build.py; edit that, not this).",
           "# Built-in Python rules; third-party packages come from the virtualenv (--python_path,",
           "# see .bazelrc). `make bazel-test` runs every test not tagged manual.", "",
           'package(default_visibility = ["//visibility:public"])', "",
           "filegroup(", '    name = "test_data",',
           "    srcs = glob([" + ", ".join(f'"{g}"' for g in TEST_DATA) + "]),", ")", ""]
    for f in files:
        source = (ROOT / f).read_text(encoding="utf-8")
        deps = set(deps_of(f, modules))
        if f.startswith("tests/test_"):
            # pytest loads conftest.py before a test file. Not a dep of tests/helpers:
            # conftest.py imports them, and Bazel allows no cycle.
            deps.add(":tests_conftest")
            heavy = (imports_heavy(f, modules) or f in IMPORT_TENSORFLOW_WHEN_RUN
                     or any(word in source for word in STARTS_COMMANDS_OR_MODELS))
            out.extend(pytest_target(target_name(f), [f], [f], heavy, deps))
            continue
        rule = "py_binary" if f in BINARIES else "py_library"
        out.extend([f"{rule}(", f'    name = "{target_name(f)}",', f'    srcs = ["{f}"],'])
        if rule == "py_binary":
            out.append(f'    main = "{f}",')
        if deps:
            out.extend(["    deps = ["] + [f'        "{d}",' for d in sorted(deps)] + ["    ],"])
        out.extend([")", ""])
        # The module's docstring examples, as `make test` runs them (--doctest-modules).
        if f.startswith(("bert_tf/", "data_prep/")) and ">>>" in source:
            out.extend(pytest_target(target_name(f) + "_doctest", [],
                                     ["-p", "tests.conftest", "--doctest-modules", f],
                                     imports_heavy(f, modules) or f in IMPORT_TENSORFLOW_WHEN_RUN,
                                     {":" + target_name(f), ":tests_conftest"}))
    return "\n".join(out)


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        sys.exit(0 if (ROOT / "BUILD").read_text() == text else 1)
    (ROOT / "BUILD").write_text(text)
    print(f"wrote {ROOT / 'BUILD'}")
