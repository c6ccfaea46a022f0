r"""Fine-tunes, evaluates and predicts one task: `python -m bert_tf.finetune --task_name=NAME`.

Tasks: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI (GLUE), conll2003 (NER),
swag, squad; the Korean nsmc, korsts, kornli, klue-nli, klue-sts, klue-ner, klue-ynat; and
the user's own files: classification, regression, token_classification (--train_file,
--validation_file, --test_file, --text_column, --label_column, ...: tasks/classification.py,
tasks/token_classification.py). Flags keep the original run_classifier / run_squad names
(docs/contracts.md §3).

    python -m bert_tf.finetune --task_name=MRPC --data_dir=glue/MRPC \
        --init_checkpoint=converted_base/ --do_train --do_eval --do_predict \
        --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 \
        --num_train_epochs=3 --output_dir=out/mrpc

`--init_checkpoint=DIR` is a dir written by convert_checkpoint, pretrain or finetune; its
bert_config.json, vocab.txt and casing are used unless --bert_config_file, --vocab_file,
--do_lower_case say otherwise. A model pretrained on text pre-split by --pre_tokenizer=kiwi
gets the task's text split the same way (tasks/pre_split.py; give the files as written). A DIR fine-tuned on the same task also gives its head
(evaluate or continue training it); any other DIR gives the encoder and the head starts
fresh. A rerun with the same --output_dir resumes from its latest checkpoint (logged).

Features are computed on the fly from --data_dir; for TPU runs write training records
once with `python -m data_prep.create_finetuning_data` and pass them as --input_file.

Outputs in --output_dir: checkpoints + bert_config.json, vocab.txt, tokenizer_config.json,
task_config.json (a model dir that export_model and --init_checkpoint accept),
eval_results.json (--do_eval: the task's official metrics) and the prediction files
(--do_predict: GLUE's <TASK>.tsv from test.tsv, predictions.tsv / .jsonl for the
user's files and the Korean tasks, ...).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import Callable, Dict, Optional, Sequence

from absl import flags, logging

from bert_tf.app import cli  # first: quiets TensorFlow before anything loads it
import tensorflow as tf  # after cli, as every import below that loads TensorFlow
from bert_tf import tasks
from bert_tf.app import setting_fields, settings
from bert_tf.app.setting_fields import setting
from bert_tf.core.constants import ENCODER, TASK_HEAD
from bert_tf.core.errors import BertTfError
from bert_tf.data import finetuning as data_lib
from bert_tf.data.records import RecordFiles
from bert_tf.model import model_dir
from bert_tf.model.encoder import BertEncoder
from bert_tf.tasks.pre_split import host_tokenizer
from bert_tf.training.strategy import needs_static_shapes

FLAGS = flags.FLAGS


class FinetuneError(BertTfError, RuntimeError):
    """A problem the user fixes with a flag or a file; printed without a traceback."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class FinetuneConfig(settings.TrainingSettings, settings.TaskSettings):
    """One fine-tuning run (what the flags say): the trainers' settings, the task's and
    fine-tuning's own. `max_seq_length` None: the task's own (`Task.sequence_length`),
    which `run` puts in the config once the task is made."""
    # Epochs and a warmup proportion decide the steps unless these are given.
    num_train_steps: Optional[int] = setting_fields.override(settings.TrainingSettings,
                                                             "num_train_steps", None)
    num_warmup_steps: Optional[int] = setting_fields.override(settings.TrainingSettings,
                                                              "num_warmup_steps", None)
    max_seq_length: Optional[int] = setting_fields.override(
        settings.TrainingSettings, "max_seq_length", None,
        help="Sequence length of the features. Default: the task's (384 for squad, as "
        "run_squad; 128 for the others).")
    # Adam as the paper states it (bias-corrected). The original code's AdamWeightDecay
    # skips the correction, so its first few hundred updates are 2-6x larger: in short
    # fine-tunes that swings the score by seed (weak-regime SQuAD F1 15 and 34 for two
    # seeds, 39 with the correction; benchmarks/README.md). --optimizer=adamw keeps it.
    optimizer: str = setting_fields.override(
        settings.TrainingSettings, "optimizer", "adamw_bias_correction",
        help="adamw_bias_correction: Adam with bias correction and decoupled weight decay "
        "(the paper's Adam; transformers' AdamW); adamw: the original code's "
        "AdamWeightDecay (no bias correction); lamb.")
    # transformers' schedule (get_linear_schedule_with_warmup), which our GLUE, CoNLL and
    # SQuAD parity runs use: the original's decay from step 0 leaves the rate 10% lower
    # after warmup (warmup 0.1), which a short fine-tune feels.
    decay_from_warmup_end: bool = setting_fields.override(
        settings.TrainingSettings, "decay_from_warmup_end", True,
        help="Decay the learning rate linearly from the end of warmup to 0 (transformers' "
        "schedule); --nodecay_from_warmup_end: from step 0, as the original run_classifier.")
    input_file: Optional[str] = setting(
        None, "Training records from data_prep.create_finetuning_data (comma-separated "
        "globs); default: features computed from --data_dir.")
    do_predict: bool = setting(False, "Predict the test split and write the task's files.")
    predict_batch_size: int = setting(8, "Global prediction batch size.", lower=1)
    num_train_epochs: float = setting(3.0, "Epochs over the training data.", lower=0.0)
    warmup_proportion: float = setting(0.1, "Share of training with linear warmup.",
                                       lower=0.0, upper=1.0)
    seed: Optional[int] = setting(12345, "Seed of the initializers, dropout and data "
                                  "shuffling.")
    max_train_examples: Optional[int] = setting(
        None, "Use only the first N training examples (quick runs, benchmarks).", lower=1)
    max_eval_examples: Optional[int] = setting(None, "Use only the first N dev examples.",
                                               lower=1)
    length_bucketing: bool = setting(
        True, "Batch rows of similar length (training and prediction), each batch cut to "
        "one of a few fixed lengths (off on TPUs); --nolength_bucketing pads every batch "
        "to --max_seq_length.")

    def schedule_settings(self):
        """As TrainingSettings', with fine-tuning's own: the epochs, and the warmup share
        and example cap where they count (not beside --num_warmup_steps, --input_file:
        a rerun that only adds one of those has the same schedule)."""
        schedule, length = super().schedule_settings()
        if self.num_warmup_steps is None:
            schedule["warmup_proportion"] = self.warmup_proportion
        if not self.input_file:
            schedule["max_train_examples"] = self.max_train_examples
        return schedule, dict(length, num_train_epochs=self.num_train_epochs)

    def length_buckets(self, strategy, jit_compile: bool) -> Optional[Sequence[int]]:
        """The few fixed batch lengths rows are grouped into, or None (padded to
        max_seq_length): off with --nolength_bucketing and on TPUs (one static shape);
        fewer, coarser lengths when the step is XLA-compiled (once per length). Training
        and prediction both take these (the one place that decides)."""
        if not self.length_bucketing or needs_static_shapes(strategy):
            return None
        return data_lib.batch_bucket_lengths(self.max_seq_length, compiled=jit_compile)

    @classmethod
    def from_flags(cls, flag_values: flags.FlagValues = FLAGS) -> "FinetuneConfig":
        setting_fields.require(flag_values, ["task_name", "output_dir"])
        return super().from_flags(flag_values)


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines the command's flags: `FinetuneConfig`'s."""
    FinetuneConfig.define_flags(flag_values)


def run(config: FinetuneConfig) -> Dict:
    """The whole command; returns the eval results (empty without --do_eval).

    Raises errors.Preempted after SIGTERM (checkpoint written: rerun to resume).
    """
    if not (config.do_train or config.do_eval or config.do_predict):
        raise FinetuneError("nothing to do: pass --do_train, --do_eval and/or --do_predict")

    with config.training_run("finetune") as skeleton:
        return _run(config, skeleton)


def _run(config: FinetuneConfig, run) -> Dict:
    """`run` inside the run skeleton (`training.run.TrainingRun`: the strategy is made
    first, as the tokenizer below runs TensorFlow ops). The config is read here and in
    the functions below, which hand the library the values it needs."""
    strategy = run.strategy
    resolved = _resolve_model_dir(config)
    # The model's pre-tokenizer (kiwi) splits the task's text first, as pretraining's.
    task = tasks.make_task(config.task.task_name, host_tokenizer(resolved),
                           **config.task.task_arguments(config.max_seq_length,
                                                        resolved.task_config))
    config = dataclasses.replace(config, max_seq_length=task.max_seq_length)
    # docs/contracts.md §6: --output_dir is checked before anything is written there, and written
    # only once the inputs were read and the start point restored.
    config.check_output_dir(run, resolved, task_config=task.task_config(),
                            data=_data_read(config),
                            inputs=[config.task.data_dir, *config.task.files().values(),
                                    *(config.input_file or "").split(",")])
    with strategy.scope():
        model = task.build_model(BertEncoder(resolved.config, name=ENCODER))
    buckets = config.length_buckets(strategy, run.options.jit_compile)
    training = _training_data(config, task) if config.do_train else None
    with strategy.scope():
        optimizer = config.make_optimizer(training.num_steps if training else 1,
                                          training.num_warmup_steps if training else 0,
                                          run.mixed_precision)
    # A rerun continues from --output_dir's checkpoint; else the start point is restored,
    # before the features are converted (a checkpoint that does not fit fails first).
    trainer, step = run.start(
        model, lambda labels, outputs: task.loss(labels, outputs), optimizer,
        functools.partial(_initialize, config, task, model, resolved),
        tokens_per_example=task.num_choices * config.max_seq_length)
    if training and training.records:  # long record copies end on a stop request
        training.records.should_stop = trainer.stop_requested
    dataset_fn = _training_dataset_fn(config, task, training, buckets) if training else None
    run.write_record()  # one writer per cluster (workers share --output_dir)
    train_speed = _train(config, task, trainer, training, dataset_fn, step) if training else {}
    results = {}
    if config.do_eval:
        results = _evaluate(config, task, trainer, buckets, train_speed)
    if config.do_predict:
        _predict(config, task, trainer, buckets)
    run.finish()  # --overwrite's earlier run goes
    return results


def _data_read(config: FinetuneConfig) -> Optional[dict]:
    """What a training run reads, recorded so a resume on other data says so."""
    if not config.do_train:
        return None
    if config.input_file:
        return {"input_file": config.input_file}
    train_file = config.task.files().get("train")
    return {"train_file": train_file} if train_file else {"data_dir": config.task.data_dir}


def _resolve_model_dir(config: FinetuneConfig):
    """Config, vocab and casing (`model_dir.resolve`): the flags, then --init_checkpoint's
    dir, then --output_dir's (a rerun that resumes), then the vocab's casing."""
    resolved = config.resolve(config.output_dir).require(config=True, vocab=True)
    resolved.check_max_seq_length(config.max_seq_length)
    if resolved.text.pre_tokenizer:
        logging.info("%s was pretrained on text pre-split by --pre_tokenizer=%s: the task's "
                     "text is split the same way (give it as written)",
                     config.init_checkpoint or config.output_dir, resolved.text.pre_tokenizer)
    return resolved


def _initialize(config: FinetuneConfig, task, model, resolved):
    """The start point (the Trainer calls it only when --output_dir holds nothing to
    resume): `Task.initialize`, and the refusal of a run that would score random weights."""
    start = task.initialize(model, resolved)
    if start is None:
        if not config.do_train:
            raise FinetuneError(f"no checkpoint in --output_dir={config.output_dir} and "
                                f"no --init_checkpoint: nothing to evaluate")
        logging.warning("no --init_checkpoint: fine-tuning from random weights")
    elif not config.do_train and TASK_HEAD not in start.children:
        raise FinetuneError(
            f"--init_checkpoint={config.init_checkpoint} holds no {task.name} head (it "
            f"is a pretrained or converted model, or was fine-tuned on another task): "
            f"--do_eval/--do_predict without --do_train would score a random head; add "
            f"--do_train, or pass the output dir of a {task.name} fine-tuning run")
    return start


@dataclasses.dataclass
class _TrainingData:
    """The training input, read as far as planning the run needs: how many examples,
    the steps, and the examples (--data_dir; `_training_dataset_fn` converts them) or the
    records (--input_file, counted, with their damaged-record handler)."""
    num_examples: int
    num_steps: int
    num_warmup_steps: int
    examples: Optional[list] = None
    records: Optional[object] = None  # RecordFiles (--input_file)


def _training_data(config: FinetuneConfig, task) -> _TrainingData:
    examples = records = None
    if config.input_file:
        records = RecordFiles(config.input_file, config.skip_corrupt_records)
        num_examples = _check_records(config, records, task.feature_spec())
    else:
        examples = _examples(task, "train", config.max_train_examples)
        num_examples = len(examples)
    # Steps from the example count, as run_classifier / run_squad compute them (SQuAD's
    # doc-stride windows are more features than examples; records count features).
    num_steps = config.num_train_steps or max(1, int(
        num_examples / config.train_batch_size * config.num_train_epochs))
    warmup = (config.num_warmup_steps if config.num_warmup_steps is not None
              else int(num_steps * config.warmup_proportion))
    return _TrainingData(num_examples, num_steps, warmup, examples, records)


def _training_dataset_fn(config: FinetuneConfig, task, training: _TrainingData,
                         buckets) -> Callable:
    """The Trainer's `dataset_fn(ctx, position)` (position: where the Trainer resumes):
    the records, or the examples converted to features here."""
    if training.records is not None:
        records, spec = training.records, task.feature_spec()

        def dataset_fn(ctx, position):
            batch = ctx.get_per_replica_batch_size(config.train_batch_size)
            counts = records.record_counts()  # first: it may swap in a sound copy
            return data_lib.record_dataset(records.paths(), spec, batch, True, ctx,
                                           length_buckets=buckets, position=position,
                                           records_per_file=counts,
                                           group_by_length=not task.rows_share_text)
        return dataset_fn
    start = time.time()
    features = task.convert_examples(training.examples, "train")
    logging.info("%d training examples -> %d features in %.1fs", len(training.examples),
                 len(features["input_word_ids"]), time.time() - start)

    def dataset_fn(ctx, position):
        batch = ctx.get_per_replica_batch_size(config.train_batch_size)
        return data_lib.array_dataset(features, task.label_names, batch, True, ctx,
                                      length_buckets=buckets, position=position,
                                      group_by_length=not task.rows_share_text)
    return dataset_fn


def _check_records(config: FinetuneConfig, records, spec) -> int:
    """Counts the records (`RecordFiles`: damaged ones are named, or skipped with
    --skip_corrupt_records) and checks that the first one has the task's layout."""
    files = records.paths()
    try:
        next(iter(data_lib.record_dataset(files[0], spec, 1, is_training=False)))
    except (tf.errors.InvalidArgumentError, StopIteration) as e:
        layout = {k: list(shape) for k, (shape, _) in spec.items()}
        raise FinetuneError(
            f"{files[0]}: not records of this task at --max_seq_length="
            f"{config.max_seq_length} (expected features {layout}); rewrite them with "
            f"data_prep.create_finetuning_data and the same flags "
            f"({str(e).splitlines()[0][:200] if str(e) else 'empty file'})") from None
    return records.count_records()


