"""bert_tf.app.cli, the wrapper every command runs through: no TensorFlow start-up noise by
default (all of it with --verbosity=1), usage errors reason first, user errors as one
line without a traceback. The commands run as a user runs them (subprocesses)."""

import os
import re
import subprocess
import sys

import pytest

from bert_tf.app import cli
from bert_tf.checkpoints import tf1, weights as weights_lib
from bert_tf.model.pretrainer import BertPretrainer
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
    code = "import sys, bert_tf.app.cli, bert_tf.core.errors; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO,
                   env=dict(os.environ, PYTHONPATH=REPO), timeout=60)


def _pipe_fill(stream) -> int:
    import fcntl
    import struct
    import termios

    return struct.unpack("i", fcntl.ioctl(stream.fileno(), termios.FIONREAD, b"\0" * 4))[0]


def _pipe_capacity(stream) -> int:
    import fcntl

    return fcntl.fcntl(stream.fileno(), fcntl.F_GETPIPE_SZ)


def test_the_filter_waits_for_a_non_blocking_stderr_instead_of_dropping_output():
    # The caller's stderr is a non-blocking pipe nobody reads for a while: the filter's
    # writes meet EAGAIN once it is full. They used to drop whole 64 KB chunks
    # (640 KB written, 64 KB arrived).
    code = (
        "import fcntl, os\n"
        "fcntl.fcntl(2, fcntl.F_SETFL, fcntl.fcntl(2, fcntl.F_GETFL) | os.O_NONBLOCK)\n"
        "from bert_tf.app import cli\n"
        "cli._install_stderr_filter()\n"
        "print('go', flush=True)\n"
        "for i in range(640):\n"
        "    os.write(2, b'%05d' % i + b'x' * 1018 + b'\\n')\n")
    process = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=command_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout.readline() == b"go\n"
        import time

        # From the moment the pipe is full every further write of the filter meets EAGAIN.
        capacity = _pipe_capacity(process.stderr)
        deadline = time.monotonic() + 60
        while _pipe_fill(process.stderr) < capacity and time.monotonic() < deadline:
            time.sleep(0.01)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    lines = err.splitlines()
    assert len(err) == 640 * 1024, len(err)
    assert [int(line[:5]) for line in lines] == list(range(640))


def test_a_dead_filter_gives_the_command_its_stderr_back():
    # Killing the filter used to leave fd 2 a pipe without a reader: the command's next
    # write to stderr failed with EPIPE and a successful command exited 1 (or 120).
    code = (
        "import os, signal, sys\n"
        "from bert_tf.app import cli\n"
        "cli._install_stderr_filter()\n"
        "print('before', file=sys.stderr, flush=True)\n"
        "pid = os.getpid()\n"
        "filter_pid, = open(f'/proc/{pid}/task/{pid}/children').read().split()\n"
        "os.kill(int(filter_pid), signal.SIGKILL)\n"
        "try:\n"
        "    os.waitid(os.P_PID, int(filter_pid), os.WEXITED | os.WNOWAIT)\n"
        "except ChildProcessError:\n"
        "    pass  # reaped already by the wrapper's watcher\n"
        "for i in range(20000):\n"
        "    print(f'after {i}', file=sys.stderr)\n"
        "sys.stderr.flush()\n"
        "print('done')\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=command_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "done\n"
    lines = result.stderr.splitlines()
    assert lines[0] == "before"
    assert lines[1:] == [f"after {i}" for i in range(20000)], result.stderr[-2000:]
