"""Pretraining objective and metrics, as the original run_pretraining computes them.

Loss = masked-LM loss + next-sentence loss, where

    masked-LM loss     = sum(w * nll) / (sum(w) + 1e-5)     over the masked positions
    next-sentence loss = mean cross-entropy over the batch

Under a distribution strategy, `sum(w)` is summed over all replicas first, so the
loss of the global batch is the one a single device would compute (the training loop
averages per-replica losses; see `pretraining_loss`).

`pretraining_loss_and_metrics` (the Trainer's `loss_fn`) returns the loss and the
metrics, computed from the same per-position cross-entropy (one softmax over the
vocabulary, not two): (numerator, denominator) pairs that the training loop sums over
steps and replicas before dividing: `masked_lm_accuracy` (weighted), `masked_lm_loss`,
`next_sentence_accuracy`, `next_sentence_loss`; `finalize_pretraining_metrics` adds
`perplexity = exp(masked_lm_loss)`. `pretraining_loss` / `pretraining_metrics` return
one part each.

Example:

>>> import numpy as np
>>> labels = {"masked_lm_ids": np.array([[1, 0]]),
...           "masked_lm_weights": np.array([[1.0, 0.0]], "float32"),
...           "next_sentence_labels": np.array([0])}
>>> outputs = {"mlm_logits": np.zeros((1, 2, 4), "float32"),
...            "nsp_logits": np.zeros((1, 2), "float32")}
>>> round(float(pretraining_loss(labels, outputs)), 4)    # ln 4 / (1 + 1e-5) + ln 2
2.0794
"""

from __future__ import annotations

import math

import tensorflow as tf

MLM_EPSILON = 1e-5


def _global_sum(value):
    """Sum of `value` over the replicas when called inside strategy.run, else `value`."""
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return value
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)


def _num_replicas():
    ctx = tf.distribute.get_replica_context()
    return 1 if ctx is None else ctx.num_replicas_in_sync


@tf.autograph.experimental.do_not_convert  # autograph would unwrap the custom gradient
@tf.custom_gradient
def sparse_softmax_nll(labels, logits):
    """-log softmax(logits)[label] over the last axis (float32 logits, int labels).

    The value and gradient (softmax - one_hot) of
    `tf.nn.sparse_softmax_cross_entropy_with_logits`, computed from one max, one exp and
    one sum of the logits kept for the backward pass: about half the time of TF's fused
    CPU kernel on the masked-LM logits ([batch * 20, vocab]: 31 vs 64 ms forward +
    backward at 640 x 30,522 on 2 cores), equal to it within float32 rounding.

    >>> import numpy as np
    >>> logits = tf.constant(np.random.default_rng(0).normal(size=(3, 5)), tf.float32)
    >>> ids = tf.constant([0, 4, 2])
    >>> ref = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids, logits=logits)
    >>> bool(tf.reduce_all(tf.abs(sparse_softmax_nll(ids, logits) - ref) < 1e-6))
    True
    """
    labels = tf.cast(labels, tf.int32)
    top = tf.reduce_max(logits, axis=-1, keepdims=True)
    exp = tf.exp(logits - top)
    total = tf.reduce_sum(exp, axis=-1, keepdims=True)
    picked = tf.gather(logits, labels[..., None], batch_dims=labels.shape.rank)
    nll = tf.squeeze(tf.math.log(total) + top - picked, -1)

    def grad(upstream):
        one_hot = tf.one_hot(labels, tf.shape(logits)[-1], dtype=logits.dtype)
        return None, upstream[..., None] * (exp / total - one_hot)

    return nll, grad


def masked_lm_nll(labels, outputs):
    """Per-position negative log-likelihood [batch, P] (float32) and weights [batch, P]."""
    weights = tf.cast(labels["masked_lm_weights"], tf.float32)
    logits = tf.cast(outputs["mlm_logits"], tf.float32)
    ids = tf.cast(labels["masked_lm_ids"], tf.int32)
    return sparse_softmax_nll(ids, logits), weights


def next_sentence_nll(labels, outputs):
    """Per-example next-sentence negative log-likelihood [batch]."""
    logits = tf.cast(outputs["nsp_logits"], tf.float32)
    ids = tf.reshape(tf.cast(labels["next_sentence_labels"], tf.int32), [-1])
    return sparse_softmax_nll(ids, logits)


