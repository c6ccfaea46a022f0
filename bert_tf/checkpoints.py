"""Weight import from original TF1 / Hugging Face BERT checkpoints, and export to both.

Every reader returns a `BertWeights` (config, numpy arrays keyed by *our* variable names,
vocab, do_lower_case); every writer takes one. So a conversion is `reader -> writer`:

    read_tf1_checkpoint(path)       original google-research/bert `bert_model.ckpt`
    read_huggingface(path)          `model.safetensors` (sharded too) / `pytorch_model.bin`
    read_model_dir(path)            a bert_tf model dir (convert_checkpoint, pretrain, finetune)
    write_model_dir(weights, dir)   -> bert_tf model dir that `bert_tf.load_encoder` reads
    write_tf1_checkpoint(weights, dir)  -> `bert_model.ckpt` + `bert_config.json` + `vocab.txt`
    write_huggingface(weights, dir) -> `config.json` + `model.safetensors` + `vocab.txt` +
                                       `tokenizer_config.json` (BertModel, BertForPreTraining
                                       or the task's BertFor* class)

The name mappings are plain data (`ENCODER_MAPPINGS`, `LAYER_MAPPINGS`,
`MASKED_LM_MAPPINGS`, `NEXT_SENTENCE_MAPPINGS`, `TASK_HEAD_MAPPINGS`), read in both
directions by every reader and writer. Our kernels are [in, out] like TF1's;
Hugging Face `Linear` weights are [out, in] and are transposed, as is TF1's
`cls/seq_relationship/output_weights` ([2, H]).

GELU (DESIGN 2.1): the original TF1 code computed the tanh form although its configs say
`gelu`, so TF1 imports record `gelu_approximate`; Hugging Face's `gelu` is the exact form,
which is our `gelu`. The original code cannot compute the exact form: exporting an exact-GELU
model to TF1 writes `hidden_act: gelu` (the closest it has) and logs a warning.

Example (a round trip through the TF1 layout):

>>> import tempfile
>>> from bert_tf.config import BertConfig
>>> from bert_tf.models import BertPretrainer
>>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
...                  num_attention_heads=2, intermediate_size=16,
...                  hidden_act="gelu_approximate")
>>> weights = weights_from_model(BertPretrainer(cfg))
>>> prefix = write_tf1_checkpoint(weights, tempfile.mkdtemp())
>>> back = read_tf1_checkpoint(prefix)
>>> back.config == cfg, back.heads
(True, ('masked_lm', 'next_sentence'))
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import model_dir as model_dir_lib
from bert_tf.config import BertConfig, ConfigError
from bert_tf.errors import BertTfError
from bert_tf.model_dir import CheckpointMismatchError

HEADS = ("masked_lm", "next_sentence")

TF1_CHECKPOINT_NAME = "bert_model.ckpt"
TF1_CONFIG_FILE = "bert_config.json"
# An extra bert_config.json key (the original code ignores unknown keys) so that our own
# import of an exported exact-GELU model gets its activation back.
EXACT_ACT_KEY = "bert_tf_hidden_act"
# The keys an original bert_config.json has; exports write only these (plus the above).
TF1_CONFIG_KEYS = ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob",
                   "hidden_size", "initializer_range", "intermediate_size",
                   "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
                   "type_vocab_size", "vocab_size")
# What the original modeling.get_activation accepts, by our config name.
_TF1_ACTIVATIONS = {"gelu_approximate": "gelu", "gelu_new": "gelu",
                    "gelu_pytorch_tanh": "gelu", "gelu": "gelu", "relu": "relu",
                    "tanh": "tanh"}
# Source variables that are not model weights: optimizer slots and step counters (TF1),
# buffers (Hugging Face).
_IGNORED = re.compile(r"(/adam_[mv]$|/Adam(_1)?$|/Momentum$|^global_step$|"
                      r"(^|\.)position_ids$|^_CHECKPOINTABLE_OBJECT_GRAPH$)")


class CheckpointFormatError(BertTfError, ValueError):
    """A source that is missing, or is not a BERT checkpoint of the format asked for."""


@dataclasses.dataclass(frozen=True)
class WeightMapping:
    """One variable under its three names; `{i}` stands for the layer index.

    `tf1_transpose` / `hf_transpose`: the source holds the transpose of ours.

    >>> m = LAYER_MAPPINGS[0].for_layer(3)
    >>> m.ours, m.tf1, m.hf
    ('encoder/layer_3/attention/query/kernel', 'bert/encoder/layer_3/attention/self/query/kernel', 'encoder.layer.3.attention.self.query.weight')
    """

    ours: str
    tf1: str
    hf: str
    tf1_transpose: bool = False
    hf_transpose: bool = False

    def for_layer(self, i: int) -> "WeightMapping":
        return dataclasses.replace(self, ours=self.ours.format(i=i), tf1=self.tf1.format(i=i),
                                   hf=self.hf.format(i=i))


def _dense(ours: str, tf1: str, hf: str) -> List[WeightMapping]:
    """Kernel + bias of a dense layer (HF stores the kernel as [out, in])."""
    return [WeightMapping(f"{ours}/kernel", f"{tf1}/kernel", f"{hf}.weight", hf_transpose=True),
            WeightMapping(f"{ours}/bias", f"{tf1}/bias", f"{hf}.bias")]


def _norm(ours: str, tf1: str, hf: str) -> List[WeightMapping]:
    """gamma + beta of a LayerNorm (HF: weight + bias)."""
    return [WeightMapping(f"{ours}/gamma", f"{tf1}/gamma", f"{hf}.weight"),
            WeightMapping(f"{ours}/beta", f"{tf1}/beta", f"{hf}.bias")]


# HF names here are relative to the encoder (`bert.` is prepended for BertFor* models).
ENCODER_MAPPINGS: Tuple[WeightMapping, ...] = tuple(
    [WeightMapping(f"encoder/embeddings/{n}", f"bert/embeddings/{n}", f"embeddings.{n}.weight")
     for n in ("word_embeddings", "position_embeddings", "token_type_embeddings")]
    + _norm("encoder/embeddings/layer_norm", "bert/embeddings/LayerNorm", "embeddings.LayerNorm")
    + _dense("encoder/pooler/dense", "bert/pooler/dense", "pooler.dense"))

LAYER_MAPPINGS: Tuple[WeightMapping, ...] = tuple(
    [m for part in ("query", "key", "value")
     for m in _dense(f"encoder/layer_{{i}}/attention/{part}",
                     f"bert/encoder/layer_{{i}}/attention/self/{part}",
                     f"encoder.layer.{{i}}.attention.self.{part}")]
    + _dense("encoder/layer_{i}/attention/output_dense",
             "bert/encoder/layer_{i}/attention/output/dense",
             "encoder.layer.{i}.attention.output.dense")
    + _norm("encoder/layer_{i}/attention_layer_norm",
            "bert/encoder/layer_{i}/attention/output/LayerNorm",
            "encoder.layer.{i}.attention.output.LayerNorm")
    + _dense("encoder/layer_{i}/intermediate", "bert/encoder/layer_{i}/intermediate/dense",
             "encoder.layer.{i}.intermediate.dense")
    + _dense("encoder/layer_{i}/output_dense", "bert/encoder/layer_{i}/output/dense",
             "encoder.layer.{i}.output.dense")
    + _norm("encoder/layer_{i}/output_layer_norm", "bert/encoder/layer_{i}/output/LayerNorm",
            "encoder.layer.{i}.output.LayerNorm"))

MASKED_LM_MAPPINGS: Tuple[WeightMapping, ...] = tuple(
    _dense("masked_lm/transform", "cls/predictions/transform/dense",
           "cls.predictions.transform.dense")
    + _norm("masked_lm/layer_norm", "cls/predictions/transform/LayerNorm",
            "cls.predictions.transform.LayerNorm")
    + [WeightMapping("masked_lm/output_bias", "cls/predictions/output_bias",
                     "cls.predictions.bias")])

NEXT_SENTENCE_MAPPINGS: Tuple[WeightMapping, ...] = (
    WeightMapping("next_sentence/dense/kernel", "cls/seq_relationship/output_weights",
                  "cls.seq_relationship.weight", tf1_transpose=True, hf_transpose=True),
    WeightMapping("next_sentence/dense/bias", "cls/seq_relationship/output_bias",
                  "cls.seq_relationship.bias"),
)

_HEAD_MAPPINGS = {"masked_lm": MASKED_LM_MAPPINGS, "next_sentence": NEXT_SENTENCE_MAPPINGS}
# A fine-tuned model's `task_head` (bert_tf.tasks), by the transformers class that has the
# same head; TF1 names are those of the original run_classifier / run_squad.
_CLASSIFIER_MAPPINGS: Tuple[WeightMapping, ...] = (
    WeightMapping("task_head/dense/kernel", "output_weights", "classifier.weight",
                  tf1_transpose=True, hf_transpose=True),
    WeightMapping("task_head/dense/bias", "output_bias", "classifier.bias"))
TASK_HEAD_MAPPINGS: Dict[str, Tuple[WeightMapping, ...]] = {
    "BertForSequenceClassification": _CLASSIFIER_MAPPINGS,
    "BertForTokenClassification": _CLASSIFIER_MAPPINGS,
    "BertForMultipleChoice": _CLASSIFIER_MAPPINGS,
    "BertForQuestionAnswering": (
        WeightMapping("task_head/dense/kernel", "cls/squad/output_weights", "qa_outputs.weight",
                      tf1_transpose=True, hf_transpose=True),
        WeightMapping("task_head/dense/bias", "cls/squad/output_bias", "qa_outputs.bias")),
}
# HF names that sit beside `bert.` rather than under it (heads of BertFor* classes).
_HF_HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.")

_POOLER = ("encoder/pooler/dense/kernel", "encoder/pooler/dense/bias")
# Other names the same HF weight has had (old pytorch-pretrained-bert LayerNorm names;
# the MLM bias duplicated on the decoder).
_HF_ALTERNATIVES = {".weight": ".gamma", ".bias": ".beta"}


def mappings_for(num_layers: int, heads: Iterable[str] = ()) -> List[WeightMapping]:
    """All mappings of a model with `num_layers` layers and the given heads.

    >>> len(mappings_for(2)), len(mappings_for(2, HEADS))
    (39, 46)
    """
    result = list(ENCODER_MAPPINGS)
    for i in range(num_layers):
        result += [m.for_layer(i) for m in LAYER_MAPPINGS]
    for head in heads:
        result += list(_HEAD_MAPPINGS[head])
    return result


@dataclasses.dataclass
class BertWeights:
    """A model in memory, independent of any checkpoint format.

    `arrays`: our variable name (as in `WeightMapping.ours`) -> float32 numpy array.
    `sources`: our name -> where the value came from (`file:variable`), for error messages.
    `heads`: which of `HEADS` the arrays include.
    `task_config`: a fine-tuned model's task_config.json; the arrays then include its
    `task_head/...` variables (see `TASK_HEAD_MAPPINGS`).
    """

    config: BertConfig
    arrays: Dict[str, np.ndarray]
    heads: Tuple[str, ...] = ()
    vocab_file: Optional[str] = None
    do_lower_case: Optional[bool] = None
    sources: Dict[str, str] = dataclasses.field(default_factory=dict)
    strip_accents: Optional[bool] = None  # None: follows do_lower_case (HF's meaning)
    task_config: Optional[dict] = None

    def source_of(self, name: str) -> str:
        return self.sources.get(name, name)


def expected_shapes(config: BertConfig, heads: Iterable[str] = HEADS) -> Dict[str, tuple]:
    """Our variable name -> the shape `config` gives it (kernels [in, out]).

    >>> expected_shapes(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
    ...                            intermediate_size=16))["encoder/layer_0/output_dense/kernel"]
    (16, 8)
    """
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    shapes = {}
    for m in mappings_for(config.num_hidden_layers, heads):
        last = m.ours.split("/")[-1]
        if re.search(r"^encoder/layer_\d+/intermediate/", m.ours):
            kernel = (h, i)
        elif re.search(r"^encoder/layer_\d+/output_dense/", m.ours):
            kernel = (i, h)
        else:
            kernel = (h, h)
        if m.ours.startswith("encoder/embeddings/") and last.endswith("_embeddings"):
            rows = {"word_embeddings": v, "position_embeddings": config.max_position_embeddings,
                    "token_type_embeddings": config.type_vocab_size}[last]
            shapes[m.ours] = (rows, h)
        elif m.ours == "masked_lm/output_bias":
            shapes[m.ours] = (v,)
        elif m.ours.startswith("next_sentence/"):
            shapes[m.ours] = (h, 2) if last == "kernel" else (2,)
        elif last == "kernel":
            shapes[m.ours] = kernel
        elif last == "bias":
            shapes[m.ours] = (kernel[1],)
        else:  # LayerNorm gamma / beta
            shapes[m.ours] = (h,)
    return shapes


def check_shapes(weights: "BertWeights") -> None:
    """Refuses an array whose shape does not fit the config (names source and both shapes)."""
    for name, shape in expected_shapes(weights.config, weights.heads).items():
        value = weights.arrays.get(name)
        if value is not None and tuple(value.shape) != shape:
            raise CheckpointMismatchError(
                f"{weights.source_of(name)}: shape {list(value.shape)} does not fit the "
                f"config, which needs {list(shape)} for `{name}`; check that the config "
                f"belongs to this checkpoint")


# --------------------------------------------------------------------------- our model
def model_variables(model) -> Dict[str, tf.Variable]:
    """Our variable name -> Keras variable of a BertPretrainer (or a bare BertEncoder).

    >>> from bert_tf.encoder import BertEncoder
    >>> enc = BertEncoder(BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
    ...                              num_attention_heads=2, intermediate_size=16))
    >>> tuple(model_variables(enc)["encoder/layer_0/intermediate/kernel"].shape)
    (8, 16)
    """
    encoder = getattr(model, "encoder", model)
    emb = encoder.embeddings
    found = {"encoder/embeddings/word_embeddings": emb.word_embeddings,
             "encoder/embeddings/position_embeddings": emb.position_embeddings,
             "encoder/embeddings/token_type_embeddings": emb.token_type_embeddings}
    found.update(_norm_vars("encoder/embeddings/layer_norm", emb.layer_norm))
    found.update(_dense_vars("encoder/pooler/dense", encoder.pooler.dense))
    for i, block in enumerate(encoder.transformer_layers):
        p = f"encoder/layer_{i}/"
        att = block.attention
        for part in ("query", "key", "value"):
            found.update(_dense_vars(p + f"attention/{part}", getattr(att, part)))
        found.update(_dense_vars(p + "attention/output_dense", att.output_dense))
        found.update(_norm_vars(p + "attention_layer_norm", block.attention_layer_norm))
        found.update(_dense_vars(p + "intermediate", block.intermediate))
        found.update(_dense_vars(p + "output_dense", block.output_dense))
        found.update(_norm_vars(p + "output_layer_norm", block.output_layer_norm))
    if hasattr(model, "masked_lm"):
        found.update(_dense_vars("masked_lm/transform", model.masked_lm.transform))
        found.update(_norm_vars("masked_lm/layer_norm", model.masked_lm.layer_norm))
        found["masked_lm/output_bias"] = model.masked_lm.output_bias
    if hasattr(model, "next_sentence"):
        found.update(_dense_vars("next_sentence/dense", model.next_sentence.dense))
    return found


def _dense_vars(prefix, layer):
    return {f"{prefix}/kernel": layer.kernel, f"{prefix}/bias": layer.bias}


def _norm_vars(prefix, layer):
    return {f"{prefix}/gamma": layer.gamma, f"{prefix}/beta": layer.beta}


def weights_from_model(model, vocab_file=None, do_lower_case=None) -> BertWeights:
    """Snapshot of a BertPretrainer's (or BertEncoder's) variables as a BertWeights."""
    encoder = getattr(model, "encoder", model)
    heads = tuple(h for h in HEADS if hasattr(model, h))
    arrays = {name: np.asarray(v.numpy(), np.float32)
              for name, v in model_variables(model).items()}
    return BertWeights(encoder.config, arrays, heads, vocab_file, do_lower_case)


def build_model(weights: BertWeights):
    """A BertPretrainer holding `weights`, and the checkpoint children to save.

    Returns `(model, objects)`; `objects` has `encoder` plus the heads the weights have.
    Refuses (CheckpointMismatchError) an array whose shape does not fit the config,
    naming the source variable and both shapes.
    """
    from bert_tf.models import BertPretrainer  # late: keeps the readers light

    model = BertPretrainer(weights.config)
    for name, variable in model_variables(model).items():
        head = name.split("/")[0]
        if head in HEADS and head not in weights.heads:
            continue
        if name not in weights.arrays:
            if name in _POOLER:
                logging.warning("%s: the source has no pooler; `pooled_output` uses a freshly "
                                "initialized pooler (fine-tune before using it)", name)
                continue
            raise CheckpointMismatchError(f"no value for `{name}` in the source")
        value = weights.arrays[name]
        if tuple(value.shape) != tuple(variable.shape):
            raise CheckpointMismatchError(
                f"{weights.source_of(name)}: shape {list(value.shape)} does not fit the "
                f"config, which needs {list(variable.shape)} for `{name}`; check that the "
                f"config belongs to this checkpoint")
        variable.assign(value)
    objects = {"encoder": model.encoder}
    objects.update({head: getattr(model, head) for head in weights.heads})
    return model, objects


# --------------------------------------------------------------------------- helpers
def _require_file(path: str, what: str) -> str:
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{path}: {what} not found")
    return path


def _vocab_size_of(vocab_file: str) -> int:
    with tf.io.gfile.GFile(vocab_file, "r") as f:
        return sum(1 for line in f if line.strip())


def _check_vocab(vocab_file: Optional[str], config: BertConfig, config_source: str) -> None:
    """A vocab with more tokens than embedding rows would produce out-of-range ids."""
    if not vocab_file:
        return
    _require_file(vocab_file, "vocab file")
    size = _vocab_size_of(vocab_file)
    if size > config.vocab_size:
        raise CheckpointMismatchError(
            f"{vocab_file}: has {size} tokens but {config_source} says vocab_size="
            f"{config.vocab_size}; pass the vocab that belongs to this checkpoint")
    if size < config.vocab_size:
        logging.info("%s: %d tokens for vocab_size=%d (the extra embedding rows are unused)",
                     vocab_file, size, config.vocab_size)


def _check_layer_names(names: Iterable[str], pattern: str, config: BertConfig,
                       source: str) -> None:
    """Refuses a source with more layers than the config asks for."""
    layers = {int(m.group(1)) for n in names for m in [re.search(pattern, n)] if m}
    if layers and max(layers) + 1 != config.num_hidden_layers:
        raise CheckpointMismatchError(
            f"{source}: holds {max(layers) + 1} encoder layers but the config says "
            f"num_hidden_layers={config.num_hidden_layers}; use the config of this checkpoint")


def _collect(mappings: List[WeightMapping], names: Iterable[str], get, *, source: str,
             hf_prefix: Optional[str] = None) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """Reads every mapping present in the source; returns (arrays, sources).

    `get(name)` returns the source array. With `hf_prefix` the HF names are used (the
    prefix goes before encoder names), otherwise the TF1 names.
    """
    names = set(names)
    arrays, sources = {}, {}
    for m in mappings:
        if hf_prefix is None:
            candidates, transpose = [m.tf1], m.tf1_transpose
        else:
            candidates, transpose = _hf_names(m, hf_prefix), m.hf_transpose
        found = next((c for c in candidates if c in names), None)
        if found is None:
            continue
        value = np.asarray(get(found))
        if value.dtype != np.float32:
            value = value.astype(np.float32)
        arrays[m.ours] = value.T if transpose else value
        sources[m.ours] = f"{source}: variable `{found}`" + (" (transposed)" if transpose else "")
    return arrays, sources


def _check_complete(mappings: List[WeightMapping], arrays: Mapping[str, np.ndarray],
                    name_of, source: str) -> None:
    """Every encoder variable must be there; the pooler may be absent (BertForMaskedLM
    has none) but not half there."""
    pooler = [m for m in mappings if m.ours in _POOLER]
    optional = _POOLER if not any(m.ours in arrays for m in pooler) else ()
    missing = [name_of(m) for m in mappings if m.ours not in arrays and m.ours not in optional]
    if missing:
        raise CheckpointMismatchError(
            f"{source}: lacks {len(missing)} variable(s) the encoder needs, e.g. "
            f"{', '.join(missing[:3])}")


def _heads_present(arrays: Mapping[str, np.ndarray], name_of, source: str) -> Tuple[str, ...]:
    """Heads whose variables are all present; a partly present head is refused."""
    present = []
    for head in HEADS:
        have = [m for m in _HEAD_MAPPINGS[head] if m.ours in arrays]
        if have and len(have) != len(_HEAD_MAPPINGS[head]):
            missing = [name_of(m) for m in _HEAD_MAPPINGS[head] if m.ours not in arrays]
            raise CheckpointMismatchError(
                f"{source}: has part of the {head} head but lacks {', '.join(missing)}")
        if have:
            present.append(head)
    return tuple(present)


def _log_unused(names: Iterable[str], used: Iterable[str], source: str) -> None:
    unused = sorted(n for n in set(names) - set(used) if not _IGNORED.search(n))
    if unused:
        logging.warning("%s: %d variable(s) not converted (not part of BERT's encoder or "
                        "pretraining heads): %s%s", source, len(unused),
                        ", ".join(unused[:10]), " ..." if len(unused) > 10 else "")


# --------------------------------------------------------------------------- TF1
def find_tf1_checkpoint(path: str) -> str:
    """A TF1 checkpoint prefix, or a directory holding one -> the prefix.

    >>> find_tf1_checkpoint("/nonexistent/bert_model.ckpt")
    Traceback (most recent call last):
    ...
    FileNotFoundError: /nonexistent/bert_model.ckpt: no TF1 checkpoint (expected a directory holding bert_model.ckpt.index, or a checkpoint prefix such as DIR/bert_model.ckpt)
    """
    if tf.io.gfile.isdir(path):
        candidate = os.path.join(path, TF1_CHECKPOINT_NAME)
        if tf.io.gfile.exists(candidate + ".index"):
            return candidate
        try:
            return model_dir_lib.resolve_checkpoint(path)
        except FileNotFoundError:
            pass
    elif tf.io.gfile.exists(path + ".index"):
        return path
    elif path.endswith(".index") and tf.io.gfile.exists(path):
        return path[: -len(".index")]
    raise FileNotFoundError(
        f"{path}: no TF1 checkpoint (expected a directory holding {TF1_CHECKPOINT_NAME}.index, "
        f"or a checkpoint prefix such as DIR/{TF1_CHECKPOINT_NAME})")


def tf1_config(config_file: str) -> BertConfig:
    """Reads an original bert_config.json, recording the GELU form the TF1 code computed.

    The original code's `gelu` is the tanh approximation, so `gelu` becomes
    `gelu_approximate` (DESIGN 2.1) unless the file was written by our export of an
    exact-GELU model (key `bert_tf_hidden_act`).
    """
    _require_file(config_file, "bert_config.json")
    config = BertConfig.from_file(config_file)
    with tf.io.gfile.GFile(config_file) as f:
        raw = json.load(f)
    if raw.get(EXACT_ACT_KEY):
        return config.replace(hidden_act=raw[EXACT_ACT_KEY])
    if config.hidden_act == "gelu":
        config = config.replace(hidden_act="gelu_approximate")
    return config


def _guess_tf1_lower_case(prefix: str) -> Optional[bool]:
    """The released checkpoints live in `uncased_L-..`/`cased_L-..` dirs; use that hint."""
    directory = os.path.basename(os.path.dirname(os.path.abspath(prefix))).lower()
    if re.search(r"(^|[_-])uncased", directory):
        return True
    if re.search(r"(^|[_-])cased", directory):
        return False
    return None


def read_tf1_checkpoint(path: str, config_file: Optional[str] = None,
                        vocab_file: Optional[str] = None,
                        do_lower_case: Optional[bool] = None) -> BertWeights:
    """Reads an original google-research/bert checkpoint (+ bert_config.json, vocab.txt).

    `path`: the checkpoint prefix (`DIR/bert_model.ckpt`) or its directory. The config
    and vocab default to `bert_config.json` / `vocab.txt` next to it; `do_lower_case`
    defaults to what the directory name says (`uncased_...`), else unknown.
    Optimizer slots (`adam_m`, `adam_v`) and `global_step` are ignored; the
    `cls/predictions/*` and `cls/seq_relationship/*` heads are read when present.
    """
    prefix = find_tf1_checkpoint(path)
    directory = os.path.dirname(prefix)
    config_file = config_file or os.path.join(directory, TF1_CONFIG_FILE)
    config = tf1_config(config_file)
    if vocab_file is None:
        candidate = os.path.join(directory, model_dir_lib.VOCAB_FILE)
        vocab_file = candidate if tf.io.gfile.exists(candidate) else None
        if vocab_file is None:
            logging.warning("%s: no vocab.txt next to the checkpoint; the output has no vocab "
                            "(pass --vocab_file)", directory)
    _check_vocab(vocab_file, config, config_file)
    model_dir_lib.check_checkpoint_files(prefix)  # a damaged or cut-short copy: say so
    reader = tf.train.load_checkpoint(prefix)
    names = list(reader.get_variable_to_shape_map())
    if "bert/embeddings/word_embeddings" not in names:
        raise CheckpointFormatError(
            f"{prefix}: not an original BERT checkpoint (no `bert/embeddings/word_embeddings`"
            f"; found e.g. {', '.join(sorted(names)[:3]) or 'nothing'}); for Hugging Face "
            f"weights use --source_format=huggingface, for our model dirs bert_tf")
    _check_layer_names(names, r"^bert/encoder/layer_(\d+)/", config, prefix)
    mappings = mappings_for(config.num_hidden_layers, HEADS)
    def get_tensor(name):
        try:
            return reader.get_tensor(name)
        except (tf.errors.OpError, IndexError) as e:  # a checksum mismatch, a short read
            raise model_dir_lib.damaged_checkpoint(prefix, e) from None

    arrays, sources = _collect(mappings, names, get_tensor, source=prefix)
    name_of = lambda m: m.tf1
    _check_complete(mappings_for(config.num_hidden_layers), arrays, name_of, prefix)
    heads = _heads_present(arrays, name_of, prefix)
    _log_unused(names, [m.tf1 for m in mappings], prefix)
    if do_lower_case is None:
        do_lower_case = _guess_tf1_lower_case(prefix)
        if do_lower_case is not None:
            logging.info("%s: do_lower_case=%s (from the directory name)", prefix, do_lower_case)
    return _checked(BertWeights(config, arrays, heads, vocab_file, do_lower_case, sources))


def _checked(weights: BertWeights) -> BertWeights:
    """Shape-checks a reader's result and warns when the casing is unknown."""
    check_shapes(weights)
    if weights.do_lower_case is None:
        logging.warning("the source does not say whether its vocab is cased; no "
                        "tokenizer_config.json is written (pass --do_lower_case / "
                        "--nodo_lower_case to record it)")
    return weights


