r"""How fast is data_prep.build_vocab, and how good is its vocab, against tensorflow_text's learner?

Both learners get the same word counts (BertTokenizer's basic tokenization of the corpus)
and the same target size; the peer is `tensorflow_text.tools.wordpiece_vocab.
wordpiece_tokenizer_learner_lib.learn` (what `bert_vocab_from_dataset` calls). Quality is
measured on held-out English Wikipedia lines with bert_tf's BertTokenizer: the [UNK] rate
and WordPiece tokens per word (fewer = the vocab fits the language better), with Google's
bert-base-uncased vocab (30,522 tokens, learned on far more text) as a reference point.

    PYTHONPATH=. KERAS_BACKEND=tensorflow python benchmarks/build_vocab.py \
        [--corpus=../shared/data/pretrain/wikitext2_bert_format.txt] [--vocab_size=8000]

Prints one line per measurement and the ratio peer time / our time.
"""

import argparse
import itertools
import os
import resource
import tempfile
import time

from data_prep import build_vocab as bv

SHARED = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                      "shared", "data"))


def tokens_per_word(vocab_file, lines, do_lower_case=True):
    """(WordPiece tokens per basic-tokenizer word, [UNK] fraction of tokens)."""
    from bert_tf.text.tokenization import BertTokenizer

    tok = BertTokenizer(vocab_file, do_lower_case=do_lower_case)
    words = tok.tokenize_words(lines)
    n_words = int(words.row_lengths().numpy().sum())
    ids = words.flat_values.numpy()
    return len(ids) / n_words, float((ids == tok.unk_id).mean())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=os.path.join(SHARED, "pretrain",
                                                         "wikitext2_bert_format.txt"))
    parser.add_argument("--held_out", default=os.path.join(SHARED, "pretrain",
                                                           "enwiki_2015_bert_format.txt"))
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--skip_peer", action="store_true")
    args = parser.parse_args()

    out_dir = tempfile.mkdtemp(prefix="bench_build_vocab_")
    ours_file = os.path.join(out_dir, "ours.txt")
    pretokenize = bv.bert_pretokenizer(True)
    pretokenize(["warm up the graph"])
    rss_base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS after loading TensorFlow and the tokenizer: {rss_base:.0f} MB")

    stats = bv.CorpusStats()
    t0 = time.perf_counter()
    counts = bv.count_words(bv.read_corpus_lines([args.corpus], stats), pretokenize, stats)
    t_count = time.perf_counter() - t0
    print(f"corpus {args.corpus}: {os.path.getsize(args.corpus) / 1e6:.1f} MB, {stats.lines} "
          f"lines, {stats.words} words, {len(counts)} distinct")
    print(f"counting words: {t_count:.1f} s = {stats.lines / t_count:,.0f} lines/s, "
          f"{stats.words / t_count:,.0f} words/s")

    t0 = time.perf_counter()
    isolated = bv.isolated_characters({c for w in counts for c in w}, pretokenize)
    vocab = bv.build_vocab_from_counts(counts, args.vocab_size, isolated_chars=isolated)
    bv.write_vocab(vocab, ours_file)
    t_ours = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"ours: learned {len(vocab)} tokens in {t_ours:.1f} s; peak RSS so far {rss_mb:.0f} MB")

    with open(args.held_out, encoding="utf-8") as f:
        held = [s.strip() for s in itertools.islice(f, 20000, 22000) if s.strip()]
    files = {"ours": ours_file,
             "bert-base-uncased": os.path.join(SHARED, "vocab", "bert-base-uncased-vocab.txt")}

    if not args.skip_peer:
        from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as peer

        t0 = time.perf_counter()
        peer_vocab = peer.learn(counts, args.vocab_size, bv.reserved_tokens(),
                                lower_thresh=1, max_unique_chars=100_000)
        t_peer = time.perf_counter() - t0
        files["tensorflow_text"] = os.path.join(out_dir, "peer.txt")
        bv.write_vocab(peer_vocab, files["tensorflow_text"])
        print(f"tensorflow_text learner: {len(peer_vocab)} tokens in {t_peer:.1f} s; "
              f"ratio peer/ours {t_peer / t_ours:.1f}x")

    for name, path in files.items():
        per_word, unk = tokens_per_word(path, held)
        print(f"held-out ({len(held)} enwiki lines) with {name}: {per_word:.3f} tokens/word, "
              f"[UNK] {100 * unk:.3f}% of tokens")


if __name__ == "__main__":
    main()
