"""The layer picture of ARCHITECTURE.md, checked: no module imports a higher layer, the
module graph has no cycle, and the TF-free modules import alone without TensorFlow. And
the tests' own rule: no file under tests/ imports a test file or conftest.py (what tests
share is in tests/helpers/, their shared fixtures in tests/conftest.py).

The import graph is read from the source (every `import`, also those inside functions,
so a lazy import cannot hide an upward arrow); the TF-free claim is checked by importing
each of those modules in one fresh interpreter.
"""

import ast
import functools
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The layers, lowest first. A module may import its own layer and those LAYERS[layer]
# lists; every bert_tf module not named here is "library", every data_prep module must
# be named.
CORE = {"bert_tf",
        "bert_tf.core", "bert_tf.core.errors", "bert_tf.core.constants", "bert_tf.core.file_io",
        "bert_tf.core.output_guard",
        "bert_tf.app", "bert_tf.app.cli", "bert_tf.app.setting_fields",
        "bert_tf.text", "bert_tf.text.text_rules", "bert_tf.text.codepoint_tables",
        "bert_tf.text.pre_tokenizers"}
DATA_PREP = {"data_prep", "data_prep.corpus", "data_prep.document_store",
             "data_prep.pretraining_instances", "data_prep.tfrecord_writer",
             "data_prep.pretraining_passes", "data_prep.pretraining_job"}
COMMANDS = {"bert_tf.pretrain", "bert_tf.finetune", "bert_tf.sweep",
            "bert_tf.extract_features", "bert_tf.convert_checkpoint", "bert_tf.export_model",
            "bert_tf.extend_vocab", "bert_tf.pre_tokenizers", "data_prep.create_pretraining_data",
            "data_prep.create_finetuning_data", "data_prep.build_vocab",
            "data_prep.beam_pipeline"}
LAYERS = {
    "core": {"core"},
    "data_prep": {"core", "data_prep"},  # TF-free: the bert_tf library is not theirs
    "library": {"core", "library"},  # never a command module
    "command": {"core", "data_prep", "library", "command"},
}
# Arrows the picture allows by exception, each with its reason.
ALLOWED = {
    ("data_prep.pretraining_passes", "bert_tf.text.tokenization"):
        "--tokenizer=tensorflow asks for the in-graph tokenizer (imported only then)",
}
# Modules that import TensorFlow although their layer is TF-free (documented).
TF_ALLOWED = {"data_prep.create_finetuning_data": "a command on the task library (its "
                                                  "import is light today; running needs TF)"}
# Cycles tolerated for now, each with its reason (none: model_dir's lazy import of
# checkpoints.names went when the checkpoint child names moved to constants).
KNOWN_CYCLES: set = set()


