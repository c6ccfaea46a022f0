"""`make demo-korean` (`python -m demo.run_demo --korean`) end to end, with --fast as
test_demo.py runs the English demo: every step ran, the vocab keeps Hangul whole (and the
model dir records it), and the fresh serving process labelled every raw Korean sentence."""

import importlib.util
import json

import pytest

from demo import run_demo
from tests.helpers import run_demo_process


@pytest.fixture(scope="module")
def korean_demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo_korean") / "demo_output_korean"
    stdout, summary = run_demo_process(str(out), fast=True, korean=True)
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
