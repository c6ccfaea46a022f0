"""The four passes of create_pretraining_data, each in bounded memory (docs/contracts.md §2).

1. Tokenize. The corpus is cut into work units (1 MB of text, more on corpora over 2 GB so that
   there are at most ~2,048 units; optionally at most `--pool_size` documents; in corpus
   order, running on across files: `corpus.plan_work_units`). Each unit is
   tokenized once and written as a part of the *document store* (`document_store`): the
   corpus as WordPiece ids on disk, every document numbered (`UnitProcessor.tokenize_unit`).
2. Instances. Each unit runs the original algorithm on its documents (its generator seeded
   from `--random_seed` and the unit number), drawing each random-next document uniformly
   from the WHOLE corpus (any document but the current one, as the original), read from the
   store by positioned reads. Each record is encoded and sent to one of B shuffle buckets at
   random (B chosen so that a bucket is ~`shuffle_bucket_bytes`, 32 MB)
   (`UnitProcessor.write_unit_instances`).
3. Shuffle. Each bucket's records are gathered from every unit, shuffled in memory and cut
   by destination shard: all buckets in order are a uniform permutation of every instance
   of the corpus, and position k of it goes to shard k % N (the original deals out its
   shuffled instances the same way), so every shard is a uniform sample of the corpus, in
   random order, and shard sizes differ by at most one (`shuffle_bucket`).
4. Write. Each shard is assembled from its part of every bucket, under a temporary name,
   and renamed when complete (`assemble_shard`).

A pass holds one unit's documents (1-32 MB of text), its records' offsets, or one bucket:
its memory does not grow with the corpus. A document longer than a unit (a corpus without
blank lines is one) is cut over several units; the unit where it starts walks it through
the document store a window of segments at a time, and writes its many records in chunks
(`UnitProcessor.CHUNK_RECORDS` / `CHUNK_BYTES`), so that shape is bounded too.

Every random choice is seeded by (seed, unit) or (seed, bucket), so the output never
depends on how the passes are spread over processes. The job that runs them (workers,
resume, summary) is `pretraining_job`; the Beam pipeline runs passes 1-2 with the same
`UnitProcessor`.
"""

from __future__ import annotations

import dataclasses
import os
import random
import struct
from typing import Dict, List, Optional, Sequence

import numpy as np

from bert_tf.app.setting_fields import REQUIRED, CorpusTextSettings, Settings, override, setting
from bert_tf.core.constants import CLS_TOKEN, MASK_TOKEN, SEP_TOKEN, SPECIAL_TOKENS
from bert_tf.text import pre_tokenizers, text_rules
from data_prep import corpus
from data_prep import document_store
from data_prep import pretraining_instances as pi
from data_prep import tfrecord_writer
from data_prep.corpus import CorpusError

MAX_REPORTED_INVALID = 100


