"""Streaming reader for the pretraining corpus format, cut into deterministic work units.

Format (as the original tool): UTF-8 text, one sentence per line, a blank line between
documents. Lines end with LF or CRLF, or with CR alone in a file that has no LF (old Mac
text). Files are read as bytes line by line and never held whole. A first pass
(`plan_work_units`) finds document boundaries and cuts the corpus into work units of a fixed
number of documents, in content order; each unit is a list of byte ranges of the corpus files
(a unit runs on across file boundaries, so a corpus of one document per file still gives
pools of many documents), a worker can read it alone, and the cut depends only on the input,
never on the number of workers. A document longer than a unit (a corpus without blank lines
is one document) is cut into several units, `continues` / `open_end` marking the cuts, so a
unit's text stays bounded whatever the corpus's shape; `split_documents` keeps the pieces and
`document_store` joins them back into one document.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "c.txt")
    >>> _ = open(p, "w").write("a b.\\nc d.\\n\\ne f.\\n\\ng h.\\n\\ni j.\\n")
    >>> units, n_docs = plan_work_units([p], docs_per_unit=2)
    >>> n_docs, [(u.num_docs, u.spans[0].first_line) for u in units]
    (4, [(2, 1), (2, 6)])
    >>> [(n, t) for n, t in read_unit_lines(units[1])]
    [(6, 'g h.'), (7, ''), (8, 'i j.')]
"""

from __future__ import annotations

import os
from array import array
from typing import Callable, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from bert_tf.core import file_io
from bert_tf.core.errors import BertTfError

