"""`python -m bert_tf.pre_tokenizers [--pre_tokenizer=kiwi] < in.txt > out.txt`: text
pre-split (one line in, one out) as create_pretraining_data --pre_tokenizer splits it,
for the clients of a model pretrained on such text. The splitters are
`bert_tf.text.pre_tokenizers`; this command imports no TensorFlow.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Sequence

from bert_tf.app import cli
from bert_tf.text.pre_tokenizers import PRE_TOKENIZERS, get_pre_tokenizer


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Pre-split text (one line in, one out) as "
                                     "create_pretraining_data --pre_tokenizer does.")
    parser.add_argument("--pre_tokenizer", default="kiwi", choices=PRE_TOKENIZERS)
    parser.add_argument("--batch_lines", type=int, default=1000)
    args = parser.parse_args(argv)
    splitter = get_pre_tokenizer(args.pre_tokenizer)  # PreTokenizerError: one line (cli)
    batch: List[str] = []
    for line in sys.stdin:
        batch.append(line.rstrip("\n"))
        if len(batch) >= args.batch_lines:
            sys.stdout.write("".join(t + "\n" for t in splitter(batch)))
            batch = []
    if batch:
        sys.stdout.write("".join(t + "\n" for t in splitter(batch)))
    return 0


if __name__ == "__main__":
    cli.run_plain(main)
