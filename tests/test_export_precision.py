"""bfloat16 SavedModels (`export_model --mixed_precision=mixed_bfloat16`): weights stored
in bfloat16 where the matmuls read them, float32 everywhere else, outputs within a stated
tolerance of the float32 export, and a clean-process / saved_model_cli load.

Tolerance. bfloat16 keeps 8 significant bits: each rounding moves a value by up to 2^-9
of it (0.2%). The bfloat16 export rounds every dense kernel once and each matmul's input
and output on every layer, so its outputs drift from float32 by a few such steps of the
activations' scale. The encoder's sequence output is LayerNorm's (unit variance, values up
to about 6-8, where one bfloat16 step is 2^-5): on real MiniLM-L6 (6 layers, 200 SST-2 dev
sentences) the float32 and bfloat16 exports differ by 0.0021 on average and 0.034 at most
(about one bfloat16 step of the largest outputs), the pooled output by 0.0003 / 0.002.
We allow 4x the mean (SEQ_MEAN = 2^-7, two bfloat16 steps at 1.0) and about 3 steps at the
largest outputs (SEQ_MAX = 0.1); pooled (tanh, |x| < 1): 0.002 mean, 0.01 max; logits of
a classifier: 0.05 (their scale here is about 1). Float32 itself matches within 1e-5
(test_export.py), so a bfloat16 export that silently ran in float32 fails the test that
requires a difference, and one whose matmuls lost more than bfloat16's precision fails
these bounds.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.export import saved_model
from bert_tf.model import model_dir
from bert_tf.model.encoder import BertEncoder
from tests.helpers import REPO_ROOT
from tests.helpers.export import (TASK_CONFIG, TASK_VOCAB, TINY, as_bytes, call, fine_tuned_dir,
                                  ids_batch, packed, run_clean, write_encoder_dir)

SEQ_MEAN, SEQ_MAX = 2 ** -7, 0.1
POOLED_MEAN, POOLED_MAX = 0.002, 0.01
LOGITS_MAX = 0.05


def assert_close(got, want, mean, most, what):
    diff = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    assert diff.mean() <= mean and diff.max() <= most, (
        f"{what}: bfloat16 - float32 mean {diff.mean():.2e} (<= {mean:.2e}), max "
        f"{diff.max():.2e} (<= {most:.2e})")


@pytest.fixture(scope="module")
def encoder_exports(tmp_path_factory):
    import keras

    keras.utils.set_random_seed(1)
    src = tmp_path_factory.mktemp("encoder_model")
    write_encoder_dir(src)
    export_dir = str(tmp_path_factory.mktemp("export"))
    resolved = model_dir.resolve(str(src))
    fp32 = saved_model.export_model_dir(resolved, export_dir)
    bf16 = saved_model.export_model_dir(resolved, export_dir, mixed_precision="mixed_bfloat16")
    return src, fp32, bf16


def saved_dtypes(path):
    """name -> dtype of every variable in a SavedModel's checkpoint."""
    reader = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
    return {k: v.name for k, v in reader.get_variable_to_dtype_map().items()
            if k != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def signature_nodes(loaded) -> list:
    """The NodeDefs of every function behind a loaded SavedModel's serving_default."""
    graph = loaded.signatures[saved_model.SERVING_DEFAULT].graph.as_graph_def()
    return [n for f in graph.library.function for n in f.node_def]


def test_matmul_kernels_are_stored_in_bfloat16_and_the_rest_in_float32(encoder_exports):
    _, fp32, bf16 = encoder_exports
    assert set(saved_dtypes(fp32).values()) == {"float32"}
    loaded = tf.saved_model.load(bf16)
    variables = [(v.name, v.dtype.name, len(v.shape))
                 for v in loaded.signatures[saved_model.SERVING_DEFAULT].variables]
    dense = [(n, d) for n, d, rank in variables if rank == 2 and "embeddings" not in n]
    # Per layer the fused query/key/value, attention output, FFN in and out; the pooler.
    assert len(dense) == 4 * TINY.num_hidden_layers + 1, dense
    assert {d for _, d in dense} == {"bfloat16"}, dense
    others = [(n, d) for n, d, _ in variables if "embeddings" in n or "layer_norm" in n]
    assert any("embeddings" in n for n, _ in others)
    assert any("layer_norm" in n for n, _ in others)
    assert {d for _, d in others} == {"float32"}, others
    # Stored as read: no variable of the bfloat16 graph is cast to bfloat16 per call.
    nodes = signature_nodes(loaded)
    reads = {n.name for n in nodes if n.op == "ReadVariableOp"}
    casts_of_reads = [n.name for n in nodes if n.op == "Cast"
                      and any(i.split(":")[0] in reads for i in n.input)]
    assert not casts_of_reads, casts_of_reads


def test_attention_scores_stay_in_bfloat16(encoder_exports):
    """The scores come out of a bfloat16 product and the probabilities go into one: a
    float32 softmax between them only added two casts of the largest tensor per layer."""
    _, _, bf16 = encoder_exports
    nodes = signature_nodes(tf.saved_model.load(bf16))
    products = {n.name for n in nodes if n.op.startswith("BatchMatMul")}
    softmaxes = [n.attr["T"].type for n in nodes if n.op == "Softmax"]
    assert softmaxes == [tf.bfloat16.as_datatype_enum] * TINY.num_hidden_layers, softmaxes
    casts_of_scores = [n.name for n in nodes if n.op == "Cast"
                       and any(i.split(":")[0] in products for i in n.input)]
    assert not casts_of_scores, casts_of_scores


def test_bfloat16_layer_norms_run_as_one_kernel_each(encoder_exports):
    """The blocks' LayerNorms of the bfloat16 graph are in the form oneDNN fuses into one
    kernel; the float32 export (what ONNX, OpenVINO and LiteRT convert) keeps Keras'."""
    _, fp32, bf16 = encoder_exports

    def ops(path):
        return [n.op for n in signature_nodes(tf.saved_model.load(path))]

    assert ops(bf16).count("FusedBatchNormV3") == 2 * TINY.num_hidden_layers
    assert "FusedBatchNormV3" not in ops(fp32)


def test_layer_norm_as_one_kernel_equals_the_layer():
    from bert_tf.layers.normalization import float32_layer_norm, layer_norm_as_one_kernel

    norm = float32_layer_norm(1e-12)
    norm.build((None, None, 64))
    rng = np.random.default_rng(0)
    norm.set_weights([rng.normal(1, 0.3, 64).astype(np.float32),
                      rng.normal(0, 0.3, 64).astype(np.float32)])
    # Rows with a mean 3x their spread, at three scales (the variance must not cancel).
    for scale in (1.0, 1e-2, 1e-3):
        x = (rng.normal(0, scale, (4, 7, 64)) + rng.normal(0, 3 * scale, (4, 7, 1)))
        x = tf.constant(x.astype(np.float32))
        got = tf.function(lambda t: layer_norm_as_one_kernel(norm, t))(x)
        np.testing.assert_allclose(got, norm(x), atol=3e-5)


def test_bfloat16_softmax_equals_the_float32_one_rounded():
    """What the serving graph's bfloat16 softmax gives up: nothing. oneDNN's bfloat16
    softmax accumulates in float32 and rounds once, as casting float32 probabilities
    does; padded keys (-10000, rounded to -9984) weigh exactly 0 either way."""
    from bert_tf.layers import BertSelfAttention, attention_bias_from_mask

    layer = BertSelfAttention(hidden_size=32, num_heads=2, dtype="mixed_bfloat16")
    layer.build((None, None, 32))
    rng = np.random.default_rng(0)
    q, k, v = (tf.constant(rng.normal(0, 3, (3, 2, 9, 16)), tf.bfloat16) for _ in range(3))
    mask = np.ones((3, 9), np.int32)
    mask[1, 4:], mask[2, 1:] = 0, 0
    bias = attention_bias_from_mask(mask)
    outputs = {dtype: layer.attend(q, k, v, bias, False, 3, 9, 2, softmax_dtype=dtype)
               for dtype in ("float32", "bfloat16")}
    assert outputs["bfloat16"][1].dtype == tf.bfloat16
    np.testing.assert_array_equal(outputs["bfloat16"][0].numpy().astype(np.float32),
                                  outputs["float32"][0].numpy().astype(np.float32))


def test_encoder_outputs_are_float32_and_within_tolerance(encoder_exports):
    _, fp32, bf16 = encoder_exports
    inputs = {k: tf.constant(v) for k, v in ids_batch(seed=5).items()}
    want = tf.saved_model.load(fp32).signatures[saved_model.SERVING_DEFAULT](**inputs)
    got = tf.saved_model.load(bf16).signatures[saved_model.SERVING_DEFAULT](**inputs)
    assert {k: v.dtype for k, v in got.items()} == {k: tf.float32 for k in want}
    mask = inputs["input_mask"].numpy().astype(bool)
    seq_got, seq_want = got["sequence_output"].numpy()[mask], want["sequence_output"].numpy()[mask]
    assert_close(seq_got, seq_want, SEQ_MEAN, SEQ_MAX, "sequence_output")
    assert_close(got["pooled_output"], want["pooled_output"], POOLED_MEAN, POOLED_MAX,
                 "pooled_output")
    # ... and it really ran in bfloat16 (float32 runs agree within 1e-5).
    assert np.abs(seq_got - seq_want).max() > 1e-4


def test_text_signature_tokenizes_as_float32(encoder_exports):
    _, fp32, bf16 = encoder_exports
    text = tf.constant(["the quick brown fox", "a lazy dog ."])
    want = tf.saved_model.load(fp32).signatures[saved_model.TEXT_SIGNATURE](text=text)
    got = tf.saved_model.load(bf16).signatures[saved_model.TEXT_SIGNATURE](text=text)
    assert got["input_word_ids"].numpy().tolist() == want["input_word_ids"].numpy().tolist()
    assert_close(got["pooled_output"], want["pooled_output"], POOLED_MEAN, POOLED_MAX,
                 "pooled_output")


def test_loads_in_a_process_without_bert_tf(encoder_exports, tmp_path):
    _, fp32, bf16 = encoder_exports
    inputs = ids_batch(seed=3)
    (got,) = run_clean(bf16, [(saved_model.SERVING_DEFAULT, inputs)], tmp_path)
    want = tf.saved_model.load(fp32).signatures[saved_model.SERVING_DEFAULT](
        **{k: tf.constant(v) for k, v in inputs.items()})
    assert got["pooled_output"].dtype == np.float32
    assert_close(got["pooled_output"], want["pooled_output"], POOLED_MEAN, POOLED_MAX,
                 "pooled_output")


def test_saved_model_cli_runs_it(encoder_exports, tmp_path):
    # The TF1-style C++ loader, as tensorflow_model_server loads a model.
    _, _, bf16 = encoder_exports
    inputs = ids_batch(batch=1, seq=5)
    for name, value in inputs.items():
        np.save(tmp_path / f"{name}.npy", value)
    spec = ";".join(f"{name}={tmp_path / name}.npy" for name in inputs)
    run = subprocess.run(
        [sys.executable, "-c", "import sys, tensorflow_text; sys.argv[0] = 'saved_model_cli'; "
         "from tensorflow.python.tools.saved_model_cli import main; main()", "run", "--dir",
         bf16, "--tag_set", "serve", "--signature_def", "serving_default", "--inputs", spec,
         "--outdir", str(tmp_path)],
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    got = np.load(tmp_path / "pooled_output.npy")
    assert got.dtype == np.float32 and np.isfinite(got).all()


def test_classifier_logits_are_float32_and_within_tolerance(tmp_path):
    from bert_tf.text.tokenization import BertTokenizer

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(TASK_VOCAB) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(str(vocab), do_lower_case=True)
    _, model = fine_tuned_dir(tmp_path / "m", "mrpc", str(vocab), tokenizer, max_seq_length=16)
    bf16_path = saved_model.export_model_dir(model_dir.resolve(str(tmp_path / "m")),
                                        str(tmp_path / "e"), mixed_precision="mixed_bfloat16")
    bf16 = tf.saved_model.load(bf16_path)
    variables = bf16.signatures["serving_default"].variables
    head = [v.dtype.name for v in variables if tuple(v.shape) == (TASK_CONFIG.hidden_size, 2)]
    assert head == ["float32"], head  # the classifier's kernel: logits in float32
    assert "bfloat16" in {v.dtype.name for v in variables}
    a, b = ["the quick brown fox jumps", "where is seoul ?"], ["a lazy dog",
                                                             "seoul is the capital of korea"]
    got = call(bf16.signatures["serving_default"], text=as_bytes(a), text_b=as_bytes(b))
    # The float32 reference: the Keras model on the same text, tokenized as the signature
    # does (the float32 export equals it within 1e-5: test_export_tasks.py).
    want = model(packed(tokenizer, a, b), training=False)["logits"].numpy()
    assert got["logits"].dtype == np.float32 and got["probabilities"].dtype == np.float32
    assert_close(got["logits"], want, LOGITS_MAX, LOGITS_MAX, "logits")
    assert np.abs(got["logits"] - want).max() > 1e-6  # ... and it ran in bfloat16


def test_with_precision_refuses_what_it_does_not_export():
    with pytest.raises(saved_model.ExportError, match="mixed_float16"):
        saved_model.with_precision(BertEncoder(TINY), "mixed_float16")


def test_cli_flag_and_its_litert_refusal(encoder_exports, tmp_path):
    src, _, _ = encoder_exports
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2",
               KERAS_BACKEND="tensorflow")
    base = [sys.executable, "-m", "bert_tf.export_model", f"--init_checkpoint={src}",
            f"--export_dir={tmp_path}", "--mixed_precision=mixed_bfloat16"]
    proc = subprocess.run(base, env=env, capture_output=True, text=True, cwd=str(REPO_ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = proc.stdout.strip().splitlines()[-1]
    assert "bfloat16" in set(saved_dtypes(path).values())
    litert = subprocess.run(base + ["--format=litert", "--notext_signatures"], env=env,
                            capture_output=True, text=True, cwd=str(REPO_ROOT))
    assert litert.returncode == 1 and "Traceback" not in litert.stderr
    assert "--mixed_precision applies to --format=saved_model or openvino only" in litert.stderr


@pytest.mark.parametrize("parallel_branches", [1, 2])
def test_minilm_bfloat16_export_is_within_tolerance(minilm_dir, shared_data, tmp_path,
                                                    parallel_branches):
    # The tolerance above, on the real model and real sentences (SST-2 dev); also with
    # the layers split in two (export_model --parallel_branches=2: float32 residual sums).
    from bert_tf.model import model_dir
    from bert_tf.convert_checkpoint import convert

    src = tmp_path / "minilm"
    convert("huggingface", str(minilm_dir), str(src))
    encoder = model_dir.load_encoder(str(src))
    bf16 = saved_model.export_model_dir(model_dir.resolve(str(src)), str(tmp_path / "e"),
                                   mixed_precision="mixed_bfloat16",
                                   parallel_branches=parallel_branches)
    lines = (shared_data / "glue" / "SST-2" / "dev.tsv").read_text().splitlines()[1:65]
    text = tf.constant([line.split("\t")[0] for line in lines])
    got = tf.saved_model.load(bf16).signatures[saved_model.TEXT_SIGNATURE](text=text)
    # The float32 reference: the Keras encoder on the ids the signature tokenized (the
    # float32 export equals it within 1e-5: test_export.py).
    want = encoder({k: got[k] for k in ("input_word_ids", "input_mask", "input_type_ids")},
                   training=False)
    assert want["sequence_output"].dtype == tf.float32
    mask = got["input_mask"].numpy().astype(bool)
    assert_close(got["sequence_output"].numpy()[mask], want["sequence_output"].numpy()[mask],
                 SEQ_MEAN, SEQ_MAX, "MiniLM sequence_output")
    assert_close(got["pooled_output"], want["pooled_output"], POOLED_MEAN, POOLED_MAX,
                 "MiniLM pooled_output")
