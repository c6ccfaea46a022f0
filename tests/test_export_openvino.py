"""OpenVINO IR export (`export_model --format=openvino`): the IR equals the SavedModel's
ids signature in f32 (1e-4; the precision the export's plugin_config.json sets, which the
CPU plugin would otherwise choose itself), stays close in bf16 and int8, loads with the
openvino package alone, and calibration text errors name the file and line. Every
LayerNorm runs as one OpenVINO MVN kernel and every GELU as OpenVINO's Gelu
(export_openvino.with_fused_kernels). The raw-text IR (`--text_signatures`): its tokenizer
gives our ids on tricky texts and on every code point (uncased and cased vocabs), its
outputs equal the SavedModel's raw-text signature, it loads with openvino +
openvino_tokenizers alone, and host-logic task kinds are refused."""

import collections
import json
import os
import unicodedata

import numpy as np
import openvino as ov
import pytest
import tensorflow as tf

from bert_tf import export_model
from bert_tf.core import output_guard
from bert_tf.export import export_openvino, openvino_text, saved_model
from bert_tf.model import model_dir
from bert_tf.model.config import BertConfig
from bert_tf.model.encoder import BertEncoder
from bert_tf.model.model_dir import write_model_dir
from bert_tf.text import text_rules
from bert_tf.text.tokenization import BertTokenizer
from tests.helpers import write_vocab
from tests.helpers.export import (BAD_TEXTS, TASK_CONFIG, TASK_VOCAB, TINY, as_bytes,
                                  assert_outputs_equal, choices_batch, fine_tuned_dir,
                                  ids_batch, model_info, packed, run_client, run_export_model,
                                  saved_model_outputs, task_outputs, write_encoder_dir)
from tests.helpers.text import HARD_TEXTS, all_code_point_texts, cased_vocab_tokens, korean_lines

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
    model = ov.Core().read_model(os.path.join(path, "model.xml"))
    ir = collections.Counter(op.get_type_name() for op in model.get_ops())
    assert ir["Gelu"] == layers and ir["Erf"] == 0, ir
    # The query/key/value products feed the attention directly: Keras' unstack of the
    # split axis went with the split, no Unsqueeze of a product's heads is left.
    unstacked = [op.get_friendly_name() for op in model.get_ops()
                 if op.get_type_name() == "Unsqueeze"
                 and op.input(0).get_source_output().get_node().get_type_name() == "Reshape"]
    assert not unstacked, unstacked
    # Dense layers take the [batch, seq, hidden] tensor itself, not a flattened copy
    # (where int8 quantizers could not fuse into the LayerNorm before them).
    flattened = [op.get_friendly_name() for op in model.get_ops()
                 if op.get_type_name() == "MatMul"
                 and op.input(0).get_source_output().get_node().get_type_name() == "Reshape"
                 and op.input(0).get_partial_shape().rank.get_length() == 2]
    assert not flattened, flattened


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


def test_encoder_ids_and_raw_text_irs_equal_the_saved_model_in_f32(encoder_dir, tmp_path):
    """One export with --text_signatures: the ids IR at EXPORT_DIR/1 and the raw-text IR
    at EXPORT_DIR/text/1 (which returns the ids it packed too)."""
    src, _ = encoder_dir
    resolved = model_dir.resolve(str(src))
    path, got = ov_text_outputs(resolved, [BAD_TEXTS], tmp_path / "ov")
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
    # The raw-text IR.
    want = saved_model_text_outputs(resolved, [BAD_TEXTS], tmp_path / "sm")
    assert sorted(want) == ["input_mask", "input_type_ids", "input_word_ids", "pooled_output",
                            "sequence_output"]
    assert_outputs_equal(got, want, atol=1e-4)
    assert sorted(os.listdir(os.path.join(os.path.dirname(path), "text", "1"))) == [
        "model.bin", "model.xml", "plugin_config.json"]


def test_token_classifier_equals_the_saved_model_in_f32(tmp_path, task_vocab_file,
                                                        task_tokenizer):
    """(A pair classifier's ids IR: test_raw_text_ir_of_a_pair_classifier_in_f32_bf16_and_int8.)"""
    batch = packed(task_tokenizer, BAD_TEXTS, list(reversed(BAD_TEXTS)))
    path, want = task_outputs(tmp_path, task_vocab_file, task_tokenizer, "conll2003", batch,
                              export_openvino.export_openvino_dir)
    assert_outputs_equal(run_openvino(path, batch), want, atol=1e-4)
    assert_fused_kernels(path, TASK_CONFIG.num_hidden_layers)


