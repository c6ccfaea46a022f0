"""The create_pretraining_data job: runs the passes (`pretraining_passes`) on
`--num_workers` processes, resumably, and writes the summary.

Output depends on the inputs, the seed and the settings, never on the number of workers
(`fingerprint` hashes what decides it). Each unit / bucket / shard is written atomically
with its counts in the work directory (`--work_dir`, beside the output directory by
default), and a rerun with the same fingerprint skips those done; the work directory is
removed when the job is done, and a rerun after that does nothing while the summary says
the job is complete. Disk: the store (~4 bytes a token) and two copies of the records
pass through the work directory, each deleted once the next pass is done. A corpus of
fewer than 10 documents gets a warning (next-sentence prediction needs other documents).

Library use: `run(JobConfig(...))` returns the summary dict (also written to
`summary_path(cfg)`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import multiprocessing
import os
import sys
import time
from typing import Dict, List, Optional, Sequence

import numpy as np
from tqdm import tqdm

from bert_tf.core import file_io, output_guard
from bert_tf.text import text_rules
from data_prep import corpus
from data_prep import document_store
from data_prep.corpus import CorpusError
from data_prep.pretraining_passes import (MAX_REPORTED_INVALID, JobConfig, UnitProcessor,
                                          assemble_shard, shuffle_bucket, unit_chunk_file,
                                          unit_records_path)

log = logging.getLogger("create_pretraining_data")


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


def _shard_done(work: str, s: int) -> str:
    """Written once shard `s` is complete in this job (a file of the shard's name from an
    earlier run with other settings is replaced, not taken as done)."""
    return os.path.join(work, f"shard-{s:06d}.done")


_WORKER: Optional[UnitProcessor] = None
_STORE = None  # (manifest path, DocumentStore) of this worker


def _init_worker(cfg: JobConfig, single_threaded: bool):
    global _WORKER, _STORE
    if single_threaded and cfg.tokenizer == "tensorflow":
        # One TF thread per worker: the workers are the parallelism.
        import tensorflow as tf  # --tokenizer=tensorflow only; TF-free module

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
# Planning, the summary, the run.


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
    fields["vocab"] = file_io.sha256(cfg.vocab_file)
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


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
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit,
                        disable=not cfg.progress, dynamic_ncols=True, file=sys.stderr)

    def __enter__(self):
        return self.bar

    def __exit__(self, *exc):
        self.bar.close()


def _map(pool, fn, tasks):
    return pool.imap(fn, tasks, chunksize=1) if pool is not None else map(fn, tasks)


def run(cfg: JobConfig) -> Dict:
    """Runs the job; returns the summary (also written to `summary_path(cfg)`). One run
    of a job at a time (a lock on its summary file)."""
    with output_guard.locked(summary_path(cfg), flag="--summary_file"):
        return _run(cfg)


def _run(cfg: JobConfig) -> Dict:
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
    for shard in shards:
        output_guard.check_apart(shard, inputs, flag="--output_file")
    # The summary is this job's own file (a sidecar marker): a file of the user's at that
    # path is refused, never read as an earlier run's summary nor replaced.
    output_guard.check_output_file(summary_file, "create_pretraining_data",
                                   flag="--summary_file", inputs=inputs)
    previous = _read_json(summary_file)
    if not isinstance(previous, dict):
        previous = None
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
    # Only the job's own files there are removed at the end (docs/contracts.md §6): a --work_dir of
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
    with output_guard.output_file(summary_file, "create_pretraining_data") as tmp:
        _write_json(tmp, summary)
    for path in set(replaced) - set(shards):  # the replaced run's surplus shards
        if os.path.isfile(path):
            os.remove(path)
    output_guard.release_work_dir(work, "create_pretraining_data")
    return summary


def _run_passes(cfg, pool, paths, units, num_docs, shards, work, fp, start):
    U, S = len(units), len(shards)
    def part(u):
        return os.path.join(work, f"part-{u:06d}.docs")

    def unit_file(u):
        return unit_records_path(work, u)

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
