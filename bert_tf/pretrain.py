r"""Pretrains BERT (masked LM + next sentence) on create_pretraining_data records.

Flags as the original run_pretraining.py (DESIGN 2.3), plus --config_file,
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

import functools
import sys

from absl import app, flags, logging

from bert_tf import cli  # first: quiets TensorFlow before flags_common loads it
from bert_tf import flags_common, text_flags

flags_common.define_common_flags()
text_flags.define_pre_tokenizer_flag()  # only recorded: records hold ids already
flags.DEFINE_string("input_file", None, "Comma-separated globs of pretraining records.")
flags.DEFINE_string("eval_input_file", None, "Records for --do_eval (default: --input_file, "
                    "as the original).")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per record.")
flags.DEFINE_integer("max_eval_steps", 100, "Evaluation batches.")
flags.DEFINE_integer("eval_every_steps", 0, "With --do_train: also evaluate on "
                     "--eval_input_file at step 0 and every this many steps (TensorBoard "
                     "curve under OUTPUT_DIR/eval); 0: only at the end, with --do_eval.")
flags.DEFINE_integer("seed", None, "Seed for the input pipeline's shuffles (reproducible "
                     "order) and Keras initialisers.")
FLAGS = flags.FLAGS

EXIT_PREEMPTED = 143  # 128 + SIGTERM: schedulers read it as "terminated, restart me"


def _resolve_config_and_vocab():
    from bert_tf import model_dir
    from bert_tf.config import BertConfig

    config = None
    if FLAGS.bert_config_file:
        config = BertConfig.from_file(FLAGS.bert_config_file)
    elif FLAGS.init_checkpoint:
        config = model_dir.find_config(FLAGS.init_checkpoint)
    if config is None:
        raise flags.ValidationError("--bert_config_file is required (or an --init_checkpoint "
                                    "directory holding bert_config.json)")
    if FLAGS.max_seq_length > config.max_position_embeddings:
        raise flags.ValidationError(
            f"--max_seq_length={FLAGS.max_seq_length} exceeds the config's "
            f"max_position_embeddings={config.max_position_embeddings}")
    vocab = FLAGS.vocab_file
    if not vocab and FLAGS.init_checkpoint:
        vocab = model_dir.find_vocab(FLAGS.init_checkpoint)
    if vocab:
        import tensorflow as tf

        if not tf.io.gfile.exists(vocab):
            raise flags.ValidationError(f"--vocab_file={vocab}: no such file")
        with tf.io.gfile.GFile(vocab, "rb") as f:
            size = sum(1 for _ in f)
        if size > config.vocab_size:
            # Ids past the embedding table fail on CPU but read zeros on GPU/TPU.
            raise flags.ValidationError(
                f"--vocab_file={vocab} has {size} tokens but the config's vocab_size is "
                f"{config.vocab_size}: set vocab_size to {size} in the model config")
    else:
        logging.warning("no --vocab_file: OUTPUT_DIR will hold no vocab.txt, which finetune "
                        "and export_model need (pass the vocab the records were made with)")
    # Casing and accents: the flag when given, else the init dir's (continuing a cased
    # model keeps it cased), else the flag's default (accents: inferred from the vocab).
    text = model_dir.resolve_text_settings(
        [FLAGS.init_checkpoint], vocab,
        do_lower_case=FLAGS.do_lower_case if FLAGS["do_lower_case"].present else None,
        strip_accents=FLAGS.strip_accents, pre_tokenizer=FLAGS.pre_tokenizer,
        fallback_lower_case=FLAGS.do_lower_case)
    return config, vocab, text


def run():
    """Builds everything from FLAGS and trains/evaluates; returns the process exit code."""
    import keras
    import tensorflow as tf

    from bert_tf import model_dir
    from bert_tf.data.pretraining import RecordFiles, pretraining_dataset
    from bert_tf.models import BertPretrainer
    from bert_tf.training import losses, optimization
    from bert_tf.training.loop import Trainer

    flags_common.require(FLAGS, ["output_dir", "input_file"])
    if not (FLAGS.do_train or FLAGS.do_eval):
        raise flags.ValidationError("at least one of --do_train and --do_eval must be set")
    strategy = flags_common.strategy_from_flags(FLAGS)
    config, vocab, text = _resolve_config_and_vocab()
    if FLAGS.seed is not None:
        keras.utils.set_random_seed(FLAGS.seed)
    if FLAGS.mixed_precision != "float32":
        keras.mixed_precision.set_global_policy(FLAGS.mixed_precision)
    with strategy.scope():
        model = BertPretrainer(config, name="pretrainer")
        optimizer = optimization.create_optimizer(
            FLAGS.learning_rate, FLAGS.num_train_steps, FLAGS.num_warmup_steps,
            optimizer=FLAGS.optimizer, weight_decay_rate=FLAGS.weight_decay_rate,
            decay_from_warmup_end=FLAGS.decay_from_warmup_end,
            clip_norm=FLAGS.clip_norm or None, mixed_precision=FLAGS.mixed_precision)
    trainer = Trainer(
        model, losses.pretraining_loss_and_metrics, optimizer, strategy,
        output_dir=FLAGS.output_dir,
        metrics_finalizer=losses.finalize_pretraining_metrics,
        label_fn=losses.add_global_mlm_weight,
        checkpoint_items={"encoder": model.encoder, "masked_lm": model.masked_lm,
                          "next_sentence": model.next_sentence},
        steps_per_loop=FLAGS.steps_per_loop, save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        max_checkpoints_to_keep=FLAGS.keep_checkpoint_max,
        gradient_accumulation_steps=FLAGS.gradient_accumulation_steps,
        jit_compile=FLAGS.jit_compile)
    if trainer.is_chief:
        # output_dir is a model dir from the start: --init_checkpoint=OUTPUT_DIR works.
        model_dir.write_metadata(FLAGS.output_dir, config, vocab_file=vocab,
                                 do_lower_case=text.do_lower_case,
                                 strip_accents=text.strip_accents,
                                 pre_tokenizer=text.pre_tokenizer)
    trainer.restore_or_initialize(
        FLAGS.init_checkpoint, init_required={"encoder": model.encoder},
        init_optional={"masked_lm": model.masked_lm, "next_sentence": model.next_sentence})

    def dataset_fn(records: RecordFiles, global_batch, training):
        def make(ctx: tf.distribute.InputContext):
            # records.paths(): a damaged file is replaced by a sound copy once
            # --skip_corrupt_records has met it (Trainer rebuilds the pipeline).
            return pretraining_dataset(
                records.paths(), FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
                ctx.get_per_replica_batch_size(global_batch), is_training=training,
                input_context=ctx, seed=FLAGS.seed)
        return make

    # Made once, when first needed: the held-out curve during training and the final
    # evaluation share its file list and any copies --skip_corrupt_records made.
    @functools.lru_cache(maxsize=None)
    def eval_record_files() -> RecordFiles:
        return RecordFiles(FLAGS.eval_input_file or FLAGS.input_file, FLAGS.skip_corrupt_records)

    if FLAGS.do_train:
        records = RecordFiles(FLAGS.input_file, FLAGS.skip_corrupt_records)
        held_out = {}
        if FLAGS.eval_every_steps > 0:  # a held-out curve while training
            eval_records = eval_record_files()
            held_out = dict(eval_dataset_fn=dataset_fn(eval_records, FLAGS.eval_batch_size,
                                                       False),
                            eval_every_steps=FLAGS.eval_every_steps,
                            eval_steps=FLAGS.max_eval_steps,
                            eval_on_data_loss=eval_records.handle_data_loss)
        result = trainer.train(dataset_fn(records, FLAGS.train_batch_size, True),
                               FLAGS.train_batch_size, FLAGS.num_train_steps,
                               on_data_loss=records.handle_data_loss, **held_out)
        if records.skipped_records:
            logging.warning("--skip_corrupt_records: skipped %d damaged record(s) while "
                            "training", records.skipped_records)
        if result["status"] == "preempted":
            trainer.close()
            return EXIT_PREEMPTED
    if FLAGS.do_eval:
        eval_records = eval_record_files()
        trainer.evaluate(dataset_fn(eval_records, FLAGS.eval_batch_size, False),
                         num_steps=FLAGS.max_eval_steps,
                         on_data_loss=eval_records.handle_data_loss)
    trainer.close()
    return 0


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    from bert_tf.errors import BertTfError

    try:
        flags_common.apply_config_file(FLAGS)
        code = run()
    except ValueError as e:
        if isinstance(e, BertTfError):
            raise  # cli.run_main prints it as one line
        raise app.UsageError(str(e)) from None
    logging.flush()
    sys.exit(code)


if __name__ == "__main__":
    cli.run_main(main)
