"""One post-LayerNorm transformer block of the BERT encoder."""

import keras
import tensorflow as tf

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

    For serving, `fuse_for_inference(branches=2)` runs inference calls as two independent
    halves (the attention's heads and the FFN's units split between them, summed in
    float32 with the residual) that TF's executor can run on two inter-op threads at once:

    >>> want = block(x)
    >>> block.fuse_for_inference(branches=2)
    >>> bool(np.allclose(block(x), want, atol=1e-5))
    True
    >>> block.unfuse_for_inference()
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
        self._ffn_branches = None

    def build(self, input_shape):
        self.attention.build(input_shape)
        self.attention_layer_norm.build((None, None, self.hidden_size))
        self.intermediate.build((None, None, self.hidden_size))
        self.output_dense.build((None, None, self.intermediate_size))
        self.output_layer_norm.build((None, None, self.hidden_size))
        self.built = True

    def fuse_for_inference(self, branches: int = 1):
        """Snapshots the weights into the inference fast path (for export: see
        `bert_tf.serving.fused_for_inference`; the snapshots do not follow later changes
        of the weights until this is called again): the attention's query/key/value fused
        (`BertSelfAttention.fuse_for_inference`) and, with `branches` > 1, the layer split
        into that many independent chains: each with its heads of the attention and its
        `intermediate_size / branches` FFN units (columns of the intermediate kernel, rows
        of the output kernel). Their float32 outputs are summed with the residual, so a
        graph executor with that many inter-op threads (and one intra-op thread each)
        spreads one request over as many cores without handing every small op to a thread
        pool. Training calls and `return_probs` keep the unsplit layer."""
        if branches < 1 or self.intermediate_size % branches:
            raise ValueError(f"branches={branches} must divide intermediate_size="
                             f"{self.intermediate_size}")
        self.attention.fuse_for_inference(branches)
        if branches == 1:
            self._ffn_branches = None
            return
        kernel = tf.convert_to_tensor(self.intermediate.kernel)
        bias = tf.convert_to_tensor(self.intermediate.bias)
        rows = tf.convert_to_tensor(self.output_dense.kernel)
        width = self.intermediate_size // branches
        # Plain holders (lists of tuples), not weights Keras or tf.train.Checkpoint tracks;
        # the output bias once, in the first branch (its MatMul+BiasAdd kernel adds it).
        self._ffn_branches = [
            tuple(tf.Variable(t, trainable=False, name=name) for t, name in (
                (kernel[:, j * width:(j + 1) * width], "intermediate_kernel_columns"),
                (bias[j * width:(j + 1) * width], "intermediate_bias_columns"),
                (rows[j * width:(j + 1) * width], "output_kernel_rows")))
            + ((tf.Variable(tf.convert_to_tensor(self.output_dense.bias), trainable=False,
                            name="output_bias"),) if j == 0 else (None,))
            for j in range(branches)]

    def unfuse_for_inference(self):
        """Drops the snapshots: calls read the layer's weights again."""
        self.attention.unfuse_for_inference()
        self._ffn_branches = None

    @property
    def inference_branches(self) -> int:
        """How many chains inference calls are split into (1: not split)."""
        return len(self._ffn_branches or ()) or 1

    def call_branches(self, hidden_states, attention_bias=None):
        """The split inference path (`fuse_for_inference(branches > 1)`): float32 out, the
        residual stream kept in float32 (the encoder passes it from layer to layer, so the
        only cast per layer half is the one all branches read).

        Each fork in the graph (a tensor that several expensive ops wait for) makes TF's
        executor hand one of them to another inter-op thread: tens of microseconds on a
        VM. Here the forks are the branches themselves (one cast feeds all of them), and
        the residual sums are one `tf.add_n` each."""
        shape = keras.ops.shape(hidden_states)
        residual = tf.reshape(keras.ops.cast(hidden_states, "float32"), (-1, self.hidden_size))
        x = self.attention_layer_norm(tf.add_n(
            [residual] + self.attention.partial_outputs(hidden_states, attention_bias)))
        inner = keras.ops.cast(x, self.compute_dtype)
        parts = [x]
        for kernel, bias, rows, output_bias in self._ffn_branches:
            y = self.activation(tf.nn.bias_add(tf.matmul(inner, tf.cast(kernel, inner.dtype)),
                                               tf.cast(bias, inner.dtype)))
            y = tf.matmul(y, tf.cast(rows, y.dtype))
            if output_bias is not None:  # MatMul+BiasAdd: the bias costs no op of its own
                y = tf.nn.bias_add(y, tf.cast(output_bias, y.dtype))
            parts.append(keras.ops.cast(y, "float32"))
        y = self.output_layer_norm(tf.add_n(parts))
        return tf.reshape(y, (shape[0], shape[1], self.hidden_size))

    def call(self, hidden_states, attention_bias=None, training=None, return_probs=False):
        if self._ffn_branches is not None and not training and not return_probs:
            return keras.ops.cast(self.call_branches(hidden_states, attention_bias),
                                  self.compute_dtype)
        attended = self.attention(hidden_states, attention_bias, training=training,
                                  return_probs=return_probs)
        if return_probs:
            attended, probs = attended
        attended = self.attention_dropout(attended, training=training)
        x = self.attention_layer_norm(keras.ops.cast(hidden_states, "float32")
                                      + keras.ops.cast(attended, "float32"))
        x = keras.ops.cast(x, self.compute_dtype)
        # On [batch * seq, H]: MatMul+BiasAdd(+GELU) fuse (see dense_on_tokens).
        shape = keras.ops.shape(x)
        flat = keras.ops.reshape(x, (-1, self.hidden_size))
        ffn = self.output_dense(self.activation(self.intermediate(flat)))
        ffn = keras.ops.reshape(ffn, (shape[0], shape[1], self.hidden_size))
        ffn = self.output_dropout(ffn, training=training)
        y = self.output_layer_norm(keras.ops.cast(x, "float32") + keras.ops.cast(ffn, "float32"))
        y = keras.ops.cast(y, self.compute_dtype)
        return (y, probs) if return_probs else y

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, num_heads=self.num_heads,
                      intermediate_size=self.intermediate_size, hidden_act=self.hidden_act,
                      hidden_dropout_rate=self.hidden_dropout_rate,
                      attention_dropout_rate=self.attention_dropout_rate,
                      initializer_range=self.initializer_range,
                      layer_norm_eps=self.layer_norm_eps)
        return config
