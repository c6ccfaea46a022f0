"""SavedModel export for TF Serving (docs/contracts.md §5).

`export_model_dir(model_dir.resolve(DIR), EXPORT_DIR)` exports what a model dir holds
(read once by `model_dir.resolve`, with any overrides) and returns
`EXPORT_DIR/<version>/`, laid out as `tensorflow_model_server --model_base_path=EXPORT_DIR`
expects:

    EXPORT_DIR/<version>/saved_model.pb, variables/
    EXPORT_DIR/<version>/assets/vocab.txt            (+ labels.txt for classifiers/taggers)
    EXPORT_DIR/<version>/assets.extra/tf_serving_warmup_requests
                                                    TFRecord of PredictionLog, one real
                                                    request per signature

Signatures are plain `tf.function`s (not Keras attributes), so the SavedModel loads with
`tf.saved_model.load` in a process that never imports bert_tf:

* encoder (convert_checkpoint / pretrain dirs): `serving_default` on ids
  (`input_word_ids`, `input_mask`, `input_type_ids` -> `sequence_output`, `pooled_output`)
  and, when the dir has a vocab, `serving_text` (`text` -> the same plus the ids).
* task models (finetune dirs): `serving_default` on raw text and `serving_ids` on ids,
  from the task's own serving module (`task.serving_module(...)`, written next to the
  task's host postprocessing); this module only writes it.

Raw-text signatures run the WordPiece tokenizer inside the graph; its one non-core op
(`FastWordpieceTokenizeWithOffsets`) comes from TF Text, so the model server must be a
build with TF Text ops and a Python process must `import tensorflow_text` before loading.
`text_signatures=False` exports the ids signatures only, with no TF Text op at all.
`mixed_precision="mixed_bfloat16"` exports the same signatures with the encoder's matmul
kernels stored and run in bfloat16 (`with_precision`): for CPUs with AVX512-BF16 or AMX.
Bytes that are not valid UTF-8 are dropped by the tokenizer (as the original's
`decode("utf-8", "ignore")`), so they never fail a request; offsets still index the
input as sent. docs/serving.md has the signatures and client requests.

Example:

>>> import tempfile, os
>>> from bert_tf.model.config import BertConfig
>>> from bert_tf.model.encoder import BertEncoder
>>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
...                  num_attention_heads=2, intermediate_size=16)
>>> export_dir = tempfile.mkdtemp()
>>> path = export_encoder(BertEncoder(cfg), export_dir)
>>> os.path.basename(path), next_version(export_dir)
('1', 2)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from typing import Callable, List, Mapping, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf.core.constants import length_delimited as _field
from bert_tf.core import output_guard
from bert_tf.core.errors import BertTfError
from bert_tf.model import model_dir
from bert_tf.model.encoder import BertEncoder
from bert_tf.tasks import task_from_config
from bert_tf.serving.modules import (IDS_SIGNATURE, LABELS_FILE, LIMITS_FILE,  # noqa: F401
                             SERVING_DEFAULT, TEXT_SIGNATURE, EncoderServing,
                             scratch_dir)

WARMUP_FILE = "tf_serving_warmup_requests"
SAVED_MODEL_FILE = "saved_model.pb"  # copied last to an object store: TF Serving's trigger
#: What an export's `mixed_precision` (export_model --mixed_precision, docs/contracts.md §3) takes.
#: mixed_bfloat16: the encoder's dense kernels (query/key/value, attention output, FFN,
#: pooler) are bfloat16 variables and its matmuls (those and the attention products) and
#: the attention softmax between them run in bfloat16; embeddings, LayerNorm, the task head
#: (logits) and every input and output stay float32. mixed_float16 (the trainers' third value) is not offered: CPUs
#: without AVX512-FP16 have no fast float16 matmul.
EXPORT_PRECISIONS = ("float32", "mixed_bfloat16")


class ExportError(BertTfError, ValueError):
    """An export that cannot be done as asked; says which file and what to do."""


# ---------------------------------------------------------------------------- layout

def list_versions(export_dir: str) -> List[int]:
    """The integer version subdirectories of `export_dir`, ascending.

    >>> import tempfile; d = tempfile.mkdtemp(); os.makedirs(os.path.join(d, "3"))
    >>> os.makedirs(os.path.join(d, "tmp")); list_versions(d)
    [3]
    """
    if not tf.io.gfile.isdir(export_dir):
        return []
    names = [n.rstrip("/") for n in tf.io.gfile.listdir(export_dir)]
    return sorted(int(n) for n in names
                  if n.isdigit() and tf.io.gfile.isdir(os.path.join(export_dir, n)))


def next_version(export_dir: str) -> int:
    """1 for a new `export_dir`, else one more than the highest version in it.

    >>> import tempfile; next_version(tempfile.mkdtemp())
    1
    """
    versions = list_versions(export_dir)
    return versions[-1] + 1 if versions else 1


def save_versioned(module: tf.Module, signatures: Mapping[str, Callable], export_dir: str,
                   version: Optional[int] = None,
                   warmup_requests: Sequence[tuple] = (),
                   extra_files: Optional[Mapping[str, str]] = None) -> str:
    """tf.saved_model.save into `export_dir/<version>` without ever exposing a partial one.

    The model is written to a hidden temporary directory inside `export_dir` (TF Serving
    only watches integer names) and renamed to the version at the end; on any error the
    temporary directory is removed. `warmup_requests` ((signature_name, inputs) pairs)
    go to `assets.extra/tf_serving_warmup_requests`. Returns the version directory.

    >>> import tempfile
    >>> class M(tf.Module):
    ...     @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    ...     def f(self, x):
    ...         return {"y": x * 2}
    >>> m = M(); d = tempfile.mkdtemp()
    >>> os.path.basename(save_versioned(m, {"serving_default": m.f}, d, version=7))
    '7'
    """
    target = new_version_dir(export_dir, version)
    with written_atomically(target) as tmp:
        _track_captured_variables(module, signatures)
        tf.saved_model.save(module, tmp, signatures=dict(signatures))
        if warmup_requests:
            write_warmup_file(os.path.join(tmp, "assets.extra", WARMUP_FILE), warmup_requests)
        for name, text in (extra_files or {}).items():  # e.g. assets.extra/tokenizer_config.json
            tf.io.gfile.makedirs(os.path.join(tmp, "assets.extra"))
            with tf.io.gfile.GFile(os.path.join(tmp, "assets.extra", name), "w") as f:
                f.write(text)
    return target


def new_version_dir(export_dir: str, version: Optional[int] = None) -> str:
    """`export_dir/<version>` for a new export: the next free version by default; an
    existing one or a negative one is an ExportError.

    >>> import tempfile; d = tempfile.mkdtemp(); os.path.basename(new_version_dir(d))
    '1'
    """
    version = next_version(export_dir) if version is None else int(version)
    if version < 0:
        raise ExportError(f"{export_dir}: version must be a non-negative integer, got {version}")
    target = os.path.join(export_dir, str(version))
    if tf.io.gfile.exists(target):
        raise ExportError(f"{target} already exists; pass another version or none to take "
                          f"the next one ({next_version(export_dir)})")
    return target


@contextlib.contextmanager
def written_atomically(target: str, flag: str = "--export_dir"):
    """Yields a new hidden directory beside `target` to fill; it becomes `target` when the
    block ends without error and is removed when it raises, so a watcher of the parent
    (TF Serving watches integer names only) never sees a partial export. On an object
    store (gs://), where a rename is a copy per object, `saved_model.pb` is copied after
    the variables and assets (`output_guard.new_output_dir`): TF Serving cannot load a
    version before its last file is there. `flag`: what a refusal names (a version dir or
    its parent that is a file, another export writing the same version).

    >>> import tempfile; target = os.path.join(tempfile.mkdtemp(), "3")
    >>> with written_atomically(target) as tmp:
    ...     open(os.path.join(tmp, "a.txt"), "w").close()
    >>> os.listdir(target)
    ['a.txt']
    """
    with output_guard.new_output_dir(target, "export_model", allow_existing_empty=False,
                                     last=(SAVED_MODEL_FILE,), marked=False,
                                     flag=flag) as tmp:
        yield tmp


def _track_captured_variables(module: tf.Module, signatures: Mapping[str, Callable]) -> None:
    # Keras 3 wraps each tf.Variable in a KerasVariable; unless the raw variables the
    # traced functions capture are tracked themselves, the SavedModel loads in TF2 Python
    # but TF1-style loaders (tensorflow_model_server, saved_model_cli run) fail with
    # "Could not find variable ...". Keras' own ExportArchive does the same. The serving
    # modules keep the Keras model itself untracked: tracked too, every weight would be
    # saved twice (its KerasVariable has a checkpoint value of its own).
    seen, captured = set(), []
    for fn in signatures.values():
        concrete = fn.get_concrete_function() if hasattr(fn, "get_concrete_function") else fn
        for v in concrete.variables:
            if id(v) not in seen:
                seen.add(id(v))
                captured.append(v)
    module._serving_variables = captured


# ---------------------------------------------------------------------------- warmup
# PredictionLog records are encoded by hand (protobuf wire format, with
# constants.length_delimited) so that exporting does not need the tensorflow-serving-api
# package; tests parse them with it.


def predict_request_bytes(signature_name: str, inputs: Mapping[str, np.ndarray],
                          model_name: str = "") -> bytes:
    """A serialized tensorflow.serving.PredictRequest.

    >>> len(predict_request_bytes("serving_default", {"text": np.array([b"hi"])})) > 0
    True
    """
    spec = (_field(1, model_name.encode()) if model_name else b"") + \
        _field(3, signature_name.encode())
    request = _field(1, spec)
    for key in sorted(inputs):
        tensor = tf.make_tensor_proto(np.asarray(inputs[key])).SerializeToString()
        request += _field(2, _field(1, key.encode()) + _field(2, tensor))
    return request


def prediction_log_bytes(signature_name: str, inputs: Mapping[str, np.ndarray]) -> bytes:
    """A serialized PredictionLog holding one PredictLog request (a warmup record)."""
    return _field(6, _field(1, predict_request_bytes(signature_name, inputs)))


def write_warmup_file(path: str, requests: Sequence[tuple]) -> str:
    """Writes (signature_name, inputs) pairs as a TFRecord file of PredictionLogs."""
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.TFRecordWriter(path) as writer:
        for signature_name, inputs in requests:
            writer.write(prediction_log_bytes(signature_name, inputs))
    return path


# ---------------------------------------------------------------------------- top level

def export_module(module, export_dir: str, version: Optional[int] = None,
                  text_settings=None, max_batch_size: Optional[int] = None,
                  max_text_length: Optional[int] = None, parallel_branches: int = 1) -> str:
    """Saves a serving module (its signatures and warmup requests) as a new version.

    `text_settings` (a `model_dir.TokenizerConfig`) goes to
    `assets.extra/tokenizer_config.json`, so clients can see how text is tokenized (and
    whether they must pre-split it: `pre_tokenizer`). `max_batch_size` and
    `max_text_length` (UTF-8 bytes per string; None: the serving defaults) are the request
    limits every signature enforces (`serving.check_request`), recorded in
    `assets.extra/serving_limits.json`. `parallel_branches` > 1 splits each transformer
    layer into that many independent chains (`serving_graph.InferenceBlock`) for servers
    that run one request on that many inter-op threads (docs/serving.md, "Splitting each
    layer").
    """
    parallel_branches = check_parallel_branches(module.encoder_config, parallel_branches)
    for name, value in (("max_batch_size", max_batch_size),
                        ("max_text_length", max_text_length)):
        if value is not None:
            if int(value) < 1:
                raise ExportError(f"--{name}={value} must be at least 1")
            setattr(module, name, int(value))
    extra = {LIMITS_FILE: json.dumps(module.limits())}
    if text_settings is not None:
        extra["tokenizer_config.json"] = json.dumps(text_settings.to_json())
    module.parallel_branches = parallel_branches
    return save_versioned(module, module.signatures(), export_dir, version,
                          warmup_requests=_within_limits(module, module.warmup_requests()),
                          extra_files=extra)


def check_parallel_branches(config, branches) -> int:
    """`branches` as an int; ExportError unless it is a whole number that divides the
    model's (`config`'s) heads and FFN width.

    >>> from bert_tf.model.config import BertConfig
    >>> check_parallel_branches(BertConfig(num_attention_heads=2, intermediate_size=16), 3)
    Traceback (most recent call last):
    ...
    bert_tf.export.saved_model.ExportError: --parallel_branches=3 must divide the model's num_attention_heads=2 and intermediate_size=16
    """
    if isinstance(branches, bool) or int(branches) != branches or branches < 1:
        raise ExportError(f"--parallel_branches={branches!r} must be a whole number >= 1")
    branches = int(branches)
    if config.num_attention_heads % branches or config.intermediate_size % branches:
        raise ExportError(f"--parallel_branches={branches} must divide the model's "
                          f"num_attention_heads={config.num_attention_heads} and "
                          f"intermediate_size={config.intermediate_size}")
    return branches


def _within_limits(module, requests):
    """The warmup requests cut to the module's request limits (rows, text bytes): a warmup
    request the model refuses would make TF Serving refuse to load the model."""
    def cut(value):
        value = np.asarray(value)[:module.max_batch_size]
        if value.dtype == object:  # raw text: at most max_text_length bytes each
            value = np.vectorize(lambda t: t[:module.max_text_length], otypes=[object])(value)
        return value
    return [(name, {k: cut(v) for k, v in inputs.items()}) for name, inputs in requests]


def with_precision(model, mixed_precision: str, build: Optional[Callable] = None):
    """`model` itself for float32; for mixed_bfloat16 a copy whose encoder is built with
    the pure `bfloat16` policy (its dense kernels are bfloat16 variables, so serving reads
    them without a cast per call; its embeddings and LayerNorms are float32 under any
    policy), holding `model`'s weights rounded to bfloat16.

    `model` is a BertEncoder, or a task model that `build(encoder)` rebuilds around a new
    encoder (`task.build_model`); its head is rebuilt in float32, so logits are float32.
    Plain TF ops and dtypes only: the SavedModel still loads in stock TF Serving.

    >>> from bert_tf.model.config import BertConfig
    >>> from bert_tf.model.encoder import BertEncoder
    >>> enc = BertEncoder(BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
    ...                              num_attention_heads=2, intermediate_size=16))
    >>> copy = with_precision(enc, "mixed_bfloat16")
    >>> copy.pooler.dense.kernel.dtype, copy.embeddings.word_embeddings.dtype
    ('bfloat16', 'float32')
    """
    if mixed_precision not in EXPORT_PRECISIONS:
        raise ExportError(f"mixed_precision={mixed_precision!r}: an export takes one of "
                          f"{', '.join(EXPORT_PRECISIONS)}")
    if mixed_precision == "float32":
        return model

    encoder = model if isinstance(model, BertEncoder) else model.encoder
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")  # the head (built by `build`) in float32
    try:
        copy = BertEncoder(encoder.config, dtype="bfloat16", name=encoder.name)
        if build is not None:
            copy = build(copy)
    finally:
        keras.config.set_dtype_policy(previous)
    source, target = model.weights, copy.weights
    if [(v.path, tuple(v.shape)) for v in source] != [(v.path, tuple(v.shape))
                                                      for v in target]:
        raise ValueError("with_precision: the rebuilt model's weights differ from the "
                         "model's (pass the `build` that made it)")
    for src, dst in zip(source, target):
        dst.assign(tf.cast(src.value, dst.dtype))
    return copy


def serving_tokenizer(resolved):
    """`resolved.tokenizer()` (a `model_dir.ResolvedModelDir`'s in-graph tokenizer) over
    a copy of its vocab named vocab.txt, or None without a vocab: the tokenizer's vocab
    asset keeps its file name, and an export's is always assets/vocab.txt."""
    if not resolved.vocab_file:
        return None
    copy = os.path.join(scratch_dir(), "vocab.txt")
    tf.io.gfile.copy(resolved.vocab_file, copy, overwrite=True)
    return dataclasses.replace(resolved, vocab_file=copy).tokenizer()


def export_encoder(encoder, export_dir: str, *, tokenizer=None,
                   max_seq_length: Optional[int] = None,
                   version: Optional[int] = None, text_signatures: bool = True,
                   text_settings=None, mixed_precision: str = "float32",
                   max_batch_size: Optional[int] = None,
                   max_text_length: Optional[int] = None, parallel_branches: int = 1) -> str:
    """Exports a BertEncoder; with a `tokenizer` (`serving_tokenizer`), also the raw-text
    `serving_text` signature (unless `text_signatures=False`: then the vocab is only an
    asset). `mixed_precision`: one of EXPORT_PRECISIONS (`with_precision`).

    Returns `export_dir/<version>`.
    """
    max_seq_length = serving_max_seq_length(encoder.config, max_seq_length)
    encoder = with_precision(encoder, mixed_precision)
    module = EncoderServing(encoder, tokenizer, max_seq_length,
                            text_signatures=text_signatures)
    return export_module(module, export_dir, version, text_settings, max_batch_size,
                         max_text_length, parallel_branches)


def serving_max_seq_length(config, requested: Optional[int] = None,
                           task_config: Optional[dict] = None) -> int:
    """The length an export's raw text is packed to (and its model_info records):
    `requested`, else the fine-tuning length in `task_config`, else 128 (at most the
    model's max_position_embeddings); ExportError outside [3, max_position_embeddings].

    >>> from bert_tf.model.config import BertConfig
    >>> serving_max_seq_length(BertConfig(max_position_embeddings=64))
    64
    >>> serving_max_seq_length(BertConfig(), None, {"max_seq_length": 384})
    384
    """
    recorded = (task_config or {}).get("max_seq_length")
    value = int(requested or recorded or min(128, config.max_position_embeddings))
    if value > config.max_position_embeddings or value < 3:
        raise ExportError(f"max_seq_length={value} must be between 3 and the model's "
                          f"max_position_embeddings={config.max_position_embeddings}")
    return value


def export_model_dir(resolved, export_dir: str, version: Optional[int] = None,
                     max_seq_length: Optional[int] = None, *, text_signatures: bool = True,
                     mixed_precision: str = "float32",
                     max_batch_size: Optional[int] = None,
                     max_text_length: Optional[int] = None,
                     parallel_branches: int = 1) -> str:
    """Exports the model a model dir holds: `resolved` is its `model_dir.resolve` result
    (the dir or checkpoint prefix with the config, vocab and text-setting overrides).

    A dir with `task_config.json` (finetune) becomes a task export (raw-text
    `serving_default` + `serving_ids`); any other (convert_checkpoint, pretrain) an
    encoder export. `max_seq_length` defaults to the one the task was trained with
    (encoders: 128); the raw-text signature tokenizes with `resolved`'s vocab and text
    settings, exactly as training did.
    `text_signatures=False` leaves out the raw-text signatures (and with them every TF
    Text op: for a model server built without them); `serving_default` is then on ids.
    `mixed_precision="mixed_bfloat16"`: matmuls in bfloat16, the rest and every input and
    output float32 (`with_precision`). `max_batch_size` / `max_text_length`: the request
    limits and `parallel_branches` the layer split (`export_module`). Returns
    `export_dir/<version>`.

    >>> import tempfile
    >>> from bert_tf.model import model_dir
    >>> from bert_tf.model.config import BertConfig
    >>> from bert_tf.model.encoder import BertEncoder
    >>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
    ...                  num_attention_heads=2, intermediate_size=16)
    >>> src = tempfile.mkdtemp()
    >>> _ = model_dir.write_model_dir(src, cfg, {"encoder": BertEncoder(cfg)})
    >>> os.path.basename(export_model_dir(model_dir.resolve(src), tempfile.mkdtemp()))
    '1'
    """
    try:
        resolved.require(config=True)
    except model_dir.ModelDirError as e:
        raise ExportError(str(e)) from None
    check_parallel_branches(resolved.config, parallel_branches)  # before any restore
    if resolved.task_config is None:
        encoder = model_dir.load_encoder(resolved)
        return export_encoder(encoder, export_dir, tokenizer=serving_tokenizer(resolved),
                              max_seq_length=max_seq_length, version=version,
                              text_signatures=text_signatures,
                              text_settings=resolved.text if resolved.vocab_file else None,
                              mixed_precision=mixed_precision,
                              max_batch_size=max_batch_size, max_text_length=max_text_length,
                              parallel_branches=parallel_branches)
    return export_task_dir(resolved, export_dir, max_seq_length=max_seq_length,
                           version=version, text_signatures=text_signatures,
                           mixed_precision=mixed_precision,
                           max_batch_size=max_batch_size, max_text_length=max_text_length,
                           parallel_branches=parallel_branches)


def export_task_dir(resolved, export_dir, *, max_seq_length=None, version=None,
                    text_signatures=True, mixed_precision="float32", max_batch_size=None,
                    max_text_length=None, parallel_branches=1) -> str:
    """Rebuilds a fine-tuned model (`resolved`: a `model_dir.resolve` result with a task
    config) with the task's own `build_model`, restores `encoder` + `task_head` (the
    index already read by `resolved`) and exports the task's own serving module
    (`Task.serving_module`, written next to the host postprocessing its raw-text
    signature equals) in `mixed_precision` (`with_precision`)."""
    if not resolved.vocab_file:
        raise ExportError(f"{resolved.directory}: no {model_dir.VOCAB_FILE}; a task export "
                          f"tokenizes raw text in the graph, pass --vocab_file")
    tokenizer = serving_tokenizer(resolved)
    task = task_from_config(resolved.task_config, tokenizer)
    model = task.build_model(BertEncoder(resolved.config, name="encoder"))
    model_dir.restore(resolved, model.checkpoint_items())
    model = with_precision(model, mixed_precision, task.build_model)
    length = serving_max_seq_length(resolved.config, max_seq_length, resolved.task_config)
    module = task.serving_module(model, tokenizer, length, text_signatures=text_signatures)
    return export_module(module, export_dir, version, resolved.text, max_batch_size,
                         max_text_length, parallel_branches)
