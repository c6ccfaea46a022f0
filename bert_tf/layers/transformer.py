"""One post-LayerNorm transformer block of the BERT encoder."""

import keras

from bert_tf.layers.activations import get_activation
from bert_tf.layers.attention import BertSelfAttention
from bert_tf.layers.dropout import ReplicaDropout
from bert_tf.layers.normalization import float32_layer_norm


@keras.saving.register_keras_serializable(package="bert_tf")
class TransformerBlock(keras.layers.Layer):
    """Self-attention -> dropout -> add & LayerNorm -> FFN (act) -> dropout -> add & LayerNorm.

    This is the original's post-LN order. LayerNorms compute in float32.

    Example:

    >>> import numpy as np
    >>> block = TransformerBlock(hidden_size=16, num_heads=2, intermediate_size=64)
    >>> x = np.random.rand(2, 5, 16).astype("float32")
    >>> block(x).shape
    TensorShape([2, 5, 16])

    The serving graph (`bert_tf.serving.graph.InferenceBlock`) computes the same outputs
    from this layer's variables (query/key/value fused, the layer optionally split into
    independent chains).
    """

    def __init__(self, hidden_size, num_heads, intermediate_size, hidden_act="gelu",
                 hidden_dropout_rate=0.1, attention_dropout_rate=0.1,
                 initializer_range=0.02, layer_norm_eps=1e-12, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_rate = hidden_dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.activation = get_activation(hidden_act)
        init = lambda: keras.initializers.TruncatedNormal(stddev=initializer_range)
        self.attention = BertSelfAttention(
            hidden_size, num_heads, initializer_range=initializer_range,
            attention_dropout_rate=attention_dropout_rate, dtype=self.dtype_policy,
            name="attention")
        self.attention_dropout = ReplicaDropout(hidden_dropout_rate, dtype=self.dtype_policy)
        self.attention_layer_norm = float32_layer_norm(layer_norm_eps, "attention_layer_norm")
        self.intermediate = keras.layers.Dense(intermediate_size, kernel_initializer=init(),
                                               dtype=self.dtype_policy, name="intermediate")
        self.output_dense = keras.layers.Dense(hidden_size, kernel_initializer=init(),
                                               dtype=self.dtype_policy, name="output")
        self.output_dropout = ReplicaDropout(hidden_dropout_rate, dtype=self.dtype_policy)
        self.output_layer_norm = float32_layer_norm(layer_norm_eps, "output_layer_norm")

    def build(self, input_shape):
        self.attention.build(input_shape)
        self.attention_layer_norm.build((None, None, self.hidden_size))
        self.intermediate.build((None, None, self.hidden_size))
        self.output_dense.build((None, None, self.intermediate_size))
        self.output_layer_norm.build((None, None, self.hidden_size))
        self.built = True

    def call(self, hidden_states, attention_bias=None, training=None, return_probs=False):
        attended = self.attention(hidden_states, attention_bias, training=training,
                                  return_probs=return_probs)
        if return_probs:
            attended, probs = attended
        y = self.after_attention(hidden_states, attended, training=training)
        return (y, probs) if return_probs else y

    def after_attention(self, hidden_states, attended, training=None, layer_norm=None):
        """The block from the attention's output `attended` on: dropout, add & LayerNorm,
        FFN, dropout, add & LayerNorm (the serving graph runs it after its fused
        attention, with its own `layer_norm(norm_layer, x)`)."""
        norm = layer_norm or (lambda layer, x: layer(x))
        attended = self.attention_dropout(attended, training=training)
        x = norm(self.attention_layer_norm, keras.ops.cast(hidden_states, "float32")
                 + keras.ops.cast(attended, "float32"))
        x = keras.ops.cast(x, self.compute_dtype)
        # On [batch * seq, H]: MatMul+BiasAdd(+GELU) fuse (see dense_on_tokens).
        shape = keras.ops.shape(x)
        flat = keras.ops.reshape(x, (-1, self.hidden_size))
        ffn = self.output_dense(self.activation(self.intermediate(flat)))
        ffn = keras.ops.reshape(ffn, (shape[0], shape[1], self.hidden_size))
        ffn = self.output_dropout(ffn, training=training)
        y = norm(self.output_layer_norm,
                 keras.ops.cast(x, "float32") + keras.ops.cast(ffn, "float32"))
        return keras.ops.cast(y, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, num_heads=self.num_heads,
                      intermediate_size=self.intermediate_size, hidden_act=self.hidden_act,
                      hidden_dropout_rate=self.hidden_dropout_rate,
                      attention_dropout_rate=self.attention_dropout_rate,
                      initializer_range=self.initializer_range,
                      layer_norm_eps=self.layer_norm_eps)
        return config
