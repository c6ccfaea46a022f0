"""keras-hub BERT presets: import and export.

    read_keras_hub(dir)            a preset directory keras-hub saved (`save_to_preset`):
                                   BertBackbone, or BertTextClassifier with its head
    write_keras_hub(weights, dir)  -> a preset `keras_hub.models.BertBackbone.from_preset`
                                   loads (and `BertTextClassifier.from_preset`, for a
                                   fine-tuned classification or regression model), with
                                   the tokenizer (vocabulary, casing) when there is a vocab

The variables are keras-hub's own (`WeightMapping.keras_hub` names their `path`); both
directions go through keras-hub itself (`pip install keras-hub`), so what is read or
written is what keras-hub reads and writes. keras-hub's BertBackbone computes GELU's tanh
form (our `gelu_approximate`) with LayerNorm epsilon 1e-12: a model with exact GELU is
written with a warning (its outputs there differ slightly), other activations are refused.
keras-hub has no label names: the writer leaves our `task_config.json` in the preset (keras-hub
ignores it) and the reader takes the task and labels from it when it is there.

>>> import tempfile
>>> from bert_tf.checkpoints.weights import weights_from_model
>>> from bert_tf.model.encoder import BertEncoder
>>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
...                  intermediate_size=16, hidden_act="gelu_approximate")
>>> d = tempfile.mkdtemp()
>>> _ = write_keras_hub(weights_from_model(BertEncoder(cfg)), d)
>>> read_keras_hub(d).config == cfg
True
"""

from __future__ import annotations

import json
import os
from typing import Dict, Optional

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import tasks
from bert_tf.checkpoints.huggingface import huggingface_task_config, split_task_name
from bert_tf.model import model_dir
from bert_tf.checkpoints.names import POOLER, TASK_HEAD_MAPPINGS, expected_shapes, mappings_for
from bert_tf.checkpoints.weights import (BertWeights, CheckpointFormatError, check_shapes,
                                         check_vocab, checked, require_file)
from bert_tf.core.errors import UsageError
from bert_tf.model.config import BertConfig, ConfigError
from bert_tf.model.model_dir import CheckpointMismatchError
from bert_tf.tasks import make_task

CONFIG_FILE = "config.json"            # the backbone's Keras config
TASK_FILE = "task.json"                # a task model's Keras config (BertTextClassifier)
TOKENIZER_FILE = "tokenizer.json"      # the tokenizer's Keras config (lowercase, ...)
VOCAB_PATH = os.path.join("assets", "tokenizer", "vocabulary.txt")
WEIGHTS_FILE = "model.weights.h5"
CLASSIFIER = "BertTextClassifier"
_HEAD_MAPPINGS = TASK_HEAD_MAPPINGS["BertForSequenceClassification"]
# Activations keras-hub's BertBackbone computes exactly (it always uses the tanh form).
_TANH_GELU = ("gelu_approximate", "gelu_new", "gelu_pytorch_tanh")


def _keras_hub():
    try:
        import keras_hub  # optional (requirements-dev.txt)
    except ImportError:
        raise CheckpointFormatError("keras-hub presets need the keras-hub package: pip "
                                    "install keras-hub") from None
    return keras_hub


def _read_json(path: str, what: str) -> dict:
    require_file(path, what)
    with tf.io.gfile.GFile(path) as f:
        try:
            values = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: cannot parse: {e}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a JSON object ({what})")
    return values


def keras_hub_config(path: str) -> BertConfig:
    """The BertConfig of a preset's BertBackbone config.json (keras-hub's fixed choices:
    tanh GELU, LayerNorm epsilon 1e-12, one dropout rate for both dropouts)."""
    raw = _read_json(path, "keras-hub preset config.json")
    if raw.get("class_name") != "BertBackbone":
        raise CheckpointFormatError(f"{path}: class_name={raw.get('class_name')!r}; only "
                                    f"keras-hub's BertBackbone maps onto BERT")
    values = raw.get("config") or {}
    try:
        return BertConfig(
            vocab_size=int(values["vocabulary_size"]), hidden_size=int(values["hidden_dim"]),
            num_hidden_layers=int(values["num_layers"]),
            num_attention_heads=int(values["num_heads"]),
            intermediate_size=int(values["intermediate_dim"]), hidden_act="gelu_approximate",
            hidden_dropout_prob=float(values.get("dropout", 0.1)),
            attention_probs_dropout_prob=float(values.get("dropout", 0.1)),
            max_position_embeddings=int(values.get("max_sequence_length", 512)),
            type_vocab_size=int(values.get("num_segments", 2)), layer_norm_eps=1e-12)
    except KeyError as e:
        raise ConfigError(f"{path}: BertBackbone config lacks {e}") from None


def _text_settings(directory: str):
    """(vocab file or None, do_lower_case, strip_accents) from the preset's tokenizer."""
    path = os.path.join(directory, TOKENIZER_FILE)
    if not tf.io.gfile.exists(path):
        return None, None, None
    values = _read_json(path, "keras-hub tokenizer.json").get("config") or {}
    vocab = os.path.join(directory, VOCAB_PATH)
    lower = values.get("lowercase")
    strip = values.get("strip_accents")
    return (vocab if tf.io.gfile.exists(vocab) else None,
            None if lower is None else bool(lower), None if strip is None else bool(strip))