def tf1_config_dict(config: BertConfig) -> dict:
    """Our config as an original bert_config.json dict, with `hidden_act` the original
    code computes the same way; raises for activations it does not have.

    An exact-GELU model (`gelu`) cannot be expressed: `gelu` is written (the original
    computes the tanh form from it: at most 4.7e-4 apart per activation, which on
    MiniLM-L6 moved sequence_output by up to 2e-2) together with
    `bert_tf_hidden_act: gelu`, and a warning is logged.

    >>> tf1_config_dict(BertConfig(hidden_act="gelu_approximate"))["hidden_act"]
    'gelu'
    """
    act = _TF1_ACTIVATIONS.get(config.hidden_act)
    if act is None:
        raise ConfigError(f"hidden_act={config.hidden_act!r} has no equivalent in the original "
                          f"TF1 code (it knows gelu [tanh form], relu, tanh)")
    values = {k: getattr(config, k) for k in TF1_CONFIG_KEYS}
    values["hidden_act"] = act
    if config.hidden_act == "gelu":
        logging.warning(
            "hidden_act=gelu (exact erf form) has no equivalent in the original TF1 code, "
            "whose `gelu` is the tanh approximation: the exported bert_config.json says `gelu`, "
            "so the original code will compute slightly different outputs (on MiniLM-L6 up "
            "to 2e-2 in sequence_output); Hugging Face and bert_tf read it back as exact")
        values[EXACT_ACT_KEY] = "gelu"
    if config.layer_norm_eps != 1e-12:
        logging.warning("layer_norm_eps=%g: the original TF1 code always uses 1e-12",
                        config.layer_norm_eps)
        values["layer_norm_eps"] = config.layer_norm_eps
    return values


