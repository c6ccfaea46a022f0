r"""How fast is bert_tf.BertTokenizer on batches, against Hugging Face `tokenizers`?

Same texts (the first --megabytes of English Wikipedia lines), same vocab
(bert-base-uncased), batches of --batch_size lines, no special tokens:

  * ours, eager: `BertTokenizer.tokenize(batch)` (what the offline data pipeline calls),
    also `tokenize_words` and inside a `tf.data` map;
  * peer: `tokenizers.BertWordPieceTokenizer(vocab, lowercase=True).encode_batch(batch,
    add_special_tokens=False)` (Rust, multi-threaded);
  * the original algorithm in plain Python (tests/reference_tokenizer.py, the oracle the
    tests use) on a slice, for scale.

Also checks that the ids agree: ours vs the original on the sliced lines (must be 0
mismatches) and ours vs Hugging Face on every line, explaining each disagreement with
the original (where HF differs from the original, e.g. it drops unassigned code points).

    PYTHONPATH=. KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/tokenizer_throughput.py \
        [--megabytes=4] [--batch_size=1000] [--repeats=3] [--original_megabytes=0.5]

Prints MB/s (UTF-8 bytes of input per second of wall time, best of --repeats, runs
interleaved) for each and the ratio ours / Hugging Face.
"""

import argparse
import os
import sys
import time

SHARED = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                      "shared", "data"))
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_lines(path, megabytes):
    lines, size = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            lines.append(line)
            size += len(line.encode("utf-8"))
            if size >= megabytes * 1e6:
                break
    return lines, size


def best_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=os.path.join(SHARED, "pretrain",
                                                         "enwiki_2015_bert_format.txt"))
    parser.add_argument("--vocab_file", default=os.path.join(SHARED, "vocab",
                                                             "bert-base-uncased-vocab.txt"))
    parser.add_argument("--megabytes", type=float, default=4.0)
    parser.add_argument("--batch_size", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--original_megabytes", type=float, default=0.5,
                        help="slice timed with the plain-Python original (0 to skip)")
    args = parser.parse_args()

    import tensorflow as tf
    from tokenizers import BertWordPieceTokenizer

    sys.path.insert(0, REPO)
    from bert_tf.text.tokenization import BertTokenizer
    from tests import reference_tokenizer as ref

    lines, size = read_lines(args.corpus, args.megabytes)
    batches = [lines[i:i + args.batch_size] for i in range(0, len(lines), args.batch_size)]
    print(f"texts: {len(lines):,} lines, {size / 1e6:.2f} MB of {os.path.basename(args.corpus)}"
          f"; {len(batches)} batches of {args.batch_size}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

    t0 = time.perf_counter()
    ours = BertTokenizer(args.vocab_file, do_lower_case=True)
    print(f"ours: construction {time.perf_counter() - t0:.2f} s")
    hf = BertWordPieceTokenizer(args.vocab_file, lowercase=True)

    ours.tokenize(batches[0])  # trace
    ours.tokenize_words(batches[0])
    hf.encode_batch(batches[0], add_special_tokens=False)
    dataset = (tf.data.Dataset.from_tensor_slices(tf.constant(lines)).batch(args.batch_size)
               .map(ours.tokenize).prefetch(2))
    for _ in dataset.take(1):
        pass

    ours_ids = {}

    def run_ours():
        for i, b in enumerate(batches):
            r = ours.tokenize(b)
            ours_ids[i] = (r.flat_values.numpy(), r.row_splits.numpy())

    def run_ours_words():
        for b in batches:
            ours.tokenize_words(b).flat_values.numpy()

    def run_dataset():
        for r in dataset:
            r.flat_values.numpy()

    hf_ids = {}

    def run_hf():
        for i, b in enumerate(batches):
            hf_ids[i] = hf.encode_batch(b, add_special_tokens=False)

    timings = {"ours": [], "ours_words": [], "ours_dataset": [], "hf": []}
    for _ in range(args.repeats):  # interleaved: the machine may be shared
        timings["ours"].append(best_time(run_ours, 1))
        timings["hf"].append(best_time(run_hf, 1))
        timings["ours_words"].append(best_time(run_ours_words, 1))
        timings["ours_dataset"].append(best_time(run_dataset, 1))
    mbs = {k: size / min(v) / 1e6 for k, v in timings.items()}
    print(f"ours  tokenize (eager, batched)        {mbs['ours']:6.2f} MB/s")
    print(f"ours  tokenize_words (eager, batched)  {mbs['ours_words']:6.2f} MB/s")
    print(f"ours  tf.data map(tokenize)            {mbs['ours_dataset']:6.2f} MB/s")
    print(f"HF tokenizers encode_batch             {mbs['hf']:6.2f} MB/s")

    # Agreement. Ours vs the original on a slice (timed too), ours vs HF on everything.
    original = ref.FullTokenizer(args.vocab_file, do_lower_case=True)
    ours_rows = []
    for i in range(len(batches)):
        flat, splits = ours_ids[i]
        ours_rows += [flat[splits[j]:splits[j + 1]].tolist() for j in range(len(splits) - 1)]
    if args.original_megabytes > 0:
        sliced, sliced_size = [], 0
        for line in lines:
            if sliced_size >= args.original_megabytes * 1e6:
                break
            sliced.append(line)
            sliced_size += len(line.encode("utf-8"))
        t0 = time.perf_counter()
        orig_rows = [original.tokenize_to_ids(t) for t in sliced]
        orig_mbs = sliced_size / (time.perf_counter() - t0) / 1e6
        print(f"original algorithm, plain Python      {orig_mbs:6.2f} MB/s "
              f"({sliced_size / 1e6:.2f} MB)")
        bad = sum(a != b for a, b in zip(ours_rows, orig_rows))
        print(f"ours vs original: {bad} of {len(sliced):,} lines differ")
    hf_rows = [e.ids for i in range(len(batches)) for e in hf_ids[i]]
    differ = [i for i, (a, b) in enumerate(zip(ours_rows, hf_rows)) if a != b]
    ours_wrong = [i for i in differ if ours_rows[i] != original.tokenize_to_ids(lines[i])]
    print(f"ours vs HF: {len(differ)} of {len(lines):,} lines differ; in "
          f"{len(differ) - len(ours_wrong)} of them HF differs from the original, in "
          f"{len(ours_wrong)} ours does")
    for i in differ[:3]:
        print(f"  e.g. line {i}: {lines[i][:100]!r}")
    print(f"ratio ours / HF tokenizers: {mbs['ours'] / mbs['hf']:.2f}x "
          f"(tokenize_words {mbs['ours_words'] / mbs['hf']:.2f}x, "
          f"tf.data {mbs['ours_dataset'] / mbs['hf']:.2f}x)")


if __name__ == "__main__":
    main()
