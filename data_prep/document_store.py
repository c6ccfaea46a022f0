"""The tokenized corpus on disk, read one document at a time from any worker.

The first pass of `create_pretraining_data` tokenizes each work unit once and writes it as a
*part*: one file holding the unit's documents as WordPiece ids. `DocumentStore` joins the parts
into one numbering of every document of the corpus, so the second pass can draw a random-next
document uniformly from the whole corpus, as the original tool does, without holding it: a
document is three small positioned reads (`os.pread`) of its part. The operating system's page
cache does the caching; the worker's resident memory holds only the parts' document counts and
a few open file descriptors, whatever the corpus size.

A document longer than a work unit (`corpus.WorkUnit.continues` / `open_end`) is stored as
pieces: the last piece of one part, the first piece of the next parts (`PartLayout`), and read
as one document (`ChainedDocument`), a window of segments at a time, so the original
algorithm walks it in order without it ever being in memory.

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
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

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


class PartLayout(NamedTuple):
    """How a part's pieces map to documents: `pieces` entries in the part file; `head`: the
    first continues the previous part's last document; `tail`: the last goes on in the next
    part; `head_segments` / `tail_segments`: their segment counts (they may be empty)."""

    pieces: int
    head: bool = False
    tail: bool = False
    head_segments: int = 0
    tail_segments: int = 0

    @classmethod
    def from_stats(cls, stats: Dict) -> "PartLayout":
        """From a part's pass-1 counts (`pieces` defaults to `documents`: a part written
        before documents could span parts)."""
        return cls(int(stats.get("pieces", stats["documents"])), bool(stats.get("head")),
                   bool(stats.get("tail")), int(stats.get("head_segments", 0)),
                   int(stats.get("tail_segments", 0)))

    def through(self) -> bool:
        """The whole part is the middle of one document."""
        return self.head and self.tail and self.pieces == 1


def _chain_totals(layout: Sequence[PartLayout]) -> List[int]:
    # totals[p]: segments of the document that starts in part p's tail piece (0 when none).
    after = [0] * (len(layout) + 1)  # after[q]: segments from part q's head on, down the chain
    for q in range(len(layout) - 1, -1, -1):
        lay = layout[q]
        if lay.head:
            after[q] = lay.head_segments + (after[q + 1] if lay.through() else 0)
    return [lay.tail_segments + after[p + 1] if lay.tail and not lay.through() else 0
            for p, lay in enumerate(layout)]


def document_counts(layout: Sequence[PartLayout]) -> List[int]:
    """The documents that start in each part: its pieces but a head, and but a tail whose
    whole document has no segment (dropped, as the original drops empty documents).

        >>> document_counts([PartLayout(2, tail=True, tail_segments=0),
        ...                  PartLayout(1, head=True, tail=True, head_segments=3, tail_segments=3),
        ...                  PartLayout(2, head=True, head_segments=1)])
        [2, 0, 1]
        >>> document_counts([PartLayout(2, tail=True), PartLayout(1, head=True)])
        [1, 0]
    """
    totals = _chain_totals(layout)
    return [lay.pieces - lay.head - (1 if lay.tail and not lay.through() and totals[p] == 0
                                     else 0)
            for p, lay in enumerate(layout)]


class DocumentStore:
    """All documents of the corpus, numbered across the parts in order; `store[d]` reads
    document `d` (a list of `array('i')` segments) from disk.

    `doc_counts[p]` is the number of documents that start in `parts[p]` (known from writing
    them, so opening the store reads nothing); `layout` (one `PartLayout` a part) says which
    documents span parts (none when not given). `opener(path)`, when given, returns a binary
    file object (e.g. Beam's FileSystems for remote parts); local files use `os.pread`. At
    most `max_open` files stay open.
    """

    def __init__(self, parts: Sequence[str], doc_counts: Sequence[int], opener=None,
                 max_open: int = 64, layout: Optional[Sequence[PartLayout]] = None):
        if len(parts) != len(doc_counts):
            raise ValueError("one document count per part")
        if layout is not None and len(layout) != len(parts):
            raise ValueError("one layout per part")
        self.layout = list(layout) if layout is not None else None
        self._chain_cache: Optional[Tuple[int, "ChainedDocument"]] = None
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
        expected = (self.layout[p].pieces if self.layout is not None
                    else self.starts[p + 1] - self.starts[p])
        if magic != MAGIC or n_docs != expected:
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

    def __getitem__(self, d: int):
        if not 0 <= d < self.starts[-1]:
            raise IndexError(f"document {d} outside [0, {self.starts[-1]})")
        p = bisect.bisect_right(self.starts, d) - 1
        if self.layout is None:
            return self.piece(p, d - self.starts[p])
        lay = self.layout[p]
        local = d - self.starts[p] + lay.head
        if lay.tail and local == lay.pieces - 1:
            return self._chain(d, p)
        return self.piece(p, local)

    def piece(self, p: int, local: int) -> "StoredDocument":
        """Entry `local` of part `p` (a document, or a piece of one)."""
        h = self._handle(p)
        n_docs, n_segs = self._sizes[p]
        s0, s1 = struct.unpack("<qq", self._read(h, HEADER.size + 8 * local, 16))
        seg_at = HEADER.size + 8 * (n_docs + 1)
        return StoredDocument(self, p, s0, s1, seg_at, seg_at + 8 * (n_segs + 1))

    def _chain(self, d: int, p: int) -> "ChainedDocument":
        # The document starting in part p's tail piece: that piece, then the head pieces of
        # the parts after it as long as a part is all one piece of it. Kept: a long document
        # is read again and again (its own passes, random-next draws).
        if self._chain_cache is not None and self._chain_cache[0] == d:
            return self._chain_cache[1]
        lay = self.layout[p]
        pieces = [(p, lay.pieces - 1, lay.tail_segments)]
        q = p + 1
        while q < len(self.layout):
            nxt = self.layout[q]
            pieces.append((q, 0, nxt.head_segments))
            if not nxt.through():
                break
            q += 1
        doc = ChainedDocument(self, pieces)
        self._chain_cache = (d, doc)
        return doc

    def part_documents(self, p: int, opener=open) -> list:
        """The documents that start in part `p`, in order: read whole from the part, but a
        document that goes on in later parts, which is read from the store as it is used."""
        pieces = read_part(self.parts[p], opener)
        if self.layout is None:
            return pieces
        lay = self.layout[p]
        own = pieces[1:] if lay.head else pieces
        if lay.tail and not lay.through():
            own.pop()
            if len(own) < self.starts[p + 1] - self.starts[p]:
                own.append(self._chain(self.starts[p + 1] - 1, p))
        return own

    def close(self):
        while self._open:
            self._close(self._open.popitem()[1])

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class ChainedDocument:
    """A document stored as pieces of consecutive parts (`pieces`: (part, entry, segments)),
    read as one: `len()` segments, `doc[j]` an `array('i')`, read on demand."""

    def __init__(self, store: DocumentStore, pieces: Sequence[Tuple[int, int, int]]):
        self._store = store
        self._pieces = [x for x in pieces if x[2] > 0]
        self._starts = [0]
        for _, _, n in self._pieces:
            self._starts.append(self._starts[-1] + n)
        self._current: Optional[Tuple[int, StoredDocument]] = None

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, j: int) -> array:
        if not 0 <= j < self._starts[-1]:
            raise IndexError(j)
        k = bisect.bisect_right(self._starts, j) - 1
        if self._current is None or self._current[0] != k:
            p, local, _ = self._pieces[k]
            self._current = (k, self._store.piece(p, local))
        return self._current[1][j - self._starts[k]]

    def __iter__(self):
        return (self[j] for j in range(len(self)))

    def __eq__(self, other):
        return list(self) == list(other)


class StoredDocument:
    """One document of a `DocumentStore`: `len()` segments, `doc[j]` an `array('i')`.

    Segments are read on demand, `WINDOW` at a time: a random-next segment B usually needs
    the few segments after a random start, not the whole (possibly book-length) document.
    """

    WINDOW = 16

    def __init__(self, store, part, s0, s1, seg_at, tok_at):
        # The part by number, its file handle asked of the store at each read: the store
        # may close and reuse it meanwhile (at most `max_open` stay open).
        self._store, self._part = store, part
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
            read, h = self._store._read, self._store._handle(self._part)
            offs = array("q", read(h, self._seg_at + 8 * (self._s0 + j), 8 * (hi - j + 1)))
            t0 = offs[0]
            toks = array("i", read(h, self._tok_at + 4 * t0, 4 * (offs[-1] - t0)))
            self._segs = [toks[offs[k] - t0:offs[k + 1] - t0] for k in range(hi - j)]
            self._lo, self._hi = j, hi
        return self._segs[j - self._lo]

    def __iter__(self):
        return (self[j] for j in range(self._n))

    def __eq__(self, other):
        return list(self) == list(other)