def write_tf1_checkpoint(weights: BertWeights, output_dir: str) -> str:
    """Writes `output_dir/bert_model.ckpt` (original names) + bert_config.json + vocab.txt.

    The checkpoint holds only model weights, name-based, readable by
    `tf.train.load_checkpoint` and by the original code's `init_from_checkpoint`.
    Returns the checkpoint prefix.
    """
    config_values = tf1_config_dict(weights.config)
    check_shapes(weights)
    tf.io.gfile.makedirs(output_dir)
    mappings = mappings_for(weights.config.num_hidden_layers, weights.heads)
    names, tensors = [], []
    for m in mappings:
        if m.ours not in weights.arrays and m.ours in _POOLER:
            # init_from_checkpoint leaves variables the checkpoint lacks as initialized.
            logging.warning("no pooler to export: `%s` is left out", m.tf1)
            continue
        if m.ours not in weights.arrays:
            raise CheckpointMismatchError(f"no value for `{m.ours}` to export as `{m.tf1}`")
        value = weights.arrays[m.ours]
        names.append(m.tf1)
        tensors.append(tf.constant(value.T if m.tf1_transpose else value, tf.float32))
    prefix = os.path.join(output_dir, TF1_CHECKPOINT_NAME)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=tensors)
    # A `checkpoint` state file lets tools find the checkpoint from the directory alone.
    with tf.io.gfile.GFile(os.path.join(output_dir, "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "{TF1_CHECKPOINT_NAME}"\n'
                f'all_model_checkpoint_paths: "{TF1_CHECKPOINT_NAME}"\n')
    with tf.io.gfile.GFile(os.path.join(output_dir, TF1_CONFIG_FILE), "w") as f:
        f.write(json.dumps(config_values, indent=2, sort_keys=True) + "\n")
    if weights.vocab_file:
        tf.io.gfile.copy(weights.vocab_file, os.path.join(output_dir, model_dir_lib.VOCAB_FILE),
                         overwrite=True)
    return prefix


# --------------------------------------------------------------------------- Hugging Face
_HF_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def find_huggingface_weights(path: str) -> str:
    """A directory or weights file -> the weights file (safetensors preferred)."""
    if tf.io.gfile.isdir(path):
        for name in _HF_WEIGHT_FILES:
            candidate = os.path.join(path, name)
            if tf.io.gfile.exists(candidate):
                return candidate
        raise FileNotFoundError(f"{path}: no Hugging Face weights (expected one of "
                                f"{', '.join(_HF_WEIGHT_FILES)})")
    _require_file(path, "Hugging Face weights file")
    if not path.endswith((".safetensors", ".safetensors.index.json", ".bin")):
        raise CheckpointFormatError(f"{path}: unknown weights format (expected .safetensors, "
                                    f".safetensors.index.json or .bin)")
    return path


def _damaged_weights(path: str, error: Exception) -> Exception:
    first_line = (str(error).splitlines() or [type(error).__name__])[0][:200]
    size = os.path.getsize(path) if os.path.exists(path) else 0
    return model_dir_lib.DamagedCheckpointError(
        f"{path}: cannot be read ({first_line}); the file ({size:,} bytes) is cut short or "
        f"damaged (an interrupted download?): download or copy it again")


def _load_safetensors(path: str) -> Dict[str, np.ndarray]:
    from safetensors import SafetensorError, safe_open

    result = {}
    try:
        with safe_open(path, framework="np") as f:
            for key in f.keys():
                result[key] = f.get_tensor(key)
        return result
    except SafetensorError as e:  # a header that does not cover the file: cut short
        raise _damaged_weights(path, e) from None
    except (TypeError, ValueError) as e:  # numpy has no bfloat16
        if "bf16" not in str(e).lower() and "bfloat16" not in str(e).lower():
            raise CheckpointFormatError(f"{path}: cannot read safetensors: {e}") from None
    try:
        import torch  # noqa: F401
    except ImportError:
        raise CheckpointFormatError(f"{path}: holds bfloat16 weights, which need torch to "
                                    f"read; pip install torch") from None
    with safe_open(path, framework="pt") as f:
        return {key: f.get_tensor(key).float().numpy() for key in f.keys()}


def _load_torch_bin(path: str) -> Dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise CheckpointFormatError(f"{path}: reading pytorch_model.bin needs torch (pip "
                                    f"install torch), or convert from model.safetensors") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, ValueError) as e:  # e.g. a cut-short zip
        raise _damaged_weights(path, e) from None
    except Exception as e:  # noqa: BLE001 - pickle.UnpicklingError and kin
        if type(e).__name__ != "UnpicklingError":
            raise
        raise _damaged_weights(path, e) from None
    return {k: v.float().numpy() if v.is_floating_point() else v.numpy()
            for k, v in state.items()}


