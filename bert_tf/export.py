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

Raw-text signatures run the WordPiece tokenizer inside the graph, so a serving binary
needs the TF Text ops (tensorflow_model_server has them linked in; a Python process must
`import tensorflow_text` before loading). Strings that are not valid UTF-8 have each bad
byte replaced by U+FFFD first (the original tokenizer then drops it), so bad bytes never
fail a request.

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

import os
import uuid
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

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


class ExportError(ValueError):
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
                   warmup_requests: Sequence[tuple] = ()) -> str:
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
    version = next_version(export_dir) if version is None else int(version)
    if version < 0:
        raise ExportError(f"{export_dir}: version must be a non-negative integer, got {version}")
    target = os.path.join(export_dir, str(version))
    if tf.io.gfile.exists(target):
        raise ExportError(f"{target} already exists; pass another version or none to take "
                          f"the next one ({next_version(export_dir)})")
    tf.io.gfile.makedirs(export_dir)
    tmp = os.path.join(export_dir, f".tmp-{version}-{uuid.uuid4().hex[:8]}")
    try:
        _track_captured_variables(module, signatures)
        tf.saved_model.save(module, tmp, signatures=dict(signatures))
        if warmup_requests:
            write_warmup_file(os.path.join(tmp, "assets.extra", WARMUP_FILE), warmup_requests)
        tf.io.gfile.rename(tmp, target)
    finally:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.rmtree(tmp)
    return target


def _track_captured_variables(module: tf.Module, signatures: Mapping[str, Callable]) -> None:
    # Keras 3 wraps each tf.Variable in a KerasVariable; unless the raw variables the
    # traced functions capture are tracked themselves, the SavedModel loads in TF2 Python
    # but TF1-style loaders (tensorflow_model_server, saved_model_cli run) fail with
    # "Could not find variable ...". Keras' own ExportArchive does the same.
    seen, captured = set(), []
    for fn in signatures.values():
        concrete = fn.get_concrete_function() if hasattr(fn, "get_concrete_function") else fn
        for v in concrete.variables:
            if id(v) not in seen:
                seen.add(id(v))
                captured.append(v)
    module._serving_variables = captured


# ---------------------------------------------------------------------------- warmup
# PredictionLog records are encoded by hand (protobuf wire format, a dozen lines) so that
# exporting does not need the tensorflow-serving-api package; tests parse them with it.

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (messages, strings, map entries)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


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

def sanitize_utf8(texts: tf.Tensor) -> tf.Tensor:
    """Replaces every byte sequence that is not valid UTF-8 with U+FFFD (no error).

    >>> sanitize_utf8(tf.constant([b"ok", b"bad\\xff"])).numpy().tolist()
    [b'ok', b'bad\\xef\\xbf\\xbd']
    """
    return tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace",
                                        replacement_char=0xFFFD,
                                        replace_control_characters=False)


def _ids_spec() -> List[tf.TensorSpec]:
    return [tf.TensorSpec([None, None], tf.int32, name=n) for n in MODEL_INPUT_NAMES]


def _text_spec(name: str) -> tf.TensorSpec:
    return tf.TensorSpec([None], tf.string, name=name)


def _check_length(word_ids: tf.Tensor, max_positions: int) -> None:
    # An over-long sequence would otherwise fail deep inside the position slice.
    tf.debugging.assert_less_equal(
        tf.shape(word_ids)[1], max_positions,
        message=f"sequence longer than max_position_embeddings={max_positions}; "
                f"truncate the ids or send raw text")


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

    def __init__(self, encoder, tokenizer=None, max_seq_length: int = 128):
        super().__init__(name="bert_encoder_serving")
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.max_seq_length = int(max_seq_length)
        self.max_positions = int(encoder.config.max_position_embeddings)
        self.serve_ids = tf.function(self._serve_ids, input_signature=_ids_spec())
        if tokenizer is not None:
            self.serve_text = tf.function(self._serve_text,
                                          input_signature=[_text_spec("text")])

    def _run(self, word_ids, mask, type_ids):
        _check_length(word_ids, self.max_positions)
        out = self.encoder({"input_word_ids": word_ids, "input_mask": mask,
                            "input_type_ids": type_ids}, training=False)
        return {"sequence_output": tf.cast(out["sequence_output"], tf.float32),
                "pooled_output": tf.cast(out["pooled_output"], tf.float32)}

    def _serve_ids(self, input_word_ids, input_mask, input_type_ids):
        return self._run(input_word_ids, input_mask, input_type_ids)

    def _serve_text(self, text):
        inputs = encode_text(self.tokenizer, text, None, self.max_seq_length)
        out = self._run(inputs["input_word_ids"], inputs["input_mask"],
                        inputs["input_type_ids"])
        out.update(inputs)
        return out

    def signatures(self) -> Dict[str, Callable]:
        sigs = {SERVING_DEFAULT: self.serve_ids}
        if self.tokenizer is not None:
            sigs[TEXT_SIGNATURE] = self.serve_text
        return sigs

    def warmup_requests(self) -> List[tuple]:
        """One real request per signature (ids made by this module's own tokenizer)."""
        if self.tokenizer is None:
            ids = np.array([[1, 2, 3, 0], [1, 2, 0, 0]], np.int32) % self.encoder.config.vocab_size
            ids_inputs = {"input_word_ids": ids, "input_mask": (ids > 0).astype(np.int32),
                          "input_type_ids": np.zeros_like(ids)}
            return [(SERVING_DEFAULT, ids_inputs)]
        text = np.array([t.encode() for t in WARMUP_TEXTS], dtype=object)
        ids_inputs = {k: v.numpy() for k, v in
                      encode_text(self.tokenizer, tf.constant(text), None,
                                  self.max_seq_length).items()}
        return [(SERVING_DEFAULT, ids_inputs), (TEXT_SIGNATURE, {"text": text})]


