r"""Pretraining TFRecords from a text corpus: the original tool's data, fast and in bounded memory.

    python -m data_prep.create_pretraining_data \
      --input_file=corpus/*.txt --output_file=out/pretrain.tfrecord \
      --vocab_file=vocab.txt --do_lower_case --max_seq_length=128 \
      --max_predictions_per_seq=20 --masked_lm_prob=0.15 --dupe_factor=10 \
      --num_workers=8 --num_output_shards=64

How (DESIGN 2.2 / 2.3): four passes, each in bounded memory, resumable, on `--num_workers`
processes.
1. Tokenize. The corpus is cut into work units (1 MB of text, more on corpora over 2 GB so that
   there are at most ~2,048 units; optionally at most `--pool_size` documents; in corpus
   order, running on across files: `corpus.plan_work_units`). Each unit is
   tokenized once and written as a part of the *document store* (`document_store`): the
   corpus as WordPiece ids on disk, every document numbered.
2. Instances. Each unit runs the original algorithm on its documents (its generator seeded
   from `--random_seed` and the unit number), drawing each random-next document uniformly
   from the WHOLE corpus (any document but the current one, as the original), read from the
   store by positioned reads. Each record is encoded and sent to one of B shuffle buckets at
   random (B chosen so that a bucket is ~`shuffle_bucket_bytes`, 32 MB).
3. Shuffle. Each bucket's records are gathered from every unit, shuffled in memory and cut
   by destination shard: all buckets in order are a uniform permutation of every instance
   of the corpus, and position k of it goes to shard k % N (the original deals out its
   shuffled instances the same way), so every shard is a uniform sample of the corpus, in
   random order, and shard sizes differ by at most one.
4. Write. Each shard is assembled from its part of every bucket, under a temporary name,
   and renamed when complete.

A worker holds one unit's documents (1-32 MB of text), its records' offsets, or one bucket:
its memory does not grow with the corpus. A document longer than a unit (a corpus without
blank lines is one) is cut over several units; the unit where it starts walks it through
the document store a window of segments at a time, and writes its many records in chunks
(`UnitProcessor.CHUNK_RECORDS` / `CHUNK_BYTES`), so that shape is bounded too. A corpus of
fewer than 10 documents gets a warning (next-sentence prediction needs other documents). Disk: the store (~4 bytes a token) and two copies
of the records pass through the work directory, each deleted once the next pass is done.

Output depends on the inputs, the seed and the settings, never on the number of workers. A
corpus that is a single unit (small corpora) gives exactly the original tool's records, in
its order and dealt to the shards as it does (its documents shuffled, the random-next draws
and the final shuffle from one `random.Random(seed)`). The only other difference from the
original: a file's end always ends a document (the original joins a file's last document to
the next file's first when the file lacks a final blank line).

Where things go: the shards at `--output_file`, nothing else in their directory (so
`--input_file='records/*'` reads them, ours or the original reader); the JSON summary at
`--summary_file`, by default beside the output directory (`records/x.tfrecord` ->
`records.x.tfrecord.summary.json`); the passes' state at `--work_dir` (default
`records.x.tfrecord.work/`), removed when the job is done. A rerun resumes from the last
complete unit / bucket / shard, and does nothing when the summary says the job is complete.

Library use: `run(JobConfig(...))` returns the summary dict; `UnitProcessor` is the per-unit
code the Beam pipeline also calls.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import multiprocessing
import os
import random
import struct
import sys
import time
from typing import Dict, List, Optional, Sequence

from bert_tf import file_io, output_guard, text_rules
from bert_tf.constants import CLS_TOKEN, MASK_TOKEN, SEP_TOKEN, SPECIAL_TOKENS
from data_prep import corpus
from data_prep import document_store
from data_prep import pretraining_instances as pi
from data_prep import tfrecord_writer
from data_prep.corpus import CorpusError

MAX_REPORTED_INVALID = 100
log = logging.getLogger("create_pretraining_data")


@dataclasses.dataclass(frozen=True)
class JobConfig:
    """Everything that decides the output (plus how to run: workers, progress)."""

    input_file: str
    output_file: str
    vocab_file: str
    do_lower_case: bool = True
    strip_accents: Optional[bool] = None  # None: follows do_lower_case (the original)
    pre_tokenizer: Optional[str] = None  # bert_tf.pre_tokenizers name, e.g. "kiwi"
    do_whole_word_mask: bool = False
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    dupe_factor: int = 10
    short_seq_prob: float = 0.1
    random_seed: int = 12345
    num_output_shards: int = 1
    pool_size: int = 0  # documents per work unit at most; 0: units are cut by text size only
    strict: bool = False
    tokenizer: str = "python"  # or "tensorflow" (bert_tf.tokenization); same ids
    num_workers: int = 1  # 0: in this process (tests); never changes the output
    progress: bool = True
    summary_file: str = ""  # default: beside the output directory (default_summary_path)
    work_dir: str = ""  # default: beside the output directory (default_work_dir)
    overwrite: bool = False  # replace an earlier run's records made with other settings
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
            from bert_tf import pre_tokenizers

            pre_tokenizers.check_available(self.pre_tokenizer)


def unit_rng(seed: int, unit_index: int) -> random.Random:
    """The generator of work unit `unit_index`: unit 0 gets the original's Random(seed).

        >>> unit_rng(12345, 0).random() == random.Random(12345).random()
        True
    """
    return random.Random(seed + (unit_index << 32))


def output_paths(output_file: str, num_shards: int) -> List[str]:
    """The shard paths: `output_file` itself for one shard, else PATH-00000-of-0000N.

    A comma-separated list (the original's form) names the shards explicitly.

        >>> output_paths("out/x.tfrecord", 2)
        ['out/x.tfrecord-00000-of-00002', 'out/x.tfrecord-00001-of-00002']
    """
    if "," in output_file:
        paths = [p.strip() for p in output_file.split(",") if p.strip()]
        if num_shards not in (1, len(paths)):
            raise ValueError(f"--output_file names {len(paths)} files but "
                             f"--num_output_shards={num_shards}")
        return paths
    if num_shards == 1:
        return [output_file]
    return [f"{output_file}-{s:05d}-of-{num_shards:05d}" for s in range(num_shards)]


def _beside_output_dir(output_file: str, suffix: str) -> str:
    # `records/x.tfrecord` -> `records.x.tfrecord<suffix>`: outside the directory of the
    # records, so a glob over it (`records/*`) matches only records, and not starting with
    # the output name, so `x.tfrecord*` does not match it either. Records written into the
    # working directory (or the root) share it with other files anyway: nothing is written
    # above it, the file goes there hidden (`.x.tfrecord<suffix>`, which `x.tfrecord*`
    # does not match). A remote path (the Beam pipeline's) goes beside its directory too,
    # hidden in the bucket's root.
    first = output_file.split(",")[0].strip()
    if file_io.is_remote(first):
        directory, name = first.rstrip("/").rsplit("/", 1)
        if directory.split("://", 1)[1].count("/") == 0:  # the bucket itself
            return f"{directory}/.{name}{suffix}"
        return f"{directory}.{name}{suffix}"
    directory, name = os.path.split(os.path.abspath(first))
    if directory == os.path.dirname(directory) or directory == os.path.abspath(os.getcwd()):
        return os.path.join(directory, f".{name}{suffix}")
    return f"{directory}.{name}{suffix}"


def default_summary_path(output_file: str) -> str:
    """Where the JSON summary goes unless --summary_file says: beside the output directory.

        >>> default_summary_path("/data/records/wiki.tfrecord")
        '/data/records.wiki.tfrecord.summary.json'
        >>> default_summary_path("wiki.tfrecord") == os.path.abspath(".wiki.tfrecord.summary.json")
        True
    """
    return _beside_output_dir(output_file, ".summary.json")


def default_work_dir(output_file: str) -> str:
    """Where the passes keep their state unless --work_dir says (removed when done).

        >>> default_work_dir("/data/records/wiki.tfrecord")
        '/data/records.wiki.tfrecord.work'
        >>> default_work_dir("gs://b/records/wiki.tfrecord"), default_work_dir("gs://b/wiki.tfrecord")
        ('gs://b/records.wiki.tfrecord.work', 'gs://b/.wiki.tfrecord.work')
    """
    return _beside_output_dir(output_file, ".work")


def summary_path(cfg: JobConfig) -> str:
    return cfg.summary_file or default_summary_path(cfg.output_file)


def work_dir_path(cfg: JobConfig) -> str:
    return cfg.work_dir or default_work_dir(cfg.output_file)


def check_vocab_file(path: str, opener=open) -> List[str]:
    """The vocab's tokens; refuses a vocab without the five special tokens, naming them.

    (A light check in the parent process, so a wrong vocab fails before workers start.)
    """
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CorpusError(f"--vocab_file: {path} does not exist") from None
    try:
        tokens = text_rules.parse_vocab(data, path)
        text_rules.check_special_tokens(text_rules.vocab_index(tokens), path)
    except text_rules.VocabError as e:
        raise CorpusError(f"--vocab_file: {e}") from None
    return tokens


# ---------------------------------------------------------------------------------------------
# Per-unit work (runs in the worker processes; also used by the Beam pipeline).


def _np_generator(seed: int, *stream: int):
    """numpy generator for the shuffle keys of one unit / bucket (independent streams)."""
    import numpy as np

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
            from bert_tf.tokenization import BertTokenizer

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
            from bert_tf import pre_tokenizers

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
        import numpy as np

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
        import numpy as np

        exact = num_units == 1
        directory = os.path.dirname(path)
        bucket_counts = np.zeros(num_buckets, np.int64)
        bucket_gen = None if exact else _np_generator(self.cfg.random_seed, unit_index, 1)
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
    import numpy as np

    if exact:
        return (np.arange(count, dtype=np.int64) * num_buckets) // max(1, count)
    return _np_generator(seed, unit_index, 1).integers(0, num_buckets, count)


def _unit_file(work: str, u: int) -> str:
    return os.path.join(work, f"unit-{u:06d}.tfrecords")


def _shard_done(work: str, s: int) -> str:
    """Written once shard `s` is complete in this job (a file of the shard's name from an
    earlier run with other settings is replaced, not taken as done)."""
    return os.path.join(work, f"shard-{s:06d}.done")


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
    import numpy as np

    ranges = []
    for u, chunks in enumerate(unit_chunks):
        for c in range(chunks):
            data_path = unit_chunk_file(_unit_file(work_dir, u), c)
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
    order = (_np_generator(seed, bucket, 2).permutation(n) if reshuffle
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


_WORKER: Optional[UnitProcessor] = None
_STORE = None  # (manifest path, DocumentStore) of this worker


def _init_worker(cfg: JobConfig, single_threaded: bool):
    global _WORKER, _STORE
    if single_threaded and cfg.tokenizer == "tensorflow":
        # One TF thread per worker: the workers are the parallelism.
        import tensorflow as tf

        try:
            tf.config.threading.set_inter_op_parallelism_threads(1)
            tf.config.threading.set_intra_op_parallelism_threads(1)
        except RuntimeError:
            pass  # already initialised (in-process run)
    _WORKER = UnitProcessor(cfg)
    _STORE = None


def _store(manifest: str) -> document_store.DocumentStore:
    global _STORE
    if _STORE is None or _STORE[0] != manifest:
        m = _read_json(manifest)
        layout = [document_store.PartLayout(*x) for x in m["layout"]]
        _STORE = (manifest, document_store.DocumentStore(m["parts"], m["doc_counts"],
                                                         layout=layout))
    return _STORE[1]


def _tokenize_task(task):
    unit, path = task
    return _WORKER.tokenize_unit(unit, path)


def _instances_task(task):
    u, manifest, start, num_units, no_special, num_buckets, path = task
    return _WORKER.write_unit_instances(u, _store(manifest), start, num_units, no_special,
                                        num_buckets, path)


def _bucket_task(task):
    return shuffle_bucket(*task)


def _shard_task(task):
    assemble_shard(*task)
    return task[0]


# ---------------------------------------------------------------------------------------------
# The job.


STAT_KEYS = ("documents", "instances", "tokens", "masked_tokens", "masked_as_mask",
             "masked_kept", "masked_random", "random_next", "invalid_lines")


def fingerprint(cfg: JobConfig, paths: Sequence[str]) -> str:
    """Hash of everything that decides the output, so a rerun never mixes two configurations."""
    fields = dataclasses.asdict(cfg)
    for k in ("num_workers", "progress", "input_file", "strict", "tokenizer", "summary_file",
              "work_dir", "overwrite"):
        fields.pop(k)
    fields["inputs"] = [(os.path.abspath(p), os.path.getsize(p), int(os.path.getmtime(p)))
                        for p in paths]
    # The vocab by content: an edited vocab of the same size (a token renamed) changes
    # every id, and a vocab moved or copied elsewhere changes none.
    fields["vocab_file"] = None
    fields["vocab"] = _file_sha256(cfg.vocab_file)
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def _write_json(path, obj):
    output_guard.write_json(path, obj, indent=1)


def _merge(total: Dict, part: Dict):
    for k in STAT_KEYS:
        total[k] = total.get(k, 0) + part.get(k, 0)
    examples = total.setdefault("invalid_examples", [])
    room = MAX_REPORTED_INVALID - len(examples)
    if room > 0:
        examples.extend(part.get("invalid_examples", [])[:room])


def _finish_summary(total: Dict, cfg: JobConfig, shards, seconds: float) -> Dict:
    n, masked = total["instances"], total["masked_tokens"]
    summary = dict(total)
    summary.update(
        output_files=shards, seconds=round(seconds, 3),
        masked_fraction=masked / max(1, total["tokens"]),
        masked_as_mask_fraction=total["masked_as_mask"] / max(1, masked),
        masked_random_fraction=total["masked_random"] / max(1, masked),
        masked_kept_fraction=total["masked_kept"] / max(1, masked),
        random_next_fraction=total["random_next"] / max(1, n),
        config={k: v for k, v in dataclasses.asdict(cfg).items() if k != "progress"})
    return summary


MAX_WORK_UNITS = 2048  # beyond it units grow (each bucket reads an index entry per unit)


def auto_unit_bytes(corpus_bytes: int) -> int:
    """Text per work unit: 1 MB (enough units to keep workers busy on a small corpus),
    more for corpora over 2 GB so that there are at most ~2,048 units, at most 32 MB.

        >>> auto_unit_bytes(10 << 20) == 1 << 20, auto_unit_bytes(20 << 30) == 10 << 20
        (True, True)
    """
    return min(corpus.MAX_UNIT_BYTES, max(1 << 20, -(-corpus_bytes // MAX_WORK_UNITS)))


def plan_units(paths: Sequence[str], cfg: JobConfig, num_shards: int, opener=open,
               corpus_bytes: Optional[int] = None):
    """The job's work units: at most `cfg.unit_bytes` of text (`auto_unit_bytes` of
    `corpus_bytes`, the inputs' total size, when 0) and `--pool_size` documents each (when
    set), in corpus order. Returns `(units, num_docs)`. Units are the grain of parallel work
    and of resuming, nothing else: random-next documents come from the whole corpus and
    every instance is shuffled globally, whatever the cut."""
    unit_bytes = cfg.unit_bytes
    if not unit_bytes:
        if corpus_bytes is None:
            corpus_bytes = sum(os.path.getsize(p) for p in paths)
        unit_bytes = auto_unit_bytes(corpus_bytes)
    units, num_docs = corpus.plan_work_units(paths, cfg.pool_size or (1 << 62), opener,
                                             max_unit_bytes=unit_bytes)
    if num_docs < num_shards:
        raise CorpusError(f"{', '.join(paths)} hold {num_docs} documents, fewer than "
                          f"the {num_shards} output shards: use fewer shards, or separate "
                          f"the documents with blank lines")
    warning = few_documents_warning(paths, num_docs)
    if warning:
        log.warning("%s", warning)
    return units, num_docs


# Below this many documents next-sentence prediction has (almost) no "other document" to
# take a random next segment from.
MIN_DOCUMENTS = 10


def few_documents_warning(paths: Sequence[str], num_docs: int) -> Optional[str]:
    """The warning for a corpus with too few documents for next-sentence prediction (a
    corpus without blank lines is one document), or None.

        >>> print(few_documents_warning(["c.txt"], 1))
        c.txt holds 1 document: next-sentence prediction takes its random next segments from other documents, so with 1 it learns little; separate documents with blank lines (one sentence per line, a blank line between documents)
        >>> few_documents_warning(["c.txt"], 10) is None
        True
    """
    if num_docs >= MIN_DOCUMENTS:
        return None
    names = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return (f"{names} {'holds' if len(paths) == 1 else 'hold'} {num_docs} "
            f"document{'s' if num_docs != 1 else ''}: next-sentence prediction takes its "
            f"random next segments from other documents, so with {num_docs} it learns "
            f"little; separate documents with blank lines (one sentence per line, a blank "
            f"line between documents)")


def num_shuffle_buckets(cfg: JobConfig, text_tokens: int, num_docs: int) -> int:
    """How many buckets the global shuffle needs so that one bucket's records stay within
    `cfg.shuffle_bucket_bytes` of memory (an estimate from the corpus's token count, made
    before the records exist; a little generous: instances hold about 0.9 x max_seq_length
    tokens on Wikipedia text, the estimate assumes 0.75)."""
    per_instance = max(1, (cfg.max_seq_length - 3) * 3 // 4)
    instances = cfg.dupe_factor * (text_tokens // per_instance + num_docs)
    # ~2-byte varint ids, mask and segment bytes, weights, headers, TFRecord framing.
    record_bytes = 4 * cfg.max_seq_length + 8 * cfg.max_predictions_per_seq + 160
    return max(1, -(-instances * record_bytes // cfg.shuffle_bucket_bytes))


class _Phase:
    """A progress bar for one pass (disabled with progress=False)."""

    def __init__(self, cfg, desc, total, unit, initial=0):
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit,
                        disable=not cfg.progress, dynamic_ncols=True, file=sys.stderr)

    def __enter__(self):
        return self.bar

    def __exit__(self, *exc):
        self.bar.close()


def _map(pool, fn, tasks):
    return pool.imap(fn, tasks, chunksize=1) if pool is not None else map(fn, tasks)


def run(cfg: JobConfig) -> Dict:
    """Runs the job; returns the summary (also written to `summary_path(cfg)`)."""
    start = time.time()
    cfg.validate()
    for flag, value in (("--input_file", cfg.input_file), ("--output_file", cfg.output_file),
                        ("--vocab_file", cfg.vocab_file)):
        remote = [p for p in value.split(",") if file_io.is_remote(p.strip())]
        if remote:
            raise CorpusError(f"{flag}={remote[0]}: this job reads and writes local files; "
                              f"for gs:// and other remote storage run the same job as "
                              f"`python -m data_prep.beam_pipeline` (DirectRunner by default)")
    paths = corpus.expand_input_globs(cfg.input_file)
    check_vocab_file(cfg.vocab_file)
    shards = output_paths(cfg.output_file, cfg.num_output_shards)
    fp = fingerprint(cfg, paths)
    summary_file = summary_path(cfg)
    inputs = list(paths) + [cfg.vocab_file]
    for flag, out in [("--output_file", s) for s in shards] + [("--summary_file", summary_file)]:
        output_guard.check_apart(out, inputs, flag=flag)
    previous = _read_json(summary_file)
    replaced: List[str] = []  # an earlier run's shards this one replaces (--overwrite)
    if previous is not None:
        if previous.get("fingerprint") != fp:
            if not cfg.overwrite:
                raise CorpusError(
                    f"{summary_file} exists from a run with other inputs or settings: choose "
                    f"another --output_file, or pass --overwrite to replace that run's "
                    f"records (only the files its summary lists)")
            replaced = [p for p in previous.get("output_files", []) if isinstance(p, str)]
        elif all(os.path.exists(s) for s in shards):
            log.info("%s: already complete, nothing to do", summary_file)
            # A kill between the summary and the clean-up left the work dir: ours to go.
            requested = work_dir_path(cfg)
            for work in (requested, os.path.join(requested, "create_pretraining_data.work")):
                output_guard.release_work_dir(work, "create_pretraining_data")
            return previous
    # Only the job's own files there are removed at the end (DESIGN 2.6): a --work_dir of
    # the user's, or the output directory itself, gets a marked subfolder.
    work = output_guard.claim_work_dir(work_dir_path(cfg), "create_pretraining_data",
                                       inputs=inputs, outputs=shards + [summary_file])
    job_file = os.path.join(work, "job.json")
    job = _read_json(job_file)
    if job is not None and job.get("fingerprint") != fp:
        if not cfg.overwrite:
            raise CorpusError(f"{work} holds an unfinished run with other inputs or settings: "
                              f"rerun with those settings to finish it, or pass --overwrite to "
                              f"start over")
        replaced += [p for p in job.get("replaced", []) + job.get("output_files", [])
                     if p not in replaced]
        output_guard.release_work_dir(work, "create_pretraining_data")
        work = output_guard.claim_work_dir(work_dir_path(cfg), "create_pretraining_data",
                                           inputs=inputs, outputs=shards + [summary_file])
        job = None
    elif job is not None:
        replaced += [p for p in job.get("replaced", []) if p not in replaced]
    if previous is not None and previous.get("fingerprint") == fp:
        # Some shards were deleted since: the others are kept, the missing ones redone.
        for s, shard in enumerate(shards):
            if os.path.exists(shard):
                output_guard.write_text(_shard_done(work, s), shard)
    ours = set(replaced) | set((job or {}).get("output_files", []))
    if previous is not None and previous.get("fingerprint") == fp:
        ours |= set(previous.get("output_files", []))
    for shard in shards:
        if os.path.exists(shard) and shard not in ours:
            raise CorpusError(f"{shard} exists but was not written by this job: choose "
                              f"another --output_file (or move that file away)")

    # Workers start (spawn: a fresh interpreter each, safe whatever this process imported)
    # while this process plans the units.
    pool = None
    if cfg.num_workers > 0:
        ctx = multiprocessing.get_context("spawn")
        pool = ctx.Pool(cfg.num_workers, initializer=_init_worker, initargs=(cfg, True))
    else:
        _init_worker(cfg, single_threaded=False)
    try:
        units, num_docs = plan_units(paths, cfg, len(shards))
        os.makedirs(work, exist_ok=True)
        _write_json(job_file, dict(fingerprint=fp, output_files=shards, replaced=replaced))
        summary = _run_passes(cfg, pool, paths, units, num_docs, shards, work, fp, start)
    except BaseException:
        if pool is not None:
            pool.terminate()
            pool.join()
            pool = None
        raise
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    os.makedirs(os.path.dirname(os.path.abspath(summary_file)), exist_ok=True)
    _write_json(summary_file, summary)
    for path in set(replaced) - set(shards):  # the replaced run's surplus shards
        if os.path.isfile(path):
            os.remove(path)
    output_guard.release_work_dir(work, "create_pretraining_data")
    return summary


def _run_passes(cfg, pool, paths, units, num_docs, shards, work, fp, start):
    import numpy as np

    U, S = len(units), len(shards)
    def part(u):
        return os.path.join(work, f"part-{u:06d}.docs")

    def unit_file(u):
        return _unit_file(work, u)

    def bucket_file(b):
        return os.path.join(work, f"bucket-{b:06d}.tfrecords")

    # Pass 1: tokenize every unit into the document store.
    token_stats = [_read_json(part(u) + ".json") for u in range(U)]
    todo = [u for u in range(U) if token_stats[u] is None]
    with _Phase(cfg, "tokenize", num_docs, "doc",
                        initial=sum(units[u].num_docs for u in range(U)) - sum(
                    units[u].num_docs for u in todo)) as bar:
        for u, stats in zip(todo, _map(pool, _tokenize_task,
                                       [(units[u], part(u)) for u in todo])):
            for msg in stats.get("invalid_examples", [])[:10]:
                log.warning("skipped %s", msg)
            _write_json(part(u) + ".json", stats)
            token_stats[u] = stats
            bar.update(units[u].num_docs)
    layout = [document_store.PartLayout.from_stats(st) for st in token_stats]
    doc_counts = document_store.document_counts(layout)
    total_docs = sum(doc_counts)
    text_tokens = sum(st["text_tokens"] for st in token_stats)
    if total_docs == 0 or text_tokens == 0:
        output_guard.release_work_dir(work, "create_pretraining_data")
        raise CorpusError(f"no instances from {', '.join(paths)}: no line gave any WordPiece "
                          f"token; is it a text corpus in the vocab's language?")
    manifest = os.path.join(work, "store.json")
    _write_json(manifest, dict(parts=[part(u) for u in range(U)], doc_counts=doc_counts,
                               layout=[list(x) for x in layout]))
    no_special = not any(st["special_ids"] for st in token_stats)
    num_buckets = num_shuffle_buckets(cfg, text_tokens, total_docs)
    starts = [0]
    for n in doc_counts:
        starts.append(starts[-1] + n)

    # Pass 2: every unit's instances, random-next documents drawn from the whole store,
    # scattered to the shuffle buckets.
    # Per unit, the counts (records per bucket are summed as they come: U x B numbers
    # would grow with the corpus).
    bucket_counts = np.zeros(num_buckets, np.int64)

    def keep(u, stats):
        bucket_counts[:] += stats.pop("bucket_counts")
        inst_stats[u] = stats

    inst_stats: List[Optional[Dict]] = [None] * U
    for u in range(U):
        stats = _read_json(unit_file(u) + ".json")
        if stats is not None:
            keep(u, stats)
    todo = [u for u in range(U) if inst_stats[u] is None]
    tasks = [(u, manifest, starts[u], U, no_special, num_buckets, unit_file(u)) for u in todo]
    done = set(range(U)) - set(todo)
    with _Phase(cfg, "instances", total_docs, "doc",
                initial=sum(doc_counts[u] for u in done)) as bar:
        new, t0 = 0, time.time()
        for u, stats in zip(todo, _map(pool, _instances_task, tasks)):
            _write_json(unit_file(u) + ".json", stats)
            keep(u, stats)
            new += stats["instances"]
            bar.update(doc_counts[u])
            bar.set_postfix_str(f"{new / max(1e-9, time.time() - t0):,.0f} instances/s",
                                refresh=False)
    for u in range(U):  # the store is not needed any more
        if os.path.exists(part(u)):
            os.remove(part(u))
    total: Dict = {}
    for u in range(U):
        _merge(total, dict(inst_stats[u], documents=doc_counts[u],
                           invalid_lines=token_stats[u]["invalid_lines"],
                           invalid_examples=token_stats[u]["invalid_examples"]))
    n = total["instances"]
    if n == 0:
        output_guard.release_work_dir(work, "create_pretraining_data")
        raise CorpusError("no instances: every document is too short")

    # Pass 3: the global shuffle, one bucket in memory at a time.
    first = np.concatenate([[0], np.cumsum(bucket_counts)]).tolist()
    todo = [b for b in range(num_buckets) if not os.path.exists(bucket_file(b) + ".idx")]
    chunks = [inst_stats[u].get("chunks", 1) for u in range(U)]
    tasks = [(cfg.random_seed, b, work, chunks, first[b], S, U > 1, bucket_file(b))
             for b in todo]
    with _Phase(cfg, "shuffle", num_buckets, "bucket", num_buckets - len(todo)) as bar:
        for _ in _map(pool, _bucket_task, tasks):
            bar.update(1)
    for u in range(U):
        for c in range(chunks[u]):
            for f in (unit_chunk_file(unit_file(u), c), unit_chunk_file(unit_file(u), c) + ".idx"):
                if os.path.exists(f):
                    os.remove(f)

    # Pass 4: the shards, each its share of every bucket, in bucket order.
    todo = [s for s in range(S) if not os.path.exists(_shard_done(work, s))]
    if todo:
        os.makedirs(os.path.dirname(os.path.abspath(shards[0])), exist_ok=True)
    buckets = [bucket_file(b) for b in range(num_buckets)]
    with _Phase(cfg, "write", S, "shard", S - len(todo)) as bar:
        for s in _map(pool, _shard_task, [(s, buckets, shards[s]) for s in todo]):
            output_guard.write_text(_shard_done(work, s), shards[s])
            bar.update(1)

    summary = _finish_summary(total, cfg, shards, time.time() - start)
    warning = few_documents_warning(paths, total_docs)
    if warning:
        summary["warnings"] = [warning]
    summary.update(fingerprint=fp, work_units=U, shuffle_buckets=num_buckets,
                   shard_instances=[n // S + (s < n % S) for s in range(S)])
    return summary


# ---------------------------------------------------------------------------------------------
# Command line (the only place with absl flags).


def define_flags(flag_values=None) -> None:
    """Defines the command's flags on `flag_values` (default: absl's global FLAGS)."""
    from absl import flags

    flag_values = flags.FLAGS if flag_values is None else flag_values
    fv = {"flag_values": flag_values}

    flags.DEFINE_string("input_file", None, "Input corpus: comma-separated globs of UTF-8 text, "
                        "one sentence per line, blank line between documents.", **fv)
    flags.DEFINE_string("output_file", None, "Output TFRecord path; with --num_output_shards=N>1 "
                        "the shards are PATH-00000-of-0000N. A comma-separated list names the "
                        "shards. Nothing else is written in its directory.", **fv)
    flags.DEFINE_string("vocab_file", None, "WordPiece vocab the model is trained with.", **fv)
    from bert_tf import settings

    settings.CorpusTextSettings.define_flags(flag_values)
    flags.DEFINE_bool("do_whole_word_mask", False, "Mask all WordPieces of a word together "
                      "(80/10/10 still drawn per piece, as the original).", **fv)
    flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.", lower_bound=5, **fv)
    flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum masked LM predictions per "
                         "sequence.", lower_bound=1, **fv)
    flags.DEFINE_float("masked_lm_prob", 0.15, "Fraction of tokens to mask.",
                       lower_bound=0.0, upper_bound=1.0, **fv)
    flags.DEFINE_integer("dupe_factor", 10, "Passes over the data, each with fresh masks.",
                         lower_bound=1, **fv)
    flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a shorter target length.",
                       lower_bound=0.0, upper_bound=1.0, **fv)
    flags.DEFINE_integer("random_seed", 12345, "Random seed.", **fv)
    flags.DEFINE_integer("num_workers", max(1, (os.cpu_count() or 1)), "Worker processes; never "
                         "changes the output.", lower_bound=0, **fv)
    flags.DEFINE_integer("num_output_shards", 1, "Output shards (files).", lower_bound=1, **fv)
    flags.DEFINE_integer("pool_size", 0, "At most this many documents per work unit (0: no "
                         "limit; units stop at 1 MB of text, more on corpora over 2 GB so that "
                         "there are at most ~2,048). Units are the grain of parallel work and "
                         "of resuming; the statistics do not depend on them (random-next "
                         "documents come from the whole corpus, instances are shuffled over "
                         "all shards). A corpus that is one unit gives exactly the original "
                         "tool's records.", lower_bound=0, **fv)
    flags.DEFINE_string("summary_file", None, "JSON summary (counts, masking fractions). "
                        "Default: beside the output directory, records/x.tfrecord -> "
                        "records.x.tfrecord.summary.json.", **fv)
    flags.DEFINE_string("work_dir", None, "Directory for the passes' temporary files (the "
                        "tokenized corpus, shuffle buckets: about 3x the output at peak) and "
                        "the state a rerun resumes from; removed when the job is done. "
                        "Default: beside the output directory, records.x.tfrecord.work. An "
                        "existing folder not made by this job keeps its files: the job works "
                        "in a subfolder create_pretraining_data.work there.", **fv)
    flags.DEFINE_bool("overwrite", False, "Replace the records of an earlier run into the same "
                      "--output_file made with other inputs or settings (only the files its "
                      "summary lists; the new ones are written before the old are removed).",
                      **fv)
    flags.DEFINE_enum("tokenizer", "python", ["python", "tensorflow"], "WordPiece "
                      "implementation: 'python' (the original's rules with a word cache; fast, "
                      "no TensorFlow in the workers) or 'tensorflow' (bert_tf.tokenization, "
                      "in-graph). Both give the original FullTokenizer's ids.", **fv)
    flags.DEFINE_bool("strict", False, "Stop at a line that is not valid UTF-8 instead of "
                      "reporting FILE:LINE and skipping it.", **fv)
    for name in ("input_file", "output_file", "vocab_file"):
        flags.mark_flag_as_required(name, **fv)


def main(argv):
    from absl import flags

    del argv  # cli.run_main refuses positional arguments
    F = flags.FLAGS
    cfg = JobConfig(
        input_file=F.input_file, output_file=F.output_file, vocab_file=F.vocab_file,
        do_lower_case=F.do_lower_case, strip_accents=F.strip_accents,
        pre_tokenizer=F.pre_tokenizer, do_whole_word_mask=F.do_whole_word_mask,
        max_seq_length=F.max_seq_length, max_predictions_per_seq=F.max_predictions_per_seq,
        masked_lm_prob=F.masked_lm_prob, dupe_factor=F.dupe_factor,
        short_seq_prob=F.short_seq_prob, random_seed=F.random_seed,
        num_output_shards=F.num_output_shards, pool_size=F.pool_size, strict=F.strict,
        tokenizer=F.tokenizer, num_workers=F.num_workers, progress=True,
        summary_file=F.summary_file or "", work_dir=F.work_dir or "", overwrite=F.overwrite)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        summary = run(cfg)
    except ValueError as e:  # CorpusError and bad values: one line from cli.run_main
        raise CorpusError(str(e)) from None
    print(f"{summary['instances']} instances in {len(summary['output_files'])} file(s), "
          f"{summary['seconds']:.1f} s; summary: {summary_path(cfg)}", file=sys.stderr)


if __name__ == "__main__":
    from bert_tf import cli

    cli.run_main(main, define_flags)