def _examples(task, split, limit):
    examples = task.get_examples(split)
    return examples[:limit] if limit else examples


def _train(config: FinetuneConfig, task, trainer, training: _TrainingData, dataset_fn,
           step: int) -> dict:
    """Trains to the planned step; returns the speed figures eval_results.json records."""
    logging.info("training %s: %d examples, %d steps of %d, %d warmup, from step %d",
                 task.name, training.num_examples, training.num_steps,
                 config.train_batch_size, training.num_warmup_steps, step)
    start, cpu_start = time.time(), time.process_time()
    on_data_loss = training.records.handle_data_loss if training.records else None
    result = trainer.train(dataset_fn, config.train_batch_size, training.num_steps,
                           on_data_loss=on_data_loss, input_seed=config.seed)
    seconds, cpu_seconds = time.time() - start, time.process_time() - cpu_start
    trained = result["step"] - step
    speed = trained * config.train_batch_size / max(seconds, 1e-9)
    logging.info("trained %d steps in %.1fs (%.2f examples/s)", trained, seconds, speed)
    trainer.raise_if_preempted(result)
    # examples/s of the last loop: steady state when there was more than one loop
    # (the first one includes tracing the step function).
    return {"train_seconds": seconds, "train_cpu_seconds": cpu_seconds,
            "train_steps": trained, "train_examples_per_second": speed,
            "train_examples_per_second_last_loop": result.get("examples_per_second", 0.0)}


