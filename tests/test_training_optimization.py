"""Optimizers and schedule (bert_tf/training/optimization.py) against hand-computed numpy."""

import keras
import numpy as np
import pytest

from bert_tf.model.pretrainer import BertPretrainer
from bert_tf.training import optimization as opt_lib
from tests.helpers import tiny_config

GRADS = [np.array([[3.0, -4.0], [0.5, 2.0]], np.float32), np.array([1.0, -2.0], np.float32)]
INIT = [np.array([[1.0, -2.0], [0.5, 0.25]], np.float32), np.array([0.5, 1.5], np.float32)]
NAMES = ["dense/kernel", "encoder/layer_norm/gamma"]


def _variable(value, path):
    """A keras.Variable whose `.path` is `path` (names cannot hold '/')."""
    *scopes, name = path.split("/")
    if not scopes:
        return keras.Variable(value, name=name)
    with keras.name_scope(scopes[0]):
        return _variable(value, "/".join(scopes[1:] + [name]))


def _run(optimizer, steps=3, grads=GRADS):
    variables = [_variable(v.copy(), n) for v, n in zip(INIT, NAMES)]
    assert [v.path for v in variables] == NAMES
    for step in range(steps):
        optimizer.apply([g * (step + 1) for g in grads], variables)
    return [v.numpy() for v in variables]


def _clip(grads, clip_norm):
    norm = np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads))
    return [g * clip_norm / max(norm, clip_norm) for g in grads]


def _numpy_adam(steps=3, lr=0.01, wd=0.01, b1=0.9, b2=0.999, eps=1e-6, bias_correction=False,
                lamb=False, clip_norm=1.0):
    w = [v.astype(np.float64).copy() for v in INIT]
    m = [np.zeros_like(v) for v in w]
    v = [np.zeros_like(x) for x in w]
    decay = [True, False]  # the layer_norm variable is excluded
    for step in range(steps):
        grads = [g.astype(np.float64) * (step + 1) for g in GRADS]
        if clip_norm:
            grads = _clip(grads, clip_norm)
        t = step + 1
        for i, g in enumerate(grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            mm, vv = m[i], v[i]
            if bias_correction or lamb:
                mm, vv = mm / (1 - b1 ** t), vv / (1 - b2 ** t)
            update = mm / (np.sqrt(vv) + eps)
            if decay[i]:
                update = update + wd * w[i]
            ratio = 1.0
            if lamb and decay[i]:
                wn, un = np.linalg.norm(w[i]), np.linalg.norm(update)
                ratio = wn / un if wn > 0 and un > 0 else 1.0
            w[i] = w[i] - lr * ratio * update
    return w


def test_original_adam_weight_decay_no_bias_correction_with_clipping():
    got = _run(opt_lib.AdamWeightDecay(0.01, weight_decay_rate=0.01))
    for g, e in zip(got, _numpy_adam()):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)
    # And it really differs from the bias-corrected variant.
    assert not np.allclose(got[0], _numpy_adam(bias_correction=True)[0], rtol=1e-4)


def test_adamw_with_bias_correction_option():
    got = _run(opt_lib.AdamWeightDecay(0.01, weight_decay_rate=0.01, bias_correction=True))
    for g, e in zip(got, _numpy_adam(bias_correction=True)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)


def test_lamb_option():
    got = _run(opt_lib.Lamb(0.01, weight_decay_rate=0.01))
    for g, e in zip(got, _numpy_adam(lamb=True)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)


def test_without_clipping():
    got = _run(opt_lib.AdamWeightDecay(0.01, global_clipnorm=None))
    for g, e in zip(got, _numpy_adam(clip_norm=None)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)


def test_weight_decay_exclusion_matches_bert_variable_paths():
    cfg = tiny_config(vocab_size=50, max_position_embeddings=512)
    model = BertPretrainer(cfg)
    opt = opt_lib.AdamWeightDecay(1e-3)
    opt.build(model.trainable_variables)
    flags = {v.path: d for v, d in zip(model.trainable_variables, opt._decay_flags)}
    assert flags["embeddings/word_embeddings"] is True
    assert flags["transformer_layer_0/attention/query/kernel"] is True
    assert flags["transformer_layer_0/attention/query/bias"] is False
    assert flags["transformer_layer_0/output_layer_norm/gamma"] is False
    assert flags["embeddings/layer_norm/beta"] is False
    assert flags["masked_lm/output_bias"] is False
    assert flags["masked_lm/layer_norm/gamma"] is False
    assert flags["next_sentence/dense/kernel"] is True
    decayed = sum(flags.values())
    assert decayed == 12, flags  # 3 embedding tables + 6 block, pooler, MLM, NSP kernels
    # Names as the original TF1 checkpoints spell them are excluded too.
    original = _variable(np.ones(2, np.float32), "bert/encoder/LayerNorm/gamma")
    assert not opt_lib.AdamWeightDecay(1e-3)._wants_decay(original)


def test_schedule_original_warmup_then_linear_decay_from_step_zero():
    s = opt_lib.WarmupLinearDecay(1e-4, num_train_steps=1000, num_warmup_steps=100)
    for step in (0, 1, 50, 99):
        assert float(s(step)) == pytest.approx(1e-4 * step / 100, rel=1e-6)
    for step in (100, 500, 999, 1000, 1500):
        assert float(s(step)) == pytest.approx(1e-4 * (1 - min(step, 1000) / 1000),
                                               rel=1e-4, abs=1e-12)
    # The jump at the end of warmup is the original's: 1e-4 * (1 - 100/1000).
    assert float(s(100)) == pytest.approx(0.9e-4, rel=1e-5)


def test_schedule_decay_from_end_of_warmup_option():
    s = opt_lib.WarmupLinearDecay(1e-4, 1000, 100, decay_from_warmup_end=True)
    assert float(s(50)) == pytest.approx(0.5e-4, rel=1e-6)
    assert float(s(100)) == pytest.approx(1e-4, rel=1e-6)
    assert float(s(550)) == pytest.approx(0.5e-4, rel=1e-5)
    assert float(s(1000)) == pytest.approx(0.0, abs=1e-12)


def test_create_optimizer_options_and_loss_scaling():
    opt = opt_lib.create_optimizer(1e-4, 100, 10)
    assert isinstance(opt, opt_lib.AdamWeightDecay) and not opt.bias_correction
    assert opt.global_clipnorm == 1.0 and opt.epsilon == 1e-6 and opt.weight_decay_rate == 0.01
    assert opt_lib.create_optimizer(1e-4, 100, optimizer="adamw_bias_correction").bias_correction
    assert isinstance(opt_lib.create_optimizer(1e-4, 100, optimizer="lamb"), opt_lib.Lamb)
    scaled = opt_lib.create_optimizer(1e-4, 100, mixed_precision="mixed_float16")
    assert isinstance(scaled, keras.optimizers.LossScaleOptimizer)
    assert isinstance(scaled.inner_optimizer, opt_lib.AdamWeightDecay)
    with pytest.raises(ValueError, match="--optimizer='sgd'"):
        opt_lib.create_optimizer(1e-4, 100, optimizer="sgd")


def test_learning_rate_follows_schedule_during_updates():
    opt = opt_lib.AdamWeightDecay(opt_lib.WarmupLinearDecay(1.0, 10, 4), global_clipnorm=None)
    w = keras.Variable(np.zeros(1, np.float32), name="kernel")
    seen = []
    for _ in range(3):
        seen.append(float(keras.ops.convert_to_numpy(opt.learning_rate)))
        opt.apply([np.ones(1, np.float32)], [w])
    assert seen == pytest.approx([0.0, 0.25, 0.5])
