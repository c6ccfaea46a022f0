"""The serving modules' shared pieces: signatures, in-graph text encoding, padding.

A serving module is a `tf.Module` whose signatures are plain `tf.function`s (docs/contracts.md §5).
`EncoderServing` serves a bare encoder; each task provides its own `TaskServing`
subclass next to the host postprocessing it must equal (`GlueTask.serving_module`,
`Conll2003NerTask.serving_module`, `SwagTask.serving_module`, `SquadTask.serving_module`).
`bert_tf.export.saved_model` writes them (version layout, warmup requests, atomic writing).

Raw text is packed, then cut to the longest row of the request (as Hugging Face's
`padding="longest"`), not padded to `max_seq_length` or to a coarser grid: at batch 1
nothing is padded at all, and short requests cost what their length costs. The graph
takes any length without retracing (fixed input signatures, dynamic sequence axis); a
length the process has not seen yet costs oneDNN's kernel planning once (a few ms at
MiniLM's size, benchmarks/HISTORY.md). Padded keys get -10000 in attention, so the outputs
equal those of an unpadded run; per-token outputs are as long as the longest row.

Every signature refuses, in the graph and with INVALID_ARGUMENT naming the limit, a
request of more than `max_batch_size` rows or whose inputs disagree on the rows (or, for
ids, on the shape: TensorFlow would broadcast a 1-row input), and the raw-text ones a
string input longer than `max_text_length` UTF-8 bytes; NER and SQuAD, which cut a long
text into windows, also refuse a request that makes more than `max_batch_size` model rows
(the request's total work is bounded, not only each string). An export refuses a vocab
larger than the model's table (raw text would give ids past it). The ids signature refuses
`input_word_ids` outside [0, vocab_size) and `input_type_ids` outside
[0, type_vocab_size) the same way on every device (a GPU or TPU embedding lookup would
read zeros for them silently). `export_model --max_batch_size --max_text_length` set the
limits (defaults below), recorded in `assets.extra/serving_limits.json`.

Example:

>>> mask = tf.sequence_mask([3, 18], 128, tf.int32)  # two texts of 3 and 18 pieces
>>> {k: v.shape.as_list() for k, v in cut_to_longest(
...     {"input_word_ids": mask, "input_mask": mask, "input_type_ids": mask * 0}).items()}
{'input_word_ids': [2, 18], 'input_mask': [2, 18], 'input_type_ids': [2, 18]}
"""

from __future__ import annotations

import functools
import os
from typing import Callable, Dict, List, Sequence

import numpy as np
import tensorflow as tf

from bert_tf.core import file_io
from bert_tf.core.constants import MODEL_INPUTS
from bert_tf.core.errors import UsageError
from bert_tf.serving.graph import InferenceEncoder

SERVING_DEFAULT = "serving_default"
IDS_SIGNATURE = "serving_ids"
TEXT_SIGNATURE = "serving_text"
LABELS_FILE = "labels.txt"

#: Default request limits of an export (export_model --max_batch_size, --max_text_length):
#: rows per request, and UTF-8 bytes per string of a raw-text request (20000 bytes:
#: about 5000 WordPiece tokens of English, 40 SQuAD windows of 384 with stride 128).
DEFAULT_MAX_BATCH_SIZE = 256
DEFAULT_MAX_TEXT_LENGTH = 20000
LIMITS_FILE = "serving_limits.json"

#: Sentences the warmup requests are built from (mixed lengths, a pair, Korean).
WARMUP_TEXTS = ("The quick brown fox jumps over the lazy dog.",
                "BERT serves raw text.",
                "서울은 한국의 수도입니다.")
WARMUP_TEXTS_B = ("A fast fox leaps over a dog.", "Tokenization happens in the graph.",
                  "Seoul is the capital of Korea.")


