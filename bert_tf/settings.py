"""Every command's settings, each declared once: a dataclass field is the flag and the YAML key.

A command's config is a frozen dataclass of `setting(...)` fields; the field's name, type,
default, help and range are the absl flag (`Settings.define_flags`) and the key of a
`--config_file` YAML (`apply_config_file`); `Settings.from_flags` reads the config back.
The groups several commands share are declared here once (`ModelDirSettings`,
`TextSettings`, `PreTokenizerSetting`, `OriginalTpuSettings`, `TrainingSettings`,
`TaskSettings`); a command combines them, and a default that differs for one command is a
field override in that command's config (`override`). Flag names are the original
run_pretraining / run_classifier / run_squad ones where the concept is the same (DESIGN 2.3).

    >>> @dataclasses.dataclass(frozen=True, kw_only=True)
    ... class Copy(Settings):
    ...     copies: int = setting(1, "How many.", lower=1)
    ...     name: Optional[str] = setting(None, "Who.")
    >>> fv = flags.FlagValues()
    >>> Copy.define_flags(fv)
    >>> _ = fv(["copy", "--copies=3"])
    >>> Copy.from_flags(fv)
    Copy(copies=3, name=None)

The shape of every command module (pretrain, finetune, sweep, extract_features, ...):

    from bert_tf import cli   # first: quiets TensorFlow before anything loads it
    from bert_tf import settings

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class FinetuneConfig(settings.TrainingSettings, settings.TaskSettings):
        predict_batch_size: int = settings.setting(8, "Global prediction batch size.", lower=1)
        ...

    def define_flags(flag_values):              # never at import
        FinetuneConfig.define_flags(flag_values)

    def run(config: FinetuneConfig): ...        # the library entry: no FLAGS

    def main(argv):
        settings.apply_config_file(FLAGS)       # before reading any flag value
        run(FinetuneConfig.from_flags(FLAGS))

    if __name__ == "__main__":
        cli.run_main(main, define_flags)        # quiet start-up, one-line errors

Tests and scripts run a command in process with
`run(FinetuneConfig.from_flags(parse_args(define_flags, ["--task_name=MRPC", ...])))`.
Imports absl and yaml only (no TensorFlow), so the offline data jobs use it too.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Callable, Iterable, List, Optional, Sequence

import yaml
from absl import flags

from bert_tf.errors import UsageError
from bert_tf.pre_tokenizers import PRE_TOKENIZERS

_RELATIVE_TO_YAML = ("bert_config_file", "vocab_file")
_NOT_GIVEN = object()


# ------------------------------------------------------------------------- the generator
def setting(default: Any = None, help: str = "", *, lower: Optional[float] = None,
            upper: Optional[float] = None, choices: Any = None,
            flag_default: Any = _NOT_GIVEN) -> dataclasses.Field:
    """A config field that is also a flag and a YAML key.

    `lower`/`upper`: the flag's range (absl bounds: a value outside is refused with one
    line naming the flag and the range, on the command line and in a YAML). `choices`: an
    enum's values, or a function returning them (read when the flag is defined, so a
    list that lives beside TensorFlow loads it only then). `flag_default`: the default
    the flag shows while the field holds `default` unless the flag is given (`given`):
    for a value settled later (a model dir's recorded casing, a task's own length).
    """
    metadata = {"help": help, "lower": lower, "upper": upper, "choices": choices}
    if flag_default is not _NOT_GIVEN:
        metadata["flag_default"] = flag_default
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def override(group: type, name: str, default: Any = _NOT_GIVEN, *,
             help: Optional[str] = None, **metadata) -> dataclasses.Field:
    """`group`'s field `name` with another default, help or range: how one command's
    config declares what differs for it (finetune's --num_train_steps default)."""
    field = next(f for f in dataclasses.fields(group) if f.name == name)
    values = dict(field.metadata)
    values.update(metadata)
    if help is not None:
        values["help"] = help
    if default is _NOT_GIVEN:
        default = field.default
    return setting(default, values.pop("help"), **values)


def _is_flag(field: dataclasses.Field) -> bool:
    return "help" in field.metadata


def _kind(annotation) -> str:
    """bool, int, float, str or list, from a field's annotation (a string under
    `from __future__ import annotations`).

    >>> [_kind(t) for t in ("Optional[bool]", "int", "float", "Optional[str]", "List[str]")]
    ['bool', 'int', 'float', 'str', 'list']
    """
    text = (annotation if isinstance(annotation, str) else
            annotation.__name__ if isinstance(annotation, type) else str(annotation))
    if re.search(r"\b(List|Sequence|list)\[", text):
        return "list"
    for kind in ("bool", "int", "float", "str"):
        if re.search(rf"\b{kind}\b", text):
            return kind
    raise TypeError(f"a setting of type {text}: expected bool, int, float, str or List[str]")


def define_flag(field: dataclasses.Field, flag_values: flags.FlagValues) -> None:
    """The absl flag of one `setting` field."""
    meta = field.metadata
    default = meta.get("flag_default", field.default)
    if default is dataclasses.MISSING:
        default = field.default_factory()
    common = {"flag_values": flag_values}
    kind = _kind(field.type)
    choices = meta["choices"]
    if choices is not None:
        choices = list(choices() if callable(choices) else choices)
        flags.DEFINE_enum(field.name, default, choices, meta["help"], **common)
    elif kind == "list":
        flags.DEFINE_list(field.name, list(default), meta["help"], **common)
    elif kind == "bool":
        flags.DEFINE_bool(field.name, default, meta["help"], **common)
    elif kind in ("int", "float"):
        bounds = {k: v for k, v in (("lower_bound", meta["lower"]),
                                    ("upper_bound", meta["upper"])) if v is not None}
        define = flags.DEFINE_integer if kind == "int" else flags.DEFINE_float
        define(field.name, default, meta["help"], **bounds, **common)
    else:
        flags.DEFINE_string(field.name, default, meta["help"], **common)


def given(flag_values: flags.FlagValues, name: str):
    """The flag's value when given (command line, --config_file or assigned), else None:
    the one test of "was this flag given", e.g. for `model_dir.resolve`, whose record
    a flag's default must never hide (the trainers' --do_lower_case default).

    >>> fv = flags.FlagValues()
    >>> _ = flags.DEFINE_bool("do_lower_case", True, "", flag_values=fv)
    >>> _ = fv(["prog"]); given(fv, "do_lower_case") is None
    True
    >>> _ = fv(["prog", "--do_lower_case"]); given(fv, "do_lower_case")
    True
    """
    return None if flag_values[name].using_default_value else flag_values[name].value


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """The base of every command's config: its `setting` fields are its flags."""

    @classmethod
    def define_flags(cls, flag_values: flags.FlagValues = flags.FLAGS) -> None:
        """Defines a flag for each `setting` field not defined yet (idempotent)."""
        for field in dataclasses.fields(cls):
            if _is_flag(field) and field.name not in flag_values:
                define_flag(field, flag_values)

    @classmethod
    def from_flags(cls, flag_values: flags.FlagValues = flags.FLAGS, **values):
        """`cls(**values)`, each other `setting` field from its flag (a field with a
        `flag_default` only when the flag was given: `given`). The one place a command
        turns its flags into its run's config."""
        for field in dataclasses.fields(cls):
            if field.name in values or not _is_flag(field) or field.name not in flag_values:
                continue
            values[field.name] = (given(flag_values, field.name)
                                  if "flag_default" in field.metadata
                                  else flag_values[field.name].value)
        return cls(**values)


def apply_config_file(flag_values: flags.FlagValues = flags.FLAGS,
                      path: Optional[str] = None) -> dict:
    """Sets flags from the `--config_file` YAML unless given on the command line.

    The YAML's keys are the flags' names (official_configs/pretraining or /finetuning);
    relative `bert_config_file` / `vocab_file` paths are resolved against the YAML's own
    directory when they exist there. Returns the values taken from the file. Raises
    UsageError (a ValueError) naming the file and key for a key that is no flag or a
    value of the wrong type or out of the flag's range.
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


# ----------------------------------------------------------------- the shared groups
STRIP_ACCENTS_HELP = (
    "Strip accents (NFD, drop combining marks). Default: as --do_lower_case (the original "
    "BERT). --nostrip_accents with --do_lower_case lower-cases but keeps accents and Hangul "
    "syllables whole (text NFC-normalized; for Korean: uncased stripping splits every "
    "syllable into jamo). Recorded in the model directory.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextSettings(Settings):
    """How text is cut before WordPiece, wherever a vocab is used; model dirs record
    them in tokenizer_config.json (`bert_tf.model_dir`). None: not given."""
    do_lower_case: Optional[bool] = setting(
        None, "Lower-case input; default: as --init_checkpoint records it, else inferred "
        "from the vocab.")
    strip_accents: Optional[bool] = setting(None, STRIP_ACCENTS_HELP)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PreTokenizerSetting(Settings):
    """--pre_tokenizer, for the commands that read a corpus (and pretrain, which records
    it); elsewhere a model dir's record gives it. First among a config's bases, so its
    field is the flag that `ModelDirSettings`' plain one gives way to."""
    pre_tokenizer: Optional[str] = setting(
        None, "Split text into morphemes before the basic tokenizer (Korean; kiwi = "
        "kiwipiepy, pip install -r requirements-korean.txt). Use the same value for "
        "build_vocab, create_pretraining_data and pretrain (which records it); serving "
        "clients split text the same way (python -m bert_tf.pre_tokenizers).",
        choices=PRE_TOKENIZERS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CorpusTextSettings(PreTokenizerSetting, TextSettings):
    """The text settings of the commands that read a corpus with no model dir to follow
    (data_prep.create_pretraining_data, build_vocab): uncased unless told."""
    do_lower_case: bool = override(
        TextSettings, "do_lower_case", True,
        help="Lower-case (and strip accents, unless --nostrip_accents) before reading the "
        "corpus (an uncased model); --nodo_lower_case for cased models. For Korean use "
        "--do_lower_case --nostrip_accents (or --nodo_lower_case): stripping splits Hangul "
        "syllables into jamo.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelDirSettings(TextSettings):
    """The model dir a command starts from and the flags that override its files
    (`model_dir.resolve`: a flag given, else the dir's record, else inferred)."""
    init_checkpoint: Optional[str] = setting(
        None, "A model dir (convert_checkpoint, pretrain, finetune) or a checkpoint prefix "
        "in one to start from; its config, vocab and text settings are the defaults of "
        "the flags below.")
    bert_config_file: Optional[str] = setting(
        None, "Model config: an official_configs/models YAML, an original bert_config.json "
        "or a HF config.json. Default: the one in --init_checkpoint's directory.")
    vocab_file: Optional[str] = setting(
        None, "WordPiece vocab.txt (the trainers copy it into --output_dir). Default: the "
        "one in --init_checkpoint's directory.")
    # A flag where a corpus is read (PreTokenizerSetting); elsewhere the dir's record.
    pre_tokenizer: Optional[str] = None

    def resolve(self, *fallbacks: Optional[str]):
        """`model_dir.resolve` of --init_checkpoint with these flags as overrides."""
        from bert_tf import model_dir

        return model_dir.resolve(self.init_checkpoint, bert_config_file=self.bert_config_file,
                                 vocab_file=self.vocab_file, do_lower_case=self.do_lower_case,
                                 strip_accents=self.strip_accents,
                                 pre_tokenizer=self.pre_tokenizer, fallbacks=fallbacks)


@dataclasses.dataclass(frozen=True, kw_only=True)
class OriginalTpuSettings(Settings):
    """The original run_pretraining / run_classifier / run_squad / extract_features TPU
    flags, accepted as they are (the trainers map them onto theirs:
    `map_original_tpu_flags`)."""
    use_tpu: bool = setting(False, "Original flag: = --distribution_strategy=tpu.")
    tpu_name: Optional[str] = setting(None, "Original flag: the Cloud TPU's name or grpc:// "
                                      "address (= --tpu).")
    tpu_zone: Optional[str] = setting(None, "Original flag: GCE zone of --tpu_name (default: "
                                      "from the metadata server).")
    gcp_project: Optional[str] = setting(None, "Original flag: GCP project of --tpu_name "
                                         "(default: from the metadata server).")
    master: Optional[str] = setting(None, "Original flag: the TPU's grpc:// address, used "
                                    "when --tpu_name is not given.")
    iterations_per_loop: Optional[int] = setting(None, "Original flag: = --steps_per_loop.",
                                                 lower=1)
    num_tpu_cores: Optional[int] = setting(None, "Original flag: TPU cores to use (default: "
                                           "all of the TPU's).", lower=1)


def map_original_tpu_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Maps the original TPU flags onto ours.

    `--use_tpu` sets `--distribution_strategy=tpu`, `--tpu_name` (else `--master`) sets
    `--tpu`, `--iterations_per_loop` sets `--steps_per_loop`. Raises
    flags.ValidationError when an original flag and ours say different things.

    >>> fv = flags.FlagValues()
    >>> TrainingSettings.define_flags(fv)
    >>> _ = fv(["pretrain", "--use_tpu", "--tpu_name=my-tpu", "--iterations_per_loop=1000"])
    >>> map_original_tpu_flags(fv)
    >>> fv.tpu, fv.distribution_strategy, fv.steps_per_loop
    ('my-tpu', 'tpu', 1000)
    """
    fv = flag_values
    if fv.use_tpu:
        if given(fv, "distribution_strategy") not in (None, "tpu"):
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
        if given(fv, "steps_per_loop") not in (None, fv.iterations_per_loop):
            raise flags.ValidationError(
                f"--iterations_per_loop={fv.iterations_per_loop} contradicts "
                f"--steps_per_loop={fv.steps_per_loop}; pass one of them")
        fv.steps_per_loop = fv.iterations_per_loop


def _names(module: str, attribute: str) -> Callable[[], Sequence[str]]:
    """An enum's values that live beside TensorFlow: read when the flag is defined."""
    def names():
        import importlib

        return getattr(importlib.import_module(module), attribute)
    return names


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingSettings(ModelDirSettings, OriginalTpuSettings):
    """What pretrain and finetune share: the run's dir, batches, schedule, optimizer,
    devices. The factories are where what they make lives: `strategy.from_settings`,
    `optimization.from_settings`, `strategy.set_precision_and_seed`."""
    config_file: Optional[str] = setting(
        None, "Experiment YAML (official_configs/pretraining or /finetuning) of flag_name: "
        "value pairs; command-line flags override it.")
    output_dir: Optional[str] = setting(
        None, "Where checkpoints, summaries and eval results go; also a model dir that "
        "--init_checkpoint accepts. An existing one must hold this same run (config, vocab, "
        "text settings, task, optimizer), which then resumes.")
    overwrite: bool = setting(
        False, "Start over in an --output_dir that holds another run: the earlier run is "
        "moved aside once this run's inputs are read and its start point restored, and "
        "deleted when this run finishes.")
    do_lower_case: Optional[bool] = override(
        ModelDirSettings, "do_lower_case", flag_default=True,
        help="Whether the vocab is uncased (recorded in --output_dir for the tokenizer). "
        "Default: as --init_checkpoint records it, else inferred from the vocab, else true.")
    max_seq_length: int = setting(128, "Sequence length of the records / features.", lower=3)
    do_train: bool = setting(False, "Train.")
    do_eval: bool = setting(False, "Evaluate and write OUTPUT_DIR/eval_results.json.")
    train_batch_size: int = setting(32, "Global training batch size (all replicas, all "
                                    "accumulation micro-batches).", lower=1)
    eval_batch_size: int = setting(8, "Global evaluation batch size.", lower=1)
    learning_rate: float = setting(5e-5, "Peak learning rate.", lower=0.0)
    num_train_steps: Optional[int] = setting(100000, "Optimizer updates to train for.",
                                             lower=0)
    num_warmup_steps: Optional[int] = setting(10000, "Linear warmup steps.", lower=0)
    save_checkpoints_steps: int = setting(1000, "Checkpoint every this many steps.", lower=1)
    keep_checkpoint_max: int = setting(5, "How many recent checkpoints to keep (0: all of "
                                       "them, as the original).", lower=0)
    distribution_strategy: str = setting(
        "one_device", "tf.distribute strategy; multi_worker_mirrored reads TF_CONFIG.",
        choices=_names("bert_tf.training.strategy", "STRATEGIES"))
    tpu: Optional[str] = setting(None, "TPU name or grpc:// address (\"local\" on a TPU VM).")
    mixed_precision: Optional[str] = setting(
        None, "Compute dtype policy; mixed_float16 adds dynamic loss scaling. Default: "
        "mixed_bfloat16 when training on a CPU with AMX (Intel Sapphire Rapids and later; "
        "about 3x float32's matmul rate, the same scores), float32 elsewhere.",
        choices=_names("bert_tf.training.strategy", "PRECISIONS"), flag_default="float32")
    steps_per_loop: int = setting(100, "Steps run inside one tf.function between host round "
                                  "trips (console line, summaries).", lower=1)
    optimizer: str = setting(
        "adamw", "adamw: the original AdamWeightDecay (no bias correction); "
        "adamw_bias_correction; lamb.",
        choices=_names("bert_tf.training.optimization", "OPTIMIZERS"))
    weight_decay_rate: float = setting(0.01, "Decoupled weight decay (not on LayerNorm or "
                                       "biases).", lower=0.0)
    decay_from_warmup_end: bool = setting(
        False, "Decay the learning rate linearly from the end of warmup instead of from "
        "step 0 (the original).")
    clip_norm: float = setting(1.0, "Clip gradients to this global norm (0: off).", lower=0.0)
    gradient_accumulation_steps: int = setting(
        1, "Micro-batches per optimizer update (train_batch_size is split into them).",
        lower=1)
    jit_compile: Optional[bool] = setting(
        None, "XLA-compile the forward and backward pass. Default: on when training on a "
        "CPU without AVX-512 (where it is faster), off elsewhere.")
    skip_corrupt_records: bool = setting(
        False, "Skip input records that fail their checksum or are cut short (each is "
        "logged with its file and byte offset, and counted) instead of stopping the run, "
        "which names the file.")

    @classmethod
    def from_flags(cls, flag_values: flags.FlagValues = flags.FLAGS, **values):
        """Maps the original TPU flags onto ours first (`map_original_tpu_flags`)."""
        map_original_tpu_flags(flag_values)
        return super().from_flags(flag_values, **values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskSettings(Settings):
    """The fine-tuning task (finetune and data_prep.create_finetuning_data): its name,
    data and the options the tasks name in `option_names`; `task` is its `TaskSpec`."""
    task_name: Optional[str] = setting(
        None, "The task: cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli, conll2003, "
        "swag, squad.")
    data_dir: Optional[str] = setting(
        None, "The task's data directory (GLUE tsv files, CoNLL-2003 eng.* files, SWAG csv "
        "files).")
    train_file: Optional[str] = setting(
        None, "Training data file (SQuAD); overrides --data_dir's.")
    predict_file: Optional[str] = setting(
        None, "Dev/predict file (SQuAD); overrides --data_dir's.")
    doc_stride: int = setting(128, "SQuAD: stride between context windows.", lower=1)
    max_query_length: int = setting(64, "SQuAD: question tokens kept.", lower=1)
    n_best_size: int = setting(20, "SQuAD: candidates per start/end.", lower=1)
    max_answer_length: int = setting(30, "SQuAD: longest answer in tokens.", lower=1)
    version_2_with_negative: bool = setting(False, "SQuAD v2.0: questions may be "
                                            "unanswerable.")
    null_score_diff_threshold: float = setting(0.0, "SQuAD v2.0: predict null above this.")

    @classmethod
    def from_flags(cls, flag_values: flags.FlagValues = flags.FLAGS, **values):
        """Checks --task_name (given, and a task)."""
        from bert_tf import tasks

        require(flag_values, ["task_name"])
        tasks.canonical_task_name(flag_values.task_name)
        return super().from_flags(flag_values, **values)

    @property
    def task(self):
        """The `tasks.TaskSpec` these settings name."""
        from bert_tf import tasks

        options = {name: getattr(self, name) for name in TASK_OPTION_FLAGS}
        return tasks.TaskSpec(self.task_name, self.data_dir, self.train_file,
                              self.predict_file, options)


# The task's options (`Task.option_names`): TaskSettings' flags after its data's.
TASK_OPTION_FLAGS: List[str] = [f.name for f in dataclasses.fields(TaskSettings)
                                if f.name not in ("task_name", "data_dir", "train_file",
                                                  "predict_file")]
