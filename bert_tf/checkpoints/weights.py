"""`BertWeights`: a model in memory, independent of any checkpoint format.

Every reader returns a `BertWeights` (config, numpy arrays keyed by *our* variable names,
vocab, casing); every writer takes one, so a conversion is `reader -> writer`:

    checkpoints.tf1.read_tf1_checkpoint / write_tf1_checkpoint   original google-research/bert
    checkpoints.huggingface.read_huggingface / write_huggingface  transformers' BertModel / BertFor*
    checkpoints.keras_hub.read_keras_hub / write_keras_hub        keras-hub presets
    read_model_dir (here)                                          a bert_tf model dir

A bert_tf model dir is written by `bert_tf.model.model_dir.write_model_dir` from the checkpoint
children `build_model` returns. The helpers the readers share (`collect`,
`check_complete`, ...) are here too.

>>> from bert_tf.model.encoder import BertEncoder
>>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
...                  num_attention_heads=2, intermediate_size=16)
>>> weights = weights_from_model(BertEncoder(cfg))
>>> model, objects = build_model(weights)
>>> sorted(objects), weights.heads
(['encoder'], ())
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.model import model_dir
from bert_tf.checkpoints.names import (HEAD_MAPPINGS, POOLER, WeightMapping,
                                       expected_shapes, hf_name, hf_names, mappings_for)
from bert_tf.core.constants import ENCODER, PRETRAINING_HEADS, TASK_HEAD
from bert_tf.core.errors import BertTfError
from bert_tf.model.config import BertConfig
from bert_tf.model.model_dir import CheckpointMismatchError
from bert_tf.model.pretrainer import BertPretrainer
from bert_tf.tasks import task_from_config

# Source variables that are not model weights: optimizer slots and step counters (TF1),
# buffers (Hugging Face).
_IGNORED = re.compile(r"(/adam_[mv]$|/Adam(_1)?$|/Momentum$|^global_step$|"
                      r"(^|\.)position_ids$|^_CHECKPOINTABLE_OBJECT_GRAPH$)")


class CheckpointFormatError(BertTfError, ValueError):
    """A source that is missing, or is not a BERT checkpoint of the format asked for."""


@dataclasses.dataclass
class BertWeights:
    """A model in memory, independent of any checkpoint format.

    `arrays`: our variable name (as in `WeightMapping.ours`) -> float32 numpy array.
    `sources`: our name -> where the value came from (`file:variable`), for error messages.
    `heads`: which of `PRETRAINING_HEADS` the arrays include.
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

    >>> from bert_tf.model.encoder import BertEncoder
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
    heads = tuple(h for h in PRETRAINING_HEADS if hasattr(model, h))
    arrays = {name: np.asarray(v.numpy(), np.float32)
              for name, v in model_variables(model).items()}
    return BertWeights(encoder.config, arrays, heads, vocab_file, do_lower_case)


def build_model(weights: BertWeights):
    """A BertPretrainer holding `weights`, and the checkpoint children to save.

    Returns `(model, objects)`; `objects` has `encoder` plus the heads the weights have.
    Refuses (CheckpointMismatchError) an array whose shape does not fit the config,
    naming the source variable and both shapes.
    """
    model = BertPretrainer(weights.config)
    for name, variable in model_variables(model).items():
        head = name.split("/")[0]
        if head in PRETRAINING_HEADS and head not in weights.heads:
            continue
        if name not in weights.arrays:
            if name in POOLER:
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
    objects = {ENCODER: model.encoder}
    objects.update({head: getattr(model, head) for head in weights.heads})
    if weights.task_config is not None:
        objects[TASK_HEAD] = build_task_head(weights)
    return model, objects


def build_task_head(weights: BertWeights):
    """The task head `weights.task_config` names (the task's own `build_head`), holding the
    `task_head/dense/*` arrays; CheckpointMismatchError when they do not fit it."""
    head = task_from_config(weights.task_config).build_head(weights.config)
    if not head.built:
        head.build()
    for part in ("kernel", "bias"):
        name, variable = f"task_head/dense/{part}", getattr(head.dense, part)
        if name not in weights.arrays:
            raise CheckpointMismatchError(f"no value for `{name}` in the source")
        value = weights.arrays[name]
        if tuple(value.shape) != tuple(variable.shape):
            raise CheckpointMismatchError(
                f"{weights.source_of(name)}: shape {list(value.shape)} does not fit the "
                f"{weights.task_config.get('task_name')} head, which needs "
                f"{list(variable.shape)} for `{name}`")
        variable.assign(value)
    return head


