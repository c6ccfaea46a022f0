"""What the export tests share (SavedModel, LiteRT, ONNX, OpenVINO, bfloat16, serving
limits): the tiny encoder and fine-tuned models they export, their inputs, and runners of
an export in a clean process or in another runtime. The fixtures over these are in
tests/conftest.py (encoder_dir, task_vocab_file, task_tokenizer)."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf

from bert_tf.export import export_converted, export_litert, saved_model as export
from bert_tf.model import model_dir
from bert_tf.model.config import BertConfig
from bert_tf.model.encoder import BertEncoder
from bert_tf.model.model_dir import TASK_CONFIG_FILE, write_model_dir
from bert_tf.tasks import make_task
from tests.helpers import REPO_ROOT

# The encoder's vocab (padded with [unused*] to TINY's 40) and config.
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown", "fox", "jumps",
         "over", "lazy", "dog", ".", ",", "서", "##울", "北", "京", "##s", "is", "a"]
TINY = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=32, max_position_embeddings=64)

# The fine-tuned task models' vocab and config.
TASK_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown", "fox",
              "jumps", "over", "lazy", "dog", ".", ",", "?", "!", "where", "is", "seoul",
              "capital", "of", "korea", "##s", "##ing", "u", "s", "a", "서", "##울", "北", "京",
              "what", "in", "jump"]
TASK_CONFIG = BertConfig(vocab_size=len(TASK_VOCAB), hidden_size=16, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
BAD_TEXTS = ["The quick brown fox jumps.", "", "   \t ", "the lazy dog " * 40,
             "서울 is the capital of korea", "北京 fox", b"bad \xff\xfe fox\xc3"]

# Runs in a fresh interpreter that imports tensorflow (+ tensorflow_text) but never bert_tf:
# loads the SavedModel, calls the named signatures on inputs from an .npz, saves the outputs.
CLEAN_CLIENT = r"""
import sys, json, numpy as np, tensorflow as tf
import tensorflow_text  # registers the TF Text ops raw-text signatures use
path, requests_file, out_file = sys.argv[1:4]
model = tf.saved_model.load(path)
requests = json.load(open(requests_file))
results = {}
for i, (signature, inputs_file) in enumerate(requests):
    inputs = dict(np.load(inputs_file, allow_pickle=True))
    fn = model.signatures[signature]
    out = fn(**{k: tf.constant(v) for k, v in inputs.items()})
    for k, v in out.items():
        results[f"{i}/{k}"] = v.numpy()
assert not any(m == "bert_tf" or m.startswith("bert_tf.") for m in sys.modules), "bert_tf imported"
np.savez(out_file, **results)
"""


def write_encoder_dir(directory) -> BertEncoder:
    """A model dir in `directory` holding a new TINY encoder (weights from Keras's current
    seed) and VOCAB padded to TINY's size; returns the encoder."""
    encoder = BertEncoder(TINY, name="encoder")
    vocab = os.path.join(str(directory), "vocab.txt")
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB + [f"[unused{i}]" for i in range(40 - len(VOCAB))]) + "\n")
    write_model_dir(str(directory), TINY, {"encoder": encoder}, vocab_file=vocab,
                    do_lower_case=True)
    return encoder


def fine_tuned_dir(root, task_name, vocab_file, tokenizer, **options):
    """A model dir as finetune writes it: config, vocab, task_config.json, encoder+head."""
    task = make_task(task_name, tokenizer=tokenizer, **options)
    keras.utils.set_random_seed(0)  # the same model every run
    model = task.build_model(BertEncoder(TASK_CONFIG, name="encoder"))
    # Non-zero head weights so that every output depends on the text.
    for v in model.task_head.weights:
        v.assign(np.random.default_rng(0).normal(0, 0.5, v.shape).astype("float32"))
    write_model_dir(str(root), TASK_CONFIG, model.checkpoint_items(), vocab_file=vocab_file,
                    do_lower_case=True)
    (root / TASK_CONFIG_FILE).write_text(json.dumps(task.task_config()))
    return task, model


