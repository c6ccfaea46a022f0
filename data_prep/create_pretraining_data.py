r"""Pretraining TFRecords from a text corpus: the original tool's data, fast and in bounded memory.

    python -m data_prep.create_pretraining_data \
      --input_file=corpus/*.txt --output_file=out/pretrain.tfrecord \
      --vocab_file=vocab.txt --do_lower_case --max_seq_length=128 \
      --max_predictions_per_seq=20 --masked_lm_prob=0.15 --dupe_factor=10 \
      --num_workers=8 --num_output_shards=64

How (DESIGN 2.2 / 2.3):
- The corpus is cut into work units of `--pool_size` documents in content order, running on
  across file boundaries (`corpus.plan_work_units`). Each unit is one pool of the original algorithm
  (`pretraining_instances`): its documents are shuffled, `dupe_factor` passes make instances,
  random-next segments come from the same pool, the instances are shuffled. The unit's
  generator is seeded from (`--random_seed`, unit number); unit 0 uses `random.Random(seed)`,
  so a pool holding the whole corpus reproduces the original tool exactly.
- Units are processed by `--num_workers` processes; shard s holds a contiguous range of units,
  in order. Output therefore depends on the inputs, seed, pool size and shard count, never on
  the number of workers. (When the corpus has fewer units than shards, units shrink to
  equal shares of the corpus text so that every shard gets one.)
- Differences from the original, all forced by bounded streaming: documents are shuffled and
  random-next documents drawn within a pool, instances are shuffled within a unit; a file's
  end always ends a document (the original joins a file's last document to the next file's
  first when the file lacks a final blank line).
- A shard is assembled under a temporary name and renamed when complete; a rerun skips
  complete shards. `OUTPUT.summary.json` holds the counts at the end.

Library use: `run(JobConfig(...))` returns the summary dict; `UnitProcessor.records` is the
per-unit function the Beam pipeline also calls.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import multiprocessing
import os
import random
import shutil
import sys
import time
from typing import Dict, List, Optional, Sequence

from data_prep import corpus
from data_prep import pretraining_instances as pi
from data_prep import tfrecord_writer
from data_prep.corpus import CorpusError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
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
    pool_size: int = 1000
    strict: bool = False
    tokenizer: str = "python"  # or "tensorflow" (bert_tf.tokenization); same ids
    num_workers: int = 1  # 0: in this process (tests); never changes the output
    progress: bool = True

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
        if self.pool_size < 1:
            raise ValueError("--pool_size must be >= 1")
        if self.num_output_shards < 1:
            raise ValueError("--num_output_shards must be >= 1")
        if self.num_workers < 0:
            raise ValueError("--num_workers must be >= 0")
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


def summary_path(cfg: JobConfig) -> str:
    first = output_paths(cfg.output_file, cfg.num_output_shards)[0]
    base = cfg.output_file if "," not in cfg.output_file else first
    return base + ".summary.json"


def check_vocab_file(path: str) -> List[str]:
    """The vocab's tokens; refuses a vocab without the five special tokens, naming them.

    (A light check in the parent process, so a wrong vocab fails before workers start.)
    """
    try:
        with open(path, "rb") as f:
            tokens = [t.strip() for t in f.read().decode("utf-8").split("\n")]
    except FileNotFoundError:
        raise CorpusError(f"--vocab_file: {path} does not exist") from None
    except UnicodeDecodeError as e:
        raise CorpusError(f"--vocab_file: {path} is not UTF-8 ({e})") from None
    present = set(tokens)
    missing = [t for t in SPECIAL_TOKENS if t not in present]
    if missing:
        raise CorpusError(f"--vocab_file: {path} lacks the special token(s) {' '.join(missing)}; "
                          f"a BERT vocab needs all of {' '.join(SPECIAL_TOKENS)}")
    return tokens


# ---------------------------------------------------------------------------------------------
# Per-unit work (runs in the worker processes; also used by the Beam pipeline).


class UnitProcessor:
    """Tokenizes a work unit and turns it into serialized, shuffled records.

    Holds the tokenizer, the encoder and the vocab ids; build one per process.
    """

    def __init__(self, cfg: JobConfig, opener=open):
        self.cfg = cfg
        self.opener = opener
        if cfg.tokenizer == "python":
            tok = corpus.WordPieceTokenizer.from_vocab_file(
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
            cls_id=token_to_id["[CLS]"], sep_id=token_to_id["[SEP]"],
            mask_id=token_to_id["[MASK]"], vocab_size=len(vocab_tokens),
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
        return corpus.split_documents(segments)

    BATCH = 512  # instances encoded together (vector operations over the batch)

    def _encode_unit(self, unit: corpus.WorkUnit, stats: Dict, spill, framed: bool):
        """Makes the unit's instances, encodes them into `spill` in creation order, fills
        `stats`; returns the final order (the original's last shuffle) as spill indexes."""
        import numpy as np

        invalid: List[corpus.InvalidLine] = []
        docs = self.documents(unit, invalid)
        stats.update(documents=len(docs), invalid_lines=len(invalid),
                     invalid_examples=[str(x) for x in invalid[:MAX_REPORTED_INVALID]])
        cfg, vocab, encoder = self.cfg, self.vocab, self.encoder
        rng = unit_rng(cfg.random_seed, unit.index)
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

        batch: list = []
        for inst in pi.iter_pool_instances(
                docs, cfg.dupe_factor, cfg.max_seq_length, cfg.short_seq_prob,
                cfg.masked_lm_prob, cfg.max_predictions_per_seq, vocab, rng,
                cfg.do_whole_word_mask):
            batch.append(inst)
            if len(batch) == self.BATCH:
                flush(batch)
                batch = []
        if batch:
            flush(batch)
        del docs, batch
        stats.update(counts)
        stats["masked_random"] = (counts["masked_tokens"] - counts["masked_as_mask"]
                                  - counts["masked_kept"])
        return pi.shuffled_order(counts["instances"], rng)

    def records(self, unit: corpus.WorkUnit, stats: Dict[str, int]):
        """Yields the unit's serialized records in final order; fills `stats`."""
        with tfrecord_writer.RecordSpill() as spill:
            for k in self._encode_unit(unit, stats, spill, framed=False):
                yield spill[k]

    def write_unit(self, unit: corpus.WorkUnit, path: str) -> Dict[str, int]:
        """Writes the unit's records as a TFRecord file at `path`; returns its stats."""
        stats: Dict[str, int] = {}
        with tfrecord_writer.RecordSpill() as spill, open(path, "wb") as out:
            # The records are framed (TFRecord length and CRCs) as they are encoded, so
            # writing the file is only copying them out in the final order.
            order = self._encode_unit(unit, stats, spill, framed=True)
            for s in range(0, len(order), 4096):
                out.write(b"".join([spill[k] for k in order[s:s + 4096]]))
        stats["unit"] = unit.index
        return stats


_WORKER: Optional[UnitProcessor] = None


def _init_worker(cfg: JobConfig, single_threaded: bool):
    global _WORKER
    if single_threaded and cfg.tokenizer == "tensorflow":
        # One TF thread per worker: the workers are the parallelism.
        import tensorflow as tf

        try:
            tf.config.threading.set_inter_op_parallelism_threads(1)
            tf.config.threading.set_intra_op_parallelism_threads(1)
        except RuntimeError:
            pass  # already initialised (in-process run)
    _WORKER = UnitProcessor(cfg)


def _work(task):
    unit, path = task
    return _WORKER.write_unit(unit, path)


# ---------------------------------------------------------------------------------------------
# The job.


STAT_KEYS = ("documents", "instances", "tokens", "masked_tokens", "masked_as_mask",
             "masked_kept", "masked_random", "random_next", "invalid_lines")


def fingerprint(cfg: JobConfig, paths: Sequence[str]) -> str:
    """Hash of everything that decides the output, so a rerun never mixes two configurations."""
    fields = dataclasses.asdict(cfg)
    for k in ("num_workers", "progress", "input_file", "strict", "tokenizer"):
        fields.pop(k)
    fields["inputs"] = [(os.path.abspath(p), os.path.getsize(p), int(os.path.getmtime(p)))
                        for p in paths]
    fields["vocab"] = (os.path.abspath(cfg.vocab_file), os.path.getsize(cfg.vocab_file))
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def _write_json(path, obj):
    with tfrecord_writer.atomic_output(path) as tmp:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.write("\n")


def shard_unit_ranges(num_units: int, num_shards: int) -> List[range]:
    """Contiguous unit ranges, one per shard, sizes differing by at most one.

        >>> shard_unit_ranges(5, 2)
        [range(0, 2), range(2, 5)]
    """
    return [range(s * num_units // num_shards, (s + 1) * num_units // num_shards)
            for s in range(num_shards)]


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


def plan_units(paths: Sequence[str], pool_size: int, num_shards: int, opener=open):
    """The job's work units: `pool_size` documents each, smaller when there would be fewer
    units than shards (so every shard gets at least one). Returns `(units, num_docs)`.

    Smaller units are cut at equal shares of the text (documents vary in length, instances
    follow the tokens), so shards, and the workers making them, get even amounts of work;
    only when a few huge documents make that impossible, at equal numbers of documents.
    """
    units, num_docs = corpus.plan_work_units(paths, pool_size, opener)
    if len(units) < num_shards:
        if num_docs < num_shards:
            raise CorpusError(f"{', '.join(paths)} hold {num_docs} documents, fewer than "
                              f"the {num_shards} output shards: use fewer shards")
        text_bytes = sum(span.end - span.start for u in units for span in u.spans)
        share = min(corpus.MAX_UNIT_BYTES, -(-text_bytes // num_shards))
        units, num_docs = corpus.plan_work_units(paths, pool_size, opener, max_unit_bytes=share)
        if len(units) < num_shards:
            units, num_docs = corpus.plan_work_units(paths, num_docs // num_shards, opener)
    return units, num_docs


def run(cfg: JobConfig) -> Dict:
    """Runs the job; returns the summary (also written to OUTPUT.summary.json)."""
    start = time.time()
    cfg.validate()
    for flag, value in (("--input_file", cfg.input_file), ("--output_file", cfg.output_file),
                        ("--vocab_file", cfg.vocab_file)):
        remote = [p for p in value.split(",") if corpus.is_remote(p.strip())]
        if remote:
            raise CorpusError(f"{flag}={remote[0]}: this job reads and writes local files; "
                              f"for gs:// and other remote storage run the same job as "
                              f"`python -m data_prep.beam_pipeline` (DirectRunner by default)")
    paths = corpus.expand_input_globs(cfg.input_file)
    check_vocab_file(cfg.vocab_file)
    shards = output_paths(cfg.output_file, cfg.num_output_shards)
    fp = fingerprint(cfg, paths)
    summary_file = summary_path(cfg)
    previous = _read_json(summary_file)
    done_stats: Dict[int, Dict] = {}
    if previous is not None:
        if previous.get("fingerprint") != fp:
            raise CorpusError(f"{summary_file} exists from a run with other inputs or settings: "
                              f"delete it and its shards, or choose another --output_file")
        if all(os.path.exists(s) for s in shards):
            log.info("%s: already complete, nothing to do", summary_file)
            return previous
        # Some shards were deleted since: redo those, keep the others' counts.
        done_stats = {s: st for s, st in enumerate(previous.get("shard_stats", []))
                      if os.path.exists(shards[s])}
        os.remove(summary_file)

    # Workers start (spawn: a fresh interpreter each, safe whatever this process imported)
    # while this process plans the units.
    pool = parts = None
    if cfg.num_workers > 0:
        ctx = multiprocessing.get_context("spawn")
        pool = ctx.Pool(cfg.num_workers, initializer=_init_worker, initargs=(cfg, True))
    try:
        units, num_docs = plan_units(paths, cfg.pool_size, len(shards))
        ranges = shard_unit_ranges(len(units), len(shards))

        out_dir = os.path.dirname(os.path.abspath(shards[0]))
        os.makedirs(out_dir, exist_ok=True)
        parts = os.path.join(out_dir, f".{os.path.basename(summary_file)[:-13]}.parts")
        os.makedirs(parts, exist_ok=True)

        todo: List[int] = []
        for s, shard in enumerate(shards):
            stats = _read_json(os.path.join(parts, f"shard-{s:05d}.json")) or done_stats.get(s)
            if os.path.exists(shard) and stats is not None and stats.get("fingerprint") == fp:
                done_stats[s] = stats
                continue
            if os.path.exists(shard):
                raise CorpusError(f"{shard} exists but was not written by this job's "
                                  f"configuration: delete it or choose another --output_file")
            done_stats.pop(s, None)
            todo.append(s)
        skipped_docs = sum(units[u].num_docs for s in range(len(shards)) if s not in todo
                           for u in ranges[s])
        if len(todo) < len(shards):
            log.info("resuming: %d of %d shards already complete", len(shards) - len(todo),
                     len(shards))

        tasks = [(units[u], os.path.join(parts, f"unit-{u:06d}.tfrecord"))
                 for s in todo for u in ranges[s]]
        if pool is not None:
            results = pool.imap(_work, tasks, chunksize=1)
        else:
            _init_worker(cfg, single_threaded=False)
            results = map(_work, tasks)

        from tqdm import tqdm

        bar = tqdm(total=num_docs, initial=skipped_docs, unit="doc", disable=not cfg.progress,
                   dynamic_ncols=True, file=sys.stderr)
        new_instances, run_start = 0, time.time()
        written: List[str] = []
        with bar:
            it = iter(results)
            for s in todo:
                shard_stats: Dict = {}
                unit_files = []
                for u in ranges[s]:
                    stats = next(it)
                    for msg in stats.get("invalid_examples", [])[:10]:
                        log.warning("skipped %s", msg)
                    _merge(shard_stats, stats)
                    unit_files.append(os.path.join(parts, f"unit-{u:06d}.tfrecord"))
                    new_instances += stats["instances"]
                    bar.update(units[u].num_docs)
                    rate = new_instances / max(1e-9, time.time() - run_start)
                    bar.set_postfix_str(f"{rate:,.0f} instances/s", refresh=False)
                with tfrecord_writer.atomic_output(shards[s]) as tmp:
                    if len(unit_files) == 1:  # same directory tree: a rename, not a copy
                        os.replace(unit_files[0], tmp)
                    else:
                        with open(tmp, "wb") as out:
                            tfrecord_writer.concatenate_files(unit_files, out)
                    shard_stats["fingerprint"] = fp
                    shard_stats["shard"] = shards[s]
                    _write_json(os.path.join(parts, f"shard-{s:05d}.json"), shard_stats)
                written.append(shards[s])
                for f in unit_files:
                    if os.path.exists(f):
                        os.remove(f)
                done_stats[s] = shard_stats
        total: Dict = {}
        for s in sorted(done_stats):
            _merge(total, done_stats[s])
        if total.get("instances", 0) == 0:
            for f in written:
                os.remove(f)
            shutil.rmtree(parts, ignore_errors=True)
            raise CorpusError(f"no instances from {', '.join(paths)}: no line gave any "
                              f"WordPiece token; is it a text corpus in the vocab's language?")
        summary = _finish_summary(total, cfg, shards, time.time() - start)
        summary["fingerprint"] = fp
        summary["shard_stats"] = [done_stats[s] for s in range(len(shards))]
        _write_json(summary_file, summary)
        shutil.rmtree(parts, ignore_errors=True)
        return summary
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
        if parts is not None and os.path.isdir(parts):
            # Unit files of an interrupted run are never reused; completed shards' stats are.
            for name in os.listdir(parts):
                if name.startswith("unit-") or ".tmp-" in name:
                    os.remove(os.path.join(parts, name))
            if not os.listdir(parts):
                os.rmdir(parts)


# ---------------------------------------------------------------------------------------------
# Command line (the only place with absl flags).


def _define_flags():
    from absl import flags

    flags.DEFINE_string("input_file", None, "Input corpus: comma-separated globs of UTF-8 text, "
                        "one sentence per line, blank line between documents.")
    flags.DEFINE_string("output_file", None, "Output TFRecord path; with --num_output_shards=N>1 "
                        "the shards are PATH-00000-of-0000N. A comma-separated list names the "
                        "shards. The summary goes to PATH.summary.json.")
    flags.DEFINE_string("vocab_file", None, "WordPiece vocab the model is trained with.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
    from bert_tf import text_flags

    text_flags.define_text_flags(pre_tokenizer=True)
    flags.DEFINE_bool("do_whole_word_mask", False, "Mask all WordPieces of a word together "
                      "(80/10/10 still drawn per piece, as the original).")
    flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
    flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum masked LM predictions per sequence.")
    flags.DEFINE_float("masked_lm_prob", 0.15, "Fraction of tokens to mask.")
    flags.DEFINE_integer("dupe_factor", 10, "Passes over the data, each with fresh masks.")
    flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a shorter target length.")
    flags.DEFINE_integer("random_seed", 12345, "Random seed.")
    flags.DEFINE_integer("num_workers", max(1, (os.cpu_count() or 1)), "Worker processes; never "
                         "changes the output.")
    flags.DEFINE_integer("num_output_shards", 1, "Output shards (files).")
    flags.DEFINE_integer("pool_size", 1000, "Documents per work unit. Each unit is processed as "
                         "the original processes its whole corpus: the documents are shuffled "
                         "and the random-next document is drawn from this bounded pool of the "
                         "worker's own input (not the whole corpus); its instances are shuffled "
                         "within the unit. Units run on across input files. Bounds memory; a pool "
                         "at least the corpus size reproduces the original tool exactly (for "
                         "input files that end with a blank line).")
    flags.DEFINE_enum("tokenizer", "python", ["python", "tensorflow"], "WordPiece "
                      "implementation: 'python' (the original's rules with a word cache; fast, "
                      "no TensorFlow in the workers) or 'tensorflow' (bert_tf.tokenization, "
                      "in-graph). Both give the original FullTokenizer's ids.")
    flags.DEFINE_bool("strict", False, "Stop at a line that is not valid UTF-8 instead of "
                      "reporting FILE:LINE and skipping it.")
    for name in ("input_file", "output_file", "vocab_file"):
        flags.mark_flag_as_required(name)


def main(argv):
    from absl import flags

    if len(argv) > 1:
        raise flags.ValidationError(f"unexpected arguments: {' '.join(argv[1:])}")
    F = flags.FLAGS
    cfg = JobConfig(
        input_file=F.input_file, output_file=F.output_file, vocab_file=F.vocab_file,
        do_lower_case=F.do_lower_case, strip_accents=F.strip_accents,
        pre_tokenizer=F.pre_tokenizer, do_whole_word_mask=F.do_whole_word_mask,
        max_seq_length=F.max_seq_length, max_predictions_per_seq=F.max_predictions_per_seq,
        masked_lm_prob=F.masked_lm_prob, dupe_factor=F.dupe_factor,
        short_seq_prob=F.short_seq_prob, random_seed=F.random_seed,
        num_output_shards=F.num_output_shards, pool_size=F.pool_size, strict=F.strict,
        tokenizer=F.tokenizer, num_workers=F.num_workers, progress=True)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        summary = run(cfg)
    except ValueError as e:  # CorpusError and bad values: one line from cli.run_main
        raise CorpusError(str(e)) from None
    print(f"{summary['instances']} instances in {len(summary['output_files'])} file(s), "
          f"{summary['seconds']:.1f} s; summary: {summary_path(cfg)}", file=sys.stderr)


if __name__ == "__main__":
    from bert_tf import cli

    _define_flags()
    cli.run_main(main)
