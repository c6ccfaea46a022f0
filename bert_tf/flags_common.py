"""absl flags shared by `bert_tf.pretrain` and `bert_tf.finetune`, and `--config_file`.

Flag names are the original run_pretraining / run_classifier ones where the concept is
the same (DESIGN 2.3). `--config_file` names an experiment YAML (official_configs/
pretraining or /finetuning) of `flag_name: value` pairs; a flag given on the command
line wins over the file. Relative `bert_config_file`/`vocab_file` paths in a YAML are
resolved against the YAML's own directory when they exist there.

Example (a CLI module):

    from bert_tf import cli   # first: quiets TensorFlow before anything loads it
    from absl import flags
    from bert_tf import flags_common
    flags_common.define_common_flags()
    FLAGS = flags.FLAGS

    def main(argv):
        flags_common.apply_config_file(FLAGS)   # before reading any flag value
        ...
    cli.run_main(main)   # bert_tf.cli: quiet start-up, one-line errors
"""

from __future__ import annotations

import os
from typing import Iterable, Optional

import yaml
from absl import flags

from bert_tf import text_flags

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
_RELATIVE_TO_YAML = ("bert_config_file", "vocab_file")


def define_common_flags() -> None:
    """Defines the flags both trainers take (idempotent)."""
    if "bert_config_file" in flags.FLAGS:
        return
    # Here, not at import: they load TensorFlow, which the original TPU flags below
    # (extract_features defines only those) do not need.
    from bert_tf.training.optimization import OPTIMIZERS
    from bert_tf.training.strategy import STRATEGIES

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
    define_original_tpu_flags()
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
    f.DEFINE_bool("length_bucketing", True, "Fine-tuning: batch rows of similar length "
                  "(training and prediction), each batch cut to one of a few fixed lengths "
                  "(off on TPUs); --nolength_bucketing pads every batch to --max_seq_length.")
    f.DEFINE_bool("skip_corrupt_records", False, "Skip input records that fail their "
                  "checksum or are cut short (each is logged with its file and byte offset, "
                  "and counted) instead of stopping the run, which names the file.")


def define_original_tpu_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """The original run_pretraining / run_classifier / run_squad / extract_features TPU
    flags, accepted as they are and mapped by `original_tpu_flags` (idempotent)."""
    if "use_tpu" in flag_values:
        return
    fv = {"flag_values": flag_values}
    flags.DEFINE_bool("use_tpu", False, "Original flag: = --distribution_strategy=tpu.", **fv)
    flags.DEFINE_string("tpu_name", None, "Original flag: the Cloud TPU's name or grpc:// "
                        "address (= --tpu).", **fv)
    flags.DEFINE_string("tpu_zone", None, "Original flag: GCE zone of --tpu_name (default: "
                        "from the metadata server).", **fv)
    flags.DEFINE_string("gcp_project", None, "Original flag: GCP project of --tpu_name "
                        "(default: from the metadata server).", **fv)
    flags.DEFINE_string("master", None, "Original flag: the TPU's grpc:// address, used "
                        "when --tpu_name is not given.", **fv)
    flags.DEFINE_integer("iterations_per_loop", None, "Original flag: = --steps_per_loop.",
                         **fv)
    flags.DEFINE_integer("num_tpu_cores", None, "Original flag: TPU cores to use (default: "
                         "all of the TPU's).", **fv)


def original_tpu_flags(flag_values: flags.FlagValues = flags.FLAGS) -> dict:
    """Maps the original TPU flags onto ours; returns the TPU keyword arguments.

    `--use_tpu` sets `--distribution_strategy=tpu`, `--tpu_name` (else `--master`) sets
    `--tpu`, `--iterations_per_loop` sets `--steps_per_loop`. Returns `{tpu, tpu_zone,
    gcp_project, num_tpu_cores}` for `strategy.get_strategy`. Raises
    flags.ValidationError when an original flag and ours say different things.

    >>> fv = flags.FlagValues()
    >>> for name, default in (("distribution_strategy", "one_device"), ("tpu", None)):
    ...     _ = flags.DEFINE_string(name, default, "", flag_values=fv)
    >>> _ = flags.DEFINE_integer("steps_per_loop", 100, "", flag_values=fv)
    >>> define_original_tpu_flags(fv)
    >>> _ = fv(["pretrain", "--use_tpu", "--tpu_name=my-tpu", "--iterations_per_loop=1000"])
    >>> original_tpu_flags(fv)["tpu"], fv.distribution_strategy, fv.steps_per_loop
    ('my-tpu', 'tpu', 1000)
    """
    fv = flag_values

    def given(name):  # on the command line or from --config_file
        return fv[name].present or fv[name].value != fv[name].default

    if fv.use_tpu:
        if given("distribution_strategy") and fv.distribution_strategy != "tpu":
            raise flags.ValidationError(
                f"--use_tpu contradicts --distribution_strategy={fv.distribution_strategy}; "
                f"pass one of them")
        fv.distribution_strategy = "tpu"
    original_tpu = fv.tpu_name or fv.master
    if original_tpu:
        if fv.tpu and fv.tpu != original_tpu:
            raise flags.ValidationError(
                f"--tpu={fv.tpu} contradicts --{'tpu_name' if fv.tpu_name else 'master'}="
                f"{original_tpu}; pass one of them")
        if fv.distribution_strategy == "tpu":
            fv.tpu = original_tpu
    if fv.iterations_per_loop is not None:
        if given("steps_per_loop") and fv.steps_per_loop != fv.iterations_per_loop:
            raise flags.ValidationError(
                f"--iterations_per_loop={fv.iterations_per_loop} contradicts "
                f"--steps_per_loop={fv.steps_per_loop}; pass one of them")
        fv.steps_per_loop = fv.iterations_per_loop
    return {"tpu": fv.tpu, "tpu_zone": fv.tpu_zone, "gcp_project": fv.gcp_project,
            "num_tpu_cores": fv.num_tpu_cores}


def strategy_from_flags(flag_values: flags.FlagValues = flags.FLAGS, **factories):
    """The tf.distribute strategy the flags ask for, original TPU flags included
    (`original_tpu_flags`); `factories` go to `strategy.get_strategy` (tests)."""
    from bert_tf.training.strategy import get_strategy

    tpu_options = original_tpu_flags(flag_values)
    if flag_values.distribution_strategy != "tpu":
        tpu_options = {}
    return get_strategy(flag_values.distribution_strategy, **tpu_options, **factories)


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
