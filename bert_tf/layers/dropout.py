"""Dropout whose masks differ across the replicas of a tf.distribute strategy, drawn from
16 random bits per unit."""

import keras
import tensorflow as tf

_LEVELS = 1 << 16  # a unit is dropped when its 16 random bits fall below rate * 2**16


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
    """`keras.layers.Dropout` that folds the replica id into its seed and draws its mask
    with `stateless_dropout_16bit`.

    Keras draws dropout masks from the layer's `SeedGenerator`, whose state is a
    variable: under MirroredStrategy / TPUStrategy / multi-worker every replica holds a
    copy initialised from the same seed, so every replica would drop the same units of
    its own examples (the effective dropout noise shrinks as replicas are added). With
    more than one replica this layer folds `replica_id_in_sync_group` into the seed.
    Same config, seed generator and checkpoint names as `keras.layers.Dropout`.

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
        seed = tf.cast(self.seed_generator.next(), tf.int64)
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            seed = tf.random.experimental.stateless_fold_in(
                seed, tf.cast(context.replica_id_in_sync_group, tf.int64))
        # int32 seeds, as Keras casts them, so the op also compiles under XLA.
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
        noise_shape = None
        if self.noise_shape is not None:
            shape = tf.shape(inputs)
            noise_shape = [shape[i] if d is None else d for i, d in enumerate(self.noise_shape)]
        return stateless_dropout_16bit(inputs, self.rate, seed, noise_shape)