SNIFF_BYTES = 64 << 10   # the head of each file that sniff_text_file looks at
SNIFF_NUL_BYTES = 1024   # ... and of it, where a NUL byte means "binary"
# Compressed files fed by mistake: (magic, kind, how to decompress).
_COMPRESSED = ((b"\x1f\x8b", "gzip", "gunzip"), (b"\xfd7zXZ\x00", "xz", "unxz"),
               (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"))


class CorpusError(BertTfError, ValueError):
    """A corpus (or vocab) the job cannot use; the message names the file and what to do."""


class InvalidLine(NamedTuple):
    """A line that is not valid UTF-8: where it is and why."""

    path: str
    line: int
    reason: str

    def __str__(self):
        return f"{self.path}:{self.line}: not valid UTF-8 ({self.reason})"


class FileSpan(NamedTuple):
    """Bytes [start, end) of `path`; `first_line` is the 1-based line number at `start`;
    `newline` the file's line terminator (b"\r" for a CR-only file; CRLF reads as LF)."""

    path: str
    start: int
    end: int
    first_line: int
    newline: bytes = b"\n"


class WorkUnit(NamedTuple):
    """`num_docs` documents start in unit number `index` (content order), read from `spans`
    (one per file it touches, in order; a file's end always ends a document).

    `continues`: the unit starts inside the previous unit's last document (which was longer
    than a unit); `open_end`: its last document goes on in the next unit."""

    index: int
    spans: Tuple[FileSpan, ...]
    num_docs: int
    continues: bool = False
    open_end: bool = False


def expand_input_globs(spec: str, glob_fn: Callable[[str], Iterable[str]] = file_io.glob,
                       isdir: Callable[[str], bool] = file_io.isdir) -> List[str]:
    """The files named by comma-separated globs, in the order given (each glob sorted).

    A glob matching nothing is an error naming it (a typo would otherwise silently shrink the
    corpus), and so is one matching only directories. Files named twice are read once.
    `glob_fn` / `isdir` list and test paths: `bert_tf.core.file_io`'s (local, or gs:// through
    tf.io.gfile) unless given (the Beam pipeline passes Beam's).

        >>> try: expand_input_globs("/nonexistent/*.txt")
        ... except CorpusError as e: print(e)
        --input_file: no file matches '/nonexistent/*.txt'
        >>> import tempfile
        >>> try: expand_input_globs(tempfile.gettempdir())
        ... except CorpusError as e: print(str(e).split(" is ")[1].split(";")[0])
        a directory
    """
    paths: List[str] = []
    seen = set()
    for pattern in (p.strip() for p in spec.split(",")):
        if not pattern:
            continue
        found = sorted(glob_fn(pattern))
        matches = [m for m in found if not isdir(m)]
        if not matches:
            if found:
                raise CorpusError(f"--input_file: {found[0]} is a directory; give the files, "
                                  f"e.g. {os.path.join(found[0], '*.txt')}")
            raise CorpusError(f"--input_file: no file matches {pattern!r}")
        for m in matches:
            if m not in seen:
                seen.add(m)
                paths.append(m)
    if not paths:
        raise CorpusError("--input_file is empty: give one or more comma-separated globs")
    return paths


def _is_bzip2(head: bytes) -> bool:
    # "BZh", the block size digit, then the block magic (pi): plain text never has it.
    return (len(head) >= 10 and head[:3] == b"BZh" and 0x31 <= head[3] <= 0x39
            and head[4:10] in (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90"))


def newline_of(head: bytes) -> bytes:
    """The line terminator of a file whose first bytes are `head`: CR for a file with CRs
    and no LF (old Mac text, which would otherwise be one huge line), else LF (CRLF lines
    end in LF; the CR is stripped with the other trailing whitespace).

        >>> newline_of(b"a\\rb\\r"), newline_of(b"a\\r\\nb"), newline_of(b"ab")
        (b'\\r', b'\\n', b'\\n')
    """
    return b"\r" if b"\n" not in head and b"\r" in head else b"\n"


# A line longer than this is no sentence (a file without line breaks): refused, as holding
# it would make memory grow with the file.
MAX_LINE_BYTES = 16 << 20


class LineTooLong(ValueError):
    """A line of more than `max_line` bytes (`iter_raw_lines`)."""


def iter_raw_lines(f, newline: bytes = b"\n", limit: Optional[int] = None,
                   max_line: Optional[int] = None) -> Iterator[bytes]:
    """The lines of binary file `f` from its position, each with its terminator (the last
    may lack one), within `limit` bytes when given. Memory: one line (and 1 MB of a
    CR-terminated file); a line longer than `max_line` raises LineTooLong.

        >>> import io
        >>> list(iter_raw_lines(io.BytesIO(b"ab\\rc"), b"\\r"))
        [b'ab\\r', b'c']
        >>> list(iter_raw_lines(io.BytesIO(b"abcdef\\n"), max_line=4))
        Traceback (most recent call last):
        data_prep.corpus.LineTooLong: a line of more than 4 bytes
    """
    if newline == b"\n":
        if limit is None and max_line is None:
            yield from f
            return
        if limit is None:
            while True:
                raw = f.readline(max_line + 1)
                if len(raw) > max_line:
                    raise LineTooLong(f"a line of more than {max_line} bytes")
                if not raw:
                    return
                yield raw
        while limit > 0:
            raw = f.readline(limit)
            if not raw:
                return
            limit -= len(raw)
            yield raw
        return
    pending = b""
    while True:
        want = 1 << 20 if limit is None else min(1 << 20, limit)
        block = f.read(want) if want > 0 else b""
        if limit is not None:
            limit -= len(block)
        if not block:
            if pending:
                yield pending
            return
        parts = (pending + block).split(newline)
        pending = parts.pop()
        for part in parts:
            if max_line is not None and len(part) >= max_line:
                raise LineTooLong(f"a line of more than {max_line} bytes")
            yield part + newline
        if max_line is not None and len(pending) > max_line:
            raise LineTooLong(f"a line of more than {max_line} bytes")


def iter_line_pieces(f, newline: bytes = b"\n",
                     max_bytes: int = 1 << 20) -> Iterator[Tuple[int, bytes]]:
    """(line number, bytes) of binary file `f`: each line whole (with its terminator)
    when it holds at most `max_bytes`; a longer one, even a file without any newline, in
    pieces of at most `max_bytes` cut after their last space (else at a UTF-8 character
    boundary), so memory stays bounded and words whole.

        >>> import io
        >>> list(iter_line_pieces(io.BytesIO(b"ab\\ncd ef gh"), max_bytes=6))
        [(1, b'ab\\n'), (2, b'cd ef '), (2, b'gh')]
    """
    number, pending = 1, b""
    while True:
        block = f.read(max_bytes)
        data = pending + block
        start = 0
        while True:
            end = data.find(newline, start)
            if end < 0:
                break
            end += len(newline)
            yield number, data[start:end]
            number, start = number + 1, end
        rest = data[start:]
        if not block:
            if rest:
                yield number, rest
            return
        while len(rest) > max_bytes:
            cut = rest.rfind(b" ", 0, max_bytes) + 1
            if cut == 0:  # no space: the last whole UTF-8 character
                cut = max_bytes
                while cut > 0 and rest[cut] & 0xC0 == 0x80:
                    cut -= 1
                cut = cut or max_bytes
            yield number, rest[:cut]
            rest = rest[cut:]
        pending = rest


def sniff_text_file(path: str, opener=open) -> bytes:
    """Refuses a file that is clearly not a UTF-8 text corpus, before anything is written.

    Looks at the first `SNIFF_BYTES` only: gzip / bzip2 / xz / zstd / zip magic, a NUL byte
    in the first KB (binary data, UTF-16), or most lines not UTF-8 (e.g. Latin-1 text). The
    message names the file and what to do. `opener(path, "rb")` opens it (e.g. for gs://).
    Returns the file's line terminator (`newline_of`).

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
        raise CorpusError(f"{path}: cannot read input file ({e.strerror or e})") from e
    for magic, kind, tool in _COMPRESSED:
        if head.startswith(magic):
            raise CorpusError(f"{path} is {kind}-compressed, not a text corpus: decompress "
                              f"it ({tool}) and pass the .txt file")
    if _is_bzip2(head):
        raise CorpusError(f"{path} is bzip2-compressed, not a text corpus: decompress it "
                          f"(bunzip2) and pass the .txt file")
    if head.startswith(b"PK\x03\x04"):
        raise CorpusError(f"{path} is a zip archive, not a text corpus: extract it first")
    # NUL in the first KB: binary data or UTF-16 (a stray NUL later in text is only dropped by
    # the tokenizer's cleanup, as the original does).
    nul = head.find(b"\x00", 0, SNIFF_NUL_BYTES)
    if nul >= 0:
        raise CorpusError(f"{path} is not a UTF-8 text corpus (NUL byte at offset {nul}: "
                          f"binary data or UTF-16): pass one-sentence-per-line UTF-8 text")
    newline = newline_of(head)
    lines = head.split(newline)
    if len(head) == SNIFF_BYTES and len(lines) > 1:
        lines = lines[:-1]  # the last line may be cut inside a multi-byte character
    bad = 0
    for line in lines:
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            bad += 1
    if bad * 2 > len(lines):
        raise CorpusError(f"{path}: {bad} of the first {len(lines)} lines are not UTF-8; this "
                          f"is not a text corpus (convert it to UTF-8 first)")
    return newline


def _is_blank(line: bytes) -> bool:
    # ASCII whitespace only: a line blank here is blank for str.strip() too, so unit cuts
    # always fall on real document boundaries.
    return not line.strip()


MAX_UNIT_BYTES = 32 << 20


def plan_work_units(paths: Sequence[str], docs_per_unit: int, opener=open,
                    max_unit_bytes: int = MAX_UNIT_BYTES) -> Tuple[List[WorkUnit], int]:
    """Cuts the corpus into units of `docs_per_unit` documents, in content order and across
    file boundaries (the original pools every document of every file: a unit confined to
    one file would make a one-document file a one-document pool, whose "random next"
    segments all come from the same document). A unit is also closed once it holds
    `max_unit_bytes` of text: book-length documents must not make a pool, and so a
    worker's memory, unbounded. A document that has `max_unit_bytes` of text in one unit
    is cut there (at a line) and goes on in the next unit (`continues` / `open_end`), so a
    unit holds at most 2 x `max_unit_bytes` (plus one line) whatever the corpus's shape;
    corpora whose documents are all shorter are cut exactly as before. A last unit of one
    document, or of fewer than half `docs_per_unit`, joins the one before it (when that
    stays within `max_unit_bytes`), so no pool is left with a handful of documents. The cut
    depends only on the content.

    Returns `(units, total_documents)`. Streams each file once; memory is O(units).
    Sniffs each file first (`sniff_text_file`), and refuses a corpus without documents.
    `opener(path, "rb")` opens a file (e.g. Beam's FileSystems for gs:// paths).
    """
    if docs_per_unit < 1:
        raise ValueError(f"docs_per_unit must be >= 1, got {docs_per_unit}")
    # Each closed unit as (spans, num_docs, bytes, continues, open_end).
    closed: List[Tuple[List[FileSpan], int, int, bool, bool]] = []
    spans: List[FileSpan] = []  # the open unit's spans of earlier files
    unit_docs = unit_bytes = 0  # the open unit's documents and bytes (all its spans)
    continues = False  # the open unit starts inside a document
    total = 0
    for path in paths:
        newline = sniff_text_file(path, opener)
        offset = 0
        line_no = 0
        span_start, span_line = 0, 1
        in_doc = False
        doc_bytes = 0  # of the current document, in the open unit
        with opener(path, "rb") as f:
            lines = iter_raw_lines(f, newline, max_line=MAX_LINE_BYTES)
            for line in _named_line_errors(lines, path, lambda: line_no):
                line_no += 1
                if _is_blank(line):
                    in_doc = False
                else:
                    cut = None
                    if not in_doc:
                        in_doc, doc_bytes = True, 0
                        if unit_docs == docs_per_unit or unit_bytes >= max_unit_bytes:
                            cut = False
                        unit_docs += 1
                        total += 1
                    elif doc_bytes >= max_unit_bytes:
                        cut = True  # inside a document longer than a unit
                    if cut is not None:
                        if offset > span_start:
                            spans.append(FileSpan(path, span_start, offset, span_line, newline))
                        new_docs = 0 if cut else 1
                        closed.append((spans, unit_docs - new_docs, unit_bytes, continues, cut))
                        spans, unit_docs, unit_bytes = [], new_docs, 0
                        span_start, span_line = offset, line_no
                        continues, doc_bytes = cut, 0
                    doc_bytes += len(line)
                offset += len(line)
                unit_bytes += len(line)
        if offset > span_start:
            spans.append(FileSpan(path, span_start, offset, span_line, newline))
    if total == 0:
        raise CorpusError(f"no documents in {', '.join(paths)}: every line is blank; the "
                          f"input is one sentence per line, blank lines between documents")
    if unit_docs or continues:
        tail = (spans, unit_docs, unit_bytes, continues, False)
        if (closed and not continues and docs_per_unit > 1
                and unit_docs < max(2, docs_per_unit // 2)
                and closed[-1][2] + unit_bytes <= max_unit_bytes):
            prev = closed.pop()
            tail = (prev[0] + spans, prev[1] + unit_docs, prev[2] + unit_bytes, prev[3], False)
        closed.append(tail)
    units = [WorkUnit(i, tuple(sp), n, c, o) for i, (sp, n, _, c, o) in enumerate(closed)]
    return units, total


def _named_line_errors(lines: Iterator[bytes], path: str, line_no: Callable[[], int]):
    # LineTooLong as a CorpusError naming the file and line.
    try:
        yield from lines
    except LineTooLong:
        raise CorpusError(f"{path}:{line_no() + 1}: a line of more than "
                          f"{MAX_LINE_BYTES:,} bytes; the input is one sentence per line, a "
                          f"blank line between documents: split the text into lines") from None


def read_unit_lines(unit: WorkUnit, invalid: Optional[List[InvalidLine]] = None,
                    opener=open) -> Iterator[Tuple[int, str]]:
    """Yields `(line_number, stripped_text)` for the unit's lines; '' marks a blank line (and
    is yielded between two files, whose boundary always ends a document).

    A line that is not valid UTF-8 is not yielded; it is appended to `invalid` (when given)
    as `InvalidLine(path, line, reason)`, so the caller can report, count or refuse it.
    """
    for k, span in enumerate(unit.spans):
        if k:
            yield span.first_line, ""
        with opener(span.path, "rb") as f:
            f.seek(span.start)
            line_no = span.first_line
            for raw in iter_raw_lines(f, span.newline, span.end - span.start):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    if invalid is not None:
                        invalid.append(InvalidLine(span.path, line_no,
                                                   f"byte {e.start}: {e.reason}"))
                else:
                    yield line_no, text.strip()
                line_no += 1


def split_documents(segments: Iterable[Optional[Sequence[int]]], continues: bool = False,
                    open_end: bool = False) -> List[List[Sequence[int]]]:
    """Groups tokenized lines into documents, as the original reader does.

    `None` is a blank line (a document boundary); an empty segment (a line that gave no
    tokens) is not added; documents left empty are dropped.

        >>> split_documents([[1, 2], [], [3], None, None, [4], None, []])
        [[[1, 2], [3]], [[4]]]

    A unit cut inside a long document (`WorkUnit.continues` / `open_end`) keeps its pieces
    of that document even when empty: with `continues` the first entry is the lines before
    the first blank line (the end of the previous unit's last document), with `open_end`
    the last is the lines after the last blank line (the start of a document the next unit
    goes on with); a unit without a blank line gives one entry, both at once.

        >>> split_documents([[], None, [4], None, [5]], continues=True, open_end=True)
        [[], [[4]], [[5]]]
        >>> split_documents([[1], [2]], continues=True, open_end=True)
        [[[1], [2]]]
    """
    head: List[Sequence[int]] = []
    documents: List[List[Sequence[int]]] = [[]]
    in_head = continues
    for seg in segments:
        if seg is None:
            if in_head:
                in_head = False
            elif documents[-1]:
                documents.append([])
        elif len(seg):
            (head if in_head else documents[-1]).append(seg)
    tail = None
    if open_end and not in_head:
        tail = documents.pop()
    out = [d for d in documents if d]
    if continues:
        out.insert(0, head)
    if tail is not None:
        out.append(tail)
    return out


class LineTokenizer:
    """Tokenizes a unit's stripped lines in batches with a `bert_tf.text.tokenization.BertTokenizer`.

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