def load_huggingface_tensors(weights_file: str) -> Dict[str, np.ndarray]:
    """All tensors of a safetensors / sharded-safetensors index / pytorch_model.bin file."""
    if weights_file.endswith(".index.json"):
        with tf.io.gfile.GFile(weights_file) as f:
            shards = sorted(set(json.load(f).get("weight_map", {}).values()))
        result = {}
        for shard in shards:
            shard_path = _require_file(os.path.join(os.path.dirname(weights_file), shard),
                                       f"shard listed in {weights_file}")
            result.update(_load_safetensors(shard_path))
        return result
    if weights_file.endswith(".safetensors"):
        return _load_safetensors(weights_file)
    if weights_file.endswith(".bin"):
        return _load_torch_bin(weights_file)
    raise CheckpointFormatError(f"{weights_file}: unknown weights format (expected "
                                f".safetensors, .safetensors.index.json or .bin)")


def huggingface_config(config_file: str) -> BertConfig:
    """Reads a Hugging Face config.json, refusing models that are not plain BERT."""
    _require_file(config_file, "Hugging Face config.json")
    with tf.io.gfile.GFile(config_file) as f:
        try:
            raw = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{config_file}: cannot parse: {e}") from None
    model_type = raw.get("model_type", "bert")
    if model_type != "bert":
        raise ConfigError(f"{config_file}: model_type={model_type!r} is not BERT (its "
                          f"weights do not map onto BERT's)")
    position_type = raw.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ConfigError(f"{config_file}: position_embedding_type={position_type!r}; only "
                          f"BERT's absolute position embeddings are supported")
    return BertConfig.from_dict(raw, source=config_file)


