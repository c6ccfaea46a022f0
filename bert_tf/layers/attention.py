"""Multi-head self-attention with a key padding mask, as in the original BERT."""

import math

import keras
import tensorflow as tf

from bert_tf.layers.dropout import ReplicaDropout


def attention_bias_from_mask(input_mask, dtype="float32"):
    """[batch, seq] 1/0 mask -> additive [batch, 1, 1, seq] bias (0 or -10000).

    Padded keys get -10000 (the original's constant, not -inf) so that a fully padded
    row still yields a finite softmax; queries are not masked.
    """
    mask = keras.ops.cast(input_mask, dtype)
    # expand_dims, not [:, None, None, :]: a strided slice with new axes has no LiteRT
    # builtin kernel, so that one op would make the LiteRT export need TF Select ops.
    return keras.ops.expand_dims(keras.ops.expand_dims(1.0 - mask, 1), 1) * -10000.0


def dense_on_tokens(layer, x):
    """Applies a Dense layer to [batch, seq, in] as one [batch * seq, in] matmul.

    Keras' Dense on 3-D input is a batched matmul plus a broadcast add, which TF's graph
    optimizer does not fuse; on 2-D input it becomes fused MatMul+BiasAdd kernels (about
    1.8x faster on CPU, as torch's Linear does). Same variables, same result.

    >>> import numpy as np
    >>> dense_on_tokens(keras.layers.Dense(3), np.ones((2, 5, 4), "float32")).shape
    TensorShape([2, 5, 3])
    """
    shape = keras.ops.shape(x)
    y = layer(keras.ops.reshape(x, (-1, shape[-1])))
    # The static output width, not -1: with an unknown batch size, -1 would make the
    # last dimension unknown too (and the LayerNorm after it unbuildable).
    return keras.ops.reshape(y, (shape[0], shape[1], y.shape[-1]))


@keras.saving.register_keras_serializable(package="bert_tf")
class BertSelfAttention(keras.layers.Layer):
    """Scaled dot-product self-attention over `num_heads` heads plus the output projection.

    Scores, the additive mask and the softmax are computed in float32 whatever the
    compute dtype (the serving graph's in the compute dtype: `attend`). Kernels are
    [hidden, hidden] like the original's `query/key/value` dense layers, so TF1
    checkpoints map onto them directly.

    Example:

    >>> import numpy as np
    >>> layer = BertSelfAttention(hidden_size=16, num_heads=2)
    >>> x = np.random.rand(2, 5, 16).astype("float32")
    >>> out, probs = layer(x, attention_bias_from_mask(np.ones((2, 5))), return_probs=True)
    >>> out.shape, probs.shape
    (TensorShape([2, 5, 16]), TensorShape([2, 2, 5, 5]))

    The serving graph (`bert_tf.serving.graph.InferenceAttention`) computes the same
    outputs from this layer's variables with query/key/value fused into one kernel.
    """

    def __init__(self, hidden_size, num_heads, initializer_range=0.02,
                 attention_dropout_rate=0.1, **kwargs):
        super().__init__(**kwargs)
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_heads {num_heads}")
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.head_size = hidden_size // num_heads
        self.initializer_range = initializer_range
        self.attention_dropout_rate = attention_dropout_rate
        dense = lambda name: keras.layers.Dense(
            hidden_size, name=name, dtype=self.dtype_policy,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range))
        self.query = dense("query")
        self.key = dense("key")
        self.value = dense("value")
        self.output_dense = dense("output")
        # In the layer's dtype: a dropout left at the global policy (float32 in a bfloat16
        # export) would cast the probabilities back to float32, and with them the
        # probabilities x values matmul.
        self.dropout = ReplicaDropout(attention_dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape):
        for layer in (self.query, self.key, self.value, self.output_dense):
            layer.build((None, None, self.hidden_size))
        self.built = True

    def _split_heads(self, x, batch, seq):
        x = keras.ops.reshape(x, (batch, seq, self.num_heads, self.head_size))
        return keras.ops.transpose(x, (0, 2, 1, 3))  # [batch, heads, seq, head_size]

    def attend(self, q, k, v, attention_bias, training, batch, seq, heads,
               softmax_dtype="float32"):
        """Attention of queries `q` over keys `k` and values `v` ([batch, heads, seq,
        head_size] each, `heads` of this layer's heads): ([batch, seq, heads * head_size]
        context, probs in `softmax_dtype`). The serving graph calls it on its fused heads,
        with the softmax in the compute dtype."""
        # The query is scaled after its matmul (folding the scale into the fused kernel
        # rounds differently: 2e-5 on MiniLM's outputs).
        q = q * keras.ops.cast(1.0 / math.sqrt(self.head_size), q.dtype)
        # The keys are read transposed by the matmul itself (adjoint_b): no transpose op.
        scores = keras.ops.cast(tf.matmul(q, k, adjoint_b=True), softmax_dtype)
        if attention_bias is not None:
            scores = scores + keras.ops.cast(attention_bias, softmax_dtype)
        probs = keras.ops.softmax(scores, axis=-1)
        dropped = self.dropout(keras.ops.cast(probs, self.compute_dtype), training=training)
        context = keras.ops.matmul(dropped, v)  # [batch, heads, seq, head_size]
        context = keras.ops.reshape(keras.ops.transpose(context, (0, 2, 1, 3)),
                                    (batch, seq, heads * self.head_size))
        return context, probs

    def call(self, hidden_states, attention_bias=None, training=None, return_probs=False):
        shape = keras.ops.shape(hidden_states)
        batch, seq = shape[0], shape[1]
        q = self._split_heads(dense_on_tokens(self.query, hidden_states), batch, seq)
        k = self._split_heads(dense_on_tokens(self.key, hidden_states), batch, seq)
        v = self._split_heads(dense_on_tokens(self.value, hidden_states), batch, seq)
        context, probs = self.attend(q, k, v, attention_bias, training, batch, seq,
                                     self.num_heads)
        output = dense_on_tokens(self.output_dense, context)
        return (output, probs) if return_probs else output

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, num_heads=self.num_heads,
                      initializer_range=self.initializer_range,
                      attention_dropout_rate=self.attention_dropout_rate)
        return config

