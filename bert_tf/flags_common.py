"""absl flags shared by `bert_tf.pretrain` and `bert_tf.finetune`, and `--config_file`.

Flag names are the original run_pretraining / run_classifier ones where the concept is
the same (DESIGN 2.3). `--config_file` names an experiment YAML (official_configs/
pretraining or /finetuning) of `flag_name: value` pairs; a flag given on the command
line wins over the file. Relative `bert_config_file`/`vocab_file` paths in a YAML are
resolved against the YAML's own directory when they exist there.

The shape of every command module (pretrain, finetune, extract_features, export_model,
convert_checkpoint, data_prep.create_finetuning_data):

    from bert_tf import cli   # first: quiets TensorFlow before anything loads it
    from bert_tf import flags_common

    def define_flags(flag_values):              # never at import
        flags_common.define_common_flags(flag_values)
        ...

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class FinetuneConfig(flags_common.TrainingConfig):
        ...                                     # one field per flag
        @classmethod
        def from_flags(cls, flag_values): ...   # the one place flags are read

    def run(config: FinetuneConfig): ...        # the library entry: no FLAGS

    def main(argv):
        flags_common.apply_config_file(FLAGS)   # before reading any flag value
        run(FinetuneConfig.from_flags(FLAGS))

    if __name__ == "__main__":
        cli.run_main(main, define_flags)        # quiet start-up, one-line errors

Tests and scripts run a command in process with
`run(FinetuneConfig.from_flags(parse_args(define_flags, ["--task_name=MRPC", ...])))`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Iterable, Optional, Sequence

import yaml
from absl import flags

from bert_tf import text_flags
from bert_tf.errors import UsageError

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
_RELATIVE_TO_YAML = ("bert_config_file", "vocab_file")


def define_common_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines the flags both trainers take (idempotent)."""
    if "bert_config_file" in flag_values:
        return
    # Here, not at import: they load TensorFlow, which the original TPU flags below
    # (extract_features defines only those) do not need.
    from bert_tf.training.optimization import OPTIMIZERS
    from bert_tf.training.strategy import STRATEGIES

    fv = {"flag_values": flag_values}
    f = flags
    f.DEFINE_string("config_file", None, "Experiment YAML (official_configs/pretraining or "
                    "/finetuning) of flag_name: value pairs; command-line flags override it.",
                    **fv)
    f.DEFINE_string("bert_config_file", None, "Model config: an official_configs/models YAML, "
                    "an original bert_config.json or a HF config.json. Default: the one in "
                    "--init_checkpoint's directory.", **fv)
    f.DEFINE_string("output_dir", None, "Where checkpoints, summaries and eval results go; "
                    "also a model dir that --init_checkpoint accepts. An existing one must "
                    "hold this same run (config, vocab, text settings, task, optimizer), "
                    "which then resumes.", **fv)
    f.DEFINE_bool("overwrite", False, "Start over in an --output_dir that holds another run: "
                  "the earlier run is moved aside once this run's inputs are read and its "
                  "start point restored, and deleted when this run finishes.", **fv)
    f.DEFINE_string("init_checkpoint", None, "A model dir (convert_checkpoint, pretrain, "
                    "finetune) or a checkpoint prefix to start from.", **fv)
    f.DEFINE_string("vocab_file", None, "WordPiece vocab (copied into --output_dir). "
                    "Default: the one in --init_checkpoint's directory.", **fv)
    f.DEFINE_bool("do_lower_case", True, "Whether the vocab is uncased (recorded in "
                  "--output_dir for the tokenizer). Default: as --init_checkpoint records "
                  "it, else inferred from the vocab, else true.", **fv)
    text_flags.define_strip_accents_flag(flag_values)
    f.DEFINE_integer("max_seq_length", 128, "Sequence length of the records / features.",
                     lower_bound=3, **fv)
    f.DEFINE_bool("do_train", False, "Train.", **fv)
    f.DEFINE_bool("do_eval", False, "Evaluate and write OUTPUT_DIR/eval_results.json.", **fv)
    f.DEFINE_integer("train_batch_size", 32, "Global training batch size (all replicas, "
                     "all accumulation micro-batches).", lower_bound=1, **fv)
    f.DEFINE_integer("eval_batch_size", 8, "Global evaluation batch size.", lower_bound=1, **fv)
    f.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.", lower_bound=0.0, **fv)
    f.DEFINE_integer("num_train_steps", 100000, "Optimizer updates to train for.",
                     lower_bound=0, **fv)
    f.DEFINE_integer("num_warmup_steps", 10000, "Linear warmup steps.", lower_bound=0, **fv)
    f.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every this many steps.",
                     lower_bound=1, **fv)
    f.DEFINE_integer("keep_checkpoint_max", 5, "How many recent checkpoints to keep (0: "
                     "all of them, as the original).", lower_bound=0, **fv)
    f.DEFINE_enum("distribution_strategy", "one_device", list(STRATEGIES),
                  "tf.distribute strategy; multi_worker_mirrored reads TF_CONFIG.", **fv)
    f.DEFINE_string("tpu", None, "TPU name or grpc:// address (\"local\" on a TPU VM).", **fv)
    define_original_tpu_flags(flag_values)
    f.DEFINE_enum("mixed_precision", "float32", list(PRECISIONS),
                  "Compute dtype policy; mixed_float16 adds dynamic loss scaling.", **fv)
    f.DEFINE_integer("steps_per_loop", 100, "Steps run inside one tf.function between "
                     "host round trips (console line, summaries).", lower_bound=1, **fv)
    f.DEFINE_enum("optimizer", "adamw", list(OPTIMIZERS), "adamw: the original "
                  "AdamWeightDecay (no bias correction); adamw_bias_correction; lamb.", **fv)
    f.DEFINE_float("weight_decay_rate", 0.01, "Decoupled weight decay (not on LayerNorm "
                   "or biases).", lower_bound=0.0, **fv)
    f.DEFINE_bool("decay_from_warmup_end", False, "Decay the learning rate linearly from "
                  "the end of warmup instead of from step 0 (the original).", **fv)
    f.DEFINE_float("clip_norm", 1.0, "Clip gradients to this global norm (0: off).",
                   lower_bound=0.0, **fv)
    f.DEFINE_integer("gradient_accumulation_steps", 1, "Micro-batches per optimizer update "
                     "(train_batch_size is split into them).", lower_bound=1, **fv)
    f.DEFINE_bool("jit_compile", None, "XLA-compile the forward and backward pass. "
                  "Default: on when training on a CPU without AVX-512 (where it is "
                  "faster), off elsewhere.", **fv)
    f.DEFINE_bool("skip_corrupt_records", False, "Skip input records that fail their "
                  "checksum or are cut short (each is logged with its file and byte offset, "
                  "and counted) instead of stopping the run, which names the file.", **fv)