def _huggingface_text_settings(directory: str) -> Tuple[Optional[bool], Optional[bool]]:
    """`(do_lower_case, strip_accents)` from tokenizer_config.json, else from tokenizer.json's
    BertNormalizer (`lowercase`, `strip_accents`); each file is read at most once."""
    def read(name):
        path = os.path.join(directory, name)
        if not tf.io.gfile.exists(path):
            return {}
        with tf.io.gfile.GFile(path) as f:
            return json.load(f)

    config = read("tokenizer_config.json")
    lower = bool(config["do_lower_case"]) if "do_lower_case" in config else None
    strip = config.get("strip_accents")
    if lower is None or strip is None:
        normalizer = read("tokenizer.json").get("normalizer") or {}
        if lower is None and "lowercase" in normalizer:
            lower = bool(normalizer["lowercase"])
        if strip is None:
            strip = normalizer.get("strip_accents")
    return lower, None if strip is None else bool(strip)


def read_huggingface(path: str, config_file: Optional[str] = None,
                     vocab_file: Optional[str] = None,
                     do_lower_case: Optional[bool] = None) -> BertWeights:
    """Reads Hugging Face BERT weights (BertModel, or BertFor* with the `bert.` prefix).

    `path`: a model directory or the weights file in it. Config, vocab and
    do_lower_case default to `config.json`, `vocab.txt` and `tokenizer_config.json`
    next to the weights. The `cls.predictions.*` and `cls.seq_relationship.*` heads are
    read when present; the MLM decoder matrix must be tied to the word embeddings.
    """
    weights_file = find_huggingface_weights(path)
    directory = os.path.dirname(weights_file)
    config_file = config_file or os.path.join(directory, "config.json")
    config = huggingface_config(config_file)
    if vocab_file is None:
        candidate = os.path.join(directory, model_dir_lib.VOCAB_FILE)
        vocab_file = candidate if tf.io.gfile.exists(candidate) else None
        if vocab_file is None:
            logging.warning("%s: no vocab.txt; the output has no vocab (pass --vocab_file)",
                            directory)
    _check_vocab(vocab_file, config, config_file)
    tensors = load_huggingface_tensors(weights_file)
    if "bert.embeddings.word_embeddings.weight" in tensors:
        prefix = "bert."
    elif "embeddings.word_embeddings.weight" in tensors:
        prefix = ""
    else:
        raise CheckpointFormatError(
            f"{weights_file}: not Hugging Face BERT weights (no "
            f"`bert.embeddings.word_embeddings.weight` or `embeddings.word_embeddings.weight`; "
            f"found e.g. {', '.join(sorted(tensors)[:3]) or 'nothing'})")
    _check_layer_names(tensors, r"^(?:bert\.)?encoder\.layer\.(\d+)\.", config, weights_file)
    mappings = mappings_for(config.num_hidden_layers, HEADS)
    arrays, sources = _collect(mappings, tensors, tensors.__getitem__, source=weights_file,
                               hf_prefix=prefix)
    name_of = lambda m: hf_name(m, prefix)
    _check_complete(mappings_for(config.num_hidden_layers), arrays, name_of, weights_file)
    heads = _heads_present(arrays, name_of, weights_file)
    used = [n for m in mappings for n in _hf_names(m, prefix)]
    decoder = tensors.get("cls.predictions.decoder.weight")
    if decoder is not None:
        used.append("cls.predictions.decoder.weight")
        if not np.array_equal(np.asarray(decoder, np.float32),
                              arrays["encoder/embeddings/word_embeddings"]):
            raise CheckpointMismatchError(
                f"{weights_file}: `cls.predictions.decoder.weight` differs from the word "
                f"embeddings; BERT's masked-LM output matrix is tied to them, so this model "
                f"cannot be represented")
    _log_unused(tensors, used, weights_file)
    recorded_lower, strip_accents = _huggingface_text_settings(directory)
    if do_lower_case is None:
        do_lower_case = recorded_lower
    return _checked(BertWeights(config, arrays, heads, vocab_file, do_lower_case, sources,
                                strip_accents=strip_accents))


