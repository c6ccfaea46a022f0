"""Fast `tf.train.Example` encoding of pretraining instances, and atomic output files.

`ExampleEncoder.encode` writes the protobuf wire format by hand (precomputed varint bytes per
id, constant field headers), about 10x faster than building a `tf.train.Example` message. Its
bytes equal `tf.train.Example(...).SerializeToString(deterministic=True)` of the original
tool's feature dict (docs/contracts.md §2; the test checks byte for byte), so the records parse with the
original reader's feature spec.

    >>> enc = ExampleEncoder(max_seq_length=8, max_predictions_per_seq=2)
    >>> rec = enc.encode([101, 103, 2003, 102, 2009, 102], [0, 0, 0, 0, 1, 1], True, [1], [7592])
    >>> len(rec) > 0
    True

TFRecord files are framed here too (numpy CRC-32C), so writing needs no TensorFlow.
"""

from __future__ import annotations

import contextlib
import mmap
import struct
import tempfile
from array import array
from itertools import chain
from typing import Iterator, NamedTuple, Sequence

import numpy as np

from bert_tf.core import output_guard
from bert_tf.core.constants import length_delimited, varint


def _int64_feature(packed: bytes) -> bytes:
    # Feature.int64_list (field 3) holding Int64List.value (field 1, packed); an empty list
    # is an empty message, as protobuf writes it.
    inner = length_delimited(1, packed) if packed else b""
    return length_delimited(3, inner)


def _float_feature(packed: bytes) -> bytes:
    inner = length_delimited(1, packed) if packed else b""
    return length_delimited(2, inner)


def _map_entry(key: str, feature: bytes) -> bytes:
    # Features.feature (field 1) map entry: key (field 1), value (field 2).
    return length_delimited(1, length_delimited(1, key.encode()) + length_delimited(2, feature))


# Map entries in sorted key order: what `SerializeToString(deterministic=True)` writes.
# (Plain `SerializeToString()` under upb orders map entries by a per-process hash seed, so
# the original tool's bytes differ from run to run; the deterministic form is the one
# canonical encoding, and what makes our output byte-reproducible.)
FEATURE_ORDER = ("input_ids", "input_mask", "masked_lm_ids", "masked_lm_positions",
                 "masked_lm_weights", "next_sentence_labels", "segment_ids")