@dataclasses.dataclass(frozen=True)
class JobConfig(Settings):
    """Everything that decides the output (plus how to run: workers, progress): each
    `setting` field is a flag of data_prep.create_pretraining_data, the others are the
    library's only."""

    input_file: str = setting(REQUIRED, "Input corpus: comma-separated globs of UTF-8 text, "
                              "one sentence per line, blank line between documents.")
    output_file: str = setting(REQUIRED, "Output TFRecord path; with --num_output_shards=N>1 "
                               "the shards are PATH-00000-of-0000N. A comma-separated list "
                               "names the shards. Nothing else is written in its directory.")
    vocab_file: str = setting(REQUIRED, "WordPiece vocab the model is trained with.")
    do_lower_case: bool = override(CorpusTextSettings, "do_lower_case")
    # None: follows do_lower_case (the original)
    strip_accents: Optional[bool] = override(CorpusTextSettings, "strip_accents")
    pre_tokenizer: Optional[str] = override(CorpusTextSettings, "pre_tokenizer")  # e.g. "kiwi"
    do_whole_word_mask: bool = setting(False, "Mask all WordPieces of a word together "
                                       "(80/10/10 still drawn per piece, as the original).")
    max_seq_length: int = setting(128, "Maximum sequence length.", lower=5)
    max_predictions_per_seq: int = setting(20, "Maximum masked LM predictions per sequence.",
                                           lower=1)
    masked_lm_prob: float = setting(0.15, "Fraction of tokens to mask.", lower=0.0, upper=1.0)
    dupe_factor: int = setting(10, "Passes over the data, each with fresh masks.", lower=1)
    short_seq_prob: float = setting(0.1, "Probability of a shorter target length.",
                                    lower=0.0, upper=1.0)
    random_seed: int = setting(12345, "Random seed.")
    num_output_shards: int = setting(1, "Output shards (files).", lower=1)
    pool_size: int = setting(
        0, "At most this many documents per work unit (0: no limit; units stop at 1 MB of "
        "text, more on corpora over 2 GB so that there are at most ~2,048). Units are the "
        "grain of parallel work and of resuming; the statistics do not depend on them "
        "(random-next documents come from the whole corpus, instances are shuffled over "
        "all shards). A corpus that is one unit gives exactly the original tool's records.",
        lower=0)
    strict: bool = setting(False, "Stop at a line that is not valid UTF-8 instead of "
                           "reporting FILE:LINE and skipping it.")
    tokenizer: str = setting(
        "python", "WordPiece implementation: 'python' (the original's rules with a word "
        "cache; fast, no TensorFlow in the workers) or 'tensorflow' (bert_tf.text.tokenization, "
        "in-graph). Both give the original FullTokenizer's ids.",
        choices=("python", "tensorflow"))
    # 0: in this process (tests). The command's default is the CPU count.
    num_workers: int = setting(1, "Worker processes; never changes the output.", lower=0)
    progress: bool = True
    # "" (the flags show None): default paths beside the output, as the summary records.
    summary_file: str = setting(
        "", "JSON summary (counts, masking fractions). Default: beside the output "
        "directory, records/x.tfrecord -> records.x.tfrecord.summary.json.",
        flag_default=None)
    work_dir: str = setting(
        "", "Directory for the passes' temporary files (the tokenized corpus, shuffle "
        "buckets: about 3x the output at peak) and the state a rerun resumes from; removed "
        "when the job is done. Default: beside the output directory, records.x.tfrecord.work. "
        "An existing folder not made by this job keeps its files: the job works in a "
        "subfolder create_pretraining_data.work there.", flag_default=None)
    overwrite: bool = setting(
        False, "Replace the records of an earlier run into the same --output_file made with "
        "other inputs or settings (only the files its summary lists; the new ones are "
        "written before the old are removed).")
    unit_bytes: int = 0  # text per work unit; 0: auto_unit_bytes (grain of work and resume)
    shuffle_bucket_bytes: int = 32 << 20  # records one shuffle bucket holds in memory

    def validate(self):
        if self.max_seq_length < 5:
            raise ValueError(f"--max_seq_length={self.max_seq_length}: needs >= 5 "
                             f"([CLS] A [SEP] B [SEP] with one token each)")
        if self.max_predictions_per_seq < 1:
            raise ValueError("--max_predictions_per_seq must be >= 1")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise ValueError(f"--masked_lm_prob={self.masked_lm_prob}: must be in (0, 1]")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"--short_seq_prob={self.short_seq_prob}: must be in [0, 1]")
        if self.dupe_factor < 1:
            raise ValueError("--dupe_factor must be >= 1")
        if self.pool_size < 0:
            raise ValueError("--pool_size must be >= 0 (0: no document limit)")
        if self.num_output_shards < 1:
            raise ValueError("--num_output_shards must be >= 1")
        if self.num_workers < 0:
            raise ValueError("--num_workers must be >= 0")
        if self.unit_bytes < 0 or self.shuffle_bucket_bytes < 1:
            raise ValueError("unit_bytes must be >= 0, shuffle_bucket_bytes >= 1")
        if self.pre_tokenizer:
            pre_tokenizers.check_available(self.pre_tokenizer)

