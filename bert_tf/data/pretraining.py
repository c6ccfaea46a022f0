"""tf.data reader of pretraining records (docs/contracts.md §2), ours or the original tool's.

Each element is `(features, labels)`:

    features: input_word_ids, input_mask, input_type_ids   int32 [batch, max_seq_length]
              masked_lm_positions                          int32 [batch, max_predictions]
    labels:   masked_lm_ids                                int32 [batch, max_predictions]
              masked_lm_weights                            float32 [batch, max_predictions]
              next_sentence_labels                         int32 [batch]

The record features `input_ids`/`segment_ids` are renamed to the model's input names;
int64 is cast to int32 (TPUs have no int64 gathers). Batches always have the full
per-replica size (`drop_remainder=True`), so every shape is static.

Example:

>>> ds = pretraining_dataset("records/*.tfrecord", max_seq_length=128,
...                          max_predictions_per_seq=20, batch_size=32,
...                          is_training=True)                  # doctest: +SKIP
>>> features, labels = next(iter(ds))                           # doctest: +SKIP
>>> features["input_word_ids"].shape                            # doctest: +SKIP
TensorShape([32, 128])
"""

from __future__ import annotations

import logging
import random
from typing import Iterable, Optional, Sequence, Union

import tensorflow as tf

from bert_tf.data import position as position_lib
from bert_tf.data.position import InputPosition
from bert_tf.data.records import RecordFormatError, count_records, list_record_files

# record feature -> (model name, length kind, dtype)
_SEQ, _PRED, _ONE = "max_seq_length", "max_predictions_per_seq", "1"
RECORD_FEATURES = {
    "input_ids": ("input_word_ids", _SEQ, tf.int64),
    "input_mask": ("input_mask", _SEQ, tf.int64),
    "segment_ids": ("input_type_ids", _SEQ, tf.int64),
    "masked_lm_positions": ("masked_lm_positions", _PRED, tf.int64),
    "masked_lm_ids": ("masked_lm_ids", _PRED, tf.int64),
    "masked_lm_weights": ("masked_lm_weights", _PRED, tf.float32),
    "next_sentence_labels": ("next_sentence_labels", _ONE, tf.int64),
}
FEATURE_KEYS = ("input_word_ids", "input_mask", "input_type_ids", "masked_lm_positions")
LABEL_KEYS = ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")