class ExampleEncoder:
    """Encodes instances as serialized `tf.train.Example` bytes (docs/contracts.md §2 schema).

    `input_ids`/`segment_ids` are the unpadded `[CLS] A [SEP] B [SEP]` sequence;
    `masked_lm_positions`/`masked_lm_ids` the predictions (original ids); padding to
    `max_seq_length` / `max_predictions_per_seq` happens here. Ids must be in
    [0, id_limit), default 2**21 (3-byte varints).

        >>> enc = ExampleEncoder(max_seq_length=4, max_predictions_per_seq=1)
        >>> rec = enc.encode([101, 103, 102, 102], [0, 0, 0, 1], False, [1], [7])
        >>> rec[:2]
        b'\\n\\xbc'
    """

    def __init__(self, max_seq_length: int, max_predictions_per_seq: int,
                 id_limit: int = 1 << 21):
        self.max_seq_length = max_seq_length
        self.max_predictions_per_seq = max_predictions_per_seq
        # Also covers the length prefixes (a record is far below 2**21 bytes).
        self._varints = [varint(v) for v in range(max(id_limit, 1 << 16, max_seq_length + 1))]
        self._weights = [_map_entry("masked_lm_weights", _float_feature(
            struct.pack("<f", 1.0) * k + b"\x00\x00\x00\x00" * (max_predictions_per_seq - k)))
            for k in range(max_predictions_per_seq + 1)]
        self._nsp = [_map_entry("next_sentence_labels", _int64_feature(varint(v))) for v in (0, 1)]
        self._keys = [length_delimited(1, key.encode()) for key in
                      ("input_ids", "masked_lm_ids", "masked_lm_positions", "segment_ids")]
        self._mask = [_map_entry("input_mask", _int64_feature(
            b"\x01" * n + b"\x00" * (max_seq_length - n))) for n in range(max_seq_length + 1)]

    def _packed(self, ids: Sequence[int], length: int) -> bytes:
        table = self._varints
        try:
            return b"".join(map(table.__getitem__, ids)) + b"\x00" * (length - len(ids))
        except IndexError:
            bad = [i for i in ids if not 0 <= i < len(table)]
            raise ValueError(f"id {bad[0]} outside [0, {len(table)}): is --vocab_file "
                             f"the vocabulary the ids came from?") from None

    def _int64_entry(self, key_field: bytes, packed: bytes) -> bytes:
        # Same bytes as _map_entry(key, _int64_feature(packed)), with table lookups for the
        # length varints instead of function calls (this runs 4 times per instance).
        v = self._varints
        inner = b"\x0a" + v[len(packed)] + packed if packed else b""
        feature = b"\x1a" + v[len(inner)] + inner
        entry = key_field + b"\x12" + v[len(feature)] + feature
        return b"\x0a" + v[len(entry)] + entry

    def encode(self, input_ids: Sequence[int], segment_ids: Sequence[int], is_random_next: bool,
               masked_lm_positions: Sequence[int], masked_lm_ids: Sequence[int]) -> bytes:
        """Serialized `tf.train.Example` bytes for one instance (see class docstring)."""
        n, k = len(input_ids), len(masked_lm_positions)
        if n > self.max_seq_length or k > self.max_predictions_per_seq:
            raise ValueError(f"instance of {n} tokens / {k} predictions exceeds "
                             f"max_seq_length={self.max_seq_length} / "
                             f"max_predictions_per_seq={self.max_predictions_per_seq}")
        pad = self.max_seq_length - n
        # Segment ids are < 128, so their varints are the bytes themselves (bytes() raises
        # for anything outside [0, 255]; 128..255 would need two bytes).
        seg_packed = bytes(segment_ids) + b"\x00" * pad
        if max(seg_packed, default=0) > 127:
            raise ValueError("segment ids must be in [0, 127]")
        keys, p = self._keys, self.max_predictions_per_seq
        body = b"".join((
            self._int64_entry(keys[0], self._packed(input_ids, self.max_seq_length)),
            self._mask[n],
            self._int64_entry(keys[1], self._packed(masked_lm_ids, p)),
            self._int64_entry(keys[2], self._packed(masked_lm_positions, p)),
            self._weights[k],
            self._nsp[1 if is_random_next else 0],
            self._int64_entry(keys[3], seg_packed),
        ))
        return b"\x0a" + self._varints[len(body)] + body

    def encode_instance(self, instance) -> bytes:
        """`encode` of a `pretraining_instances.TrainingInstance`."""
        return self.encode(instance.input_ids, instance.segment_ids, instance.is_random_next,
                           instance.masked_lm_positions, instance.masked_lm_ids)

    # -- Many instances at once, with numpy (the job's path; `encode` is the reference) -----

    def batch_arrays(self, instances: Sequence) -> "InstanceArrays":
        """The instances' fields as padded numpy matrices (see `InstanceArrays`)."""
        L, P = self.max_seq_length, self.max_predictions_per_seq
        b = len(instances)
        n = np.fromiter(map(len, (x.input_ids for x in instances)), np.int64, b)
        k = np.fromiter(map(len, (x.masked_lm_positions for x in instances)), np.int64, b)
        if b and (n.max() > L or k.max() > P):
            bad = int(np.argmax((n > L) | (k > P)))
            raise ValueError(f"instance of {n[bad]} tokens / {k[bad]} predictions exceeds "
                             f"max_seq_length={L} / max_predictions_per_seq={P}")
        cols_l, cols_p = np.arange(L), np.arange(P)
        in_seq = cols_l < n[:, None]
        in_pred = cols_p < k[:, None]

        def padded(rows, lengths, valid, width):
            total = int(lengths.sum())
            rows = list(rows)
            if all(type(r) is array and r.typecode == "i" for r in rows):
                flat = np.frombuffer(b"".join(rows), np.intc, total)  # no per-id work
            else:
                flat = np.fromiter(chain.from_iterable(rows), np.int64, total)
            out = np.zeros((b, width), np.int64)
            out[valid] = flat
            return out

        ids = padded((x.input_ids for x in instances), n, in_seq, L)
        pos = padded((x.masked_lm_positions for x in instances), k, in_pred, P)
        lab = padded((x.masked_lm_ids for x in instances), k, in_pred, P)
        # Segment ids are almost always [0] * n0 + [1] * n1: check that shape with C-level
        # list ops and build the matrix from n0; anything else takes the general path.
        segs = [x.segment_ids for x in instances]
        n0 = np.fromiter((s.count(0) for s in segs), np.int64, b)
        n1 = np.fromiter((s.count(1) for s in segs), np.int64, b)
        simple = bool(np.all(n0 + n1 == n)) and all(
            not s or s[0] == 0 or z == 0 for s, z in zip(segs, n0.tolist()))
        if simple:
            simple = all(s[:z].count(0) == z for s, z in zip(segs, n0.tolist()))
        if simple:
            seg = ((cols_l >= n0[:, None]) & in_seq).astype(np.int64)
        else:
            seg = padded(segs, n, in_seq, L)
        nsp = np.fromiter((1 if x.is_random_next else 0 for x in instances), np.int64, b)
        return InstanceArrays(ids, seg, n, pos, lab, k, nsp)

    def _varint_tables(self):
        # For every value below the id limit: its varint in 4 byte slots (the 4th never
        # used; 4 bytes gather as one uint32), which slots are used, and its length.
        if getattr(self, "_vtab", None) is None:
            v = np.arange(len(self._varints), dtype=np.int64)
            two, three = v >= 0x80, v >= 0x4000
            zero = np.zeros_like(v)
            vbytes = np.stack([(v & 0x7F) | (two << 7), ((v >> 7) & 0x7F) | (three << 7),
                               v >> 14, zero], axis=-1).astype(np.uint8)
            vkeep = np.stack([np.ones_like(two), two, three, zero.astype(bool)], axis=-1)
            self._vtab = (vbytes.view("<u4").ravel(), vkeep.astype(np.uint8).view("<u4").ravel(),
                          (1 + two + three).astype(np.uint8))
        return self._vtab

    def _crc_tables(self, max_len: int):
        if getattr(self, "_crc", None) is None or self._crc[0].shape[0] < max_len:
            self._crc = _crc_position_tables(max(max_len, 1024))
        return self._crc

    def encode_arrays(self, a: "InstanceArrays", framed: bool = True):
        """Serialized records of a batch, concatenated: `(buffer, offsets)` with record r at
        `buffer[offsets[r]:offsets[r + 1]]` (numpy uint8 / int64). With `framed`, each record
        is a complete TFRecord (length, CRCs), so the buffer is valid TFRecord file content.

        Byte for byte `encode` of each instance (and `frame_records` of those); the varints
        and headers are built for the whole batch with vector operations instead of per id.
        """
        L, P = self.max_seq_length, self.max_predictions_per_seq
        b = a.ids.shape[0]
        if b == 0:
            return np.zeros(0, np.uint8), np.zeros(1, np.int64)
        limit = len(self._varints)
        for name, m in (("input", a.ids), ("masked_lm", a.labels), ("position", a.positions)):
            if m.size and (m.min() < 0 or m.max() >= limit):
                bad = m[(m < 0) | (m >= limit)][0]
                raise ValueError(f"id {bad} outside [0, {limit}): is --vocab_file "
                                 f"the vocabulary the ids came from?")
        if a.segment_ids.size and (a.segment_ids.min() < 0 or a.segment_ids.max() > 127):
            raise ValueError("segment ids must be in [0, 127]")
        parts, keeps = [], []

        def const(data: bytes):
            parts.append(np.broadcast_to(np.frombuffer(data, np.uint8), (b, len(data))))
            keeps.append(None)

        vbytes, vkeep, vlens = self._varint_tables()

        def varint_cols(v):  # v: (b, w) values < limit -> 4 slots each, with keep flags
            v = np.asarray(v).reshape(b, -1)
            return (np.take(vbytes, v).view(np.uint8).reshape(b, -1),
                    np.take(vkeep, v).view(np.bool_).reshape(b, -1),
                    np.take(vlens, v).sum(axis=1, dtype=np.int64))

        def add(cols):
            parts.append(cols[0])
            keeps.append(cols[1])

        def vlen(x):
            return 1 + (x >= 0x80) + (x >= 0x4000)

        entries, body_len = [], 0
        for key, values in (("input_ids", a.ids), ("masked_lm_ids", a.labels),
                            ("masked_lm_positions", a.positions)):
            packed = varint_cols(values)
            p_len = packed[2]
            i_len = 1 + vlen(p_len) + p_len
            f_len = 1 + vlen(i_len) + i_len
            key_field = length_delimited(1, key.encode())
            e_len = len(key_field) + 1 + vlen(f_len) + f_len
            entries.append((key_field, packed, p_len, i_len, f_len, e_len))
            body_len = body_len + 1 + vlen(e_len) + e_len
        mask_tab = np.frombuffer(b"".join(self._mask), np.uint8).reshape(L + 1, -1)
        w_tab = np.frombuffer(b"".join(self._weights), np.uint8).reshape(P + 1, -1)
        nsp_tab = np.frombuffer(b"".join(self._nsp), np.uint8).reshape(2, -1)
        seg_head = _int64_entry_head(self._keys[3], L)
        body_len = (body_len + mask_tab.shape[1] + w_tab.shape[1] + nsp_tab.shape[1]
                    + len(seg_head) + L)
        rec_len = 1 + vlen(body_len) + body_len

        def entry(e):
            key_field, packed, p_len, i_len, f_len, e_len = e
            const(b"\x0a")
            add(varint_cols(e_len))
            const(key_field + b"\x12")
            add(varint_cols(f_len))
            const(b"\x1a")
            add(varint_cols(i_len))
            const(b"\x0a")
            add(varint_cols(p_len))
            add(packed)

        const(b"\x0a")
        add(varint_cols(body_len))
        entry(entries[0])
        parts.append(mask_tab[a.lengths]); keeps.append(None)
        entry(entries[1])
        entry(entries[2])
        parts.append(w_tab[a.num_predictions]); keeps.append(None)
        parts.append(nsp_tab[a.next_sentence]); keeps.append(None)
        const(seg_head)
        parts.append(a.segment_ids.astype(np.uint8)); keeps.append(None)
        m = np.concatenate(parts, axis=1)
        keep = np.concatenate([np.ones(p.shape, bool) if k is None else k
                               for p, k in zip(parts, keeps)], axis=1)
        data = m[keep]
        rec_len = rec_len.astype(np.int64)
        ends = np.cumsum(rec_len)
        if not framed:
            return data, np.concatenate([[0], ends])
        data_crc = _masked(self._crc_flat(data, rec_len, ends))
        heads = rec_len.astype("<u8").view(np.uint8).reshape(b, 8)
        head_crc = _masked(self._crc_flat(heads.ravel(), np.full(b, 8, np.int64),
                                          np.arange(8, 8 * b + 1, 8)))
        # Framed: length, its CRC, the record, its CRC (compacting the slots once more is
        # cheaper than scattering the record bytes).
        m = np.concatenate([heads, head_crc.astype("<u4").view(np.uint8).reshape(b, 4), m,
                            data_crc.astype("<u4").view(np.uint8).reshape(b, 4)], axis=1)
        edge = np.ones((b, 12), bool)
        keep = np.concatenate([edge, keep, edge[:, :4]], axis=1)
        return m[keep], np.concatenate([[0], np.cumsum(rec_len + 16)])

    def _crc_flat(self, data, lengths, ends):
        """CRC-32C of consecutive records in `data` (uint8), record r ending at `ends[r]`."""
        table, zeros = self._crc_tables(int(lengths.max()))
        # A byte d places before the end of its record adds table[d, byte] (CRC is linear;
        # a zero byte adds nothing); the standard init/final xor adds zeros[length].
        # Index (d << 8) | byte, in int32 while it fits (half the memory traffic).
        itype = np.int32 if data.size < (1 << 22) else np.int64
        idx = np.repeat(((ends - 1) << 8).astype(itype), lengths)
        idx -= np.arange(0, data.size << 8, 256, dtype=itype)
        idx |= data
        contrib = table.ravel()[idx]
        raw = np.bitwise_xor.reduceat(contrib, ends - lengths)
        return raw ^ zeros[lengths]


