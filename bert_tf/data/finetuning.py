"""tf.data for fine-tuning: task TFRecords (TPU runs) and in-memory features (small runs).

Both yield `(features, labels)` as the training loop wants them: features are the
model inputs `input_word_ids`, `input_mask`, `input_type_ids` (int32), labels the task's
`label_names` (int32, or float32 for regression).

Records are written by `write_split_records` (for `data_prep.create_finetuning_data`) with
the original run_classifier's feature names (`input_ids`, `input_mask`, `segment_ids`,
`label_ids`), so its GLUE records read here too; shapes and dtypes come from
`Task.feature_spec()` (multiple choice records hold [choices * max_seq_length] flat,
reshaped on read).

>>> import numpy as np, os, tempfile
>>> spec = {"input_word_ids": ([4], "int64"), "input_mask": ([4], "int64"),
...         "input_type_ids": ([4], "int64"), "label_ids": ([], "int64")}
>>> feats = {"input_word_ids": np.array([[101, 7, 102, 0]] * 3, "int32"),
...          "input_mask": np.array([[1, 1, 1, 0]] * 3, "int32"),
...          "input_type_ids": np.zeros((3, 4), "int32"), "label_ids": np.array([0, 1, 1])}
>>> path = os.path.join(tempfile.mkdtemp(), "train.tf_record")
>>> write_records(path, feats, spec)
3
>>> x, y = next(iter(record_dataset(path, spec, batch_size=2, is_training=False)))
>>> x["input_word_ids"].numpy().tolist(), y["label_ids"].numpy().tolist()
([[101, 7, 102, 0], [101, 7, 102, 0]], [0, 1])
"""

from __future__ import annotations

import json
import os
import random
from typing import List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.core import output_guard
from bert_tf.core.constants import MODEL_INPUTS
from bert_tf.data import position as position_lib
from bert_tf.data.position import InputPosition
from bert_tf.data.records import count_records, list_record_files

# model name -> record name (the original run_classifier's)
RECORD_NAMES = {"input_word_ids": "input_ids", "input_mask": "input_mask",
                "input_type_ids": "segment_ids"}

Spec = Mapping[str, Tuple[Sequence[int], str]]


def _record_name(name: str) -> str:
    return RECORD_NAMES.get(name, name)


def write_records(path: str, features: Mapping[str, np.ndarray], spec: Spec) -> int:
    """Writes one tf.train.Example per row of `features` (only the keys in `spec`)."""
    missing = [k for k in spec if k not in features]
    if missing:
        raise ValueError(f"{path}: features lack {missing} (spec {sorted(spec)}); test "
                         f"splits without labels are not written as training records")
    count = len(features[next(iter(spec))])
    # The file appears whole or not at all.
    with output_guard.atomic_file(path) as tmp, tf.io.TFRecordWriter(tmp) as writer:
        for i in range(count):
            record = {}
            for name, (_, dtype) in spec.items():
                values = np.asarray(features[name][i]).reshape(-1)
                if dtype.startswith("float"):
                    record[_record_name(name)] = tf.train.Feature(
                        float_list=tf.train.FloatList(value=values.astype(np.float32)))
                else:
                    record[_record_name(name)] = tf.train.Feature(
                        int64_list=tf.train.Int64List(value=values.astype(np.int64)))
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=record)).SerializeToString())
    return count


def split_record_paths(output_dir: str, split: str, shards: int) -> List[str]:
    """The record files of one split: `split.tf_record`, or `split-0000i-of-0000N.tf_record`.

    >>> split_record_paths("out", "train", 2)
    ['out/train-00000-of-00002.tf_record', 'out/train-00001-of-00002.tf_record']
    """
    if shards == 1:
        return [os.path.join(output_dir, f"{split}.tf_record")]
    return [os.path.join(output_dir, f"{split}-{i:05d}-of-{shards:05d}.tf_record")
            for i in range(shards)]


def write_split_records(task, split: str, output_dir: str, shards: int, num_examples: int,
                        features: Mapping[str, np.ndarray]) -> dict:
    """Writes one split's features (`task.convert_examples`) as records + `split.meta.json`
    (each file whole: `output_guard`), removes the shards an earlier run's meta named that
    this one does not; returns the meta dict."""
    spec = task.feature_spec()
    count = len(features["input_word_ids"])
    paths = split_record_paths(output_dir, split, shards)
    meta_file = os.path.join(output_dir, f"{split}.meta.json")
    earlier = _meta_files(meta_file)  # an earlier run's shards of this split
    # Contiguous row ranges per shard keep the files deterministic; the reader shuffles.
    bounds = np.linspace(0, count, len(paths) + 1).astype(int)
    for path, lo, hi in zip(paths, bounds[:-1], bounds[1:]):
        write_records(path, {k: v[lo:hi] for k, v in features.items() if k in spec}, spec)
    meta = {"task_config": task.task_config(), "split": split,
            "num_examples": num_examples, "num_features": count,
            "files": [os.path.basename(p) for p in paths],
            "feature_spec": {k: [list(shape), dtype] for k, (shape, dtype) in spec.items()}}
    output_guard.write_json(meta_file, meta, sort_keys=False)
    for name in set(earlier) - set(meta["files"]):  # its surplus shards, named by its meta
        surplus = os.path.join(output_dir, name)
        if tf.io.gfile.exists(surplus):
            tf.io.gfile.remove(surplus)
    logging.info("%s %s: %d examples -> %d features in %d file(s) under %s", task.name, split,
                 num_examples, count, len(paths), output_dir)
    return meta


