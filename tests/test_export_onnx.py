"""ONNX export (`export_model --format=onnx`): every model kind converts, runs in
onnxruntime and equals the SavedModel's ids signature (same input and output names,
float32 outputs within 1e-4, labels and tags equal); dynamic int8 shrinks the file; bad
requests are one-line errors that leave nothing."""

import collections
import os

import numpy as np
import onnx
import pytest
import tensorflow as tf

from bert_tf.export import export_onnx, saved_model
from bert_tf.model import model_dir
from bert_tf.model.config import BertConfig
from bert_tf.model.encoder import BertEncoder
from bert_tf.model.model_dir import write_model_dir
from tests.helpers.export import (BAD_TEXTS, assert_outputs_equal, choices_batch, ids_batch,
                                  model_info, packed, run_export_model, run_litert,
                                  saved_model_outputs, task_outputs)


def run_onnx(path, inputs):
    session = export_onnx.load_session(os.path.join(path, export_onnx.MODEL_FILE))
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, {k: np.asarray(v, np.int32) for k, v in inputs.items()})
    return dict(zip(names, values))


def test_encoder_equals_the_saved_model(encoder_dir, tmp_path):
    src, _ = encoder_dir
    resolved = model_dir.resolve(str(src))
    path = export_onnx.export_onnx_dir(resolved, str(tmp_path / "e"))
    assert path == os.path.join(str(tmp_path / "e"), "1")
    assert sorted(os.listdir(path)) == ["model.onnx", "model_info.json", "vocab.txt"]
    batches = [ids_batch(), ids_batch(seed=1, batch=1, seq=5), ids_batch(batch=2, seq=64)]
    for inputs, want in zip(batches, saved_model_outputs(resolved, batches, tmp_path)):
        assert_outputs_equal(run_onnx(path, inputs), want, atol=1e-4)
    # LayerNorm and GELU in the forms onnxruntime fuses (export_onnx.with_fused_kernels).
    layers = resolved.config.num_hidden_layers
    ops = collections.Counter(n.op_type for n in onnx.load(
        os.path.join(path, export_onnx.MODEL_FILE)).graph.node)
    assert ops["LayerNormalization"] == 2 * layers + 1 and ops["GlobalAveragePool"] == 0, ops
    assert ops["Erf"] == layers and ops["Neg"] == 0, ops
    info = model_info(path)
    assert info["format"] == "onnx" and info["opset"] == export_onnx.OPSET
    assert info["quantization"] == "float32" and info["task"] is None
    assert info["inputs"]["input_word_ids"] == {"dtype": "int32", "shape": [-1, -1]}
    assert info["outputs"]["sequence_output"] == {"dtype": "float32", "shape": [-1, -1, 16]}
    assert info["tokenizer"]["do_lower_case"] is True and info["max_seq_length"] == 64
    # A second export takes the next version, as for SavedModels.
    assert export_onnx.export_onnx_dir(resolved, str(tmp_path / "e")).endswith("2")


@pytest.mark.parametrize("name", ["mrpc", "sts-b", "conll2003", "squad", "swag"])
def test_task_heads_equal_the_saved_model(tmp_path, task_vocab_file, task_tokenizer, name):
    batch = choices_batch(task_tokenizer) if name == "swag" else \
        packed(task_tokenizer, BAD_TEXTS, list(reversed(BAD_TEXTS)))
    path, want = task_outputs(tmp_path, task_vocab_file, task_tokenizer, name, batch,
                              export_onnx.export_onnx_dir)
    assert_outputs_equal(run_onnx(path, batch), want, atol=1e-4)
    if name == "mrpc":
        assert open(os.path.join(path, "labels.txt")).read().split() == ["0", "1"]
        assert sorted(model_info(path)["outputs"]) == ["label", "label_id", "logits",
                                                       "probabilities"]


