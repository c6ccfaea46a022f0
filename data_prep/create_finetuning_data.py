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

import dataclasses
import json
import os
from typing import List, Optional, Sequence

from absl import flags, logging

from bert_tf import cli  # first: quiets TensorFlow before anything loads it
from bert_tf import flags_common, output_guard, text_flags
from bert_tf.errors import UsageError
from bert_tf import tasks
from bert_tf.tasks import TaskSpec

FLAGS = flags.FLAGS
SPLITS = ("train", "dev")  # test has no labels to train on


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The task's flags (as finetune's: `flags_common.define_task_flags`) plus these."""
    if "splits" in flag_values:
        return
    flags_common.define_task_flags(flag_values)
    fv = {"flag_values": flag_values}
    flags.DEFINE_string("vocab_file", None, "vocab.txt; default: the one in --init_checkpoint.",
                        **fv)
    flags.DEFINE_string("init_checkpoint", None, "A model dir whose vocab.txt / casing to use.",
                        **fv)
    flags.DEFINE_bool("do_lower_case", None, "Lower-case input; default: as --init_checkpoint "
                      "records it, else inferred from the vocab.", **fv)
    text_flags.define_strip_accents_flag(flag_values)
    flags.DEFINE_integer("max_seq_length", 128, "Sequence length after WordPiece.",
                         lower_bound=3, **fv)
    flags.DEFINE_string("output_dir", None, "Where the records and their .meta.json go.", **fv)
    flags.DEFINE_list("splits", ["train"], "Splits to write (train, dev).", **fv)
    flags.DEFINE_integer("num_output_shards", 1, "Record files per split.", lower_bound=1, **fv)
    flags.DEFINE_integer("max_examples", None, "Only the first N examples of each split.",
                         lower_bound=1, **fv)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FinetuningDataConfig(flags_common.ModelDirFlags):
    """One run (what the flags say); `run(config)` writes it."""
    task: TaskSpec
    max_seq_length: int
    output_dir: str
    splits: Sequence[str]
    num_output_shards: int
    max_examples: Optional[int]

    @classmethod
    def from_flags(cls, flag_values: flags.FlagValues = FLAGS) -> "FinetuningDataConfig":
        flags_common.require(flag_values, ["task_name", "output_dir"])
        for split in flag_values.splits:
            if split not in SPLITS:
                raise UsageError(f"--splits: {split!r} is not train or dev (test has no "
                                 f"labels to train on; finetune --do_predict reads it "
                                 f"directly)")
        return flags_common.config_from_flags(
            cls, flag_values, task=flags_common.task_spec_from_flags(flag_values))


def shard_paths(output_dir: str, split: str, shards: int):
    if shards == 1:
        return [os.path.join(output_dir, f"{split}.tf_record")]
    return [os.path.join(output_dir, f"{split}-{i:05d}-of-{shards:05d}.tf_record")
            for i in range(shards)]


def convert_split(task, split: str, max_examples=None):
    """One split's examples and features (read and converted; nothing written)."""
    examples = task.get_examples(split)
    if max_examples:
        examples = examples[:max_examples]
    return examples, task.convert_examples(examples, split)


def write_split(task, split: str, output_dir: str, shards: int = 1, max_examples=None,
                converted=None) -> dict:
    """Writes one split's records + meta (each file whole: `output_guard`); returns the
    meta dict. `converted`: `convert_split`'s result, when already made."""
    import numpy as np
    import tensorflow as tf

    from bert_tf.data.finetuning import write_records

    examples, features = converted or convert_split(task, split, max_examples)
    spec = task.feature_spec()
    count = len(features["input_word_ids"])
    paths = shard_paths(output_dir, split, shards)
    meta_file = os.path.join(output_dir, f"{split}.meta.json")
    earlier = _read_meta_files(meta_file)  # an earlier run's shards of this split
    # Contiguous row ranges per shard keep the files deterministic; the reader shuffles.
    bounds = np.linspace(0, count, len(paths) + 1).astype(int)
    for path, lo, hi in zip(paths, bounds[:-1], bounds[1:]):
        write_records(path, {k: v[lo:hi] for k, v in features.items() if k in spec}, spec)
    meta = {"task_config": task.task_config(), "split": split,
            "num_examples": len(examples), "num_features": count,
            "files": [os.path.basename(p) for p in paths],
            "feature_spec": {k: [list(shape), dtype] for k, (shape, dtype) in spec.items()}}
    output_guard.write_json(meta_file, meta, sort_keys=False)
    for name in set(earlier) - set(meta["files"]):  # its surplus shards, named by its meta
        surplus = os.path.join(output_dir, name)
        if tf.io.gfile.exists(surplus):
            tf.io.gfile.remove(surplus)
    logging.info("%s %s: %d examples -> %d features in %d file(s) under %s", task.name, split,
                 len(examples), count, len(paths), output_dir)
    return meta


def _read_meta_files(meta_file: str) -> List[str]:
    import tensorflow as tf

    if not tf.io.gfile.exists(meta_file):
        return []
    try:
        with tf.io.gfile.GFile(meta_file) as f:
            files = json.load(f).get("files", [])
    except (ValueError, AttributeError):
        return []
    return [name for name in files if isinstance(name, str) and "/" not in name]


def run(config: FinetuningDataConfig) -> List[dict]:
    """Writes the records `config` asks for; returns each split's meta dict. --output_dir
    must be new, empty or an earlier output of this command (whose records of the same
    split are replaced, each file whole, and its surplus shards removed)."""
    inputs = [config.init_checkpoint, config.task.data_dir, config.vocab_file]
    output_guard.check_apart(config.output_dir, inputs, flag="--output_dir")
    task = tasks.make_task(config.task.task_name, config.resolve().tokenizer(),
                           **config.task.task_arguments(config.max_seq_length))
    # Every split is read first (TaskDataError, a BertTfError: one line from
    # cli.run_main), so a bad input leaves --output_dir as it was.
    converted = {split: convert_split(task, split, config.max_examples)
                 for split in config.splits}
    output_guard.claim_output_dir(config.output_dir, "create_finetuning_data",
                                  flag="--output_dir", inputs=inputs)
    return [write_split(task, split, config.output_dir, config.num_output_shards,
                        converted=converted[split]) for split in config.splits]


def main(argv):
    del argv  # cli.run_main refuses positional arguments
    run(FinetuningDataConfig.from_flags(FLAGS))


if __name__ == "__main__":
    cli.run_main(main, define_flags)
