"""tf.data reader of pretraining records (DESIGN 2.2), ours or the original tool's.

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
from typing import Iterable, List, Optional, Sequence, Union

import tensorflow as tf

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


class RecordFormatError(ValueError):
    """A record file that does not hold DESIGN 2.2 pretraining examples of the expected size."""


def list_record_files(file_patterns: Union[str, Sequence[str]]) -> List[str]:
    """Comma-separated globs (or a list of them) -> the sorted matching files.

    Raises FileNotFoundError naming every pattern when nothing matches, and
    RecordFormatError naming a matched directory (a glob like `records/*` must match only
    record files; create_pretraining_data writes nothing else there).

    >>> list_record_files("/nonexistent/*.tfrecord")
    Traceback (most recent call last):
    ...
    FileNotFoundError: no record file matches --input_file=/nonexistent/*.tfrecord; ...
    """
    if isinstance(file_patterns, str):
        file_patterns = [file_patterns]
    patterns = [p.strip() for entry in file_patterns for p in entry.split(",") if p.strip()]
    files = sorted({f for p in patterns for f in tf.io.gfile.glob(p)})
    if not files:
        raise FileNotFoundError(
            f"no record file matches --input_file={','.join(patterns)}; write records with "
            f"`python -m data_prep.create_pretraining_data` or fix the glob")
    for f in files:
        if tf.io.gfile.isdir(f):
            raise RecordFormatError(
                f"{f}: --input_file={','.join(patterns)} matched a directory, not a TFRecord "
                f"file; narrow the glob to the record files")
    return files


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
                f"(DESIGN 2.2) from create_pretraining_data?")
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
                        deterministic: Optional[bool] = None) -> tf.data.Dataset:
    """Batched (features, labels) of per-replica `batch_size` from pretraining records.

    Training: files sharded per input pipeline (records instead when there are fewer
    files than pipelines), shuffled file order, parallel interleave, record shuffle,
    repeat. Evaluation: the files in order, read once. Both drop the last partial
    batch so shapes are static (TPU, XLA).

    `deterministic` defaults to True when `seed` is given (reproducible order) and to
    False otherwise (faster interleave).
    """
    files = list_record_files(file_patterns)
    if check_files:
        for path in files:
            check_record_file(path, max_seq_length, max_predictions_per_seq)
    if deterministic is None:
        deterministic = seed is not None
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0

    dataset = tf.data.Dataset.from_tensor_slices(files)
    shard_records = False
    if num_pipelines > 1:
        if len(files) >= num_pipelines:
            dataset = dataset.shard(num_pipelines, pipeline_id)
        else:
            # Every pipeline reads every file and keeps its own records: correct, slower.
            logging.warning("%d record files for %d input pipelines: sharding by record; "
                            "write at least as many shards as workers", len(files),
                            num_pipelines)
            shard_records = True
    if is_training:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        dataset = dataset.repeat()
    if is_training:
        dataset = dataset.interleave(
            tf.data.TFRecordDataset, cycle_length=min(cycle_length, len(files)),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    else:
        dataset = dataset.flat_map(tf.data.TFRecordDataset)  # files in order, once
    if shard_records:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    if is_training:
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
    dataset = dataset.map(
        lambda r: decode_record(r, max_seq_length, max_predictions_per_seq),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic or not is_training)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    return dataset.prefetch(tf.data.AUTOTUNE)
