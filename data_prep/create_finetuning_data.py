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

Unlike the rest of data_prep this command imports TensorFlow: the features are the
task library's (bert_tf.tasks), and the record files and their meta are written by
`bert_tf.data.finetuning.write_split_records`, beside the reader of the same files. It
lives here by its docs/contracts.md §3 name; this module holds only its flags, config and run.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence

from absl import flags

from bert_tf.app import cli  # first: quiets TensorFlow before anything loads it
from bert_tf import tasks
from bert_tf.app import setting_fields, settings
from bert_tf.app.setting_fields import setting
from bert_tf.core import output_guard
from bert_tf.core.errors import UsageError

FLAGS = flags.FLAGS
SPLITS = ("train", "dev")  # test has no labels to train on


@dataclasses.dataclass(frozen=True, kw_only=True)
class FinetuningDataConfig(settings.ModelDirSettings, settings.TaskSettings):
    """One run (what the flags say); `run(config)` writes it."""
    bert_config_file: Optional[str] = None  # not a flag: records need only the vocab
    init_checkpoint: Optional[str] = setting_fields.override(
        settings.ModelDirSettings, "init_checkpoint",
        help="A model dir whose vocab.txt / casing to use.")
    max_seq_length: int = setting(128, "Sequence length after WordPiece.", lower=3)
    output_dir: Optional[str] = setting(None, "Where the records and their .meta.json go.")
    splits: List[str] = setting(["train"], "Splits to write (train, dev).")
    num_output_shards: int = setting(1, "Record files per split.", lower=1)
    max_examples: Optional[int] = setting(None, "Only the first N examples of each split.",
                                          lower=1)

    @classmethod
    def from_flags(cls, flag_values: flags.FlagValues = FLAGS) -> "FinetuningDataConfig":
        setting_fields.require(flag_values, ["task_name", "output_dir"])
        for split in flag_values.splits:
            if split not in SPLITS:
                raise UsageError(f"--splits: {split!r} is not train or dev (test has no "
                                 f"labels to train on; finetune --do_predict reads it "
                                 f"directly)")
        return super().from_flags(flag_values)


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The task's flags (as finetune's: `settings.TaskSettings`) plus these."""
    FinetuningDataConfig.define_flags(flag_values)


def convert_split(task, split: str, max_examples=None):
    """One split's examples and features (read and converted; nothing written)."""
    examples = task.get_examples(split)
    if max_examples:
        examples = examples[:max_examples]
    return examples, task.convert_examples(examples, split)


def run(config: FinetuningDataConfig) -> List[dict]:
    """Writes the records `config` asks for; returns each split's meta dict. --output_dir
    must be new, empty or an earlier output of this command (whose records of the same
    split are replaced, each file whole, and its surplus shards removed)."""
    inputs = [config.init_checkpoint, config.task.data_dir, config.vocab_file,
              *config.task.files().values()]
    output_guard.check_apart(config.output_dir, inputs, flag="--output_dir")
    from bert_tf.tasks.pre_split import host_tokenizer  # TensorFlow: not at --help

    # The model's pre-tokenizer (kiwi) splits the task's text first, as pretraining's.
    task = tasks.make_task(config.task.task_name, host_tokenizer(config.resolve()),
                           **config.task.task_arguments(config.max_seq_length))
    # Every split is read first (TaskDataError, a BertTfError: one line from
    # cli.run_main), so a bad input leaves --output_dir as it was.
    converted = {split: convert_split(task, split, config.max_examples)
                 for split in config.splits}
    from bert_tf.data.finetuning import write_split_records  # TensorFlow (9 s): not for --help

    with output_guard.locked(config.output_dir, flag="--output_dir"):  # one writer
        output_guard.claim_output_dir(config.output_dir, "create_finetuning_data",
                                      flag="--output_dir", inputs=inputs)
        return [write_split_records(task, split, config.output_dir, config.num_output_shards,
                                    len(examples), features)
                for split, (examples, features) in converted.items()]


def main(argv):
    del argv  # cli.run_main refuses positional arguments
    run(FinetuningDataConfig.from_flags(FLAGS))


if __name__ == "__main__":
    cli.run_main(main, define_flags)
