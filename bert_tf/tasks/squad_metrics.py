"""SQuAD v1.1 and v2.0 metrics, computed as the official evaluation scripts define them.

Both scripts normalize an answer the same way (lower-case, drop ASCII punctuation, drop
the articles a/an/the, collapse whitespace), score a prediction against every gold
answer and keep the best: exact match (normalized strings equal) and token F1 (bag of
normalized tokens, overlap counted with multiplicity). Scores are percentages.

v1.1 and v2.0 differ only where answers are empty:

* v1.1 (`f1_score_v1`): an empty prediction or gold has F1 0.
* v2.0 (`compute_f1`): gold answers that normalize to "" are dropped and a question with
  none left has the single gold answer ""; F1 is 1 when both sides are empty, 0 when only
  one is. v2.0 also reports the HasAns_ / NoAns_ splits and, given the null odds
  (`null_odds.json`: for each question, how much the null answer beat the best span),
  the best exact / F1 over every no-answer threshold and the thresholds themselves.

One documented divergence: a question without a prediction scores 0 and counts in the
total in both versions (v1.1 does this; the v2.0 script would skip it in `exact` and
then fail in the HasAns split).

Example:

>>> normalize_answer("The  Eiffel-Tower!")
'eiffeltower'
>>> evaluate_v1({"q1": ["Denver Broncos"], "q2": ["1990s", "the 1990s"]},
...             {"q1": "the Denver Broncos", "q2": "late 1990s"})
{'exact_match': 50.0, 'f1': 83.33333333333333}
"""

from __future__ import annotations

import collections
import json
import logging
import re
import string
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lower-cases, drops punctuation and articles, collapses whitespace.

    >>> normalize_answer("  An   Apple, a day!")
    'apple day'
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def get_tokens(text: str) -> List[str]:
    """The normalized tokens of an answer ([] for an empty answer).

    >>> get_tokens("The cat's hat")
    ['cats', 'hat']
    """
    if not text:
        return []
    return normalize_answer(text).split()


def exact_match_score(prediction: str, ground_truth: str) -> int:
    """1 when the normalized strings are equal, else 0 (both versions).

    >>> exact_match_score("the Broncos", "Broncos.")
    1
    """
    return int(normalize_answer(prediction) == normalize_answer(ground_truth))


def _overlap_f1(prediction_tokens: Sequence[str], gold_tokens: Sequence[str]) -> float:
    common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score_v1(prediction: str, ground_truth: str) -> float:
    """Token F1 as evaluate-v1.1 computes it (empty on either side -> 0).

    >>> round(f1_score_v1("a red big car", "the big car"), 4)
    0.8
    """
    return _overlap_f1(normalize_answer(prediction).split(),
                       normalize_answer(ground_truth).split())


def compute_f1(gold: str, prediction: str) -> float:
    """Token F1 as evaluate-v2.0 computes it (note its argument order: gold first).

    >>> compute_f1("", ""), compute_f1("", "x"), compute_f1("big car", "car")
    (1.0, 0.0, 0.6666666666666666)
    """
    gold_tokens, prediction_tokens = get_tokens(gold), get_tokens(prediction)
    if not gold_tokens or not prediction_tokens:
        return float(gold_tokens == prediction_tokens)
    return _overlap_f1(prediction_tokens, gold_tokens)


def metric_max_over_ground_truths(metric: Callable[[str, str], float], prediction: str,
                                  ground_truths: Iterable[str]) -> float:
    """The best score of `prediction` against any gold answer.

    >>> metric_max_over_ground_truths(exact_match_score, "Paris", ["paris", "Lyon"])
    1
    """
    return max(metric(prediction, gold) for gold in ground_truths)


# ---------------------------------------------------------------------- gold answers
def read_gold_answers(path: str) -> Dict[str, List[str]]:
    """qid -> list of gold answer texts (in file order), from an official SQuAD json.

    A v2.0 impossible question has an empty list.
    """
    import tensorflow as tf  # gs:// too; the official scoring stays TF-free (9 s)

    with tf.io.gfile.GFile(path) as f:
        dataset = json.load(f)
    return gold_answers_from_dataset(dataset["data"])


