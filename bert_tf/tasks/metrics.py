"""The official metrics of the fine-tuning tasks, in plain numpy (no scipy/sklearn).

Every function takes host-side sequences and returns a Python float in [0, 1]
(correlations in [-1, 1]); percentages are the caller's business.

>>> accuracy([1, 0, 1], [1, 1, 1])
0.6666666666666666
>>> round(matthews_corr([1, 1, 0, 0], [1, 0, 0, 0]), 4)
0.5774
>>> spearman([1, 2, 3, 4], [10, 20, 40, 30])
0.8
>>> entity_scores([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])["f1"]
0.0
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np


def accuracy(labels: Sequence, predictions: Sequence) -> float:
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    _same_length(labels, predictions)
    return float(np.mean(labels == predictions)) if len(labels) else 0.0


def binary_f1(labels: Sequence, predictions: Sequence, positive=1) -> float:
    """F1 of the positive class (GLUE's MRPC / QQP F1). 0 when there is no true positive."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    _same_length(labels, predictions)
    tp = float(np.sum((predictions == positive) & (labels == positive)))
    fp = float(np.sum((predictions == positive) & (labels != positive)))
    fn = float(np.sum((predictions != positive) & (labels == positive)))
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def f1_per_class(labels: Sequence, predictions: Sequence, classes: Sequence = None,
                 zero_division: float = 0.0) -> Dict:
    """One-vs-rest F1 of each class, 2 TP / (2 TP + FP + FN); `zero_division` for a class
    in neither sequence. `classes` default: those in either, sorted (sklearn's labels).

    >>> f1_per_class(["a", "a", "b"], ["a", "b", "b"])
    {'a': 0.6666666666666666, 'b': 0.6666666666666666}
    """
    labels, predictions = list(labels), list(predictions)
    _same_length(labels, predictions)
    if classes is None:
        classes = sorted(set(labels) | set(predictions))
    scores = {}
    for c in classes:
        tp = sum(1 for t, p in zip(labels, predictions) if t == c and p == c)
        wrong = sum(1 for t, p in zip(labels, predictions) if (t == c) != (p == c))
        scores[c] = 2 * tp / (2 * tp + wrong) if tp + wrong else float(zero_division)
    return scores


def macro_f1(labels: Sequence, predictions: Sequence, classes: Sequence = None,
             zero_division: float = 0.0) -> float:
    """The mean of `f1_per_class` (sklearn's f1_score(average="macro"); YNAT's metric).

    >>> round(macro_f1([0, 0, 1, 2], [0, 1, 1, 1]), 4)  # (2/3 + 1/2 + 0) / 3
    0.3889
    """
    scores = f1_per_class(labels, predictions, classes, zero_division)
    return float(np.mean(list(scores.values()))) if scores else 0.0


def matthews_corr(labels: Sequence, predictions: Sequence) -> float:
    """Matthews correlation (CoLA), multiclass form; 0 when undefined (as sklearn)."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    _same_length(labels, predictions)
    classes = np.unique(np.concatenate([labels, predictions]))
    index = {c: i for i, c in enumerate(classes.tolist())}
    confusion = np.zeros((len(classes), len(classes)), dtype=np.float64)
    for t, p in zip(labels.tolist(), predictions.tolist()):
        confusion[index[t], index[p]] += 1
    t_sum, p_sum = confusion.sum(axis=1), confusion.sum(axis=0)
    n, correct = confusion.sum(), np.trace(confusion)
    cov_ytyp = correct * n - np.dot(t_sum, p_sum)
    cov_ypyp = n * n - np.dot(p_sum, p_sum)
    cov_ytyt = n * n - np.dot(t_sum, t_sum)
    denominator = np.sqrt(cov_ytyt * cov_ypyp)
    return float(cov_ytyp / denominator) if denominator else 0.0


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    _same_length(x, y)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
    return float(np.sum(x * y) / denominator) if denominator else 0.0


def rankdata(values: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties get their average rank (scipy.stats.rankdata 'average')."""
    values = np.asarray(values, np.float64)
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    ranks = np.empty(len(values), np.float64)
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho = Pearson correlation of the (tie-averaged) ranks."""
    return pearson(rankdata(x), rankdata(y))


# ---------------------------------------------------------------- NER (conlleval)

def split_tag(tag: str) -> Tuple[str, str]:
    """(prefix, type) of a tag: ("O", "") for O, ("B", "PER") for B-PER; a bare type is
    an I- ("PER" -> ("I", "PER")), as conlleval's raw mode reads it."""
    if tag == "O" or not tag:
        return "O", ""
    if len(tag) > 2 and tag[1] == "-":
        return tag[0], tag[2:]
    return "I", tag  # a bare type ("PER"), as conlleval's -r raw mode reads it


def get_entities(tags: Sequence[str]) -> List[Tuple[str, int, int]]:
    """Chunks as conlleval finds them: (type, first index, last index inclusive).

    A chunk starts at B-X, at I-X after O, and at I-X after a tag of another type; so
    IOB1 and IOB2 (BIO) sequences give the same entities, and a stray I- counts as a
    start, as conlleval counts it.

    >>> get_entities(["B-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"])
    [('PER', 0, 1), ('LOC', 3, 3), ('LOC', 4, 4), ('ORG', 5, 5)]
    """
    entities = []
    start, current = None, ""
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, kind = split_tag(tag)
        ends = start is not None and (prefix in ("O", "B") or kind != current)
        if ends:
            entities.append((current, start, i - 1))
            start, current = None, ""
        if prefix in ("B", "I") and start is None:
            start, current = i, kind
    return entities


def entity_scores(gold: Sequence[Sequence[str]],
                  predicted: Sequence[Sequence[str]]) -> Dict[str, float]:
    """Entity-level precision, recall, F1 over sentences (exact span and type only).

    >>> s = entity_scores([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "B-ORG"]])
    >>> s["precision"], s["recall"], s["f1"]
    (0.5, 0.5, 0.5)
    """
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    gold_set, pred_set = set(), set()
    for n, (g, p) in enumerate(zip(gold, predicted)):
        if len(g) != len(p):
            raise ValueError(f"sentence {n}: {len(g)} gold tags but {len(p)} predicted")
        gold_set.update((n,) + e for e in get_entities(g))
        pred_set.update((n,) + e for e in get_entities(p))
    correct = len(gold_set & pred_set)
    precision = correct / len(pred_set) if pred_set else 0.0
    recall = correct / len(gold_set) if gold_set else 0.0
    f1 = 2 * precision * recall / (precision + recall) if correct else 0.0
    tokens = sum(len(g) for g in gold)
    token_accuracy = (sum(a == b for g, p in zip(gold, predicted) for a, b in zip(g, p))
                      / tokens if tokens else 0.0)
    return {"precision": precision, "recall": recall, "f1": f1,
            "token_accuracy": token_accuracy}


def entity_f1_per_type(gold: Sequence[Sequence[str]],
                       predicted: Sequence[Sequence[str]]) -> Dict[str, float]:
    """Entity-level F1 of each type (conlleval's entities, exact span), over the types in
    either side; a type with no correct entity scores 0.

    >>> entity_f1_per_type([["B-PER", "O", "B-LOC"]], [["B-PER", "O", "B-ORG"]])
    {'LOC': 0.0, 'ORG': 0.0, 'PER': 1.0}
    """
    gold_set = {(n,) + e for n, tags in enumerate(gold) for e in get_entities(tags)}
    pred_set = {(n,) + e for n, tags in enumerate(predicted) for e in get_entities(tags)}
    return _f1_by_type(gold_set, pred_set)


def _f1_by_type(gold_set, pred_set) -> Dict[str, float]:
    """F1 per entity type of (sentence, type, start, end) sets, over the types in either."""
    scores = {}
    for kind in sorted({e[1] for e in gold_set | pred_set}):
        g = {e for e in gold_set if e[1] == kind}
        p = {e for e in pred_set if e[1] == kind}
        correct = len(g & p)
        scores[kind] = 2 * correct / (len(g) + len(p)) if correct else 0.0
    return scores


def strict_entities(tags: Sequence[str]) -> List[Tuple[str, int, int]]:
    """Entities as seqeval's strict IOB2 mode finds them (KLUE-NER's official scorer): a
    B-X and the I-X right after it; an I- that starts nothing is no entity.

    >>> strict_entities(["B-PS", "I-PS", "O", "I-LC", "B-LC", "I-OG"])
    [('PS', 0, 1), ('LC', 4, 4)]
    """
    entities, i = [], 0
    while i < len(tags):
        _, kind = split_tag(tags[i])
        if tags[i].startswith("B-"):
            end = i
            while end + 1 < len(tags) and tags[end + 1] == "I-" + kind:
                end += 1
            entities.append((kind, i, end))
            i = end + 1
        else:
            i += 1
    return entities


def klue_ner_entity_macro_f1(gold: Sequence[Sequence[str]],
                             predicted: Sequence[Sequence[str]]) -> float:
    """KLUE-NER `entity_f1`: seqeval's f1_score(mode="strict", scheme=IOB2,
    average="macro") -- the mean over the entity types in either side of each type's F1
    of exactly matching strict entities.

    >>> klue_ner_entity_macro_f1([["B-PS", "I-PS", "O", "B-LC"]], [["B-PS", "I-PS", "O", "I-LC"]])
    0.5
    """
    gold_set = {(n,) + e for n, tags in enumerate(gold) for e in strict_entities(tags)}
    pred_set = {(n,) + e for n, tags in enumerate(predicted) for e in strict_entities(tags)}
    scores = _f1_by_type(gold_set, pred_set)
    return float(np.mean(list(scores.values()))) if scores else 0.0


def klue_ner_char_macro_f1(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]],
                           label_list: Sequence[str]) -> float:
    """KLUE-NER `char_f1`: sklearn's f1_score(labels=every tag of `label_list`, "O"
    included, average="macro", zero_division=1) over the characters' tags.

    >>> klue_ner_char_macro_f1([["B-PS", "O"]], [["B-PS", "B-PS"]], ["B-PS", "I-PS", "O"])
    0.5555555555555555
    """
    flat_gold = [t for tags in gold for t in tags]
    flat_pred = [t for tags in predicted for t in tags]
    return macro_f1(flat_gold, flat_pred, classes=list(label_list), zero_division=1.0)


def _same_length(a, b) -> None:
    if len(a) != len(b):
        raise ValueError(f"{len(a)} labels but {len(b)} predictions")
