r"""create_pretraining_data as an Apache Beam pipeline, for corpora that outgrow one machine.

    python -m data_prep.beam_pipeline \
      --input_file=gs://bucket/corpus/*.txt --output_file=gs://bucket/out/pretrain.tfrecord \
      --vocab_file=gs://bucket/vocab.txt --do_lower_case --dupe_factor=10 \
      --num_output_shards=256 \
      --runner=DataflowRunner --project=P --region=R --temp_location=gs://bucket/tmp

The job's own flags (same names as `data_prep.create_pretraining_data`) are parsed here; every
other flag goes to Beam's PipelineOptions unchanged (`--runner` defaults to DirectRunner;
DataflowRunner, FlinkRunner, SparkRunner and their options pass through).

The same passes as the local job, with the runner doing the moving: the launcher cuts the
corpus into work units (`corpus.plan_work_units`, one sequential scan for document
boundaries); each unit is tokenized into a part of the document store under the work
directory (`--work_dir`, default beside the output directory; remote paths work); once every
part exists (a side input), each unit makes its instances with `UnitProcessor.encode_unit`,
drawing random-next documents uniformly from the whole corpus store, exactly as the local job
does, so the set of records equals the local job's. The global shuffle is the runner's: every
record gets a random shard and a random sort key (seeded per unit), a GroupByKey brings each
shard's records together, and the shard is written sorted by the key: every shard is a
uniform sample of the corpus in random order (shard sizes are binomial, not equal to within
one as in the local job). A shard's records are sorted in the memory of one worker: choose
`--num_output_shards` so that a shard is at most a few hundred MB. Records are framed here (no
crcmod / google-crc32c needed on the workers). Counts go to Beam metrics and, when the runner
reports them, to the summary file (local paths only).

Install Beam with `pip install -r requirements-beam.txt`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import sys
import tempfile
from typing import List, Optional, Sequence

import numpy as np

from bert_tf.core import output_guard
from bert_tf.core.file_io import is_remote
from bert_tf.text.pre_tokenizers import PRE_TOKENIZERS
from data_prep import corpus
from data_prep import document_store
from data_prep import tfrecord_writer
from data_prep.pretraining_job import (STAT_KEYS, check_vocab_file, default_summary_path,
                                       output_paths, plan_units, work_dir_path)
from data_prep.pretraining_passes import JobConfig, UnitProcessor, np_generator

NAMESPACE = "create_pretraining_data"
def open_any(path: str, mode: str = "rb"):
    """Opens a local path with `open`, anything with a scheme (gs://, s3://, hdfs://) with
    Beam's FileSystems, uncompressed (a .gz is refused by the text sniff, not inflated)."""
    if not is_remote(path):
        return open(path, mode)
    from apache_beam.io.filesystem import CompressionTypes  # optional (requirements-beam.txt)
    from apache_beam.io.filesystems import FileSystems  # optional (requirements-beam.txt)

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def expand_globs(spec: str) -> List[str]:
    """Comma-separated globs -> files, local or remote (through Beam's FileSystems); a glob
    matching nothing is an error (`corpus.expand_input_globs`)."""
    if not any(is_remote(p.strip()) for p in spec.split(",")):
        return corpus.expand_input_globs(spec)
    from apache_beam.io.filesystems import FileSystems  # optional (requirements-beam.txt)

    def glob_fn(pattern):
        return [m.path for m in FileSystems.match([pattern])[0].metadata_list]

    return corpus.expand_input_globs(spec, glob_fn, isdir=lambda path: False)


def _size(path: str) -> int:
    if not is_remote(path):
        return os.path.getsize(path)
    from apache_beam.io.filesystems import FileSystems  # optional (requirements-beam.txt)

    return FileSystems.match([path])[0].metadata_list[0].size_in_bytes


def _read_bytes(path: str) -> bytes:
    with open_any(path) as f:
        return f.read()


def _write_local_vocab(contents: bytes) -> str:
    fd, local = tempfile.mkstemp(suffix="-vocab.txt")
    with os.fdopen(fd, "wb") as out:
        out.write(contents)
    return local


def _create_any(path: str):
    if not is_remote(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return open(path, "wb")
    from apache_beam.io.filesystems import FileSystems  # optional (requirements-beam.txt)

    return FileSystems.create(path)


def _rename_any(src: str, dst: str):
    if not is_remote(dst):
        os.replace(src, dst)
        return
    from apache_beam.io.filesystems import FileSystems  # optional (requirements-beam.txt)

    FileSystems.rename([src], [dst])


def _make_dofns(cfg: JobConfig, work_dir: str, num_units: int):
    import apache_beam as beam  # optional (requirements-beam.txt)
    from apache_beam.metrics import Metrics  # optional

    vocab_bytes = _read_bytes(cfg.vocab_file)

    class _WithProcessor(beam.DoFn):
        def __init__(self):
            # The vocab travels with the function: a remote worker cannot read the
            # launching machine's --vocab_file (local or not).
            self.vocab_bytes = vocab_bytes

        def setup(self):
            vocab = _write_local_vocab(self.vocab_bytes)
            self.processor = UnitProcessor(dataclasses.replace(cfg, vocab_file=vocab),
                                           opener=open_any)

    def part_path(u):
        return f"{work_dir.rstrip('/')}/part-{u:06d}.docs"

    def write_part(path, docs):
        if not is_remote(path):  # written in place, atomically, as the local job does
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with tfrecord_writer.atomic_output(path) as tmp:
                document_store.write_part(tmp, docs)
            return
        fd, local = tempfile.mkstemp(suffix=".docs")
        os.close(fd)
        try:
            document_store.write_part(local, docs)
            with open(local, "rb") as src, _create_any(path + ".tmp") as dst:
                shutil.copyfileobj(src, dst, 8 << 20)
            _rename_any(path + ".tmp", path)
        finally:
            os.remove(local)

    class Tokenize(_WithProcessor):
        """Pass 1: a work unit -> its part of the document store; emits its counts."""

        def process(self, unit):
            stats = self.processor.tokenize_unit(unit, part_path(unit.index), write_part)
            for msg in stats.get("invalid_examples", [])[:10]:
                logging.warning("skipped %s", msg)
            yield unit.index, stats

    class Instances(_WithProcessor):
        """Pass 2: a unit's records, each keyed by a random shard, with a random sort key."""

        def __init__(self):
            super().__init__()
            self.counters = {k: Metrics.counter(NAMESPACE, k) for k in STAT_KEYS}
            self.store = None

        def process(self, element, all_stats):
            u, _ = element
            if self.store is None:  # the side input is the same for every unit
                self.stats = dict(sorted(all_stats))
                layout = [document_store.PartLayout.from_stats(self.stats[k])
                          for k in range(num_units)]
                self.doc_counts = document_store.document_counts(layout)
                self.store = document_store.DocumentStore(
                    [part_path(k) for k in range(num_units)], self.doc_counts,
                    opener=open_any, layout=layout)
                self.no_special = not any(st["special_ids"] for st in self.stats.values())
            stats, store = self.stats, self.store
            docs = store.part_documents(u, open_any)
            with tfrecord_writer.RecordSpill() as spill:
                result = self.processor.encode_unit(
                    u, docs, store, store.starts[u], num_units, self.no_special, spill,
                    framed=False)
                del docs
                order = result.pop("order")
                gen = np_generator(cfg.random_seed, u, 3)
                shard = gen.integers(0, cfg.num_output_shards, len(order)).tolist()
                key = gen.integers(0, 1 << 63, len(order), dtype=np.int64).tolist()
                for i, k in enumerate(order):
                    yield shard[i], (key[i], spill[k])
            result.update(documents=self.doc_counts[u],
                          invalid_lines=stats[u]["invalid_lines"])
            for name, counter in self.counters.items():
                counter.inc(int(result.get(name, 0)))

        def teardown(self):
            if self.store is not None:
                self.store.close()

    class WriteShard(beam.DoFn):
        """Pass 3: one shard's records, in the order of their random keys, written under
        a temporary name and renamed."""

        def process(self, element):
            shard, values = element
            records = sorted(v for v in values if v is not None)
            path = output_paths(cfg.output_file, cfg.num_output_shards)[shard]
            tmp = f"{path}.tmp-beam"
            with _create_any(tmp) as out:
                for s in range(0, len(records), 1000):
                    out.write(tfrecord_writer.frame_records(
                        [r for _, r in records[s:s + 1000]]))
            _rename_any(tmp, path)
            yield path

    return Tokenize(), Instances(), WriteShard()


def build_pipeline(pipeline, cfg: JobConfig, units: Sequence[corpus.WorkUnit],
                   work_dir: str):
    """Adds the job to `pipeline`: units -> document store -> keyed records -> shuffle by
    the runner -> TFRecord shards."""
    import apache_beam as beam  # optional (requirements-beam.txt)

    tokenize, instances, write_shard = _make_dofns(cfg, work_dir, len(units))
    tokenized = (pipeline
                 | "WorkUnits" >> beam.Create(list(units))
                 | "Spread" >> beam.Reshuffle()
                 | "Tokenize" >> beam.ParDo(tokenize))
    records = (tokenized
               | "SpreadUnits" >> beam.Reshuffle()
               | "Instances" >> beam.ParDo(instances, beam.pvalue.AsList(tokenized)))
    # Every shard gets a file, even one no record went to.
    empty = pipeline | "AllShards" >> beam.Create(
        [(s, None) for s in range(cfg.num_output_shards)])
    return ((records, empty)
            | "Join" >> beam.Flatten()
            | "GlobalShuffle" >> beam.GroupByKey()
            | "Write" >> beam.ParDo(write_shard))


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "t", "y"):
        return True
    if text.lower() in ("0", "false", "no", "f", "n"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def parse_args(argv: Sequence[str]):
    """(JobConfig, pipeline args): our flags parsed, the rest left for PipelineOptions."""
    ap = argparse.ArgumentParser(
        prog="python -m data_prep.beam_pipeline",
        description="create_pretraining_data on Apache Beam; unknown flags go to Beam.")
    ap.add_argument("--input_file", required=True)
    ap.add_argument("--output_file", required=True)
    ap.add_argument("--vocab_file", required=True)
    ap.add_argument("--summary_file", default="")
    ap.add_argument("--work_dir", default="")
    d = JobConfig("", "", "")
    for name in ("do_lower_case", "do_whole_word_mask", "strict"):
        ap.add_argument(f"--{name}", type=_bool, nargs="?", const=True, default=getattr(d, name))
        ap.add_argument(f"--no{name}", dest=name, action="store_false")
    # --strip_accents / --nostrip_accents (default: follows --do_lower_case) and
    # --pre_tokenizer, as bert_tf.app.settings declares them for the absl commands.
    ap.add_argument("--strip_accents", type=_bool, nargs="?", const=True, default=None)
    ap.add_argument("--nostrip_accents", dest="strip_accents", action="store_false")

    ap.add_argument("--pre_tokenizer", choices=PRE_TOKENIZERS, default=None)
    for name in ("max_seq_length", "max_predictions_per_seq", "dupe_factor", "random_seed",
                 "num_output_shards", "pool_size"):
        ap.add_argument(f"--{name}", type=int, default=getattr(d, name))
    for name in ("masked_lm_prob", "short_seq_prob"):
        ap.add_argument(f"--{name}", type=float, default=getattr(d, name))
    args, rest = ap.parse_known_args(list(argv))
    cfg = JobConfig(num_workers=0, progress=False, **vars(args))
    if not any(a == "--runner" or a.startswith("--runner=") for a in rest):
        rest = ["--runner=DirectRunner"] + rest
    return cfg, rest


def run(argv: Sequence[str], wait: bool = True) -> Optional[dict]:
    """Plans the units, runs the pipeline; returns the summary when the runner reports counts."""
    import apache_beam as beam  # optional (requirements-beam.txt)
    from apache_beam.metrics.metric import MetricsFilter  # optional
    from apache_beam.options.pipeline_options import PipelineOptions  # optional

    cfg, beam_args = parse_args(argv)
    cfg.validate()
    paths = expand_globs(cfg.input_file)
    check_vocab_file(cfg.vocab_file, open_any)
    units, num_docs = plan_units(paths, cfg, cfg.num_output_shards, open_any,
                                 corpus_bytes=sum(_size(p) for p in paths))
    logging.info("%d documents in %d work units", num_docs, len(units))
    shards = output_paths(cfg.output_file, cfg.num_output_shards)
    summary_file = cfg.summary_file or (None if is_remote(cfg.output_file)
                                        else default_summary_path(cfg.output_file))
    inputs = list(paths) + [cfg.vocab_file]
    for out in shards:
        output_guard.check_apart(out, inputs, flag="--output_file")
    if summary_file:  # a file of the user's there is never replaced
        output_guard.check_output_file(summary_file, "beam_pipeline", flag="--summary_file",
                                       inputs=inputs)
    # The work dir is the job's own (a marked folder, or a marked subfolder of a folder of
    # the user's): only it is removed at the end (docs/contracts.md §6).
    work_dir = output_guard.claim_work_dir(work_dir_path(cfg), "beam_pipeline",
                                           inputs=inputs, outputs=shards)

    pipeline = beam.Pipeline(options=PipelineOptions(beam_args))
    build_pipeline(pipeline, cfg, units, work_dir)
    result = pipeline.run()
    if not wait:
        return None
    result.wait_until_finish()
    output_guard.release_work_dir(work_dir, "beam_pipeline")
    counts = {}
    try:
        for c in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
            counts[c.key.metric.name] = counts.get(c.key.metric.name, 0) + int(c.committed or 0)
    except Exception:  # some runners do not report metrics to the launcher
        return None
    if not counts:
        return None
    n, masked = counts.get("instances", 0), counts.get("masked_tokens", 0)
    summary = dict(counts, runner=next((a.split("=", 1)[1] for a in beam_args
                                        if a.startswith("--runner=")), None),
                   masked_fraction=masked / max(1, counts.get("tokens", 0)),
                   random_next_fraction=counts.get("random_next", 0) / max(1, n),
                   config={k: v for k, v in dataclasses.asdict(cfg).items()
                           if k not in ("progress", "num_workers")})
    if summary_file and not is_remote(summary_file):
        with output_guard.output_file(summary_file, "beam_pipeline") as tmp:
            output_guard.write_json(tmp, summary, indent=1)
        summary["summary_file"] = summary_file
    return summary


def main():
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        summary = run(sys.argv[1:])
    except ValueError as e:  # CorpusError and bad values: one line from cli.run_plain
        raise corpus.CorpusError(str(e)) from None
    if summary:
        print(f"{summary['instances']} instances; summary: "
              f"{summary.get('summary_file', '(not written)')}", file=sys.stderr)


if __name__ == "__main__":
    from bert_tf.app import cli

    cli.run_plain(main)
