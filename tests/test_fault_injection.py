"""The kill -9 harness (benchmarks/fault_injection.py) on two commands, small and fast:
create_pretraining_data killed in its tokenize and instances passes (the same output, the
second kill in the resumed run), and convert_checkpoint killed while it builds its output. Kills come at fixed
states of the output (a given work file exists), so every run is the same; after each
kill the same command runs again, and its output must equal an uninterrupted run's, with
every file the user had unchanged and nothing left behind."""

import glob
import os
import random

import pytest

from benchmarks import fault_injection as fi
from tests.helpers import SPECIAL_TOKENS, make_model_dir, write_vocab

WORDS = [f"w{i}" for i in range(300)]
WORK = "records.x.tfrecord.work"


def _write_corpus(path, documents, seed=0):
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(documents):
            for _ in range(rng.randint(8, 20)):
                f.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))) + " .\n")
            f.write("\n")


def _exists(pattern, what):
    def predicate(parent):
        return bool(glob.glob(os.path.join(parent, pattern)))
    predicate.__doc__ = what
    return predicate


def _run(scenario, tmp_path, moments):
    # Every kill on the same output (each rerun killed again until the moments run out):
    # fewer runs, and the later kills hit a resumed run.
    lines = []
    result = fi.run_scenario(scenario, random.Random(0), str(tmp_path / "work"), fi.REPO,
                             moments=moments, say=lines.append, again=1.0)
    return result, "\n".join(lines)


def _cpd(tmp_path, moments, documents=120, dupe_factor=2):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    vocab = write_vocab(inputs / "vocab.txt", SPECIAL_TOKENS + WORDS + ["."])
    corpus = inputs / "corpus.txt"
    _write_corpus(corpus, documents)
    parent = str(tmp_path / "work" / "cpd" / "run")

    def setup(p):
        fi._copy(str(corpus), os.path.join(p, "corpus.txt"))

    # --num_workers=0 (one process) for speed; the benchmark kills a worker pool too.
    scenario = fi.Scenario(
        "cpd", "data_prep.create_pretraining_data",
        [f"--input_file={parent}/corpus.txt", f"--output_file={parent}/records/x.tfrecord",
         f"--vocab_file={vocab}", "--num_workers=0", "--pool_size=4", "--num_output_shards=8",
         f"--dupe_factor={dupe_factor}", "--max_seq_length=64"],
        parent, "records", "records", setup, kills=len(moments), passes=fi.PASS_NAMES,
        shared_inputs=(vocab,), stage=fi.cpd_stage)
    return _run(scenario, tmp_path, moments)


def test_create_pretraining_data_killed_in_two_passes_reruns_to_the_same_records(tmp_path):
    result, log = _cpd(tmp_path, [
        _exists(f"{WORK}/part-000002.docs*", "tokenize: 3 of 30 units done"),
        _exists(f"{WORK}/unit-000002.tfrecords.json", "instances: 3 of 30 units done")])
    assert result.count("kills") == 2 and len(result.trials) == 1, log
    assert result.count("completed") == 1, log
    for what in ("lost", "strays", "mismatches"):
        assert result.count(what) == 0, log
    assert sum(result.hits().values()) == 2, log  # both inside a pass (from the work files)


@pytest.fixture(scope="module")
def killed_convert(tmp_path_factory):
    """bert_tf -> huggingface of a tiny model, killed once while its hidden output dir is
    being filled, then rerun."""
    tmp_path = tmp_path_factory.mktemp("convert")
    model = make_model_dir(tmp_path / "inputs" / "tiny", SPECIAL_TOKENS + WORDS[:40])
    parent = str(tmp_path / "work" / "convert" / "run")
    scenario = fi.Scenario(
        "convert", "bert_tf.convert_checkpoint",
        ["--source_format=bert_tf", "--target_format=huggingface", f"--input={model}",
         f"--output_dir={parent}/hf"],
        parent, "hf", "files", lambda p: None, kills=1, shared_inputs=(model,))
    return _run(scenario, tmp_path, [_exists(".hf.*.tmp", "the hidden output dir exists")])


def test_killed_convert_checkpoint_reruns_to_the_same_files(killed_convert):
    result, log = killed_convert
    assert result.count("kills") == 1, log
    assert result.count("completed") == 1, log
    assert result.count("lost") == 0 and result.count("mismatches") == 0, log


def test_killed_convert_checkpoint_leaves_nothing_behind(killed_convert):
    result, log = killed_convert
    assert result.count("strays") == 0, log
