"""OpenVINO IR export (`export_model --format=openvino`): the IR equals the SavedModel's
ids signature in f32 (1e-4; the precision the export's plugin_config.json sets, which the
CPU plugin would otherwise choose itself), stays close in bf16 and int8, loads with the
openvino package alone, and calibration text errors name the file and line. Every
LayerNorm runs as one OpenVINO MVN kernel and every GELU as OpenVINO's Gelu
(export_openvino.with_fused_kernels)."""

import collections
import os

import numpy as np
import openvino as ov
import pytest

from bert_tf import export_model
from bert_tf.export import export_openvino, saved_model
from bert_tf.model import model_dir
from bert_tf.model.config import BertConfig
from bert_tf.model.encoder import BertEncoder
from bert_tf.model.model_dir import write_model_dir
from tests.helpers.export import (BAD_TEXTS, TASK_CONFIG, TASK_VOCAB, TINY,
                                  assert_outputs_equal, choices_batch, ids_batch, model_info,
                                  packed, run_client, run_export_model, saved_model_outputs,
                                  task_outputs, write_encoder_dir)

CALIBRATION = ["The quick brown fox jumps over the lazy dog.", "서울 is the capital of korea",
               "where is the dog\tthe dog is over the fox", "北京 fox jumps", "the lazy dog"]


def run_openvino(path, inputs):
    compiled = export_openvino.compile_model(path)
    result = compiled({k: np.asarray(v, np.int32) for k, v in inputs.items()})
    return {port.get_any_name(): result[port] for port in compiled.outputs}


def runtime_layer_types(path) -> collections.Counter:
    """How many of each layer type the CPU plugin runs for the IR in `path`."""
    runtime = export_openvino.compile_model(path).get_runtime_model()
    return collections.Counter(op.get_rt_info()["layerType"].astype(str)
                               for op in runtime.get_ordered_ops())


def assert_fused_kernels(path, layers):
    """The `layers` encoder layers' LayerNorms (2 per layer + the embeddings') run as MVN, no
    reduction left; their GELUs are OpenVINO's Gelu op, no Erf left; query, key and value
    are 3 products, no Split."""
    types = runtime_layer_types(path)
    assert types["MVN"] == 2 * layers + 1 and types["Reduce"] == 0, types
    assert types["Split"] == 0, types
    ir = collections.Counter(op.get_type_name() for op in
                             ov.Core().read_model(os.path.join(path, "model.xml")).get_ops())
    assert ir["Gelu"] == layers and ir["Erf"] == 0, ir


def test_fused_kernels_equal_the_saved_model(tmp_path):
    """Trained-like LayerNorms (gamma and beta not 1 and 0, which the conversion folds)."""
    (tmp_path / "new").mkdir()
    encoder = write_encoder_dir(tmp_path / "new")
    rng = np.random.default_rng(0)
    norms = [w for w in encoder.weights if w.path.endswith(("/gamma", "/beta"))]
    for w in norms:
        w.assign(rng.normal(w.numpy(), 0.5).astype("float32"))
    write_model_dir(str(tmp_path / "m"), TINY, {"encoder": encoder},
                    vocab_file=str(tmp_path / "new" / "vocab.txt"), do_lower_case=True)
    assert len(norms) == 2 * (2 * TINY.num_hidden_layers + 1)  # 2 per layer + embeddings
    resolved = model_dir.resolve(str(tmp_path / "m"))
    path = export_openvino.export_openvino_dir(resolved, str(tmp_path / "e"))
    assert_fused_kernels(path, TINY.num_hidden_layers)
    batches = [ids_batch(), ids_batch(seed=1, batch=2, seq=64)]
    for inputs, want in zip(batches, saved_model_outputs(resolved, batches, tmp_path)):
        assert_outputs_equal(run_openvino(path, inputs), want, atol=1e-5)


