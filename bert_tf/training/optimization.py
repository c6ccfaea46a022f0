"""Optimizers and learning-rate schedules: the original BERT recipe and its options.

Default (the original `optimization.py`): AdamWeightDecay with beta1 0.9, beta2 0.999,
epsilon 1e-6, decoupled weight decay 0.01 skipped for variables whose path contains
`LayerNorm`, `layer_norm` or `bias`, no bias correction, gradients clipped to global
norm 1.0, and a learning rate decaying linearly from step 0 to 0 at `num_train_steps`
that the linear warmup `lr * step / warmup` replaces for the first `num_warmup_steps`.

Options: `bias_correction=True` (standard AdamW), `decay_from_warmup_end=True`,
`optimizer="lamb"` (layer-wise trust ratio, for large batches). Gradient accumulation
is done by the training loop (`--gradient_accumulation_steps`, `LoopOptions`), not here.

Gradients given to these optimizers must already be summed over replicas: the
training loop all-reduces them first, so clipping sees the global gradient (Keras
would clip each replica's gradient before summing).

Example:

>>> opt = create_optimizer(learning_rate=1e-4, num_train_steps=1000, num_warmup_steps=100)
>>> [round(float(opt.learning_rate_schedule(s)), 8) for s in (50, 500)]
[5e-05, 5e-05]
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

import keras
import tensorflow as tf

DEFAULT_EXCLUDE = ("LayerNorm", "layer_norm", "bias")


def _handle(variable):
    """The resource handle of a Keras (or tf) variable, for the fused raw ops."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.handle


@keras.saving.register_keras_serializable(package="bert_tf")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """The original schedule: `lr * (1 - step / num_train_steps)`, warmup replacing it.

    During the first `num_warmup_steps` the rate is `lr * step / num_warmup_steps`.
    With `decay_from_warmup_end=True` the decay instead starts at the end of warmup:
    `lr * (1 - (step - warmup) / (num_train_steps - warmup))`.

    >>> s = WarmupLinearDecay(1.0, num_train_steps=10, num_warmup_steps=2)
    >>> [round(float(s(i)), 3) for i in (0, 1, 2, 5, 10, 12)]
    [0.0, 0.5, 0.8, 0.5, 0.0, 0.0]
    """

    def __init__(self, learning_rate: float, num_train_steps: int, num_warmup_steps: int = 0,
                 decay_from_warmup_end: bool = False):
        if num_train_steps <= 0:
            raise ValueError(f"num_train_steps must be positive, got {num_train_steps}")
        self.learning_rate = float(learning_rate)
        self.num_train_steps = int(num_train_steps)
        self.num_warmup_steps = int(num_warmup_steps)
        self.decay_from_warmup_end = bool(decay_from_warmup_end)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        lr = tf.constant(self.learning_rate, tf.float32)
        total = float(self.num_train_steps)
        warmup = float(self.num_warmup_steps)
        if self.decay_from_warmup_end:
            span = max(total - warmup, 1.0)
            decayed = lr * (1.0 - tf.minimum(tf.maximum(step - warmup, 0.0), span) / span)
        else:
            decayed = lr * (1.0 - tf.minimum(step, total) / total)
        if self.num_warmup_steps > 0:
            warm = lr * step / warmup
            return tf.where(step < warmup, warm, decayed)
        return decayed

    def get_config(self):
        return {"learning_rate": self.learning_rate, "num_train_steps": self.num_train_steps,
                "num_warmup_steps": self.num_warmup_steps,
                "decay_from_warmup_end": self.decay_from_warmup_end}