def hf_name(m: WeightMapping, prefix: str) -> str:
    """A mapping's HF name in a model whose encoder is under `prefix` (`bert.` or ``).

    >>> hf_name(NEXT_SENTENCE_MAPPINGS[1], "bert."), hf_name(ENCODER_MAPPINGS[0], "bert.")
    ('cls.seq_relationship.bias', 'bert.embeddings.word_embeddings.weight')
    """
    return m.hf if m.hf.startswith(_HF_HEAD_PREFIXES) else prefix + m.hf


def _hf_names(m: WeightMapping, prefix: str) -> List[str]:
    """The names a mapping's weight may have in HF weights, preferred first."""
    base = hf_name(m, prefix)
    names = [base] + [base[: -len(new)] + old for new, old in _HF_ALTERNATIVES.items()
                      if "LayerNorm" in base and base.endswith(new)]
    if m.ours == "masked_lm/output_bias":
        names.append("cls.predictions.decoder.bias")
    return names


# --------------------------------------------------------------------------- bert_tf dirs
def read_model_dir(path: str) -> BertWeights:
    """Reads a bert_tf model dir: the encoder, plus the pretraining heads (pretrain) or
    the task head and its task_config.json (finetune) when it has them.
    """
    config = model_dir_lib.find_config(path)
    if config is None:
        raise FileNotFoundError(f"{model_dir_lib.model_dir_of(path)}: no "
                                f"{model_dir_lib.CONFIG_FILE}; is this a bert_tf model dir?")
    prefix = model_dir_lib.resolve_checkpoint(path)
    children = {name.split("/")[0] for name, _ in tf.train.list_variables(prefix)}
    if "encoder" not in children:
        raise CheckpointFormatError(f"{prefix}: not a bert_tf checkpoint (no `encoder` child; "
                                    f"found {', '.join(sorted(children))})")
    from bert_tf.models import BertPretrainer

    model = BertPretrainer(config)
    objects = {"encoder": model.encoder}
    # The tied word embeddings are saved once, possibly under masked_lm/; either way the
    # object graph restores them into the encoder.
    heads = tuple(h for h in HEADS if h in children)
    objects.update({h: getattr(model, h) for h in heads})
    model_dir_lib.restore(prefix, objects)
    text = model_dir_lib.read_tokenizer_config(path)
    weights = weights_from_model(model, model_dir_lib.find_vocab(path),
                                 bool(text["do_lower_case"]) if "do_lower_case" in text else None)
    weights.heads = heads
    weights.strip_accents = text.get("strip_accents")
    weights.arrays = {k: v for k, v in weights.arrays.items()
                      if k.split("/")[0] not in HEADS or k.split("/")[0] in heads}
    task_config = model_dir_lib.read_task_config(path)
    # Not `"task_head" in children`: a checkpoint lists each variable once, under its
    # first path, which for a fine-tuned head is often `optimizer/...`.
    if task_config is not None:
        weights.task_config = task_config
        weights.arrays.update(_read_task_head(prefix, config, task_config))
    weights.sources = {k: f"{prefix}: `{k}`" for k in weights.arrays}
    return weights