# --------------------------------------------------------------------------- shared by the readers
def require_file(path: str, what: str) -> str:
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{path}: {what} not found")
    return path


def _vocab_size_of(vocab_file: str) -> int:
    with tf.io.gfile.GFile(vocab_file, "r") as f:
        return sum(1 for line in f if line.strip())


def checked_vocab(vocab_file: Optional[str], directory: str, config: BertConfig,
                  config_source: str) -> Optional[str]:
    """`vocab_file`, else the vocab.txt in the source's `directory` (None, with a warning,
    when there is none), checked against the config (`check_vocab`)."""
    if vocab_file is None:
        candidate = os.path.join(directory, model_dir.VOCAB_FILE)
        vocab_file = candidate if tf.io.gfile.exists(candidate) else None
        if vocab_file is None:
            logging.warning("%s: no vocab.txt next to the weights; the output has no vocab "
                            "(pass --vocab_file)", directory)
    check_vocab(vocab_file, config, config_source)
    return vocab_file


def check_vocab(vocab_file: Optional[str], config: BertConfig, config_source: str) -> None:
    """A vocab with more tokens than embedding rows would produce out-of-range ids."""
    if not vocab_file:
        return
    require_file(vocab_file, "vocab file")
    size = _vocab_size_of(vocab_file)
    if size > config.vocab_size:
        raise CheckpointMismatchError(
            f"{vocab_file}: has {size} tokens but {config_source} says vocab_size="
            f"{config.vocab_size}; pass the vocab that belongs to this checkpoint")
    if size < config.vocab_size:
        logging.info("%s: %d tokens for vocab_size=%d (the extra embedding rows are unused)",
                     vocab_file, size, config.vocab_size)


def check_layer_names(names: Iterable[str], pattern: str, config: BertConfig,
                       source: str) -> None:
    """Refuses a source with more layers than the config asks for."""
    layers = {int(m.group(1)) for n in names for m in [re.search(pattern, n)] if m}
    if layers and max(layers) + 1 != config.num_hidden_layers:
        raise CheckpointMismatchError(
            f"{source}: holds {max(layers) + 1} encoder layers but the config says "
            f"num_hidden_layers={config.num_hidden_layers}; use the config of this checkpoint")