TASK_OPTION_FLAGS = ("doc_stride", "max_query_length", "n_best_size", "max_answer_length",
                     "version_2_with_negative", "null_score_diff_threshold")


def task_spec_from_flags(flag_values: flags.FlagValues = flags.FLAGS):
    """The `tasks.TaskSpec` that `define_task_flags`' flags name; checks --task_name."""
    from bert_tf import tasks

    require(flag_values, ["task_name"])
    tasks.canonical_task_name(flag_values.task_name)
    return tasks.TaskSpec(flag_values.task_name, flag_values.data_dir, flag_values.train_file,
                          flag_values.predict_file,
                          {name: flag_values[name].value for name in TASK_OPTION_FLAGS})


def define_task_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """The fine-tuning task's flags (finetune and data_prep.create_finetuning_data):
    the task, its data and the options the tasks name in `option_names` (idempotent)."""
    if "task_name" in flag_values:
        return
    fv = {"flag_values": flag_values}
    d = flags
    d.DEFINE_string("task_name", None, "The task: cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, "
                    "rte, wnli, conll2003, swag, squad.", **fv)
    d.DEFINE_string("data_dir", None, "The task's data directory (GLUE tsv files, CoNLL-2003 "
                    "eng.* files, SWAG csv files).", **fv)
    d.DEFINE_string("train_file", None, "Training data file (SQuAD); overrides --data_dir's.",
                    **fv)
    d.DEFINE_string("predict_file", None, "Dev/predict file (SQuAD); overrides --data_dir's.",
                    **fv)
    d.DEFINE_integer("doc_stride", 128, "SQuAD: stride between context windows.",
                     lower_bound=1, **fv)
    d.DEFINE_integer("max_query_length", 64, "SQuAD: question tokens kept.", lower_bound=1, **fv)
    d.DEFINE_integer("n_best_size", 20, "SQuAD: candidates per start/end.", lower_bound=1, **fv)
    d.DEFINE_integer("max_answer_length", 30, "SQuAD: longest answer in tokens.",
                     lower_bound=1, **fv)
    d.DEFINE_bool("version_2_with_negative", False, "SQuAD v2.0: questions may be "
                  "unanswerable.", **fv)
    d.DEFINE_float("null_score_diff_threshold", 0.0, "SQuAD v2.0: predict null above this.",
                   **fv)


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
                         lower_bound=1, **fv)
    flags.DEFINE_integer("num_tpu_cores", None, "Original flag: TPU cores to use (default: "
                         "all of the TPU's).", lower_bound=1, **fv)


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
    """The tf.distribute strategy the trainers' flags ask for, original TPU flags included
    (`TrainingConfig.strategy`); `factories` go to `strategy.get_strategy` (tests)."""
    return TrainingConfig.from_flags(flag_values).strategy(**factories)


