"""Checkpoint import/export: TF1 layout, Hugging Face weights, and every refusal.

The TF1 checkpoints here are written independently of bert_tf (tf.compat.v1 Saver, the
original variable names, Adam slots and global_step included) and checked against a
plain numpy BERT forward pass written from the paper / original code, so a swapped or
untransposed matrix cannot pass.
"""

import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.checkpoints import names, tf1, weights as weights_lib
from bert_tf.convert_checkpoint import UsageError, convert
from bert_tf.core import constants
from bert_tf.core.output_guard import OutputGuardError
from bert_tf.model import model_dir
from bert_tf.model.config import BertConfig, ConfigError
from bert_tf.model.model_dir import CheckpointMismatchError
from bert_tf.model.pretrainer import BertPretrainer

V, H, L, A, I, P = 30, 8, 2, 2, 16, 16
TF1_CONFIG = {"vocab_size": V, "hidden_size": H, "num_hidden_layers": L,
              "num_attention_heads": A, "intermediate_size": I, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
              "max_position_embeddings": P, "type_vocab_size": 2, "initializer_range": 0.02}
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(V - 5)]


# ----------------------------------------------------------------------------- helpers
def tf1_weights(rng, num_layers=L, intermediate=I, heads=True):
    """Random weights under the original TF1 names and shapes."""
    w = {"bert/embeddings/word_embeddings": (V, H), "bert/embeddings/position_embeddings": (P, H),
         "bert/embeddings/token_type_embeddings": (2, H),
         "bert/embeddings/LayerNorm/gamma": (H,), "bert/embeddings/LayerNorm/beta": (H,),
         "bert/pooler/dense/kernel": (H, H), "bert/pooler/dense/bias": (H,)}
    for i in range(num_layers):
        p = f"bert/encoder/layer_{i}/"
        for part in ("self/query", "self/key", "self/value", "output/dense"):
            w[p + f"attention/{part}/kernel"] = (H, H)
            w[p + f"attention/{part}/bias"] = (H,)
        w.update({p + "attention/output/LayerNorm/gamma": (H,),
                  p + "attention/output/LayerNorm/beta": (H,),
                  p + "intermediate/dense/kernel": (H, intermediate),
                  p + "intermediate/dense/bias": (intermediate,),
                  p + "output/dense/kernel": (intermediate, H), p + "output/dense/bias": (H,),
                  p + "output/LayerNorm/gamma": (H,), p + "output/LayerNorm/beta": (H,)})
    if heads:
        w.update({"cls/predictions/transform/dense/kernel": (H, H),
                  "cls/predictions/transform/dense/bias": (H,),
                  "cls/predictions/transform/LayerNorm/gamma": (H,),
                  "cls/predictions/transform/LayerNorm/beta": (H,),
                  "cls/predictions/output_bias": (V,),
                  "cls/seq_relationship/output_weights": (2, H),
                  "cls/seq_relationship/output_bias": (2,)})
    return {k: rng.normal(0, 0.3, s).astype(np.float32) + (1.0 if k.endswith("gamma") else 0.0)
            for k, s in w.items()}


def save_tf1(directory, weights, config=TF1_CONFIG, vocab=VOCAB, slots=True):
    """Writes an original-style checkpoint with tf.compat.v1 (independent of bert_tf)."""
    os.makedirs(directory, exist_ok=True)
    with tf.Graph().as_default():
        for name, value in weights.items():
            tf.compat.v1.get_variable(name, initializer=value)
            if slots:  # what run_pretraining leaves behind
                tf.compat.v1.get_variable(name + "/adam_m", initializer=np.zeros_like(value))
                tf.compat.v1.get_variable(name + "/adam_v", initializer=np.ones_like(value))
        if slots:
            tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            prefix = saver.save(sess, os.path.join(directory, "bert_model.ckpt"),
                                write_meta_graph=False)
    if config is not None:
        with open(os.path.join(directory, "bert_config.json"), "w") as f:
            json.dump(config, f)
    if vocab is not None:
        with open(os.path.join(directory, "vocab.txt"), "w") as f:
            f.write("\n".join(vocab) + "\n")
    return prefix


