"""The serving graph: the encoder's inference forward pass, computed from the trained
layers' variables on a faster path than the layers' own `call`.

At batch 1 the attention's small ops (three matmuls, four transposes per layer) cost more
in thread dispatch than in math, so query/key/value run as one matmul on one fused
[H, 3H] kernel and one head transpose. With `branches` > 1 (`export_model
--parallel_branches`) each layer is also split into that many independent chains (its
heads and FFN units divided between them, their float32 parts summed with the residual)
that a graph executor runs on as many inter-op threads (docs/serving.md, "Splitting each
layer").

Each class here is built from a trained layer and snapshots what it needs (the fused
kernels, the split FFN kernels) as plain variables that are no weights of the layer: the
checkpoint and the layer's variables are unchanged, and the functions an export traces
capture the snapshots instead of the query/key/value kernels, so every weight is saved
once. The snapshot does not follow later changes of the layer's weights (build a new one),
and is made eagerly (inside a traced function: under `tf.init_scope()`).
The serving modules (`bert_tf.serving.modules.ServingModule.run_model`) run every signature on
an `InferenceEncoder`.

>>> import numpy as np
>>> from bert_tf.model.config import BertConfig
>>> from bert_tf.model.encoder import BertEncoder
>>> encoder = BertEncoder(BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=2,
...                                  num_attention_heads=2, intermediate_size=16))
>>> ids = np.array([[2, 7, 3, 0]])
>>> inputs = {"input_word_ids": ids, "input_mask": ids > 0, "input_type_ids": 0 * ids}
>>> want = encoder(inputs, training=False)["sequence_output"]
>>> got = InferenceEncoder(encoder, branches=2)(inputs)["sequence_output"]
>>> bool(np.allclose(got, want, atol=1e-5))
True
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

import keras
import tensorflow as tf

from bert_tf.layers.attention import dense_on_tokens
from bert_tf.layers.normalization import layer_norm_as_one_kernel


def _snapshot(value, name: str) -> tf.Variable:
    # A plain variable held by a plain object: no weight Keras or tf.train.Checkpoint
    # tracks.
    return tf.Variable(tf.convert_to_tensor(value), trainable=False, name=name)


def _as_called(layer, *tensors):
    """`tensors` cast to `layer`'s compute dtype, as Keras casts a layer call's inputs
    (the serving graph computes what `layer(...)` would, without calling it)."""
    return [keras.ops.cast(t, layer.compute_dtype) if t is not None else None
            for t in tensors]


def _check_branches(branches: int, *divides: tuple) -> int:
    if int(branches) != branches or branches < 1 or any(n % branches for _, n in divides):
        raise ValueError(f"branches={branches} must divide "
                         + " and ".join(f"{name}={n}" for name, n in divides))
    return int(branches)


@dataclasses.dataclass(frozen=True)
class HeadGroup:
    """One head group's fused query/key/value kernel [H, 3 * H / groups] and bias and,
    with more than one group, its rows of the output kernel and (in the first group
    only) the output bias."""

    kernel: tf.Variable
    bias: tf.Variable
    output_rows: Optional[tf.Variable] = None
    output_bias: Optional[tf.Variable] = None


class InferenceAttention:
    """A `BertSelfAttention`'s inference output from one fused query/key/value kernel
    (per head group with `branches` > 1, a divisor of its heads). In a bfloat16 layer the
    scores, mask and softmax stay bfloat16 between the two products: oneDNN's softmax
    accumulates in float32 and rounds once, the probabilities a float32 softmax would give
    the second product, without two casts of the largest tensor of the layer.

    >>> import numpy as np
    >>> from bert_tf.layers import BertSelfAttention
    >>> layer = BertSelfAttention(hidden_size=16, num_heads=2)
    >>> x = np.random.rand(2, 5, 16).astype("float32")
    >>> want = layer(x)
    >>> [bool(np.allclose(InferenceAttention(layer, n)(x), want, atol=1e-5)) for n in (1, 2)]
    [True, True]
    """

    def __init__(self, attention, branches: int = 1):
        branches = _check_branches(branches, ("num_heads", attention.num_heads))
        self.layer = attention
        dense = (attention.query, attention.key, attention.value)
        kernels = [tf.convert_to_tensor(d.kernel) for d in dense]
        biases = [tf.convert_to_tensor(d.bias) for d in dense]
        width = attention.hidden_size // branches
        self.groups: List[HeadGroup] = []
        for j in range(branches):
            cols = slice(j * width, (j + 1) * width)
            self.groups.append(HeadGroup(
                _snapshot(tf.concat([k[:, cols] for k in kernels], axis=1),
                          "fused_qkv_kernel"),
                _snapshot(tf.concat([b[cols] for b in biases], axis=0), "fused_qkv_bias"),
                None if branches == 1 else _snapshot(
                    tf.convert_to_tensor(attention.output_dense.kernel)[cols],
                    "output_kernel_rows"),
                # The output bias, once (group 0 adds it).
                None if branches == 1 or j else _snapshot(attention.output_dense.bias,
                                                          "output_bias")))

    def _heads(self, group: HeadGroup, hidden_states, batch, seq):
        # One [tokens, 3 * width] matmul (+bias) and one transpose to
        # [3, batch, heads, seq, size] instead of three of each: at small shapes every
        # oneDNN op costs tens of microseconds of thread dispatch whatever its size, so the
        # op count matters as much as the FLOPs.
        layer = self.layer
        x = tf.reshape(hidden_states, (-1, layer.hidden_size))
        qkv = tf.matmul(x, tf.cast(group.kernel, x.dtype)) + tf.cast(group.bias, x.dtype)
        heads = layer.num_heads // len(self.groups)
        qkv = tf.reshape(qkv, (batch, seq, 3, heads, layer.head_size))
        return tf.unstack(tf.transpose(qkv, (2, 0, 3, 1, 4)))

    def partial_outputs(self, hidden_states, attention_bias=None) -> List[tf.Tensor]:
        """One float32 [batch * seq, hidden] tensor per head group, summing to the layer's
        output (the first carries the output bias), each computed from its heads alone."""
        layer = self.layer
        hidden_states = keras.ops.cast(hidden_states, layer.compute_dtype)
        shape = keras.ops.shape(hidden_states)
        heads = layer.num_heads // len(self.groups)
        parts = []
        for group in self.groups:
            q, k, v = self._heads(group, hidden_states, shape[0], shape[1])
            context, _ = layer.attend(q, k, v, attention_bias, False, shape[0], shape[1],
                                      heads, softmax_dtype=layer.compute_dtype)
            context = tf.reshape(context, (-1, context.shape[-1]))
            y = tf.matmul(context, tf.cast(group.output_rows, context.dtype))
            if group.output_bias is not None:  # group 0; MatMul+BiasAdd: no op of its own
                y = tf.nn.bias_add(y, tf.cast(group.output_bias, y.dtype))
            parts.append(keras.ops.cast(y, "float32"))
        return parts

    def __call__(self, hidden_states, attention_bias=None):
        layer = self.layer
        hidden_states, attention_bias = _as_called(layer, hidden_states, attention_bias)
        if len(self.groups) > 1:
            output = tf.add_n(self.partial_outputs(hidden_states, attention_bias))
            return keras.ops.reshape(keras.ops.cast(output, layer.compute_dtype),
                                     keras.ops.shape(hidden_states))
        shape = keras.ops.shape(hidden_states)
        batch, seq = shape[0], shape[1]
        q, k, v = self._heads(self.groups[0], hidden_states, batch, seq)
        context, _ = layer.attend(q, k, v, attention_bias, False, batch, seq,
                                  layer.num_heads, softmax_dtype=layer.compute_dtype)
        return dense_on_tokens(layer.output_dense, context)


class InferenceBlock:
    """A `TransformerBlock`'s inference output: its attention fused
    (`InferenceAttention`) and, with `branches` > 1, the whole layer split into that
    many independent chains, each with its heads of the attention and its
    `intermediate_size / branches` FFN units (columns of the intermediate kernel, rows
    of the output kernel). The split layer takes and returns the residual stream in
    float32 (`InferenceEncoder` passes it from layer to layer, so the only cast per layer
    half is the one all branches read); unsplit, the block's compute dtype. A bfloat16
    block's LayerNorms run as one oneDNN kernel each (`layer_norm_as_one_kernel`).

    >>> import numpy as np
    >>> from bert_tf.layers import TransformerBlock
    >>> block = TransformerBlock(hidden_size=16, num_heads=2, intermediate_size=64)
    >>> x = np.random.rand(2, 5, 16).astype("float32")
    >>> want = block(x)
    >>> bool(np.allclose(InferenceBlock(block, branches=2)(x), want, atol=1e-5))
    True
    """

    def __init__(self, block, branches: int = 1):
        branches = _check_branches(branches, ("num_heads", block.num_heads),
                                   ("intermediate_size", block.intermediate_size))
        self.layer = block
        self.attention = InferenceAttention(block.attention, branches)
        self.layer_norm = (layer_norm_as_one_kernel if block.compute_dtype == "bfloat16"
                           else lambda norm, x: norm(x))
        self.ffn_branches = []
        if branches == 1:
            return
        kernel = tf.convert_to_tensor(block.intermediate.kernel)
        bias = tf.convert_to_tensor(block.intermediate.bias)
        rows = tf.convert_to_tensor(block.output_dense.kernel)
        width = block.intermediate_size // branches
        # The output bias once, in the first branch (its MatMul+BiasAdd kernel adds it).
        self.ffn_branches = [
            tuple(_snapshot(t, name) for t, name in (
                (kernel[:, j * width:(j + 1) * width], "intermediate_kernel_columns"),
                (bias[j * width:(j + 1) * width], "intermediate_bias_columns"),
                (rows[j * width:(j + 1) * width], "output_kernel_rows")))
            + ((_snapshot(block.output_dense.bias, "output_bias"),) if j == 0 else (None,))
            for j in range(branches)]

    @property
    def branches(self) -> int:
        return len(self.attention.groups)

    def __call__(self, hidden_states, attention_bias=None):
        if self.branches == 1:
            hidden_states, attention_bias = _as_called(self.layer, hidden_states,
                                                       attention_bias)
            return self.layer.after_attention(
                hidden_states, self.attention(hidden_states, attention_bias), training=False,
                layer_norm=self.layer_norm)
        # The split path reads the float32 residual stream and bias as they are.
        return self._split(hidden_states, attention_bias)

    def _split(self, hidden_states, attention_bias):
        # Each fork in the graph (a tensor that several expensive ops wait for) makes TF's
        # executor hand one of them to another inter-op thread: tens of microseconds on a
        # VM. Here the forks are the branches themselves (one cast feeds all of them), and
        # the residual sums are one `tf.add_n` each.
        block = self.layer
        shape = keras.ops.shape(hidden_states)
        residual = tf.reshape(keras.ops.cast(hidden_states, "float32"), (-1, block.hidden_size))
        x = self.layer_norm(block.attention_layer_norm, tf.add_n(
            [residual] + self.attention.partial_outputs(hidden_states, attention_bias)))
        inner = keras.ops.cast(x, block.compute_dtype)
        parts = [x]
        for kernel, bias, rows, output_bias in self.ffn_branches:
            y = block.activation(tf.nn.bias_add(tf.matmul(inner, tf.cast(kernel, inner.dtype)),
                                                tf.cast(bias, inner.dtype)))
            y = tf.matmul(y, tf.cast(rows, y.dtype))
            if output_bias is not None:  # MatMul+BiasAdd: the bias costs no op of its own
                y = tf.nn.bias_add(y, tf.cast(output_bias, y.dtype))
            parts.append(keras.ops.cast(y, "float32"))
        y = self.layer_norm(block.output_layer_norm, tf.add_n(parts))
        return tf.reshape(y, (shape[0], shape[1], block.hidden_size))


class InferenceEncoder:
    """A `BertEncoder`'s inference outputs (`sequence_output`, `pooled_output`,
    `encoder_outputs`) with every block an `InferenceBlock` of `branches` chains; split
    blocks pass their float32 residual stream on (so with `branches` > 1 the outputs are
    float32 whatever the encoder's compute dtype). Callable where the encoder is: a task
    model's `run(inputs, encode)` takes it as `encode`."""

    def __init__(self, encoder, branches: int = 1):
        self.encoder = encoder
        self.blocks = [InferenceBlock(block, branches) for block in encoder.transformer_layers]
        self.branches = int(branches)

    def __call__(self, inputs):
        x, bias = self.encoder.embed(inputs, training=False)
        encoder_outputs = []
        for block in self.blocks:
            x = block(x, bias)
            encoder_outputs.append(x)
        return {"sequence_output": x, "pooled_output": self.encoder.pooler(x),
                "encoder_outputs": encoder_outputs}
