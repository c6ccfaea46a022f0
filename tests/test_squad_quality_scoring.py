"""The SQuAD v2.0 diagnostics of benchmarks/squad_quality.py, with the official
evaluate-v2.0.py from ../shared/data/squad, on a hand-made test set whose figures are
worked out below."""

import pytest

from benchmarks import squad_quality


def _articles(questions):
    return [{"title": "t", "paragraphs": [{"context": "c", "qas": [
        {"id": qid, "question": "q?", "answers": [{"text": t, "answer_start": 0}] if t else [],
         "is_impossible": not t} for qid, t in questions]}]}]


def test_v2_diagnostics_split_reading_from_abstaining(shared_data):
    ev = squad_quality._load_script("evaluate-v2.0.py", str(shared_data / "squad"))
    test = _articles([("a1", "red fox"), ("a2", "blue sky"), ("u1", ""), ("u2", "")])
    has_ans = ev.make_qid_to_has_ans(test)
    best_text = {"a1": "the red fox", "a2": "green", "u1": "x", "u2": "y"}
    # Null odds: u1 above both answerable questions, u2 between them.
    null_odds = {"a1": -2.0, "a2": 1.0, "u1": 3.0, "u2": 0.0}
    result = squad_quality._v2_diagnostics(ev, test, has_ans, best_text, null_odds)
    # a1's span matches ("the" is dropped by the official normalization), a2's does not.
    assert result["HasAns_best_span_f1"] == pytest.approx(50.0)
    # u1 beats both answerable questions, u2 beats one of two: 3 of 4 pairs.
    assert result["null_odds_auc"] == pytest.approx(0.75)
    # Best on the test set itself: answer a1 only (threshold -2): 1 + 0 + 1 + 1 of 4.
    assert result["oracle_f1"] == pytest.approx(75.0)


def test_v2_tune_and_test_take_alternate_paragraphs_of_the_same_articles():
    articles = [{"title": f"a{i}", "paragraphs": [{"context": f"a{i}p{j}", "qas": []}
                                                  for j in range(6)]} for i in range(3)]
    tune, test = squad_quality._alternate_paragraphs(articles)
    contexts = [{p["context"] for a in half for p in a["paragraphs"]} for half in (tune, test)]
    assert not contexts[0] & contexts[1]
    assert len(contexts[0]) == len(contexts[1]) == 9
    # Both halves draw from every article here (18 paragraphs dealt in a fixed shuffle).
    assert {a["title"] for a in tune} == {a["title"] for a in test} == {"a0", "a1", "a2"}
    assert [tune, test] == squad_quality._alternate_paragraphs(articles)
