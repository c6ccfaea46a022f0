r"""Fine-tunes, evaluates and predicts one task: `python -m bert_tf.finetune --task_name=NAME`.

Tasks: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI (GLUE), conll2003 (NER),
swag, squad. Flags keep the original run_classifier / run_squad names (DESIGN 2.3).

    python -m bert_tf.finetune --task_name=MRPC --data_dir=glue/MRPC \
        --init_checkpoint=converted_base/ --do_train --do_eval --do_predict \
        --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 \
        --num_train_epochs=3 --output_dir=out/mrpc

`--init_checkpoint=DIR` is a dir written by convert_checkpoint, pretrain or finetune; its
bert_config.json, vocab.txt and casing are used unless --bert_config_file, --vocab_file,
--do_lower_case say otherwise. A DIR fine-tuned on the same task also gives its head
(evaluate or continue training it); any other DIR gives the encoder and the head starts
fresh. A rerun with the same --output_dir resumes from its latest checkpoint (logged).

Features are computed on the fly from --data_dir; for TPU runs write training records
once with `python -m data_prep.create_finetuning_data` and pass them as --input_file.

Outputs in --output_dir: checkpoints + bert_config.json, vocab.txt, tokenizer_config.json,
task_config.json (a model dir that export_model and --init_checkpoint accept),
eval_results.json (--do_eval: the task's official metrics) and the prediction files
(--do_predict: GLUE's <TASK>.tsv from test.tsv, ...).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Dict

from absl import app, flags, logging

from bert_tf import cli  # first: quiets TensorFlow before anything loads it
from bert_tf.errors import BertTfError

FLAGS = flags.FLAGS

# Fine-tuning's own defaults for flags shared with pretrain (flags_common): epochs and a
# warmup proportion decide the steps unless these are given.
_FINETUNE_DEFAULTS = {"num_train_steps": None, "num_warmup_steps": None}


def define_flags() -> None:
    """Defines the command's flags: the shared ones (flags_common) plus fine-tuning's.

    Called when the command runs, not on import, so that importing this module next to
    pretrain or export_model never collides (idempotent).
    """
    from bert_tf import flags_common

    flags_common.define_common_flags()
    if "task_name" in FLAGS:
        return
    for name, value in _FINETUNE_DEFAULTS.items():
        FLAGS.set_default(name, value)
    d = flags
    d.DEFINE_string("task_name", None, "The task: cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, "
                    "rte, wnli, conll2003, swag, squad.")
    d.DEFINE_string("data_dir", None, "The task's data directory (GLUE tsv files, CoNLL-2003 "
                    "eng.* files, SWAG csv files).")
    d.DEFINE_string("train_file", None, "Training data file (SQuAD); overrides --data_dir's.")
    d.DEFINE_string("predict_file", None, "Dev/predict file (SQuAD); overrides --data_dir's.")
    d.DEFINE_string("input_file", None, "Training records from data_prep.create_finetuning_"
                    "data (comma-separated globs); default: features computed from --data_dir.")
    d.DEFINE_bool("do_predict", False, "Predict the test split and write the task's files.")
    d.DEFINE_integer("predict_batch_size", 8, "Global prediction batch size.")
    d.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training data.")
    d.DEFINE_float("warmup_proportion", 0.1, "Share of training with linear warmup.")
    d.DEFINE_integer("seed", 12345, "Seed of the initializers, dropout and data shuffling.")
    d.DEFINE_integer("max_train_examples", None, "Use only the first N training examples "
                     "(quick runs, benchmarks).")
    d.DEFINE_integer("max_eval_examples", None, "Use only the first N dev examples.")
    # SQuAD options (passed to the tasks that name them in `option_names`).
    d.DEFINE_integer("doc_stride", 128, "SQuAD: stride between context windows.")
    d.DEFINE_integer("max_query_length", 64, "SQuAD: question tokens kept.")
    d.DEFINE_integer("n_best_size", 20, "SQuAD: candidates per start/end.")
    d.DEFINE_integer("max_answer_length", 30, "SQuAD: longest answer in tokens.")
    d.DEFINE_bool("version_2_with_negative", False, "SQuAD v2.0: questions may be "
                  "unanswerable.")
    d.DEFINE_float("null_score_diff_threshold", 0.0, "SQuAD v2.0: predict null above this.")


class FinetuneError(BertTfError, RuntimeError):
    """A problem the user fixes with a flag or a file; printed without a traceback."""


class Preempted(RuntimeError):
    """SIGTERM during training: the checkpoint is written, the run exits 143 (restart me)."""


EXIT_PREEMPTED = 143  # 128 + SIGTERM, as pretrain


def _resolve_model_files():
    """Config, vocab and casing: flags first, then --init_checkpoint's dir, then output_dir."""
    from bert_tf import model_dir as md
    from bert_tf.config import BertConfig
    import tensorflow as tf  # gfile: model dirs may be on gs:// (TPU runs)

    places = [p for p in (FLAGS.init_checkpoint, FLAGS.output_dir)
              if p and tf.io.gfile.exists(md.model_dir_of(p))]
    config = BertConfig.from_file(FLAGS.bert_config_file) if FLAGS.bert_config_file else None
    vocab = FLAGS.vocab_file
    for place in places:
        config = config or md.find_config(place)
        vocab = vocab or md.find_vocab(place)
    if config is None:
        raise FinetuneError("no model config: pass --bert_config_file or an --init_checkpoint "
                            "dir holding bert_config.json")
    if vocab is None:
        raise FinetuneError("no vocab: pass --vocab_file or an --init_checkpoint dir holding "
                            "vocab.txt")
    text = md.resolve_text_settings(
        places, vocab,
        do_lower_case=FLAGS.do_lower_case if FLAGS["do_lower_case"].present else None,
        strip_accents=FLAGS.strip_accents)
    if text.pre_tokenizer:
        logging.warning("%s was pretrained on text pre-split by --pre_tokenizer=%s: give "
                        "the task's text split the same way (python -m "
                        "bert_tf.pre_tokenizers)", places[0], text.pre_tokenizer)
    return config, vocab, text


