"""Every command's settings, each declared once: a dataclass field is the flag and the YAML key.

A command's config is a frozen dataclass of `setting(...)` fields; the generator (`setting`,
`override`, `Settings.define_flags` / `from_flags`, `apply_config_file`, `parse_args`) and
the text groups (`TextSettings`, `PreTokenizerSetting`, `CorpusTextSettings`) are in the
core module `bert_tf.app.setting_fields` (import them from there). This module adds the
groups on the bert_tf library that several commands share (`ModelDirSettings`,
`OriginalTpuSettings`, `TrainingSettings`, `TaskSettings`); a command combines them, and a
default that differs for one command is a field override in that command's config
(`override`). Flag names are the original run_pretraining / run_classifier / run_squad
ones where the concept is the same (docs/contracts.md §3).

The shape of every command module (pretrain, finetune, sweep, extract_features, ...):

    from bert_tf.app import cli   # first: quiets TensorFlow before anything loads it
    from bert_tf.app import setting_fields, settings

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class FinetuneConfig(settings.TrainingSettings, settings.TaskSettings):
        predict_batch_size: int = setting_fields.setting(8, "Global prediction batch size.",
                                                         lower=1)
        ...

    def define_flags(flag_values):              # never at import
        FinetuneConfig.define_flags(flag_values)

    def run(config: FinetuneConfig): ...        # the library entry: no FLAGS

    def main(argv):
        setting_fields.apply_config_file(FLAGS)  # before reading any flag value
        run(FinetuneConfig.from_flags(FLAGS))

    if __name__ == "__main__":
        cli.run_main(main, define_flags)        # quiet start-up, one-line errors

Tests and scripts run a command in process with
`run(FinetuneConfig.from_flags(parse_args(define_flags, ["--task_name=MRPC", ...])))`.
Imports absl only (no TensorFlow); its groups import the library they name when used.
The TF-free data_prep commands use `bert_tf.app.setting_fields` alone.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable, List, Optional, Sequence, Tuple

from absl import flags

from bert_tf import tasks
from bert_tf.core.errors import UsageError
from bert_tf.app.setting_fields import Settings, TextSettings, given, override, require, setting


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
        from bert_tf.model import model_dir  # TensorFlow: not loaded by --help (0.5 s, not 9 s)

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
    if flag_values.use_tpu:
        if given(flag_values, "distribution_strategy") not in (None, "tpu"):
            raise flags.ValidationError(
                f"--use_tpu contradicts --distribution_strategy="
                f"{flag_values.distribution_strategy}; pass one of them")
        flag_values.distribution_strategy = "tpu"
    original_tpu = flag_values.tpu_name or flag_values.master
    if original_tpu:
        if flag_values.tpu and flag_values.tpu != original_tpu:
            given_as = "tpu_name" if flag_values.tpu_name else "master"
            raise flags.ValidationError(
                f"--tpu={flag_values.tpu} contradicts --{given_as}={original_tpu}; pass one "
                f"of them")
        if flag_values.distribution_strategy == "tpu":
            flag_values.tpu = original_tpu
    if flag_values.iterations_per_loop is not None:
        if given(flag_values, "steps_per_loop") not in (None, flag_values.iterations_per_loop):
            raise flags.ValidationError(
                f"--iterations_per_loop={flag_values.iterations_per_loop} contradicts "
                f"--steps_per_loop={flag_values.steps_per_loop}; pass one of them")
        flag_values.steps_per_loop = flag_values.iterations_per_loop


def _names(module: str, attribute: str) -> Callable[[], Sequence[str]]:
    """An enum's values that live beside TensorFlow: read when the flag is defined."""
    def names():
        return getattr(importlib.import_module(module), attribute)
    return names


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingSettings(ModelDirSettings, OriginalTpuSettings):
    """What pretrain and finetune share: the run's dir, batches, schedule, optimizer,
    devices. These flags are read here, once, for both commands: each part of the run
    gets the values it needs (`training_run`: the strategy, precision, seed, the
    Trainer's `loop_options`, the --output_dir; `make_optimizer`; `run_record`), and no
    part of the training library takes the config."""
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

    def schedule_settings(self) -> Tuple[dict, dict]:
        """What --output_dir records of this run's training, for a resume to be checked
        against (docs/contracts.md §6 "optimizer"): (what a resume must keep, or its updates would
        follow another schedule than its checkpoint's; what it may change, logged: how
        long to train, e.g. to stop a run early)."""
        return ({name: getattr(self, name) for name in (
                    "learning_rate", "train_batch_size", "num_warmup_steps",
                    "weight_decay_rate", "decay_from_warmup_end", "clip_norm")},
                {"num_train_steps": self.num_train_steps})

    def make_strategy(self, **factories):
        """The tf.distribute strategy of --distribution_strategy and --tpu (the original
        TPU flags mapped onto them); `factories` go to `strategy.get_strategy` (tests).
        Flags that make none (multi_worker_mirrored without TF_CONFIG, more TPU cores
        than the TPU has) raise UsageError."""
        from bert_tf.training import strategy as strategy_lib  # TensorFlow: not at --help

        try:
            return strategy_lib.get_strategy(
                self.distribution_strategy, tpu=self.tpu, tpu_zone=self.tpu_zone,
                gcp_project=self.gcp_project, num_tpu_cores=self.num_tpu_cores, **factories)
        except ValueError as e:
            raise UsageError(str(e)) from None

    def loop_options(self, strategy, *, write_summaries: bool = True,
                     handle_sigterm: bool = True,
                     termination_watcher_fn: Optional[Callable[[], bool]] = None):
        """The Trainer's `loop.LoopOptions`: these flags, --jit_compile decided for
        `strategy` (`strategy.choose_jit_compile`). The keywords are the process's, no
        flags (benchmarks and tests turn summaries and the SIGTERM handler off)."""
        from bert_tf.training import strategy as strategy_lib  # TensorFlow: not at --help
        from bert_tf.training.loop import LoopOptions

        return LoopOptions(steps_per_loop=self.steps_per_loop,
                           save_checkpoints_steps=self.save_checkpoints_steps,
                           keep_checkpoint_max=self.keep_checkpoint_max,
                           gradient_accumulation_steps=self.gradient_accumulation_steps,
                           jit_compile=strategy_lib.choose_jit_compile(self.jit_compile,
                                                                       strategy),
                           write_summaries=write_summaries, handle_sigterm=handle_sigterm,
                           termination_watcher_fn=termination_watcher_fn)

    def training_run(self, command: str):
        """The run skeleton of `command` (`training.run.training_run`, a context manager)
        with these flags' strategy, precision, seed, loop options and --output_dir."""
        from bert_tf.training import run  # TensorFlow: not at --help

        strategy = self.make_strategy()
        options = self.loop_options(strategy)
        return run.training_run(command, strategy, options, output_dir=self.output_dir,
                                overwrite=self.overwrite, mixed_precision=self.mixed_precision,
                                seed=self.seed)

    def make_optimizer(self, num_train_steps: int, num_warmup_steps: int,
                       mixed_precision: str):
        """The optimizer and schedule of these flags for that many steps
        (`optimization.create_optimizer`; `mixed_precision`: the policy the run set, a
        loss scale for mixed_float16); build it in `strategy.scope()`. Values that make
        none (e.g. --num_train_steps=0) raise UsageError."""
        from bert_tf.training import optimization  # TensorFlow: not at --help

        try:
            return optimization.create_optimizer(
                self.learning_rate, num_train_steps=num_train_steps,
                num_warmup_steps=num_warmup_steps, optimizer=self.optimizer,
                weight_decay_rate=self.weight_decay_rate,
                decay_from_warmup_end=self.decay_from_warmup_end,
                clip_norm=self.clip_norm or None, mixed_precision=mixed_precision)
        except ValueError as e:
            raise UsageError(str(e)) from None

    def run_record(self, command: str, resolved, *, task_config: Optional[dict] = None,
                   data: Optional[dict] = None):
        """The `run_record.RunRecord` --output_dir is checked against and then holds:
        these flags (their schedule as `schedule_settings` names it, when training) and
        `resolved`, the model dir (`model_dir.resolve`); `task_config`, `data`: the task
        and the training data read."""
        from bert_tf.model import run_record  # TensorFlow: not at --help

        trains = self.do_train
        schedule, length = self.schedule_settings() if trains else (None, None)
        return run_record.RunRecord(
            command, resolved.config, resolved.vocab_file, resolved.text,
            self.optimizer if trains else None, self.max_seq_length, task_config,
            schedule, length, data=data if trains else None)

    def check_output_dir(self, run, resolved, *, inputs, task_config: Optional[dict] = None,
                         data: Optional[dict] = None, length_may_change: bool = False):
        """`run` (a `training_run`) checks --output_dir against this run's record
        (`run_record`) before anything is written there: `inputs`, the data files read
        (never inside or around --output_dir); the model files are `resolved`'s vocab and
        --bert_config_file. Returns `TrainingRun.check`'s note."""
        return run.check(self.run_record(run.command, resolved, task_config=task_config,
                                         data=data),
                         init_checkpoint=self.init_checkpoint,
                         model_files=[resolved.vocab_file, self.bert_config_file],
                         inputs=inputs, length_may_change=length_may_change)

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
        "swag, squad; nsmc, korsts, kornli, klue-nli, klue-sts, klue-ner, klue-ynat; or "
        "your own files: classification, regression, token_classification.")
    data_dir: Optional[str] = setting(
        None, "The task's data directory (GLUE tsv files, CoNLL-2003 eng.* files, SWAG csv "
        "files, the Korean tasks' official files).")
    train_file: Optional[str] = setting(
        None, "Training data file (SQuAD; your own data: .tsv/.txt, .csv, .json, .jsonl); "
        "overrides --data_dir's.")
    validation_file: Optional[str] = setting(
        None, "Dev data file that --do_eval scores; overrides --data_dir's.")
    test_file: Optional[str] = setting(
        None, "Test data file that --do_predict predicts into OUTPUT_DIR/predictions.tsv "
        "(.jsonl for JSON input); overrides --data_dir's.")
    predict_file: Optional[str] = setting(
        None, "Dev/predict file (SQuAD); overrides --data_dir's.")
    text_column: Optional[str] = setting(
        None, "Your own data: the text's column (header name or JSON key; default text; "
        "token_classification: tokens).")
    text_b_column: Optional[str] = setting(
        None, "Your own data: the second text's column, for sentence pairs.")
    label_column: Optional[str] = setting(
        None, "Your own data: the label's column (default label; token_classification: "
        "tags). A JSON key may be a path: labels.real-label.")
    id_column: Optional[str] = setting(
        None, "Your own data: the column whose value names each row in the predictions "
        "(default: id or guid when the file has one).")
    label_list: List[str] = setting(
        [], "Your own data: the labels in their order (comma-separated); default: the "
        "sorted labels of --train_file.")
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
        require(flag_values, ["task_name"])
        tasks.canonical_task_name(flag_values.task_name)
        return super().from_flags(flag_values, **values)

    @property
    def task(self):
        """The `tasks.TaskSpec` these settings name."""
        # An empty list flag is "not given" (the task's own labels).
        options = {name: getattr(self, name) or None if name == "label_list"
                   else getattr(self, name) for name in TASK_OPTION_FLAGS}
        return tasks.TaskSpec(self.task_name, self.data_dir, self.train_file,
                              self.predict_file, options, self.validation_file,
                              self.test_file)


# The task's options (`Task.option_names`): TaskSettings' flags after its data's.
TASK_DATA_FLAGS = ("task_name", "data_dir", "train_file", "validation_file", "test_file",
                   "predict_file")
TASK_OPTION_FLAGS: List[str] = [f.name for f in dataclasses.fields(TaskSettings)
                                if f.name not in TASK_DATA_FLAGS]
