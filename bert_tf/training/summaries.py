"""What a training run reports: a console line per loop or evaluation and TensorBoard
scalars under OUTPUT_DIR/train and OUTPUT_DIR/eval (`bert_tf.training.loop.Trainer`).

>>> import tempfile
>>> summaries = Summaries(tempfile.mkdtemp(), enabled=True)
>>> summaries.write("train", {"loss": 2.5}, step=10)
>>> format_values({"loss": 2.5, "accuracy": 0.123456})
'loss 2.5 accuracy 0.1235'
>>> summaries.flush()
"""

from __future__ import annotations

import os
from typing import Dict, Mapping

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))


def format_values(values: Mapping[str, float]) -> str:
    """`name value` pairs, four significant digits: the log lines' format."""
    return " ".join(f"{k} {v:.4g}" for k, v in values.items())


class Summaries:
    """One scalar summary writer per kind ("train", "eval") under `output_dir`, made
    when first written; `enabled` False (no --write_summaries, a non-chief worker):
    log lines only."""

    def __init__(self, output_dir: str, *, enabled: bool):
        self.output_dir = output_dir
        self.enabled = enabled
        self._writers: Dict[str, tf.summary.SummaryWriter] = {}

    def write(self, kind: str, values: Mapping[str, float], step: int) -> None:
        if not self.enabled:
            return
        if kind not in self._writers:
            self._writers[kind] = tf.summary.create_file_writer(
                os.path.join(self.output_dir, kind))
        with self._writers[kind].as_default():
            for name, value in values.items():
                # tf.summary.write with the scalar plugin's metadata is what
                # tf.summary.scalar writes, without needing the tensorboard package.
                tf.summary.write(name, tf.constant(value, tf.float32), step=step,
                                 metadata=_SCALAR_METADATA)

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()
