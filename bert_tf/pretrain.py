r"""Pretrains BERT (masked LM + next sentence) on create_pretraining_data records.

Flags as the original run_pretraining.py (docs/contracts.md §3), plus --config_file,
--distribution_strategy, --tpu, --mixed_precision, --steps_per_loop, --optimizer,
--gradient_accumulation_steps. Rerunning the same command resumes from the latest
checkpoint in --output_dir (the log says `resumed from step N`).

Example (phase 1 then phase 2 of BERT-base, the paper's schedule):

    python -m bert_tf.pretrain \
      --config_file=official_configs/pretraining/bert_base_phase1.yaml \
      --input_file='gs://bucket/records_128/*' --output_dir=gs://bucket/phase1 \
      --distribution_strategy=tpu --tpu=my-tpu
    python -m bert_tf.pretrain \
      --config_file=official_configs/pretraining/bert_base_phase2.yaml \
      --input_file='gs://bucket/records_512/*' --output_dir=gs://bucket/phase2 \
      --init_checkpoint=gs://bucket/phase1 --distribution_strategy=tpu --tpu=my-tpu
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

from absl import flags, logging

from bert_tf.app import cli  # first: quiets TensorFlow before anything loads it
import tensorflow as tf  # after cli, as every import below that loads TensorFlow
from bert_tf.app import setting_fields, settings
from bert_tf.app.setting_fields import setting
from bert_tf.core.constants import PRETRAINING_HEADS
from bert_tf.core.errors import UsageError
from bert_tf.data.pretraining import pretraining_dataset
from bert_tf.data.records import RecordFiles, list_record_files
from bert_tf.model import model_dir
from bert_tf.model.pretrainer import BertPretrainer
from bert_tf.training import losses

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True, kw_only=True)
class PretrainConfig(setting_fields.PreTokenizerSetting, settings.TrainingSettings):
    """One pretraining run (what the flags say): the trainers' settings, --pre_tokenizer
    (only recorded: records hold ids) and pretraining's own."""
    input_file: Optional[str] = setting(None, "Comma-separated globs of pretraining records.")
    eval_input_file: Optional[str] = setting(None, "Records for --do_eval (default: "
                                             "--input_file, as the original).")
    max_predictions_per_seq: int = setting(20, "Masked positions per record.", lower=1)
    max_eval_steps: int = setting(100, "Evaluation batches.", lower=1)
    eval_every_steps: int = setting(
        0, "With --do_train: also evaluate on --eval_input_file at step 0 and every this "
        "many steps (TensorBoard curve under OUTPUT_DIR/eval); 0: only at the end, with "
        "--do_eval.", lower=0)
    seed: Optional[int] = setting(None, "Seed for the input pipeline's shuffles "
                                  "(reproducible order), the dropout masks and Keras "
                                  "initialisers.")

    @classmethod
    def from_flags(cls, flag_values: flags.FlagValues = FLAGS) -> "PretrainConfig":
        setting_fields.require(flag_values, ["output_dir", "input_file"])
        if not (flag_values.do_train or flag_values.do_eval):
            raise UsageError("at least one of --do_train and --do_eval must be set")
        return super().from_flags(flag_values)


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines the command's flags: `PretrainConfig`'s."""
    PretrainConfig.define_flags(flag_values)


def _resolve_model_dir(config: PretrainConfig):
    """Config, vocab and text settings (`model_dir.resolve`: the flags, then
    --init_checkpoint's dir, then --output_dir's, then the vocab's casing)."""
    resolved = config.resolve(config.output_dir).require(config=True)
    resolved.check_max_seq_length(config.max_seq_length)
    vocab, model_config = resolved.vocab_file, resolved.config
    if vocab:
        with tf.io.gfile.GFile(vocab, "rb") as f:
            size = sum(1 for _ in f)
        if size > model_config.vocab_size:
            # Ids past the embedding table fail on CPU but read zeros on GPU/TPU.
            raise UsageError(
                f"--vocab_file={vocab} has {size} tokens but the config's vocab_size is "
                f"{model_config.vocab_size}: set vocab_size to {size} in the model config")
    else:
        logging.warning("no --vocab_file: OUTPUT_DIR will hold no vocab.txt, which finetune "
                        "and export_model need (pass the vocab the records were made with)")
    return resolved


def run(config: PretrainConfig) -> None:
    """Trains and/or evaluates as `config` says. Raises errors.Preempted after SIGTERM
    (checkpoint written: the same command resumes)."""

    with config.training_run("pretrain") as skeleton:
        _run(config, skeleton)


def _run(config: PretrainConfig, run) -> None:
    """`run` inside the run skeleton (`training.run.TrainingRun`), which gets from the
    config only the values it needs."""
    resolved = _resolve_model_dir(config)
    # docs/contracts.md §6: --output_dir is checked before anything is written there, and written
    # only once the records were found and the start point restored.
    note = config.check_output_dir(run, resolved, data={"input_file": config.input_file},
                                   inputs=[*_patterns(config.input_file),
                                           *_patterns(config.eval_input_file)],
                                   length_may_change=True)
    if config.do_train:
        list_record_files(config.input_file)  # no records: one line, nothing written
    with run.strategy.scope():
        model = BertPretrainer(resolved.config, name="pretrainer")
        optimizer = config.make_optimizer(config.num_train_steps, config.num_warmup_steps,
                                          run.mixed_precision)
    trainer, step = run.start(
        model, losses.pretraining_loss_and_metrics, optimizer,
        functools.partial(_initialize, model, resolved),
        metrics_finalizer=losses.finalize_pretraining_metrics,
        label_fn=losses.add_global_mlm_weight)
    if note:
        logging.info("%s", note)
        if config.do_train and step >= config.num_train_steps:
            raise UsageError(
                f"--output_dir={config.output_dir} is at step {step}, which already reaches "
                f"--num_train_steps={config.num_train_steps}: nothing to train at the new "
                f"--max_seq_length; pass a larger --num_train_steps to continue its step "
                f"count, or another --output_dir with --init_checkpoint={config.output_dir} "
                f"for a phase of its own")
    # output_dir is a model dir from the start: --init_checkpoint=OUTPUT_DIR works.
    run.write_record()

    def dataset_fn(records: RecordFiles, global_batch, training):
        def make(ctx: tf.distribute.InputContext):
            # records.paths(): a damaged file is replaced by a sound copy once
            # --skip_corrupt_records has met it (Trainer rebuilds the pipeline).
            return pretraining_dataset(
                records.paths(), config.max_seq_length, config.max_predictions_per_seq,
                ctx.get_per_replica_batch_size(global_batch), is_training=False,
                input_context=ctx)

        def make_training(ctx: tf.distribute.InputContext, position):
            # The Trainer's position: the recorded seed and the step to continue from
            # (resuming counts the records once to skip whole epochs; counting first,
            # as it may replace a damaged file by its sound copy in paths()).
            counts = records.record_counts() if position.step else None
            return pretraining_dataset(
                records.paths(), config.max_seq_length, config.max_predictions_per_seq,
                ctx.get_per_replica_batch_size(global_batch), is_training=True,
                input_context=ctx, position=position, records_per_file=counts)
        return make_training if training else make

    # Made once, when first needed: the held-out curve during training and the final
    # evaluation share its file list and any copies --skip_corrupt_records made.
    @functools.lru_cache(maxsize=None)
    def eval_record_files() -> RecordFiles:
        return RecordFiles(config.eval_input_file or config.input_file,
                           config.skip_corrupt_records, should_stop=trainer.stop_requested)

    if config.do_train:
        records = RecordFiles(config.input_file, config.skip_corrupt_records,
                              should_stop=trainer.stop_requested)
        held_out = {}
        if config.eval_every_steps > 0:  # a held-out curve while training
            eval_records = eval_record_files()
            held_out = dict(eval_dataset_fn=dataset_fn(eval_records, config.eval_batch_size,
                                                       False),
                            eval_every_steps=config.eval_every_steps,
                            eval_steps=config.max_eval_steps,
                            eval_on_data_loss=eval_records.handle_data_loss)
        result = trainer.train(dataset_fn(records, config.train_batch_size, True),
                               config.train_batch_size, config.num_train_steps,
                               on_data_loss=records.handle_data_loss,
                               input_seed=config.seed, **held_out)
        if records.skipped_records:
            logging.warning("--skip_corrupt_records: skipped %d damaged record(s) while "
                            "training", records.skipped_records)
        trainer.raise_if_preempted(result)
    if config.do_eval:
        eval_records = eval_record_files()
        trainer.evaluate(dataset_fn(eval_records, config.eval_batch_size, False),
                         num_steps=config.max_eval_steps,
                         on_data_loss=eval_records.handle_data_loss)
    run.finish()  # --overwrite's earlier run goes


def _initialize(model, resolved):
    """The start point (called by the Trainer only when --output_dir has nothing to resume):
    --init_checkpoint's encoder, and its pretraining heads when it has them (a converted
    or pretrained dir; a fine-tuned one gives the encoder only). None: random weights."""
    if not resolved.path:
        return None
    return model_dir.restore_start_point(resolved, model.checkpoint_items(),
                                         optional=PRETRAINING_HEADS)


def _patterns(value: Optional[str]) -> list:
    """The comma-separated globs of a records flag."""
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def main(argv):
    del argv  # cli.run_main refuses positional arguments
    setting_fields.apply_config_file(FLAGS)
    run(PretrainConfig.from_flags(FLAGS))  # BertTfError: one line from cli.run_main


if __name__ == "__main__":
    cli.run_main(main, define_flags)