def _make_task(tokenizer):
    from bert_tf import tasks

    try:
        cls = tasks.get_task_class(FLAGS.task_name)
    except ValueError as e:
        raise FinetuneError(f"--task_name: {e}") from None
    options = {name: FLAGS[name].value for name in cls.option_names}
    files = {k: v for k, v in (("train", FLAGS.train_file), ("dev", FLAGS.predict_file),
                               ("test", FLAGS.predict_file)) if v}
    return cls(tokenizer=tokenizer, max_seq_length=_max_seq_length(),
               data_dir=FLAGS.data_dir, files=files, **options)


def _max_seq_length() -> int:
    """--max_seq_length, or the task's own default (SQuAD: 384, as run_squad) when neither
    the command line nor --config_file set it."""
    from bert_tf import tasks

    flag = FLAGS["max_seq_length"]
    if flag.present or flag.value != flag.default:
        return flag.value
    return tasks.default_max_seq_length(FLAGS.task_name, flag.value)


def _init_objects(model, task):
    """What --init_checkpoint must provide: the encoder, plus the head when it is a model
    dir fine-tuned on this very task (same labels)."""
    from bert_tf import model_dir as md

    items = {"encoder": model.encoder}
    recorded = md.read_task_config(FLAGS.init_checkpoint) if FLAGS.init_checkpoint else None
    if recorded:
        same = (recorded.get("task_name", "").lower() == task.name.lower()
                and recorded.get("label_list") == task.label_list)
        if same:
            items["task_head"] = model.task_head
        else:
            logging.info("init_checkpoint was fine-tuned on %s: using its encoder only",
                         recorded.get("task_name"))
    return items


def _check_records(records, spec) -> int:
    """Counts the records (`RecordFiles`: damaged ones are named, or skipped with
    --skip_corrupt_records) and checks that the first one has the task's layout."""
    import tensorflow as tf

    from bert_tf.data import finetuning as data_lib

    files = records.paths()
    try:
        next(iter(data_lib.record_dataset(files[0], spec, 1, is_training=False)))
    except (tf.errors.InvalidArgumentError, StopIteration) as e:
        layout = {k: list(shape) for k, (shape, _) in spec.items()}
        raise FinetuneError(
            f"{files[0]}: not records of this task at --max_seq_length="
            f"{_max_seq_length()} (expected features {layout}); rewrite them with "
            f"data_prep.create_finetuning_data and the same flags "
            f"({str(e).splitlines()[0][:200] if str(e) else 'empty file'})") from None
    return records.count_records()


def _examples(task, split, limit):
    examples = task.get_examples(split)
    return examples[:limit] if limit else examples