def unit_rng(seed: int, unit_index: int) -> random.Random:
    """The generator of work unit `unit_index`: unit 0 gets the original's Random(seed).

        >>> unit_rng(12345, 0).random() == random.Random(12345).random()
        True
    """
    return random.Random(seed + (unit_index << 32))


# ---------------------------------------------------------------------------------------------
# Per-unit work (runs in the job's worker processes; also used by the Beam pipeline).


def np_generator(seed: int, *stream: int):
    """numpy generator for the shuffle keys of one unit / bucket (independent streams)."""
    return np.random.Generator(np.random.PCG64([seed & 0xFFFFFFFFFFFFFFFF, *stream]))


class UnitProcessor:
    """Tokenizes work units, and turns a unit's documents into serialized records.

    Holds the tokenizer, the encoder and the vocab ids; build one per process.
    """

    def __init__(self, cfg: JobConfig, opener=open):
        self.cfg = cfg
        self.opener = opener
        if cfg.tokenizer == "python":
            tok = text_rules.WordPieceTokenizer.from_vocab_file(
                cfg.vocab_file, cfg.do_lower_case, strip_accents=cfg.strip_accents)
            self.tokenizer = tok
            vocab_tokens = [None] * (max(tok.vocab.values()) + 1)
            for token, i in tok.vocab.items():
                vocab_tokens[i] = token
            vocab_tokens = [t if t is not None else "" for t in vocab_tokens]
            token_to_id = tok.vocab
        elif cfg.tokenizer == "tensorflow":
            from bert_tf.text.tokenization import BertTokenizer  # --tokenizer=tensorflow only

            tf_tok = BertTokenizer(cfg.vocab_file, do_lower_case=cfg.do_lower_case,
                                   strip_accents=cfg.strip_accents)
            self.tokenizer = corpus.LineTokenizer(tf_tok)
            vocab_tokens = tf_tok.vocab
            token_to_id = {t: tf_tok.token_to_id(t) for t in SPECIAL_TOKENS}
        else:
            raise ValueError(f"--tokenizer={cfg.tokenizer}: use python or tensorflow")
        self.vocab = pi.VocabIds(
            cls_id=token_to_id[CLS_TOKEN], sep_id=token_to_id[SEP_TOKEN],
            mask_id=token_to_id[MASK_TOKEN], vocab_size=len(vocab_tokens),
            is_continuation=pi.continuation_table(vocab_tokens))
        self.pre_split = None
        if cfg.pre_tokenizer:
            self.pre_split = pre_tokenizers.get_pre_tokenizer(cfg.pre_tokenizer)
        self.encoder = tfrecord_writer.ExampleEncoder(
            cfg.max_seq_length, cfg.max_predictions_per_seq,
            id_limit=max(len(vocab_tokens), cfg.max_seq_length + 1))

    def documents(self, unit: corpus.WorkUnit, invalid: List[corpus.InvalidLine]):
        """The unit's documents as lists of id segments (the original reader's rules)."""
        lines = [text for _, text in corpus.read_unit_lines(unit, invalid, self.opener)]
        if invalid and self.cfg.strict:
            first = invalid[0]
            raise CorpusError(f"{first}: fix or remove the line, or run without --strict "
                              f"to skip such lines")
        if self.pre_split is not None:
            lines = self.pre_split(lines)  # inserts spaces only: blank lines stay blank
        segments = self.tokenizer.tokenize_lines(lines)
        return corpus.split_documents(segments, unit.continues, unit.open_end)

    def tokenize_unit(self, unit: corpus.WorkUnit, part_path: str, writer=None) -> Dict:
        """Pass 1: tokenizes the unit and writes its documents as a store part at
        `part_path` (atomically); returns its counts. `writer(path, docs)` writes the part
        (default `document_store.write_part` on a local file). The pieces of a document
        longer than a unit are kept (`corpus.split_documents`); `head` / `tail` and their
        segment counts say how the part joins its neighbours (`document_store.PartLayout`),
        `documents` counts the documents starting in the unit."""
        invalid: List[corpus.InvalidLine] = []
        docs = self.documents(unit, invalid)
        if writer is None:
            with tfrecord_writer.atomic_output(part_path) as tmp:
                document_store.write_part(tmp, docs)
        else:
            writer(part_path, docs)
        return dict(unit=unit.index, documents=len(docs) - unit.continues,
                    pieces=len(docs), head=unit.continues, tail=unit.open_end,
                    head_segments=len(docs[0]) if unit.continues else 0,
                    tail_segments=len(docs[-1]) if unit.open_end else 0,
                    invalid_lines=len(invalid),
                    invalid_examples=[str(x) for x in invalid[:MAX_REPORTED_INVALID]],
                    text_tokens=sum(len(seg) for d in docs for seg in d),
                    special_ids=not pi.pool_has_no_special_ids(docs, self.vocab))

    BATCH = 512  # instances encoded together (vector operations over the batch)

    def encode_unit(self, unit_index: int, docs: List, corpus_docs, corpus_start: int,
                    num_units: int, no_special_ids: bool, spill, framed: bool) -> Dict:
        """Pass 2: makes the instances of the unit's `docs` (numbered from `corpus_start` in
        `corpus_docs`, the whole corpus), encodes them into `spill` in creation order and
        returns the counts; `counts["order"]` is the order to emit them in.

        Random-next documents come from the whole corpus. With a single unit (the corpus
        is one unit) the unit's own list is the corpus, and the draws, and the final
        shuffle in `order`, are exactly the original tool's; otherwise `order` is creation
        order and the global shuffle comes after (`assign_buckets`).
        """
        cfg, vocab, encoder = self.cfg, self.vocab, self.encoder
        rng = unit_rng(cfg.random_seed, unit_index)
        counts = dict.fromkeys(("instances", "tokens", "masked_tokens", "masked_as_mask",
                                "masked_kept", "random_next"), 0)
        mask_id = vocab.mask_id

        def flush(batch):
            a = encoder.batch_arrays(batch)
            spill.extend(*encoder.encode_arrays(a, framed=framed))
            # The 80/10/10 outcome per prediction: [MASK] first, then "kept" (output equals
            # the original id), the rest random.
            valid = np.arange(a.positions.shape[1]) < a.num_predictions[:, None]
            out_at = np.take_along_axis(a.ids, a.positions, axis=1)
            as_mask = valid & (out_at == mask_id)
            counts["instances"] += len(batch)
            counts["tokens"] += int(a.lengths.sum())
            counts["masked_tokens"] += int(a.num_predictions.sum())
            counts["masked_as_mask"] += int(as_mask.sum())
            counts["masked_kept"] += int((valid & ~as_mask & (out_at == a.labels)).sum())
            counts["random_next"] += int(a.next_sentence.sum())

        whole = num_units == 1
        batch: list = []
        for inst in pi.iter_pool_instances(
                docs, cfg.dupe_factor, cfg.max_seq_length, cfg.short_seq_prob,
                cfg.masked_lm_prob, cfg.max_predictions_per_seq, vocab, rng,
                cfg.do_whole_word_mask, corpus=None if whole else corpus_docs,
                corpus_start=corpus_start, no_special_ids=no_special_ids):
            batch.append(inst)
            if len(batch) == self.BATCH:
                flush(batch)
                batch = []
        if batch:
            flush(batch)
        del batch
        counts["masked_random"] = (counts["masked_tokens"] - counts["masked_as_mask"]
                                   - counts["masked_kept"])
        n = counts["instances"]
        counts["order"] = pi.shuffled_order(n, rng) if whole else range(n)
        return counts

    # Records of one unit held at once: their offsets and buckets (~40 bytes each) in
    # memory, their bytes in a spill file read back through a mapping (resident while it is
    # read). A unit with more (a document longer than a unit makes all its instances in the
    # unit where it starts) writes them as several chunk files, each grouped by bucket.
    CHUNK_RECORDS = 1 << 20
    CHUNK_BYTES = 32 << 20

    def write_unit_instances(self, unit_index: int, corpus_docs: document_store.DocumentStore,
                             corpus_start: int, num_units: int, no_special_ids: bool,
                             num_buckets: int, path: str) -> Dict:
        """Pass 2 to disk: the unit's records, framed, at `path`, grouped by shuffle bucket
        (creation order within one); `path + ".idx"` holds the buckets' byte offsets
        (int64, num_buckets + 1). Past `CHUNK_RECORDS` records the rest go on in chunk
        files (`unit_chunk_file(path, c)`), each laid out the same way, so memory stays
        bounded. Returns the counts (`chunks`: how many files) and the records per bucket."""
        exact = num_units == 1
        directory = os.path.dirname(path)
        bucket_counts = np.zeros(num_buckets, np.int64)
        bucket_gen = None if exact else np_generator(self.cfg.random_seed, unit_index, 1)
        written = [0]  # chunks

        def write_chunk(spill, order):
            order = np.asarray(order, np.int64)
            if exact:
                buckets = assign_buckets(self.cfg.random_seed, unit_index, len(order),
                                         num_buckets, True)
            else:  # the same draws as one call for all the unit's records
                buckets = bucket_gen.integers(0, num_buckets, len(order))
            by_bucket = order[np.argsort(buckets, kind="stable")]
            sizes = np.diff(np.frombuffer(spill._offsets, np.int64))
            bucket_bytes = np.zeros(num_buckets, np.int64)
            np.add.at(bucket_bytes, buckets, sizes[order])
            chunk_path = unit_chunk_file(path, written[0])
            with tfrecord_writer.atomic_output(chunk_path + ".idx") as tmp:
                with open(tmp, "wb") as f:
                    f.write(np.concatenate([[0], np.cumsum(bucket_bytes)]).astype("<i8")
                            .tobytes())
                with tfrecord_writer.atomic_output(chunk_path) as data_tmp, \
                        open(data_tmp, "wb") as out:
                    for s in range(0, len(by_bucket), 4096):
                        out.write(b"".join([spill[k] for k in by_bucket[s:s + 4096].tolist()]))
            bucket_counts[:] += np.bincount(buckets, minlength=num_buckets)
            written[0] += 1

        docs = corpus_docs.part_documents(unit_index)
        spills = _ChunkedSpill(directory, None if exact else self.CHUNK_RECORDS,
                               self.CHUNK_BYTES,
                               lambda spill: write_chunk(spill, range(len(spill))))
        try:
            counts = self.encode_unit(unit_index, docs, corpus_docs, corpus_start, num_units,
                                      no_special_ids, spills, framed=True)
            del docs
            order = counts.pop("order")
            if len(spills.spill) or not written[0]:
                write_chunk(spills.spill, order if exact else range(len(spills.spill)))
        finally:
            spills.close()
        counts["unit"] = unit_index
        counts["chunks"] = written[0]
        counts["bucket_counts"] = bucket_counts.tolist()
        return counts


