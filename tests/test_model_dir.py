"""The model directory: write, find, restore with shape checks, load_encoder."""

import numpy as np
import pytest

from bert_tf import model_dir
from bert_tf.encoder import BertEncoder
from bert_tf.models import BertPretrainer
from tests.helpers import tiny_config

CFG = tiny_config(vocab_size=60, num_hidden_layers=2, max_position_embeddings=32)
INPUTS = {"input_word_ids": np.array([[2, 5, 9, 3, 0]]),
          "input_mask": np.array([[1, 1, 1, 1, 0]]),
          "input_type_ids": np.zeros((1, 5), "int32")}


def test_write_and_load_encoder(tmp_path):
    vocab = tmp_path / "src_vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    pretrainer = BertPretrainer(CFG)
    out = tmp_path / "model"
    prefix = model_dir.write_model_dir(
        str(out), CFG, {"encoder": pretrainer.encoder, "masked_lm": pretrainer.masked_lm,
                        "next_sentence": pretrainer.next_sentence},
        vocab_file=str(vocab), do_lower_case=True)
    assert model_dir.resolve_checkpoint(str(out)) == prefix
    assert model_dir.find_config(prefix) == CFG
    assert model_dir.find_vocab(str(out)).endswith("vocab.txt")
    assert model_dir.find_do_lower_case(str(out)) is True
    encoder = model_dir.load_encoder(str(out))
    np.testing.assert_allclose(encoder(INPUTS)["sequence_output"],
                               pretrainer.encoder(INPUTS)["sequence_output"], atol=1e-6)
    # The heads restore too, tied to the restored embeddings.
    fresh = BertPretrainer(CFG)
    model_dir.restore(str(out), {"encoder": fresh.encoder, "masked_lm": fresh.masked_lm,
                                 "next_sentence": fresh.next_sentence})
    batch = dict(INPUTS, masked_lm_positions=np.array([[1, 2]]))
    np.testing.assert_allclose(fresh(batch)["mlm_logits"], pretrainer(batch)["mlm_logits"],
                               atol=1e-5)


def test_mismatched_shapes_name_variable_and_both_shapes(tmp_path):
    model_dir.write_model_dir(str(tmp_path), CFG, {"encoder": BertEncoder(CFG)})
    wider = CFG.replace(hidden_size=32, intermediate_size=64)
    with pytest.raises(model_dir.CheckpointMismatchError) as e:
        model_dir.restore(str(tmp_path), {"encoder": BertEncoder(wider)})
    message = str(e.value)
    assert "[16]" in message and "[32]" in message and "variable `" in message


def test_layer_count_and_missing_heads_refused(tmp_path):
    model_dir.write_model_dir(str(tmp_path), CFG, {"encoder": BertEncoder(CFG)})
    with pytest.raises(model_dir.CheckpointMismatchError, match="2 encoder layers"):
        model_dir.restore(str(tmp_path), {"encoder": BertEncoder(CFG.replace(num_hidden_layers=3))})
    with pytest.raises(model_dir.CheckpointMismatchError, match="2 encoder layers"):
        model_dir.restore(str(tmp_path), {"encoder": BertEncoder(CFG.replace(num_hidden_layers=1))})
    pretrainer = BertPretrainer(CFG)
    with pytest.raises(model_dir.CheckpointMismatchError, match="lacks variables"):
        model_dir.restore(str(tmp_path), {"encoder": pretrainer.encoder,
                                          "masked_lm": pretrainer.masked_lm})
    # Partial restore of what exists is fine when asked for.
    model_dir.restore(str(tmp_path), {"encoder": pretrainer.encoder,
                                      "masked_lm": pretrainer.masked_lm}, require_all=False)


def test_missing_things_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint found"):
        model_dir.resolve_checkpoint(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        model_dir.resolve_checkpoint(str(tmp_path / "ckpt-7"))
    with pytest.raises(FileNotFoundError, match="no bert_config.json"):
        model_dir.load_encoder(str(tmp_path))
    assert model_dir.find_vocab(str(tmp_path)) is None
    assert model_dir.find_do_lower_case(str(tmp_path)) is None
