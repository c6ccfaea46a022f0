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
    compute dtype. Kernels are [hidden, hidden] like the original's `query/key/value`
    dense layers, so TF1 checkpoints map onto them directly.

    Example:

    >>> import numpy as np
    >>> layer = BertSelfAttention(hidden_size=16, num_heads=2)
    >>> x = np.random.rand(2, 5, 16).astype("float32")
    >>> out, probs = layer(x, attention_bias_from_mask(np.ones((2, 5))), return_probs=True)
    >>> out.shape, probs.shape
    (TensorShape([2, 5, 16]), TensorShape([2, 2, 5, 5]))

    For serving, `fuse_for_inference()` snapshots the query/key/value weights into one
    [hidden, 3 * hidden] kernel; inference calls then run one matmul and one head
    transpose for all three instead of three of each (the same outputs; training calls
    are unchanged) until `unfuse_for_inference()`:

    >>> layer.fuse_for_inference()
    >>> bool(np.allclose(layer(x), out, atol=1e-5))
    True

    `fuse_for_inference(branches=2)` splits the heads in two independent halves, each with
    its own query/key/value kernel and its rows of the output kernel (`partial_outputs`):
    branches a graph executor can run at once on two inter-op threads.

    >>> layer.fuse_for_inference(branches=2)
    >>> bool(np.allclose(layer(x), out, atol=1e-5))
    True
    >>> layer.unfuse_for_inference()
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
        self._fused = None

    def build(self, input_shape):
        for layer in (self.query, self.key, self.value, self.output_dense):
            layer.build((None, None, self.hidden_size))
        self.built = True

    def _split_heads(self, x, batch, seq):
        x = keras.ops.reshape(x, (batch, seq, self.num_heads, self.head_size))
        return keras.ops.transpose(x, (0, 2, 1, 3))  # [batch, heads, seq, head_size]

    def fuse_for_inference(self, branches: int = 1):
        """Snapshots query, key and value into one kernel and bias for inference calls.

        Meant for export (`bert_tf.serving.fused_for_inference` fuses while an export
        traces its functions, then unfuses): the snapshot does not follow later changes
        of the weights, and is not part of the layer's checkpoint (the variables keep
        their names; a SavedModel saves what its functions use). Calls with
        `training=True` or `return_probs=True` keep the three separate matmuls.

        `branches` > 1 (a divisor of `num_heads`) splits the heads into that many groups,
        each with its own query/key/value kernel ([hidden, 3 * hidden / branches]) and its
        rows of the output kernel: independent chains of ops that TF's executor runs on
        separate inter-op threads (`partial_outputs`).
        """
        if branches < 1 or self.num_heads % branches:
            raise ValueError(f"branches={branches} must divide num_heads={self.num_heads}")
        dense = (self.query, self.key, self.value)
        kernels = [tf.convert_to_tensor(d.kernel) for d in dense]
        biases = [tf.convert_to_tensor(d.bias) for d in dense]
        width = self.hidden_size // branches
        self._fused = []
        for j in range(branches):
            cols = slice(j * width, (j + 1) * width)
            # Plain holders, not attributes Keras or tf.train.Checkpoint would track.
            self._fused.append(_FusedQKV(
                tf.Variable(tf.concat([k[:, cols] for k in kernels], axis=1),
                            trainable=False, name="fused_qkv_kernel"),
                tf.Variable(tf.concat([b[cols] for b in biases], axis=0),
                            trainable=False, name="fused_qkv_bias"),
                None if branches == 1 else tf.Variable(
                    tf.convert_to_tensor(self.output_dense.kernel)[cols],
                    trainable=False, name="output_kernel_rows"),
                # The output bias, once (group 0 adds it).
                None if branches == 1 or j else tf.Variable(
                    tf.convert_to_tensor(self.output_dense.bias),
                    trainable=False, name="output_bias")))

    def unfuse_for_inference(self):
        """Drops the snapshot: inference calls read the three kernels again (functions
        traced while fused keep the snapshot they captured)."""
        self._fused = None

    def _fused_heads(self, part, hidden_states, batch, seq):
        # One [tokens, 3 * width] matmul (+bias) and one transpose to
        # [3, batch, heads, seq, size] instead of three of each: at small shapes every
        # oneDNN op costs tens of microseconds of thread dispatch whatever its size, so the
        # op count matters as much as the FLOPs.
        x = tf.reshape(hidden_states, (-1, self.hidden_size))
        qkv = tf.matmul(x, tf.cast(part.kernel, x.dtype)) + tf.cast(part.bias, x.dtype)
        heads = self.num_heads // len(self._fused)
        qkv = tf.reshape(qkv, (batch, seq, 3, heads, self.head_size))
        return tf.unstack(tf.transpose(qkv, (2, 0, 3, 1, 4)))

    def _attend(self, q, k, v, attention_bias, training, batch, seq, heads):
        """Attention over `heads` heads: ([batch, seq, heads * size] context, float32
        probs)."""
        # The query is scaled after its matmul (folding the scale into the fused kernel
        # rounds differently: 2e-5 on MiniLM's outputs).
        q = q * keras.ops.cast(1.0 / math.sqrt(self.head_size), q.dtype)
        # The keys are read transposed by the matmul itself (adjoint_b): no transpose op.
        scores = keras.ops.cast(tf.matmul(q, k, adjoint_b=True), "float32")
        if attention_bias is not None:
            scores = scores + keras.ops.cast(attention_bias, "float32")
        probs = keras.ops.softmax(scores, axis=-1)
        dropped = self.dropout(keras.ops.cast(probs, self.compute_dtype), training=training)
        context = keras.ops.matmul(dropped, v)  # [batch, heads, seq, head_size]
        context = keras.ops.reshape(keras.ops.transpose(context, (0, 2, 1, 3)),
                                    (batch, seq, heads * self.head_size))
        return context, probs

    def partial_outputs(self, hidden_states, attention_bias=None):
        """Inference with `fuse_for_inference(branches=n)`, n > 1: n float32
        [batch * seq, hidden] tensors that sum to the layer's output (the first carries
        the output bias), one per head group, each computed from its own heads alone."""
        if len(self._fused or ()) < 2:
            raise ValueError("partial_outputs needs fuse_for_inference(branches > 1)")
        hidden_states = keras.ops.cast(hidden_states, self.compute_dtype)
        shape = keras.ops.shape(hidden_states)
        parts = []
        for part in self._fused:
            q, k, v = self._fused_heads(part, hidden_states, shape[0], shape[1])
            context, _ = self._attend(q, k, v, attention_bias, False, shape[0], shape[1],
                                      self.num_heads // len(self._fused))
            context = tf.reshape(context, (-1, context.shape[-1]))
            y = tf.matmul(context, tf.cast(part.output_rows, context.dtype))
            if part.output_bias is not None:  # group 0; MatMul+BiasAdd: no op of its own
                y = tf.nn.bias_add(y, tf.cast(part.output_bias, y.dtype))
            parts.append(keras.ops.cast(y, "float32"))
        return parts

    def call(self, hidden_states, attention_bias=None, training=None, return_probs=False):
        inference = self._fused is not None and not training and not return_probs
        if inference and len(self._fused) > 1:
            output = tf.add_n(self.partial_outputs(hidden_states, attention_bias))
            return keras.ops.reshape(keras.ops.cast(output, self.compute_dtype),
                                     keras.ops.shape(hidden_states))
        shape = keras.ops.shape(hidden_states)
        batch, seq = shape[0], shape[1]
        if inference:
            q, k, v = self._fused_heads(self._fused[0], hidden_states, batch, seq)
        else:
            q = self._split_heads(dense_on_tokens(self.query, hidden_states), batch, seq)
            k = self._split_heads(dense_on_tokens(self.key, hidden_states), batch, seq)
            v = self._split_heads(dense_on_tokens(self.value, hidden_states), batch, seq)
        context, probs = self._attend(q, k, v, attention_bias, training, batch, seq,
                                      self.num_heads)
        output = dense_on_tokens(self.output_dense, context)
        return (output, probs) if return_probs else output

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, num_heads=self.num_heads,
                      initializer_range=self.initializer_range,
                      attention_dropout_rate=self.attention_dropout_rate)
        return config


class _FusedQKV:
    """One head group's fused query/key/value kernel and bias, and (with more than one
    group) its rows of the output kernel and, in the first group, the output bias (see
    `fuse_for_inference`)."""

    def __init__(self, kernel, bias, output_rows=None, output_bias=None):
        self.kernel = kernel
        self.bias = bias
        self.output_rows = output_rows
        self.output_bias = output_bias
