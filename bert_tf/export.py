"""SavedModel export for TF Serving (DESIGN 2.5).

`export_model_dir(DIR, EXPORT_DIR)` exports what a model dir holds and returns
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
* task models (finetune dirs): `serving_default` on raw text and `serving_ids` on ids.

Raw-text signatures run the WordPiece tokenizer inside the graph; its one non-core op
(`FastWordpieceTokenizeWithOffsets`) comes from TF Text, so the model server must be a
build with TF Text ops and a Python process must `import tensorflow_text` before loading.
`text_signatures=False` exports the ids signatures only, with no TF Text op at all.
Bytes that are not valid UTF-8 are dropped by the tokenizer (as the original's
`decode("utf-8", "ignore")`), so they never fail a request; offsets still index the
input as sent. docs/serving.md has the signatures and client requests.

Example:

>>> import tempfile, os
>>> from bert_tf.config import BertConfig
>>> from bert_tf.encoder import BertEncoder
>>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
...                  num_attention_heads=2, intermediate_size=16)
>>> export_dir = tempfile.mkdtemp()
>>> path = export_encoder(BertEncoder(cfg), export_dir)
>>> os.path.basename(path), next_version(export_dir)
('1', 2)
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

from bert_tf.constants import length_delimited as _field
from bert_tf.errors import BertTfError

SERVING_DEFAULT = "serving_default"
IDS_SIGNATURE = "serving_ids"
TEXT_SIGNATURE = "serving_text"
WARMUP_FILE = "tf_serving_warmup_requests"
LABELS_FILE = "labels.txt"
MODEL_INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")

#: Sentences the warmup requests are built from (mixed lengths, a pair, Korean).
WARMUP_TEXTS = ("The quick brown fox jumps over the lazy dog.",
                "BERT serves raw text.",
                "서울은 한국의 수도입니다.")
WARMUP_TEXTS_B = ("A fast fox leaps over a dog.", "Tokenization happens in the graph.",
                  "Seoul is the capital of Korea.")


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
def written_atomically(target: str):
    """Yields a new hidden directory beside `target` to fill; it is renamed to `target`
    when the block ends without error and removed when it raises, so a watcher of the
    parent (TF Serving watches integer names only) never sees a partial export.

    >>> import tempfile; target = os.path.join(tempfile.mkdtemp(), "3")
    >>> with written_atomically(target) as tmp:
    ...     open(os.path.join(tmp, "a.txt"), "w").close()
    >>> os.listdir(target)
    ['a.txt']
    """
    parent, name = os.path.split(target)
    tf.io.gfile.makedirs(parent)
    tmp = os.path.join(parent, f".tmp-{name}-{uuid.uuid4().hex[:8]}")
    tf.io.gfile.makedirs(tmp)
    try:
        yield tmp
        tf.io.gfile.rename(tmp, target)
    finally:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.rmtree(tmp)


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


# ---------------------------------------------------------------------------- graph pieces

def _ids_spec() -> List[tf.TensorSpec]:
    return [tf.TensorSpec([None, None], tf.int32, name=n) for n in MODEL_INPUT_NAMES]


def _text_spec(name: str) -> tf.TensorSpec:
    return tf.TensorSpec([None], tf.string, name=name)


def _check_length(word_ids: tf.Tensor, max_positions: int) -> tf.Tensor:
    """Returns `word_ids` gated on a length check (use the result so the check runs first).

    An over-long sequence would otherwise fail deep inside the position embeddings with a
    shape error; the model's ops consume the returned tensor, so the assertion always
    fires before them instead of racing them.
    """
    check = tf.debugging.assert_less_equal(
        tf.shape(word_ids)[1], max_positions,
        message=f"sequence longer than max_position_embeddings={max_positions}; "
                f"truncate the ids or send raw text")
    with tf.control_dependencies([check]):
        return tf.identity(word_ids)


class EncoderServing(tf.Module):
    """The encoder behind plain tf.function signatures (and its tokenizer, if any).

    >>> from bert_tf.config import BertConfig
    >>> from bert_tf.encoder import BertEncoder
    >>> enc = BertEncoder(BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
    ...                              num_attention_heads=2, intermediate_size=16))
    >>> ids = tf.constant([[2, 5, 3]])
    >>> out = EncoderServing(enc).serve_ids(ids, tf.ones_like(ids), tf.zeros_like(ids))
    >>> sorted(out), out["pooled_output"].shape
    (['pooled_output', 'sequence_output'], TensorShape([1, 8]))
    """

    def __init__(self, encoder, tokenizer=None, max_seq_length: int = 128,
                 text_signatures: bool = True):
        super().__init__(name="bert_encoder_serving")
        self._keras_model = _Untracked(encoder)  # saved once, as _serving_variables
        self.max_seq_length = int(max_seq_length)
        self.max_positions = int(encoder.config.max_position_embeddings)
        _attach_tokenizer(self, tokenizer, text_signatures)
        self.serve_ids = tf.function(self._serve_ids, autograph=False,
                                     input_signature=_ids_spec())
        if tokenizer is not None and text_signatures:
            self.serve_text = tf.function(self._serve_text, autograph=False,
                                          input_signature=[_text_spec("text")])

    @property
    def encoder(self):
        return self._keras_model.value

    @property
    def tok(self):
        """The tokenizer (saved with the module or only used at export time), or None."""
        return _tokenizer_of(self)

    def _run(self, word_ids, mask, type_ids):
        word_ids = _check_length(word_ids, self.max_positions)
        out = self.encoder({"input_word_ids": word_ids, "input_mask": mask,
                            "input_type_ids": type_ids}, training=False)
        return {"sequence_output": tf.cast(out["sequence_output"], tf.float32),
                "pooled_output": tf.cast(out["pooled_output"], tf.float32)}

    def _serve_ids(self, input_word_ids, input_mask, input_type_ids):
        return self._run(input_word_ids, input_mask, input_type_ids)

    def _serve_text(self, text):
        inputs = _trim_padding(encode_text(self.tok, text, None, self.max_seq_length))
        out = self._run(inputs["input_word_ids"], inputs["input_mask"],
                        inputs["input_type_ids"])
        out.update(inputs)
        return out

    def signatures(self) -> Dict[str, Callable]:
        sigs = {SERVING_DEFAULT: self.serve_ids}
        if hasattr(self, "serve_text"):
            sigs[TEXT_SIGNATURE] = self.serve_text
        return sigs

    def warmup_requests(self) -> List[tuple]:
        """One real request per signature (ids made by this module's own tokenizer)."""
        if self.tok is None:
            vocab_size = self.encoder.config.vocab_size
            ids = np.array([[1, 2, 3, 0], [1, 2, 0, 0]], np.int32) % vocab_size
            ids_inputs = {"input_word_ids": ids, "input_mask": (ids > 0).astype(np.int32),
                          "input_type_ids": np.zeros_like(ids)}
            return [(SERVING_DEFAULT, ids_inputs)]
        text = np.array([t.encode() for t in WARMUP_TEXTS], dtype=object)
        ids_inputs = {k: v.numpy() for k, v in _trim_padding(encode_text(
            self.tok, tf.constant(text), None, self.max_seq_length)).items()}
        requests = [(SERVING_DEFAULT, ids_inputs)]
        if hasattr(self, "serve_text"):
            requests.append((TEXT_SIGNATURE, {"text": text}))
        return requests


class _Untracked:
    """Holds an object out of tf.Module tracking (so it is not saved with the module)."""

    def __init__(self, value):
        self.value = value


def _attach_tokenizer(module: tf.Module, tokenizer, text_signatures: bool) -> None:
    # With raw-text signatures the tokenizer is saved with the module (its vocab becomes
    # assets/vocab.txt). Without them it must stay out of the SavedModel entirely: its own
    # tf.functions would otherwise be saved too and bring TF Text ops into the graph.
    if tokenizer is None or text_signatures:
        module.tokenizer = tokenizer
        return
    module._host_tokenizer = _Untracked(tokenizer)
    module.vocab_asset = tf.saved_model.Asset(tokenizer.vocab_file)


def _tokenizer_of(module: tf.Module):
    host = getattr(module, "_host_tokenizer", None)
    return host.value if host is not None else getattr(module, "tokenizer", None)


def encode_text(tokenizer, text, text_b, max_seq_length: int) -> Dict[str, tf.Tensor]:
    """Raw strings -> int32 model inputs in the graph, packed and truncated (not trimmed)."""
    out = tokenizer.encode(text, text_b, max_seq_length=max_seq_length)
    return {k: tf.cast(out[k], tf.int32) for k in MODEL_INPUT_NAMES}


# ---------------------------------------------------------------------------- top level

def export_module(module, export_dir: str, version: Optional[int] = None,
                  text_settings=None) -> str:
    """Saves a serving module (its signatures and warmup requests) as a new version.

    `text_settings` (a `model_dir.TextSettings`) goes to
    `assets.extra/tokenizer_config.json`, so clients can see how text is tokenized (and
    whether they must pre-split it: `pre_tokenizer`).
    """
    extra = ({"tokenizer_config.json": json.dumps(text_settings.to_json())}
             if text_settings is not None else None)
    return save_versioned(module, module.signatures(), export_dir, version,
                          warmup_requests=module.warmup_requests(), extra_files=extra)


def make_tokenizer(vocab_file: Optional[str], do_lower_case: Optional[bool],
                   strip_accents: Optional[bool] = None):
    """The in-graph BertTokenizer for `vocab_file`, or None without a vocab."""
    if not vocab_file:
        return None
    from bert_tf.tokenization import BertTokenizer

    # The tokenizer's vocab asset keeps its file name: make it assets/vocab.txt always.
    copy = os.path.join(_scratch_dir(), "vocab.txt")
    tf.io.gfile.copy(vocab_file, copy, overwrite=True)
    return BertTokenizer(copy, do_lower_case=True if do_lower_case is None
                         else bool(do_lower_case), strip_accents=strip_accents)


def export_encoder(encoder, export_dir: str, *, vocab_file: Optional[str] = None,
                   do_lower_case: Optional[bool] = None, max_seq_length: Optional[int] = None,
                   version: Optional[int] = None, text_signatures: bool = True,
                   strip_accents: Optional[bool] = None, text_settings=None) -> str:
    """Exports a BertEncoder; with `vocab_file`, also the raw-text `serving_text` signature
    (unless `text_signatures=False`: then the vocab is only an asset).

    Returns `export_dir/<version>`.
    """
    max_seq_length = _pick_max_seq_length(max_seq_length, None, encoder.config)
    module = EncoderServing(encoder, make_tokenizer(vocab_file, do_lower_case, strip_accents),
                            max_seq_length, text_signatures=text_signatures)
    return export_module(module, export_dir, version, text_settings)


def _pick_max_seq_length(requested, recorded, config) -> int:
    value = int(requested or recorded or min(128, config.max_position_embeddings))
    if value > config.max_position_embeddings or value < 3:
        raise ExportError(f"max_seq_length={value} must be between 3 and the model's "
                          f"max_position_embeddings={config.max_position_embeddings}")
    return value


def export_model_dir(init_checkpoint: str, export_dir: str, version: Optional[int] = None,
                     max_seq_length: Optional[int] = None, *,
                     bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None,
                     do_lower_case: Optional[bool] = None, text_signatures: bool = True,
                     strip_accents: Optional[bool] = None) -> str:
    """Exports the model a model dir (or a checkpoint prefix inside one) holds.

    A dir with `task_config.json` (finetune) becomes a task export (raw-text
    `serving_default` + `serving_ids`); any other (convert_checkpoint, pretrain) an
    encoder export. `max_seq_length` defaults to the one the task was trained with
    (encoders: 128); config, vocab, casing and accents default to the ones stored in the
    dir (`model_dir.resolve`), so the raw-text signature tokenizes exactly
    as training did.
    `text_signatures=False` leaves out the raw-text signatures (and with them every TF
    Text op: for a model server built without them); `serving_default` is then on ids.
    Returns `export_dir/<version>`.

    >>> import tempfile
    >>> from bert_tf.config import BertConfig
    >>> from bert_tf.encoder import BertEncoder
    >>> from bert_tf.model_dir import write_model_dir
    >>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
    ...                  num_attention_heads=2, intermediate_size=16)
    >>> src = tempfile.mkdtemp(); _ = write_model_dir(src, cfg, {"encoder": BertEncoder(cfg)})
    >>> os.path.basename(export_model_dir(src, tempfile.mkdtemp()))
    '1'
    """
    from bert_tf import model_dir

    resolved = model_dir.resolve(init_checkpoint, bert_config_file=bert_config_file,
                                 vocab_file=vocab_file, do_lower_case=do_lower_case,
                                 strip_accents=strip_accents)
    try:
        resolved.require(config=True)
    except model_dir.ModelDirError as e:
        raise ExportError(str(e)) from None
    config, vocab_file, text = resolved.config, resolved.vocab_file, resolved.text
    task_config = resolved.task_config
    if task_config is None:
        encoder = model_dir.load_encoder(resolved)
        return export_encoder(encoder, export_dir, vocab_file=vocab_file,
                              do_lower_case=text.do_lower_case,
                              strip_accents=text.strip_accents, max_seq_length=max_seq_length,
                              version=version, text_signatures=text_signatures,
                              text_settings=text if vocab_file else None)
    return export_task_dir(init_checkpoint, export_dir, config=config,
                           task_config=task_config, vocab_file=vocab_file,
                           do_lower_case=text.do_lower_case, max_seq_length=max_seq_length,
                           version=version, text_signatures=text_signatures,
                           strip_accents=text.strip_accents, text_settings=text)


def export_task_dir(init_checkpoint, export_dir, *, config, task_config, vocab_file,
                    do_lower_case, max_seq_length=None, version=None,
                    text_signatures=True, strip_accents=None, text_settings=None) -> str:
    """Rebuilds a fine-tuned model from task_config.json with the task's own
    `build_model`, restores `encoder` + `task_head` and exports it."""
    from bert_tf import model_dir
    from bert_tf.encoder import BertEncoder
    from bert_tf.tasks import task_from_config

    if not vocab_file:
        raise ExportError(f"{model_dir.model_dir_of(init_checkpoint)}: no {model_dir.VOCAB_FILE}; "
                          f"a task export tokenizes raw text in the graph, pass --vocab_file")
    tokenizer = make_tokenizer(vocab_file, do_lower_case, strip_accents)
    task = task_from_config(task_config, tokenizer)
    model = task.build_model(BertEncoder(config, name="encoder"))
    model_dir.restore(init_checkpoint, model.checkpoint_items())
    length = _pick_max_seq_length(max_seq_length, task_config.get("max_seq_length"), config)
    module = task_serving_module(task, model, tokenizer, length, text_signatures)
    return export_module(module, export_dir, version, text_settings)


def task_serving_module(task, model, tokenizer, max_seq_length: int,
                        text_signatures: bool = True) -> tf.Module:
    """The serving module for a task: classifier/regressor, tagger or span extractor."""
    from bert_tf.tasks.glue import GlueTask

    kind = type(task).__name__
    if isinstance(task, GlueTask):
        return ClassifierServing(model, tokenizer, max_seq_length, task.label_list,
                                 pair=len(task.text_input_names) == 2,
                                 text_signatures=text_signatures)
    if "Ner" in kind:
        return TaggerServing(model, tokenizer, max_seq_length, task.label_list,
                             text_signatures=text_signatures)
    if "Squad" in kind:
        return SpanServing(model, tokenizer, max_seq_length, task,
                           text_signatures=text_signatures)
    if getattr(task, "num_choices", None):
        return MultipleChoiceServing(model, tokenizer, max_seq_length, task.num_choices,
                                     text_signatures=text_signatures)
    raise ExportError(f"task {task.name!r}: no serving export for {kind} (classification, "
                      f"regression, NER, SQuAD and multiple choice have one); export its "
                      f"encoder instead")


def _write_labels(labels: Sequence[str]) -> str:
    path = os.path.join(_scratch_dir(), LABELS_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"{label}\n" for label in labels))
    return path


