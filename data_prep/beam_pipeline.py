r"""create_pretraining_data as an Apache Beam pipeline, for corpora that outgrow one machine.

    python -m data_prep.beam_pipeline \
      --input_file=gs://bucket/corpus/*.txt --output_file=gs://bucket/out/pretrain.tfrecord \
      --vocab_file=gs://bucket/vocab.txt --do_lower_case --dupe_factor=10 \
      --num_output_shards=256 \
      --runner=DataflowRunner --project=P --region=R --temp_location=gs://bucket/tmp

The job's own flags (same names as `data_prep.create_pretraining_data`) are parsed here; every
other flag goes to Beam's PipelineOptions unchanged (`--runner` defaults to DirectRunner;
DataflowRunner, FlinkRunner, SparkRunner and their options pass through).

The same per-unit function as the local job: the launcher cuts the corpus into work units
(`corpus.plan_work_units`, one sequential scan for document boundaries), each unit is one
Beam element, and `UnitProcessor.records` turns it into the same serialized records the local
job writes for that unit (same seed per unit, same pool), framed as TFRecords in batches and
written by a file sink: the set of records equals the local job's; their order and the split
into shards are Beam's. (Beam's own WriteToTFRecord would need crcmod or google-crc32c on every
worker; the framing here is the same bytes.) Counts go to Beam metrics and, when the runner reports them, to
OUTPUT.summary.json.

Install Beam with `pip install -r requirements-beam.txt`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import sys
import tempfile
from typing import List, Optional, Sequence

from data_prep import corpus
from data_prep import create_pretraining_data as cpd
from data_prep import tfrecord_writer

NAMESPACE = "create_pretraining_data"
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def _is_remote(path: str) -> bool:
    return bool(_SCHEME.match(path))


def open_any(path: str, mode: str = "rb"):
    """Opens a local path with `open`, anything with a scheme (gs://, s3://, hdfs://) with
    Beam's FileSystems, uncompressed (a .gz is refused by the text sniff, not inflated)."""
    if not _is_remote(path):
        return open(path, mode)
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def expand_globs(spec: str) -> List[str]:
    """Comma-separated globs -> files, local or remote; a glob matching nothing is an error."""
    if not any(_is_remote(p.strip()) for p in spec.split(",")):
        return corpus.expand_input_globs(spec)
    from apache_beam.io.filesystems import FileSystems

    paths: List[str] = []
    for pattern in (p.strip() for p in spec.split(",") if p.strip()):
        matches = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
        if not matches:
            raise corpus.CorpusError(f"--input_file: no file matches {pattern!r}")
        paths.extend(m for m in matches if m not in paths)
    return paths


def _read_bytes(path: str) -> bytes:
    with open_any(path) as f:
        return f.read()


def _write_local_vocab(contents: bytes) -> str:
    fd, local = tempfile.mkstemp(suffix="-vocab.txt")
    with os.fdopen(fd, "wb") as out:
        out.write(contents)
    return local


def _make_dofn(cfg: cpd.JobConfig):
    import apache_beam as beam
    from apache_beam.metrics import Metrics

    class UnitToRecords(beam.DoFn):
        """A work unit -> its serialized records (the local job's `UnitProcessor.records`)."""

        def __init__(self, job_cfg: cpd.JobConfig):
            self.cfg = job_cfg
            # The vocab travels with the function: a remote worker cannot read the
            # launching machine's --vocab_file (local or not).
            self.vocab_bytes = _read_bytes(job_cfg.vocab_file)
            self.counters = {k: Metrics.counter(NAMESPACE, k) for k in cpd.STAT_KEYS}

        def setup(self):
            vocab = _write_local_vocab(self.vocab_bytes)
            local = dataclasses.replace(self.cfg, vocab_file=vocab)
            self.processor = cpd.UnitProcessor(local, opener=open_any)

        def process(self, unit):
            # Emit framed batches of TFRecords: the sink then only appends bytes, and no
            # CRC library (crcmod, google-crc32c) is needed on the workers.
            stats: dict = {}
            batch = []
            for record in self.processor.records(unit, stats):
                batch.append(record)
                if len(batch) == 1000:
                    yield tfrecord_writer.frame_records(batch)
                    batch = []
            if batch:
                yield tfrecord_writer.frame_records(batch)
            for key, counter in self.counters.items():
                counter.inc(int(stats.get(key, 0)))
            for msg in stats.get("invalid_examples", [])[:10]:
                logging.warning("skipped %s", msg)

    return UnitToRecords(cfg)


def _framed_sink(prefix: str, num_shards: int):
    from apache_beam import coders
    from apache_beam.io import filebasedsink
    from apache_beam.io.filesystem import CompressionTypes

    class FramedTFRecordSink(filebasedsink.FileBasedSink):
        """Writes elements that are already TFRecord-framed bytes, back to back."""

        def write_encoded_record(self, file_handle, value):
            file_handle.write(value)

    return FramedTFRecordSink(
        prefix, coder=coders.BytesCoder(), file_name_suffix="", num_shards=num_shards,
        shard_name_template="" if num_shards == 1 else "-SSSSS-of-NNNNN",
        mime_type="application/octet-stream", compression_type=CompressionTypes.UNCOMPRESSED)


def build_pipeline(pipeline, cfg: cpd.JobConfig, units: Sequence[corpus.WorkUnit]):
    """Adds the job to `pipeline`: units -> records -> TFRecord shards (DESIGN 2.2)."""
    import apache_beam as beam

    return (pipeline
            | "WorkUnits" >> beam.Create(list(units))
            | "Spread" >> beam.Reshuffle()
            | "Instances" >> beam.ParDo(_make_dofn(cfg))
            | "Write" >> beam.io.Write(_framed_sink(cfg.output_file, cfg.num_output_shards)))


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
    d = cpd.JobConfig("", "", "")
    for name in ("do_lower_case", "do_whole_word_mask", "strict"):
        ap.add_argument(f"--{name}", type=_bool, nargs="?", const=True, default=getattr(d, name))
        ap.add_argument(f"--no{name}", dest=name, action="store_false")
    # --strip_accents / --nostrip_accents (default: follows --do_lower_case) and
    # --pre_tokenizer, as bert_tf.text_flags defines them for the absl commands.
    ap.add_argument("--strip_accents", type=_bool, nargs="?", const=True, default=None)
    ap.add_argument("--nostrip_accents", dest="strip_accents", action="store_false")
    from bert_tf.pre_tokenizers import PRE_TOKENIZERS

    ap.add_argument("--pre_tokenizer", choices=PRE_TOKENIZERS, default=None)
    for name in ("max_seq_length", "max_predictions_per_seq", "dupe_factor", "random_seed",
                 "num_output_shards", "pool_size"):
        ap.add_argument(f"--{name}", type=int, default=getattr(d, name))
    for name in ("masked_lm_prob", "short_seq_prob"):
        ap.add_argument(f"--{name}", type=float, default=getattr(d, name))
    args, rest = ap.parse_known_args(list(argv))
    cfg = cpd.JobConfig(num_workers=0, progress=False, **vars(args))
    if not any(a == "--runner" or a.startswith("--runner=") for a in rest):
        rest = ["--runner=DirectRunner"] + rest
    return cfg, rest


def run(argv: Sequence[str], wait: bool = True) -> Optional[dict]:
    """Plans the units, runs the pipeline; returns the summary when the runner reports counts."""
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions

    cfg, beam_args = parse_args(argv)
    cfg.validate()
    paths = expand_globs(cfg.input_file)
    with open_any(cfg.vocab_file) as f:
        vocab = f.read().decode("utf-8").split("\n")
    missing = [t for t in cpd.SPECIAL_TOKENS if t not in {v.strip() for v in vocab}]
    if missing:
        raise corpus.CorpusError(f"--vocab_file: {cfg.vocab_file} lacks the special token(s) "
                                 f"{' '.join(missing)}")
    units, num_docs = cpd.plan_units(paths, cfg.pool_size, cfg.num_output_shards, open_any)
    logging.info("%d documents in %d work units", num_docs, len(units))

    pipeline = beam.Pipeline(options=PipelineOptions(beam_args))
    build_pipeline(pipeline, cfg, units)
    result = pipeline.run()
    if not wait:
        return None
    result.wait_until_finish()
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
    if not _is_remote(cfg.output_file):
        with open(cfg.output_file + ".summary.json", "w") as f:
            json.dump(summary, f, indent=1, sort_keys=True)
    return summary


def main():
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        summary = run(sys.argv[1:])
    except ValueError as e:  # CorpusError and bad values: one line from cli.run_plain
        raise corpus.CorpusError(str(e)) from None
    if summary:
        print(f"{summary['instances']} instances; summary: "
              f"{summary['config']['output_file']}.summary.json", file=sys.stderr)


if __name__ == "__main__":
    from bert_tf import cli

    cli.run_plain(main)
