"""The pretraining record reader (bert_tf/data/pretraining.py)."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import pretraining as data
from tests.helpers.training import PRED, SEQ, write_records


def test_batches_have_static_shapes_model_names_and_int32(tmp_path):
    path = write_records(tmp_path / "a.tfrecord", 10)
    ds = data.pretraining_dataset(path, SEQ, PRED, batch_size=4, is_training=True, seed=1)
    features, labels = ds.element_spec
    assert set(features) == {"input_word_ids", "input_mask", "input_type_ids",
                             "masked_lm_positions"}
    assert set(labels) == {"masked_lm_ids", "masked_lm_weights", "next_sentence_labels"}
    for spec in tf.nest.flatten(ds.element_spec):
        assert spec.shape.is_fully_defined()
    assert features["input_word_ids"].shape == (4, SEQ)
    assert labels["next_sentence_labels"].shape == (4,)
    assert features["input_mask"].dtype == tf.int32
    assert labels["masked_lm_weights"].dtype == tf.float32
    # training repeats forever
    assert len(list(ds.take(7))) == 7


def test_eval_reads_records_once_in_order_dropping_the_remainder(tmp_path):
    path = write_records(tmp_path / "a.tfrecord", 10)
    ds = data.pretraining_dataset(path, SEQ, PRED, batch_size=4, is_training=False)
    batches = list(ds)
    assert len(batches) == 2
    raw = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(path)]
    first_ids = list(raw[0].features.feature["input_ids"].int64_list.value)
    assert batches[0][0]["input_word_ids"].numpy()[0].tolist() == first_ids
    label = raw[5].features.feature["next_sentence_labels"].int64_list.value[0]
    assert batches[1][1]["next_sentence_labels"].numpy()[1] == label


def test_file_level_sharding_gives_disjoint_pipelines(tmp_path):
    for i in range(4):
        write_records(tmp_path / f"part-{i}.tfrecord", 3, seed=i)
    seen = []
    for pipeline in range(2):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline,
                                         num_replicas_in_sync=2)
        ds = data.pretraining_dataset(str(tmp_path / "part-*.tfrecord"), SEQ, PRED,
                                      batch_size=1, is_training=False, input_context=ctx)
        seen.append({tuple(f["input_word_ids"].numpy()[0]) for f, _ in ds})
    assert len(seen[0]) == len(seen[1]) == 6
    assert not seen[0] & seen[1]


def test_fewer_files_than_pipelines_shards_records(tmp_path):
    path = write_records(tmp_path / "only.tfrecord", 8)
    counts = []
    for pipeline in range(2):
        ctx = tf.distribute.InputContext(2, pipeline, 2)
        ds = data.pretraining_dataset(path, SEQ, PRED, batch_size=1, is_training=False,
                                      input_context=ctx)
        counts.append(len(list(ds)))
    assert counts == [4, 4]


def test_comma_separated_globs(tmp_path):
    a = write_records(tmp_path / "a.tfrecord", 2)
    b = write_records(tmp_path / "b.tfrecord", 2)
    assert data.list_record_files(f"{a}, {tmp_path}/b*") == [a, b]


def test_no_matching_file_is_an_error_naming_the_pattern(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nothing-\*\.tfrecord"):
        data.pretraining_dataset(str(tmp_path / "nothing-*.tfrecord"), SEQ, PRED, 2, True)


def test_missing_feature_names_feature_and_file(tmp_path):
    path = write_records(tmp_path / "bad.tfrecord", 2, drop="masked_lm_weights")
    with pytest.raises(data.RecordFormatError, match=r"bad\.tfrecord.*masked_lm_weights"):
        data.pretraining_dataset(path, SEQ, PRED, 2, True)


def test_wrong_length_names_feature_file_and_flag(tmp_path):
    path = write_records(tmp_path / "long.tfrecord", 2, seq=32)
    with pytest.raises(data.RecordFormatError,
                       match=r"long\.tfrecord: feature `input_ids` has length 32 but "
                             r"--max_seq_length asks for 16"):
        data.pretraining_dataset(path, SEQ, PRED, 2, True)


def test_not_a_record_file(tmp_path):
    path = tmp_path / "junk.tfrecord"
    path.write_bytes(b"this is not a tfrecord file at all" * 10)
    with pytest.raises(data.RecordFormatError, match="junk.tfrecord"):
        data.pretraining_dataset(str(path), SEQ, PRED, 2, True)


def test_records_with_the_original_feature_spec_parse(tmp_path):
    """Ours parse with the original run_pretraining reader's spec, and vice versa."""
    path = write_records(tmp_path / "a.tfrecord", 3)
    original_spec = {
        "input_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
        "input_mask": tf.io.FixedLenFeature([SEQ], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([PRED], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([PRED], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([PRED], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }
    for record in tf.data.TFRecordDataset(path):
        parsed = tf.io.parse_single_example(record, original_spec)
        features, labels = data.decode_record(record, SEQ, PRED)
        np.testing.assert_array_equal(parsed["segment_ids"], features["input_type_ids"])
        np.testing.assert_array_equal(parsed["masked_lm_weights"], labels["masked_lm_weights"])
