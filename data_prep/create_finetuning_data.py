r"""Writes a task's training features as TFRecords, for TPU runs of bert_tf.finetune.

    python -m data_prep.create_finetuning_data --task_name=MNLI --data_dir=glue/MNLI \
        --vocab_file=vocab.txt --do_lower_case --max_seq_length=128 \
        --output_dir=gs://bucket/mnli_records --num_output_shards=8

writes OUTPUT_DIR/train.tf_record (or train-0000i-of-0000N.tf_record) and
OUTPUT_DIR/train.meta.json (task config, example and feature counts, the record layout).
Then `python -m bert_tf.finetune --task_name=MNLI --input_file=OUTPUT_DIR/train*.tf_record
--data_dir=glue/MNLI ...` trains from them (dev and test are still read from --data_dir,
because their postprocessing needs the examples). The features are exactly those the
finetune command computes on the fly (same Task.convert_examples), with the original
run_classifier's record names (input_ids, input_mask, segment_ids, label_ids).
"""

from __future__ import annotations

import json
import os

from absl import app, flags, logging

from bert_tf import cli  # first: quiets TensorFlow before anything loads it

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defined when the command runs (not on import: no collision with other CLIs)."""
    if "splits" in FLAGS:
        return
    flags.DEFINE_string("task_name", None, "The task (as bert_tf.finetune --task_name).")
    flags.DEFINE_string("data_dir", None, "The task's data directory.")
    flags.DEFINE_string("train_file", None, "Training data file (SQuAD); overrides "
                        "--data_dir's.")
    flags.DEFINE_string("predict_file", None, "Dev file (SQuAD); overrides --data_dir's.")
    flags.DEFINE_string("vocab_file", None, "vocab.txt; default: the one in --init_checkpoint.")
    flags.DEFINE_string("init_checkpoint", None, "A model dir whose vocab.txt / casing to use.")
    flags.DEFINE_bool("do_lower_case", None, "Lower-case input; default: as --init_checkpoint "
                      "records it, else inferred from the vocab.")
    from bert_tf import text_flags

    text_flags.define_strip_accents_flag()
    flags.DEFINE_integer("max_seq_length", 128, "Sequence length after WordPiece.")
    flags.DEFINE_string("output_dir", None, "Where the records and their .meta.json go.")
    flags.DEFINE_list("splits", ["train"], "Splits to write (train, dev).")
    flags.DEFINE_integer("num_output_shards", 1, "Record files per split.")
    flags.DEFINE_integer("max_examples", None, "Only the first N examples of each split.")
    flags.DEFINE_integer("doc_stride", 128, "SQuAD: stride between context windows.")
    flags.DEFINE_integer("max_query_length", 64, "SQuAD: question tokens kept.")
    flags.DEFINE_integer("n_best_size", 20, "SQuAD: candidates per start/end.")
    flags.DEFINE_integer("max_answer_length", 30, "SQuAD: longest answer in tokens.")
    flags.DEFINE_bool("version_2_with_negative", False, "SQuAD v2.0: questions may be "
                      "unanswerable.")
    flags.DEFINE_float("null_score_diff_threshold", 0.0, "SQuAD v2.0: predict null above this.")


def shard_paths(output_dir: str, split: str, shards: int):
    if shards == 1:
        return [os.path.join(output_dir, f"{split}.tf_record")]
    return [os.path.join(output_dir, f"{split}-{i:05d}-of-{shards:05d}.tf_record")
            for i in range(shards)]


def write_split(task, split: str, output_dir: str, shards: int = 1, max_examples=None) -> dict:
    """Converts one split and writes its records + meta; returns the meta dict."""
    import numpy as np
    import tensorflow as tf

    from bert_tf.data.finetuning import write_records

    examples = task.get_examples(split)
    if max_examples:
        examples = examples[:max_examples]
    features = task.convert_examples(examples, split)
    spec = task.feature_spec()
    count = len(features["input_word_ids"])
    tf.io.gfile.makedirs(output_dir)
    paths = shard_paths(output_dir, split, shards)
    # Contiguous row ranges per shard keep the files deterministic; the reader shuffles.
    bounds = np.linspace(0, count, len(paths) + 1).astype(int)
    for path, lo, hi in zip(paths, bounds[:-1], bounds[1:]):
        write_records(path, {k: v[lo:hi] for k, v in features.items() if k in spec}, spec)
    meta = {"task_config": task.task_config(), "split": split,
            "num_examples": len(examples), "num_features": count,
            "files": [os.path.basename(p) for p in paths],
            "feature_spec": {k: [list(shape), dtype] for k, (shape, dtype) in spec.items()}}
    with tf.io.gfile.GFile(os.path.join(output_dir, f"{split}.meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    logging.info("%s %s: %d examples -> %d features in %d file(s) under %s", task.name, split,
                 len(examples), count, len(paths), output_dir)
    return meta


def main(argv):
    del argv
    from bert_tf import model_dir as md
    from bert_tf import tasks
    from bert_tf.tokenization import BertTokenizer

    missing = [f for f in ("task_name", "output_dir") if not FLAGS[f].value]
    if missing:
        raise app.UsageError(f"missing --{', --'.join(missing)}")
    vocab = FLAGS.vocab_file or (md.find_vocab(FLAGS.init_checkpoint)
                                 if FLAGS.init_checkpoint else None)
    if not vocab:
        raise app.UsageError("pass --vocab_file (or --init_checkpoint with a vocab.txt)")
    text = md.resolve_text_settings([FLAGS.init_checkpoint], vocab,
                                    do_lower_case=FLAGS.do_lower_case,
                                    strip_accents=FLAGS.strip_accents)
    cls = tasks.get_task_class(FLAGS.task_name)
    files = {k: v for k, v in (("train", FLAGS.train_file), ("dev", FLAGS.predict_file)) if v}
    task = cls(tokenizer=BertTokenizer(vocab, **text.tokenizer_kwargs()),
               max_seq_length=FLAGS.max_seq_length, data_dir=FLAGS.data_dir, files=files,
               **{name: FLAGS[name].value for name in cls.option_names})
    for split in FLAGS.splits:
        if split not in ("train", "dev"):
            raise app.UsageError(f"--splits: {split!r} is not train or dev (test has no labels "
                                 f"to train on; finetune --do_predict reads it directly)")
        # TaskDataError (a BertTfError): one line from cli.run_main
        write_split(task, split, FLAGS.output_dir, FLAGS.num_output_shards,
                    FLAGS.max_examples)


if __name__ == "__main__":
    define_flags()
    cli.run_main(main)
