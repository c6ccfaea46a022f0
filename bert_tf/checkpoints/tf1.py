"""Original google-research/bert (TF1) checkpoints: import and export.

    read_tf1_checkpoint(path)           `bert_model.ckpt` (+ bert_config.json, vocab.txt)
    write_tf1_checkpoint(weights, dir)  -> `bert_model.ckpt` + `bert_config.json` + `vocab.txt`

GELU (docs/contracts.md §1): the original TF1 code computed the tanh form although its configs say
`gelu`, so TF1 imports record `gelu_approximate`; Hugging Face's `gelu` is the exact form,
which is our `gelu`. The original code cannot compute the exact form: exporting an exact-GELU
model to TF1 writes `hidden_act: gelu` (the closest it has) and logs a warning.

Example (a round trip through the TF1 layout):

>>> import tempfile
>>> from bert_tf.checkpoints.weights import weights_from_model
>>> from bert_tf.model.pretrainer import BertPretrainer
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

import json
import os
import re
from typing import Optional

import tensorflow as tf
from absl import logging

from bert_tf.model import model_dir
from bert_tf.checkpoints.names import POOLER, mappings_for
from bert_tf.checkpoints.weights import (BertWeights, CheckpointFormatError, check_shapes,
                                         checked, checked_vocab, log_unused, read_mapped,
                                         require_file)
from bert_tf.model.config import BertConfig, ConfigError
from bert_tf.model.model_dir import CheckpointMismatchError

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
            return model_dir.resolve_checkpoint(path)
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
    `gelu_approximate` (docs/contracts.md §1) unless the file was written by our export of an
    exact-GELU model (key `bert_tf_hidden_act`).
    """
    require_file(config_file, "bert_config.json")
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
    vocab_file = checked_vocab(vocab_file, directory, config, config_file)
    model_dir.check_checkpoint_files(prefix)  # a damaged or cut-short copy: say so
    reader = tf.train.load_checkpoint(prefix)
    names = list(reader.get_variable_to_shape_map())
    if "bert/embeddings/word_embeddings" not in names:
        raise CheckpointFormatError(
            f"{prefix}: not an original BERT checkpoint (no `bert/embeddings/word_embeddings`"
            f"; found e.g. {', '.join(sorted(names)[:3]) or 'nothing'}); for Hugging Face "
            f"weights use --source_format=huggingface, for our model dirs bert_tf")

    def get_tensor(name):
        try:
            return reader.get_tensor(name)
        except (tf.errors.OpError, IndexError) as e:  # a checksum mismatch, a short read
            raise model_dir.damaged_checkpoint(prefix, e) from None

    arrays, sources, heads, mappings = read_mapped(
        names, get_tensor, config, source=prefix, layer_pattern=r"^bert/encoder/layer_(\d+)/")
    log_unused(names, [m.tf1 for m in mappings], prefix)
    if do_lower_case is None:
        do_lower_case = _guess_tf1_lower_case(prefix)
        if do_lower_case is not None:
            logging.info("%s: do_lower_case=%s (from the directory name)", prefix, do_lower_case)
    return checked(BertWeights(config, arrays, heads, vocab_file, do_lower_case, sources))



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
        if m.ours not in weights.arrays and m.ours in POOLER:
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
        tf.io.gfile.copy(weights.vocab_file, os.path.join(output_dir, model_dir.VOCAB_FILE),
                         overwrite=True)
    return prefix
