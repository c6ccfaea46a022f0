"""SavedModel export of the encoder: layout, versions, parity, warmup, clean-process load,
saved_model_cli and the gRPC request a client would send."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.export import saved_model
from bert_tf.model import model_dir
from bert_tf.core.constants import MODEL_INPUTS
from tests.helpers.export import (TINY, ids_batch, read_warmup, run_clean, run_client,
                                  run_export_model)


@pytest.fixture(scope="module")
def exported(encoder_dir, tmp_path_factory):
    src, encoder = encoder_dir
    export_dir = tmp_path_factory.mktemp("export")
    path = saved_model.export_model_dir(model_dir.resolve(str(src)), str(export_dir))
    return export_dir, path, encoder


def test_layout_and_next_version(exported, encoder_dir):
    export_dir, path, _ = exported
    assert path == os.path.join(str(export_dir), "1")
    for name in ("saved_model.pb", "variables", os.path.join("assets.extra", saved_model.WARMUP_FILE)):
        assert os.path.exists(os.path.join(path, name)), name
    second = saved_model.export_model_dir(model_dir.resolve(str(encoder_dir[0])), str(export_dir))
    assert os.path.basename(second) == "2"
    assert saved_model.list_versions(str(export_dir)) == [1, 2]
    assert sorted(os.listdir(export_dir)) == ["1", "2"]  # no temporary leftovers
    with pytest.raises(saved_model.ExportError, match="already exists"):
        saved_model.export_model_dir(model_dir.resolve(str(encoder_dir[0])), str(export_dir), version=2)


def test_failed_export_leaves_nothing(encoder_dir, tmp_path, monkeypatch):
    def broken_save(*args, **kwargs):
        os.makedirs(os.path.join(args[1], "variables"))  # a half-written model ...
        raise OSError("disk full")                        # ... then a failure

    monkeypatch.setattr(tf.saved_model, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        saved_model.export_model_dir(model_dir.resolve(str(encoder_dir[0])), str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_missing_config_names_the_dir(tmp_path):
    with pytest.raises(saved_model.ExportError, match=str(tmp_path)):
        saved_model.export_model_dir(model_dir.resolve(str(tmp_path)), str(tmp_path / "out"))


def test_ids_signature_matches_keras(exported):
    _, path, encoder = exported
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures[saved_model.SERVING_DEFAULT]
    for seq in (9, 64):  # short and the full max_position_embeddings
        inputs = ids_batch(seq=seq)
        got = fn(**{k: tf.constant(v) for k, v in inputs.items()})
        want = encoder(inputs, training=False)
        for name in ("sequence_output", "pooled_output"):
            assert got[name].dtype == tf.float32
            np.testing.assert_allclose(got[name].numpy(), want[name].numpy(), atol=1e-5)


def test_signature_io_spec(exported):
    _, path, _ = exported
    fn = tf.saved_model.load(path).signatures[saved_model.SERVING_DEFAULT]
    args = fn.structured_input_signature[1]
    assert sorted(args) == sorted(MODEL_INPUTS)
    assert all(a.dtype == tf.int32 and a.shape.as_list() == [None, None] for a in args.values())
    outs = fn.structured_outputs
    assert outs["sequence_output"].shape.as_list() == [None, None, TINY.hidden_size]
    assert outs["pooled_output"].shape.as_list() == [None, TINY.hidden_size]


def test_text_signature_ids_equal_the_tokenizer(exported, encoder_dir):
    from bert_tf.text.tokenization import BertTokenizer

    _, path, encoder = exported
    fn = tf.saved_model.load(path).signatures[saved_model.TEXT_SIGNATURE]
    texts = ["The quick brown foxes.", "", "  \t ", "the lazy dog " * 100, "서울 北京 is a fox",
             b"bad \xff\xfe fox"]
    got = fn(text=tf.constant(texts))
    tok = BertTokenizer(os.path.join(encoder_dir[0], "vocab.txt"), do_lower_case=True)
    want = tok.encode(texts, max_seq_length=TINY.max_position_embeddings)
    used = got["input_word_ids"].shape[1]
    assert used == 64  # the long text is truncated to max_seq_length (default: min(128, 64))
    for name in MODEL_INPUTS:
        assert got[name].numpy().tolist() == want[name].numpy()[:, :used].tolist(), name
    keras_out = encoder({k: got[k] for k in MODEL_INPUTS}, training=False)
    np.testing.assert_allclose(got["pooled_output"].numpy(), keras_out["pooled_output"].numpy(),
                               atol=1e-5)
    short = fn(text=tf.constant(["the fox", "the lazy dog"]))
    assert short["input_word_ids"].shape[1] == 5  # cut to the longest row, no coarser grid
    assert short["sequence_output"].shape[1] == 5
    # The shorter row, padded by one column, gives what it gives alone, unpadded.
    alone = encoder({k: short[k][:1, :4] for k in MODEL_INPUTS}, training=False)
    np.testing.assert_allclose(short["pooled_output"].numpy()[:1],
                               alone["pooled_output"].numpy(), atol=1e-5)
    np.testing.assert_allclose(short["sequence_output"].numpy()[:1, :4],
                               alone["sequence_output"].numpy(), atol=1e-5)


def test_ids_longer_than_positions_is_a_clear_error(exported):
    _, path, _ = exported
    fn = tf.saved_model.load(path).signatures[saved_model.SERVING_DEFAULT]
    inputs = ids_batch(seq=TINY.max_position_embeddings + 1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings"):
        fn(**{k: tf.constant(v) for k, v in inputs.items()})


def test_clean_process_load_matches(exported, tmp_path):
    _, path, encoder = exported
    inputs = ids_batch(seed=3)
    (got,) = run_clean(path, [(saved_model.SERVING_DEFAULT, inputs)], tmp_path)
    want = encoder(inputs, training=False)
    np.testing.assert_allclose(got["pooled_output"], want["pooled_output"].numpy(), atol=1e-5)
    np.testing.assert_allclose(got["sequence_output"], want["sequence_output"].numpy(),
                               atol=1e-5)


# Calls serving_default on requests from an .npz, then halves every variable of the loaded
# model (something a server never does) and calls the first request again.
REASSIGN_CLIENT = r"""
import sys, numpy as np, tensorflow as tf
import tensorflow_text  # registers the TF Text ops of the raw-text signature
path, inputs_file, out_file = sys.argv[1:4]
model = tf.saved_model.load(path)
fn = model.signatures["serving_default"]
flat = dict(np.load(inputs_file))
requests = sorted({k.split("/")[0] for k in flat})
call = lambda r: fn(**{k.split("/")[1]: tf.constant(v) for k, v in flat.items()
                       if k.startswith(r + "/")})["sequence_output"].numpy()