# Keys `add_global_mlm_weight` adds to the labels (one value repeated per example, so
# that they survive the training loop's split into micro-batches).
GLOBAL_MLM_WEIGHT = "global_masked_lm_weight"
GLOBAL_BATCH_SIZE = "global_batch_size"


def add_global_mlm_weight(labels):
    """Labels + the global batch's total masked-LM weight and size (the loop's `label_fn`).

    Run in replica context on the whole per-replica batch, before the loop splits it
    into micro-batches and before any XLA-compiled code (it all-reduces).
    """
    weights = tf.cast(labels["masked_lm_weights"], tf.float32)
    batch = tf.shape(weights)[0]
    total = _global_sum(tf.reduce_sum(weights))
    examples = _global_sum(tf.cast(batch, tf.float32))
    labels = dict(labels)
    labels[GLOBAL_MLM_WEIGHT] = tf.fill([batch], total)
    labels[GLOBAL_BATCH_SIZE] = tf.fill([batch], examples)
    return labels


def pretraining_loss_and_metrics(labels, outputs):
    """(the original's total loss, metric pairs) of this (micro-)batch: the Trainer's
    `loss_fn`. Both come from one masked-LM cross-entropy over [batch * P, vocab].

    The masked-LM denominator of the loss is the global batch's `sum(w)` (from
    `add_global_mlm_weight`, else summed over replicas here), and the numerator is
    scaled by the number of shards (replicas x micro-batches), so that the mean of the
    shards' losses, which the training loop optimises, is the global batch's loss.
    The metrics are (numerator, denominator) pairs that the loop sums over steps and
    replicas: `masked_lm_accuracy` (weighted), `masked_lm_loss`,
    `next_sentence_accuracy`, `next_sentence_loss`.
    """
    nll, weights = masked_lm_nll(labels, outputs)
    nsp_nll = next_sentence_nll(labels, outputs)
    if GLOBAL_MLM_WEIGHT in labels:
        total_weight = labels[GLOBAL_MLM_WEIGHT][0]
        shards = labels[GLOBAL_BATCH_SIZE][0] / tf.cast(tf.shape(weights)[0], tf.float32)
    else:
        total_weight = _global_sum(tf.reduce_sum(weights))
        shards = float(_num_replicas())
    total_weight = tf.stop_gradient(total_weight)
    mlm = shards * tf.reduce_sum(weights * nll) / (total_weight + MLM_EPSILON)
    loss = mlm + tf.reduce_mean(nsp_nll)

    ids = tf.cast(labels["masked_lm_ids"], tf.int32)
    mlm_pred = tf.argmax(outputs["mlm_logits"], axis=-1, output_type=tf.int32)
    nsp_ids = tf.reshape(tf.cast(labels["next_sentence_labels"], tf.int32), [-1])
    nsp_pred = tf.argmax(outputs["nsp_logits"], axis=-1, output_type=tf.int32)
    sum_w = tf.reduce_sum(weights)
    batch = tf.cast(tf.size(nsp_ids), tf.float32)
    metrics = {
        "masked_lm_accuracy": (tf.reduce_sum(weights * tf.cast(tf.equal(mlm_pred, ids),
                                                                tf.float32)), sum_w),
        "masked_lm_loss": (tf.reduce_sum(weights * nll), sum_w),
        "next_sentence_accuracy": (tf.reduce_sum(tf.cast(tf.equal(nsp_pred, nsp_ids),
                                                         tf.float32)), batch),
        "next_sentence_loss": (tf.reduce_sum(nsp_nll), batch),
    }
    return loss, metrics


def pretraining_loss(labels, outputs):
    """The total loss alone (a scalar, float32); see `pretraining_loss_and_metrics`."""
    return pretraining_loss_and_metrics(labels, outputs)[0]


def pretraining_metrics(labels, outputs):
    """The metric pairs alone; see `pretraining_loss_and_metrics`."""
    return pretraining_loss_and_metrics(labels, outputs)[1]


def finalize_pretraining_metrics(results: dict) -> dict:
    """Adds `perplexity` (exp of the masked-LM loss) to aggregated metric values.

    >>> finalize_pretraining_metrics({"masked_lm_loss": 0.0})["perplexity"]
    1.0
    """
    results = dict(results)
    if "masked_lm_loss" in results:
        results["perplexity"] = float(math.exp(min(results["masked_lm_loss"], 700.0)))
    return results