def _scratch_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="bert_tf_export_")


def _trim_padding(inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    # Raw text is packed to max_seq_length; cutting the columns no row uses keeps short
    # requests cheap. Padded keys get -10000 in attention, so outputs are unchanged.
    used = tf.maximum(tf.reduce_max(tf.reduce_sum(inputs["input_mask"], axis=1)), 0)
    return {k: v[:, :used] for k, v in inputs.items()}


def _bytes_to_chars(texts, byte_offsets):
    """Byte offsets [batch, n] into each text -> code point offsets (Python str indices).

    Bytes that are not valid UTF-8 count as one character each (U+FFFD, as Python's
    `bytes.decode("utf-8", "replace")` does for single bad bytes).
    """
    _, starts = tf.strings.unicode_decode_with_offsets(texts, "UTF-8", errors="replace")
    starts = tf.cast(starts, tf.int64).to_tensor(default_value=np.iinfo(np.int64).max)
    starts = tf.concat([starts, tf.fill([tf.shape(starts)[0], 1], np.iinfo(np.int64).max)], 1)
    return tf.cast(tf.searchsorted(starts, tf.cast(byte_offsets, tf.int64), side="left"),
                   tf.int32)


class TaskServing(tf.Module):
    """Common part of the task modules: the model on ids, the tokenizer, the signatures."""

    text_inputs: Sequence[str] = ("text",)

    def __init__(self, model, tokenizer, max_seq_length: int, name: str,
                 text_signatures: bool = True):
        super().__init__(name=name)
        self._keras_model = _Untracked(model)  # saved once, as _serving_variables
        self.max_seq_length = int(max_seq_length)
        self.max_positions = int(model.encoder.config.max_position_embeddings)
        _attach_tokenizer(self, tokenizer, text_signatures)
        self.serve_ids = tf.function(self._serve_ids, autograph=False,
                                     input_signature=_ids_spec())
        if text_signatures:
            text_fn = {1: self._serve_text_1, 2: self._serve_text_2}[len(self.text_inputs)]
            self.serve_text = tf.function(text_fn, autograph=False, input_signature=[
                _text_spec(n) for n in self.text_inputs])

    @property
    def model(self):
        return self._keras_model.value

    @property
    def tok(self):
        """The tokenizer (saved with the module or only used at export time)."""
        return _tokenizer_of(self)

    def _model(self, inputs):
        inputs = dict(inputs, input_word_ids=_check_length(inputs["input_word_ids"],
                                                           self.max_positions))
        return self.model({k: inputs[k] for k in MODEL_INPUT_NAMES}, training=False)

    def _serve_ids(self, input_word_ids, input_mask, input_type_ids):
        return self.from_ids({"input_word_ids": input_word_ids, "input_mask": input_mask,
                              "input_type_ids": input_type_ids})

    def _serve_text_1(self, a):
        return self.from_text(a)

    def _serve_text_2(self, a, b):
        return self.from_text(a, b)

    def signatures(self) -> Dict[str, Callable]:
        if not hasattr(self, "serve_text"):
            return {SERVING_DEFAULT: self.serve_ids}
        return {SERVING_DEFAULT: self.serve_text, IDS_SIGNATURE: self.serve_ids}

    def warmup_texts(self) -> Dict[str, np.ndarray]:
        texts = [WARMUP_TEXTS, WARMUP_TEXTS_B]
        return {name: np.array([t.encode() for t in texts[i]], dtype=object)
                for i, name in enumerate(self.text_inputs)}

    def warmup_requests(self) -> List[tuple]:
        """A real raw-text request and the ids it tokenizes to."""
        text = self.warmup_texts()
        args = [tf.constant(text[n]) for n in self.text_inputs]
        ids = {k: v.numpy() for k, v in self.encode(*args).items()}
        if not hasattr(self, "serve_text"):
            return [(SERVING_DEFAULT, ids)]
        return [(SERVING_DEFAULT, text), (IDS_SIGNATURE, ids)]

    def encode(self, a, b=None):
        return _trim_padding(encode_text(self.tok, a, b, self.max_seq_length))


class ClassifierServing(TaskServing):
    """GLUE-style classifier / regressor.

    Text signature: `text` (+ `text_b`) -> `logits` [b, C], `probabilities` [b, C],
    `label_id` [b] int32, `label` [b] string (regression: `logits` [b, 1], `score` [b]).
    The ids signature gives the same outputs on ids.
    """

    def __init__(self, model, tokenizer, max_seq_length, labels, pair=False,
                 text_signatures=True):
        self.text_inputs = ("text", "text_b") if pair else ("text",)
        super().__init__(model, tokenizer, max_seq_length, name="bert_classifier_serving",
                         text_signatures=text_signatures)
        self.labels = list(labels) if labels is not None else None
        if self.labels is not None:
            self.labels_asset = tf.saved_model.Asset(_write_labels(self.labels))
            self._label_names = tf.constant(self.labels)

    def from_ids(self, inputs):
        logits = tf.cast(self._model(inputs)["logits"], tf.float32)
        if self.labels is None:
            return {"logits": logits, "score": logits[:, 0]}
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "label_id": label_id, "label": tf.gather(self._label_names, label_id)}

    def from_text(self, a, b=None):
        return self.from_ids(self.encode(a, b))