def collect(mappings: List[WeightMapping], names: Iterable[str], get, *, source: str,
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
            candidates, transpose = hf_names(m, hf_prefix), m.hf_transpose
        found = next((c for c in candidates if c in names), None)
        if found is None:
            continue
        value = np.asarray(get(found))
        if value.dtype != np.float32:
            value = value.astype(np.float32)
        arrays[m.ours] = value.T if transpose else value
        sources[m.ours] = f"{source}: variable `{found}`" + (" (transposed)" if transpose else "")
    return arrays, sources


def read_mapped(names: Iterable[str], get, config: BertConfig, *, source: str,
                layer_pattern: str, hf_prefix: Optional[str] = None):
    """What a source holds of `config`'s encoder and pretraining heads, by the TF1 names
    (or the HF names with `hf_prefix`): `(arrays, sources, heads, mappings)`.

    Refuses a source with another number of layers (`layer_pattern` captures the layer
    index of a name), missing encoder variables, or part of a head.
    """
    names = list(names)
    check_layer_names(names, layer_pattern, config, source)
    mappings = mappings_for(config.num_hidden_layers, PRETRAINING_HEADS)
    arrays, sources = collect(mappings, names, get, source=source, hf_prefix=hf_prefix)
    if hf_prefix is None:
        name_of = lambda m: m.tf1  # noqa: E731
    else:
        name_of = lambda m: hf_name(m, hf_prefix)  # noqa: E731
    check_complete(mappings_for(config.num_hidden_layers), arrays, name_of, source)
    return arrays, sources, heads_present(arrays, name_of, source), mappings


def check_complete(mappings: List[WeightMapping], arrays: Mapping[str, np.ndarray],
                    name_of, source: str) -> None:
    """Every encoder variable must be there; the pooler may be absent (BertForMaskedLM
    has none) but not half there."""
    pooler = [m for m in mappings if m.ours in POOLER]
    optional = POOLER if not any(m.ours in arrays for m in pooler) else ()
    missing = [name_of(m) for m in mappings if m.ours not in arrays and m.ours not in optional]
    if missing:
        raise CheckpointMismatchError(
            f"{source}: lacks {len(missing)} variable(s) the encoder needs, e.g. "
            f"{', '.join(missing[:3])}")


def heads_present(arrays: Mapping[str, np.ndarray], name_of, source: str) -> Tuple[str, ...]:
    """Heads whose variables are all present; a partly present head is refused."""
    present = []
    for head in PRETRAINING_HEADS:
        have = [m for m in HEAD_MAPPINGS[head] if m.ours in arrays]
        if have and len(have) != len(HEAD_MAPPINGS[head]):
            missing = [name_of(m) for m in HEAD_MAPPINGS[head] if m.ours not in arrays]
            raise CheckpointMismatchError(
                f"{source}: has part of the {head} head but lacks {', '.join(missing)}")
        if have:
            present.append(head)
    return tuple(present)


def log_unused(names: Iterable[str], used: Iterable[str], source: str) -> None:
    unused = sorted(n for n in set(names) - set(used) if not _IGNORED.search(n))
    if unused:
        logging.warning("%s: %d variable(s) not converted (not part of BERT's encoder or "
                        "pretraining heads): %s%s", source, len(unused),
                        ", ".join(unused[:10]), " ..." if len(unused) > 10 else "")


def checked(weights: BertWeights) -> BertWeights:
    """Shape-checks a reader's result and warns when the casing is unknown."""
    check_shapes(weights)
    if weights.do_lower_case is None:
        logging.warning("the source does not say whether its vocab is cased; no "
                        "tokenizer_config.json is written (pass --do_lower_case / "
                        "--nodo_lower_case to record it)")
    return weights


# --------------------------------------------------------------------------- bert_tf model dirs
def read_model_dir(path: str) -> BertWeights:
    """Reads a bert_tf model dir: the encoder, plus the pretraining heads (pretrain) or
    the task head and its task_config.json (finetune) when it has them.

    The dir is read through `model_dir.resolve` (config, vocab, task config, heads; the
    checkpoint index once, one restore); the casing is the one the dir records (None when
    it records none).
    """
    resolved = model_dir.resolve(path)
    if resolved.config is None:
        raise model_dir.ModelDirError(f"{model_dir.model_dir_of(path)}: no "
                                      f"{model_dir.CONFIG_FILE}; is this a bert_tf model dir?")
    prefix = resolved.checkpoint
    children = {name.split("/")[0] for name in resolved.reader.get_variable_to_shape_map()}
    if ENCODER not in children:
        raise CheckpointFormatError(f"{prefix}: not a bert_tf checkpoint (no `encoder` child; "
                                    f"found {', '.join(sorted(children))})")

    config, task_config = resolved.config, resolved.task_config
    model = BertPretrainer(config)
    objects = {ENCODER: model.encoder}
    # The tied word embeddings are saved once, possibly under masked_lm/; either way the
    # object graph restores them into the encoder.
    heads = tuple(h for h in resolved.heads if h in PRETRAINING_HEADS)
    objects.update({h: getattr(model, h) for h in heads})
    task_head = None
    if task_config is not None:  # a fine-tuned dir (`resolved.heads` has task_head)

        task_head = task_from_config(task_config).build_head(config)
        if not task_head.built:
            task_head.build()
        objects[TASK_HEAD] = task_head
    model_dir.restore(resolved, objects)
    text = model_dir.read_tokenizer_config(path)
    weights = weights_from_model(model, resolved.vocab_file,
                                 bool(text["do_lower_case"]) if "do_lower_case" in text else None)
    weights.heads = heads
    weights.strip_accents = text.get("strip_accents")
    weights.arrays = {k: v for k, v in weights.arrays.items()
                      if k.split("/")[0] not in PRETRAINING_HEADS or k.split("/")[0] in heads}
    if task_head is not None:
        weights.task_config = task_config
        weights.arrays.update({f"task_head/dense/{v}": np.asarray(
            getattr(task_head.dense, v).numpy(), np.float32) for v in ("kernel", "bias")})
    weights.sources = {k: f"{prefix}: `{k}`" for k in weights.arrays}
    return weights