def cut_to_longest(inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """Cuts packed [batch, max_seq_length] inputs to the longest row (at least one column,
    so a request of no rows still has a [CLS] position to pool).

    The columns past the longest row are padding in every row. No coarser grid: padding
    SST-2 sentences to multiples of 16 made batch-1 requests cost 12% more on two threads
    and 16% on one (benchmarks/HISTORY.md); a length not seen before costs kernel planning
    once.
    """
    longest = tf.cast(tf.reduce_max(tf.reduce_sum(inputs["input_mask"], axis=-1)), tf.int32)
    length = tf.minimum(tf.maximum(longest, 1), tf.shape(inputs["input_mask"])[1])
    return {k: v[:, :length] for k, v in inputs.items()}


def ids_spec() -> List[tf.TensorSpec]:
    return [tf.TensorSpec([None, None], tf.int32, name=n) for n in MODEL_INPUTS]


def text_spec(name: str) -> tf.TensorSpec:
    return tf.TensorSpec([None], tf.string, name=name)


def check_length(word_ids: tf.Tensor, max_positions: int) -> tf.Tensor:
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


def check_request(inputs: Sequence[tf.Tensor], max_batch_size: int,
                  max_text_length: int = 0) -> List[tf.Tensor]:
    """`inputs` (a signature's arguments; batch first) gated on the request limits: at
    most `max_batch_size` rows and, with `max_text_length` (raw text), strings of at most
    that many UTF-8 bytes. A request beyond them fails with INVALID_ARGUMENT.

    >>> ok = check_request([tf.constant(["ab", "c"])], max_batch_size=2, max_text_length=2)
    >>> check_request([tf.constant(["a"]), tf.constant(["b", "c"])], 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tensorflow.python.framework.errors_impl.InvalidArgumentError: ...disagree on the batch size...
    >>> check_request([tf.constant(["abc"])], 2, 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tensorflow.python.framework.errors_impl.InvalidArgumentError: ...text longer than max_text_length=2 bytes...
    """
    first = inputs[0]
    checks = [tf.debugging.assert_less_equal(
        tf.shape(first)[0], max_batch_size,
        message=f"request of more rows than max_batch_size={max_batch_size} (set at export: "
                f"export_model --max_batch_size); split the request")]
    # Every input one row per example: TensorFlow would broadcast a 1-row input against
    # a 50-row one and answer 50 rows.
    checks += [tf.debugging.assert_equal(
        tf.shape(t)[0], tf.shape(first)[0],
        message=f"the request's inputs disagree on the batch size (max_batch_size="
                f"{max_batch_size}): give every input one row per example") for t in inputs[1:]]
    if max_text_length:
        longest = tf.reduce_max(tf.concat(
            [tf.reshape(tf.strings.length(t), [-1]) for t in inputs] + [[0]], 0))
        checks.append(tf.debugging.assert_less_equal(
            longest, max_text_length,
            message=f"text longer than max_text_length={max_text_length} bytes of UTF-8 (set "
                    f"at export: export_model --max_text_length); split or shorten the text"))
    with tf.control_dependencies(checks):
        return [tf.identity(t) for t in inputs]


def check_model_rows(word_ids: tf.Tensor, max_batch_size: int) -> tf.Tensor:
    """`word_ids` (the model's input, [rows, ...]) gated on the request's total work: NER
    and SQuAD cut long texts into windows, so a few rows of text may become many model
    rows; the model runs on at most `max_batch_size` of them per request."""
    check = tf.debugging.assert_less_equal(
        tf.shape(word_ids)[0], max_batch_size,
        message=f"the request's texts make more model rows (windows of long texts) than "
                f"max_batch_size={max_batch_size} (set at export: export_model "
                f"--max_batch_size); split the request or shorten its texts")
    with tf.control_dependencies([check]):
        return tf.identity(word_ids)


def check_ids(word_ids: tf.Tensor, type_ids: tf.Tensor, vocab_size: int,
              type_vocab_size: int, mask: tf.Tensor = None):
    """(word_ids, type_ids) gated on range checks: ids outside the embedding tables fail
    with INVALID_ARGUMENT on every device (a GPU/TPU lookup would read zeros); with
    `mask`, the three inputs must have one shape (no broadcasting of a [1, S] input)."""
    checks = [] if mask is None else [
        tf.debugging.assert_equal(tf.shape(t), tf.shape(word_ids),
                                  message="input_mask and input_type_ids must have the "
                                          "shape of input_word_ids (rows x length)")
        for t in (mask, type_ids)]
    checks += [
        tf.debugging.assert_non_negative(word_ids, message="input_word_ids below 0"),
        tf.debugging.assert_less(word_ids, tf.constant(vocab_size, word_ids.dtype),
                                 message=f"input_word_ids >= vocab_size={vocab_size}: ids of "
                                         f"another vocab? Use this export's vocab.txt"),
        tf.debugging.assert_non_negative(type_ids, message="input_type_ids below 0"),
        tf.debugging.assert_less(type_ids, tf.constant(type_vocab_size, type_ids.dtype),
                                 message=f"input_type_ids >= type_vocab_size="
                                         f"{type_vocab_size}")]
    with tf.control_dependencies(checks):
        return tf.identity(word_ids), tf.identity(type_ids)


class ServingModule(tf.Module):
    """What every serving module holds: the Keras model (kept out of tracking: its
    variables are saved once, as `_serving_variables`), the tokenizer, the ids signature
    (`serve_ids`, calling `self._serve_ids`), the lengths, the request limits
    (`max_batch_size`, `max_text_length`) and `parallel_branches` (read when the
    signatures are traced, so set them before exporting, as `export.export_module`
    does). `has_text_signatures` says whether the subclass adds the raw-text signature
    `serve_text` (asked for, and a tokenizer to run in the graph).

    The signatures run the model through `run_model`: its encoder as the serving graph
    (`serving_graph.InferenceEncoder`: query/key/value fused; each layer split into
    `parallel_branches` chains), made from the model's weights when first traced."""

    max_batch_size = DEFAULT_MAX_BATCH_SIZE
    max_text_length = DEFAULT_MAX_TEXT_LENGTH
    parallel_branches = 1

    def __init__(self, model, tokenizer, max_seq_length: int, max_positions: int, name: str,
                 text_signatures: bool = True):
        super().__init__(name=name)
        self._keras_model = Untracked(model)
        self._inference_encoder = Untracked(None)
        self.max_seq_length = int(max_seq_length)
        self.max_positions = int(max_positions)
        self.has_text_signatures = bool(text_signatures) and tokenizer is not None
        vocab_size = self.encoder_config.vocab_size
        if self.has_text_signatures and tokenizer.vocab_size > vocab_size:
            # The raw-text signatures' ids come from this vocab: checked here, at export.

            raise UsageError(f"{tokenizer.vocab_file} has {tokenizer.vocab_size} tokens but "
                             f"the model's vocab_size is {vocab_size}: raw text would give "
                             f"ids past its embedding table; export with the model's vocab")
        attach_tokenizer(self, tokenizer, text_signatures)
        self.serve_ids = tf.function(self.bounded(self._serve_ids, text=False),
                                     autograph=False, input_signature=ids_spec())

    def bounded(self, fn: Callable, text: bool) -> Callable:
        """`fn` (a signature) behind the request limits (`check_request`) and, for ids,
        the vocab range (`check_ids`)."""
        def signature(*inputs):
            inputs = check_request(inputs, self.max_batch_size,
                                   self.max_text_length if text else 0)
            if not text:
                config = self.encoder_config
                word_ids, mask, type_ids = inputs
                word_ids, type_ids = check_ids(word_ids, type_ids, config.vocab_size,
                                               config.type_vocab_size, mask)
                inputs = [word_ids, mask, type_ids]
            return fn(*inputs)
        # fn's parameter names (input_word_ids, ..., text): Python callers pass them by name.
        return functools.wraps(fn)(signature)

    def limits(self) -> Dict[str, int]:
        """What `assets.extra/serving_limits.json` records."""
        return {"max_batch_size": int(self.max_batch_size),
                "max_text_length_utf8_bytes": int(self.max_text_length),
                "max_seq_length": self.max_seq_length}

    @property
    def model(self):
        return self._keras_model.value

    @property
    def encoder(self):
        """The served BertEncoder (the model itself, or a task model's)."""
        return getattr(self.model, "encoder", self.model)

    @property
    def encoder_config(self):
        """The BertConfig of the served encoder."""
        return self.encoder.config

    def run_model(self, inputs: Dict[str, tf.Tensor]):
        """The served model's outputs on `inputs` (the model inputs), its encoder run as
        the serving graph with `parallel_branches` chains (made once per value, from
        the weights as they are then)."""
        encode = self._inference_encoder.value
        if encode is None or encode.branches != self.parallel_branches:
            with tf.init_scope():  # its snapshots are variables: made eagerly
                encode = InferenceEncoder(self.encoder, self.parallel_branches)
            self._inference_encoder = Untracked(encode)
        if self.model is self.encoder:
            return encode(inputs)
        return self.model.run(inputs, encode, training=False)

    @property
    def tok(self):
        """The tokenizer (saved with the module or only used at export time), or None."""
        return tokenizer_of(self)


class EncoderServing(ServingModule):
    """The encoder behind plain tf.function signatures (and its tokenizer, if any).

    >>> from bert_tf.model.config import BertConfig
    >>> from bert_tf.model.encoder import BertEncoder
    >>> enc = BertEncoder(BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
    ...                              num_attention_heads=2, intermediate_size=16))
    >>> ids = tf.constant([[2, 5, 3]])
    >>> out = EncoderServing(enc).serve_ids(ids, tf.ones_like(ids), tf.zeros_like(ids))
    >>> sorted(out), out["pooled_output"].shape
    (['pooled_output', 'sequence_output'], TensorShape([1, 8]))
    """

    def __init__(self, encoder, tokenizer=None, max_seq_length: int = 128,
                 text_signatures: bool = True):
        super().__init__(encoder, tokenizer, max_seq_length,
                         encoder.config.max_position_embeddings, "bert_encoder_serving",
                         text_signatures)
        if self.has_text_signatures:
            self.serve_text = tf.function(self.bounded(self._serve_text, text=True),
                                          autograph=False, input_signature=[text_spec("text")])

    def _run(self, word_ids, mask, type_ids):
        word_ids = check_length(word_ids, self.max_positions)
        out = self.run_model({"input_word_ids": word_ids, "input_mask": mask,
                              "input_type_ids": type_ids})
        return {"sequence_output": tf.cast(out["sequence_output"], tf.float32),
                "pooled_output": tf.cast(out["pooled_output"], tf.float32)}

    def _serve_ids(self, input_word_ids, input_mask, input_type_ids):
        return self._run(input_word_ids, input_mask, input_type_ids)

    def _serve_text(self, text):
        inputs = cut_to_longest(encode_text(self.tok, text, None, self.max_seq_length))
        out = self._run(inputs["input_word_ids"], inputs["input_mask"],
                        inputs["input_type_ids"])
        out.update(inputs)
        return out

    def signatures(self) -> Dict[str, Callable]:
        sigs = {SERVING_DEFAULT: self.serve_ids}
        if self.has_text_signatures:
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
        ids_inputs = {k: v.numpy() for k, v in cut_to_longest(encode_text(
            self.tok, tf.constant(text), None, self.max_seq_length)).items()}
        requests = [(SERVING_DEFAULT, ids_inputs)]
        if self.has_text_signatures:
            requests.append((TEXT_SIGNATURE, {"text": text}))
        return requests


class Untracked:
    """Holds an object out of tf.Module tracking (so it is not saved with the module)."""

    def __init__(self, value):
        self.value = value


def attach_tokenizer(module: tf.Module, tokenizer, text_signatures: bool) -> None:
    # With raw-text signatures the tokenizer is saved with the module (its vocab becomes
    # assets/vocab.txt). Without them it must stay out of the SavedModel entirely: its own
    # tf.functions would otherwise be saved too and bring TF Text ops into the graph.
    if tokenizer is None or text_signatures:
        module.tokenizer = tokenizer
        return
    module._host_tokenizer = Untracked(tokenizer)
    module.vocab_asset = tf.saved_model.Asset(tokenizer.vocab_file)


def tokenizer_of(module: tf.Module):
    host = getattr(module, "_host_tokenizer", None)
    return host.value if host is not None else getattr(module, "tokenizer", None)


def encode_text(tokenizer, text, text_b, max_seq_length: int) -> Dict[str, tf.Tensor]:
    """Raw strings -> int32 model inputs in the graph, packed and truncated (not trimmed)."""
    out = tokenizer.encode(text, text_b, max_seq_length=max_seq_length)
    return {k: tf.cast(out[k], tf.int32) for k in MODEL_INPUTS}


def write_labels(labels: Sequence[str]) -> str:
    path = os.path.join(scratch_dir(), LABELS_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"{label}\n" for label in labels))
    return path