out = {r: call(r) for r in requests}
for v in tf.train.TrackableView(model).descendants():
    if isinstance(v, tf.Variable):
        v.assign(v * 0.5)
out["after_assign"] = call(requests[0])
np.savez(out_file, **out)
"""


def run_reassign_client(path, requests, tmp_path, **extra_env):
    inputs_file, out_file = tmp_path / "requests.npz", tmp_path / "out.npz"
    np.savez(inputs_file, **{f"r{i}/{k}": v for i, r in enumerate(requests)
                             for k, v in r.items()})
    run_client(REASSIGN_CLIENT, [path, inputs_file, out_file], tmp_path, **extra_env)
    return dict(np.load(out_file))


def test_the_servers_frozen_weights_setting_answers_the_same(exported, tmp_path):
    """docs/serving.md tells a server to run with TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1: each
    fused matmul then keeps its weights as it first saw them. Requests of other shapes
    after the first (new oneDNN primitives on the kept weights) get the encoder's answers.
    The control shows the setting was in force: after the weights change, the matmuls
    still compute with the old ones, unlike a process without it (why no training process
    may set it)."""
    _, path, encoder = exported
    requests = [ids_batch(seed=4, batch=1, seq=7), ids_batch(seed=5, batch=3, seq=9),
                ids_batch(seed=6, batch=2, seq=12)]
    (frozen_dir := tmp_path / "frozen").mkdir()
    (plain_dir := tmp_path / "plain").mkdir()
    frozen = run_reassign_client(path, requests, frozen_dir, TF_ONEDNN_ASSUME_FROZEN_WEIGHTS="1")
    plain = run_reassign_client(path, requests, plain_dir)
    for i, inputs in enumerate(requests):
        want = encoder(inputs, training=False)["sequence_output"].numpy()
        np.testing.assert_allclose(frozen[f"r{i}"], want, atol=1e-5)
        np.testing.assert_allclose(plain[f"r{i}"], want, atol=1e-5)
    assert np.abs(frozen["after_assign"] - plain["after_assign"]).max() > 1e-3, \
        "the setting did not keep the first weights: the test did not exercise it"


# CLEAN_CLIENT's requests and outputs, but the SavedModel loaded into a TF1 Session as TF
# Serving does, configured as docs/serving.md tells a server of short requests to run (one
# intra-op thread, the graph on the calling thread), before any eager op could size the
# process's thread pools.
SESSION_CLIENT = r"""
import sys, json, numpy as np, tensorflow as tf
import tensorflow_text  # registers the TF Text ops raw-text signatures use
path, requests_file, out_file = sys.argv[1:4]
import os
inter_op = int(os.environ.get("INTER_OP_THREADS", "-1"))  # -1: the receiving thread
graph = tf.Graph()
session = tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(
    intra_op_parallelism_threads=1, inter_op_parallelism_threads=inter_op,
    use_per_session_threads=inter_op > 1))
