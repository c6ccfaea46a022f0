"""Streaming reader for the pretraining corpus format, cut into deterministic work units.

Format (as the original tool): UTF-8 text, one sentence per line, a blank line between
documents. Files are read as bytes line by line and never held whole. A first pass
(`plan_work_units`) finds document boundaries and cuts the corpus into work units of a fixed
number of documents, in content order; each unit is a byte range of one file, so a worker can
read it alone and the cut depends only on the input, never on the number of workers.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "c.txt")
    >>> _ = open(p, "w").write("a b.\\nc d.\\n\\ne f.\\n\\ng h.\\n")
    >>> units, n_docs = plan_work_units([p], docs_per_unit=2)
    >>> n_docs, [(u.num_docs, u.first_line) for u in units]
    (3, [(2, 1), (1, 6)])
    >>> [(n, t) for n, t in read_unit_lines(units[1])]
    [(6, 'g h.')]
"""

from __future__ import annotations

import glob
import os
import re
import unicodedata
from array import array
from itertools import chain
from typing import Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

SNIFF_BYTES = 1024


class CorpusError(Exception):
    """A corpus (or vocab) the job cannot use; the message names the file and what to do."""


class InvalidLine(NamedTuple):
    """A line that is not valid UTF-8: where it is and why."""

    path: str
    line: int
    reason: str

    def __str__(self):
        return f"{self.path}:{self.line}: not valid UTF-8 ({self.reason})"


class WorkUnit(NamedTuple):
    """Bytes [start, end) of `path`, holding `num_docs` documents, the unit number `index`
    in content order; `first_line` is the 1-based line number at `start`."""

    index: int
    path: str
    start: int
    end: int
    first_line: int
    num_docs: int


def expand_input_globs(spec: str) -> List[str]:
    """The files named by comma-separated globs, in the order given (each glob sorted).

    A glob matching nothing is an error naming it (a typo would otherwise silently shrink the
    corpus). Files named twice are read once.

        >>> try: expand_input_globs("/nonexistent/*.txt")
        ... except CorpusError as e: print(e)
        --input_file: no file matches '/nonexistent/*.txt'
    """
    paths: List[str] = []
    seen = set()
    for pattern in (p.strip() for p in spec.split(",")):
        if not pattern:
            continue
        matches = sorted(m for m in glob.glob(pattern) if os.path.isfile(m))
        if not matches:
            raise CorpusError(f"--input_file: no file matches {pattern!r}")
        for m in matches:
            if m not in seen:
                seen.add(m)
                paths.append(m)
    if not paths:
        raise CorpusError("--input_file is empty: give one or more comma-separated globs")
    return paths