def scratch_dir() -> str:
    """A new temporary directory for files an export copies into the SavedModel (removed
    when the process exits)."""
    return file_io.scratch_dir("bert_tf_export_")


def bytes_to_chars(texts, byte_offsets):
    """Byte offsets [batch, n] into each text -> code point offsets (Python str indices).

    Bytes that are not valid UTF-8 count as one character each (U+FFFD, as Python's
    `bytes.decode("utf-8", "replace")` does for single bad bytes).
    """
    _, starts = tf.strings.unicode_decode_with_offsets(texts, "UTF-8", errors="replace")
    starts = tf.cast(starts, tf.int64).to_tensor(default_value=np.iinfo(np.int64).max)
    starts = tf.concat([starts, tf.fill([tf.shape(starts)[0], 1], np.iinfo(np.int64).max)], 1)
    return tf.cast(tf.searchsorted(starts, tf.cast(byte_offsets, tf.int64), side="left"),
                   tf.int32)


class TaskServing(ServingModule):
    """Common part of the task modules: the model on ids, the tokenizer, the signatures.

    A task's module sets `text_inputs` (the raw-text signature's input names) and
    defines `from_ids(inputs)` (model inputs -> outputs) and, when its raw-text outputs
    need more than that, `from_text(*texts)`.
    """

    text_inputs: Sequence[str] = ("text",)

    def __init__(self, model, tokenizer, max_seq_length: int, name: str,
                 text_signatures: bool = True):
        super().__init__(model, tokenizer, max_seq_length,
                         model.encoder.config.max_position_embeddings, name, text_signatures)
        if self.has_text_signatures:
            text_fn = {1: self._serve_text_1, 2: self._serve_text_2}[len(self.text_inputs)]
            self.serve_text = tf.function(self.bounded(text_fn, text=True), autograph=False,
                                          input_signature=[text_spec(n)
                                                           for n in self.text_inputs])

    def _model(self, inputs):
        word_ids = check_model_rows(inputs["input_word_ids"], self.max_batch_size)
        inputs = dict(inputs, input_word_ids=check_length(word_ids, self.max_positions))
        return self.run_model({k: inputs[k] for k in MODEL_INPUTS})

    def _serve_ids(self, input_word_ids, input_mask, input_type_ids):
        return self.from_ids({"input_word_ids": input_word_ids, "input_mask": input_mask,
                              "input_type_ids": input_type_ids})

    def _serve_text_1(self, a):
        return self.from_text(a)

    def _serve_text_2(self, a, b):
        return self.from_text(a, b)

    def signatures(self) -> Dict[str, Callable]:
        if not self.has_text_signatures:
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
        if not self.has_text_signatures:
            return [(SERVING_DEFAULT, ids)]
        return [(SERVING_DEFAULT, text), (IDS_SIGNATURE, ids)]

    def encode(self, a, b=None):
        """Raw text -> the model inputs, packed and cut to the longest row."""
        return cut_to_longest(encode_text(self.tok, a, b, self.max_seq_length))

    def from_text(self, a, b=None):
        return self.from_ids(self.encode(a, b))

    def from_ids(self, inputs):
        raise NotImplementedError