class _ChunkedSpill:
    """A `RecordSpill` that, once it holds `limit` records or `limit_bytes` (limit None: no
    limit), is handed to `full(spill)` and replaced by a new one."""

    def __init__(self, directory: str, limit: Optional[int], limit_bytes: int, full):
        self.directory, self.limit, self.limit_bytes = directory, limit, limit_bytes
        self.full = full
        self.spill = tfrecord_writer.RecordSpill(directory)

    def extend(self, buffer, offsets):
        self.spill.extend(buffer, offsets)
        if self.limit is not None and (len(self.spill) >= self.limit
                                       or self.spill.size() >= self.limit_bytes):
            self.full(self.spill)
            self.spill.close()
            self.spill = tfrecord_writer.RecordSpill(self.directory)

    def close(self):
        self.spill.close()


def unit_chunk_file(path: str, chunk: int) -> str:
    """Chunk `chunk` of a unit's pass-2 records: `path` itself for the first."""
    return path if chunk == 0 else f"{path}.{chunk}"


def assign_buckets(seed: int, unit_index: int, count: int, num_buckets: int, exact: bool):
    """The shuffle bucket of each of a unit's records, given in emit order.

    Uniform and independent (seeded by the job seed and the unit), so after each bucket is
    shuffled, the concatenated buckets are a uniform permutation of every record of the
    corpus. A job of one unit whose records are already in the original's final order
    (`exact`) cuts that order into consecutive buckets instead, and buckets are not
    shuffled again, which keeps the original's order.
    """
    if exact:
        return (np.arange(count, dtype=np.int64) * num_buckets) // max(1, count)
    return np_generator(seed, unit_index, 1).integers(0, num_buckets, count)


