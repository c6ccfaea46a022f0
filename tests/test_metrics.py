"""Task metrics against values computed by hand (and conlleval's chunk rules)."""

import math

import numpy as np
import pytest

from bert_tf.tasks import metrics


def test_accuracy_and_binary_f1():
    assert metrics.accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    # tp=2 fp=1 fn=1 -> 2*2 / (2*2 + 1 + 1)
    assert metrics.binary_f1([1, 1, 0, 0, 1], [1, 0, 1, 0, 1]) == pytest.approx(4 / 6)
    assert metrics.binary_f1(["1", "0"], ["1", "1"], positive="1") == pytest.approx(2 / 3)
    assert metrics.binary_f1([0, 0], [0, 0]) == 0.0  # no positive at all
    with pytest.raises(ValueError, match="2 labels but 3 predictions"):
        metrics.accuracy([1, 0], [1, 0, 1])


def test_matthews_corr_by_hand():
    # tp=1 fn=1 tn=2 fp=0: (1*2 - 0*1) / sqrt((1+0)(1+1)(2+0)(2+1)) = 2 / sqrt(12)
    assert metrics.matthews_corr([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(2 / math.sqrt(12))
    assert metrics.matthews_corr(["1", "0", "1"], ["1", "0", "1"]) == pytest.approx(1.0)
    assert metrics.matthews_corr([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)
    # one predicted class only: undefined, reported 0 as sklearn (and CoLA scripts) do
    assert metrics.matthews_corr([1, 0, 1], [1, 1, 1]) == 0.0


def test_pearson_and_spearman_by_hand():
    assert metrics.pearson([1, 2, 3], [1, 2, 2]) == pytest.approx(1 / math.sqrt(4 / 3))
    # ranks of y are 1,2,4,3: 1 - 6 * (0+0+1+1) / (4 * 15)
    assert metrics.spearman([1, 2, 3, 4], [10, 20, 40, 30]) == pytest.approx(0.8)
    # ties take the average rank: x ranks 1, 2.5, 2.5, 4
    assert metrics.rankdata([1, 2, 2, 3]).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert metrics.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert metrics.spearman([3, 1, 2], [30, 10, 20]) == pytest.approx(1.0)
    assert metrics.pearson([1, 1, 1], [1, 2, 3]) == 0.0  # constant input


def test_spearman_matches_a_slow_reference_on_random_data():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 6, 200).astype(float)  # many ties
    y = x + rng.normal(size=200)

    def slow_ranks(v):
        return np.array([np.mean([j + 1 for j, w in enumerate(sorted(v)) if w == u]) for u in v])

    expected = np.corrcoef(slow_ranks(x), slow_ranks(y))[0, 1]
    assert metrics.spearman(x, y) == pytest.approx(expected)
    assert metrics.pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])


@pytest.mark.parametrize("tags, entities", [
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 1), ("LOC", 3, 3)]),
    (["I-PER", "I-PER", "B-PER"], [("PER", 0, 1), ("PER", 2, 2)]),      # IOB1
    (["O", "I-LOC", "I-ORG"], [("LOC", 1, 1), ("ORG", 2, 2)]),          # type change
    (["B-MISC", "I-PER"], [("MISC", 0, 0), ("PER", 1, 1)]),
    (["O", "O"], []),
    ([], []),
])
def test_get_entities_follows_conlleval_chunks(tags, entities):
    assert metrics.get_entities(tags) == entities


def test_entity_scores_partial_overlaps():
    gold = [["B-PER", "I-PER", "I-PER", "O", "B-LOC"],   # PER 0-2, LOC 4
            ["B-ORG", "I-ORG", "O", "B-MISC"],           # ORG 0-1, MISC 3
            ["B-PER", "I-PER", "O"]]                     # PER 0-1
    predicted = [["B-PER", "I-PER", "O", "O", "B-LOC"],  # PER 0-1 too short; LOC right
                 ["B-ORG", "I-ORG", "I-ORG", "B-PER"],   # ORG 0-2 too long; right span wrong type
                 ["B-PER", "B-PER", "O"]]                # split in two
    # predicted entities: PER01, LOC4 | ORG02, PER3 | PER0, PER1 -> 6, of which 1 correct
    # gold entities: 5
    scores = metrics.entity_scores(gold, predicted)
    assert scores["precision"] == pytest.approx(1 / 6)
    assert scores["recall"] == pytest.approx(1 / 5)
    assert scores["f1"] == pytest.approx(2 * (1 / 6) * (1 / 5) / (1 / 6 + 1 / 5))
    assert scores["token_accuracy"] == pytest.approx(8 / 12)


def test_entity_scores_exact_and_format_independent():
    gold = [["I-ORG", "I-ORG", "O", "I-PER"]]           # IOB1
    assert metrics.entity_scores(gold, [["B-ORG", "I-ORG", "O", "B-PER"]])["f1"] == 1.0
    # the same span in another sentence is another entity
    two = metrics.entity_scores([["B-PER"], ["O"]], [["O"], ["B-PER"]])
    assert (two["precision"], two["recall"], two["f1"]) == (0.0, 0.0, 0.0)
    none = metrics.entity_scores([["O"]], [["O"]])
    assert none["f1"] == 0.0 and none["token_accuracy"] == 1.0
    with pytest.raises(ValueError, match="sentence 0: 2 gold tags but 1 predicted"):
        metrics.entity_scores([["O", "O"]], [["O"]])