def apply_config_file(flag_values: flags.FlagValues = flags.FLAGS,
                      path: Optional[str] = None) -> dict:
    """Sets flags from the `--config_file` YAML unless given on the command line.

    Returns the values taken from the file. Raises UsageError (a ValueError) naming the
    file and key for a key that is no flag or a value of the wrong type.
    """
    path = path or flag_values["config_file"].value
    if not path:
        return {}
    import tensorflow as tf  # gfile reads gs:// too

    if not tf.io.gfile.exists(path):
        raise UsageError(f"--config_file={path}: no such file")
    with tf.io.gfile.GFile(path) as f:
        try:
            values = yaml.safe_load(f.read()) or {}
        except yaml.YAMLError as e:
            raise UsageError(f"--config_file={path}: not valid YAML: {e}") from None
    if not isinstance(values, dict):
        raise UsageError(f"--config_file={path}: expected `flag_name: value` pairs")
    applied = {}
    for name, value in values.items():
        if name not in flag_values:
            raise UsageError(f"--config_file={path}: `{name}` is not a flag of this command")
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
            raise UsageError(f"--config_file={path}: `{name}: {value!r}`: {e}") from None
        flag.using_default_value = False  # given, as on the command line (`given`)
        applied[name] = flag.value
    return applied


def require(flag_values: flags.FlagValues, names: Iterable[str]) -> None:
    """Raises UsageError naming the first missing flag."""
    for name in names:
        if flag_values[name].value in (None, ""):
            where = " or in --config_file" if "config_file" in flag_values else ""
            raise UsageError(f"--{name} is required (on the command line{where})")


# ----------------------------------------------------------------- flags -> a run's config
def given(flag_values: flags.FlagValues, name: str):
    """The flag's value when given (command line, --config_file or assigned), else None:
    what `model_dir.resolve` takes, so that a flag's default never hides the model
    dir's record (e.g. the trainers' --do_lower_case default).

    >>> fv = flags.FlagValues()
    >>> _ = flags.DEFINE_bool("do_lower_case", True, "", flag_values=fv)
    >>> _ = fv(["prog"]); given(fv, "do_lower_case") is None
    True
    >>> _ = fv(["prog", "--do_lower_case"]); given(fv, "do_lower_case")
    True
    """
    return None if flag_values[name].using_default_value else flag_values[name].value


_GIVEN_ONLY = ("do_lower_case",)  # fields that hold None unless the flag was given


def config_from_flags(cls, flag_values: flags.FlagValues, **values):
    """`cls(**values)`, each other field from the flag of the same name (fields whose
    flag this command lacks keep their defaults). The one place a command turns its
    flags into its run's config dataclass."""
    for field in dataclasses.fields(cls):
        if field.name not in values and field.name in flag_values:
            values[field.name] = (given(flag_values, field.name) if field.name in _GIVEN_ONLY
                                  else flag_values[field.name].value)
    return cls(**values)