def read_keras_hub(path: str, config_file: Optional[str] = None,
                   vocab_file: Optional[str] = None, do_lower_case: Optional[bool] = None,
                   task_name: Optional[str] = None) -> BertWeights:
    """Reads a keras-hub preset directory: its BertBackbone, and a BertTextClassifier's
    head when `task.json` names one (then with a task config: the task from the preset's
    `task_config.json` when we wrote it, else `task_name`; a classifier with one output
    and no name is STS-B's regression). Vocab and casing come from the preset's
    tokenizer (`vocab_file` / `do_lower_case` override them)."""
    if config_file:
        raise UsageError("--bert_config_file does not apply to keras_hub: a preset's "
                         "config.json is its model")
    if not tf.io.gfile.isdir(path):
        raise FileNotFoundError(f"{path}: not a keras-hub preset directory")
    config = keras_hub_config(os.path.join(path, CONFIG_FILE))
    require_file(os.path.join(path, WEIGHTS_FILE), "keras-hub preset weights")
    found_vocab, lower, strip = _text_settings(path)
    vocab_file = vocab_file or found_vocab
    if vocab_file is None:
        logging.warning("%s: the preset has no tokenizer; the output has no vocab (pass "
                        "--vocab_file)", path)
    check_vocab(vocab_file, config, os.path.join(path, CONFIG_FILE))
    task = _read_json(os.path.join(path, TASK_FILE), "keras-hub task.json") \
        if tf.io.gfile.exists(os.path.join(path, TASK_FILE)) else None
    classifier = task is not None and task.get("class_name") == CLASSIFIER
    if task is not None and not classifier:
        logging.warning("%s: task %s has no bert_tf task; only its backbone is read", path,
                        task.get("class_name"))
    if task_name and not classifier:
        raise CheckpointFormatError(f"{path}: --task_name={task_name} but the preset holds "
                                    f"no {CLASSIFIER} head; convert without --task_name")
    keras_hub = _keras_hub()
    if classifier:
        activation = (task.get("config") or {}).get("activation")
        if activation not in (None, "linear"):
            raise CheckpointFormatError(f"{path}/{TASK_FILE}: activation={activation!r}; "
                                        f"only a linear (logits) head imports")
        model = keras_hub.models.BertTextClassifier.from_preset(path, preprocessor=None)
    else:
        model = keras_hub.models.BertBackbone.from_preset(path)
    variables = {v.path: np.asarray(v.numpy(), np.float32) for v in model.weights}
    mappings = mappings_for(config.num_hidden_layers) + (list(_HEAD_MAPPINGS) if classifier
                                                         else [])
    shapes = expected_shapes(config, heads=())
    arrays, sources = {}, {}
    for m in mappings:
        if m.keras_hub not in variables:
            raise CheckpointMismatchError(f"{path}: lacks `{m.keras_hub}`, which `{m.ours}` "
                                          f"needs; is this a keras-hub BERT preset?")
        value = variables[m.keras_hub]
        arrays[m.ours] = value.reshape(shapes[m.ours]) if m.ours in shapes else value
        sources[m.ours] = f"{path}: variable `{m.keras_hub}`"
    task_config = None
    if classifier:
        task_config = _classifier_task_config(path, arrays["task_head/dense/kernel"].shape[-1],
                                              task_name, config)
    if do_lower_case is None:
        do_lower_case = lower
    return checked(BertWeights(config, arrays, (), vocab_file, do_lower_case, sources,
                               strip_accents=strip, task_config=task_config))


def _classifier_task_config(path: str, num_classes: int, task_name: Optional[str],
                            config: BertConfig) -> dict:
    """The task of a preset's BertTextClassifier head (keras-hub records no labels)."""
    recorded = model_dir.read_task_config(path)  # written by write_keras_hub
    if recorded is not None and not task_name:
        task_name = recorded.get("task_name")
    raw = {"problem_type": "regression" if num_classes == 1 else "single_label_classification"}
    if task_name:
        default = tasks.make_task(split_task_name(task_name)[0]).label_list
        labels = (recorded or {}).get("label_list") or (
            default if default and len(default) == num_classes
            else [str(i) for i in range(num_classes)])
        raw["id2label"] = {str(i): label for i, label in enumerate(labels)}
    elif num_classes != 1:
        raise UsageError(f"{path}: a {CLASSIFIER} with {num_classes} classes; pass "
                         f"--task_name to say which task's inputs it takes (a GLUE task: "
                         f"cola, sst-2 take one text; mrpc, qqp, mnli, qnli, rte, wnli a "
                         f"pair)")
    task_config = huggingface_task_config(raw, "BertForSequenceClassification", num_classes,
                                          task_name, config,
                                          source=os.path.join(path, TASK_FILE))
    length = (recorded or {}).get("max_seq_length") or _preprocessor_length(path)
    if length:  # the length the classifier was trained and served with
        task_config["max_seq_length"] = min(int(length), config.max_position_embeddings)
    return task_config


