r"""Learn a WordPiece vocabulary from a pretraining corpus (docs/contracts.md §3).

    python -m data_prep.build_vocab --input_file=corpus/*.txt --vocab_file=vocab.txt \
        --vocab_size=30522 --do_lower_case [--num_unused=99] \
        [--nostrip_accents] [--pre_tokenizer=kiwi]

Input is the pretraining format: UTF-8, one sentence per line, blank lines between
documents (blank lines are simply skipped here; input checks are data_prep.corpus's).
Text is split into words with the very BasicTokenizer steps `bert_tf.BertTokenizer`
applies before WordPiece (cleaning, CJK spacing, lower case + accent stripping when
uncased, punctuation split; `bert_tf.text.text_rules`, which both share), so every piece
learned here is one the tokenizer can produce.

Output, one token a line, exactly `vocab_size` lines unless the corpus is too small:

    [PAD]                              id 0 (padding must be id 0)
    [unused0] .. [unused{N-1}]         N = --num_unused (default 99, so that [UNK] [CLS]
                                       [SEP] [MASK] get ids 100-103 as in Google's vocabs)
    [UNK] [CLS] [SEP] [MASK]
    every character of the corpus      bare and as "##c", of every script (Hangul, CJK,
                                       kana, ...), so no word of a seen script becomes [UNK];
                                       "##c" is left out for characters the tokenizer always
                                       splits off (punctuation, CJK ideographs), which it
                                       could never use
    learned pieces                     in the order they were learned

Learning is greedy pair merging over word counts (the BPE-style WordPiece trainer):
words start as characters ("h ##e ##l ##l ##o"), and the most frequent adjacent pair is
merged into a new piece until the vocabulary is full or no pair occurs `min_frequency`
times. Ties break on the pair's text, so the same corpus always gives the same file.

Memory is bounded: the corpus is streamed, only a word-count table is kept, and that
table is cut back to the `max_distinct_words` most frequent words whenever it doubles.

Example (library use, from word counts):

>>> counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
>>> vocab = build_vocab_from_counts(counts, vocab_size=30, num_unused=1,
...                                 isolated_chars=())
>>> vocab[:7]
['[PAD]', '[unused0]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'd']
>>> len(vocab), vocab[-4:]
(30, ['##es', '##est', '##ow', 'low'])
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import sys
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from absl import flags, logging
from tqdm import tqdm

from bert_tf.app.setting_fields import REQUIRED, CorpusTextSettings, setting
from bert_tf.core import file_io, output_guard
from bert_tf.core.constants import PAD_TOKEN, SPECIAL_TOKENS
from bert_tf.text.pre_tokenizers import get_pre_tokenizer
from bert_tf.text.text_rules import BasicTokenizer
from data_prep import corpus
# One reader of the corpus format: input errors, globs and the binary sniff are corpus.py's
# (shared with create_pretraining_data).
from data_prep.corpus import CorpusError

DEFAULT_NUM_UNUSED = 99
JOINER = "##"
# The original WordpieceTokenizer maps longer words to [UNK] whole, so learning from them
# would only add pieces the tokenizer never uses.
MAX_CHARS_PER_WORD = 200

Pretokenizer = Callable[[Sequence[str]], List[List[str]]]


@dataclasses.dataclass
class CorpusStats:
    """What reading the corpus found; `invalid_lines` holds "FILE:LINE" strings."""
    files: int = 0
    lines: int = 0
    words: int = 0
    invalid_lines: List[str] = dataclasses.field(default_factory=list)
    pruned: int = 0  # times the word table was cut back to max_distinct_words


# ---------------------------------------------------------------------------------------
# Reading the corpus


def read_corpus_lines(paths: Sequence[str], stats: CorpusStats, *, max_input_lines: int = 0,
                      strict: bool = False,
                      on_bytes: Optional[Callable[[int], None]] = None) -> Iterator[str]:
    """Yields the stripped non-blank lines of `paths`, streaming.

    A line that is not UTF-8 is recorded in `stats.invalid_lines` as FILE:LINE and skipped
    (an error with `strict`). `max_input_lines` > 0 stops after that many sentences.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "c.txt")
    >>> _ = open(p, "wb").write(b"One.\\n\\nTwo \\xff.\\nThree.\\n")
    >>> s = CorpusStats(); list(read_corpus_lines([p], s)), s.invalid_lines == [p + ":3"]
    (['One.', 'Three.'], True)
    """
    for path in paths:
        stats.files += 1
        newline = corpus.sniff_text_file(path, file_io.open_file)  # CR-only files too
        with file_io.open_file(path, "rb") as f:
            # Bounded pieces: a file without newlines is never read whole.
            for piece, (number, raw) in enumerate(corpus.iter_line_pieces(f, newline)):
                if on_bytes is not None:
                    on_bytes(len(raw))
                if piece == 0 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]  # a UTF-8 byte-order mark is not text
                try:
                    line = raw.decode("utf-8").strip()
                except UnicodeDecodeError as e:
                    where = f"{path}:{number}"
                    if strict:
                        raise CorpusError(f"{where}: not valid UTF-8 ({e.reason} at byte "
                                          f"{e.start}); fix the line or drop --strict to "
                                          "skip such lines.") from None
                    stats.invalid_lines.append(where)
                    continue
                if not line:
                    continue
                stats.lines += 1
                yield line
                if max_input_lines and stats.lines >= max_input_lines:
                    return


# ---------------------------------------------------------------------------------------
# Counting words


def prune_counts(counts: Mapping, keep: int) -> Dict:
    """The `keep` most frequent entries; ties broken by the word, so the cut is deterministic.

    >>> prune_counts({"b": 2, "a": 2, "c": 5}, 2)
    {'c': 5, 'a': 2}
    """
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:keep]
    return dict(ranked)


def count_words(lines: Iterable[str], pretokenize: Pretokenizer, stats: CorpusStats, *,
                batch_size: int = 1024, max_distinct_words: int = 500_000) -> Dict[str, int]:
    """Word -> count over `lines`, split by `pretokenize`, in bounded memory.

    When the table grows past 2 x `max_distinct_words` it is cut back to the most frequent
    `max_distinct_words` (rare words only lose counts they could not have made matter).

    >>> count_words(["a b a", "b a"], lambda xs: [x.split() for x in xs], CorpusStats())
    {'a': 3, 'b': 2}
    """
    counts: collections.Counter = collections.Counter()
    batch: List[str] = []

    def flush():
        for words in pretokenize(batch):
            counts.update(words)
            stats.words += len(words)
        batch.clear()

    for line in lines:
        batch.append(line)
        if len(batch) >= batch_size:
            flush()
            if len(counts) > 2 * max_distinct_words:
                counts = collections.Counter(prune_counts(counts, max_distinct_words))
                stats.pruned += 1
    if batch:
        flush()
    if len(counts) > max_distinct_words:
        counts = collections.Counter(prune_counts(counts, max_distinct_words))
        stats.pruned += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def bert_pretokenizer(do_lower_case: bool, strip_accents: Optional[bool] = None,
                      pre_tokenizer: Optional[str] = None) -> Pretokenizer:
    """BertTokenizer's basic (pre-WordPiece) tokenization as a batch function.

    This is `bert_tf.text.text_rules.BasicTokenizer`: the same rules the in-graph BertTokenizer
    is built from (the tests check the words are identical), in plain Python with a
    per-token cache. On the wikitext-2 corpus it is about twice as fast as
    `BertTokenizer.basic_tokenize` (and needs no TensorFlow start-up nor table build).

    `strip_accents` as BertTokenizer's; `pre_tokenizer` (a `bert_tf.text.pre_tokenizers`
    name, e.g. "kiwi" for Korean morphemes) splits the lines first.

    >>> bert_pretokenizer(True)(["Héllo, wörld!", "中文"])
    [['hello', ',', 'world', '!'], ['中', '文']]
    >>> bert_pretokenizer(True, strip_accents=False)(["Héllo, 한국어!"])
    [['héllo', ',', '한국어', '!']]
    """
    basic = BasicTokenizer(do_lower_case, strip_accents=strip_accents).tokenize_batch
    if not pre_tokenizer:
        return basic

    split = get_pre_tokenizer(pre_tokenizer)
    return lambda lines: basic(split(lines))


def isolated_characters(chars: Iterable[str], pretokenize: Pretokenizer) -> List[str]:
    """The characters that `pretokenize` always splits off as a word of their own.

    Found by asking the tokenizer itself (a character between two letters), so this
    follows its punctuation and CJK rules without restating them.

    >>> isolated_characters(["a", ","], lambda xs: [x.replace(",", " , ").split() for x in xs])
    [',']
    """
    chars = sorted(set(chars))
    probes = pretokenize([f"x{c}x" for c in chars])
    return [c for c, words in zip(chars, probes) if len(words) > 1 and c in words]


# ---------------------------------------------------------------------------------------
# Learning


def reserved_tokens(num_unused: int = DEFAULT_NUM_UNUSED) -> List[str]:
    """[PAD], the [unusedN] slots, then [UNK] [CLS] [SEP] [MASK].

    >>> reserved_tokens(2)
    ['[PAD]', '[unused0]', '[unused1]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
    """
    if num_unused < 0:
        raise ValueError(f"num_unused must be >= 0, got {num_unused}.")
    return ([PAD_TOKEN] + [f"[unused{i}]" for i in range(num_unused)]
            + [t for t in SPECIAL_TOKENS if t != PAD_TOKEN])


def character_tokens(word_counts: Mapping[str, int], isolated_chars: Iterable[str] = (),
                     max_tokens: Optional[int] = None) -> List[str]:
    """Single-character tokens: every character bare and, unless isolated, as "##c".

    Bare characters first, then "##" forms, each in code point order. When `max_tokens`
    is smaller than that list, the rarest are dropped (words using them become [UNK]).

    >>> character_tokens({"ab": 3, "b": 1, "!": 2}, isolated_chars="!")
    ['!', 'a', 'b', '##a', '##b']
    >>> character_tokens({"ab": 3, "b": 1, "!": 2}, isolated_chars="!", max_tokens=3)
    ['!', 'a', '##b']
    """
    isolated = set(isolated_chars)
    initial: collections.Counter = collections.Counter()
    inner: collections.Counter = collections.Counter()
    for word, count in word_counts.items():
        if len(word) > MAX_CHARS_PER_WORD:
            continue
        initial[word[0]] += count
        for c in word[1:]:
            inner[c] += count
    scored = {}
    for c in set(initial) | set(inner):
        scored[c] = initial[c]
        # "##c" for every character the tokenizer can leave inside a word, even if this
        # corpus only showed it word-initially: held-out words may have it anywhere.
        if c not in isolated:
            scored[JOINER + c] = inner[c]
    # An isolated character's "##" form is unreachable; keep it only when it was seen
    # inside a word (the pre-tokenizer here differs from the probe), as the last resort.
    for c in isolated:
        if inner[c]:
            scored[JOINER + c] = inner[c]
    kept = sorted(scored, key=lambda t: (-scored[t], t))
    if max_tokens is not None:
        kept = kept[:max_tokens]
    return sorted(kept, key=lambda t: (t.startswith(JOINER), t))


def learn_wordpieces(word_counts: Mapping[str, int], num_pieces: int, *,
                     alphabet: Iterable[str], min_frequency: int = 2,
                     progress: Optional[Callable[[int], None]] = None) -> List[str]:
    """Up to `num_pieces` new multi-character pieces, by greedy most-frequent-pair merging.

    Words containing a character outside `alphabet` are left out (they tokenize to [UNK]
    whatever is learned). Stops early when no pair occurs `min_frequency` times.

    >>> learn_wordpieces({"hug": 10, "pug": 5, "hugs": 5}, 3,
    ...                  alphabet=["h", "p", "##u", "##g", "##s"])
    ['##ug', 'hug', 'hugs']
    """
    alphabet = set(alphabet)
    intern: Dict[str, str] = {}
    words: List[List[str]] = []
    freqs: List[int] = []
    for word, count in word_counts.items():
        if len(word) > MAX_CHARS_PER_WORD or count <= 0:
            continue
        symbols = [word[0]] + [JOINER + c for c in word[1:]]
        if not all(s in alphabet for s in symbols):
            continue
        words.append([intern.setdefault(s, s) for s in symbols])
        freqs.append(count)

    pair_counts: Dict[Tuple[str, str], int] = collections.defaultdict(int)
    where: Dict[Tuple[str, str], set] = collections.defaultdict(set)
    for i, symbols in enumerate(words):
        for pair in zip(symbols, symbols[1:]):
            pair_counts[pair] += freqs[i]
            where[pair].add(i)
    heap = [(-n, a, b) for (a, b), n in pair_counts.items()]
    heapq.heapify(heap)

    known = set(alphabet)
    learned: List[str] = []
    while heap and len(learned) < num_pieces:
        neg, a, b = heapq.heappop(heap)
        stored, current = -neg, pair_counts.get((a, b), 0)
        if stored != current:
            # Counts only ever grow by a fresh heap entry, so a stale larger entry is
            # re-queued at its true count and a stale smaller one is a duplicate.
            if stored > current > 0:
                heapq.heappush(heap, (-current, a, b))
            continue
        if current < min_frequency:
            break
        merged = a + b[len(JOINER):]
        merged = intern.setdefault(merged, merged)
        if merged not in known:
            known.add(merged)
            learned.append(merged)
            if progress is not None:
                progress(1)
        grown = set()
        for i in where.pop((a, b)):
            symbols = words[i]
            out: List[str] = []
            j = 0
            while j < len(symbols):
                if j + 1 < len(symbols) and symbols[j] == a and symbols[j + 1] == b:
                    out.append(merged)
                    j += 2
                else:
                    out.append(symbols[j])
                    j += 1
            if len(out) == len(symbols):
                continue  # index left over from an earlier merge of this word
            count = freqs[i]
            for pair in zip(symbols, symbols[1:]):
                pair_counts[pair] -= count
            for pair in zip(out, out[1:]):
                pair_counts[pair] += count
                where[pair].add(i)
                grown.add(pair)
            words[i] = out
        pair_counts.pop((a, b), None)
        for pair in grown:
            n = pair_counts.get(pair, 0)
            if n > 0:
                heapq.heappush(heap, (-n, pair[0], pair[1]))
    return learned


def build_vocab_from_counts(word_counts: Mapping[str, int], vocab_size: int, *,
                            num_unused: int = DEFAULT_NUM_UNUSED,
                            isolated_chars: Iterable[str] = (), min_frequency: int = 2,
                            progress: Optional[Callable[[int], None]] = None) -> List[str]:
    """The full vocabulary list: reserved tokens, characters, learned pieces.

    >>> build_vocab_from_counts({"aa": 4}, 10, num_unused=0)
    ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'a', '##a', 'aa']
    """
    reserved = reserved_tokens(num_unused)
    budget = vocab_size - len(reserved)
    if budget <= 0:
        raise ValueError(f"vocab_size={vocab_size} leaves no room after {len(reserved)} "
                         f"reserved tokens; raise --vocab_size or lower --num_unused.")
    chars = character_tokens(word_counts, isolated_chars, max_tokens=budget)
    if progress is not None:
        progress(len(reserved) + len(chars))
    pieces = learn_wordpieces(word_counts, budget - len(chars), alphabet=chars,
                              min_frequency=min_frequency, progress=progress)
    vocab, seen = [], set()
    for token in reserved + chars + pieces:
        if token not in seen:
            seen.add(token)
            vocab.append(token)
    return vocab


def write_vocab(tokens: Sequence[str], path: str, command: Optional[str] = None) -> None:
    """Writes one token a line; the file appears complete or not at all. `command`: the
    file is that command's output, with the sidecar marker that lets its next run replace
    it (`output_guard.output_file`; check first with `output_guard.check_output_file`).

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "v.txt"); write_vocab(["[PAD]", "a"], p)
    >>> open(p).read()
    '[PAD]\\na\\n'
    """
    bad = [t for t in tokens if not t or any(c in t for c in "\n\r")]
    if bad:
        raise ValueError(f"vocab tokens must be non-empty single lines, got {bad[:3]!r}")
    text = "".join(t + "\n" for t in tokens).encode("utf-8")
    if command is None:
        output_guard.write_bytes(path, text)  # whole or not at all
        return
    with output_guard.output_file(path, command) as tmp, file_io.open_file(tmp, "wb") as f:
        f.write(text)


def build_vocab(input_file: str, vocab_file: str, vocab_size: int, *, do_lower_case: bool,
                strip_accents: Optional[bool] = None, pre_tokenizer: Optional[str] = None,
                num_unused: int = DEFAULT_NUM_UNUSED, min_frequency: int = 2,
                max_input_lines: int = 0, max_distinct_words: int = 500_000,
                strict: bool = False, pretokenize: Optional[Pretokenizer] = None,
                show_progress: bool = False, log: Callable[[str], None] = lambda s: None
                ) -> Tuple[List[str], CorpusStats]:
    """Reads the corpus, learns the vocabulary and writes it to `vocab_file`.

    `pretokenize` defaults to BertTokenizer's basic tokenization for `do_lower_case` /
    `strip_accents`, after `pre_tokenizer` when one is named.
    Returns the vocabulary and what was read. Nothing is written if anything fails.
    """
    paths = corpus.expand_input_globs(input_file)
    # Never over the corpus, a model dir's vocab or any file build_vocab did not write.
    output_guard.check_output_file(vocab_file, "build_vocab", flag="--vocab_file",
                                   inputs=paths)
    probe = pretokenize  # which characters the tokenizer isolates: never pre-split
    if pretokenize is None:
        probe = bert_pretokenizer(do_lower_case, strip_accents)
        pretokenize = (bert_pretokenizer(do_lower_case, strip_accents, pre_tokenizer)
                       if pre_tokenizer else probe)
    stats = CorpusStats()
    for path in paths:  # a file that is no text corpus: refused before any progress bar
        corpus.sniff_text_file(path, file_io.open_file)
    total_bytes = sum(file_io.file_size(p) for p in paths)
    bar = _progress(show_progress, total=total_bytes, unit="B", unit_scale=True,
                    desc="counting words")
    try:
        lines = read_corpus_lines(paths, stats, max_input_lines=max_input_lines,
                                  strict=strict, on_bytes=bar.update if bar else None)
        word_counts = count_words(lines, pretokenize, stats,
                                  max_distinct_words=max_distinct_words)
    finally:  # an error (--strict) starts on a line of its own
        if bar:
            bar.close()
    for where in stats.invalid_lines[:20]:
        log(f"{where}: not valid UTF-8, line skipped")
    if len(stats.invalid_lines) > 20:
        log(f"... {len(stats.invalid_lines) - 20} more invalid lines skipped")
    if not word_counts:
        raise CorpusError(f"no sentences found in {', '.join(paths)} (all lines blank or "
                          "invalid); the corpus must be UTF-8, one sentence per line.")
    log(f"read {stats.lines} sentences, {stats.words} words, {len(word_counts)} distinct "
        f"words from {stats.files} file(s)")

    isolated = isolated_characters({c for w in word_counts for c in w}, probe)
    bar = _progress(show_progress, total=vocab_size, desc="building vocab")
    vocab = build_vocab_from_counts(word_counts, vocab_size, num_unused=num_unused,
                                    isolated_chars=isolated, min_frequency=min_frequency,
                                    progress=bar.update if bar else None)
    if bar:
        bar.close()
    n_chars = sum(1 for t in vocab if len(t) == 1 or (t.startswith(JOINER) and len(t) == 3))
    if len(vocab) < vocab_size:
        log(f"the corpus allows only {len(vocab)} tokens at min_frequency={min_frequency} "
            f"(asked for {vocab_size}); writing {len(vocab)}")
    with output_guard.locked(vocab_file, flag="--vocab_file"):
        output_guard.check_output_file(vocab_file, "build_vocab", flag="--vocab_file",
                                       inputs=paths)  # again: the corpus took a while
        write_vocab(vocab, vocab_file, "build_vocab")
    log(f"wrote {vocab_file}: {len(vocab)} tokens ({num_unused + 5} reserved, "
        f"{n_chars} characters, {len(vocab) - num_unused - 5 - n_chars} learned)")
    return vocab, stats


def _progress(enabled: bool, **kwargs):
    if not enabled:
        return None

    return tqdm(file=sys.stderr, mininterval=1.0, **kwargs)


# ---------------------------------------------------------------------------------------
# Command line


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildVocabConfig(CorpusTextSettings):
    """The command's flags: the keywords of `build_vocab` (`run`)."""
    input_file: str = setting(
        REQUIRED, "Comma-separated globs of UTF-8 text files, one sentence per line, blank "
        "lines between documents (the pretraining format).")
    vocab_file: str = setting(REQUIRED, "Where to write the vocabulary (one token a line).")
    vocab_size: int = setting(30522, "Total number of tokens, reserved ones included.",
                              lower=1)
    num_unused: int = setting(
        DEFAULT_NUM_UNUSED, "Number of [unusedN] slots after [PAD] for tokens added later. "
        "The default 99 puts [UNK] [CLS] [SEP] [MASK] at ids 100-103 as in Google's "
        "vocabularies.", lower=0)
    min_frequency: int = setting(
        2, "A pair is merged into a new piece only if it occurs this often; a small corpus "
        "may then give fewer than --vocab_size tokens.", lower=1)
    max_input_lines: int = setting(
        0, "Read at most this many sentences (0 = the whole corpus).", lower=0)
    max_distinct_words: int = setting(
        500_000, "Bound on the word-count table (memory): when it doubles this it is cut "
        "back to the most frequent words.", lower=1)
    strict: bool = setting(
        False, "Stop at the first line that is not UTF-8 instead of skipping it.")
    progress: bool = setting(True, "Show progress bars on stderr.")


def run(config: BuildVocabConfig, log: Callable[[str], None] = lambda s: None
        ) -> Tuple[List[str], CorpusStats]:
    """`build_vocab` with the command's settings."""
    values = dataclasses.asdict(config)
    return build_vocab(show_progress=values.pop("progress"), log=log, **values)


def define_flags(flag_values=None) -> None:
    """Defines the command's flags on `flag_values` (default: absl's global FLAGS)."""
    BuildVocabConfig.define_flags(flags.FLAGS if flag_values is None else flag_values)


def main(argv):
    del argv  # cli.run_main refuses positional arguments

    config = BuildVocabConfig.from_flags(flags.FLAGS)  # refuses a missing --input_file
    logging.set_verbosity(logging.INFO)
    try:
        run(config, log=logging.info)
    except ValueError as e:  # CorpusError and bad values: one line from cli.run_main
        raise CorpusError(str(e)) from None


if __name__ == "__main__":
    from bert_tf.app import cli

    cli.run_main(main, define_flags)