def _meta_files(meta_file: str) -> List[str]:
    if not tf.io.gfile.exists(meta_file):
        return []
    try:
        with tf.io.gfile.GFile(meta_file) as f:
            files = json.load(f).get("files", [])
    except (ValueError, AttributeError):
        return []
    return [name for name in files if isinstance(name, str) and "/" not in name]


def _parse_fn(spec: Spec):
    description = {}
    for name, (shape, dtype) in spec.items():
        size = int(np.prod(shape)) if len(shape) else 1
        description[_record_name(name)] = tf.io.FixedLenFeature(
            [size], tf.float32 if dtype.startswith("float") else tf.int64)

    def parse(serialized):
        parsed = tf.io.parse_single_example(serialized, description)
        features, labels = {}, {}
        for name, (shape, dtype) in spec.items():
            value = tf.reshape(parsed[_record_name(name)], list(shape))
            # int64 -> int32: TPUs have no int64 gathers
            value = tf.cast(value, tf.float32 if dtype.startswith("float") else tf.int32)
            (features if name in MODEL_INPUTS else labels)[name] = value
        return features, labels

    return parse


def batch_bucket_lengths(max_seq_length: int, compiled: bool = True) -> Tuple[int, ...]:
    """The few fixed sequence lengths training and prediction batches are cut to (length
    bucketing; finetune's, off on TPUs). Serving cuts raw text to the longest row of each
    request instead (`serving.cut_to_longest`).

    `compiled` (XLA: one compilation per length): multiples of max(16, max_seq_length / 8)
    (rounded up to 8), at most 8 lengths. Not compiled (TF's kernels take any length at
    no extra cost): multiples of max(8, max_seq_length / 16) (rounded up to 8), at most 16
    lengths, so batches carry less padding (SST-2 at 64: 16.6 tokens per row instead of
    21.3, against 13.2 real ones).

    >>> batch_bucket_lengths(128), batch_bucket_lengths(64), batch_bucket_lengths(384)
    ((16, 32, 48, 64, 80, 96, 112, 128), (16, 32, 48, 64), (48, 96, 144, 192, 240, 288, 336, 384))
    >>> batch_bucket_lengths(64, compiled=False)
    (8, 16, 24, 32, 40, 48, 56, 64)
    >>> batch_bucket_lengths(10)
    (10,)
    """
    max_buckets, min_step = (8, 16) if compiled else (16, 8)
    per_bucket = -(-max_seq_length // max_buckets)
    step = max(min_step, -(-per_bucket // 8) * 8)
    return tuple(range(step, max_seq_length, step)) + (int(max_seq_length),)


def _sequence_cutter(element_spec):
    """`cut(features, labels, length)`: the model inputs, and the labels that have a
    sequence axis (per-token tags), cut to `length` along their last axis; for the
    `(features, labels)` elements of `element_spec` (rows or batches)."""
    features_spec, labels_spec = element_spec
    seq = features_spec["input_mask"].shape[-1]
    rank = features_spec["input_mask"].shape.rank

    def has_sequence_axis(spec):
        return spec.shape.rank == rank and spec.shape[-1] == seq

    def cut(features, labels, length):
        cut_tree = lambda tree, specs: {
            k: (v[..., :length] if has_sequence_axis(specs[k]) else v) for k, v in tree.items()}
        return cut_tree(features, features_spec), cut_tree(labels, labels_spec)

    return cut


def _bucket_bounds(element_spec, lengths: Sequence[int]) -> tf.Tensor:
    """`lengths` sorted, with the sequence length appended when they stop short of it."""
    seq = element_spec[0]["input_mask"].shape[-1]
    lengths = sorted(int(n) for n in lengths)
    if lengths[-1] < seq:
        lengths.append(int(seq))
    return tf.constant(lengths, tf.int64)


def _bucket_of_longest(bounds, features):
    """Index in `bounds` of the shortest length holding every row (and choice) of
    `features`' input_mask."""
    length = tf.reduce_max(tf.reduce_sum(tf.cast(features["input_mask"], tf.int64), -1))
    return tf.reduce_sum(tf.cast(bounds < length, tf.int64))


def bucket_by_length(dataset: tf.data.Dataset, batch_size: int,
                     lengths: Sequence[int]) -> tf.data.Dataset:
    """Unbatched `(features, labels)` -> batches of rows of similar length (training).

    Each row goes to the shortest bucket of `lengths` that holds its `input_mask`
    (for multiple choice: its longest choice); a bucket's batch is emitted when it has
    `batch_size` rows, cut to the bucket's length along the sequence axis (the last axis
    of the model inputs, and of the labels that have one: per-token tags). Padding
    beyond a row's mask changes nothing in the model's outputs for that row (keys are
    masked), so this only removes work. Batches are [batch_size, ..., bucket length]:
    a fixed batch size and one of a few sequence lengths (the step is compiled once
    per length under XLA). Rows of one length end up together: for rows that share a
    text (SQuAD's questions on one paragraph) use `cut_to_bucket` on random batches.

    >>> import numpy as np
    >>> mask = np.array([[1, 1, 0, 0, 0, 0, 0, 0]] * 2 + [[1] * 8] * 2, "int32")
    >>> rows = tf.data.Dataset.from_tensor_slices(({"input_mask": mask}, {}))
    >>> [x["input_mask"].shape.as_list() for x, _ in bucket_by_length(rows, 2, (4, 8))]
    [[2, 4], [2, 8]]
    """
    bounds = _bucket_bounds(dataset.element_spec, lengths)
    cut = _sequence_cutter(dataset.element_spec)

    def batches(key, window):
        length = tf.gather(bounds, key)
        return window.batch(batch_size, drop_remainder=True).map(
            lambda f, l: cut(f, l, length))

    dataset = dataset.group_by_window(lambda f, l: _bucket_of_longest(bounds, f), batches,
                                      window_size=batch_size)

    def static_batch(features, labels):  # group_by_window forgets the batch size
        fix = lambda t: tf.ensure_shape(t, [batch_size] + [None] * (t.shape.rank - 1))
        return tf.nest.map_structure(fix, (features, labels))

    return dataset.map(static_batch)


def cut_to_bucket(batches: tf.data.Dataset, lengths: Sequence[int]) -> tf.data.Dataset:
    """Batches of `(features, labels)` -> each cut to the shortest of `lengths` that holds
    its longest row, along the sequence axis (as `bucket_by_length` cuts).

    The batches keep their rows (random ones, in training): for rows that share a text,
    such as SQuAD's windows (the questions on one paragraph have windows of about one
    length), where grouping rows by length would fill a batch with a few paragraphs.
    The reference pipelines batch these at random too, padded to the longest row.

    >>> import numpy as np
    >>> mask = np.array([[1, 1, 0, 0, 0, 0, 0, 0], [1] * 3 + [0] * 5], "int32")
    >>> rows = tf.data.Dataset.from_tensor_slices(({"input_mask": mask}, {}))
    >>> [x["input_mask"].shape.as_list() for x, _ in cut_to_bucket(rows.batch(2), (4, 8))]
    [[2, 4]]
    """
    bounds = _bucket_bounds(batches.element_spec, lengths)
    cut = _sequence_cutter(batches.element_spec)
    return batches.map(lambda f, l: cut(f, l, tf.gather(bounds, _bucket_of_longest(bounds, f))))


def _training_stream(one_epoch, epoch_size: int, batch_size: int, parse,
                     length_buckets, position: InputPosition, input_context,
                     group_by_length: bool = True):
    """Epochs of `one_epoch(e)` (raw elements), parsed (`parse`, None: they are rows
    already) and batched, starting where `position` says: before parsing, by
    arithmetic (`position.epochs`); with length buckets grouping rows by length
    (`bucket_by_length`), whose batches depend on the rows before them, by skipping
    batches. `group_by_length=False`: batches of rows in their shuffled order, each cut
    to its bucket (`cut_to_bucket`)."""
    skip = position.batches(input_context)
    if epoch_size == 0:
        raise ValueError("this input pipeline has no training rows")
    parsed = lambda dataset: (dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
                              if parse else dataset)
    if length_buckets and group_by_length:
        dataset = bucket_by_length(parsed(position_lib.epochs(one_epoch)), batch_size,
                                   length_buckets)
        return dataset.skip(skip) if skip else dataset
    dataset = parsed(position_lib.epochs(one_epoch, skip * batch_size, epoch_size))
    dataset = dataset.batch(batch_size, drop_remainder=True)
    return cut_to_bucket(dataset, length_buckets) if length_buckets else dataset


def _rows_of_pipeline(rows: int, pipelines: int, pipeline_id: int) -> int:
    """How many of `rows` `Dataset.shard(pipelines, pipeline_id)` keeps."""
    return max(0, (rows - pipeline_id + pipelines - 1) // pipelines)


def record_dataset(file_patterns, spec: Spec, batch_size: int, is_training: bool,
                   input_context: Optional[tf.distribute.InputContext] = None,
                   seed: Optional[int] = None, shuffle_buffer: int = 10000,
                   length_buckets: Optional[Sequence[int]] = None,
                   position: Optional[InputPosition] = None,
                   records_per_file: Optional[Sequence[int]] = None,
                   group_by_length: bool = True) -> tf.data.Dataset:
    """Task records -> batches of `(features, labels)`; static shapes (drop_remainder)
    when training, every record once otherwise. With `length_buckets` (training), rows
    are batched by length (`bucket_by_length`), or with `group_by_length=False` batched
    in their shuffled order and each batch cut to its bucket (`cut_to_bucket`).

    Training reads epoch after epoch, epoch e shuffled by a seed drawn from (seed, e)
    (`bert_tf.data.position`), from where `position` (the Trainer's `InputPosition`; else
    the start, with `seed`) says; `records_per_file` (aligned with the sorted files,
    else counted here) is the epoch size that positioning needs."""
    files = list_record_files(file_patterns)
    pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    # By file when every pipeline gets one; else by record (every pipeline reads every
    # file and keeps its share), so no worker is left without data.
    by_file = len(files) >= pipelines
    mine = list(range(len(files)))
    if pipelines > 1 and by_file:
        mine = mine[pipeline_id::pipelines]

    def read(dataset):
        dataset = dataset.interleave(tf.data.TFRecordDataset,
                                     cycle_length=min(len(mine), 8))
        if pipelines > 1 and not by_file:
            dataset = dataset.shard(pipelines, pipeline_id)
        return dataset

    names = [files[i] for i in mine]
    if not is_training:
        dataset = read(tf.data.Dataset.from_tensor_slices(names)).map(
            _parse_fn(spec), num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    if position is None:
        position = InputPosition(seed if seed is not None else random.randrange(1 << 31))

    def one_epoch(epoch):
        return position_lib.shuffle(read(tf.data.Dataset.from_tensor_slices(names)),
                                    shuffle_buffer, position.seed, epoch)

    epoch_size = None
    if position.step:
        counts = (list(records_per_file) if records_per_file is not None
                  else [count_records(f) for f in files])
        epoch_size = sum(counts[i] for i in mine)
        if pipelines > 1 and not by_file:
            epoch_size = _rows_of_pipeline(epoch_size, pipelines, pipeline_id)
    return _training_stream(one_epoch, epoch_size, batch_size, _parse_fn(spec),
                            length_buckets, position, input_context, group_by_length
                            ).prefetch(tf.data.AUTOTUNE)


def array_dataset(features: Mapping[str, np.ndarray], label_names: Sequence[str],
                  batch_size: int, is_training: bool,
                  input_context: Optional[tf.distribute.InputContext] = None,
                  seed: Optional[int] = None,
                  length_buckets: Optional[Sequence[int]] = None,
                  position: Optional[InputPosition] = None,
                  group_by_length: bool = True) -> tf.data.Dataset:
    """In-memory features (Task.convert_examples) -> batches of `(features, labels)`.

    Training shuffles all rows each epoch, epoch e with a seed drawn from (seed, e), and
    goes on without end, batched by length with `length_buckets` (`bucket_by_length`;
    with `group_by_length=False` in the shuffled order, each batch cut to its bucket),
    from where `position` (the Trainer's `InputPosition`; else the start, with `seed`)
    says; evaluation keeps order.
    """
    inputs = {k: np.asarray(features[k], np.int32) for k in MODEL_INPUTS}
    labels = {k: features[k] for k in label_names if k in features}
    dataset = tf.data.Dataset.from_tensor_slices((inputs, labels))
    pipelines = input_context.num_input_pipelines if input_context else 1
    if pipelines > 1:
        dataset = dataset.shard(pipelines, input_context.input_pipeline_id)
    if is_training:
        if position is None:
            position = InputPosition(seed if seed is not None else
                                     random.randrange(1 << 31))
        rows = len(inputs["input_word_ids"])
        if pipelines > 1:
            rows = _rows_of_pipeline(rows, pipelines, input_context.input_pipeline_id)
        rows_dataset = dataset

        def one_epoch(epoch):
            return position_lib.shuffle(rows_dataset, rows, position.seed, epoch)

        dataset = _training_stream(one_epoch, rows, batch_size, None,
                                   length_buckets, position, input_context, group_by_length)
    else:
        dataset = dataset.batch(batch_size)
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    # No tf.data autotuning model for rows already in memory: its background thread
    # sleeps for up to a minute between optimisations, and deleting the iterator at the
    # end of training waited for it (0-90 s after the last step of a 1-minute fine-tune).
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)
