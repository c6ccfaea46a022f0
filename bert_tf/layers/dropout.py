"""Dropout whose masks differ across the replicas of a tf.distribute strategy."""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="bert_tf")
class ReplicaDropout(keras.layers.Dropout):
    """`keras.layers.Dropout` that folds the replica id into its seed.

    Keras draws dropout masks from the layer's `SeedGenerator`, whose state is a
    variable: under MirroredStrategy / TPUStrategy / multi-worker every replica holds a
    copy initialised from the same seed, so every replica would drop the same units of
    its own examples (the effective dropout noise shrinks as replicas are added). With
    more than one replica this layer folds `replica_id_in_sync_group` into the seed;
    with one it is exactly `keras.layers.Dropout` (same masks, same checkpoint names).

    Example:

    >>> import numpy as np
    >>> layer = ReplicaDropout(0.5, seed=1)
    >>> out = layer(np.ones((2, 8), "float32"), training=True)
    >>> sorted(set(np.asarray(out).ravel().tolist())) in ([0.0, 2.0], [2.0], [0.0])
    True
    """

    def call(self, inputs, training=False):
        context = tf.distribute.get_replica_context()
        if (not training or self.rate <= 0 or context is None
                or context.num_replicas_in_sync <= 1):
            return super().call(inputs, training=training)
        if self.rate >= 1.0:
            return tf.zeros_like(inputs)
        seed = tf.cast(self.seed_generator.next(), tf.int64)
        seed = tf.random.experimental.stateless_fold_in(
            seed, tf.cast(context.replica_id_in_sync_group, tf.int64))
        # int32 seeds, as Keras casts them, so the op also compiles under XLA.
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
        noise_shape = None
        if self.noise_shape is not None:
            shape = tf.shape(inputs)
            noise_shape = [shape[i] if d is None else d for i, d in enumerate(self.noise_shape)]
        return tf.nn.experimental.stateless_dropout(inputs, rate=self.rate,
                                                    noise_shape=noise_shape, seed=seed)