def sniff_text_file(path: str, opener=open) -> None:
    """Refuses a file that is clearly not a text corpus, before anything is written.

    Looks at the first KB only: gzip / zip magic, or a NUL byte (binary data, UTF-16).

        >>> import tempfile, gzip, os
        >>> p = os.path.join(tempfile.mkdtemp(), "c.txt.gz")
        >>> with gzip.open(p, "wt") as f: _ = f.write("text")
        >>> try: sniff_text_file(p)
        ... except CorpusError as e: print(str(e).split(" is ")[1])
        gzip-compressed, not a text corpus: decompress it (gunzip) and pass the .txt file
    """
    try:
        with opener(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as e:
        raise CorpusError(f"{path}: cannot read input file ({e.strerror})") from e
    if head.startswith(b"\x1f\x8b"):
        raise CorpusError(f"{path} is gzip-compressed, not a text corpus: decompress it "
                          f"(gunzip) and pass the .txt file")
    if head.startswith(b"PK\x03\x04"):
        raise CorpusError(f"{path} is a zip archive, not a text corpus: extract it first")
    nul = head.find(b"\x00")
    if nul >= 0:
        raise CorpusError(f"{path} is not a UTF-8 text corpus (NUL byte at offset {nul}: "
                          f"binary data or UTF-16): pass one-sentence-per-line UTF-8 text")


def _is_blank(line: bytes) -> bool:
    # ASCII whitespace only: a line blank here is blank for str.strip() too, so unit cuts
    # always fall on real document boundaries.
    return not line.strip()


MAX_UNIT_BYTES = 32 << 20


def plan_work_units(paths: Sequence[str], docs_per_unit: int, opener=open,
                    max_unit_bytes: int = MAX_UNIT_BYTES) -> Tuple[List[WorkUnit], int]:
    """Cuts the corpus into units of `docs_per_unit` documents (fewer at a file's end, or once
    a unit holds `max_unit_bytes` of text: book-length documents must not make a pool, and so
    a worker's memory, unbounded). The cut depends only on the content.

    Returns `(units, total_documents)`. Streams each file once; memory is O(units).
    Sniffs each file first (`sniff_text_file`), and refuses a corpus without documents.
    `opener(path, "rb")` opens a file (e.g. Beam's FileSystems for gs:// paths).
    """
    if docs_per_unit < 1:
        raise ValueError(f"docs_per_unit must be >= 1, got {docs_per_unit}")
    units: List[WorkUnit] = []
    total = 0
    for path in paths:
        sniff_text_file(path, opener)
        offset = 0
        line_no = 0
        unit_start, unit_line, unit_docs = 0, 1, 0
        in_doc = False
        with opener(path, "rb") as f:
            for line in f:
                line_no += 1
                if _is_blank(line):
                    in_doc = False
                elif not in_doc:
                    in_doc = True
                    if unit_docs == docs_per_unit or offset - unit_start >= max_unit_bytes:
                        units.append(WorkUnit(len(units), path, unit_start, offset, unit_line,
                                              unit_docs))
                        unit_start, unit_line, unit_docs = offset, line_no, 0
                    unit_docs += 1
                    total += 1
                offset += len(line)
        if unit_docs:
            units.append(WorkUnit(len(units), path, unit_start, offset, unit_line, unit_docs))
    if total == 0:
        raise CorpusError(f"no documents in {', '.join(paths)}: every line is blank; the "
                          f"input is one sentence per line, blank lines between documents")
    return units, total


def read_unit_lines(unit: WorkUnit, invalid: Optional[List[InvalidLine]] = None,
                    opener=open) -> Iterator[Tuple[int, str]]:
    """Yields `(line_number, stripped_text)` for the unit's lines; '' marks a blank line.

    A line that is not valid UTF-8 is not yielded; it is appended to `invalid` (when given)
    as `InvalidLine(path, line, reason)`, so the caller can report, count or refuse it.
    """
    with opener(unit.path, "rb") as f:
        f.seek(unit.start)
        remaining = unit.end - unit.start
        line_no = unit.first_line
        while remaining > 0:
            raw = f.readline(remaining)
            if not raw:
                break
            remaining -= len(raw)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                if invalid is not None:
                    invalid.append(InvalidLine(unit.path, line_no, f"byte {e.start}: {e.reason}"))
            else:
                yield line_no, text.strip()
            line_no += 1


def split_documents(segments: Iterable[Optional[Sequence[int]]]) -> List[List[Sequence[int]]]:
    """Groups tokenized lines into documents, as the original reader does.

    `None` is a blank line (a document boundary); an empty segment (a line that gave no
    tokens) is not added; documents left empty are dropped.

        >>> split_documents([[1, 2], [], [3], None, None, [4], None, []])
        [[[1, 2], [3]], [[4]]]
    """
    documents: List[List[Sequence[int]]] = [[]]
    for seg in segments:
        if seg is None:
            if documents[-1]:
                documents.append([])
        elif len(seg):
            documents[-1].append(seg)
    return [d for d in documents if d]


class LineTokenizer:
    """Tokenizes a unit's stripped lines in batches with a `bert_tf.tokenization.BertTokenizer`.

    `tokenize_lines(lines)` returns one entry per line: `None` for a blank line (a document
    boundary), else the line's WordPiece ids as a compact `array('i')` (4 bytes an id, so a
    pool of documents stays small in memory).
    """

    def __init__(self, tokenizer, batch_size: int = 1000):
        self.tokenizer = tokenizer
        self.batch_size = batch_size

    def _tokenize_batch(self, texts: List[str]) -> List[array]:
        rt = self.tokenizer.tokenize(texts)
        flat = rt.flat_values.numpy().astype(np.int32)
        splits = rt.row_splits.numpy()
        out = []
        for s, e in zip(splits[:-1], splits[1:]):
            a = array("i")
            a.frombytes(flat[s:e].tobytes())
            out.append(a)
        return out

    def tokenize_lines(self, lines: Sequence[str]) -> List[Optional[array]]:
        texts = [t for t in lines if t]
        ids: List[array] = []
        for i in range(0, len(texts), self.batch_size):
            ids.extend(self._tokenize_batch(texts[i:i + self.batch_size]))
        it = iter(ids)
        return [next(it) if t else None for t in lines]


# ---------------------------------------------------------------------------------------------
# A pure-Python WordPiece tokenizer for the offline job: the original FullTokenizer's rules,
# with a per-word cache. Natural text repeats its words, so after a short warm-up a line costs
# a `str.translate`, a `split` and one dict lookup per word: several times the throughput of the
# in-graph tokenizer here, and no TensorFlow start-up in the worker processes. Its ids are
# checked against `bert_tf.tokenization.BertTokenizer` on real corpora by the tests.


def _is_control(char: str) -> bool:
    # The original counts only Cc and Cf as control (private-use / unassigned are kept).
    if char in "\t\n\r":
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_whitespace(char: str) -> bool:
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_punctuation(char: str) -> bool:
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True  # all non-alphanumeric ASCII, as the original
    return unicodedata.category(char).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


_ASCII_WORDS = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9]")


