"""Damaged pretraining records: a real shard (create_pretraining_data on the original
repo's sample text) with a record damaged in the middle. The reader names the file and
byte offset; --skip_corrupt_records skips it, counted and logged; the checkpoint stays."""

import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf
import yaml
from tensorflow.python.lib.io import tf_record

from bert_tf.data import pretraining
from bert_tf.data import records as data
from data_prep.pretraining_job import run
from data_prep.pretraining_passes import JobConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ, PRED = 32, 5


@pytest.fixture(scope="module")
def shard(shared_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("corrupt")
    cfg = JobConfig(input_file=str(shared_data / "pretrain" / "bert_sample_text.txt"),
                    output_file=str(root / "sample.tfrecord"),
                    vocab_file=str(shared_data / "vocab" / "bert-base-uncased-vocab.txt"),
                    max_seq_length=SEQ, max_predictions_per_seq=PRED, dupe_factor=5,
                    num_workers=0, progress=False)
    summary = run(cfg)
    assert summary["instances"] > 50
    return summary["output_files"][0]


def _records(path):
    """[(start offset, serialized record)] of a sound file."""
    reader, offset, out = tf_record.tf_record_random_reader(path), 0, []
    while True:
        try:
            record, following = reader.read(offset)
        except IndexError:
            return out
        out.append((offset, record))
        offset = following


def _damaged_copy(shard, path, where="data"):
    """A copy of `shard` with its middle record damaged; returns (its start, records)."""
    shutil.copy(shard, path)
    records = _records(shard)
    start, record = records[len(records) // 2]
    position = start + (3 if where == "header" else 12 + len(record) // 2)
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x5A]))
    return start, records


def _data_loss(paths):
    with pytest.raises(tf.errors.DataLossError) as caught:
        for _ in tf.data.TFRecordDataset(paths):
            pass
    return caught.value


@pytest.mark.parametrize("where", ["data", "header"])
def test_locate_names_the_damaged_file_and_record_offset(shard, tmp_path, where):
    good = str(tmp_path / "a.tfrecord")
    shutil.copy(shard, good)
    bad = str(tmp_path / "b.tfrecord")
    start, _ = _damaged_copy(shard, bad, where)
    error = _data_loss([good, bad])
    assert "b.tfrecord" not in error.message  # what TensorFlow says: an offset only
    assert data.locate_data_loss([good, bad], error.message) == (bad, start)
    assert data.first_corrupt_record(bad) == start and data.first_corrupt_record(good) is None


def test_a_file_cut_short_is_located(shard, tmp_path):
    cut = str(tmp_path / "cut.tfrecord")
    records = _records(shard)
    with open(shard, "rb") as f, open(cut, "wb") as out:
        out.write(f.read(records[-3][0] + 20))  # into the third-last record
    error = _data_loss([shard, cut])
    assert data.locate_data_loss([shard, cut], error.message) == (cut, records[-3][0])


def test_copy_sound_records_drops_exactly_the_damaged_record(shard, tmp_path):
    bad = str(tmp_path / "b.tfrecord")
    start, records = _damaged_copy(shard, bad)
    skipped = data.copy_sound_records(bad, str(tmp_path / "copy.tfrecord"))
    assert len(skipped) == 1 and skipped[0][0] == start
    kept = [r for _, r in _records(str(tmp_path / "copy.tfrecord"))]
    assert kept == [r for s, r in records if s != start]


def test_record_files_raise_or_skip(shard, tmp_path):
    bad = str(tmp_path / "b.tfrecord")
    start, records = _damaged_copy(shard, bad)
    strict = data.RecordFiles(bad)
    with pytest.raises(data.CorruptRecordError,
                       match=f"b.tfrecord: damaged record at byte {start} .*"
                             f"--skip_corrupt_records"):
        strict.count_records()
    with pytest.raises(data.CorruptRecordError, match=f"byte {start}"):
        strict.handle_data_loss(_data_loss([bad]))
    lenient = data.RecordFiles(bad, skip_corrupt_records=True)
    assert lenient.count_records() == len(records) - 1
    assert lenient.skipped_records == 1 and lenient.paths() != [bad]
    ds = pretraining.pretraining_dataset(lenient.paths(), SEQ, PRED, 4, is_training=False)
    assert sum(1 for _ in ds) == (len(records) - 1) // 4


def _pretrain(shard_glob, output_dir, steps, *extra):
    config = os.path.join(output_dir + ".yaml")
    with open(config, "w") as f:
        yaml.safe_dump(dict(vocab_size=30522, hidden_size=16, num_hidden_layers=1,
                            num_attention_heads=2, intermediate_size=32,
                            max_position_embeddings=SEQ), f)
    command = [sys.executable, "-m", "bert_tf.pretrain", f"--bert_config_file={config}",
               f"--input_file={shard_glob}", f"--output_dir={output_dir}",
               f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PRED}", "--do_train",
               "--train_batch_size=4", f"--num_train_steps={steps}", "--num_warmup_steps=1",
               "--steps_per_loop=2", "--save_checkpoints_steps=2", *extra]
    env = dict(os.environ, PYTHONPATH=REPO, KERAS_BACKEND="tensorflow",
               CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_pretrain_stops_naming_the_file_then_skips_with_the_flag(shard, tmp_path):
    records_dir = tmp_path / "records"
    records_dir.mkdir()
    path = str(records_dir / "sample.tfrecord")
    shutil.copy(shard, path)
    out = str(tmp_path / "run")
    first = _pretrain(path, out, 2)
    assert first.returncode == 0, first.stderr[-3000:]
    start, _ = _damaged_copy(shard, path)

    stopped = _pretrain(path, out, 6)
    assert stopped.returncode == 1, stopped.stderr[-3000:]
    error = [line for line in stopped.stderr.splitlines() if "error" in line]
    assert error and error[0].startswith(
        f"pretrain: error: {path}: damaged record at byte {start}"), stopped.stderr[-3000:]
    assert "--skip_corrupt_records" in error[0] and "ckpt-2) is intact" in error[0]
    assert "Traceback" not in stopped.stderr
    assert tf.train.latest_checkpoint(out).endswith("ckpt-2")

    skipped = _pretrain(path, out, 6, "--skip_corrupt_records")
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    assert f"{path}: skipped a damaged record at byte {start}" in skipped.stderr
    assert "skipped 1 damaged record(s) while training" in skipped.stderr
    assert tf.train.latest_checkpoint(out).endswith("ckpt-6")
