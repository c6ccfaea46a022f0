"""BertEncoder and BertPretrainer: outputs, XLA, mixed precision, strategies, saving."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.model.config import BertConfig
from bert_tf.model.encoder import BertEncoder
from bert_tf.model.pretrainer import BertPretrainer
from tests.helpers import REPO_ROOT

TINY = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=64,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _inputs(batch=3, seq=10, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, TINY.vocab_size, (batch, seq)).astype("int32")
    lengths = rng.integers(min(2, seq), seq + 1, batch)
    mask = (np.arange(seq)[None] < lengths[:, None]).astype("int32")
    ids *= mask
    types = ((np.arange(seq)[None] >= lengths[:, None] // 2) * mask).astype("int32")
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


@pytest.fixture(autouse=True)
def _float32_policy():
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("name,count", [("base", 109_482_240), ("large", 335_141_888)])
def test_parameter_counts_match_reference(name, count):
    cfg = BertConfig.from_file(str(REPO_ROOT / "official_configs" / "models" / f"bert_{name}.yaml"))
    assert BertEncoder(cfg).count_params() == count


def test_outputs_every_layer_and_attention_probs():
    enc = BertEncoder(TINY)
    inputs = _inputs()
    out = enc(inputs, output_attentions=True)
    assert out["sequence_output"].shape == (3, 10, 32)
    assert out["pooled_output"].shape == (3, 32)
    assert len(out["encoder_outputs"]) == 2 and len(out["attention_probs"]) == 2
    np.testing.assert_array_equal(out["encoder_outputs"][-1], out["sequence_output"])
    assert out["attention_probs"][0].shape == (3, 4, 10, 10)
    assert "attention_probs" not in enc(inputs)


def test_padding_does_not_change_real_positions():
    enc = BertEncoder(TINY)
    inputs = _inputs(batch=1, seq=6)
    inputs["input_mask"][:] = [[1, 1, 1, 1, 0, 0]]
    a = enc(inputs)["sequence_output"][:, :4]
    inputs["input_word_ids"][0, 4:] = [7, 9]
    b = enc(inputs)["sequence_output"][:, :4]
    np.testing.assert_allclose(a, b, atol=1e-5)
    short = {k: v[:, :4] for k, v in inputs.items()}
    np.testing.assert_allclose(enc(short)["sequence_output"], a, atol=1e-5)


@pytest.mark.parametrize("seq", [1, 7, 64])
def test_any_length_up_to_max_positions(seq):
    enc = BertEncoder(TINY)
    assert enc(_inputs(batch=2, seq=seq))["sequence_output"].shape == (2, seq, 32)


def test_jit_compile_matches_eager():
    enc = BertEncoder(TINY)
    inputs = _inputs()
    eager = enc(inputs)["sequence_output"]
    compiled = tf.function(lambda x: enc(x)["sequence_output"], jit_compile=True)(inputs)
    np.testing.assert_allclose(compiled, eager, atol=1e-5)


@pytest.mark.parametrize("policy,dtype", [("mixed_bfloat16", "bfloat16"),
                                          ("mixed_float16", "float16")])
def test_mixed_precision(policy, dtype):
    reference = BertPretrainer(TINY)
    keras.mixed_precision.set_global_policy(policy)
    model = BertPretrainer(TINY)
    model.set_weights(reference.get_weights())
    inputs = dict(_inputs(), masked_lm_positions=np.array([[1, 2]] * 3))
    enc_out = model.encoder(inputs, output_attentions=True)
    assert enc_out["sequence_output"].dtype == dtype
    assert enc_out["attention_probs"][0].dtype == "float32"  # softmax in float32
    assert all(v.dtype == "float32" for v in model.weights)  # float32 master weights
    block = model.encoder.transformer_layers[0]
    assert block.attention_layer_norm.compute_dtype == "float32"
    out = model(inputs)
    assert out["mlm_logits"].dtype == "float32" and out["nsp_logits"].dtype == "float32"
    ref = reference(inputs)
    np.testing.assert_allclose(out["mlm_logits"], ref["mlm_logits"], atol=0.15)
    compiled = tf.function(lambda x: model(x)["mlm_logits"], jit_compile=True)(inputs)
    assert np.isfinite(compiled).all()


@pytest.mark.parametrize("dtype,atol", [("float32", 1e-5), ("bfloat16", 0.1)])
def test_split_for_inference_keeps_outputs_and_the_other_paths(dtype, atol):
    """The serving graph of an encoder split in two (serving_graph.InferenceEncoder with
    branches=2, what export_model --parallel_branches=2 traces): its outputs equal the
    encoder's inference outputs (bfloat16: within bfloat16's rounding, the split keeping
    the residual in float32), while the encoder's own calls are unchanged (dropout runs
    in training; the same attention probabilities)."""
    from bert_tf.serving.graph import InferenceEncoder

    cfg = BertConfig(**{**TINY.to_dict(), "hidden_dropout_prob": 0.5})
    keras.utils.set_random_seed(3)
    encoder = BertEncoder(cfg, dtype=dtype)
    inputs = _inputs()
    mask = inputs["input_mask"].astype(bool)
    want = encoder(inputs, training=False)
    probs = encoder(inputs, training=False, output_attentions=True)["attention_probs"]
    got = InferenceEncoder(encoder, branches=2)(inputs)
    assert got["sequence_output"].dtype == tf.float32  # the float32 residual stream
    for a, b in zip(got["encoder_outputs"], want["encoder_outputs"]):
        np.testing.assert_allclose(np.asarray(a, "float32")[mask],
                                   np.asarray(tf.cast(b, "float32"))[mask], atol=atol)
    again = encoder(inputs, training=False, output_attentions=True)["attention_probs"]
    for a, b in zip(again, probs):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
    trained = np.asarray(tf.cast(encoder(inputs, training=True)["sequence_output"],
                                 "float32"))
    assert np.abs(trained - np.asarray(got["sequence_output"])).max() > 0.1


def test_builds_and_runs_in_mirrored_strategy_scope():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = BertPretrainer(TINY)
    assert isinstance(model.encoder.word_embeddings.value, tf.distribute.DistributedValues)
    inputs = dict(_inputs(batch=4), masked_lm_positions=np.array([[1, 2]] * 4))
    dataset = tf.data.Dataset.from_tensors(inputs).unbatch().batch(4)
    batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
    result = strategy.run(tf.function(lambda x: model(x)["nsp_logits"]), args=(batch,))
    assert sum(t.shape[0] for t in strategy.experimental_local_results(result)) == 4


def test_pretrainer_ties_mlm_output_to_word_embeddings():
    model = BertPretrainer(TINY)
    assert model.masked_lm.embedding_weights is model.encoder.word_embeddings
    n_encoder = model.encoder.count_params()
    # Heads add transform dense + LayerNorm + output bias + NSP dense, not another [V, H].
    h, v = TINY.hidden_size, TINY.vocab_size
    assert model.count_params() == n_encoder + (h * h + h) + 2 * h + v + (h * 2 + 2)


def test_encoder_saves_and_reloads_as_keras_file(tmp_path):
    enc = BertEncoder(TINY)
    inputs = _inputs()
    path = str(tmp_path / "encoder.keras")
    enc.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.config == TINY
    np.testing.assert_allclose(loaded(inputs)["pooled_output"], enc(inputs)["pooled_output"],
                               atol=1e-6)
    clone = BertEncoder.from_config(enc.get_config())
    assert clone.config == enc.config
