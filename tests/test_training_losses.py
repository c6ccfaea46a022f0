"""Pretraining loss and metrics (bert_tf/training/losses.py) against hand-computed values."""

import math

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.training import losses


def _case(seed=0, batch=3, preds=4, vocab=7):
    rng = np.random.default_rng(seed)
    weights = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], np.float32)[:batch, :preds]
    labels = {"masked_lm_ids": rng.integers(0, vocab, (batch, preds)).astype(np.int32),
              "masked_lm_weights": weights,
              "next_sentence_labels": np.array([0, 1, 1], np.int32)[:batch]}
    outputs = {"mlm_logits": rng.normal(size=(batch, preds, vocab)).astype(np.float32),
               "nsp_logits": rng.normal(size=(batch, 2)).astype(np.float32)}
    return labels, outputs


def _log_softmax(x):
    x = x.astype(np.float64)
    return x - x.max(-1, keepdims=True) - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))


def _hand(labels, outputs):
    lp = _log_softmax(outputs["mlm_logits"])
    nll = -np.take_along_axis(lp, labels["masked_lm_ids"][..., None], -1)[..., 0]
    w = labels["masked_lm_weights"]
    mlm = (w * nll).sum() / (w.sum() + 1e-5)
    nlp = _log_softmax(outputs["nsp_logits"])
    nsp_nll = -nlp[np.arange(len(nlp)), labels["next_sentence_labels"]]
    mlm_acc = (w * (outputs["mlm_logits"].argmax(-1) == labels["masked_lm_ids"])).sum() / w.sum()
    nsp_acc = (outputs["nsp_logits"].argmax(-1) == labels["next_sentence_labels"]).mean()
    return {"loss": mlm + nsp_nll.mean(), "masked_lm_loss": (w * nll).sum() / w.sum(),
            "next_sentence_loss": nsp_nll.mean(), "masked_lm_accuracy": mlm_acc,
            "next_sentence_accuracy": nsp_acc}


def test_loss_is_weighted_mlm_mean_plus_mean_nsp():
    labels, outputs = _case()
    expected = _hand(labels, outputs)
    assert float(losses.pretraining_loss(labels, outputs)) == pytest.approx(expected["loss"],
                                                                            rel=1e-6)


def test_metrics_pairs_and_perplexity():
    labels, outputs = _case(seed=3)
    expected = _hand(labels, outputs)
    pairs = losses.pretraining_metrics(labels, outputs)
    values = {k: float(n) / float(d) for k, (n, d) in pairs.items()}
    values = losses.finalize_pretraining_metrics(values)
    for name in ("masked_lm_loss", "next_sentence_loss", "masked_lm_accuracy",
                 "next_sentence_accuracy"):
        assert values[name] == pytest.approx(expected[name], rel=1e-6), name
    assert values["perplexity"] == pytest.approx(math.exp(expected["masked_lm_loss"]), rel=1e-6)
    assert float(pairs["masked_lm_accuracy"][1]) == 7.0  # the real predictions only


def test_padded_predictions_do_not_count():
    labels, outputs = _case()
    changed = {k: v.copy() for k, v in outputs.items()}
    changed["mlm_logits"][0, 2:] = 100.0  # padded slots of example 0
    assert float(losses.pretraining_loss(labels, changed)) == pytest.approx(
        float(losses.pretraining_loss(labels, outputs)), rel=1e-6)


def test_no_masked_position_gives_finite_loss():
    labels, outputs = _case()
    labels["masked_lm_weights"] = np.zeros_like(labels["masked_lm_weights"])
    assert np.isfinite(float(losses.pretraining_loss(labels, outputs)))


def test_global_weight_labels_reproduce_the_whole_batch_loss_from_shards():
    """Each shard scaled by the global weight: the mean over shards is the batch loss."""
    labels, outputs = _case()
    whole = float(losses.pretraining_loss(labels, outputs))
    shards = []
    # Two shards of the same size (micro-batches of 1 and 1 from a batch of 2).
    lab2 = {k: v[:2] for k, v in labels.items()}
    out2 = {k: v[:2] for k, v in outputs.items()}
    whole2 = float(losses.pretraining_loss(lab2, out2))
    enriched = {k: np.asarray(v) for k, v in losses.add_global_mlm_weight(lab2).items()}
    for i in range(2):
        shards.append(float(losses.pretraining_loss(
            {k: v[i:i + 1] for k, v in enriched.items()},
            {k: v[i:i + 1] for k, v in out2.items()})))
    assert np.mean(shards) == pytest.approx(whole2, rel=1e-6)
    assert whole != whole2


def test_loss_and_metrics_share_one_mlm_cross_entropy():
    """The loss returns its metrics, computed from the same [batch * P, vocab]
    cross-entropy (an explicit contract, no cache keyed on tensors)."""
    labels, outputs = _case(seed=5)
    expected = _hand(labels, outputs)

    @tf.function
    def step(labels, outputs):
        return losses.pretraining_loss_and_metrics(labels, outputs)

    loss, pairs = step(labels, outputs)
    assert float(loss) == pytest.approx(expected["loss"], rel=1e-6)
    for name in ("masked_lm_loss", "masked_lm_accuracy"):
        num, den = pairs[name]
        assert float(num) / float(den) == pytest.approx(expected[name], rel=1e-6), name
    graph = step.get_concrete_function(labels, outputs).graph
    ops = [op.type for op in graph.get_operations()]
    # One masked-LM and one next-sentence cross-entropy (one exp over the logits each).
    assert ops.count("Exp") == 2
    assert float(losses.pretraining_loss(labels, outputs)) == pytest.approx(float(loss))


@pytest.mark.parametrize("jit_compile", [False, True])
def test_sparse_softmax_nll_value_and_gradient_are_tfs(jit_compile):
    """The masked-LM cross-entropy (own gradient, for speed) equals TF's fused op, value
    and gradient, on [batch, P, vocab] logits with large values, also under XLA."""
    rng = np.random.default_rng(3)
    logits = tf.constant(rng.normal(scale=30.0, size=(4, 5, 301)), tf.float32)
    ids = tf.constant(rng.integers(0, 301, (4, 5)), tf.int32)
    upstream = tf.constant(rng.normal(size=(4, 5)), tf.float32)

    @tf.function(jit_compile=jit_compile)
    def value_and_grad(fn):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            nll = fn(ids, logits)
            total = tf.reduce_sum(nll * upstream)
        return nll, tape.gradient(total, logits)

    ours = value_and_grad(losses.sparse_softmax_nll)
    ref = value_and_grad(lambda i, l: tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=i, logits=l))
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-6, atol=1e-4)
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-5, atol=1e-6)
    assert float(tf.reduce_max(tf.abs(ours[1]))) > 0.1  # a real gradient, not zeros