def assert_close_labels(got, want, what):
    """bfloat16 keeps 8 bits of mantissa: logits of order 1 move by about 1e-2; int8 more.
    Labels equal wherever the float32 logits are not a near tie."""
    np.testing.assert_allclose(got["logits"], want["logits"], atol=0.1, err_msg=what)
    clear = np.abs(np.diff(want["logits"], axis=-1))[:, 0] > 0.2
    assert got["label_id"][clear].tolist() == want["label_id"][clear].tolist(), what


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
    # ... by quantizers the CPU plugin fuses into the kernels before them: none runs on
    # its own but the pooler's, after the slice of the [CLS] rows.
    runtime = export_openvino.compile_model(static).get_runtime_model()
    alone = [op.get_friendly_name() for op in runtime.get_ordered_ops()
             if op.get_rt_info()["layerType"].astype(str) == "FakeQuantize"
             and op.input(0).get_source_output().get_node().get_rt_info()[
                 "layerType"].astype(str) != "StridedSlice"]
    assert not alone, alone
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
                            "--format=openvino", "--text_signatures")
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = proc.stdout.strip().splitlines()[-1]
    inputs = ids_batch()
    np.savez(tmp_path / "in.npz", **inputs)
    run_client(OPENVINO_CLIENT, [path, tmp_path / "in.npz", tmp_path / "out.npz"], tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["pooled_output"],
                               encoder(inputs, training=False)["pooled_output"].numpy(),
                               atol=1e-4)
    # The raw-text IR beside it, with openvino and openvino_tokenizers alone.
    run_client(OPENVINO_TEXT_CLIENT, [tmp_path / "e" / "text" / "1", tmp_path / "text.npz"],
               tmp_path)
    got = dict(np.load(tmp_path / "text.npz"))
    ids = {k: got[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
    want = packed(model_dir.resolve(str(src)).tokenizer(),
                  ["The quick brown fox", "서울 北京 fox", ""], length=128)
    assert {k: v.tolist() for k, v in ids.items()} == {k: v.tolist() for k, v in want.items()}
    np.testing.assert_allclose(got["pooled_output"],
                               encoder(ids, training=False)["pooled_output"].numpy(), atol=1e-4)
    # The calibration file as the command reads it (in this process: one TF start less).
    config = export_model.ExportConfig(
        init_checkpoint=str(src), export_dir=str(tmp_path / "e"), format="openvino",
        quantization="static_int8", calibration_file=str(calibration))
    path = export_model.run(config)
    assert path == os.path.join(str(tmp_path / "e"), "2")
    assert model_info(path)["quantization"] == "static_int8"


# ---------------------------------------------------------------------------- raw text

# The brief's tricky texts besides HARD_TEXTS (accents, CJK, Korean, control and
# zero-width characters, NBSP, a 150-character word, empty text, final sigma).
TRICKY_TEXTS = HARD_TEXTS + [
    "Crème brûlée à la carte, São Paulo", "東京都 北京市 서울특별시", "ab\x01cd\x7f e\u200bf g\u200ch",
    "non\u00a0breaking\u00a0space", "x" * 150, "é" * 150, "", "a\ufffdb", "ΣΟΦΟΣ σοφος ς",
    "Straße ﬁne µ K ϐ",
]


def vocab_for(tmp_path_factory, lower):
    """A vocab learnt from the tricky texts, Korean law text and its own chars: most words
    are whole tokens or a few pieces, so ids (not only [UNK]) are compared."""
    lines = TRICKY_TEXTS + korean_lines()[:200] + [
        "The quick brown fox jumps over the lazy dog and keeps running until sunset."] * 3
    path = tmp_path_factory.mktemp("uncased" if lower else "cased") / "vocab.txt"
    return write_vocab(path, cased_vocab_tokens(lines, do_lower_case=lower))


@pytest.fixture(scope="module")
def tricky_vocabs(tmp_path_factory):
    return {lower: vocab_for(tmp_path_factory, lower) for lower in (True, False)}


def ov_ids(tokenizer, length, a, b=None):
    """The ids openvino_text's tokenizer model gives (rows cut to the longest)."""
    import openvino as ov

    inputs = ("text",) if b is None else ("text", "text_b")
    compiled = ov.Core().compile_model(openvino_text.text_encoder(tokenizer, length, inputs),
                                       "CPU")
    texts = [np.array([t if isinstance(t, bytes) else t.encode() for t in x])
             for x in ([a] if b is None else [a, b])]
    result = compiled(texts)
    return {port.get_any_name(): result[port] for port in compiled.outputs}


def mismatched_rows(tokenizer, length, a, b=None):
    """Indices of the rows whose OpenVINO ids differ from ours (BertTokenizer.encode)."""
    got = ov_ids(tokenizer, length, a, b)
    want = {k: v.numpy() for k, v in tokenizer.encode(a, b, max_seq_length=length).items()}
    used = int(want["input_mask"].sum(-1).max())
    assert {k: v.shape for k, v in got.items()} == {k: (len(a), used) for k in want}
    return [i for i in range(len(a))
            if any(got[k][i].tolist() != want[k][i, :used].tolist() for k in want)]


def reordered_marks(text):
    """Whether NFD reorders `text`'s combining marks around one that is not "Mn" (so kept
    by stripping): openvino-tokenizers' NFD / NFC skip canonical reordering."""
    return any(unicodedata.combining(c) and unicodedata.category(c) != "Mn" for c in text)


@pytest.mark.parametrize("lower,strip_accents", [(True, None), (False, None), (True, False)])
def test_raw_text_tokenizer_gives_our_ids_on_tricky_texts(tricky_vocabs, lower, strip_accents):
    tokenizer = BertTokenizer(tricky_vocabs[lower], do_lower_case=lower,
                              strip_accents=strip_accents)
    mode = text_rules.text_mode(lower, strip_accents)
    texts = TRICKY_TEXTS + korean_lines()[:50] + [b"bad \xff\xfe fox\xc3", b"caf\xc3\xa9 \xe2\x82"]
    known = {i for i, t in enumerate(texts)
             if isinstance(t, str) and (mode.strip or mode.nfc) and reordered_marks(t)}
    assert set(mismatched_rows(tokenizer, 64, texts)) == known
    assert len(known) <= 1  # the musical-symbol line of HARD_TEXTS, in normalizing modes
    # Pairs truncated to max_seq_length: budgets of either parity, either text longer.
    b = list(reversed(texts))
    for length in (12, 13, 64):
        assert set(mismatched_rows(tokenizer, length, texts, b)) <= \
            known | {len(texts) - 1 - i for i in known}, length


@pytest.mark.parametrize("lower", [True, False])
def test_raw_text_tokenizer_gives_our_ids_on_every_code_point(tmp_path, lower):
    """Every assigned code point inside a word, one word per row, on a vocab of every
    character our tokenizer emits. Only characters Python 3.11's Unicode 14 does not
    know as OpenVINO's PCRE2 does (unassigned there; U+1171E changed category) differ."""
    words = [w for t in all_code_point_texts() for w in t.split(" ")]
    basic = text_rules.BasicTokenizer(do_lower_case=lower)
    chars = sorted({c for w in words for piece in basic.tokenize(w) for c in piece})
    vocab = write_vocab(tmp_path / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                        + chars + ["##" + c for c in chars])
    tokenizer = BertTokenizer(vocab, do_lower_case=lower)
    bad = [words[i][1] for i in mismatched_rows(tokenizer, 16, words)]
    assert all(unicodedata.category(c) == "Cn" or c == "\U0001171e" for c in bad), \
        [hex(ord(c)) for c in bad]
    assert len(bad) <= 6, [hex(ord(c)) for c in bad]


def ov_text_outputs(resolved, texts, out, **options):
    """(ids export path, the raw-text IR's outputs on `texts`: one list per text input)."""
    path = export_openvino.export_openvino_dir(resolved, str(out), text_signatures=True,
                                               **options)
    compiled = export_openvino.compile_model(os.path.join(str(out), "text", "1"),
                                             raw_text=True)
    names = [p.get_any_name() for p in compiled.inputs]
    result = compiled({n: np.array([t if isinstance(t, bytes) else t.encode() for t in x])
                       for n, x in zip(names, texts)})
    return path, {p.get_any_name(): result[p] for p in compiled.outputs}


def saved_model_text_outputs(resolved, texts, out):
    """The SavedModel raw-text signature's outputs on `texts`."""
    saved = saved_model.export_model_dir(resolved, str(out))
    signatures = tf.saved_model.load(saved).signatures
    fn = signatures[saved_model.TEXT_SIGNATURE if resolved.task_config is None
                    else saved_model.SERVING_DEFAULT]
    names = ["text", "text_b"]  # the raw-text inputs, in order
    return {k: v.numpy() for k, v in fn(**{n: tf.constant(as_bytes(x))
                                           for n, x in zip(names, texts)}).items()}


def task_text_outputs(tmp_path, task_vocab_file, task_tokenizer, name):
    """A tiny fine-tuned `name` model: (resolved, texts, the SavedModel's raw-text outputs)."""
    (tmp_path / "m").mkdir()
    fine_tuned_dir(tmp_path / "m", name, task_vocab_file, task_tokenizer, max_seq_length=16)
    resolved = model_dir.resolve(str(tmp_path / "m"))
    inputs = export_openvino.raw_text_plan(resolved)["text_inputs"]
    texts = [BAD_TEXTS, list(reversed(BAD_TEXTS))][:len(inputs)]
    return resolved, texts, saved_model_text_outputs(resolved, texts, tmp_path / "sm")


@pytest.mark.parametrize("name", ["sst-2", "sts-b"])
def test_raw_text_ir_equals_the_saved_model_text_signature(tmp_path, task_vocab_file,
                                                           task_tokenizer, name):
    """A one-text classifier and a pair regressor (a pair classifier: the test below)."""
    resolved, texts, want = task_text_outputs(tmp_path, task_vocab_file, task_tokenizer, name)
    path, got = ov_text_outputs(resolved, texts, tmp_path / "ov")
    assert_outputs_equal(got, want, atol=1e-4)
    info = model_info(path)["text_model"]
    assert info["path"] == "text/1" and info["requires"] == "import openvino_tokenizers"
    assert sorted(info["inputs"]) == ["text", "text_b"][:len(texts)]


def test_raw_text_ir_of_a_pair_classifier_in_f32_bf16_and_int8(tmp_path, task_vocab_file,
                                                             task_tokenizer):
    """Each export holds the ids IR too: f32 equal to the SavedModel's ids signature, the
    bf16 hint close."""
    resolved, texts, want = task_text_outputs(tmp_path, task_vocab_file, task_tokenizer, "mrpc")
    batch = packed(task_tokenizer, BAD_TEXTS, list(reversed(BAD_TEXTS)))
    [want_ids] = saved_model_outputs(resolved, [batch], tmp_path)
    path, got = ov_text_outputs(resolved, texts, tmp_path / "f32")
    assert_outputs_equal(got, want, atol=1e-4)
    assert_outputs_equal(run_openvino(path, batch), want_ids, atol=1e-4)
    assert_fused_kernels(path, TASK_CONFIG.num_hidden_layers)
    for options in ({"mixed_precision": "mixed_bfloat16"}, {"quantization": "dynamic_int8"},
                    {"quantization": "static_int8", "calibration_texts": CALIBRATION}):
        out = tmp_path / next(iter(options.values()))
        path, got = ov_text_outputs(resolved, texts, out, **options)
        with open(os.path.join(str(out), "text", "1", "plugin_config.json")) as f:
            assert json.load(f) == model_info(path)["plugin_config"], options
        assert_close_labels(got, want, str(options))
        if "mixed_precision" in options:
            assert model_info(path)["plugin_config"] == {"INFERENCE_PRECISION_HINT": "bf16"}
            assert_fused_kernels(path, TASK_CONFIG.num_hidden_layers)
            assert_close_labels(run_openvino(path, batch), want_ids, "bf16 ids IR")


@pytest.mark.parametrize("name", ["conll2003", "swag", "squad"])
def test_raw_text_ir_refused_where_the_outputs_are_host_logic(tmp_path, task_vocab_file,
                                                              task_tokenizer, name):
    (tmp_path / "m").mkdir()
    fine_tuned_dir(tmp_path / "m", name, task_vocab_file, task_tokenizer, max_seq_length=16)
    config = export_model.ExportConfig(init_checkpoint=str(tmp_path / "m"),
                                       export_dir=str(tmp_path / "e"), format="openvino",
                                       text_signatures=True)
    with pytest.raises(saved_model.ExportError, match=r"^--format=openvino --text_signatures: "
                                                      r"the raw-text outputs of .* host logic"
                                                      r"[^\n]*drop --text_signatures"):
        export_model.run(config)
    assert not (tmp_path / "e").exists() or saved_model.list_versions(str(tmp_path / "e")) == []


def test_a_file_where_the_raw_text_ir_goes_is_refused_and_kept(encoder_dir, tmp_path):
    src, _ = encoder_dir
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "text").write_bytes(b"the user's notes")
    with pytest.raises(output_guard.OutputGuardError,
                       match=r"^--export_dir=.*/e/text/1: .*/e/text is a file, not a "
                             r"directory; move that file or name another --export_dir$"):
        export_openvino.export_openvino_dir(model_dir.resolve(str(src)), str(tmp_path / "e"),
                                            text_signatures=True)
    assert os.listdir(tmp_path / "e") == ["text"]
    assert (tmp_path / "e" / "text").read_bytes() == b"the user's notes"


# Loads the raw-text IR with openvino and openvino_tokenizers alone.
OPENVINO_TEXT_CLIENT = r"""
import json, sys, numpy as np, openvino as ov, openvino_tokenizers
path, out_file = sys.argv[1:3]
config = json.load(open(f"{path}/plugin_config.json"))
compiled = ov.Core().compile_model(f"{path}/model.xml", "CPU", config)
result = compiled({"text": np.array([t.encode() for t in
                                     ["The quick brown fox", "서울 北京 fox", ""]])})
np.savez(out_file, **{p.get_any_name(): result[p] for p in compiled.outputs})
assert not [m for m in sys.modules if m.split(".")[0] in ("bert_tf", "tensorflow")]
"""