def test_dynamic_int8_shrinks_the_file_and_stays_close(tmp_path):
    # Big enough that the matmul weights dominate the file.
    cfg = BertConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=256, max_position_embeddings=32)
    write_model_dir(str(tmp_path / "m"), cfg, {"encoder": BertEncoder(cfg, name="encoder")})
    resolved = model_dir.resolve(str(tmp_path / "m"))
    float_path = export_onnx.export_onnx_dir(resolved, str(tmp_path / "f"))
    int8_path = export_onnx.export_onnx_dir(resolved, str(tmp_path / "q"),
                                            quantization="dynamic_int8")
    assert model_info(int8_path)["quantization"] == "dynamic_int8"
    size = {p: os.path.getsize(os.path.join(p, "model.onnx")) for p in (float_path, int8_path)}
    assert size[int8_path] < 0.6 * size[float_path], size
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 200, (2, 20)).astype(np.int32)
    inputs = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
              "input_type_ids": np.zeros_like(ids)}
    want = run_onnx(float_path, inputs)["sequence_output"]
    error = np.abs(run_onnx(int8_path, inputs)["sequence_output"] - want).max()
    assert 1e-6 < error < 0.2, error  # quantized (not bit-equal), yet close
    # A scale per output column of every int8 matmul weight (one per matrix cost a NER
    # model twice the F1).
    proto = onnx.load(os.path.join(int8_path, "model.onnx"))
    shapes = {i.name: list(i.dims) for i in proto.graph.initializer}
    weights = [n.input[1] for n in proto.graph.node if n.op_type == "MatMulInteger"]
    assert len(weights) == 2 * 4 + 1, weights  # per layer: q/k/v, output, 2 FFN; pooler
    scales = {w: shapes[w[:-len("_quantized")] + "_scale"] for w in weights}
    assert all(scales[w] == shapes[w][-1:] for w in weights), scales


def test_ops_without_onnx_form_are_a_clear_error(tmp_path):
    class Tokenizing(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def f(self, text):
            return {"pieces": tf.strings.unicode_decode(text, "UTF-8").to_tensor()}

    module = Tokenizing()
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.f})
    with pytest.raises(saved_model.ExportError, match=r"^runs/x: .*UnicodeDecode.*tokenize with"):
        export_onnx.convert_saved_model(str(tmp_path), source="runs/x")


@pytest.mark.parametrize("fmt", ["litert", "onnx"])
def test_cli_export_of_an_ids_format(encoder_dir, tmp_path, fmt):
    src, encoder = encoder_dir
    proc = run_export_model(f"--init_checkpoint={src}", f"--export_dir={tmp_path}",
                            f"--format={fmt}", "--quantization=float32")
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = proc.stdout.strip().splitlines()[-1]
    assert path == os.path.join(str(tmp_path), "1")
    inputs = ids_batch()
    got = {"litert": run_litert, "onnx": run_onnx}[fmt](path, inputs)
    np.testing.assert_allclose(got["pooled_output"],
                               encoder(inputs, training=False)["pooled_output"].numpy(),
                               atol=1e-4)


@pytest.mark.parametrize("args,message", [
    (["--format=onnx", "--parallel_branches=2"],
     "--parallel_branches applies to --format=saved_model only"),
    (["--format=onnx", "--mixed_precision=mixed_bfloat16"],
     "--mixed_precision applies to --format=saved_model or openvino only"),
    (["--format=onnx", "--quantization=static_int8"],
     "--quantization=static_int8 applies to --format=openvino only"),
    (["--format=onnx", "--text_signatures"], "--format=onnx exports the ids input only"),
    (["--quantization=float32"], "--quantization applies to --format=litert, onnx or"),
    (["--format=openvino", "--quantization=static_int8"],
     "--calibration_file is required by, and only taken with, --quantization=static_int8"),
    (["--format=openvino", "--calibration_file=x.txt"],
     "--calibration_file is required by, and only taken with, --quantization=static_int8"),
    (["--format=openvino", "--quantization=static_int8", "--calibration_file=/no/such.txt"],
     "--calibration_file=/no/such.txt: cannot read it"),
])
def test_cli_bad_requests_are_one_line(tmp_path, args, message):
    proc = run_export_model(f"--init_checkpoint={tmp_path}",
                            f"--export_dir={tmp_path / 'out'}", *args)
    assert proc.returncode == 1
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
