"""data_prep.beam_pipeline on DirectRunner: the same records as the local job."""

import glob
import os

import pytest

pytest.importorskip("apache_beam")

import tensorflow as tf  # noqa: E402

from data_prep import beam_pipeline  # noqa: E402
from data_prep import pretraining_job, pretraining_passes  # noqa: E402
from tests.helpers.pretraining_oracle import first_docs  # noqa: E402


def _corpus(tmp_path, shared_data, docs):
    with open(shared_data / "pretrain" / "enwiki_2015_bert_format.txt", encoding="utf-8") as f:
        out = first_docs(f, docs)
    path = tmp_path / "corpus.txt"
    path.write_text("".join(out), encoding="utf-8")
    return str(path)


def _records(paths):
    return [r.numpy() for r in tf.data.TFRecordDataset(sorted(paths))]


def test_parse_args_passes_beam_options_through():
    cfg, rest = beam_pipeline.parse_args([
        "--input_file=a", "--output_file=b", "--vocab_file=v", "--nodo_lower_case",
        "--dupe_factor=3", "--runner=FlinkRunner", "--flink_master=host:8081", "--strict"])
    assert (cfg.do_lower_case, cfg.dupe_factor, cfg.strict) == (False, 3, True)
    assert rest == ["--runner=FlinkRunner", "--flink_master=host:8081"]
    _, rest = beam_pipeline.parse_args(["--input_file=a", "--output_file=b", "--vocab_file=v"])
    assert rest == ["--runner=DirectRunner"]


def test_direct_runner_writes_the_local_jobs_records(tmp_path, shared_data):
    """Several work units (random-next documents from the whole corpus store), three shards:
    the same records as the local job, globally shuffled by the runner; nothing but the
    shards in the output directory, the summary beside it."""
    src = _corpus(tmp_path, shared_data, 8)
    vocab = str(shared_data / "vocab" / "bert-base-uncased-vocab.txt")
    common = [f"--input_file={src}", f"--vocab_file={vocab}", "--dupe_factor=2",
              "--pool_size=3", "--num_output_shards=3", "--random_seed=99",
              "--max_seq_length=64", "--max_predictions_per_seq=10"]
    beam_out = tmp_path / "beam" / "p.tfrecord"
    mine = tmp_path / "mine"  # a folder of the user's as --work_dir keeps its files
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    summary = beam_pipeline.run(common + [f"--output_file={beam_out}", f"--work_dir={mine}",
                                          "--direct_num_workers=1"])
    assert os.listdir(mine) == ["notes.txt"] and (mine / "notes.txt").read_text() == "my notes"
    beam_files = sorted(glob.glob(str(tmp_path / "beam" / "*")))
    assert [os.path.basename(f) for f in beam_files] == [
        f"p.tfrecord-0000{s}-of-00003" for s in range(3)]

    local = pretraining_job.run(pretraining_passes.JobConfig(
        input_file=src, output_file=str(tmp_path / "local" / "p.tfrecord"), vocab_file=vocab,
        dupe_factor=2, pool_size=3, num_output_shards=3, random_seed=99, max_seq_length=64,
        max_predictions_per_seq=10, num_workers=0, progress=False))
    assert local["work_units"] == 3
    beam_records = _records(beam_files)
    local_records = _records(local["output_files"])
    assert len(local_records) == local["instances"] > 50
    assert sorted(beam_records) == sorted(local_records)
    # The runner's shuffle: not the local job's order, and every shard draws from every unit.
    assert beam_records != local_records
    for f in beam_files:
        assert 0 < len(_records([f])) < len(local_records)
    assert summary is not None  # DirectRunner reports its counters
    assert summary["instances"] == local["instances"]
    assert summary["masked_tokens"] == local["masked_tokens"]
    assert summary["documents"] == local["documents"]
    assert os.path.exists(pretraining_job.default_summary_path(str(beam_out)))
    assert not os.path.exists(pretraining_job.default_work_dir(str(beam_out)))