class _CleanMap(dict):
    """`str.translate` table built on demand: drops NUL / U+FFFD / control characters, maps
    whitespace to a space, surrounds CJK ideographs with spaces (the original's text cleanup
    and Chinese-character split, one character class lookup per distinct character)."""

    def __missing__(self, cp: int):
        char = chr(cp)
        if cp == 0 or cp == 0xFFFD or _is_control(char):
            out = None
        elif _is_whitespace(char):
            out = " "
        elif _is_cjk(cp):
            out = f" {char} "
        else:
            out = char
        self[cp] = out
        return out


class WordPieceTokenizer:
    """The original BERT FullTokenizer over a vocab, in plain Python with a word cache.

    `tokenize_line(text)` gives the WordPiece ids of one line (no [CLS]/[SEP]);
    `tokenize_lines(lines)` the `LineTokenizer` interface of the job.

        >>> tok = WordPieceTokenizer(["[PAD]", "[UNK]", "un", "##aff", "##able", ",", "x"])
        >>> tok.tokenize_line("UnAffable, X!")
        [2, 3, 4, 5, 6, 1]
    """

    def __init__(self, vocab_tokens: Sequence[str], do_lower_case: bool = True,
                 max_input_chars_per_word: int = 200, unk_token: str = "[UNK]",
                 max_cache_entries: int = 300_000):
        self.vocab = {}
        for i, tok in enumerate(vocab_tokens):
            self.vocab[tok] = i  # a duplicated token keeps its last id, as the original's dict
        if unk_token not in self.vocab:
            raise CorpusError(f"vocab lacks {unk_token}")
        self.unk_id = self.vocab[unk_token]
        # No vocab entry is longer than this (in characters, "##" excluded), so longer
        # candidate pieces need not be looked up.
        self._longest = max((len(t) - 2 if t.startswith("##") else len(t) for t in self.vocab),
                            default=1)
        self._pieces: dict = {}
        self.do_lower_case = do_lower_case
        self.max_chars = max_input_chars_per_word
        self._clean = _CleanMap()
        self._cache: dict = {}
        self._max_cache = max_cache_entries

    @classmethod
    def from_vocab_file(cls, path: str, do_lower_case: bool = True) -> "WordPieceTokenizer":
        """Reads the vocab as the original does: one token a line, stripped."""
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return cls([t.strip() for t in lines], do_lower_case)

    def _split_punctuation(self, token: str) -> List[str]:
        if token.isascii():
            # After cleanup every non-alphanumeric ASCII character is punctuation.
            return _ASCII_WORDS.findall(token)
        pieces, current = [], []
        for char in token:
            if _is_punctuation(char):
                if current:
                    pieces.append("".join(current))
                    current = []
                pieces.append(char)
            else:
                current.append(char)
        if current:
            pieces.append("".join(current))
        return pieces

    def _wordpiece(self, word: str, out: List[int]) -> None:
        cached = self._pieces.get(word)
        if cached is None:
            cached = self._pieces[word] = self._wordpiece_uncached(word)
        out.extend(cached)

    def _wordpiece_uncached(self, word: str) -> tuple:
        if len(word) > self.max_chars:
            return (self.unk_id,)
        vocab, longest, start, ids = self.vocab, self._longest, 0, []
        while start < len(word):
            end = min(len(word), start + longest)
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in vocab:
                    ids.append(vocab[piece])
                    break
                end -= 1
            else:
                return (self.unk_id,)  # no piece matches: the whole word is [UNK]
            start = end
        return tuple(ids)

    def _token_ids(self, token: str) -> tuple:
        if self.do_lower_case:
            token = token.lower()
            if not token.isascii():
                token = "".join(c for c in unicodedata.normalize("NFD", token)
                                if unicodedata.category(c) != "Mn")
        out: List[int] = []
        # split() again: lower-casing / NFD can in principle expose whitespace.
        for word in token.split():
            for piece in (self._split_punctuation(word) if not word.isalnum() else (word,)):
                self._wordpiece(piece, out)
        return tuple(out)

    def tokenize_line(self, text: str) -> List[int]:
        cache = self._cache
        tokens = text.translate(self._clean).split()
        # Lookups and concatenation run in C (map / chain); only misses cost Python work.
        found = list(map(cache.get, tokens))
        if None in found:
            for k, token in enumerate(tokens):
                if found[k] is None:
                    if len(cache) >= self._max_cache:
                        cache.clear()  # bounded memory on corpora with huge word lists
                        self._pieces.clear()
                    found[k] = cache[token] = self._token_ids(token)
        return list(chain.from_iterable(found))

    def tokenize_lines(self, lines: Sequence[str]) -> List[Optional[array]]:
        return [array("i", self.tokenize_line(t)) if t else None for t in lines]