class MultipleChoiceServing(TaskServing):
    """Multiple choice (SWAG): each (context, ending) pair is scored from its [CLS] vector and
    a softmax over the choices picks one.

    Text signature: `text` [b] (the context, segment A) and `endings` [b, num_choices]
    (segment B of each pair: for SWAG the second sentence's start and the ending, joined by
    a space, as finetune builds them) -> `logits` [b, num_choices], `probabilities`,
    `label_id` [b] int32 (the chosen ending). The ids signature takes
    [b, num_choices, seq] ids, masks and type ids and gives the same outputs.
    """

    text_inputs = ("text", "endings")

    def __init__(self, model, tokenizer, max_seq_length, num_choices, text_signatures=True):
        self.num_choices = int(num_choices)
        super().__init__(model, tokenizer, max_seq_length, name="bert_multiple_choice_serving",
                         text_signatures=text_signatures)
        self.serve_ids = tf.function(self._serve_ids, autograph=False, input_signature=[
            tf.TensorSpec([None, self.num_choices, None], tf.int32, name=n)
            for n in MODEL_INPUT_NAMES])
        if text_signatures:
            self.serve_text = tf.function(self._serve_text_2, autograph=False, input_signature=[
                _text_spec("text"),
                tf.TensorSpec([None, self.num_choices], tf.string, name="endings")])

    def _model(self, inputs):
        ids = inputs["input_word_ids"]
        flat = _check_length(tf.reshape(ids, [-1, tf.shape(ids)[-1]]), self.max_positions)
        inputs = dict(inputs, input_word_ids=tf.reshape(flat, tf.shape(ids)))
        return self.model({k: inputs[k] for k in MODEL_INPUT_NAMES}, training=False)

    def from_ids(self, inputs):
        logits = tf.cast(self._model(inputs)["logits"], tf.float32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "label_id": tf.argmax(logits, axis=-1, output_type=tf.int32)}

    def from_text(self, a, b=None):
        return self.from_ids(self.encode(a, b))

    def encode(self, a, b=None):
        # Every context once per choice, paired with its endings row by row.
        contexts = tf.repeat(a, self.num_choices)
        flat = _trim_padding(encode_text(self.tok, contexts, tf.reshape(b, [-1]),
                                         self.max_seq_length))
        return {k: tf.reshape(v, [-1, self.num_choices, tf.shape(v)[-1]])
                for k, v in flat.items()}

    def warmup_texts(self) -> Dict[str, np.ndarray]:
        endings = [[f"{b} ({k})".encode() for k in range(self.num_choices)]
                   for b in WARMUP_TEXTS_B]
        return {"text": np.array([t.encode() for t in WARMUP_TEXTS], dtype=object),
                "endings": np.array(endings, dtype=object)}