def gold_answers_from_dataset(articles: Sequence[Mapping]) -> Dict[str, List[str]]:
    """qid -> gold texts, from the `data` list of a SQuAD json.

    >>> gold_answers_from_dataset([{"paragraphs": [{"qas": [
    ...     {"id": "q", "answers": [{"text": "x", "answer_start": 0}]}]}]}])
    {'q': ['x']}
    """
    gold = {}
    for article in articles:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                gold[qa["id"]] = [answer["text"] for answer in qa.get("answers", [])]
    return gold


def _missing(qid: str) -> None:
    logging.warning("SQuAD eval: no prediction for question %s; it scores 0", qid)


# ---------------------------------------------------------------------- v1.1
def evaluate_v1(gold_answers: Mapping[str, Sequence[str]],
                predictions: Mapping[str, str]) -> Dict[str, float]:
    """{"exact_match", "f1"} in percent, as evaluate-v1.1.py reports them.

    >>> evaluate_v1({"a": ["x y"], "b": ["z"]}, {"a": "x"})
    {'exact_match': 0.0, 'f1': 33.33333333333333}
    """
    exact = f1 = 0.0
    for qid, golds in gold_answers.items():
        if qid not in predictions:
            _missing(qid)
            continue
        if not golds:
            raise ValueError(f"question {qid} has no gold answer; a SQuAD v1.1 dev set "
                             f"has at least one per question (is this a v2.0 file? use "
                             f"--version_2_with_negative)")
        exact += metric_max_over_ground_truths(exact_match_score, predictions[qid], golds)
        f1 += metric_max_over_ground_truths(f1_score_v1, predictions[qid], golds)
    total = max(len(gold_answers), 1)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


# ---------------------------------------------------------------------- v2.0
def get_raw_scores(gold_answers: Mapping[str, Sequence[str]], predictions: Mapping[str, str]):
    """qid -> exact and qid -> F1 (0/1 and [0, 1]) before any no-answer threshold."""
    exact_scores, f1_scores = {}, {}
    for qid, golds in gold_answers.items():
        golds = [g for g in golds if normalize_answer(g)] or [""]
        if qid not in predictions:
            _missing(qid)
            exact_scores[qid] = f1_scores[qid] = 0.0
            continue
        prediction = predictions[qid]
        exact_scores[qid] = float(max(exact_match_score(prediction, g) for g in golds))
        f1_scores[qid] = max(compute_f1(g, prediction) for g in golds)
    return exact_scores, f1_scores


def apply_no_answer_threshold(scores: Mapping[str, float], na_probs: Mapping[str, float],
                              has_answer: Mapping[str, bool], threshold: float):
    """Questions whose null odds exceed `threshold` count as answered with "".

    >>> apply_no_answer_threshold({"a": 1.0, "b": 0.0}, {"a": 2.0, "b": 2.0},
    ...                           {"a": True, "b": False}, 1.0)
    {'a': 0.0, 'b': 1.0}
    """
    return {qid: (float(not has_answer[qid]) if na_probs[qid] > threshold else score)
            for qid, score in scores.items()}


def _mean_dict(exact_scores, f1_scores, qids=None) -> Dict[str, float]:
    qids = list(exact_scores) if qids is None else list(qids)
    total = len(qids)
    return {"exact": 100.0 * sum(exact_scores[q] for q in qids) / max(total, 1),
            "f1": 100.0 * sum(f1_scores[q] for q in qids) / max(total, 1),
            "total": total}