class _ReducedGradientsOptimizer(keras.optimizers.Optimizer):
    """Base of our optimizers: gradients arrive summed over replicas; path-based decay.

    Keras 3 matches `exclude_from_weight_decay` against `variable.name`, which is only
    the leaf (`gamma`, `bias`); we match the full path (`encoder/.../layer_norm/gamma`).
    """

    # The training loop checks this before skipping Keras's own all-reduce.
    expects_reduced_gradients = True

    def __init__(self, learning_rate, weight_decay_rate=0.01,
                 exclude_from_weight_decay: Sequence[str] = DEFAULT_EXCLUDE,
                 global_clipnorm: Optional[float] = 1.0, name="optimizer", **kwargs):
        super().__init__(learning_rate=learning_rate, global_clipnorm=global_clipnorm,
                         name=name, **kwargs)
        self.weight_decay_rate = float(weight_decay_rate)
        self.exclude_patterns = tuple(exclude_from_weight_decay or ())
        self._decay_flags = []

    def _wants_decay(self, variable) -> bool:
        path = getattr(variable, "path", None) or variable.name
        return self.weight_decay_rate > 0 and not any(
            re.search(p, path) for p in self.exclude_patterns)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._decay_flags = [self._wants_decay(v) for v in var_list]
        self._build_slots(var_list)

    def _build_slots(self, var_list):
        self._m = [self.add_variable_from_reference(v, "m") for v in var_list]
        self._v = [self.add_variable_from_reference(v, "v") for v in var_list]

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return grads_and_vars  # already summed by the training loop

    def _moments(self, gradient, variable):
        """Updates m and v in place and returns (m, v, step) as float32 tensors."""
        index = self._get_variable_index(variable)
        m, v = self._m[index], self._v[index]
        b1 = tf.cast(self.beta_1, variable.dtype)
        b2 = tf.cast(self.beta_2, variable.dtype)
        gradient = tf.cast(gradient, variable.dtype)
        self.assign(m, b1 * m + (1.0 - b1) * gradient)
        self.assign(v, b2 * v + (1.0 - b2) * tf.square(gradient))
        return m, v, tf.cast(self.iterations + 1, variable.dtype), index

    def get_config(self):
        config = super().get_config()
        config.update(weight_decay_rate=self.weight_decay_rate,
                      exclude_from_weight_decay=list(self.exclude_patterns))
        return config


@keras.saving.register_keras_serializable(package="bert_tf")
class AdamWeightDecay(_ReducedGradientsOptimizer):
    """The original BERT optimizer (no bias correction) or, as an option, AdamW.

    Per variable: `m = b1 m + (1-b1) g`, `v = b2 v + (1-b2) g^2`,
    `u = m / (sqrt(v) + eps)` (with `bias_correction`, `m/(1-b1^t)` and `v/(1-b2^t)`
    instead of m and v), `u += weight_decay_rate * w` unless the path matches
    `exclude_from_weight_decay`, `w -= lr * u`.

    >>> import numpy as np
    >>> w = keras.Variable(np.ones(2, "float32"), name="kernel")
    >>> opt = AdamWeightDecay(0.1, global_clipnorm=None)
    >>> opt.apply([np.array([1.0, -1.0], "float32")], [w])
    >>> np.round(w.numpy(), 4)   # 1 - 0.1 * (0.1 / (sqrt(0.001) + 1e-6) + 0.01 * 1)
    array([0.6828, 1.3152], dtype=float32)
    """

    def __init__(self, learning_rate=1e-4, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-6, bias_correction=False,
                 exclude_from_weight_decay: Sequence[str] = DEFAULT_EXCLUDE,
                 global_clipnorm: Optional[float] = 1.0, name="adam_weight_decay", **kwargs):
        super().__init__(learning_rate, weight_decay_rate, exclude_from_weight_decay,
                         global_clipnorm, name=name, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        self.bias_correction = bool(bias_correction)

    def update_step(self, gradient, variable, learning_rate):
        # One fused kernel per variable (ResourceApplyAdam: m, v and the variable in one
        # multithreaded pass) instead of ~10 elementwise ops, each a pass over the
        # variable: on CPU the update of the 30k x H word embeddings alone took ~10% of
        # a fine-tuning step. The decoupled decay goes first (it reads the old weights,
        # as `u += wd * w` does).
        index = self._get_variable_index(variable)
        dtype = variable.dtype
        lr = tf.cast(learning_rate, dtype)
        if self._decay_flags[index]:
            self.assign_sub(variable, lr * self.weight_decay_rate * variable)
        b1, b2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        epsilon = tf.cast(self.epsilon, dtype)
        if self.bias_correction:
            # The kernel scales lr by sqrt(1 - b2^t) / (1 - b1^t); eps scaled by
            # sqrt(1 - b2^t) makes that m_hat / (sqrt(v_hat) + eps) exactly.
            t = tf.cast(self.iterations + 1, dtype)
            b1_power, b2_power = tf.pow(b1, t), tf.pow(b2, t)
            epsilon = epsilon * tf.sqrt(1.0 - b2_power)
        else:  # powers 0: lr unscaled, i.e. m / (sqrt(v) + eps)
            b1_power = b2_power = tf.zeros([], dtype)
        m, v = self._m[index], self._v[index]
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable), m=_handle(m), v=_handle(v), beta1_power=b1_power,
            beta2_power=b2_power, lr=lr, beta1=b1, beta2=b2, epsilon=epsilon,
            grad=tf.cast(gradient, dtype), use_locking=False)

    def get_config(self):
        config = super().get_config()
        config.update(beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon,
                      bias_correction=self.bias_correction)
        return config