class InstanceArrays(NamedTuple):
    """A batch of instances as padded int64 matrices (`ExampleEncoder.batch_arrays`)."""

    ids: object            # (b, max_seq_length) input ids, zero padded
    segment_ids: object    # (b, max_seq_length)
    lengths: object        # (b,) unpadded sequence lengths
    positions: object      # (b, max_predictions_per_seq) masked positions, zero padded
    labels: object         # (b, max_predictions_per_seq) original ids there
    num_predictions: object  # (b,)
    next_sentence: object  # (b,) 1 = random next


def _int64_entry_head(key_field: bytes, packed_len: int) -> bytes:
    # The bytes of an int64 map entry before its packed values (of `packed_len` bytes).
    inner_len = 1 + len(varint(packed_len)) + packed_len
    feature_len = 1 + len(varint(inner_len)) + inner_len
    entry_len = len(key_field) + 1 + len(varint(feature_len)) + feature_len
    return (b"\x0a" + varint(entry_len) + key_field + b"\x12" + varint(feature_len) + b"\x1a"
            + varint(inner_len) + b"\x0a" + varint(packed_len))


def _crc_position_tables(max_len: int):
    """`table[d, byte]`: the CRC-32C register (init 0) of `byte` followed by d zero bytes, for
    d < max_len; `zeros[n]`: CRC-32C of n zero bytes, for n <= max_len."""
    base = _crc32c_table()
    table = np.empty((max_len, 256), np.uint32)
    table[0] = base
    shift = np.uint32(8)
    for d in range(1, max_len):
        prev = table[d - 1]
        table[d] = base[prev & 0xFF] ^ (prev >> shift)
    zeros = np.empty(max_len + 1, np.uint32)
    reg = 0xFFFFFFFF
    b = base.tolist()
    for n in range(max_len + 1):
        zeros[n] = reg ^ 0xFFFFFFFF
        reg = b[reg & 0xFF] ^ (reg >> 8)
    return table, zeros