def _read_task_head(prefix: str, config: BertConfig, task_config: dict) -> Dict[str, np.ndarray]:
    """The `task_head/...` arrays of a fine-tuned checkpoint, via the task's own head."""
    from bert_tf.tasks import task_from_config

    head = task_from_config(task_config).build_head(config)
    if not head.built:
        head.build()
    model_dir_lib.restore(prefix, {"task_head": head})
    return {f"task_head/dense/{v}": np.asarray(getattr(head.dense, v).numpy(), np.float32)
            for v in ("kernel", "bias")}


def write_model_dir(weights: BertWeights, output_dir: str) -> str:
    """Writes a bert_tf model dir from `weights`; returns the checkpoint prefix."""
    _, objects = build_model(weights)
    return model_dir_lib.write_model_dir(output_dir, weights.config, objects,
                                         vocab_file=weights.vocab_file,
                                         do_lower_case=weights.do_lower_case,
                                         strip_accents=weights.strip_accents)


# --------------------------------------------------------------------------- HF export
HF_WEIGHTS_FILE = "model.safetensors"
HF_CONFIG_FILE = "config.json"
# Our activation name -> transformers' ACT2FN name for the same function.
_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new", "gelu_new": "gelu_new",
                   "gelu_pytorch_tanh": "gelu_pytorch_tanh", "relu": "relu", "tanh": "tanh",
                   "swish": "swish", "silu": "silu"}
_SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                   "cls_token": "[CLS]", "mask_token": "[MASK]"}


def huggingface_architecture(weights: BertWeights) -> str:
    """The transformers class the weights load into: the task's class for a fine-tuned
    model, BertForPreTraining with both pretraining heads, else BertModel.

    >>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
    ...                  num_attention_heads=2, intermediate_size=16)
    >>> huggingface_architecture(BertWeights(cfg, {}, HEADS))
    'BertForPreTraining'
    """
    if weights.task_config is not None:
        return huggingface_task_class(weights.task_config)
    heads = set(weights.heads)
    if heads == set(HEADS):
        return "BertForPreTraining"
    if heads == {"masked_lm"}:
        return "BertForMaskedLM"
    if heads == {"next_sentence"}:
        return "BertForNextSentencePrediction"
    return "BertModel"