def _evaluate(config: FinetuneConfig, task, trainer, buckets, train_speed) -> dict:
    """The task's official metrics on dev -> OUTPUT_DIR/eval_results.json + predictions."""
    examples = _examples(task, "dev", config.max_eval_examples)
    features = task.convert_examples(examples, "dev")
    start = time.time()
    outputs = trainer.predict(features, config.eval_batch_size, length_buckets=buckets)
    eval_seconds = time.time() - start
    predictions = task.postprocess(outputs, features, examples)
    results = dict(task.evaluate(predictions, examples))
    if all(k in features for k in task.label_names):
        results["eval_loss"] = float(task.loss(features, outputs))
    results.update(global_step=int(trainer.step.numpy()), eval_examples=len(examples),
                   eval_seconds=eval_seconds, **train_speed)
    logging.info("eval %s: %s", task.name,
                 " ".join(f"{k} {v:.4g}" for k, v in sorted(results.items())))
    if trainer.is_chief:
        model_dir.write_eval_results(config.output_dir, results)
        directory = os.path.join(config.output_dir, "eval_predictions")
        tf.io.gfile.makedirs(directory)
        task.write_predictions(predictions, examples, directory)
    return results


def _predict(config: FinetuneConfig, task, trainer, buckets) -> None:
    """The test split -> the task's prediction files (GLUE: <TASK>.tsv) in --output_dir."""
    examples = task.get_examples("test")
    features = task.convert_examples(examples, "test")
    outputs = trainer.predict(features, config.predict_batch_size, length_buckets=buckets)
    predictions = task.postprocess(outputs, features, examples)
    if trainer.is_chief:
        paths = task.write_predictions(predictions, examples, config.output_dir)
        logging.info("wrote %s", ", ".join(paths))


def main(argv):
    del argv  # cli.run_main refuses positional arguments
    setting_fields.apply_config_file(FLAGS)
    run(FinetuneConfig.from_flags(FLAGS))  # BertTfError: one line from cli.run_main


if __name__ == "__main__":
    cli.run_main(main, define_flags)