def modules():
    """{dotted name: path} of every tracked module of bert_tf and data_prep."""
    out = subprocess.run(["git", "ls-files", "bert_tf/*.py", "data_prep/*.py"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout.split()
    names = {}
    for path in out:
        name = path[:-3].replace("/", ".")
        names[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
    return names


def imports(path, known):
    """The project modules `path` imports, anywhere in the file."""
    tree = ast.parse(open(os.path.join(REPO, path), encoding="utf-8").read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                if sub in known:  # `from bert_tf.model import model_dir`
                    found.add(sub)
                elif node.module in known:  # `from bert_tf.core.errors import BertTfError`
                    found.add(node.module)
    return found


def layer_of(name):
    if name in CORE:
        return "core"
    if name in COMMANDS:
        return "command"
    if name in DATA_PREP:
        return "data_prep"
    if name.startswith("bert_tf."):
        return "library"
    raise AssertionError(f"{name}: put it in a layer (tests/test_layers_imports.py and "
                         f"ARCHITECTURE.md's picture)")


@functools.lru_cache(maxsize=None)
def graph():
    known = modules()
    return {name: frozenset(imports(path, known) - {name}) for name, path in known.items()}


def package_graph():
    """The graph with each subpackage (bert_tf.checkpoints, bert_tf.data, ...) as one node:
    importing any of its modules runs the package, so a cycle through it is a cycle."""
    def node(name):
        return ".".join(name.split(".")[:2])

    out = {}
    for name, deps in graph().items():
        out.setdefault(node(name), set()).update(node(d) for d in deps if node(d) != node(name))
    return out


def test_no_module_imports_a_higher_layer():
    wrong = []
    for name, deps in graph().items():
        for dep in deps:
            if layer_of(dep) not in LAYERS[layer_of(name)] and (name, dep) not in ALLOWED:
                wrong.append(f"{name} ({layer_of(name)}) imports {dep} ({layer_of(dep)})")
    assert not wrong, "imports against ARCHITECTURE.md's layers:\n" + "\n".join(sorted(wrong))


def test_only_commands_at_the_package_root():
    """The bert_tf/ root holds the commands; the library lives in subpackages."""
    root = {name for name, path in modules().items()
            if path.count("/") == 1 and path.startswith("bert_tf/") and name != "bert_tf"}
    assert root <= COMMANDS, (f"library modules at the bert_tf/ root (move them into the "
                              f"subpackage of what they hold): {sorted(root - COMMANDS)}")


def test_every_exception_is_still_needed():
    edges = graph()
    stale = [edge for edge in ALLOWED if edge[1] not in edges.get(edge[0], ())]
    stale += [sorted(c) for c in KNOWN_CYCLES if c not in cycles(package_graph())]
    assert not stale, f"remove these from ALLOWED / KNOWN_CYCLES, they are gone: {stale}"


def cycles(edges):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(frozenset(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        frozenset({"a", "b", "c"})]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_module_graph_has_no_cycle():
    found = [sorted(c) for c in cycles(graph()) + cycles(package_graph())
             if c not in KNOWN_CYCLES]
    assert not found, f"import cycles (one module imports up, even if lazily): {found}"


def test_tf_free_modules_import_alone_without_tensorflow():
    names = sorted(n for n in graph() if layer_of(n) in ("core", "data_prep")
                   or (n.startswith("data_prep.") and n not in TF_ALLOWED))
    # One interpreter: once a module is imported without loading TensorFlow, what it
    # brought in is TF-free too, so the next module's check is as if alone.
    script = ("import importlib, json, sys\n"
              "heavy = ('tensorflow', 'keras', 'tensorflow_text')\n"
              "loaded = {}\n"
              f"for name in {names!r}:\n"
              "    importlib.import_module(name)\n"
              "    hit = [m for m in heavy if m in sys.modules]\n"
              "    if hit:\n"
              "        loaded[name] = hit\n"
              "        break\n"
              "print(json.dumps(loaded))\n")
    env = dict(os.environ, PYTHONPATH=REPO)
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {}, \
        f"a TF-free module loads TensorFlow on import: {result.stdout}"


def imported_test_files(source: str) -> set:
    """The test files (test_*.py) and conftest.py that `source`, a file under tests/,
    imports, in any spelling: `tests.test_x`, `from tests import test_x`, `test_x` (tests/
    on sys.path), relative, lazy."""
    def is_test_file(name):
        return name.startswith("test_") or name == "conftest"

    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            package = [node.module] if node.module else []
            base = node.module or ""
            # `from tests import test_x`, `from . import test_x`: the names are modules.
            names = package + ([f"{base}.{a.name}" for a in node.names]
                               if base in ("", "tests") else [])
        else:
            continue
        for name in names:
            parts = name.strip(".").split(".")
            module = parts[1] if parts[0] == "tests" and len(parts) > 1 else parts[0]
            if is_test_file(module):
                found.add(module)
    return found


def test_the_import_check_sees_every_spelling():
    spellings = ["from tests.test_export import VOCAB", "import tests.test_export as e",
                 "from tests import test_export", "from test_export import VOCAB",
                 "from .test_export import VOCAB", "from . import test_export",
                 "def f():\n    from tests.test_export import VOCAB",
                 "from tests.conftest import REPO_ROOT"]
    for source in spellings:
        assert imported_test_files(source) in ({"test_export"}, {"conftest"}), source
    assert imported_test_files("from tests.helpers.export import test_vocab\n"
                               "from tests.helpers import REPO_ROOT\n"
                               "from bert_tf.x import test_y\nimport pytest") == set()


def test_no_test_file_imports_another_or_conftest():
    tests = os.path.join(REPO, "tests")
    wrong = []
    for directory, _, files in os.walk(tests):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    imported = imported_test_files(f.read())
                if imported:
                    wrong.append(f"{os.path.relpath(path, REPO)} imports {sorted(imported)}")
    assert not wrong, ("move what test files share to tests/helpers/ (fixtures to "
                       "tests/conftest.py; pytest loads it, nothing imports it):\n"
                       + "\n".join(wrong))