def huggingface_task_class(task_config: dict) -> str:
    """The transformers class with the same head as the task in task_config.json.

    >>> huggingface_task_class({"task_name": "SST-2"}), huggingface_task_class({"task_name": "squad"})
    ('BertForSequenceClassification', 'BertForQuestionAnswering')
    """
    from bert_tf.tasks import get_task_class
    from bert_tf.tasks.glue import GlueTask
    from bert_tf.tasks.ner import Conll2003NerTask
    from bert_tf.tasks.squad import SquadTask
    from bert_tf.tasks.swag import SwagTask

    cls = get_task_class(task_config["task_name"])
    for base, name in ((GlueTask, "BertForSequenceClassification"),
                       (Conll2003NerTask, "BertForTokenClassification"),
                       (SquadTask, "BertForQuestionAnswering"),
                       (SwagTask, "BertForMultipleChoice")):
        if issubclass(cls, base):
            return name
    raise CheckpointFormatError(f"task {task_config['task_name']!r} has no Hugging Face "
                                f"class with the same head; export the encoder alone")


def huggingface_config_dict(weights: BertWeights, architecture: Optional[str] = None) -> dict:
    """config.json for transformers: our fields, `hidden_act` in its names
    (`gelu_approximate` -> `gelu_new`), the architecture and, for a task, its labels.

    >>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
    ...                  num_attention_heads=2, intermediate_size=16, hidden_act="gelu_approximate")
    >>> d = huggingface_config_dict(BertWeights(cfg, {}))
    >>> d["hidden_act"], d["architectures"], d["model_type"]
    ('gelu_new', ['BertModel'], 'bert')
    """
    config = weights.config
    architecture = architecture or huggingface_architecture(weights)
    values = config.to_dict()
    values["hidden_act"] = _HF_ACTIVATIONS[config.hidden_act]
    values.update(architectures=[architecture], model_type="bert",
                  position_embedding_type="absolute", pad_token_id=_pad_id(weights.vocab_file),
                  dtype="float32")
    task = weights.task_config
    if task is not None and architecture != "BertForQuestionAnswering":
        labels = task.get("label_list")
        if architecture == "BertForMultipleChoice" or not labels:
            labels = ["LABEL_0"]  # one score per example (choice / regression)
        values["id2label"] = {str(i): str(label) for i, label in enumerate(labels)}
        values["label2id"] = {str(label): i for i, label in enumerate(labels)}
        if architecture == "BertForSequenceClassification":
            values["problem_type"] = ("regression" if not task.get("label_list")
                                      else "single_label_classification")
    return values


def _pad_id(vocab_file: Optional[str]) -> int:
    """The id of [PAD] in the vocab (0 in BERT's), which HF's embeddings treat as padding."""
    if vocab_file:
        with tf.io.gfile.GFile(vocab_file) as f:
            for i, line in enumerate(f):
                if line.strip() == "[PAD]":
                    return i
    return 0


def write_huggingface(weights: BertWeights, output_dir: str) -> str:
    """Writes a Hugging Face model dir that transformers' `from_pretrained` loads.

    config.json, model.safetensors (names of `huggingface_architecture(weights)`: encoder
    under `bert.` when there are heads; the MLM decoder is tied to the word embeddings,
    so it is left out as `save_pretrained` leaves it out), vocab.txt and
    tokenizer_config.json (BertTokenizer, do_lower_case when known). Returns the
    weights file's path.
    """
    from safetensors.numpy import save_file

    check_shapes(weights)
    architecture = huggingface_architecture(weights)
    prefix = "" if architecture == "BertModel" else "bert."
    mappings = mappings_for(weights.config.num_hidden_layers, weights.heads)
    if weights.task_config is not None:
        mappings += list(TASK_HEAD_MAPPINGS[architecture])
    tensors = {}
    for m in mappings:
        if m.ours not in weights.arrays and m.ours in _POOLER:
            logging.warning("no pooler to export: `%s` is left out (transformers initializes "
                            "it randomly)", hf_name(m, prefix))
            continue
        if m.ours not in weights.arrays:
            raise CheckpointMismatchError(f"no value for `{m.ours}` to export as "
                                          f"`{hf_name(m, prefix)}`")
        value = np.asarray(weights.arrays[m.ours], np.float32)
        tensors[hf_name(m, prefix)] = np.ascontiguousarray(value.T if m.hf_transpose else value)
    tf.io.gfile.makedirs(output_dir)
    path = os.path.join(output_dir, HF_WEIGHTS_FILE)
    save_file(tensors, path, metadata={"format": "pt"})  # transformers refuses other formats
    with tf.io.gfile.GFile(os.path.join(output_dir, HF_CONFIG_FILE), "w") as f:
        f.write(json.dumps(huggingface_config_dict(weights, architecture), indent=2,
                           sort_keys=True) + "\n")
    tokenizer = {"tokenizer_class": "BertTokenizer",
                 "model_max_length": weights.config.max_position_embeddings,
                 "tokenize_chinese_chars": True, "strip_accents": weights.strip_accents,
                 **_SPECIAL_TOKENS}  # strip_accents None: follows do_lower_case, as ours
    if weights.do_lower_case is None:
        logging.warning("the source does not say whether its vocab is cased: "
                        "tokenizer_config.json leaves do_lower_case out, and transformers' "
                        "BertTokenizer then lower-cases")
    else:
        tokenizer["do_lower_case"] = bool(weights.do_lower_case)
    with tf.io.gfile.GFile(os.path.join(output_dir, model_dir_lib.TOKENIZER_CONFIG_FILE),
                           "w") as f:
        f.write(json.dumps(tokenizer, indent=2, sort_keys=True) + "\n")
    with tf.io.gfile.GFile(os.path.join(output_dir, "special_tokens_map.json"), "w") as f:
        f.write(json.dumps(_SPECIAL_TOKENS, indent=2, sort_keys=True) + "\n")
    if weights.vocab_file:
        tf.io.gfile.copy(weights.vocab_file, os.path.join(output_dir, model_dir_lib.VOCAB_FILE),
                         overwrite=True)
    else:
        logging.warning("no vocab to export: the output has no vocab.txt, so transformers "
                        "cannot build its tokenizer")
    return path


READERS = {"tf1": read_tf1_checkpoint, "huggingface": read_huggingface}
