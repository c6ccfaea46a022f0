"""Dropout whose masks differ across the replicas of a tf.distribute strategy, drawn from
16 random bits per unit; in training, a pure function of the run's seed and the step.

The Trainer (`bert_tf.training.loop`) runs each micro-batch's forward pass inside
`step_masks(seed)`, with `seed` from `training_step_seed(run seed, step)` and the
micro-batch index: there the k-th dropout call of the pass draws its mask from
`fold_in(seed, k)`. The masks of step N are then the same whether the run got there in
one go or was stopped and resumed (the checkpoint holds the run seed and the step; no
random-generator state), on every strategy, under XLA and with gradient accumulation.
Outside such a context (a model called with training=True elsewhere) each layer draws
from its Keras `SeedGenerator`, as `keras.layers.Dropout` does.
"""

import contextlib
import threading

import keras
import tensorflow as tf

_LEVELS = 1 << 16  # a unit is dropped when its 16 random bits fall below rate * 2**16
# Folded into the run seed: the masks' seeds apart from the input order's (same seed).
_DROPOUT_STREAM = 0x64726F70  # "drop"


class _StepMasks(threading.local):
    """The seed of the forward pass being traced, and how many dropout calls drew from
    it. Per thread: MirroredStrategy traces each replica's step in its own thread."""
    seed = None
    calls = 0


_STEP_MASKS = _StepMasks()


def _fold_in_replica(seed):
    """`seed` ([2] int64) with the replica id folded in when there are several replicas:
    they hold copies of the same seeds and would otherwise drop the same units."""
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        seed = tf.random.experimental.stateless_fold_in(
            seed, tf.cast(context.replica_id_in_sync_group, tf.int64))
    return seed


def training_step_seed(run_seed, step):
    """The [2] int64 dropout seed of training step `step` on this replica: a pure
    function of (`run_seed`, `step`, replica id). Call it in replica context.

    >>> a = training_step_seed(7, tf.constant(3, tf.int64))
    >>> bool(tf.reduce_all(a == training_step_seed(7, 3))), bool(tf.reduce_all(
    ...     a == training_step_seed(7, 4)))
    (True, False)
    """
    seed = tf.stack([tf.cast(run_seed, tf.int64), tf.constant(_DROPOUT_STREAM, tf.int64)])
    seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(step, tf.int64))
    return _fold_in_replica(seed)


@contextlib.contextmanager
def step_masks(seed):
    """Within it, the k-th `ReplicaDropout` call (k = 0, 1, ... in call order, which is
    the same in every trace of the same model) draws its mask from `fold_in(seed, k)`.

    Enter it around one forward pass (one micro-batch) while it is traced or run.

    >>> layer = ReplicaDropout(0.5)
    >>> def masks(seed):
    ...     with step_masks(tf.constant(seed, tf.int64)):
    ...         return [layer(tf.ones([64]), training=True).numpy() for _ in range(2)]
    >>> a, b = masks([1, 2]), masks([1, 2])
    >>> [bool((a[0] == b[0]).all()), bool((a[1] == b[1]).all()), bool((a[0] == a[1]).all())]
    [True, True, False]
    """
    outer = _STEP_MASKS.seed, _STEP_MASKS.calls
    _STEP_MASKS.seed, _STEP_MASKS.calls = seed, 0
    try:
        yield
    finally:
        _STEP_MASKS.seed, _STEP_MASKS.calls = outer


def stateless_dropout_16bit(inputs, rate: float, seed, noise_shape=None):
    """Drops units with probability `rate` (rounded to a multiple of 2**-16) and scales the
    kept ones by 1 / (1 - rate), from one Philox uint32 per two units.

    `tf.nn.experimental.stateless_dropout` draws a float32 per unit: on CPU that draw is
    the largest cost of dropout (6% of a bert_mini pretraining step); two units per
    32-bit word halve it (4.2 -> 2.5 ms for [32, 4, 128, 128] attention probabilities on 2
    cores). The rate moves by at most 2**-17 (0.1 becomes 6554 / 65536 = 0.100006), and the
    kept units are scaled by the exact inverse of the rounded keep probability, so the
    expectation is unchanged. Deterministic in `seed` (a [2] int32/int64 tensor).

    >>> import numpy as np
    >>> out = stateless_dropout_16bit(tf.ones([1000, 100]), 0.1, seed=tf.constant([1, 2]))
    >>> round(float(np.mean(out.numpy() == 0)), 2), round(float(np.mean(out.numpy())), 2)
    (0.1, 1.0)
    """
    threshold = int(round(rate * _LEVELS))
    if threshold <= 0:
        return inputs
    if threshold >= _LEVELS:
        return tf.zeros_like(inputs)
    scale = tf.constant(_LEVELS / (_LEVELS - threshold), inputs.dtype)
    shape = tf.shape(inputs) if noise_shape is None else noise_shape
    units = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform([(units + 1) // 2], seed, minval=None, maxval=None,
                                        dtype=tf.uint32)
    bits = tf.reshape(tf.bitcast(words, tf.uint16), [-1])
    keep = tf.reshape(bits[:units] >= tf.constant(threshold, tf.uint16), shape)
    return tf.where(keep, inputs * scale, tf.zeros([], inputs.dtype))


@keras.saving.register_keras_serializable(package="bert_tf")
class ReplicaDropout(keras.layers.Dropout):
    """`keras.layers.Dropout` whose masks are seeded by the training step (inside
    `step_masks`) or else by its `SeedGenerator` with the replica id folded in, drawn
    with `stateless_dropout_16bit`.

    Keras draws dropout masks from the layer's `SeedGenerator`, whose state is a
    variable: under MirroredStrategy / TPUStrategy / multi-worker every replica holds a
    copy initialised from the same seed, so every replica would drop the same units of
    its own examples (the effective dropout noise shrinks as replicas are added). With
    more than one replica this layer folds `replica_id_in_sync_group` into the seed (the
    Trainer's step seed has it folded in already). That state is not in any checkpoint:
    the Trainer seeds by the step instead, so a resumed run draws the masks the
    uninterrupted run drew (see the module doc). Same config, seed generator and
    checkpoint names as `keras.layers.Dropout`.

    Example:

    >>> import numpy as np
    >>> layer = ReplicaDropout(0.5, seed=1)
    >>> out = layer(np.ones((2, 8), "float32"), training=True)
    >>> sorted(set(np.asarray(out).ravel().tolist())) in ([0.0, 2.0], [2.0], [0.0])
    True
    """

    def call(self, inputs, training=False):
        if not training or self.rate <= 0:
            return inputs
        if self.rate >= 1.0:
            return tf.zeros_like(inputs)
        if _STEP_MASKS.seed is not None:
            seed = tf.random.experimental.stateless_fold_in(_STEP_MASKS.seed,
                                                            _STEP_MASKS.calls)
            _STEP_MASKS.calls += 1
        else:
            seed = _fold_in_replica(tf.cast(self.seed_generator.next(), tf.int64))
        # int32 seeds, as Keras casts them, so the op also compiles under XLA.
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
        noise_shape = None
        if self.noise_shape is not None:
            shape = tf.shape(inputs)
            noise_shape = [shape[i] if d is None else d for i, d in enumerate(self.noise_shape)]
        return stateless_dropout_16bit(inputs, self.rate, seed, noise_shape)