def run() -> Dict:
    """The whole command; returns the eval results (empty without --do_eval)."""
    import keras
    import numpy as np
    import tensorflow as tf

    from bert_tf import flags_common
    from bert_tf import model_dir as md
    from bert_tf.data import finetuning as data_lib
    from bert_tf.encoder import BertEncoder
    from bert_tf.tokenization import BertTokenizer
    from bert_tf.training.loop import Trainer
    from bert_tf.training.optimization import create_optimizer
    from bert_tf.training.strategy import is_chief

    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
        raise FinetuneError("nothing to do: pass --do_train, --do_eval and/or --do_predict")
    from bert_tf import tasks

    try:
        tasks.canonical_task_name(FLAGS.task_name)
    except ValueError as e:
        raise FinetuneError(f"--task_name: {e}") from None
    # The strategy first: multi-worker collectives (and TPU init) must be configured before
    # TensorFlow runs any op, and the tokenizer below runs some.
    try:
        strategy = flags_common.strategy_from_flags(FLAGS)
    except (flags.ValidationError, ValueError) as e:  # e.g. multi_worker without TF_CONFIG
        raise FinetuneError(str(e)) from None
    config, vocab, text = _resolve_model_files()
    max_seq_length = _max_seq_length()
    if max_seq_length > config.max_position_embeddings:
        raise FinetuneError(f"--max_seq_length={max_seq_length} exceeds the model's "
                            f"max_position_embeddings={config.max_position_embeddings}")
    keras.utils.set_random_seed(FLAGS.seed)
    if FLAGS.mixed_precision != "float32":
        keras.mixed_precision.set_global_policy(FLAGS.mixed_precision)
    tokenizer = BertTokenizer(vocab, **text.tokenizer_kwargs())
    task = _make_task(tokenizer)
    tf.io.gfile.makedirs(FLAGS.output_dir)
    if is_chief(strategy):  # one writer per cluster (workers share --output_dir)
        md.write_metadata(FLAGS.output_dir, config, vocab_file=vocab,
                          do_lower_case=text.do_lower_case, strip_accents=text.strip_accents,
                          pre_tokenizer=text.pre_tokenizer)
        # task_config() records the tokenizer's do_lower_case / strip_accents too.
        with tf.io.gfile.GFile(os.path.join(FLAGS.output_dir, md.TASK_CONFIG_FILE), "w") as f:
            json.dump(task.task_config(), f, indent=2)

    with strategy.scope():
        encoder = BertEncoder(config, name="encoder")
        model = task.build_model(encoder)
    init_items = _init_objects(model, task) if FLAGS.init_checkpoint else None
    resuming = bool(tf.train.latest_checkpoint(FLAGS.output_dir))
    if init_items and not resuming:
        # Read the init checkpoint now: a checkpoint of another size fails here, naming
        # both shapes, before minutes of feature conversion.
        md.restore(FLAGS.init_checkpoint, init_items)
    if (not FLAGS.do_train and not resuming and init_items is not None
            and "task_head" not in init_items):
        raise FinetuneError(
            f"--init_checkpoint={FLAGS.init_checkpoint} holds no {task.name} head (it is a "
            f"pretrained or converted model, or was fine-tuned on another task): "
            f"--do_eval/--do_predict without --do_train would score a random head; add "
            f"--do_train, or pass the output dir of a {task.name} fine-tuning run")
    if not FLAGS.init_checkpoint and not resuming:
        if not FLAGS.do_train:
            raise FinetuneError(f"no checkpoint in --output_dir={FLAGS.output_dir} and no "
                                f"--init_checkpoint: nothing to evaluate")
        logging.warning("no --init_checkpoint: fine-tuning from random weights")

    train_features = num_train_examples = None
    if FLAGS.do_train:
        if FLAGS.input_file:
            from bert_tf.data.pretraining import RecordFiles

            spec = task.feature_spec()
            records = RecordFiles(FLAGS.input_file, FLAGS.skip_corrupt_records)
            num_train_examples = _check_records(records, spec)
        else:
            examples = _examples(task, "train", FLAGS.max_train_examples)
            start = time.time()
            train_features = task.convert_examples(examples, "train")
            num_train_examples = len(examples)
            logging.info("%d training examples -> %d features in %.1fs", len(examples),
                         len(train_features["input_word_ids"]), time.time() - start)
        # Steps from the example count, as run_classifier / run_squad compute them (SQuAD's
        # doc-stride windows are more features than examples; records count features).
        num_steps = FLAGS.num_train_steps or max(1, int(
            num_train_examples / FLAGS.train_batch_size * FLAGS.num_train_epochs))
        warmup = (FLAGS.num_warmup_steps if FLAGS.num_warmup_steps is not None
                  else int(num_steps * FLAGS.warmup_proportion))

    with strategy.scope():
        optimizer = create_optimizer(
            FLAGS.learning_rate, num_train_steps=num_steps if FLAGS.do_train else 1,
            num_warmup_steps=warmup if FLAGS.do_train else 0, optimizer=FLAGS.optimizer,
            weight_decay_rate=FLAGS.weight_decay_rate,
            decay_from_warmup_end=FLAGS.decay_from_warmup_end,
            clip_norm=FLAGS.clip_norm or None, mixed_precision=FLAGS.mixed_precision)
    trainer = Trainer(model, lambda labels, outputs: task.loss(labels, outputs), optimizer,
                      strategy, output_dir=FLAGS.output_dir,
                      checkpoint_items=model.checkpoint_items(),
                      steps_per_loop=FLAGS.steps_per_loop,
                      save_checkpoints_steps=FLAGS.save_checkpoints_steps,
                      max_checkpoints_to_keep=FLAGS.keep_checkpoint_max,
                      gradient_accumulation_steps=FLAGS.gradient_accumulation_steps,
                      jit_compile=FLAGS.jit_compile,
                      tokens_per_example=getattr(task, "num_choices", 1) * max_seq_length)
    step = trainer.restore_or_initialize(FLAGS.init_checkpoint, init_required=init_items)
    # Batches of similar lengths, cut to a few fixed lengths (not on TPUs: one static
    # shape there), for training and prediction.
    buckets = (data_lib.bucket_lengths(max_seq_length) if FLAGS.length_bucketing
               and not isinstance(strategy, tf.distribute.TPUStrategy) else None)

    if FLAGS.do_train:
        logging.info("training %s: %d examples, %d steps of %d, %d warmup, from step %d",
                     task.name, num_train_examples, num_steps, FLAGS.train_batch_size,
                     warmup, step)

        def dataset_fn(ctx):
            batch = ctx.get_per_replica_batch_size(FLAGS.train_batch_size)
            if FLAGS.input_file:
                return data_lib.record_dataset(records.paths(), spec, batch, True, ctx,
                                               seed=FLAGS.seed, length_buckets=buckets)
            return data_lib.array_dataset(train_features, task.label_names, batch, True, ctx,
                                          seed=FLAGS.seed, length_buckets=buckets)

        start, cpu_start = time.time(), time.process_time()
        result = trainer.train(dataset_fn, FLAGS.train_batch_size, num_steps,
                               on_data_loss=records.handle_data_loss if FLAGS.input_file
                               else None)
        seconds, cpu_seconds = time.time() - start, time.process_time() - cpu_start
        trained = result["step"] - step
        logging.info("trained %d steps in %.1fs (%.2f examples/s)", trained, seconds,
                     trained * FLAGS.train_batch_size / max(seconds, 1e-9))
        if result.get("status") == "preempted":
            raise Preempted(f"preempted at step {result['step']}: checkpoint written; the "
                            f"same command resumes from it")
        # examples/s of the last loop: steady state when there was more than one loop
        # (the first one includes tracing the step function).
        train_speed = {"train_seconds": seconds, "train_cpu_seconds": cpu_seconds,
                       "train_steps": trained,
                       "train_examples_per_second":
                           trained * FLAGS.train_batch_size / max(seconds, 1e-9),
                       "train_examples_per_second_last_loop":
                           result.get("examples_per_second", 0.0)}
    else:
        train_speed = {}

    results = {}
    if FLAGS.do_eval:
        examples = _examples(task, "dev", FLAGS.max_eval_examples)
        features = task.convert_examples(examples, "dev")
        start = time.time()
        outputs = trainer.predict(features, FLAGS.eval_batch_size, length_buckets=buckets)
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
            with tf.io.gfile.GFile(os.path.join(FLAGS.output_dir, "eval_results.json"),
                                   "w") as f:
                json.dump(results, f, indent=2, sort_keys=True)
            task.write_predictions(predictions, examples, _subdir("eval_predictions"))
    if FLAGS.do_predict:
        examples = task.get_examples("test")
        features = task.convert_examples(examples, "test")
        outputs = trainer.predict(features, FLAGS.predict_batch_size,
                                  length_buckets=buckets)
        predictions = task.postprocess(outputs, features, examples)
        if trainer.is_chief:
            paths = task.write_predictions(predictions, examples, FLAGS.output_dir)
            logging.info("wrote %s", ", ".join(paths))
    trainer.close()
    return results


def _subdir(name):
    import tensorflow as tf

    path = os.path.join(FLAGS.output_dir, name)
    tf.io.gfile.makedirs(path)
    return path


def main(argv):
    del argv
    from bert_tf import flags_common

    try:
        flags_common.apply_config_file(FLAGS)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    missing = [f for f in ("task_name", "output_dir") if not FLAGS[f].value]
    if missing:
        raise app.UsageError(f"missing --{', --'.join(missing)}")
    try:
        run()  # errors derived from BertTfError: one line from cli.run_main
    except Preempted as e:
        logging.warning("%s", e)
        sys.exit(EXIT_PREEMPTED)


if __name__ == "__main__":
    define_flags()
    cli.run_main(main)
