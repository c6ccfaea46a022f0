"""LiteRT export (`export_model --format=litert`; its command line in test_export_onnx.py):
every model kind converts with builtin ops only, runs in the LiteRT runtime
(ai_edge_litert, as on a phone) and matches the Keras model; int8 weights shrink the file;
bad requests are clear errors that leave nothing."""

import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.export import export_converted, export_litert, saved_model
from bert_tf.model import model_dir
from bert_tf.model.config import BertConfig
from bert_tf.model.encoder import BertEncoder
from bert_tf.model.model_dir import write_model_dir
from tests.helpers.export import (BAD_TEXTS, choices_batch, fine_tuned_dir, ids_batch,
                                  model_info, packed, run_export_model, run_litert)


def test_float_encoder_matches_keras(encoder_dir, tmp_path):
    src, encoder = encoder_dir
    path = export_litert.export_litert_dir(model_dir.resolve(str(src)), str(tmp_path),
                                           quantization="float32")
    assert path == os.path.join(str(tmp_path), "1")
    assert sorted(os.listdir(path)) == ["model.tflite", "model_info.json", "vocab.txt"]
    for inputs in (ids_batch(), ids_batch(seed=1, batch=1, seq=5), ids_batch(batch=2, seq=64)):
        got = run_litert(path, inputs)
        want = encoder(inputs, training=False)
        for key in ("sequence_output", "pooled_output"):
            np.testing.assert_allclose(got[key], want[key].numpy(), atol=1e-4)
    info = model_info(path)
    assert info["quantization"] == "float32" and info["task"] is None
    assert info["inputs"]["input_word_ids"] == {"dtype": "int32", "shape": [-1, -1]}
    assert info["outputs"]["sequence_output"] == {"dtype": "float32", "shape": [-1, -1, 16]}
    assert info["tokenizer"]["do_lower_case"] is True
    assert info["max_seq_length"] == 64 and info["max_position_embeddings"] == 64
    # A second export takes the next version, as for SavedModels.
    assert export_litert.export_litert_dir(model_dir.resolve(str(src)), str(tmp_path)).endswith("2")


def test_int8_weights_shrink_the_file_and_stay_close(tmp_path):
    # Big enough that every matmul kernel is quantized (LiteRT leaves tiny tensors float).
    cfg = BertConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=256, max_position_embeddings=32)
    encoder = BertEncoder(cfg, name="encoder")
    write_model_dir(str(tmp_path / "m"), cfg, {"encoder": encoder})
    resolved = model_dir.resolve(str(tmp_path / "m"))
    float_path = export_litert.export_litert_dir(resolved, str(tmp_path / "f"),
                                                 quantization="float32")
    int8_path = export_litert.export_litert_dir(resolved, str(tmp_path / "q"))
    assert model_info(int8_path)["quantization"] == "dynamic_int8"
    float_size = os.path.getsize(os.path.join(float_path, "model.tflite"))
    int8_size = os.path.getsize(os.path.join(int8_path, "model.tflite"))
    assert int8_size < 0.4 * float_size, (int8_size, float_size)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 200, (2, 20)).astype(np.int32)
    inputs = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
              "input_type_ids": np.zeros_like(ids)}
    want = encoder(inputs, training=False)["sequence_output"].numpy()
    got = run_litert(int8_path, inputs)["sequence_output"]
    error = np.abs(got - want).max()
    assert 1e-6 < error < 0.2, error  # quantized (not bit-equal), yet close


def task_export(tmp_path, vocab_file, tokenizer, name, **options):
    (tmp_path / "m").mkdir()
    task, model = fine_tuned_dir(tmp_path / "m", name, vocab_file, tokenizer, **options)
    path = export_litert.export_litert_dir(model_dir.resolve(str(tmp_path / "m")),
                                           str(tmp_path / "e"), quantization="float32")
    return task, model, path