def _preprocessor_length(path: str) -> Optional[int]:
    """The `sequence_length` of a preset's preprocessor.json (None when absent)."""
    file = os.path.join(path, "preprocessor.json")
    if not tf.io.gfile.exists(file):
        return None
    return (_read_json(file, "keras-hub preprocessor.json").get("config") or {}).get(
        "sequence_length")


# --------------------------------------------------------------------------- export
def _check_exportable(config: BertConfig) -> None:
    if config.hidden_act == "gelu":
        logging.warning("the model uses exact GELU; keras-hub's BertBackbone computes the "
                        "tanh form, so its outputs there differ slightly from ours")
    elif config.hidden_act not in _TANH_GELU:
        raise CheckpointFormatError(f"hidden_act={config.hidden_act!r}: keras-hub's "
                                    f"BertBackbone always uses GELU, so this model cannot "
                                    f"be written as a keras-hub preset")
    if abs(config.layer_norm_eps - 1e-12) > 1e-15:
        logging.warning("layer_norm_eps=%g: keras-hub's BertBackbone uses 1e-12, so its "
                        "outputs differ slightly from ours", config.layer_norm_eps)
    if config.attention_probs_dropout_prob != config.hidden_dropout_prob:
        logging.warning("keras-hub has one dropout rate: the preset trains with %g (the "
                        "hidden dropout) in attention too", config.hidden_dropout_prob)


def _is_classifier(task_config: Optional[dict]) -> bool:
    """A GLUE task (classification or regression): BertTextClassifier's head, the one
    transformers' BertForSequenceClassification has."""
    if task_config is None:
        return False

    return make_task(task_config["task_name"]).huggingface_class == \
        "BertForSequenceClassification"


def write_keras_hub(weights: BertWeights, output_dir: str) -> str:
    """Writes a keras-hub preset of `weights`: the BertBackbone, the tokenizer (when there
    is a vocab) and, for a fine-tuned GLUE-style model, the BertTextClassifier with its
    head and preprocessor (plus our task_config.json). Returns the weights file's path."""
    keras_hub = _keras_hub()
    check_shapes(weights)
    config = weights.config
    _check_exportable(config)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size, dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size, dtype="float32")
    classifier = _is_classifier(weights.task_config)
    if weights.task_config is not None and not classifier:
        logging.warning("the %s task head has no keras-hub class; only the encoder is "
                        "exported", weights.task_config.get("task_name"))
    tokenizer = _tokenizer(keras_hub, weights)
    model = backbone
    if classifier:
        num_classes = weights.arrays["task_head/dense/kernel"].shape[-1]
        preprocessor = None
        if tokenizer is not None:
            preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
                tokenizer, sequence_length=int(weights.task_config.get("max_seq_length", 128)))
        model = keras_hub.models.BertTextClassifier(
            backbone, num_classes=int(num_classes), preprocessor=preprocessor,
            dropout=config.hidden_dropout_prob)
    variables: Dict[str, tf.Variable] = {v.path: v for v in model.weights}
    mappings = mappings_for(config.num_hidden_layers) + (list(_HEAD_MAPPINGS) if classifier
                                                         else [])
    for m in mappings:
        if m.ours not in weights.arrays:
            if m.ours in POOLER:
                logging.warning("no pooler to export: `%s` keeps keras-hub's random "
                                "initialization", m.keras_hub)
                continue
            raise CheckpointMismatchError(f"no value for `{m.ours}` to export as "
                                          f"`{m.keras_hub}`")
        variable = variables[m.keras_hub]
        variable.assign(np.asarray(weights.arrays[m.ours], np.float32).reshape(variable.shape))
    tf.io.gfile.makedirs(output_dir)
    model.save_to_preset(output_dir)
    if tokenizer is not None and not classifier:
        tokenizer.save_to_preset(output_dir)
    if classifier:
        model_dir.write_task_config(output_dir, weights.task_config)
    return os.path.join(output_dir, WEIGHTS_FILE)


def _tokenizer(keras_hub, weights: BertWeights):
    """keras-hub's BertTokenizer over the vocab, cased as ours (None without a vocab)."""
    if not weights.vocab_file:
        logging.warning("no vocab to export: the preset has no tokenizer")
        return None
    lower = True if weights.do_lower_case is None else bool(weights.do_lower_case)
    if weights.do_lower_case is None:
        logging.warning("the source does not say whether its vocab is cased: the preset's "
                        "tokenizer lower-cases")
    strip = lower if weights.strip_accents is None else bool(weights.strip_accents)
    try:
        return keras_hub.models.BertTokenizer(vocabulary=weights.vocab_file, lowercase=lower,
                                              strip_accents=strip)
    except ValueError as e:  # e.g. a vocab without [CLS] / [SEP] / [PAD] / [MASK]
        raise CheckpointFormatError(f"{weights.vocab_file}: keras-hub's BertTokenizer "
                                    f"refuses it ({str(e).splitlines()[0]})") from None
