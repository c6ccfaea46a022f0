"""The tokenized corpus on disk, read one document at a time from any worker.

The first pass of `create_pretraining_data` tokenizes each work unit once and writes it as a
*part*: one file holding the unit's documents as WordPiece ids. `DocumentStore` joins the parts
into one numbering of every document of the corpus, so the second pass can draw a random-next
document uniformly from the whole corpus, as the original tool does, without holding it: a
document is three small positioned reads (`os.pread`) of its part. The operating system's page
cache does the caching; the worker's resident memory holds only the parts' document counts and
a few open file descriptors, whatever the corpus size.

Part file layout (little-endian):

    b"BERTDOC1", num_docs, num_segments, num_tokens     (int64 each)
    doc_starts[num_docs + 1]       int64, index of each document's first segment
    segment_starts[num_segments + 1] int64, index of each segment's first token
    tokens[num_tokens]             int32 WordPiece ids

    >>> import tempfile, os
    >>> from array import array
    >>> d = tempfile.mkdtemp()
    >>> write_part(os.path.join(d, "p0"), [[array("i", [5, 6]), array("i", [7])]])
    (1, 2, 3)
    >>> write_part(os.path.join(d, "p1"), [[array("i", [8])], [array("i", [9, 10])]])
    (2, 2, 3)
    >>> store = DocumentStore([os.path.join(d, "p0"), os.path.join(d, "p1")], [1, 2])
    >>> len(store), [list(s) for s in store[2]], len(store[0])
    (3, [[9, 10]], 2)
"""

from __future__ import annotations

import bisect
import collections
import os
import struct
from array import array
from typing import List, Sequence, Tuple

MAGIC = b"BERTDOC1"
HEADER = struct.Struct("<8sqqq")


def write_part(path: str, documents: Sequence[Sequence[Sequence[int]]]) -> Tuple[int, int, int]:
    """Writes `documents` (lists of id segments) as a part file; returns
    `(num_docs, num_segments, num_tokens)`."""
    doc_starts = array("q", [0])
    seg_starts = array("q", [0])
    tokens = array("i")
    for doc in documents:
        for seg in doc:
            if type(seg) is array and seg.typecode == "i":
                tokens += seg
            else:
                tokens.extend(seg)
            seg_starts.append(len(tokens))
        doc_starts.append(len(seg_starts) - 1)
    counts = (len(doc_starts) - 1, len(seg_starts) - 1, len(tokens))
    with open(path, "wb") as f:
        f.write(HEADER.pack(MAGIC, *counts))
        for a in (doc_starts, seg_starts, tokens):
            if a.itemsize != {"q": 8, "i": 4}[a.typecode]:
                raise RuntimeError("unexpected C integer sizes on this platform")
            f.write(a.tobytes())
    return counts


def read_part(path: str, opener=open) -> List[List[array]]:
    """Every document of a part (the unit's own documents, read whole)."""
    with opener(path, "rb") as f:
        data = f.read()
    magic, n_docs, n_segs, n_toks = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError(f"{path}: not a document store part")
    at = HEADER.size
    doc_starts = array("q", data[at:at + 8 * (n_docs + 1)])
    at += 8 * (n_docs + 1)
    seg_starts = array("q", data[at:at + 8 * (n_segs + 1)])
    at += 8 * (n_segs + 1)
    tokens = array("i", data[at:at + 4 * n_toks])
    del data
    return [[tokens[seg_starts[s]:seg_starts[s + 1]]
             for s in range(doc_starts[d], doc_starts[d + 1])] for d in range(n_docs)]


class DocumentStore:
    """All documents of the corpus, numbered across the parts in order; `store[d]` reads
    document `d` (a list of `array('i')` segments) from disk.

    `doc_counts[p]` is the number of documents of `parts[p]` (known from writing them, so
    opening the store reads nothing). `opener(path)`, when given, returns a binary file
    object (e.g. Beam's FileSystems for remote parts); local files use `os.pread`. At most
    `max_open` files stay open.
    """

    def __init__(self, parts: Sequence[str], doc_counts: Sequence[int], opener=None,
                 max_open: int = 64):
        if len(parts) != len(doc_counts):
            raise ValueError("one document count per part")
        self.parts = list(parts)
        self.starts = [0]
        for n in doc_counts:
            self.starts.append(self.starts[-1] + int(n))
        self.opener = opener
        self.max_open = max_open
        self._open: "collections.OrderedDict[int, object]" = collections.OrderedDict()
        self._sizes = {}

    def __len__(self) -> int:
        return self.starts[-1]

    def _handle(self, p: int):
        h = self._open.get(p)
        if h is not None:
            self._open.move_to_end(p)
            return h
        if len(self._open) >= self.max_open:
            _, old = self._open.popitem(last=False)
            self._close(old)
        if self.opener is None:
            h = os.open(self.parts[p], os.O_RDONLY)
        else:
            h = self.opener(self.parts[p])
        header = self._read(h, 0, HEADER.size)
        magic, n_docs, n_segs, _ = HEADER.unpack(header)
        if magic != MAGIC or n_docs != self.starts[p + 1] - self.starts[p]:
            raise ValueError(f"{self.parts[p]}: not the document store part this job wrote")
        self._sizes[p] = (n_docs, n_segs)
        self._open[p] = h
        return h

    def _read(self, h, offset: int, size: int) -> bytes:
        if isinstance(h, int):
            return os.pread(h, size, offset)
        h.seek(offset)
        return h.read(size)

    def _close(self, h):
        if isinstance(h, int):
            os.close(h)
        else:
            h.close()

    def __getitem__(self, d: int) -> "StoredDocument":
        if not 0 <= d < self.starts[-1]:
            raise IndexError(f"document {d} outside [0, {self.starts[-1]})")
        p = bisect.bisect_right(self.starts, d) - 1
        h = self._handle(p)
        n_docs, n_segs = self._sizes[p]
        s0, s1 = struct.unpack("<qq", self._read(h, HEADER.size + 8 * (d - self.starts[p]), 16))
        seg_at = HEADER.size + 8 * (n_docs + 1)
        return StoredDocument(self, h, s0, s1, seg_at, seg_at + 8 * (n_segs + 1))

    def close(self):
        while self._open:
            self._close(self._open.popitem()[1])

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class StoredDocument:
    """One document of a `DocumentStore`: `len()` segments, `doc[j]` an `array('i')`.

    Segments are read on demand, `WINDOW` at a time: a random-next segment B usually needs
    the few segments after a random start, not the whole (possibly book-length) document.
    """

    WINDOW = 16

    def __init__(self, store, handle, s0, s1, seg_at, tok_at):
        self._store, self._h = store, handle
        self._s0, self._n = s0, s1 - s0
        self._seg_at, self._tok_at = seg_at, tok_at
        self._lo = self._hi = 0
        self._segs: List[array] = []

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, j: int) -> array:
        if not 0 <= j < self._n:
            raise IndexError(j)
        if not self._lo <= j < self._hi:
            hi = min(self._n, j + self.WINDOW)
            read = self._store._read
            offs = array("q", read(self._h, self._seg_at + 8 * (self._s0 + j), 8 * (hi - j + 1)))
            t0 = offs[0]
            toks = array("i", read(self._h, self._tok_at + 4 * t0, 4 * (offs[-1] - t0)))
            self._segs = [toks[offs[k] - t0:offs[k + 1] - t0] for k in range(hi - j)]
            self._lo, self._hi = j, hi
        return self._segs[j - self._lo]

    def __iter__(self):
        return (self[j] for j in range(self._n))

    def __eq__(self, other):
        return list(self) == list(other)
