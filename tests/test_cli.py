"""bert_tf.cli, the wrapper every command runs through: no TensorFlow start-up noise by
default (all of it with --verbosity=1), usage errors reason first, user errors as one
line without a traceback. The commands run as a user runs them (subprocesses)."""

import os
import re
import subprocess
import sys

import pytest

from bert_tf import cli
from bert_tf.checkpoints import tf1, weights as weights_lib
from bert_tf.models import BertPretrainer
from tests.helpers import REPO, command_env, run_command, tiny_config

# What TensorFlow printed on every command before (this machine: no GPU).
STARTUP_NOISE = ("absl::InitializeLog", "cudart_stub", "cuInit", "port.cc", "oneDNN",
                 "cpu_feature_guard", "Sharding callback duration")


def _run(*args):
    # TF_CPP_MIN_LOG_LEVEL unset: what a user's shell has.
    return run_command(*args, env=command_env(TF_CPP_MIN_LOG_LEVEL=None), timeout=300)


@pytest.fixture(scope="module")
def tf1_checkpoint(tmp_path_factory):
    cfg = tiny_config(hidden_act="gelu_approximate")
    weights = weights_lib.weights_from_model(BertPretrainer(cfg), do_lower_case=True)
    return tf1.write_tf1_checkpoint(weights, str(tmp_path_factory.mktemp("tf1")))


def test_default_output_is_quiet_and_verbosity_shows_the_rest(tf1_checkpoint, tmp_path):
    quiet = _run("bert_tf.convert_checkpoint", "--source_format=tf1",
                 f"--input={tf1_checkpoint}", f"--output_dir={tmp_path / 'a'}")
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert "wrote" in quiet.stdout  # results and progress stay, in short lines
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d read .*tf1", quiet.stderr, re.M), \
        quiet.stderr
    for noise in STARTUP_NOISE:
        assert noise not in quiet.stderr, quiet.stderr
    assert not re.search(r"\.(cc|h):\d+\] ", quiet.stderr), quiet.stderr

    verbose = _run("bert_tf.convert_checkpoint", "--source_format=tf1",
                   f"--input={tf1_checkpoint}", f"--output_dir={tmp_path / 'b'}",
                   "--verbosity=1")
    assert verbose.returncode == 0, verbose.stderr[-3000:]
    assert "Sharding callback duration" in verbose.stderr  # TensorFlow's own INFO lines
    assert re.search(r"\.(cc|h):\d+\] ", verbose.stderr)  # and its C++ log lines


def test_usage_errors_put_the_reason_first():
    missing = _run("bert_tf.pretrain", "--input_file=x")
    assert missing.returncode == 1
    lines = missing.stderr.splitlines()
    assert lines[0] == ("pretrain: error: --output_dir is required (on the command line "
                        "or in --config_file)"), missing.stderr
    assert "--helpfull" in lines[1] and len(lines) == 2  # no flag list
    unknown = _run("data_prep.build_vocab", "--bogus=1")
    assert unknown.returncode == 1
    assert unknown.stderr.splitlines()[0] == \
        "build_vocab: error: Unknown command line flag 'bogus'", unknown.stderr


def test_user_errors_are_one_line_without_traceback(tmp_path):
    (tmp_path / "empty").mkdir()
    result = _run("bert_tf.export_model", f"--init_checkpoint={tmp_path / 'empty'}",
                  f"--export_dir={tmp_path / 'e'}")
    assert result.returncode == 1
    assert result.stderr.startswith("export_model: error: "), result.stderr
    assert str(tmp_path / "empty") in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_progress_bars_pass_the_filter(shared_data, tmp_path):
    result = _run("data_prep.create_pretraining_data",
                  f"--input_file={shared_data / 'pretrain' / 'bert_sample_text.txt'}",
                  f"--output_file={tmp_path / 'x.tfrecord'}",
                  f"--vocab_file={shared_data / 'vocab' / 'bert-base-uncased-vocab.txt'}",
                  "--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=1",
                  "--num_workers=1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "doc/s" in result.stderr  # tqdm's bar
    assert re.search(r"\d+ instances in 1 file\(s\)", result.stderr)


def test_the_noise_pattern_keeps_our_lines_and_real_errors():
    noise = [
        "WARNING: All log messages before absl::InitializeLog() is called are written to "
        "STDERR",
        "I0000 00:00:1795503006.033874    5171 port.cc:153] oneDNN custom operations are on.",
        "I0000 00:00:1795503006.034167    5171 cudart_stub.cc:31] Could not find cuda drivers",
        "E0000 00:00:1795503006.677284    5171 cuda_platform.cc:52] failed call to cuInit: "
        "INTERNAL: CUDA error",
        "W0000 00:00:1795503138.683020    6950 dataset.cc:997] Input of GeneratorDatasetOp",
        "E0000 00:00:1795503140.492175    6950 util.cc:131] oneDNN supports DT_INT64 only on "
        "platforms with AVX-512.",
        "2025-09-17 14:44:05.157831: I external/local_xla/xla/tsl/cuda/cudart_stub.cc:32] x",
        "To enable the following instructions: AVX2 FMA, in other operations, rebuild "
        "TensorFlow with the appropriate compiler flags.",
    ]
    kept = [
        "I1124 06:50:07.640792 139826778930048 convert_checkpoint.py:142] read /x (6 layers)",
        "W1124 07:03:22.965439 140560960310144 pretraining.py:342] skipped a damaged record",
        "E0000 00:00:1795503140.492175    6950 coordination_service.cc:12] heartbeat timeout",
        "pretrain: error: --output_dir is required",
        " 52%|█████▏    | 64/122 [00:00<00:00, 85.61doc/s]",
    ]
    assert all(cli.NOISE.match(line) for line in noise)
    assert not any(cli.NOISE.match(line) for line in kept)


def test_the_wrapper_loads_no_tensorflow():
    code = "import sys, bert_tf.cli, bert_tf.errors; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO,
                   env=dict(os.environ, PYTHONPATH=REPO), timeout=60)
