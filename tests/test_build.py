"""BUILD parses as Starlark, names every module and test, and only files that exist, and
is what tools/update_build.py writes. `make bazel-test` builds and runs it with Bazel;
this is the quick check `make test` makes without Bazel.
"""

import ast
import pathlib
import subprocess

from tests.helpers import REPO_ROOT


def _parse_build():
    """Evaluates BUILD with stand-ins for the rules; returns {name: kwargs}."""
    targets = {}

    def rule(kind):
        def record(**kwargs):
            assert kwargs["name"] not in targets, f"duplicate target {kwargs['name']}"
            targets[kwargs["name"]] = dict(kwargs, kind=kind)
        return record

    source = (REPO_ROOT / "BUILD").read_text()
    ast.parse(source)  # Starlark's syntax is a subset of Python's
    env = {"package": lambda **k: None, "glob": lambda patterns: patterns,
           "filegroup": rule("filegroup"), "py_library": rule("py_library"),
           "py_binary": rule("py_binary"), "py_test": rule("py_test")}
    exec(compile(source, "BUILD", "exec"), env)  # noqa: S102 - our own file
    return targets


def test_build_lists_every_module_and_only_existing_files():
    targets = _parse_build()
    listed = {src for t in targets.values() if t["kind"] != "filegroup" for src in t["srcs"]}
    for src in listed:
        assert (REPO_ROOT / src).is_file(), f"BUILD names {src}, which does not exist"
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO_ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    expected = {f for f in tracked
                if f.split("/")[0] in ("bert_tf", "data_prep", "tests", "demo", "benchmarks")}
    missing = sorted(expected - listed)
    assert not missing, f"modules missing from BUILD (run tools/update_build.py): {missing}"


def test_deps_resolve_and_tests_are_py_test():
    targets = _parse_build()
    for name, target in targets.items():
        for dep in target.get("deps", []):
            if dep.startswith(":"):
                assert dep[1:] in targets, f"{name} depends on unknown target {dep}"
        if target["kind"] == "filegroup":
            continue
        if pathlib.Path(target["srcs"][0]).name.startswith("test_"):
            assert target["kind"] == "py_test", name
        if target["kind"] == "py_test":
            # pytest runs the file (or the module's docstring examples) given in args
            assert target["main"] == "tools/bazel_pytest.py", name
            assert (REPO_ROOT / [a for a in target["args"] if a.endswith(".py")][0]).is_file()


def test_deps_have_no_cycle():
    """Bazel refuses a cycle of deps (tests/conftest.py and the helpers it imports, say)."""
    deps = {name: {d[1:] for d in target.get("deps", []) if d.startswith(":")}
            for name, target in _parse_build().items()}
    while True:  # take away the targets whose deps are all taken: what stays is in a cycle
        done = [name for name, targets in deps.items() if not targets & deps.keys()]
        if not done:
            break
        for name in done:
            del deps[name]
    assert not deps, f"targets in or behind a dependency cycle: {sorted(deps)[:20]}"


def test_build_is_what_update_build_writes():
    from tools import update_build

    assert (REPO_ROOT / "BUILD").read_text() == update_build.render(), (
        "BUILD is stale: run python tools/update_build.py")


def test_a_file_importing_tensorflow_is_tagged_manual():
    """`make bazel-test` runs the py_tests not tagged manual, with --without_tensorflow."""
    targets = _parse_build()
    light = targets["tests_test_pretraining_instances"]
    assert "manual" not in light.get("tags", []) and "--without_tensorflow" in light["args"]
    heavy = targets["tests_test_layers"]  # imports tensorflow at the top
    assert heavy["tags"] == ["manual"] and "--without_tensorflow" not in heavy["args"]
    runs_tensorflow = targets["tests_test_config"]  # its tests build a model
    assert runs_tensorflow["tags"] == ["manual"]