def parse_args(define_flags: Callable[[flags.FlagValues], None],
               argv: Sequence[str]) -> flags.FlagValues:
    """A command's flags parsed from `argv` (without the program name) on a fresh
    FlagValues, with --config_file applied: how tests and scripts build a run's config
    without a process (`FinetuneConfig.from_flags(parse_args(finetune.define_flags, [...]))`).

    >>> from bert_tf import extract_features
    >>> parse_args(extract_features.define_flags, ["--layers=-1"]).layers
    '-1'
    """
    fv = flags.FlagValues()
    define_flags(fv)
    fv(["prog", *argv])
    if "config_file" in fv:
        apply_config_file(fv)
    return fv


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelDirFlags:
    """The flags `model_dir.resolve` takes (None: not given)."""
    init_checkpoint: Optional[str] = None
    bert_config_file: Optional[str] = None
    vocab_file: Optional[str] = None
    do_lower_case: Optional[bool] = None
    strip_accents: Optional[bool] = None
    pre_tokenizer: Optional[str] = None

    def resolve(self, *fallbacks: Optional[str]):
        """`model_dir.resolve` of --init_checkpoint with these flags as overrides."""
        from bert_tf import model_dir

        return model_dir.resolve(self.init_checkpoint, bert_config_file=self.bert_config_file,
                                 vocab_file=self.vocab_file, do_lower_case=self.do_lower_case,
                                 strip_accents=self.strip_accents,
                                 pre_tokenizer=self.pre_tokenizer, fallbacks=fallbacks)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingConfig(ModelDirFlags):
    """What the trainers' shared flags (`define_common_flags`) say."""
    output_dir: str
    max_seq_length: int
    do_train: bool
    do_eval: bool
    train_batch_size: int
    eval_batch_size: int
    learning_rate: float
    num_train_steps: Optional[int]
    num_warmup_steps: Optional[int]
    save_checkpoints_steps: int
    keep_checkpoint_max: int
    distribution_strategy: str
    tpu: Optional[str] = None
    tpu_zone: Optional[str] = None
    gcp_project: Optional[str] = None
    num_tpu_cores: Optional[int] = None
    mixed_precision: str
    steps_per_loop: int
    optimizer: str
    weight_decay_rate: float
    decay_from_warmup_end: bool
    clip_norm: float
    gradient_accumulation_steps: int
    jit_compile: Optional[bool]
    skip_corrupt_records: bool
    overwrite: bool = False

    @classmethod
    def from_flags(cls, flag_values: flags.FlagValues = flags.FLAGS, **values):
        """Maps the original TPU flags onto ours first (`original_tpu_flags`)."""
        original_tpu_flags(flag_values)
        return config_from_flags(cls, flag_values, **values)

    def strategy(self, **factories):
        """The tf.distribute strategy asked for; `factories` go to `get_strategy` (tests).
        Flags that make no strategy (multi_worker without TF_CONFIG, too many TPU cores)
        raise UsageError."""
        from bert_tf.training.strategy import get_strategy

        tpu = ({"tpu": self.tpu, "tpu_zone": self.tpu_zone, "gcp_project": self.gcp_project,
                "num_tpu_cores": self.num_tpu_cores}
               if self.distribution_strategy == "tpu" else {})
        try:
            return get_strategy(self.distribution_strategy, **tpu, **factories)
        except ValueError as e:
            raise UsageError(str(e)) from None

    def create_optimizer(self, num_train_steps: int, num_warmup_steps: int):
        """The optimizer and learning-rate schedule these flags describe (UsageError
        for values that make none, e.g. --num_train_steps=0)."""
        from bert_tf.training.optimization import create_optimizer

        try:
            return create_optimizer(
                self.learning_rate, num_train_steps=num_train_steps,
                num_warmup_steps=num_warmup_steps, optimizer=self.optimizer,
                weight_decay_rate=self.weight_decay_rate,
                decay_from_warmup_end=self.decay_from_warmup_end,
                clip_norm=self.clip_norm or None, mixed_precision=self.mixed_precision)
        except ValueError as e:
            raise UsageError(str(e)) from None

    def set_precision_and_seed(self, seed: Optional[int]) -> None:
        import keras

        if seed is not None:
            keras.utils.set_random_seed(seed)
        if self.mixed_precision != "float32":
            keras.mixed_precision.set_global_policy(self.mixed_precision)
