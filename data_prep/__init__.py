"""Offline data jobs for bert_tf (docs/contracts.md §2, §3).

- `pretraining_instances`: the original create_pretraining_data algorithm as pure functions
  over token-id lists with an explicit `random.Random`.
- `corpus`: streaming reader of the one-sentence-per-line corpus format, split into
  deterministic work units.
- `tfrecord_writer`: fast hand-encoded `tf.train.Example` bytes and atomic shard files.
- `create_pretraining_data`: the absl command line (`python -m data_prep.create_pretraining_data`).
- `beam_pipeline`: the same per-unit functions as an Apache Beam pipeline.

Nothing here imports TensorFlow at import time, so the command line starts quickly; only the
worker processes that tokenize load it.
"""