def unit_records_path(work_dir: str, u: int) -> str:
    """Where pass 2 writes unit `u`'s records (and pass 3 reads them)."""
    return os.path.join(work_dir, f"unit-{u:06d}.tfrecords")


def _frames(data) -> List[memoryview]:
    # Splits TFRecord file bytes into whole framed records (length, CRCs and all).
    view, out, at = memoryview(data), [], 0
    unpack = struct.Struct("<Q").unpack_from
    while at < len(data):
        end = at + 16 + unpack(data, at)[0]
        out.append(view[at:end])
        at = end
    return out


def shuffle_bucket(seed: int, bucket: int, work_dir: str, unit_chunks: Sequence[int],
                   first_position: int, num_shards: int, reshuffle: bool, path: str) -> int:
    """Pass 3: one bucket's records, gathered from every unit file, shuffled in memory and
    written at `path` grouped by the shard each goes to; `path + ".idx"` holds the shards'
    byte offsets (int64, num_shards + 1). Returns the number of records.

    The bucket's records come from the unit files in `work_dir` (`unit_chunks[u]` chunk
    files of unit u, in order) and take the global
    positions `first_position ...` of the shuffled corpus, and position k goes to shard
    k % num_shards, as the original deals its shuffled instances out to its output files.
    """
    ranges = []
    for u, chunks in enumerate(unit_chunks):
        for c in range(chunks):
            data_path = unit_chunk_file(unit_records_path(work_dir, u), c)
            with open(data_path + ".idx", "rb") as f:
                f.seek(8 * bucket)
                lo, hi = struct.unpack("<qq", f.read(16))
            if hi > lo:
                ranges.append((data_path, lo, hi))
    # One buffer for the whole bucket, filled in place: its size is the memory bound.
    data = bytearray(sum(hi - lo for _, lo, hi in ranges))
    view, at = memoryview(data), 0
    for data_path, lo, hi in ranges:
        with open(data_path, "rb") as f:
            f.seek(lo)
            while at < len(data) and hi > lo:
                got = f.readinto(view[at:at + hi - lo])
                if not got:
                    raise OSError(f"{data_path}: shorter than its index says")
                at, lo = at + got, lo + got
    records = _frames(data)
    n = len(records)
    order = (np_generator(seed, bucket, 2).permutation(n) if reshuffle
             else np.arange(n))
    offsets = [0]
    with tfrecord_writer.atomic_output(path + ".idx") as idx_tmp:
        with tfrecord_writer.atomic_output(path) as tmp, open(tmp, "wb") as out:
            for s in range(num_shards):
                picked = order[(s - first_position) % num_shards::num_shards].tolist()
                size = 0
                for i in range(0, len(picked), 4096):
                    size += out.write(b"".join([records[k] for k in picked[i:i + 4096]]))
                offsets.append(offsets[-1] + size)
        with open(idx_tmp, "wb") as f:
            f.write(np.asarray(offsets, "<i8").tobytes())
    return n


def assemble_shard(shard: int, bucket_files: Sequence[str], path: str) -> None:
    """Pass 4: shard `shard` is its part of every bucket, in bucket order; written under a
    temporary name and renamed, so a shard file is always complete."""
    with tfrecord_writer.atomic_output(path) as tmp, open(tmp, "wb") as out:
        for bucket_path in bucket_files:
            with open(bucket_path + ".idx", "rb") as f:
                f.seek(8 * shard)
                lo, hi = struct.unpack("<qq", f.read(16))
            with open(bucket_path, "rb") as f:
                f.seek(lo)
                remaining = hi - lo
                while remaining > 0:
                    data = f.read(min(remaining, 8 << 20))
                    out.write(data)
                    remaining -= len(data)
