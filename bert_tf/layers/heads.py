"""Pretraining heads as the original has them: masked LM and next-sentence prediction."""

import keras
import tensorflow as tf

from bert_tf.layers.activations import get_activation
from bert_tf.layers.attention import dense_on_tokens
from bert_tf.layers.dropout import ReplicaDropout
from bert_tf.layers.normalization import float32_layer_norm


def gather_positions(sequence, positions):
    """[batch, seq, H] gathered at [batch, P] int positions -> [batch, P, H]."""
    positions = keras.ops.cast(positions, "int32")
    return keras.ops.take_along_axis(sequence, positions[:, :, None], axis=1)


@keras.saving.register_keras_serializable(package="bert_tf")
class MaskedLMHead(keras.layers.Layer):
    """Masked-LM head: dense + activation + LayerNorm, then the tied word embeddings.

    Only the `masked_lm_positions` are projected onto the vocabulary (never every
    position), which is what makes pretraining affordable. Logits are float32.
    The output matrix is the embedding variable itself, passed in at construction
    (`embedding_weights`); `output_bias` is this head's own [vocab] vector.

    Example:

    >>> import numpy as np, keras
    >>> table = keras.Variable(np.random.rand(50, 8).astype("float32"))
    >>> head = MaskedLMHead(vocab_size=50, hidden_size=8, embedding_weights=table)
    >>> head(np.random.rand(2, 6, 8).astype("float32"), np.array([[1, 2], [0, 5]])).shape
    TensorShape([2, 2, 50])
    """

    def __init__(self, vocab_size, hidden_size, hidden_act="gelu", initializer_range=0.02,
                 layer_norm_eps=1e-12, embedding_weights=None, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.activation = get_activation(hidden_act)
        self.embedding_weights = embedding_weights
        self.transform = keras.layers.Dense(
            hidden_size, dtype=self.dtype_policy, name="transform",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range))
        self.layer_norm = float32_layer_norm(layer_norm_eps, "layer_norm")

    def build(self, input_shape=None):
        if self.embedding_weights is None:
            raise ValueError("MaskedLMHead needs `embedding_weights` (the encoder's word "
                             "embedding variable) to tie its output projection")
        self.transform.build((None, self.hidden_size))
        self.layer_norm.build((None, self.hidden_size))
        self.output_bias = self.add_weight(name="output_bias", shape=(self.vocab_size,),
                                           initializer="zeros")
        self.built = True

    def call(self, sequence_output, masked_lm_positions):
        x = gather_positions(sequence_output, masked_lm_positions)
        x = self.activation(dense_on_tokens(self.transform, x))
        x = self.layer_norm(keras.ops.cast(x, "float32"))
        table = keras.ops.cast(self.embedding_weights, "float32")
        # x @ table^T as one 2-D MatMul with transpose_b: its gradient w.r.t. the table
        # is MatMul(d_logits, x, transpose_a) = [vocab, H] directly. Multiplying by
        # transpose(table) instead made the backward pass transpose a [H, vocab]
        # gradient (7.8M floats for bert_mini, ~10% of a step on CPU). Same result.
        shape = keras.ops.shape(x)
        flat = tf.reshape(x, [-1, self.hidden_size])
        logits = tf.linalg.matmul(flat, table, transpose_b=True)
        logits = tf.nn.bias_add(logits, keras.ops.cast(self.output_bias, "float32"))
        return keras.ops.reshape(logits, (shape[0], shape[1], self.vocab_size))

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                      hidden_act=self.hidden_act, initializer_range=self.initializer_range,
                      layer_norm_eps=self.layer_norm_eps)
        return config


@keras.saving.register_keras_serializable(package="bert_tf")
class ClassificationHead(keras.layers.Layer):
    """Dropout + dense on a pooled vector: the next-sentence head and GLUE classifiers.

    For next-sentence prediction use `num_classes=2`, `dropout_rate=0` (the original
    applies no dropout there). Logits are float32.

    Example:

    >>> import numpy as np
    >>> ClassificationHead(num_classes=2, hidden_size=8)(np.zeros((3, 8), "float32")).shape
    TensorShape([3, 2])
    """

    def __init__(self, num_classes, hidden_size, dropout_rate=0.0, initializer_range=0.02,
                 **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.hidden_size = hidden_size
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.dropout = ReplicaDropout(dropout_rate)
        self.dense = keras.layers.Dense(
            num_classes, dtype=self.dtype_policy, name="dense",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range))

    def build(self, input_shape=None):
        self.dense.build((None, self.hidden_size))
        self.built = True

    def call(self, pooled_output, training=None):
        return keras.ops.cast(self.dense(self.dropout(pooled_output, training=training)),
                              "float32")

    def get_config(self):
        config = super().get_config()
        config.update(num_classes=self.num_classes, hidden_size=self.hidden_size,
                      dropout_rate=self.dropout_rate, initializer_range=self.initializer_range)
        return config
