"""SQuAD EM/F1 as the official v1.1 / v2.0 scripts define them, on hand-computed cases."""

import json
import logging

import pytest

from bert_tf.tasks import squad_metrics as m


@pytest.mark.parametrize("text, expected", [
    ("The Apple", "apple"),
    ("theater and anthem", "theater and anthem"),   # articles only as whole words
    ("An   apple, a day.", "apple day"),
    ("the-end", "theend"),                          # punctuation goes before articles
    ("a.b the", "ab"),
    ("«Paris»", "«paris»"),                         # only ASCII punctuation is removed
    ("Café  MÜLLER", "café müller"),                # no accent stripping
    ("a école", "école"),
    ("aé", "aé"),                                   # \b is unicode-aware: no boundary
    ("\tthe\n", ""),
    ("", ""),
])
def test_normalize_answer(text, expected):
    assert m.normalize_answer(text) == expected


def test_exact_match_and_f1_v1():
    assert m.exact_match_score("The Denver Broncos!", "denver broncos") == 1
    assert m.exact_match_score("Denver", "Denver Broncos") == 0
    # Counter overlap counts multiplicity: pred cat x3, gold cat x2 + dog.
    assert m.f1_score_v1("the the cat cat cat", "cat cat dog") == pytest.approx(2 / 3)
    assert m.f1_score_v1("big red car", "red") == pytest.approx(0.5)   # P 1/3, R 1
    assert m.f1_score_v1("", "red") == 0.0
    assert m.f1_score_v1("the", "a") == 0.0            # both normalize to empty: v1 gives 0
    assert m.exact_match_score("the", "a") == 1


def test_f1_v2_empty_cases():
    assert m.compute_f1("", "") == 1.0
    assert m.compute_f1("", "something") == 0.0
    assert m.compute_f1("something", "") == 0.0
    assert m.compute_f1("the", "a") == 1.0             # both empty after normalization
    assert m.compute_f1("cat cat dog", "the the cat cat cat") == pytest.approx(2 / 3)


def test_evaluate_v1_max_over_golds_and_missing(caplog):
    gold = {"q1": ["Denver Broncos", "The Broncos"], "q2": ["1990s"], "q3": ["x y z w"]}
    preds = {"q1": "broncos", "q2": "1990s."}
    with caplog.at_level(logging.WARNING):
        out = m.evaluate_v1(gold, preds)
    # q1 matches "The Broncos" (EM and F1 1, against "Denver Broncos" only F1 2/3);
    # q2 1 (punctuation); q3 missing: 0.
    assert out["exact_match"] == pytest.approx(100 * 2 / 3)
    assert out["f1"] == pytest.approx(100 * 2 / 3)
    assert "q3" in caplog.text


def test_evaluate_v1_rejects_question_without_gold():
    with pytest.raises(ValueError, match="q9.*version_2_with_negative"):
        m.evaluate_v1({"q9": []}, {"q9": ""})


def _v2_case():
    gold = {"a": ["x"], "b": ["y"], "c": [], "d": []}
    preds = {"a": "x", "b": "y w", "c": "z", "d": ""}
    na_probs = {"a": -3.0, "b": 2.0, "c": 1.5, "d": 0.5}
    return gold, preds, na_probs


def test_evaluate_v2_raw_splits():
    gold, preds, _ = _v2_case()
    out = m.evaluate_v2(gold, preds)
    # raw exact: a 1, b 0, c 0, d 1; F1: a 1, b 2/3, c 0, d 1.
    assert out["exact"] == pytest.approx(50.0)
    assert out["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0 + 1) / 4)
    assert out["total"] == 4
    assert out["HasAns_exact"] == pytest.approx(50.0)
    assert out["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert out["NoAns_exact"] == pytest.approx(50.0)
    assert out["NoAns_total"] == 2
    assert "best_exact" not in out


def test_evaluate_v2_with_null_odds_threshold_and_best():
    gold, preds, na_probs = _v2_case()
    out = m.evaluate_v2(gold, preds, na_probs=na_probs)   # script default threshold 1.0
    # b (2.0) and c (1.5) count as predicted empty: a 1, b 0, c 1, d 1.
    assert out["exact"] == pytest.approx(75.0)
    assert out["NoAns_exact"] == pytest.approx(100.0)
    # Best threshold: start at 2 (the NoAns count); in odds order a +1 -> 3 (best, -3.0),
    # d +0, c -1, b +0 (exact) / +2/3 (F1).
    assert out["best_exact"] == pytest.approx(75.0)
    assert out["best_exact_thresh"] == -3.0
    assert out["best_f1"] == pytest.approx(75.0)
    assert out["best_f1_thresh"] == -3.0


def test_best_threshold_moves_past_a_no_answer():
    # Keeping the high-odds answer pays only after passing a NoAns with an empty pred.
    preds = {"a": "", "b": "x"}
    scores = {"a": 1.0, "b": 1.0}
    probs = {"a": 0.0, "b": 5.0}
    has = {"a": False, "b": True}
    assert m.find_best_threshold(preds, scores, probs, has) == (100.0, 5.0)
    # Never better than all-empty: threshold stays 0.0.
    assert m.find_best_threshold({"a": "z"}, {"a": 0.0}, {"a": 1.0}, {"a": False}) == (100.0, 0.0)


def test_v2_gold_that_normalizes_to_empty_counts_as_no_answer_text():
    out = m.evaluate_v2({"q": ["The"]}, {"q": ""})
    assert out["exact"] == 100.0 and out["f1"] == 100.0


def test_evaluate_files(tmp_path):
    data = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{
        "context": "ctx", "qas": [
            {"id": "a", "question": "?", "answers": [{"text": "x", "answer_start": 0}]},
            {"id": "b", "question": "?", "answers": [], "is_impossible": True}]}]}]}
    (tmp_path / "dev.json").write_text(json.dumps(data))
    (tmp_path / "pred.json").write_text(json.dumps({"a": "x", "b": "y"}))
    (tmp_path / "odds.json").write_text(json.dumps({"a": -1.0, "b": 0.5}))
    with pytest.raises(ValueError, match="question b has no gold"):
        m.evaluate_files(str(tmp_path / "dev.json"), str(tmp_path / "pred.json"))
    out = m.evaluate_files(str(tmp_path / "dev.json"), str(tmp_path / "pred.json"),
                           version_2_with_negative=True,
                           na_prob_file=str(tmp_path / "odds.json"))
    assert out["exact"] == 50.0 and out["best_exact"] == 100.0
    assert out["best_exact_thresh"] == -1.0