def _masked(crc):
    crc = crc.astype(np.uint64)
    return ((((crc >> np.uint64(15)) | (crc << np.uint64(17))) + np.uint64(0xA282EAD8))
            & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def feature_spec(max_seq_length: int, max_predictions_per_seq: int):
    """The original run_pretraining reader's feature spec, for `tf.io.parse_single_example`.

        >>> sorted(feature_spec(128, 20))[:2]
        ['input_ids', 'input_mask']
    """
    import tensorflow as tf  # a test helper's; TF-free module (TensorFlow: 9 s)

    i64 = lambda n: tf.io.FixedLenFeature([n], tf.int64)  # noqa: E731
    return {
        "input_ids": i64(max_seq_length),
        "input_mask": i64(max_seq_length),
        "segment_ids": i64(max_seq_length),
        "masked_lm_positions": i64(max_predictions_per_seq),
        "masked_lm_ids": i64(max_predictions_per_seq),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
        "next_sentence_labels": i64(1),
    }


class RecordSpill:
    """Append-only store of byte records on a temporary file, read back in any order.

    Keeps a pool's serialized instances out of memory until the final shuffle (only offsets
    stay resident), so a worker's memory does not grow with `dupe_factor` x pool size.

        >>> with RecordSpill() as spill:
        ...     spill.append(b"ab"); spill.append(b"cde")
        ...     [spill[i] for i in (1, 0)]
        [b'cde', b'ab']
    """

    def __init__(self, directory: str | None = None):
        self._file = tempfile.TemporaryFile(dir=directory)
        self._offsets = array("q", [0])
        self._map = None

    def append(self, record: bytes) -> None:
        self._file.write(record)
        self._offsets.append(self._offsets[-1] + len(record))

    def extend(self, buffer, offsets) -> None:
        """Appends the records `buffer[offsets[r]:offsets[r + 1]]` (numpy arrays, as
        `ExampleEncoder.encode_arrays` returns them) with one write."""
        base = self._offsets[-1]
        self._file.write(memoryview(buffer))
        self._offsets.frombytes((np.asarray(offsets[1:], np.int64) + base).tobytes())

    def __len__(self):
        return len(self._offsets) - 1

    def size(self) -> int:
        """Bytes of all records."""
        return self._offsets[-1]

    def __getitem__(self, k: int) -> bytes:
        if self._map is None:
            self._file.flush()
            if self._offsets[-1] == 0:
                return b""
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        return self._map[self._offsets[k]:self._offsets[k + 1]]

    def close(self):
        if self._map is not None:
            self._map.close()
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[str]:
    """Yields a temporary path beside `path`; renames it to `path` only if the block succeeds
    (`bert_tf.core.output_guard.atomic_file`: a hidden, unpredictable name a left-over never
    shares with a glob of the records).

    An interrupted or failed write leaves no file at `path` (and removes the temporary), so
    a file at `path` is always complete.

        >>> import os, tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "out.txt")
        >>> with atomic_output(p) as tmp:
        ...     _ = open(tmp, "w").write("done")
        >>> open(p).read()
        'done'
    """
    with output_guard.atomic_file(path) as tmp:
        yield tmp


# ---------------------------------------------------------------------------------------------
# TFRecord framing without TensorFlow: each record is
#   uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
# (little-endian). CRC-32C is computed with numpy over a batch of records at once (one table
# step per byte position, across all records still that long), so the worker processes never
# need to import TensorFlow.


def _crc32c_table():
    table = np.zeros(256, np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table[i] = c
    return table


_CRC_TABLE = None


def crc32c_batch(records: Sequence[bytes]):
    """CRC-32C (Castagnoli) of each record, as a numpy uint32 array.

        >>> hex(int(crc32c_batch([b"123456789"])[0]))  # the standard check value
        '0xe3069283'
    """
    global _CRC_TABLE
    if _CRC_TABLE is None:
        _CRC_TABLE = _crc32c_table()
    table = _CRC_TABLE
    n = len(records)
    lengths = np.fromiter((len(r) for r in records), np.int64, n)
    order = np.argsort(-lengths, kind="stable")  # longest first: active rows are a prefix
    sorted_lengths = lengths[order]
    width = int(sorted_lengths[0]) if n else 0
    data = np.zeros((n, width), np.uint8)
    for row, k in enumerate(order):
        rec = records[k]
        data[row, :len(rec)] = np.frombuffer(rec, np.uint8)
    crc = np.full(n, 0xFFFFFFFF, np.uint32)
    # active[j] = number of records longer than j
    active = np.searchsorted(-sorted_lengths, -np.arange(width), side="left")
    shift = np.uint32(8)
    for j in range(width):
        m = int(active[j])
        c = crc[:m]
        crc[:m] = table[(c ^ data[:m, j]) & 0xFF] ^ (c >> shift)
    out = np.empty(n, np.uint32)
    out[order] = crc ^ np.uint32(0xFFFFFFFF)
    return out


def _mask(crc):
    crc = crc.astype(np.uint64)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_records(records: Sequence[bytes]) -> bytes:
    """The TFRecord file bytes of `records` (what `tf.io.TFRecordWriter` writes).

        >>> len(frame_records([b"ab", b"c"])) == (8 + 4 + 2 + 4) + (8 + 4 + 1 + 4)
        True
    """
    if not records:
        return b""
    headers = [struct.pack("<Q", len(r)) for r in records]
    header_crc = _mask(crc32c_batch(headers))
    data_crc = _mask(crc32c_batch(records))
    parts = []
    for h, hc, r, dc in zip(headers, header_crc.tolist(), records, data_crc.tolist()):
        parts += (h, struct.pack("<I", hc), r, struct.pack("<I", dc))
    return b"".join(parts)
