"""BertConfig: the model hyperparameters, under the original `bert_config.json` names.

One config loads from any of the three places BERT configs live:

* an `official_configs/models/*.yaml` file of this project,
* an original google-research/bert `bert_config.json`,
* a Hugging Face `config.json` (`model_type: bert`).

Keys that do not describe the encoder (`directionality`, `pooler_*`, `architectures`,
...) are ignored, as docs/contracts.md §1 requires.

Example:

>>> cfg = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
...                  intermediate_size=512)
>>> cfg.head_size
64
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from typing import Any, Mapping

import yaml

from bert_tf.core.errors import BertTfError

# `gelu` is the exact erf form (Hugging Face's meaning); `gelu_approximate` (alias
# `gelu_new`) is the tanh form the original TF1 code computed.
SUPPORTED_ACTIVATIONS = ("gelu", "gelu_approximate", "gelu_new", "gelu_pytorch_tanh",
                         "relu", "tanh", "swish", "silu")


class ConfigError(BertTfError, ValueError):
    """A config file or value that cannot describe a BERT model."""


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Hyperparameters of a BERT encoder (names as in the original bert_config.json)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12

    def __post_init__(self):
        self.validate()

    # ------------------------------------------------------------------ checks
    def validate(self, source: str = "config") -> None:
        """Raises ConfigError naming the field when a value cannot work."""
        positive = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "max_position_embeddings", "type_vocab_size")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{source}: `{name}` must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"{source}: `hidden_size` ({self.hidden_size}) must be a multiple of "
                f"`num_attention_heads` ({self.num_attention_heads})")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ConfigError(f"{source}: `{name}` must be in [0, 1), got {value!r}")
        for name in ("initializer_range", "layer_norm_eps"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{source}: `{name}` must be a positive number, got {value!r}")
        if self.hidden_act not in SUPPORTED_ACTIVATIONS:
            raise ConfigError(f"{source}: `hidden_act` {self.hidden_act!r} is not one of "
                              f"{', '.join(SUPPORTED_ACTIVATIONS)}")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    # ----------------------------------------------------------------- loading
    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "BertConfig":
        """Builds a config from a dict, ignoring keys that are not encoder fields.

        A Hugging Face dict is recognised by `model_type`/`architectures`; its
        `hidden_act: gelu` already means the exact form, as ours does.
        """
        if not isinstance(values, Mapping):
            raise ConfigError(f"{source}: expected a mapping of config fields, got "
                              f"{type(values).__name__}")
        values = dict(values)
        # Our YAML files may nest the fields under `model:` (experiment configs do).
        if "model" in values and isinstance(values["model"], Mapping):
            values = dict(values["model"])
        names = [f.name for f in dataclasses.fields(cls)]
        kwargs = {k: v for k, v in values.items() if k in names}
        for key in values:
            # Other keys are ignored (multilingual and HF configs carry extra ones), but a
            # near miss of a field that is absent is a typo that would silently change the
            # model (`vocab_szie` -> the 30522 default).
            near = difflib.get_close_matches(str(key), names, n=1, cutoff=0.85)
            if key not in names and near and near[0] not in values:
                raise ConfigError(f"{source}: unknown field `{key}`: did you mean `{near[0]}`? "
                                  f"(fields are named as in the original bert_config.json)")
        embedding_type = values.get("position_embedding_type", "absolute")
        if embedding_type not in (None, "absolute"):
            raise ConfigError(f"{source}: position_embedding_type={embedding_type!r} is not "
                              f"supported: BERT uses absolute position embeddings")
        missing = [n for n in ("hidden_size", "num_hidden_layers", "num_attention_heads")
                   if n not in kwargs]
        if missing:
            raise ConfigError(f"{source}: not a BERT config, missing {', '.join(missing)}")
        if "intermediate_size" not in kwargs:
            kwargs["intermediate_size"] = 4 * kwargs["hidden_size"]
        if kwargs.get("hidden_act") == "gelu_new":
            kwargs["hidden_act"] = "gelu_approximate"
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob",
                     "initializer_range", "layer_norm_eps"):
            value = kwargs.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                kwargs[name] = float(value)
            elif isinstance(value, str):
                # YAML 1.1 reads `1e-12` (no dot) as a string; accept it as the number it is.
                try:
                    kwargs[name] = float(value)
                except ValueError:
                    pass  # validate() reports it with the field name
        try:
            return cls(**kwargs)
        except ConfigError as e:
            raise ConfigError(str(e).replace("config:", f"{source}:", 1)) from None

    @classmethod
    def from_file(cls, path: str) -> "BertConfig":
        """Loads a YAML (ours) or JSON (original or Hugging Face) config file.

        `path` may also be a directory holding `bert_config.json` or `config.json`
        (a directory written by convert_checkpoint, pretrain or finetune).
        """
        import tensorflow as tf  # gs:// too; BertConfig needs no TensorFlow (9 s)

        if tf.io.gfile.isdir(path):
            for name in ("bert_config.json", "config.json", "config.yaml"):
                candidate = os.path.join(path, name)
                if tf.io.gfile.exists(candidate):
                    return cls.from_file(candidate)
            raise ConfigError(f"{path}: directory holds no bert_config.json or config.json")
        if not tf.io.gfile.exists(path):
            raise ConfigError(f"{path}: config file not found")
        with tf.io.gfile.GFile(path, "r") as f:
            text = f.read()
        try:
            if path.endswith((".yaml", ".yml")):
                values = yaml.safe_load(text)
            else:
                values = json.loads(text)
        except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: cannot parse config: {e}") from None
        return cls.from_dict(values or {}, source=path)

    # ------------------------------------------------------------------ saving
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path: str) -> None:
        import tensorflow as tf  # gs:// too; BertConfig needs no TensorFlow (9 s)

        with tf.io.gfile.GFile(path, "w") as f:
            f.write(self.to_json_string())

    def replace(self, **changes) -> "BertConfig":
        """A copy with some fields changed (e.g. dropout off for evaluation)."""
        return dataclasses.replace(self, **changes)