def ids_batch(seed=0, batch=3, seq=9):
    """Random ids inputs of the TINY encoder, the last row padded."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, TINY.vocab_size, (batch, seq)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[-1, 5:] = 0  # mixed lengths: the last row is padded
    ids[mask == 0] = 0
    types = np.zeros_like(ids)
    types[:, 4:] = 1
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def as_bytes(texts):
    return np.array([t if isinstance(t, bytes) else t.encode() for t in texts], dtype=object)


def packed(tokenizer, a, b=None, length=16):
    """The ids inputs of texts `a` (and `b`), cut to the longest row."""
    out = tokenizer.encode(list(a), None if b is None else list(b), max_seq_length=length)
    used = int(tf.reduce_max(tf.reduce_sum(out["input_mask"], 1)))
    return {k: v.numpy()[:, :used] for k, v in out.items()}


def choices_batch(tokenizer):
    """Multiple-choice (SWAG) ids inputs: 3 examples of 4 choices."""
    flat = packed(tokenizer, [c for c in BAD_TEXTS[:3] for _ in range(4)],
                  [BAD_TEXTS[(i + k) % 7] for i in range(3) for k in range(4)])
    return {k: v.reshape(3, 4, -1) for k, v in flat.items()}


def call(fn, **inputs):
    return {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in inputs.items()}).items()}


def read_warmup(path):
    """The PredictionLogs of an export's warmup file."""
    from tensorflow_serving.apis import prediction_log_pb2

    logs = []
    for record in tf.data.TFRecordDataset(
            os.path.join(path, "assets.extra", export.WARMUP_FILE)):
        log = prediction_log_pb2.PredictionLog()
        log.ParseFromString(record.numpy())
        logs.append(log)
    return logs


def model_info(path):
    """An ONNX, LiteRT or OpenVINO export's model_info.json."""
    with open(os.path.join(path, export_converted.INFO_FILE)) as f:
        return json.load(f)


def run_client(script, args, tmp_path, **extra_env):
    """Runs a client `script` with `args` in a fresh interpreter (no PYTHONPATH, so no
    bert_tf; `extra_env` added) in `tmp_path`; fails the test with its stderr if it fails."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", **extra_env)
    proc = subprocess.run([sys.executable, "-c", script, *map(str, args)], cwd=str(tmp_path),
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


def run_clean(saved_model_dir, requests, tmp_path, client=CLEAN_CLIENT, **extra_env):
    """[(signature, inputs dict)] -> [outputs dict], computed in a process without bert_tf
    by `client` (CLEAN_CLIENT: tf.saved_model.load; `extra_env` added to its environment)."""
    entries = []
    for i, (signature, inputs) in enumerate(requests):
        inputs_file = str(tmp_path / f"in{i}.npz")
        np.savez(inputs_file, **inputs)
        entries.append([signature, inputs_file])
    requests_file = tmp_path / "requests.json"
    requests_file.write_text(json.dumps(entries))
    out_file = tmp_path / "out.npz"
    run_client(client, [saved_model_dir, requests_file, out_file], tmp_path, **extra_env)
    flat = dict(np.load(out_file, allow_pickle=True))
    return [{k.split("/", 1)[1]: v for k, v in flat.items() if k.startswith(f"{i}/")}
            for i in range(len(requests))]


def run_export_model(*flags):
    """`python -m bert_tf.export_model *flags` from the repo (completed process)."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2",
               KERAS_BACKEND="tensorflow")
    return subprocess.run([sys.executable, "-m", "bert_tf.export_model", *flags], env=env,
                          capture_output=True, text=True, cwd=str(REPO_ROOT))


def run_litert(path, inputs):
    """Runs EXPORT/<version>/model.tflite's serving_default in the LiteRT runtime."""
    interpreter = export_litert.load_interpreter(os.path.join(path, export_litert.MODEL_FILE))
    runner = interpreter.get_signature_runner(export.SERVING_DEFAULT)
    return runner(**{k: np.asarray(v, np.int32) for k, v in inputs.items()})


def saved_model_outputs(resolved, batches, tmp_path):
    """The ids SavedModel's (`export_model --notext_signatures`) outputs on each batch."""
    path = export.export_model_dir(resolved, str(tmp_path / "saved_model"),
                                   text_signatures=False)
    fn = tf.saved_model.load(path).signatures[export.SERVING_DEFAULT]
    return [{k: v.numpy() for k, v in fn(**{k: tf.constant(v, tf.int32)
                                            for k, v in inputs.items()}).items()}
            for inputs in batches]


def task_outputs(tmp_path, vocab_file, tokenizer, name, batch, exporter, **options):
    """(export path, the SavedModel's outputs on `batch`) of a tiny fine-tuned `name` model
    exported by `exporter(resolved, export_dir)`."""
    (tmp_path / "m").mkdir()
    fine_tuned_dir(tmp_path / "m", name, vocab_file, tokenizer, max_seq_length=16, **options)
    resolved = model_dir.resolve(str(tmp_path / "m"))
    path = exporter(resolved, str(tmp_path / "e"))
    return path, saved_model_outputs(resolved, [batch], tmp_path)[0]


def assert_outputs_equal(got, want, atol):
    """Same output names; floats within `atol`, ids and label strings equal."""
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        if value.dtype.kind == "f":
            np.testing.assert_allclose(got[key], value, atol=atol, err_msg=key)
        elif value.dtype == object:  # TF strings are bytes; the runtimes' are str
            assert [str(x) for x in np.asarray(got[key]).ravel()] == \
                [x.decode() for x in value.ravel()], key
        else:
            assert got[key].tolist() == value.tolist(), key