def _feature_spec(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    lengths = {_SEQ: max_seq_length, _PRED: max_predictions_per_seq, _ONE: 1}
    return {name: tf.io.FixedLenFeature([lengths[kind]], dtype)
            for name, (_, kind, dtype) in RECORD_FEATURES.items()}


def check_record_file(path: str, max_seq_length: int, max_predictions_per_seq: int) -> None:
    """Reads the first record of `path` and checks every feature's presence, type and length.

    Raises RecordFormatError naming the file, the feature and what to do, e.g. when the
    records were written with another --max_seq_length.
    """
    lengths = {_SEQ: max_seq_length, _PRED: max_predictions_per_seq, _ONE: 1}
    try:
        first = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
    except tf.errors.DataLossError as e:
        reason = e.message.splitlines()[0]
        reason = reason[reason.rfind("}") + 1:].split(" [Op:")[0].strip()
        raise RecordFormatError(
            f"{path}: not a TFRecord file ({reason}); --input_file matched it: narrow the "
            f"glob to the record files (e.g. 'records/name.tfrecord*')") from None
    if first is None:
        size = tf.io.gfile.stat(path).length
        if size:  # a few bytes that do not make even one record header
            raise RecordFormatError(
                f"{path}: not a TFRecord file ({size} bytes, no complete record); "
                f"--input_file matched it: narrow the glob to the record files (e.g. "
                f"'records/name.tfrecord*')")
        logging.warning("%s: holds no records", path)
        return
    example = tf.train.Example()
    try:
        example.ParseFromString(first.numpy())
    except Exception as e:  # protobuf's DecodeError is not exported under one stable name
        raise RecordFormatError(f"{path}: first record is not a tf.train.Example ({e})") from None
    feature = example.features.feature
    for name, (_, kind, dtype) in RECORD_FEATURES.items():
        if name not in feature:
            raise RecordFormatError(
                f"{path}: record lacks feature `{name}`; is it a pretraining record file "
                f"(docs/contracts.md §2) from create_pretraining_data?")
        values = (feature[name].float_list.value if dtype == tf.float32
                  else feature[name].int64_list.value)
        if len(values) != lengths[kind]:
            hint = (f"--{kind}" if kind != _ONE else "a single label")
            raise RecordFormatError(
                f"{path}: feature `{name}` has length {len(values)} but {hint} "
                f"asks for {lengths[kind]}; pass the {kind} the records were written with")


def decode_record(serialized, max_seq_length: int, max_predictions_per_seq: int):
    """One serialized tf.train.Example -> (features, labels) with model names and int32."""
    parsed = tf.io.parse_single_example(
        serialized, _feature_spec(max_seq_length, max_predictions_per_seq))
    out = {}
    for name, (model_name, _, _) in RECORD_FEATURES.items():
        value = parsed[name]
        out[model_name] = tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
    out["next_sentence_labels"] = tf.reshape(out["next_sentence_labels"], [])
    return ({k: out[k] for k in FEATURE_KEYS}, {k: out[k] for k in LABEL_KEYS})


def pretraining_dataset(file_patterns: Union[str, Iterable[str]], max_seq_length: int,
                        max_predictions_per_seq: int, batch_size: int, is_training: bool,
                        input_context: Optional[tf.distribute.InputContext] = None,
                        seed: Optional[int] = None, shuffle_buffer_size: int = 10000,
                        cycle_length: int = 8, check_files: bool = True,
                        deterministic: Optional[bool] = None,
                        position: Optional[InputPosition] = None,
                        records_per_file: Optional[Sequence[int]] = None) -> tf.data.Dataset:
    """Batched (features, labels) of per-replica `batch_size` from pretraining records.

    Training: files sharded per input pipeline (records instead when there are fewer
    files than pipelines), then epoch after epoch (`bert_tf.data.position`): epoch e
    reads the pipeline's files in an order drawn from (seed, e), interleaved
    deterministically, through a record shuffle buffer seeded by (seed, e). The order is
    thus a function of the seed alone, and `position` (the Trainer's `InputPosition`)
    starts the stream where a run stopped at `position.step` left it: whole epochs are
    skipped by arithmetic (`records_per_file`, aligned with the sorted files, else
    counted here), the rest of the epoch by reading past its raw records. Evaluation:
    the files in order, read once. Both drop the last partial batch so shapes are
    static (TPU, XLA).

    `seed` (used without `position`; None: a random one) fixes the order.
    `deterministic` applies to evaluation's decoding only: training is always
    deterministic, as resuming needs.
    """
    files = list_record_files(file_patterns)
    if check_files:
        for path in files:
            check_record_file(path, max_seq_length, max_predictions_per_seq)
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    shard_records = num_pipelines > 1 and len(files) < num_pipelines
    if shard_records:
        # Every pipeline reads every file and keeps its own records: correct, slower.
        logging.warning("%d record files for %d input pipelines: sharding by record; "
                        "write at least as many shards as workers", len(files),
                        num_pipelines)

    def decode(dataset, ordered):
        dataset = dataset.map(
            lambda r: decode_record(r, max_seq_length, max_predictions_per_seq),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=ordered)
        return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    if not is_training:
        dataset = tf.data.Dataset.from_tensor_slices(files)
        if num_pipelines > 1 and not shard_records:
            dataset = dataset.shard(num_pipelines, pipeline_id)
        dataset = dataset.flat_map(tf.data.TFRecordDataset)  # files in order, once
        if shard_records:
            dataset = dataset.shard(num_pipelines, pipeline_id)
        return decode(dataset, True)

    if position is None:
        position = InputPosition(seed if seed is not None else random.randrange(1 << 31))
    mine = list(range(len(files)))
    if num_pipelines > 1 and not shard_records:
        mine = mine[pipeline_id::num_pipelines]
    names = tf.constant([files[i] for i in mine])
    def one_epoch(epoch):
        order = tf.random.experimental.stateless_shuffle(
            names, seed=tf.stack([tf.constant(position.seed, tf.int64), epoch]))
        dataset = tf.data.Dataset.from_tensor_slices(order).interleave(
            tf.data.TFRecordDataset, cycle_length=min(cycle_length, len(mine)),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        if shard_records:
            dataset = dataset.shard(num_pipelines, pipeline_id)
        return position_lib.shuffle(dataset, shuffle_buffer_size, position.seed, epoch)

    start = position.batches(input_context) * batch_size
    epoch_size = None
    if start:
        counts = (list(records_per_file) if records_per_file is not None
                  else [count_records(f) for f in files])
        epoch_size = sum(counts[i] for i in mine)
        if shard_records:  # records pipeline_id, pipeline_id + P, ... of the epoch
            epoch_size = max(0, (epoch_size - pipeline_id + num_pipelines - 1)
                             // num_pipelines)
        if epoch_size == 0:
            raise RecordFormatError(f"input pipeline {pipeline_id} has no records in "
                                    f"{','.join(files[i] for i in mine)}")
    return decode(position_lib.epochs(one_epoch, start, epoch_size), True)
