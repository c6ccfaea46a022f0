"""What the training tests share: random pretraining records, `python -m bert_tf.pretrain`
in a process of its own (its command line, start, progress, last checkpoint), a one-layer
model and a stand-in for the TPU factories. The fixture over these is in
tests/conftest.py (pretrain_inputs)."""

import socket
import subprocess
import sys
import time
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import REPO, command_env

TIMEOUT = 300  # seconds a command may take; generous because the test machine is shared

# The records' sequence length and masked positions per sequence.
SEQ, PRED = 16, 4


def make_example(rng, seq=SEQ, pred=PRED, vocab=100, drop=None, lengths=None):
    """One random pretraining tf.train.Example in the docs/contracts.md §2 schema."""
    n = int(rng.integers(6, seq + 1))
    ids = np.zeros(seq, np.int64)
    ids[:n] = rng.integers(5, vocab, n)
    mask = (np.arange(seq) < n).astype(np.int64)
    segs = ((np.arange(seq) >= n // 2) & (mask > 0)).astype(np.int64)
    k = int(rng.integers(1, pred + 1))
    positions = np.zeros(pred, np.int64)
    positions[:k] = rng.choice(np.arange(1, n), k, replace=False)
    lm_ids = np.zeros(pred, np.int64)
    lm_ids[:k] = rng.integers(5, vocab, k)
    weights = (np.arange(pred) < k).astype(np.float32)
    values = {"input_ids": ids, "input_mask": mask, "segment_ids": segs,
              "masked_lm_positions": positions, "masked_lm_ids": lm_ids,
              "masked_lm_weights": weights,
              "next_sentence_labels": np.array([rng.integers(0, 2)], np.int64)}
    for name, length in (lengths or {}).items():
        values[name] = np.resize(values[name], length)
    feature = {}
    for name, value in values.items():
        if name == drop:
            continue
        if value.dtype == np.float32:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=value))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=value))
    return tf.train.Example(features=tf.train.Features(feature=feature))


def write_records(path, count, seed=0, **kwargs):
    """Writes `count` random examples to `path`; returns the path as a string."""
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for _ in range(count):
            writer.write(make_example(rng, **kwargs).SerializeToString())
    return str(path)


def pretrain_command(pretrain_inputs, output_dir, *extra):
    """`python -m bert_tf.pretrain` on `pretrain_inputs` (the conftest fixture): a tiny
    model, 4 examples a step, learning rate 1e-3; `extra` flags appended."""
    root, records, config = pretrain_inputs
    return [sys.executable, "-m", "bert_tf.pretrain", f"--bert_config_file={config}",
            f"--input_file={records}", f"--output_dir={output_dir}",
            f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PRED}", "--do_train",
            "--train_batch_size=4", "--learning_rate=1e-3", "--num_warmup_steps=2",
            "--steps_per_loop=1", *extra]


def logged_start(command, log_path, **env):
    """Starts `command` from the repo with `command_env(**env)`, its output into log_path."""
    log = open(log_path, "w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                            env=command_env(**env), cwd=REPO)


def wait_for(condition, process, what, timeout=TIMEOUT):
    """Polls `condition()` until true; fails if the process exits first or on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if process.poll() is not None:
            pytest.fail(f"process exited ({process.returncode}) before {what}")
        time.sleep(0.2)  # polling interval, not a wait for an outcome
    process.kill()
    pytest.fail(f"timed out waiting for {what}")


def latest_step(output_dir):
    """The step of the latest checkpoint in output_dir (0 if none)."""
    latest = tf.train.latest_checkpoint(str(output_dir))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def free_ports(count):
    """`count` TCP ports on 127.0.0.1 free a moment ago (for a cluster's workers)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class LinearModel(keras.Model):
    """y = Wx + b on features {"x": [batch, 2]}."""

    def __init__(self):
        super().__init__(name="linear")
        self.dense = keras.layers.Dense(1, name="dense")
        self.dense.build((None, 2))

    def call(self, features, training=None):
        return {"y": self.dense(features["x"])}


class FakeTpu:
    """Records what the strategy code asks of TPUClusterResolver / TPUStrategy."""

    def __init__(self, cores=8):
        self.calls = []
        self.cores = cores

    def resolver(self, **kwargs):
        self.calls.append(("resolver", kwargs))
        return types.SimpleNamespace(kind="resolver", **kwargs)

    def initializer(self, resolver, remote):
        self.calls.append(("initialize", remote))
        return types.SimpleNamespace(num_tasks=1, num_tpus_per_task=self.cores)

    def strategy(self, resolver, experimental_device_assignment=None):
        self.calls.append(("strategy", experimental_device_assignment))
        return types.SimpleNamespace(kind="strategy", resolver=resolver)

    def factories(self):
        return dict(tpu_resolver_factory=self.resolver, tpu_initializer=self.initializer,
                    tpu_strategy_factory=self.strategy)
