r"""Pretraining TFRecords from a text corpus: the original tool's data, fast and in bounded memory.

    python -m data_prep.create_pretraining_data \
      --input_file=corpus/*.txt --output_file=out/pretrain.tfrecord \
      --vocab_file=vocab.txt --do_lower_case --max_seq_length=128 \
      --max_predictions_per_seq=20 --masked_lm_prob=0.15 --dupe_factor=10 \
      --num_workers=8 --num_output_shards=64

How (docs/contracts.md §2 / 2.3): four passes (tokenize -> document store, instances -> shuffle
buckets, shuffle each bucket, assemble the shards), each in bounded memory
(`data_prep.pretraining_passes`), run on `--num_workers` processes and resumable
(`data_prep.pretraining_job`). This module is the command line: its flags and `main`.

Output depends on the inputs, the seed and the settings, never on the number of workers. A
corpus that is a single unit (small corpora) gives exactly the original tool's records, in
its order and dealt to the shards as it does (its documents shuffled, the random-next draws
and the final shuffle from one `random.Random(seed)`). The only other difference from the
original: a file's end always ends a document (the original joins a file's last document to
the next file's first when the file lacks a final blank line).

Where things go: the shards at `--output_file`, nothing else in their directory (so
`--input_file='records/*'` reads them, ours or the original reader); the JSON summary at
`--summary_file`, by default beside the output directory (`records/x.tfrecord` ->
`records.x.tfrecord.summary.json`); the passes' state at `--work_dir` (default
`records.x.tfrecord.work/`), removed when the job is done. A rerun resumes from the last
complete unit / bucket / shard, and does nothing when the summary says the job is complete.
"""

from __future__ import annotations

import logging
import os
import sys

from absl import flags

from data_prep.corpus import CorpusError
from data_prep.pretraining_job import run, summary_path
from data_prep.pretraining_passes import JobConfig


# ---------------------------------------------------------------------------------------------
# Command line (the only place with absl flags).


def define_flags(flag_values=None) -> None:
    """Defines the command's flags on `flag_values` (default: absl's global FLAGS): the
    `setting` fields of `JobConfig`."""
    flag_values = flags.FLAGS if flag_values is None else flag_values
    JobConfig.define_flags(flag_values)
    # The command uses every core unless told; the library's default is one process.
    flag_values.set_default("num_workers", max(1, (os.cpu_count() or 1)))


def main(argv):
    del argv  # cli.run_main refuses positional arguments
    cfg = JobConfig.from_flags(flags.FLAGS)  # refuses a missing --input_file etc.
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        summary = run(cfg)
    except ValueError as e:  # CorpusError and bad values: one line from cli.run_main
        raise CorpusError(str(e)) from None
    print(f"{summary['instances']} instances in {len(summary['output_files'])} file(s), "
          f"{summary['seconds']:.1f} s; summary: {summary_path(cfg)}", file=sys.stderr)


if __name__ == "__main__":
    from bert_tf.app import cli

    cli.run_main(main, define_flags)