results = {}
try:
    with graph.as_default():
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
    for i, (signature_name, inputs_file) in enumerate(json.load(open(requests_file))):
        inputs = dict(np.load(inputs_file, allow_pickle=True))
        signature = meta.signature_def[signature_name]
        names = sorted(signature.outputs)
        got = session.run([signature.outputs[n].name for n in names],
                          {signature.inputs[k].name: v for k, v in inputs.items()})
        results.update({f"{i}/{n}": v for n, v in zip(names, got)})
finally:
    session.close()
assert not any(m == "bert_tf" or m.startswith("bert_tf.") for m in sys.modules), "bert_tf imported"
np.savez(out_file, **results)
"""


def assert_session_answers_as_keras(path, encoder, tmp_path, **client_env):
    """SESSION_CLIENT (`client_env`: its thread settings) on the export at `path`: two ids
    requests against `encoder` and one raw-text request against the eager signature."""
    texts = np.array(["the quick fox jumps", "서울 北京 is a dog ."], dtype=object)
    ids_requests = [ids_batch(seed=7), ids_batch(seed=8, batch=1, seq=4)]
    *ids_outputs, text_outputs = run_clean(
        path, [(saved_model.SERVING_DEFAULT, r) for r in ids_requests]
        + [(saved_model.TEXT_SIGNATURE, {"text": texts})], tmp_path, client=SESSION_CLIENT,
        **client_env)
    for inputs, got in zip(ids_requests, ids_outputs):
        want = encoder(inputs, training=False)
        for key in ("pooled_output", "sequence_output"):
            np.testing.assert_allclose(got[key], want[key].numpy(), atol=1e-5)
    eager = tf.saved_model.load(path).signatures[saved_model.TEXT_SIGNATURE](text=tf.constant(texts))
    assert sorted(text_outputs) == sorted(eager)
    for key, value in eager.items():
        if value.dtype.is_floating:
            np.testing.assert_allclose(text_outputs[key], value.numpy(), atol=1e-5)
        else:
            np.testing.assert_array_equal(text_outputs[key], value.numpy())


def test_a_session_as_tf_serving_runs_it_answers_the_same(exported, tmp_path):
    """TF Serving loads a SavedModel into a TF1 Session (its functions inlined into one
    graph), not through tf.saved_model.load, and docs/serving.md tells it to run each
    request on the receiving thread (--tensorflow_inter_op_parallelism=-1, which reaches
    the Session's config) with one intra-op thread. Both signatures answer as the encoder
    and the eager signature do."""
    _, path, encoder = exported
    assert_session_answers_as_keras(path, encoder, tmp_path)


def test_warmup_records_are_prediction_logs_that_run(exported):
    _, path, _ = exported
    logs = read_warmup(path)
    assert logs and all(log.WhichOneof("log_type") == "predict_log" for log in logs)
    loaded = tf.saved_model.load(path)
    for log in logs:
        request = log.predict_log.request
        fn = loaded.signatures[request.model_spec.signature_name]
        inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
        assert sorted(inputs) == sorted(fn.structured_input_signature[1])
        out = fn(**{k: tf.constant(v) for k, v in inputs.items()})
        assert np.isfinite(out["pooled_output"].numpy()).all()


def test_grpc_request_from_serving_api_matches_ours():
    from tensorflow_serving.apis import predict_pb2

    inputs = ids_batch()
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "bert"
    request.model_spec.signature_name = saved_model.SERVING_DEFAULT
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    ours = predict_pb2.PredictRequest()
    ours.ParseFromString(saved_model.predict_request_bytes(saved_model.SERVING_DEFAULT, inputs, "bert"))
    assert ours == request
    assert tf.make_ndarray(ours.inputs["input_mask"]).tolist() == inputs["input_mask"].tolist()


def test_saved_model_cli_show_and_run(exported, tmp_path):
    _, path, encoder = exported
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    show = subprocess.run([cli, "show", "--dir", path, "--all"], env=env,
                          capture_output=True, text=True)
    assert show.returncode == 0, show.stderr[-2000:]
    assert "signature_def['serving_default']" in show.stdout
    assert "outputs['pooled_output']" in show.stdout
    assert "signature_def['serving_text']" in show.stdout
    # saved_model_cli itself does not load TF Text's ops, and `run` imports the whole graph
    # (the raw-text function too): run it after importing them, as docs/serving.md says.
    cli_run = [sys.executable, "-c", "import sys, tensorflow_text; sys.argv[0] = "
               "'saved_model_cli'; from tensorflow.python.tools.saved_model_cli "
               "import main; main()", "run", "--dir", path, "--tag_set", "serve"]
    inputs = ids_batch(batch=1, seq=5)
    for name, value in inputs.items():
        np.save(tmp_path / f"{name}.npy", value)
    spec = ";".join(f"{name}={tmp_path / name}.npy" for name in inputs)
    run = subprocess.run(cli_run + ["--signature_def", "serving_default", "--inputs", spec,
                                    "--outdir", str(tmp_path)],
                         env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    got = np.load(tmp_path / "pooled_output.npy")
    want = encoder(inputs, training=False)["pooled_output"].numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    text_run = subprocess.run(cli_run + ["--signature_def", "serving_text", "--input_exprs",
                                         'text=["the quick fox", "a dog"]', "--outdir",
                                         str(tmp_path / "text")],
                              env=env, capture_output=True, text=True)
    assert text_run.returncode == 0, text_run.stderr[-2000:]
    assert np.load(tmp_path / "text" / "input_word_ids.npy").tolist() == [[2, 5, 6, 8, 3],
                                                                          [2, 21, 12, 3, 0]]


def test_a_split_export_runs_its_halves_on_two_inter_op_threads(encoder_dir, tmp_path):
    """export_model --parallel_branches=2: each layer saved as two halves (two [H, 3H/2]
    query/key/value kernels, the output and FFN kernels split by rows and columns), every
    weight still saved once; served as the docs say (a Session with one intra-op and two
    inter-op threads) it answers as the encoder does, and its raw-text signature as the
    eager one."""
    src, encoder = encoder_dir
    proc = run_export_model(f"--init_checkpoint={src}", f"--export_dir={tmp_path / 'split'}",
                            "--parallel_branches=2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = proc.stdout.strip().splitlines()[-1]
    reader = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
    shapes = [tuple(s) for k, s in reader.get_variable_to_shape_map().items()
              if k != "_CHECKPOINTABLE_OBJECT_GRAPH"]
    hidden, layers, inner = TINY.hidden_size, TINY.num_hidden_layers, TINY.intermediate_size
    assert shapes.count((hidden, 3 * hidden // 2)) == 2 * layers  # query/key/value halves
    assert shapes.count((hidden // 2, hidden)) == 2 * layers  # attention output rows
    assert inner // 2 == hidden  # TINY: FFN halves are [16, 16], as the pooler is
    assert shapes.count((hidden, inner // 2)) == 4 * layers + 1
    assert sum(int(np.prod(s)) for s in shapes) == encoder.count_params()
    assert_session_answers_as_keras(path, encoder, tmp_path, INTER_OP_THREADS="2")


def test_cli_refuses_a_split_the_model_cannot_take(encoder_dir, tmp_path):
    proc = run_export_model(f"--init_checkpoint={encoder_dir[0]}",
                            f"--export_dir={tmp_path / 'out'}", "--parallel_branches=3")
    assert proc.returncode == 1
    assert "--parallel_branches=3 must divide" in proc.stderr
    assert "num_attention_heads=2" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
    litert = run_export_model(f"--init_checkpoint={encoder_dir[0]}",
                              f"--export_dir={tmp_path / 'out'}", "--parallel_branches=2",
                              "--format=litert", "--notext_signatures")
    assert litert.returncode == 1 and "Traceback" not in litert.stderr
    assert "--parallel_branches applies to --format=saved_model only" in litert.stderr
    assert not (tmp_path / "out").exists()


def test_cli_exports(encoder_dir, tmp_path):
    proc = run_export_model(f"--init_checkpoint={encoder_dir[0]}", f"--export_dir={tmp_path}",
                            "--version=5")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == os.path.join(str(tmp_path), "5")
    assert saved_model.list_versions(str(tmp_path)) == [5]


def test_cli_bad_input_is_a_message_not_a_traceback(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = run_export_model(f"--init_checkpoint={tmp_path / 'empty'}",
                            f"--export_dir={tmp_path / 'out'}")
    assert proc.returncode == 1
    assert "export_model: " in proc.stderr and "Traceback" not in proc.stderr
    assert str(tmp_path / "empty") in proc.stderr
    assert not (tmp_path / "out").exists()


def test_each_weight_is_saved_once(exported):
    # Tracked both as Keras variables and as the raw variables TF1 loaders need, every
    # weight used to be written twice (a SavedModel twice the model's size).
    _, path, encoder = exported
    reader = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
    shapes = reader.get_variable_to_shape_map()
    saved = sum(int(np.prod(s)) for k, s in shapes.items() if k != "_CHECKPOINTABLE_OBJECT_GRAPH")
    assert saved == encoder.count_params()


def test_export_runs_the_fused_attention(exported):
    # The serving graph (bert_tf.serving.graph.InferenceEncoder): each layer's
    # query/key/value saved as one [H, 3H] kernel, no separate [H, H] query/key/value
    # kernels (only each layer's attention output and the pooler are [H, H]);
    # test_ids_signature_matches_keras checks it against the training-path encoder.
    _, path, _ = exported
    loaded = tf.saved_model.load(path)
    shapes = [tuple(v.shape) for v in loaded.signatures[saved_model.SERVING_DEFAULT].variables]
    hidden, layers = TINY.hidden_size, TINY.num_hidden_layers
    assert shapes.count((hidden, 3 * hidden)) == layers
    assert shapes.count((hidden, hidden)) == layers + 1
