"""absl flags shared by `bert_tf.pretrain` and `bert_tf.finetune`, and `--config_file`.

Flag names are the original run_pretraining / run_classifier ones where the concept is
the same (DESIGN 2.3). `--config_file` names an experiment YAML (official_configs/
pretraining or /finetuning) of `flag_name: value` pairs; a flag given on the command
line wins over the file. Relative `bert_config_file`/`vocab_file` paths in a YAML are
resolved against the YAML's own directory when they exist there.

Example (a CLI module):

    from absl import app, flags
    from bert_tf import flags_common
    flags_common.define_common_flags()
    FLAGS = flags.FLAGS

    def main(argv):
        flags_common.apply_config_file(FLAGS)   # before reading any flag value
        ...
    app.run(main)
"""

from __future__ import annotations

import os
from typing import Iterable, Optional

import yaml
from absl import flags

from bert_tf import text_flags
from bert_tf.training.optimization import OPTIMIZERS
from bert_tf.training.strategy import STRATEGIES

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
_RELATIVE_TO_YAML = ("bert_config_file", "vocab_file")


def define_common_flags() -> None:
    """Defines the flags both trainers take (idempotent)."""
    if "bert_config_file" in flags.FLAGS:
        return
    f = flags
    f.DEFINE_string("config_file", None, "Experiment YAML (official_configs/pretraining or "
                    "/finetuning) of flag_name: value pairs; command-line flags override it.")
    f.DEFINE_string("bert_config_file", None, "Model config: an official_configs/models YAML, "
                    "an original bert_config.json or a HF config.json. Default: the one in "
                    "--init_checkpoint's directory.")
    f.DEFINE_string("output_dir", None, "Where checkpoints, summaries and eval results go; "
                    "also a model dir that --init_checkpoint accepts.")
    f.DEFINE_string("init_checkpoint", None, "A model dir (convert_checkpoint, pretrain, "
                    "finetune) or a checkpoint prefix to start from.")
    f.DEFINE_string("vocab_file", None, "WordPiece vocab (copied into --output_dir). "
                    "Default: the one in --init_checkpoint's directory.")
    f.DEFINE_bool("do_lower_case", True, "Whether the vocab is uncased (recorded in "
                  "--output_dir for the tokenizer).")
    text_flags.define_strip_accents_flag()
    f.DEFINE_integer("max_seq_length", 128, "Sequence length of the records / features.")
    f.DEFINE_bool("do_train", False, "Train.")
    f.DEFINE_bool("do_eval", False, "Evaluate and write OUTPUT_DIR/eval_results.json.")
    f.DEFINE_integer("train_batch_size", 32, "Global training batch size (all replicas, "
                     "all accumulation micro-batches).")
    f.DEFINE_integer("eval_batch_size", 8, "Global evaluation batch size.")
    f.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
    f.DEFINE_integer("num_train_steps", 100000, "Optimizer updates to train for.")
    f.DEFINE_integer("num_warmup_steps", 10000, "Linear warmup steps.")
    f.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every this many steps.")
    f.DEFINE_integer("keep_checkpoint_max", 5, "How many recent checkpoints to keep.")
    f.DEFINE_enum("distribution_strategy", "one_device", list(STRATEGIES),
                  "tf.distribute strategy; multi_worker_mirrored reads TF_CONFIG.")
    f.DEFINE_string("tpu", None, "TPU name or grpc:// address (\"local\" on a TPU VM).")
    f.DEFINE_enum("mixed_precision", "float32", list(PRECISIONS),
                  "Compute dtype policy; mixed_float16 adds dynamic loss scaling.")
    f.DEFINE_integer("steps_per_loop", 100, "Steps run inside one tf.function between "
                     "host round trips (console line, summaries).")
    f.DEFINE_enum("optimizer", "adamw", list(OPTIMIZERS), "adamw: the original "
                  "AdamWeightDecay (no bias correction); adamw_bias_correction; lamb.")
    f.DEFINE_float("weight_decay_rate", 0.01, "Decoupled weight decay (not on LayerNorm "
                   "or biases).")
    f.DEFINE_bool("decay_from_warmup_end", False, "Decay the learning rate linearly from "
                  "the end of warmup instead of from step 0 (the original).")
    f.DEFINE_float("clip_norm", 1.0, "Clip gradients to this global norm (0: off).")
    f.DEFINE_integer("gradient_accumulation_steps", 1, "Micro-batches per optimizer update "
                     "(train_batch_size is split into them).")
    f.DEFINE_bool("jit_compile", False, "XLA-compile the forward and backward pass.")


def apply_config_file(flag_values: flags.FlagValues = flags.FLAGS,
                      path: Optional[str] = None) -> dict:
    """Sets flags from the `--config_file` YAML unless given on the command line.

    Returns the values taken from the file. Raises ValueError naming the file and key
    for a key that is no flag or a value of the wrong type.
    """
    path = path or flag_values["config_file"].value
    if not path:
        return {}
    import tensorflow as tf  # gfile reads gs:// too

    if not tf.io.gfile.exists(path):
        raise ValueError(f"--config_file={path}: no such file")
    with tf.io.gfile.GFile(path) as f:
        try:
            values = yaml.safe_load(f.read()) or {}
        except yaml.YAMLError as e:
            raise ValueError(f"--config_file={path}: not valid YAML: {e}") from None
    if not isinstance(values, dict):
        raise ValueError(f"--config_file={path}: expected `flag_name: value` pairs")
    applied = {}
    for name, value in values.items():
        if name not in flag_values:
            raise ValueError(f"--config_file={path}: `{name}` is not a flag of this command")
        flag = flag_values[name]
        if flag.present:
            continue  # the command line wins
        if name in _RELATIVE_TO_YAML and isinstance(value, str) and not os.path.isabs(value):
            beside = os.path.normpath(os.path.join(os.path.dirname(path), value))
            if os.path.exists(beside):
                value = beside
        try:
            flag.value = flag.parser.parse(value) if value is not None else None
        except (ValueError, TypeError) as e:
            raise ValueError(f"--config_file={path}: `{name}: {value!r}`: {e}") from None
        applied[name] = flag.value
    return applied


def require(flag_values: flags.FlagValues, names: Iterable[str]) -> None:
    """Raises app.UsageError-style ValueError naming the first missing flag."""
    for name in names:
        if flag_values[name].value in (None, ""):
            raise flags.ValidationError(f"--{name} is required (on the command line or in "
                                        f"--config_file)")