def encode_text(tokenizer, text, text_b, max_seq_length: int) -> Dict[str, tf.Tensor]:
    """Raw strings -> int32 model inputs, in the graph (sanitized UTF-8, packed, truncated)."""
    text = sanitize_utf8(text)
    if text_b is not None:
        text_b = sanitize_utf8(text_b)
    out = tokenizer.encode(text, text_b, max_seq_length=max_seq_length)
    return {k: tf.cast(out[k], tf.int32) for k in MODEL_INPUT_NAMES}


# ---------------------------------------------------------------------------- top level

def export_module(module, export_dir: str, version: Optional[int] = None) -> str:
    """Saves a serving module (its signatures and warmup requests) as a new version."""
    return save_versioned(module, module.signatures(), export_dir, version,
                          warmup_requests=module.warmup_requests())


def make_tokenizer(vocab_file: Optional[str], do_lower_case: Optional[bool]):
    """The in-graph BertTokenizer for `vocab_file`, or None without a vocab."""
    if not vocab_file:
        return None
    from bert_tf.tokenization import BertTokenizer

    return BertTokenizer(vocab_file, do_lower_case=True if do_lower_case is None
                         else bool(do_lower_case))


def export_encoder(encoder, export_dir: str, *, vocab_file: Optional[str] = None,
                   do_lower_case: Optional[bool] = None, max_seq_length: Optional[int] = None,
                   version: Optional[int] = None) -> str:
    """Exports a BertEncoder; with `vocab_file`, also the raw-text `serving_text` signature.

    Returns `export_dir/<version>`.
    """
    max_seq_length = _pick_max_seq_length(max_seq_length, None, encoder.config)
    module = EncoderServing(encoder, make_tokenizer(vocab_file, do_lower_case), max_seq_length)
    return export_module(module, export_dir, version)


def _pick_max_seq_length(requested, recorded, config) -> int:
    value = int(requested or recorded or min(128, config.max_position_embeddings))
    if value > config.max_position_embeddings or value < 3:
        raise ExportError(f"max_seq_length={value} must be between 3 and the model's "
                          f"max_position_embeddings={config.max_position_embeddings}")
    return value


def export_model_dir(init_checkpoint: str, export_dir: str, version: Optional[int] = None,
                     max_seq_length: Optional[int] = None, *,
                     bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None,
                     do_lower_case: Optional[bool] = None) -> str:
    """Exports the model a model dir (or a checkpoint prefix inside one) holds.

    A dir with `task_config.json` (finetune) becomes a task export (raw-text
    `serving_default` + `serving_ids`); any other (convert_checkpoint, pretrain) an
    encoder export. `max_seq_length` defaults to the one the task was trained with
    (encoders: 128); config, vocab and casing default to the ones stored in the dir.
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
    from bert_tf.config import BertConfig

    config = (BertConfig.from_file(bert_config_file) if bert_config_file
              else model_dir.find_config(init_checkpoint))
    if config is None:
        raise ExportError(f"{model_dir.model_dir_of(init_checkpoint)}: no "
                          f"{model_dir.CONFIG_FILE}; export a directory written by "
                          f"convert_checkpoint, pretrain or finetune, or pass "
                          f"--bert_config_file")
    vocab_file = vocab_file or model_dir.find_vocab(init_checkpoint)
    if do_lower_case is None:
        do_lower_case = model_dir.find_do_lower_case(init_checkpoint)
    task_config = model_dir.read_task_config(init_checkpoint)
    if task_config is None:
        encoder = model_dir.load_encoder(init_checkpoint, config)
        return export_encoder(encoder, export_dir, vocab_file=vocab_file,
                              do_lower_case=do_lower_case, max_seq_length=max_seq_length,
                              version=version)
    if do_lower_case is None:
        do_lower_case = task_config.get("do_lower_case")
    return export_task_dir(init_checkpoint, export_dir, config=config,
                           task_config=task_config, vocab_file=vocab_file,
                           do_lower_case=do_lower_case, max_seq_length=max_seq_length,
                           version=version)


def export_task_dir(init_checkpoint, export_dir, *, config, task_config, vocab_file,
                    do_lower_case, max_seq_length=None, version=None) -> str:
    """Rebuilds a fine-tuned task model from its task_config.json, restores and exports it."""
    raise ExportError(f"{init_checkpoint}: task exports are not implemented yet")