def _ln(x, g, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-12) * g + b


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def numpy_bert(w, ids, mask, types, positions):
    """The original BERT forward pass (TF1 names, tanh GELU) in numpy, float64."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    dense = lambda x, n: x @ w[n + "/kernel"] + w[n + "/bias"]
    norm = lambda x, n: _ln(x, w[n + "/gamma"], w[n + "/beta"])
    seq = ids.shape[1]
    x = (w["bert/embeddings/word_embeddings"][ids] + w["bert/embeddings/position_embeddings"][:seq]
         + w["bert/embeddings/token_type_embeddings"][types])
    x = norm(x, "bert/embeddings/LayerNorm")
    bias = (1.0 - mask[:, None, None, :]) * -10000.0
    d = H // A
    split = lambda t: t.reshape(t.shape[0], seq, A, d).transpose(0, 2, 1, 3)
    for i in range(L):
        p = f"bert/encoder/layer_{i}/"
        q, k, v = (split(dense(x, p + f"attention/self/{n}")) for n in ("query", "key", "value"))
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d) + bias
        probs = np.exp(s - s.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = norm(x + dense(ctx, p + "attention/output/dense"), p + "attention/output/LayerNorm")
        h = _gelu_tanh(dense(x, p + "intermediate/dense"))
        x = norm(x + dense(h, p + "output/dense"), p + "output/LayerNorm")
    pooled = np.tanh(dense(x[:, 0], "bert/pooler/dense"))
    g = np.take_along_axis(x, positions[:, :, None], axis=1)
    g = norm(_gelu_tanh(dense(g, "cls/predictions/transform/dense")),
             "cls/predictions/transform/LayerNorm")
    mlm = g @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
    nsp = (pooled @ w["cls/seq_relationship/output_weights"].T
           + w["cls/seq_relationship/output_bias"])
    return x, pooled, mlm, nsp


INPUTS = {"input_word_ids": np.array([[2, 7, 8, 3, 9, 3], [2, 11, 3, 12, 3, 0]], np.int32),
          "input_mask": np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]], np.int32),
          "input_type_ids": np.array([[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 0]], np.int32),
          "masked_lm_positions": np.array([[1, 4], [3, 0]], np.int32)}


def run_pretrainer(directory):
    """Loads a bert_tf model dir with both heads and runs INPUTS through it."""
    config = model_dir.find_config(directory)
    model = BertPretrainer(config)
    model_dir.restore(directory, {"encoder": model.encoder, "masked_lm": model.masked_lm,
                                  "next_sentence": model.next_sentence})
    enc = model.encoder(INPUTS)
    heads = model(INPUTS)
    return (enc["sequence_output"].numpy(), enc["pooled_output"].numpy(),
            heads["mlm_logits"].numpy(), heads["nsp_logits"].numpy())


# ----------------------------------------------------------------------------- mappings
def test_mappings_cover_every_model_variable_once():
    cfg = BertConfig(**{k: v for k, v in TF1_CONFIG.items()})
    ours = set(weights_lib.model_variables(BertPretrainer(cfg)))
    mapped = [m.ours for m in names.mappings_for(L, constants.PRETRAINING_HEADS)]
    assert sorted(mapped) == sorted(ours)
    shapes = names.expected_shapes(cfg)
    for name, variable in weights_lib.model_variables(BertPretrainer(cfg)).items():
        assert shapes[name] == tuple(variable.shape), name
    tf1 = [m.tf1 for m in names.mappings_for(L, constants.PRETRAINING_HEADS)]
    assert sorted(tf1) == sorted(tf1_weights(np.random.default_rng(0)))


# ----------------------------------------------------------------------------- TF1 import
@pytest.fixture(scope="module")
def tf1_source(tmp_path_factory):
    """An original-layout checkpoint written by tf.compat.v1, in an `uncased_` dir."""
    weights = tf1_weights(np.random.default_rng(1))
    directory = tmp_path_factory.mktemp("src") / "uncased_L-2_H-8_A-2"
    prefix = save_tf1(str(directory), weights)
    return weights, prefix


def test_tf1_import_matches_numpy_reference(tf1_source, tmp_path):
    weights, prefix = tf1_source
    out = tmp_path / "converted"
    convert("tf1", os.path.dirname(prefix), str(out))  # the directory form of --input
    cfg = model_dir.find_config(str(out))
    assert cfg.hidden_act == "gelu_approximate"  # docs/contracts.md §1: what the TF1 code computed
    # from the `uncased_` dir name
    assert model_dir.read_tokenizer_config(str(out))["do_lower_case"] is True
    assert (out / "vocab.txt").read_text().split() == VOCAB
    seq, pooled, mlm, nsp = run_pretrainer(str(out))
    ref = numpy_bert(weights, INPUTS["input_word_ids"], INPUTS["input_mask"],
                     INPUTS["input_type_ids"], INPUTS["masked_lm_positions"])
    for got, want in zip((seq, pooled, mlm, nsp), ref):
        np.testing.assert_allclose(got, want, atol=1e-4)
    encoder = model_dir.load_encoder(str(out))
    np.testing.assert_allclose(encoder(INPUTS)["sequence_output"].numpy(), seq, atol=1e-6)


def test_tf1_import_without_heads_writes_encoder_only(tmp_path):
    prefix = save_tf1(str(tmp_path / "src"), tf1_weights(np.random.default_rng(2), heads=False),
                      slots=False)
    weights = tf1.read_tf1_checkpoint(prefix)
    assert weights.heads == () and weights.do_lower_case is None
    out = tmp_path / "out"
    convert("tf1", prefix, str(out))
    children = {n.split("/")[0] for n, _ in tf.train.list_variables(str(out))}
    assert "masked_lm" not in children and "next_sentence" not in children
    model_dir.load_encoder(str(out))


# ----------------------------------------------------------------------------- TF1 export
def test_tf1_round_trip_is_identical(tmp_path):
    cfg = BertConfig(**dict(TF1_CONFIG, hidden_act="gelu_approximate"))
    model = BertPretrainer(cfg)
    rng = np.random.default_rng(3)
    for v in model.weights:  # non-trivial values everywhere (LayerNorm and biases too)
        v.assign(rng.normal(0, 0.3, v.shape).astype(np.float32))
    src = tmp_path / "ours"
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    model_dir.write_model_dir(str(src), cfg, {"encoder": model.encoder,
                                              "masked_lm": model.masked_lm,
                                              "next_sentence": model.next_sentence},
                              vocab_file=str(vocab), do_lower_case=False)
    exported = tmp_path / "tf1"
    prefix = convert("bert_tf", str(src), str(exported), target_format="tf1")
    assert sorted(os.listdir(exported)) == [
        ".bert_tf_output.json",  # output_guard's marker: --overwrite may replace it
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "checkpoint", "vocab.txt"]
    config = json.loads((exported / "bert_config.json").read_text())
    assert config["hidden_act"] == "gelu" and "bert_tf_hidden_act" not in config
    assert tf.train.latest_checkpoint(str(exported)) == prefix
    names = dict(tf.train.list_variables(prefix))
    assert names["cls/seq_relationship/output_weights"] == [2, H]
    back = tmp_path / "back"
    convert("tf1", prefix, str(back), do_lower_case=False)
    assert model_dir.find_config(str(back)) == cfg
    np.testing.assert_array_equal(np.concatenate([a.ravel() for a in run_pretrainer(str(src))]),
                                  np.concatenate([a.ravel() for a in run_pretrainer(str(back))]))
    # The numpy reference (the original's computation) agrees with the exported names.
    reader = tf.train.load_checkpoint(prefix)
    ref = numpy_bert({n: reader.get_tensor(n) for n in names}, INPUTS["input_word_ids"],
                     INPUTS["input_mask"], INPUTS["input_type_ids"],
                     INPUTS["masked_lm_positions"])
    for got, want in zip(run_pretrainer(str(src)), ref):
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_tf1_export_loads_with_init_from_checkpoint(tmp_path):
    """The original code restores with tf.compat.v1.train.init_from_checkpoint by name."""
    cfg = BertConfig(**dict(TF1_CONFIG, hidden_act="gelu_approximate"))
    weights = weights_lib.weights_from_model(BertPretrainer(cfg))
    prefix = tf1.write_tf1_checkpoint(weights, str(tmp_path))
    expected = {m.tf1: (weights.arrays[m.ours].T if m.tf1_transpose else weights.arrays[m.ours])
                for m in names.mappings_for(L, constants.PRETRAINING_HEADS)}
    with tf.Graph().as_default():
        variables = {n: tf.compat.v1.get_variable(n, shape=v.shape, dtype=tf.float32,
                                                  initializer=tf.compat.v1.zeros_initializer())
                     for n, v in expected.items()}
        tf.compat.v1.train.init_from_checkpoint(prefix, {"bert/": "bert/", "cls/": "cls/"})
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            values = sess.run(variables)
    for name, value in expected.items():
        np.testing.assert_array_equal(values[name], value, err_msg=name)


def test_exact_gelu_export_warns_and_round_trips(tmp_path, caplog):
    cfg = BertConfig(**dict(TF1_CONFIG, hidden_act="gelu"))
    weights = weights_lib.weights_from_model(BertPretrainer(cfg))
    with caplog.at_level(logging.WARNING):
        prefix = tf1.write_tf1_checkpoint(weights, str(tmp_path))
    assert "tanh approximation" in caplog.text
    config = json.loads((tmp_path / "bert_config.json").read_text())
    assert config["hidden_act"] == "gelu" and config["bert_tf_hidden_act"] == "gelu"
    assert tf1.read_tf1_checkpoint(prefix).config.hidden_act == "gelu"


def test_export_refuses_activation_the_original_lacks(tmp_path):
    weights = weights_lib.weights_from_model(
        BertPretrainer(BertConfig(**dict(TF1_CONFIG, hidden_act="swish"))))
    with pytest.raises(ConfigError, match="swish"):
        tf1.write_tf1_checkpoint(weights, str(tmp_path))


# ----------------------------------------------------------------------------- refusals
def test_wrong_shape_names_variable_and_both_shapes(tmp_path):
    prefix = save_tf1(str(tmp_path / "src"), tf1_weights(np.random.default_rng(4), intermediate=32),
                      slots=False)
    with pytest.raises(CheckpointMismatchError) as e:
        convert("tf1", prefix, str(tmp_path / "out"))
    message = str(e.value)
    assert "bert/encoder/layer_0/intermediate/dense/kernel" in message
    assert "[8, 32]" in message and "[8, 16]" in message
    assert not (tmp_path / "out").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".out")]  # no temp left


def test_more_layers_than_config_refused(tmp_path):
    prefix = save_tf1(str(tmp_path), tf1_weights(np.random.default_rng(5), num_layers=3),
                      slots=False)
    with pytest.raises(CheckpointMismatchError,
                       match="holds 3 encoder layers.*num_hidden_layers=2"):
        tf1.read_tf1_checkpoint(prefix)


def test_missing_encoder_variable_refused(tmp_path):
    weights = tf1_weights(np.random.default_rng(6))
    del weights["bert/encoder/layer_1/output/dense/bias"]
    prefix = save_tf1(str(tmp_path), weights, slots=False)
    with pytest.raises(CheckpointMismatchError, match="layer_1/output/dense/bias"):
        tf1.read_tf1_checkpoint(prefix)


def test_partial_head_refused(tmp_path):
    weights = tf1_weights(np.random.default_rng(7))
    del weights["cls/predictions/output_bias"]
    prefix = save_tf1(str(tmp_path), weights, slots=False)
    with pytest.raises(CheckpointMismatchError,
                       match="masked_lm head.*cls/predictions/output_bias"):
        tf1.read_tf1_checkpoint(prefix)


def test_unrecognised_tf1_checkpoint_refused(tmp_path):
    prefix = save_tf1(str(tmp_path), {"resnet/conv1/kernel": np.zeros((3, 3), np.float32)},
                      slots=False)
    with pytest.raises(weights_lib.CheckpointFormatError, match="not an original BERT checkpoint"):
        tf1.read_tf1_checkpoint(prefix)


def test_missing_files_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no TF1 checkpoint"):
        tf1.read_tf1_checkpoint(str(tmp_path / "nothing" / "bert_model.ckpt"))
    prefix = save_tf1(str(tmp_path / "noconfig"), tf1_weights(np.random.default_rng(8)),
                      config=None, slots=False)
    with pytest.raises(FileNotFoundError, match=r"noconfig/bert_config.json: bert_config.json not"):
        tf1.read_tf1_checkpoint(prefix)
    config_file = tmp_path / "bert_config.json"
    config_file.write_text(json.dumps(TF1_CONFIG))
    with pytest.raises(FileNotFoundError, match="missing_vocab.txt: vocab file not found"):
        tf1.read_tf1_checkpoint(prefix, config_file=str(config_file),
                                        vocab_file=str(tmp_path / "missing_vocab.txt"))
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        convert("tf1", str(tmp_path / "absent"), str(tmp_path / "out"))


def test_vocab_larger_than_embeddings_refused(tmp_path):
    prefix = save_tf1(str(tmp_path), tf1_weights(np.random.default_rng(9)),
                      vocab=VOCAB + ["extra"], slots=False)
    with pytest.raises(CheckpointMismatchError, match="has 31 tokens.*vocab_size=30"):
        tf1.read_tf1_checkpoint(prefix)


def test_non_empty_output_dir_refused_unless_overwrite(tf1_source, tmp_path):
    _, prefix = tf1_source
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(OutputGuardError, match="not empty.*--overwrite"):
        convert("tf1", prefix, str(out))
    # --overwrite replaces only an earlier bert_tf output, never a folder of other files.
    with pytest.raises(OutputGuardError, match="no bert_tf command wrote"):
        convert("tf1", prefix, str(out), overwrite=True)
    assert os.listdir(out) == ["keep.txt"] and (out / "keep.txt").read_text() == "x"
    ours = tmp_path / "ours"
    convert("tf1", prefix, str(ours))
    first = (ours / "bert_config.json").read_bytes()
    convert("tf1", prefix, str(ours), overwrite=True)
    assert (ours / "bert_config.json").read_bytes() == first
    model_dir.load_encoder(str(ours))
    assert sorted(os.listdir(tmp_path)) == ["ours", "out"]  # no temp or old dirs left behind


def test_bad_argument_combinations(tmp_path):
    with pytest.raises(UsageError, match="both tf1"):
        convert("tf1", "x", str(tmp_path / "o"), target_format="tf1")
    with pytest.raises(UsageError, match="source_format='onnx'"):
        convert("onnx", "x", str(tmp_path / "o"))
    with pytest.raises(UsageError, match="target_format='savedmodel'"):
        convert("tf1", "x", str(tmp_path / "o"), target_format="savedmodel")
    with pytest.raises(UsageError, match="carries its own"):
        convert("bert_tf", "x", str(tmp_path / "o"), target_format="tf1", vocab_file="v")
    with pytest.raises(OutputGuardError, match="is the input"):
        convert("bert_tf", str(tmp_path), str(tmp_path), target_format="tf1", overwrite=True)
    # A parent of the input is refused too: replacing it would delete the input.
    (tmp_path / "model").mkdir()
    with pytest.raises(OutputGuardError, match="contains the input"):
        convert("bert_tf", str(tmp_path / "model"), str(tmp_path), target_format="tf1",
                overwrite=True)
    assert os.listdir(tmp_path) == ["model"]


def test_bert_tf_source_without_config_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no bert_config.json"):
        weights_lib.read_model_dir(str(tmp_path / "empty"))