def test_classifier_matches_keras_and_ships_labels(tmp_path, task_vocab_file, task_tokenizer):
    _, model, path = task_export(tmp_path, task_vocab_file, task_tokenizer, "mrpc",
                                 max_seq_length=16)
    ids = packed(task_tokenizer, BAD_TEXTS, list(reversed(BAD_TEXTS)))
    got = run_litert(path, ids)
    want = model(ids, training=False)["logits"].numpy()
    np.testing.assert_allclose(got["logits"], want, atol=1e-4)
    np.testing.assert_allclose(got["probabilities"], tf.nn.softmax(want).numpy(), atol=1e-4)
    assert got["label_id"].tolist() == want.argmax(-1).tolist()
    assert [x.decode() for x in got["label"]] == [["0", "1"][i] for i in want.argmax(-1)]
    assert open(os.path.join(path, "labels.txt")).read().split() == ["0", "1"]
    info = model_info(path)
    assert info["task"] == "MRPC" and info["max_seq_length"] == 16
    assert sorted(info["outputs"]) == ["label", "label_id", "logits", "probabilities"]


@pytest.mark.parametrize("name,outputs", [("sts-b", ("logits", "score")),
                                          ("conll2003", ("logits", "tag_ids")),
                                          ("squad", ("start_logits", "end_logits"))])
def test_other_tasks_match_keras(tmp_path, task_vocab_file, task_tokenizer, name, outputs):
    _, model, path = task_export(tmp_path, task_vocab_file, task_tokenizer, name,
                                 max_seq_length=16)
    ids = packed(task_tokenizer, BAD_TEXTS)
    got = run_litert(path, ids)
    assert sorted(got) == sorted(outputs)
    want = model(ids, training=False)
    for key in outputs:
        if key in want:
            np.testing.assert_allclose(got[key], want[key].numpy(), atol=1e-4)
    if name == "conll2003":
        assert got["tag_ids"].tolist() == want["logits"].numpy().argmax(-1).tolist()


def test_multiple_choice_matches_keras(tmp_path, task_vocab_file, task_tokenizer):
    _, model, path = task_export(tmp_path, task_vocab_file, task_tokenizer, "swag",
                                 max_seq_length=16)
    ids = choices_batch(task_tokenizer)
    got = run_litert(path, ids)
    want = model(ids, training=False)["logits"].numpy()
    np.testing.assert_allclose(got["logits"], want, atol=1e-4)
    assert got["label_id"].tolist() == want.argmax(-1).tolist()


def test_ops_without_litert_kernels_are_a_clear_error(tmp_path):
    class Tokenizing(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def f(self, text):
            return {"words": tf.strings.regex_replace(text, "[.]", " . ")}

    module = Tokenizing()
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.f})
    with pytest.raises(saved_model.ExportError, match=r"^runs/x: .*RegexReplace.*tokenize on the"):
        export_litert.convert_saved_model(str(tmp_path), "float32", source="runs/x")


def test_failed_export_leaves_nothing_and_versions_are_kept(encoder_dir, tmp_path, monkeypatch):
    src, _ = encoder_dir
    with pytest.raises(saved_model.ExportError, match="quantization='int4'"):
        export_litert.export_litert_dir(model_dir.resolve(str(src)), str(tmp_path),
                                        quantization="int4")
    export_litert.export_litert_dir(model_dir.resolve(str(src)), str(tmp_path), version=3)
    with pytest.raises(saved_model.ExportError, match="already exists"):
        export_litert.export_litert_dir(model_dir.resolve(str(src)), str(tmp_path), version=3)

    def broken_write(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(export_converted, "write_model_info", broken_write)
    with pytest.raises(OSError, match="disk full"):
        export_litert.export_litert_dir(model_dir.resolve(str(src)), str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["3"]


@pytest.mark.parametrize("args,message", [
    (["--format=tflite"], "--format"),
    (["--quantization=dynamic_int8"], "--quantization applies to --format=litert, onnx or"),
    (["--format=litert", "--text_signatures"], "ids input only"),
])
def test_cli_bad_requests_are_messages(tmp_path, args, message):
    proc = run_export_model(f"--init_checkpoint={tmp_path}", f"--export_dir={tmp_path / 'out'}",
                            *args)
    assert proc.returncode != 0
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