def test_encoder_equals_the_saved_model_in_f32(encoder_dir, tmp_path):
    src, _ = encoder_dir
    resolved = model_dir.resolve(str(src))
    path = export_openvino.export_openvino_dir(resolved, str(tmp_path / "e"))
    assert sorted(os.listdir(path)) == ["model.bin", "model.xml", "model_info.json",
                                        "plugin_config.json", "vocab.txt"]
    batches = [ids_batch(), ids_batch(seed=1, batch=1, seq=5), ids_batch(batch=2, seq=64)]
    for inputs, want in zip(batches, saved_model_outputs(resolved, batches, tmp_path)):
        assert_outputs_equal(run_openvino(path, inputs), want, atol=1e-4)
    assert_fused_kernels(path, TINY.num_hidden_layers)
    info = model_info(path)
    assert info["format"] == "openvino" and info["quantization"] == "float32"
    assert info["plugin_config"] == {"INFERENCE_PRECISION_HINT": "f32"}
    assert info["inputs"]["input_mask"] == {"dtype": "int32", "shape": [-1, -1]}
    assert info["outputs"]["pooled_output"] == {"dtype": "float32", "shape": [-1, 16]}


@pytest.mark.parametrize("name", ["mrpc", "conll2003"])
def test_task_heads_equal_the_saved_model_in_f32(tmp_path, task_vocab_file, task_tokenizer, name):
    batch = packed(task_tokenizer, BAD_TEXTS, list(reversed(BAD_TEXTS)))
    path, want = task_outputs(tmp_path, task_vocab_file, task_tokenizer, name, batch,
                              export_openvino.export_openvino_dir)
    assert_outputs_equal(run_openvino(path, batch), want, atol=1e-4)
    assert_fused_kernels(path, TASK_CONFIG.num_hidden_layers)


def test_bf16_hint_stays_close(tmp_path, task_vocab_file, task_tokenizer):
    batch = packed(task_tokenizer, BAD_TEXTS, list(reversed(BAD_TEXTS)))
    path, want = task_outputs(
        tmp_path, task_vocab_file, task_tokenizer, "mrpc", batch,
        lambda resolved, out: export_openvino.export_openvino_dir(
            resolved, out, mixed_precision="mixed_bfloat16"))
    assert model_info(path)["plugin_config"] == {"INFERENCE_PRECISION_HINT": "bf16"}
    assert_fused_kernels(path, TASK_CONFIG.num_hidden_layers)
    got = run_openvino(path, batch)
    # bfloat16 keeps 8 bits of mantissa: logits of order 1 move by about 1e-2.
    np.testing.assert_allclose(got["logits"], want["logits"], atol=0.1)
    clear = np.abs(np.diff(want["logits"], axis=-1))[:, 0] > 0.2  # not a near tie
    assert got["label_id"][clear].tolist() == want["label_id"][clear].tolist()


def bigger_encoder_dir(root):
    """An encoder whose matmuls NNCF quantizes (with a vocab, for calibration text)."""
    cfg = BertConfig(vocab_size=len(TASK_VOCAB), hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=256, max_position_embeddings=32)
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(TASK_VOCAB) + "\n", encoding="utf-8")
    write_model_dir(str(root / "m"), cfg, {"encoder": BertEncoder(cfg, name="encoder")},
                    vocab_file=str(vocab), do_lower_case=True)
    return model_dir.resolve(str(root / "m"))


def test_int8_weights_and_activations_stay_close(tmp_path, task_tokenizer):
    resolved = bigger_encoder_dir(tmp_path)
    float_path = export_openvino.export_openvino_dir(resolved, str(tmp_path / "f"))
    dynamic = export_openvino.export_openvino_dir(resolved, str(tmp_path / "d"),
                                                  quantization="dynamic_int8")
    static = export_openvino.export_openvino_dir(resolved, str(tmp_path / "s"),
                                                 quantization="static_int8",
                                                 calibration_texts=CALIBRATION)
    weights = {p: os.path.getsize(os.path.join(p, "model.bin"))
               for p in (float_path, dynamic, static)}
    assert weights[dynamic] < 0.6 * weights[float_path], weights
    assert weights[static] < 0.6 * weights[float_path], weights
    with open(os.path.join(static, "model.xml")) as f:
        assert "FakeQuantize" in f.read()  # activations quantized too
    batch = packed(task_tokenizer, BAD_TEXTS, length=32)
    want = run_openvino(float_path, batch)["sequence_output"]
    for path in (dynamic, static):
        error = np.abs(run_openvino(path, batch)["sequence_output"] - want).max()
        assert 1e-6 < error < 0.5, (path, error)  # quantized (not bit-equal), yet close


