"""The pooler: a tanh dense layer on the first ([CLS]) position."""

import keras


@keras.saving.register_keras_serializable(package="bert_tf")
class Pooler(keras.layers.Layer):
    """`tanh(W h_[CLS] + b)`, the vector the paper's sentence-level heads use.

    Example:

    >>> import numpy as np
    >>> Pooler(hidden_size=8)(np.zeros((3, 4, 8), "float32")).shape
    TensorShape([3, 8])
    """

    def __init__(self, hidden_size, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(
            hidden_size, activation="tanh", dtype=self.dtype_policy, name="dense",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range))

    def build(self, input_shape):
        self.dense.build((None, self.hidden_size))
        self.built = True

    def call(self, sequence_output):
        return self.dense(sequence_output[:, 0, :])

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, initializer_range=self.initializer_range)
        return config
