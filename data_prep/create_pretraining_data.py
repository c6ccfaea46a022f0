r"""Pretraining TFRecords from a text corpus: the original tool's data, fast and in bounded memory.

    python -m data_prep.create_pretraining_data \
      --input_file=corpus/*.txt --output_file=out/pretrain.tfrecord \
      --vocab_file=vocab.txt --do_lower_case --max_seq_length=128 \
      --max_predictions_per_seq=20 --masked_lm_prob=0.15 --dupe_factor=10 \
      --num_workers=8 --num_output_shards=64

How (DESIGN 2.2 / 2.3): four passes (tokenize -> document store, instances -> shuffle
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

from data_prep.corpus import CorpusError
from data_prep.pretraining_job import run, summary_path
from data_prep.pretraining_passes import JobConfig


# ---------------------------------------------------------------------------------------------
# Command line (the only place with absl flags).


def define_flags(flag_values=None) -> None:
    """Defines the command's flags on `flag_values` (default: absl's global FLAGS)."""
    from absl import flags

    flag_values = flags.FLAGS if flag_values is None else flag_values
    fv = {"flag_values": flag_values}

    flags.DEFINE_string("input_file", None, "Input corpus: comma-separated globs of UTF-8 text, "
                        "one sentence per line, blank line between documents.", **fv)
    flags.DEFINE_string("output_file", None, "Output TFRecord path; with --num_output_shards=N>1 "
                        "the shards are PATH-00000-of-0000N. A comma-separated list names the "
                        "shards. Nothing else is written in its directory.", **fv)
    flags.DEFINE_string("vocab_file", None, "WordPiece vocab the model is trained with.", **fv)
    from bert_tf import settings

    settings.CorpusTextSettings.define_flags(flag_values)
    flags.DEFINE_bool("do_whole_word_mask", False, "Mask all WordPieces of a word together "
                      "(80/10/10 still drawn per piece, as the original).", **fv)
    flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.", lower_bound=5, **fv)
    flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum masked LM predictions per "
                         "sequence.", lower_bound=1, **fv)
    flags.DEFINE_float("masked_lm_prob", 0.15, "Fraction of tokens to mask.",
                       lower_bound=0.0, upper_bound=1.0, **fv)
    flags.DEFINE_integer("dupe_factor", 10, "Passes over the data, each with fresh masks.",
                         lower_bound=1, **fv)
    flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a shorter target length.",
                       lower_bound=0.0, upper_bound=1.0, **fv)
    flags.DEFINE_integer("random_seed", 12345, "Random seed.", **fv)
    flags.DEFINE_integer("num_workers", max(1, (os.cpu_count() or 1)), "Worker processes; never "
                         "changes the output.", lower_bound=0, **fv)
    flags.DEFINE_integer("num_output_shards", 1, "Output shards (files).", lower_bound=1, **fv)
    flags.DEFINE_integer("pool_size", 0, "At most this many documents per work unit (0: no "
                         "limit; units stop at 1 MB of text, more on corpora over 2 GB so that "
                         "there are at most ~2,048). Units are the grain of parallel work and "
                         "of resuming; the statistics do not depend on them (random-next "
                         "documents come from the whole corpus, instances are shuffled over "
                         "all shards). A corpus that is one unit gives exactly the original "
                         "tool's records.", lower_bound=0, **fv)
    flags.DEFINE_string("summary_file", None, "JSON summary (counts, masking fractions). "
                        "Default: beside the output directory, records/x.tfrecord -> "
                        "records.x.tfrecord.summary.json.", **fv)
    flags.DEFINE_string("work_dir", None, "Directory for the passes' temporary files (the "
                        "tokenized corpus, shuffle buckets: about 3x the output at peak) and "
                        "the state a rerun resumes from; removed when the job is done. "
                        "Default: beside the output directory, records.x.tfrecord.work. An "
                        "existing folder not made by this job keeps its files: the job works "
                        "in a subfolder create_pretraining_data.work there.", **fv)
    flags.DEFINE_bool("overwrite", False, "Replace the records of an earlier run into the same "
                      "--output_file made with other inputs or settings (only the files its "
                      "summary lists; the new ones are written before the old are removed).",
                      **fv)
    flags.DEFINE_enum("tokenizer", "python", ["python", "tensorflow"], "WordPiece "
                      "implementation: 'python' (the original's rules with a word cache; fast, "
                      "no TensorFlow in the workers) or 'tensorflow' (bert_tf.tokenization, "
                      "in-graph). Both give the original FullTokenizer's ids.", **fv)
    flags.DEFINE_bool("strict", False, "Stop at a line that is not valid UTF-8 instead of "
                      "reporting FILE:LINE and skipping it.", **fv)
    for name in ("input_file", "output_file", "vocab_file"):
        flags.mark_flag_as_required(name, **fv)


def main(argv):
    from absl import flags

    del argv  # cli.run_main refuses positional arguments
    F = flags.FLAGS
    cfg = JobConfig(
        input_file=F.input_file, output_file=F.output_file, vocab_file=F.vocab_file,
        do_lower_case=F.do_lower_case, strip_accents=F.strip_accents,
        pre_tokenizer=F.pre_tokenizer, do_whole_word_mask=F.do_whole_word_mask,
        max_seq_length=F.max_seq_length, max_predictions_per_seq=F.max_predictions_per_seq,
        masked_lm_prob=F.masked_lm_prob, dupe_factor=F.dupe_factor,
        short_seq_prob=F.short_seq_prob, random_seed=F.random_seed,
        num_output_shards=F.num_output_shards, pool_size=F.pool_size, strict=F.strict,
        tokenizer=F.tokenizer, num_workers=F.num_workers, progress=True,
        summary_file=F.summary_file or "", work_dir=F.work_dir or "", overwrite=F.overwrite)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        summary = run(cfg)
    except ValueError as e:  # CorpusError and bad values: one line from cli.run_main
        raise CorpusError(str(e)) from None
    print(f"{summary['instances']} instances in {len(summary['output_files'])} file(s), "
          f"{summary['seconds']:.1f} s; summary: {summary_path(cfg)}", file=sys.stderr)


if __name__ == "__main__":
    from bert_tf import cli

    cli.run_main(main, define_flags)