def test_calibration_for_multiple_choice_and_bad_lines(tmp_path, task_vocab_file, task_tokenizer):
    endings = ["jumps over the dog.", "", "is the capital of korea", "北京 fox"]
    contexts = [f"{t}\t" + "\t".join(endings) for t in ("the fox", "서울 dog")]
    batch = choices_batch(task_tokenizer)
    path, want = task_outputs(
        tmp_path, task_vocab_file, task_tokenizer, "swag", batch,
        lambda resolved, out: export_openvino.export_openvino_dir(
            resolved, out, quantization="static_int8", calibration_texts=contexts))
    got = run_openvino(path, batch)
    assert got["logits"].shape == want["logits"].shape == (3, 4)
    assert_fused_kernels(path, TASK_CONFIG.num_hidden_layers)
    resolved = model_dir.resolve(str(tmp_path / "m"))
    with pytest.raises(saved_model.ExportError, match=r"^cal.txt:2: 2 tab-separated texts; .* "
                                                 r"a context and 4 endings"):
        export_openvino.export_openvino_dir(resolved, str(tmp_path / "x"),
                                            quantization="static_int8",
                                            calibration_texts=[contexts[0], "a\tb", ""],
                                            calibration_source="cal.txt")
    with pytest.raises(saved_model.ExportError, match=r"^cal.txt: no calibration text"):
        export_openvino.export_openvino_dir(resolved, str(tmp_path / "x"),
                                            quantization="static_int8",
                                            calibration_texts=["", "  "],
                                            calibration_source="cal.txt")
    assert saved_model.list_versions(str(tmp_path / "x")) == []


# Loads the IR with the openvino package alone (plugin_config.json applied as docs/serving.md
# shows) and runs it on inputs from an .npz.
OPENVINO_CLIENT = r"""
import json, sys, numpy as np, openvino as ov
path, inputs_file, out_file = sys.argv[1:4]
config = json.load(open(f"{path}/plugin_config.json"))
compiled = ov.Core().compile_model(f"{path}/model.xml", "CPU", config)
result = compiled(dict(np.load(inputs_file)))
np.savez(out_file, **{p.get_any_name(): result[p] for p in compiled.outputs})
assert not [m for m in sys.modules if m.split(".")[0] in ("bert_tf", "tensorflow")]
"""


def test_cli_export_loads_with_openvino_alone(encoder_dir, tmp_path):
    src, encoder = encoder_dir
    calibration = tmp_path / "calibration.txt"
    calibration.write_text("\n".join(CALIBRATION) + "\n", encoding="utf-8")
    proc = run_export_model(f"--init_checkpoint={src}", f"--export_dir={tmp_path / 'e'}",
                            "--format=openvino")
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = proc.stdout.strip().splitlines()[-1]
    inputs = ids_batch()
    np.savez(tmp_path / "in.npz", **inputs)
    run_client(OPENVINO_CLIENT, [path, tmp_path / "in.npz", tmp_path / "out.npz"], tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["pooled_output"],
                               encoder(inputs, training=False)["pooled_output"].numpy(),
                               atol=1e-4)
    # The calibration file as the command reads it (in this process: one TF start less).
    config = export_model.ExportConfig(
        init_checkpoint=str(src), export_dir=str(tmp_path / "e"), format="openvino",
        quantization="static_int8", calibration_file=str(calibration))
    path = export_model.run(config)
    assert path == os.path.join(str(tmp_path / "e"), "2")
    assert model_info(path)["quantization"] == "static_int8"