def _pieces_in_windows(ids: tf.RaggedTensor, size: int):
    """Cuts each row of pieces into consecutive windows of at most `size` (>= 1 per row).

    Returns (windows [num_windows, (pieces)], window_row [num_windows], piece_window
    [num_pieces] global window index, piece_position [num_pieces] index inside it).
    """
    n = ids.row_lengths()
    per_row = tf.maximum((n + size - 1) // size, 1)
    first_window = tf.cumsum(per_row, exclusive=True)
    local = tf.ragged.range(n).flat_values
    piece_row = ids.value_rowids()
    piece_window = tf.gather(first_window, piece_row) + local // size
    total = tf.reduce_sum(per_row)
    windows = tf.RaggedTensor.from_value_rowids(ids.flat_values, piece_window, nrows=total)
    window_row = tf.repeat(tf.range(ids.nrows()), per_row)
    return windows, window_row, piece_window, local % size


class TaggerServing(TaskServing):
    """NER: per-word tags from each word's first sub-token (as the task trains).

    Text signature: `text` -> `words`, `tags` [b, max_words] strings ("" = padding),
    `tag_ids` [b, max_words] int32, `start_char` / `end_char` [b, max_words] int32 code
    point offsets into the input (end exclusive, -1 = padding), `num_words` [b].
    A word is a whitespace-separated token of the input (as CoNLL words are); texts
    longer than a window are cut into consecutive windows, so every word gets a tag.
    The ids signature returns `logits` [b, seq, C] and `tag_ids` [b, seq].
    """

    def __init__(self, model, tokenizer, max_seq_length, labels, text_signatures=True):
        super().__init__(model, tokenizer, max_seq_length, name="bert_tagger_serving",
                         text_signatures=text_signatures)
        self.labels = list(labels)
        self.labels_asset = tf.saved_model.Asset(_write_labels(self.labels))
        self._label_names = tf.constant(self.labels)

    def from_ids(self, inputs):
        logits = tf.cast(self._model(inputs)["logits"], tf.float32)
        return {"logits": logits, "tag_ids": tf.argmax(logits, axis=-1, output_type=tf.int32)}

    def encode(self, a, b=None):
        ids, _, _ = self.tok.tokenize_with_offsets(a)
        windows, _, _, _ = _pieces_in_windows(ids, self.max_seq_length - 2)
        return self._pack(windows)

    def _pack(self, windows):
        from bert_tf.packing import pack_inputs

        return _trim_padding(pack_inputs(windows, None, self.max_seq_length,
                                         self.tok.cls_id, self.tok.sep_id))

    def from_text(self, text, b=None):
        ids, starts, ends = self.tok.tokenize_with_offsets(text)
        windows, _, piece_window, piece_pos = _pieces_in_windows(ids, self.max_seq_length - 2)
        logits = self.from_ids(self._pack(windows))["logits"]
        piece_logits = tf.gather_nd(logits, tf.stack(
            [tf.cast(piece_window, tf.int32), tf.cast(piece_pos, tf.int32) + 1], axis=1))
        # A piece starts a new word when it is first in its row or a gap (whitespace)
        # separates it from the previous piece; pieces of "U.S." or "don't" touch.
        flat_start, flat_end = starts.flat_values, ends.flat_values
        first_in_row = tf.equal(tf.ragged.range(ids.row_lengths()).flat_values, 0)
        previous_end = tf.concat([[-1], flat_end[:-1]], 0)
        new_word = first_in_row | (flat_start > previous_end)
        word_of_piece = tf.cumsum(tf.cast(new_word, tf.int64)) - 1
        num_words_total = tf.reduce_sum(tf.cast(new_word, tf.int64))
        word_row = tf.boolean_mask(ids.value_rowids(), new_word)
        word_start = tf.boolean_mask(flat_start, new_word)
        word_end = tf.math.unsorted_segment_max(flat_end, word_of_piece, num_words_total)
        tag_ids = tf.argmax(tf.boolean_mask(piece_logits, new_word), axis=-1,
                            output_type=tf.int32)
        text_of_word = tf.gather(text, word_row)
        words = tf.strings.substr(text_of_word, word_start, word_end - word_start)
        nrows = ids.nrows()

        def dense(values, default):
            return tf.RaggedTensor.from_value_rowids(values, word_row, nrows=nrows).to_tensor(
                default_value=default)

        start_b, end_b = dense(word_start, 0), dense(word_end, 0)
        valid = dense(tf.ones_like(word_start, tf.bool), False)
        start_char = tf.where(valid, _bytes_to_chars(text, start_b), -1)
        end_char = tf.where(valid, _bytes_to_chars(text, end_b), -1)
        return {"words": dense(words, ""),
                "tags": dense(tf.gather(self._label_names, tag_ids), ""),
                "tag_ids": dense(tag_ids, -1), "start_char": start_char,
                "end_char": end_char,
                "num_words": tf.cast(tf.math.bincount(tf.cast(word_row, tf.int32),
                                                      minlength=tf.cast(nrows, tf.int32),
                                                      maxlength=tf.cast(nrows, tf.int32)),
                                     tf.int32)}


class SpanServing(TaskServing):
    """SQuAD: `question`, `context` -> the best answer span, as the original postprocess.

    Outputs: `answer_text` [b] (a substring of the context; "" for no answer),
    `start_char` / `end_char` [b] code point offsets into the context (end exclusive, -1
    when no answer), `score` [b] (start + end logit of the best span), `null_score` [b]
    (the [CLS] score, min over windows; v2.0 answers "" when null_score - score exceeds
    the threshold). Contexts longer than a window are cut into windows with `doc_stride`
    and each token counts only in the window where it has the most context (the
    original's rule). The ids signature returns `start_logits`, `end_logits`.
    """

    text_inputs = ("question", "context")

    def __init__(self, model, tokenizer, max_seq_length, task, text_signatures=True):
        super().__init__(model, tokenizer, max_seq_length, name="bert_squad_serving",
                         text_signatures=text_signatures)
        self.doc_stride = int(task.doc_stride)
        self.max_query_length = int(task.max_query_length)
        self.n_best_size = int(task.n_best_size)
        self.max_answer_length = int(task.max_answer_length)
        self.version_2 = bool(task.version_2_with_negative)
        self.threshold = float(task.null_score_diff_threshold)

    def from_ids(self, inputs):
        out = self._model(inputs)
        return {"start_logits": tf.cast(out["start_logits"], tf.float32),
                "end_logits": tf.cast(out["end_logits"], tf.float32)}

    def warmup_texts(self):
        return {"question": np.array([b"What jumps over the dog?", b"Where is Seoul?"],
                                     dtype=object),
                "context": np.array([WARMUP_TEXTS[0].encode(), WARMUP_TEXTS_B[2].encode()],
                                    dtype=object)}

    def encode(self, question, context):
        return self._windows(question, context)[0]

    def _windows(self, question, context):
        """Packed windows and the bookkeeping to map them back to the context."""
        from bert_tf.packing import pack_inputs

        q = self.tok.tokenize(question)
        q = q[:, :self.max_query_length]  # as the original: the question's first pieces
        ids, starts, ends = self.tok.tokenize_with_offsets(context)
        n = ids.row_lengths()
        q_len = q.row_lengths()
        room = tf.maximum(self.max_seq_length - q_len - 3, 1)     # context tokens per window
        step = tf.minimum(room, self.doc_stride)
        count = tf.where(n <= room, tf.ones_like(n), (n - room + step - 1) // step + 1)
        window_row = tf.repeat(tf.range(ids.nrows()), count)
        local_start = tf.ragged.range(count).flat_values * tf.gather(step, window_row)
        length = tf.minimum(tf.gather(room, window_row), tf.gather(n, window_row) - local_start)
        length = tf.maximum(length, 0)
        global_start = tf.gather(ids.row_starts(), window_row) + local_start
        index = tf.ragged.range(global_start, global_start + length)
        context_windows = tf.gather(ids.flat_values, index)
        inputs = pack_inputs(tf.gather(q, window_row), context_windows, self.max_seq_length,
                             self.tok.cls_id, self.tok.sep_id)
        return (_trim_padding(inputs), window_row, index, tf.gather(q_len, window_row),
                local_start, length, starts, ends)

    def from_text(self, question, context):
        (inputs, window_row, index, q_len, local_start, length, starts,
         ends) = self._windows(question, context)
        logits = self.from_ids(inputs)
        start_logits, end_logits = logits["start_logits"], logits["end_logits"]
        seq = tf.shape(start_logits)[1]
        num_windows = tf.shape(start_logits)[0]
        # Max-context rule: score = min(left, right context) + 0.01 * window length; each
        # context token counts only in its best window (the first one on ties).
        token = index.flat_values                                  # global context token
        token_window = tf.cast(index.value_rowids(), tf.int32)
        pos_in_window = tf.ragged.range(length).flat_values
        win_len = tf.gather(length, token_window)
        score = (tf.cast(tf.minimum(pos_in_window, win_len - 1 - pos_in_window), tf.float32)
                 + 0.01 * tf.cast(win_len, tf.float32))
        total = tf.size(starts.flat_values)
        best = tf.math.unsorted_segment_max(score, token, total)
        first_best = tf.math.unsorted_segment_min(
            tf.where(score >= tf.gather(best, token), token_window, np.iinfo(np.int32).max),
            token, total)
        max_context = tf.equal(tf.gather(first_best, token), token_window)
        # Per window: which positions may start / end an answer.
        position = tf.cast(tf.gather(q_len, token_window) + 2 + pos_in_window, tf.int32)
        scatter_at = tf.stack([token_window, position], axis=1)
        shape = tf.stack([num_windows, seq])
        can_end = tf.scatter_nd(scatter_at, tf.ones_like(position, tf.bool), shape)
        can_start = tf.scatter_nd(scatter_at, max_context, shape)
        k = tf.minimum(self.n_best_size, seq)
        mask = tf.cast(inputs["input_mask"], tf.bool)
        neg = tf.constant(-1e30, tf.float32)
        start_masked = tf.where(mask, start_logits, neg)
        end_masked = tf.where(mask, end_logits, neg)
        # The original searches only the n_best_size highest start and end logits.
        can_start &= start_masked >= tf.math.top_k(start_masked, k).values[:, -1:]
        can_end &= end_masked >= tf.math.top_k(end_masked, k).values[:, -1:]
        i = tf.range(seq)[:, None]
        j = tf.range(seq)[None, :]
        band = (j >= i) & (j - i < self.max_answer_length)
        valid = band[None] & can_start[:, :, None] & can_end[:, None, :]
        pair = tf.where(valid, start_logits[:, :, None] + end_logits[:, None, :], neg)
        flat = tf.reshape(pair, [num_windows, -1])
        best_pair = tf.argmax(flat, axis=1, output_type=tf.int32)
        best_score = tf.reduce_max(flat, axis=1)
        null = start_logits[:, 0] + end_logits[:, 0]
        # Per example: the best window, and the smallest null score over windows.
        nrows = tf.cast(starts.nrows(), tf.int32)
        row = tf.cast(window_row, tf.int32)
        example_best = tf.math.unsorted_segment_max(best_score, row, nrows)
        example_null = tf.math.unsorted_segment_min(null, row, nrows)
        window_ids = tf.range(num_windows)
        chosen = tf.math.unsorted_segment_min(
            tf.where(best_score >= tf.gather(example_best, row), window_ids,
                     np.iinfo(np.int32).max), row, nrows)
        chosen = tf.minimum(chosen, num_windows - 1)
        pair_of = tf.gather(best_pair, chosen)
        start_pos, end_pos = pair_of // seq, pair_of % seq
        offset = tf.cast(tf.gather(q_len, chosen), tf.int32) + 2
        first_token = (tf.cast(tf.gather(starts.row_starts(), tf.gather(window_row, chosen)),
                               tf.int32)
                       + tf.cast(tf.gather(local_start, chosen), tf.int32))
        start_token = tf.maximum(first_token + start_pos - offset, 0)
        end_token = tf.maximum(first_token + end_pos - offset, 0)
        flat_start, flat_end = starts.flat_values, ends.flat_values
        safe = tf.maximum(tf.size(flat_start) - 1, 0)
        has_span = example_best > neg / 2
        if self.version_2:
            has_span &= ~(example_null - example_best > self.threshold)
        start_byte = tf.where(has_span, tf.gather(
            tf.concat([flat_start, [0]], 0), tf.minimum(start_token, safe)), 0)
        end_byte = tf.where(has_span, tf.gather(
            tf.concat([flat_end, [0]], 0), tf.minimum(end_token, safe)), 0)
        answer = tf.strings.substr(context, start_byte, end_byte - start_byte)
        start_char = _bytes_to_chars(context, start_byte[:, None])[:, 0]
        end_char = _bytes_to_chars(context, end_byte[:, None])[:, 0]
        return {"answer_text": tf.where(has_span, answer, ""),
                "start_char": tf.where(has_span, start_char, -1),
                "end_char": tf.where(has_span, end_char, -1),
                "score": tf.where(example_best > neg / 2, example_best, 0.0),
                "null_score": example_null}
