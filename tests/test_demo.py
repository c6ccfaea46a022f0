"""`make demo` (demo/run_demo.py) end to end.

The default test runs `python -m demo.run_demo --fast` as `make demo` runs the demo (a
process, every step, tiny amounts of training: about 2 minutes on 2 cores) and checks that
every step ran and produced its files, and that the fresh serving process printed one
classification per raw sentence. With BERT_TF_FULL_DEMO=1 the full demo runs instead
(as `make demo` runs it: about 100 s once set up) and its dev accuracy and raw-sentence
classifications are checked too. The Korean demo's test is test_demo_korean.py (its own
file, so that the two demos can run in the suite's two processes at once).
"""

import os

import pytest

from demo import run_demo
from tests.helpers import run_demo_process

FULL = os.environ.get("BERT_TF_FULL_DEMO") == "1"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "demo_output"
    stdout, summary = run_demo_process(str(out), fast=not FULL)
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
