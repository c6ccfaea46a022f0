"""Hugging Face import: head parity against transformers.BertForPreTraining, .bin files,
prefix-less weights, and the refusals (wrong shapes, untied decoder, unknown files)."""

import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

from bert_tf.checkpoints import huggingface, weights as weights_lib  # noqa: E402
from bert_tf.convert_checkpoint import convert  # noqa: E402
from bert_tf.model import model_dir  # noqa: E402
from bert_tf.model.config import ConfigError  # noqa: E402
from bert_tf.model.model_dir import CheckpointMismatchError  # noqa: E402
from bert_tf.model.pretrainer import BertPretrainer  # noqa: E402

V = 40


@pytest.fixture(scope="module")
def hf_pretraining(tmp_path_factory):
    """A small random BertForPreTraining (exact GELU) saved with save_pretrained."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=32, max_position_embeddings=24, hidden_act="gelu")
    model = transformers.BertForPreTraining(config).eval()
    with torch.no_grad():  # LayerNorm and biases start at 1/0: randomize so swaps show
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    directory = tmp_path_factory.mktemp("hf") / "bert_pretraining"
    model.save_pretrained(str(directory))
    (directory / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(V)) + "\n")
    (directory / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    return model, directory


def _inputs():
    ids = np.array([[2, 7, 8, 3, 9, 10, 3], [2, 11, 12, 3, 13, 3, 0], [2, 5, 3, 0, 0, 0, 0]])
    mask = (np.arange(7)[None, :] < np.array([[7], [6], [3]])).astype(np.int64)
    types = np.array([[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0, 0]])
    positions = np.array([[1, 5, 0], [2, 4, 1], [1, 0, 0]])
    return ids, mask, types, positions


def test_pretraining_heads_match_transformers(hf_pretraining, tmp_path):
    model, directory = hf_pretraining
    out = tmp_path / "converted"
    convert("huggingface", str(directory), str(out))
    assert model_dir.find_config(str(out)).hidden_act == "gelu"  # HF gelu is exact
    assert model_dir.read_tokenizer_config(str(out))["do_lower_case"] is False
    config = model_dir.find_config(str(out))
    ours = BertPretrainer(config)
    model_dir.restore(str(out), {"encoder": ours.encoder, "masked_lm": ours.masked_lm,
                                 "next_sentence": ours.next_sentence})
    ids, mask, types, positions = _inputs()
    got = ours({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types,
                "masked_lm_positions": positions})
    with torch.no_grad():
        want = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                     token_type_ids=torch.tensor(types))
    want_mlm = np.take_along_axis(want.prediction_logits.numpy(), positions[:, :, None], axis=1)
    mlm_diff = np.abs(got["mlm_logits"].numpy() - want_mlm).max()
    nsp_diff = np.abs(got["nsp_logits"].numpy() - want.seq_relationship_logits.numpy()).max()
    print(f"head parity: max |MLM diff| {mlm_diff:.2e}, max |NSP diff| {nsp_diff:.2e}")
    assert mlm_diff < 1e-4 and nsp_diff < 1e-4


def test_pytorch_bin_and_prefixless_weights_give_the_same_arrays(hf_pretraining, tmp_path):
    model, directory = hf_pretraining
    reference = huggingface.read_huggingface(str(directory / "model.safetensors"))
    # pytorch_model.bin of the same model (the pre-safetensors format).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    torch.save(model.state_dict(), bin_dir / "pytorch_model.bin")
    (bin_dir / "config.json").write_text((directory / "config.json").read_text())
    from_bin = huggingface.read_huggingface(str(bin_dir))
    assert from_bin.heads == reference.heads == ("masked_lm", "next_sentence")
    # A BertModel (no `bert.` prefix, no heads) of the same encoder.
    plain_dir = tmp_path / "plain"
    model.bert.save_pretrained(str(plain_dir))
    plain = huggingface.read_huggingface(str(plain_dir))
    assert plain.heads == ()
    for name, value in reference.arrays.items():
        np.testing.assert_array_equal(from_bin.arrays[name], value, err_msg=name)
        if not name.startswith(("masked_lm/", "next_sentence/")):
            np.testing.assert_array_equal(plain.arrays[name], value, err_msg=name)


def _write_safetensors(directory, tensors, config):
    directory.mkdir(parents=True, exist_ok=True)
    safetensors_numpy.save_file(tensors, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@pytest.fixture(scope="module")
def hf_tensors(hf_pretraining):
    _, directory = hf_pretraining
    tensors = safetensors_numpy.load_file(str(directory / "model.safetensors"))
    config = json.loads((directory / "config.json").read_text())
    return tensors, config


def test_wrong_shape_names_variable_and_both_shapes(hf_tensors, tmp_path):
    tensors, config = hf_tensors
    src = _write_safetensors(tmp_path / "src", tensors, dict(config, intermediate_size=64))
    with pytest.raises(CheckpointMismatchError) as e:
        convert("huggingface", str(src), str(tmp_path / "out"))
    message = str(e.value)
    assert "bert.encoder.layer.0.intermediate.dense.weight" in message
    assert "[16, 32]" in message and "[16, 64]" in message
    assert not (tmp_path / "out").exists()


def test_wrong_shape_refused_for_tf1_target_too(hf_tensors, tmp_path):
    tensors, config = hf_tensors
    src = _write_safetensors(tmp_path / "src", tensors, dict(config, vocab_size=V + 2))
    with pytest.raises(CheckpointMismatchError,
                       match=r"word_embeddings.weight.*\[40, 16\].*\[42, 16\]"):
        convert("huggingface", str(src), str(tmp_path / "out"), target_format="tf1")
    assert not (tmp_path / "out").exists()


def test_sharded_and_bfloat16_safetensors(hf_tensors, tmp_path):
    tensors, config = hf_tensors
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    for shard, keys in shards.items():
        safetensors_numpy.save_file({k: tensors[k] for k in keys}, str(sharded / shard))
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {k: shard for shard, keys in shards.items() for k in keys}}))
    (sharded / "config.json").write_text(json.dumps(config))
    whole = huggingface.read_huggingface(str(sharded))
    assert whole.heads == ("masked_lm", "next_sentence")
    np.testing.assert_array_equal(whole.arrays["encoder/layer_1/intermediate/kernel"],
                                  tensors["bert.encoder.layer.1.intermediate.dense.weight"].T)

    from safetensors.torch import save_file  # numpy cannot hold bfloat16; torch can
    bf16 = tmp_path / "bf16"
    bf16.mkdir()
    save_file({k: torch.from_numpy(v).to(torch.bfloat16) for k, v in tensors.items()},
              str(bf16 / "model.safetensors"))
    (bf16 / "config.json").write_text(json.dumps(config))
    half = huggingface.read_huggingface(str(bf16))
    want = torch.from_numpy(tensors["bert.pooler.dense.weight"]).to(torch.bfloat16).float()
    np.testing.assert_array_equal(half.arrays["encoder/pooler/dense/kernel"], want.numpy().T)


def test_untied_decoder_refused(hf_tensors, tmp_path):
    tensors, config = hf_tensors
    tensors = dict(tensors)
    tensors["cls.predictions.decoder.weight"] = np.ones((V, 16), np.float32)
    src = _write_safetensors(tmp_path / "src", tensors, config)
    with pytest.raises(CheckpointMismatchError, match="decoder.weight.*differs"):
        huggingface.read_huggingface(str(src))


def test_missing_pooler_warns_and_converts(hf_tensors, tmp_path, caplog):
    tensors, config = hf_tensors
    tensors = {k: v for k, v in tensors.items() if "pooler" not in k}
    src = _write_safetensors(tmp_path / "src", tensors, config)
    with caplog.at_level(logging.WARNING):
        convert("huggingface", str(src), str(tmp_path / "out"))
    assert "no pooler" in caplog.text
    model_dir.load_encoder(str(tmp_path / "out"))
    prefix = convert("huggingface", str(src), str(tmp_path / "tf1"), target_format="tf1")
    names = {n for n, _ in tf.train.list_variables(prefix)}
    assert "bert/embeddings/word_embeddings" in names
    assert not any(n.startswith("bert/pooler") for n in names)
    half = {k: v for k, v in hf_tensors[0].items() if k != "bert.pooler.dense.bias"}
    src = _write_safetensors(tmp_path / "half", half, config)
    with pytest.raises(CheckpointMismatchError, match="bert.pooler.dense.bias"):
        huggingface.read_huggingface(str(src))


def test_unrecognised_and_missing_files_refused(hf_tensors, tmp_path):
    tensors, config = hf_tensors
    src = _write_safetensors(tmp_path / "gpt", {"transformer.wte.weight": np.zeros((4, 4),
                                                                                    np.float32)},
                             config)
    with pytest.raises(weights_lib.CheckpointFormatError, match="not Hugging Face BERT weights"):
        huggingface.read_huggingface(str(src))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty: no Hugging Face weights"):
        huggingface.read_huggingface(str(tmp_path / "empty"))
    noconfig = _write_safetensors(tmp_path / "noconfig", tensors, config)
    os.remove(noconfig / "config.json")
    with pytest.raises(FileNotFoundError, match="noconfig/config.json: Hugging Face config.json"):
        huggingface.read_huggingface(str(noconfig))
    roberta = _write_safetensors(tmp_path / "roberta", tensors, dict(config, model_type="roberta"))
    with pytest.raises(ConfigError, match="model_type='roberta' is not BERT"):
        huggingface.read_huggingface(str(roberta))
    with pytest.raises(weights_lib.CheckpointFormatError, match="unknown weights format"):
        (tmp_path / "model.onnx").write_text("x")
        huggingface.load_huggingface_tensors(str(tmp_path / "model.onnx"))