@keras.saving.register_keras_serializable(package="bert_tf")
class Lamb(_ReducedGradientsOptimizer):
    """LAMB (You et al., 2019): the AdamW update rescaled per variable by a trust ratio.

    `u = m_hat / (sqrt(v_hat) + eps) + wd * w` (bias-corrected moments; decay as
    AdamWeightDecay), `r = ||w|| / ||u||` (1 when either norm is 0, and for excluded
    variables), `w -= lr * r * u`.

    >>> import numpy as np
    >>> w = keras.Variable(np.array([3.0, 4.0], "float32"), name="kernel")
    >>> Lamb(0.1, weight_decay_rate=0.0, global_clipnorm=None).apply(
    ...     [np.array([1.0, 1.0], "float32")], [w])
    >>> np.round(w.numpy(), 4)   # u = [1, 1], r = 5 / sqrt(2)
    array([2.6464, 3.6464], dtype=float32)
    """

    def __init__(self, learning_rate=1e-3, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-6, exclude_from_weight_decay: Sequence[str] = DEFAULT_EXCLUDE,
                 exclude_from_layer_adaptation: Optional[Sequence[str]] = None,
                 global_clipnorm: Optional[float] = 1.0, name="lamb", **kwargs):
        super().__init__(learning_rate, weight_decay_rate, exclude_from_weight_decay,
                         global_clipnorm, name=name, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        self.exclude_from_layer_adaptation = tuple(
            self.exclude_patterns if exclude_from_layer_adaptation is None
            else exclude_from_layer_adaptation)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._adapt_flags = [
            not any(re.search(p, getattr(v, "path", None) or v.name)
                    for p in self.exclude_from_layer_adaptation) for v in var_list]

    def update_step(self, gradient, variable, learning_rate):
        m, v, t, index = self._moments(gradient, variable)
        lr = tf.cast(learning_rate, variable.dtype)
        m_hat = m / (1.0 - tf.pow(tf.cast(self.beta_1, variable.dtype), t))
        v_hat = v / (1.0 - tf.pow(tf.cast(self.beta_2, variable.dtype), t))
        update = m_hat / (tf.sqrt(v_hat) + self.epsilon)
        if self._decay_flags[index]:
            update += self.weight_decay_rate * variable
        ratio = 1.0
        if self._adapt_flags[index]:
            w_norm = tf.norm(variable)
            u_norm = tf.norm(update)
            ratio = tf.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, 1.0)
        self.assign_sub(variable, lr * ratio * update)

    def get_config(self):
        config = super().get_config()
        config.update(beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon,
                      exclude_from_layer_adaptation=list(self.exclude_from_layer_adaptation))
        return config


OPTIMIZERS = ("adamw", "adamw_bias_correction", "lamb")


def create_optimizer(learning_rate: float, num_train_steps: int, num_warmup_steps: int = 0,
                     optimizer: str = "adamw", weight_decay_rate: float = 0.01,
                     decay_from_warmup_end: bool = False, clip_norm: Optional[float] = 1.0,
                     mixed_precision: str = "float32", beta_1: float = 0.9,
                     beta_2: float = 0.999, epsilon: float = 1e-6):
    """The optimizer the CLIs use: schedule + AdamWeightDecay/LAMB (+ loss scaling).

    `optimizer`: `adamw` (the original: no bias correction), `adamw_bias_correction`
    (standard AdamW) or `lamb`. With `mixed_precision="mixed_float16"` the result is a
    `keras.optimizers.LossScaleOptimizer` (dynamic loss scaling) around it. The schedule
    is also available as `.learning_rate_schedule`.
    """
    schedule = WarmupLinearDecay(learning_rate, num_train_steps, num_warmup_steps,
                                 decay_from_warmup_end=decay_from_warmup_end)
    if optimizer in ("adamw", "adamw_bias_correction"):
        opt = AdamWeightDecay(schedule, weight_decay_rate=weight_decay_rate, beta_1=beta_1,
                              beta_2=beta_2, epsilon=epsilon,
                              bias_correction=optimizer == "adamw_bias_correction",
                              global_clipnorm=clip_norm)
    elif optimizer == "lamb":
        opt = Lamb(schedule, weight_decay_rate=weight_decay_rate, beta_1=beta_1, beta_2=beta_2,
                   epsilon=epsilon, global_clipnorm=clip_norm)
    else:
        raise ValueError(f"--optimizer={optimizer!r}: expected one of {', '.join(OPTIMIZERS)}")
    if mixed_precision == "mixed_float16":
        opt = keras.optimizers.LossScaleOptimizer(opt)
    opt.learning_rate_schedule = schedule
    return opt
