"""Each encoder layer builds, runs, serializes (get_config/from_config) and reloads."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf import layers
from bert_tf.serving.graph import InferenceAttention, InferenceBlock

RNG = np.random.default_rng(0)


def _roundtrip(layer, call):
    """Serializes `layer`, rebuilds it, copies weights, and checks equal outputs."""
    expected = call(layer)
    config = keras.saving.serialize_keras_object(layer)
    clone = keras.saving.deserialize_keras_object(config)
    call(clone)  # builds
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(call(clone), expected, rtol=1e-6, atol=1e-6)
    assert clone.get_config() == layer.get_config()
    return clone


def test_activations_exact_and_tanh_forms():
    x = np.array([-2.0, -0.5, 0.0, 1.0, 3.0], "float32")
    import math
    exact = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x]
    tanh = [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) for v in x]
    np.testing.assert_allclose(layers.get_activation("gelu")(x), exact, atol=1e-6)
    np.testing.assert_allclose(layers.get_activation("gelu_approximate")(x), tanh, atol=1e-6)
    np.testing.assert_allclose(layers.get_activation("gelu_new")(x), tanh, atol=1e-6)
    assert np.abs(np.array(exact) - np.array(tanh)).max() > 1e-5  # the two forms differ
    with pytest.raises(ValueError, match="unknown activation"):
        layers.get_activation("gelu_fast")


def test_layer_norm_epsilon_is_berts():
    ln = layers.float32_layer_norm(1e-12)
    x = np.full((1, 3, 4), 5.0, "float32")  # zero variance: eps decides the scale
    ln(x)
    assert ln.epsilon == 1e-12 and ln.dtype_policy.compute_dtype == "float32"


def test_block_split_for_inference_equals_the_block():
    """serving_graph.InferenceBlock(block, branches): the inference forward split into
    independent chains gives the block's outputs; the snapshots are no weights of the
    block, and the block's own calls are untouched."""
    block = layers.TransformerBlock(hidden_size=16, num_heads=4, intermediate_size=32,
                                    hidden_dropout_rate=0.1, attention_dropout_rate=0.1)
    x = RNG.normal(size=(2, 6, 16)).astype("float32")
    bias = layers.attention_bias_from_mask(np.array([[1] * 6, [1] * 3 + [0] * 3]))
    want = np.asarray(block(x, bias))
    names = sorted(v.path for v in block.weights)
    for branches in (1, 2, 4):
        split = InferenceBlock(block, branches)
        assert split.branches == branches
        np.testing.assert_allclose(np.asarray(split(x, bias)), want, atol=1e-5)
        np.testing.assert_allclose(np.asarray(block(x, bias)), want, atol=1e-6)
        assert sorted(v.path for v in block.weights) == names
        # Dropout on: the training path runs (and differs).
        assert np.abs(np.asarray(block(x, bias, training=True)) - want).max() > 1e-3
    for bad in (3, 0):
        with pytest.raises(ValueError, match="must divide"):
            InferenceBlock(block, bad)

    with pytest.raises(ValueError, match="not a multiple"):
        layers.BertSelfAttention(hidden_size=10, num_heads=3)


def test_attention_fused_for_inference_equals_three_matmuls():
    layer = layers.BertSelfAttention(hidden_size=16, num_heads=4, attention_dropout_rate=0.1)
    x = RNG.normal(size=(3, 7, 16)).astype("float32")
    bias = layers.attention_bias_from_mask(np.array([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5]))
    want = np.asarray(layer(x, bias, training=False))
    names = sorted(v.path for v in layer.weights)
    fused = InferenceAttention(layer)
    np.testing.assert_allclose(np.asarray(fused(x, bias)), want, atol=1e-5)
    np.testing.assert_allclose(np.asarray(fused(x[:1, :1], bias[:1, :, :, :1])),
                               np.asarray(layer(x[:1, :1], bias[:1, :, :, :1],
                                                return_probs=True)[0]), atol=1e-5)
    # The snapshot is no weight of the layer: same weights, same checkpoint.
    assert sorted(v.path for v in layer.weights) == names
    assert not [v for v in tf.train.Checkpoint(layer=layer)._checkpoint_dependencies
                if "fused" in v.name]
    # The layer keeps its three kernels: it sees a changed query kernel, the snapshot not
    # ...
    layer.query.kernel.assign(RNG.normal(size=(16, 16)).astype("float32") * 3)
    layer.dropout.rate = 0.0
    trained = np.asarray(layer(x, bias, training=True))
    assert np.abs(trained - want).max() > 0.1 * np.abs(want).max()
    np.testing.assert_allclose(np.asarray(fused(x, bias)), want, atol=1e-5)
    # ... and a graph trace of the fused forward runs one matmul for query, key and value.
    graph = tf.function(lambda t: fused(t, bias)).get_concrete_function(
        tf.TensorSpec([3, 7, 16], tf.float32)).graph
    assert sum(op.type == "MatMul" for op in graph.get_operations()) == 2  # qkv, output


def test_transformer_block_and_pooler():
    block = layers.TransformerBlock(hidden_size=8, num_heads=2, intermediate_size=16,
                                    hidden_act="gelu_approximate", hidden_dropout_rate=0.0,
                                    attention_dropout_rate=0.0)
    x = RNG.normal(size=(2, 4, 8)).astype("float32")
    bias = layers.attention_bias_from_mask(np.ones((2, 4)))
    _roundtrip(block, lambda l: l(x, bias))
    out = np.asarray(block(x, bias))
    np.testing.assert_allclose(out.mean(-1), 0.0, atol=1e-5)  # ends in a LayerNorm
    pooler = layers.Pooler(hidden_size=8)
    pooled = _roundtrip(pooler, lambda l: l(x))
    assert np.abs(np.asarray(pooled(x))).max() <= 1.0  # tanh


def test_heads():
    table = keras.Variable(RNG.normal(size=(20, 8)).astype("float32"))
    head = layers.MaskedLMHead(vocab_size=20, hidden_size=8, embedding_weights=table)
    seq = RNG.normal(size=(2, 6, 8)).astype("float32")
    positions = np.array([[0, 5, 2], [1, 1, 4]])
    logits = np.asarray(head(seq, positions))
    assert logits.shape == (2, 3, 20)
    # Only the gathered positions are projected: the same as projecting the gathered rows.
    single = np.asarray(head(seq[:, [5]], np.zeros((2, 1), "int32")))
    np.testing.assert_allclose(single[0, 0], logits[0, 1], atol=1e-5)
    config = head.get_config()
    clone = layers.MaskedLMHead.from_config(config)
    clone.embedding_weights = table  # the owning model supplies the tied matrix
    clone(seq, positions)
    clone.set_weights(head.get_weights())
    np.testing.assert_allclose(clone(seq, positions), logits, atol=1e-6)
    with pytest.raises(ValueError, match="embedding_weights"):
        layers.MaskedLMHead(vocab_size=20, hidden_size=8)(seq, positions)

    nsp = layers.ClassificationHead(num_classes=2, hidden_size=8)
    _roundtrip(nsp, lambda l: l(seq[:, 0]))
    gathered = layers.gather_positions(seq, positions)
    np.testing.assert_allclose(gathered[1, 2], seq[1, 4])