def find_best_threshold(predictions: Mapping[str, str], scores: Mapping[str, float],
                        na_probs: Mapping[str, float], has_answer: Mapping[str, bool]):
    """(best score in percent, threshold) over all no-answer thresholds.

    Starting from "every question predicted empty" (score = number of NoAns questions),
    the questions are visited in increasing null odds; letting question q keep its
    prediction changes the score by its raw score (HasAns), or by -1 / 0 when a NoAns
    question's prediction is non-empty / empty. The threshold is the odds where the
    running score peaked (0.0 when it never beat the start).

    >>> find_best_threshold({"a": "x", "b": "y"}, {"a": 1.0, "b": 0.0},
    ...                     {"a": -2.0, "b": 3.0}, {"a": True, "b": False})
    (100.0, -2.0)
    """
    current = best = float(sum(1 for q in has_answer if not has_answer[q]))
    best_threshold = 0.0
    # sorted() is stable: ties keep the null-odds file's order, as the script does.
    for qid in sorted(na_probs, key=lambda q: na_probs[q]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            current += scores[qid]
        elif predictions.get(qid):
            current -= 1
        if current > best:
            best, best_threshold = current, na_probs[qid]
    return 100.0 * best / max(len(scores), 1), best_threshold


def evaluate_v2(gold_answers: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
                na_probs: Optional[Mapping[str, float]] = None,
                na_prob_thresh: float = 1.0) -> Dict[str, float]:
    """What evaluate-v2.0.py prints: exact, f1, total, HasAns_*, NoAns_*, and with
    `na_probs` (null odds) best_exact(_thresh), best_f1(_thresh).

    As in the script, questions whose null odds exceed `na_prob_thresh` (default 1.0)
    are scored as if predicted "" for exact / f1 / the splits; pass na_probs=None to
    score the predictions as written.

    >>> out = evaluate_v2({"a": ["x"], "b": []}, {"a": "x", "b": "y"},
    ...                   na_probs={"a": -1.0, "b": 0.5})
    >>> out["exact"], out["HasAns_exact"], out["NoAns_exact"], out["best_exact"]
    (50.0, 100.0, 0.0, 100.0)
    >>> out["best_exact_thresh"]
    -1.0
    """
    has_answer = {qid: bool(golds) for qid, golds in gold_answers.items()}
    exact_raw, f1_raw = get_raw_scores(gold_answers, predictions)
    probs = na_probs if na_probs is not None else {qid: 0.0 for qid in gold_answers}
    for qid in gold_answers:
        if qid not in probs:
            raise ValueError(f"null odds lack question {qid}; write them with the "
                             f"predictions (null_odds.json)")
    exact = apply_no_answer_threshold(exact_raw, probs, has_answer, na_prob_thresh)
    f1 = apply_no_answer_threshold(f1_raw, probs, has_answer, na_prob_thresh)
    result = _mean_dict(exact, f1)
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q, has in has_answer.items() if has == wanted]
        if qids:
            for key, value in _mean_dict(exact, f1, qids).items():
                result[f"{prefix}_{key}"] = value
    if na_probs is not None:
        best_exact, exact_threshold = find_best_threshold(predictions, exact_raw, probs,
                                                          has_answer)
        best_f1, f1_threshold = find_best_threshold(predictions, f1_raw, probs, has_answer)
        result["best_exact"], result["best_exact_thresh"] = best_exact, exact_threshold
        result["best_f1"], result["best_f1_thresh"] = best_f1, f1_threshold
    return result


def evaluate_files(data_file: str, prediction_file: str, version_2_with_negative: bool = False,
                   na_prob_file: Optional[str] = None) -> Dict[str, float]:
    """Scores a predictions.json against an official SQuAD json, like the scripts do."""
    import tensorflow as tf  # gs:// too; the official scoring stays TF-free (9 s)

    gold = read_gold_answers(data_file)
    with tf.io.gfile.GFile(prediction_file) as f:
        predictions = json.load(f)
    if not version_2_with_negative:
        return evaluate_v1(gold, predictions)
    na_probs = None
    if na_prob_file:
        with tf.io.gfile.GFile(na_prob_file) as f:
            na_probs = json.load(f)
    return evaluate_v2(gold, predictions, na_probs)
