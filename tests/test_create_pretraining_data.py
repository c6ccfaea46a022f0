"""The create_pretraining_data job: tokenizer, record bytes, determinism, resume, bad input."""

import gzip
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.text import text_rules
from data_prep import corpus
from data_prep import pretraining_job, pretraining_passes
from data_prep import pretraining_instances as pi
from data_prep import tfrecord_writer as tw
from data_prep.corpus import CorpusError
from tests.helpers import run_command
from tests.helpers.pretraining_oracle import first_docs, oracle_create_training_instances

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def vocab_file(shared_data):
    return str(shared_data / "vocab" / "bert-base-uncased-vocab.txt")


@pytest.fixture(scope="module")
def enwiki_lines(shared_data):
    """The first 150 documents of the enwiki corpus, as lines (blank = boundary)."""
    out, docs = [], 0
    with open(shared_data / "pretrain" / "enwiki_2015_bert_format.txt", encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            out.append(line)
            if not line.strip():
                docs += 1
                if docs == 150:
                    break
    return out


def write_corpus(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def job(tmp_path, input_file, vocab_file, name="out/p.tfrecord", **kw):
    kw.setdefault("num_workers", 0)
    kw.setdefault("progress", False)
    kw.setdefault("dupe_factor", 2)
    return pretraining_passes.JobConfig(input_file=input_file, output_file=str(tmp_path / name),
                         vocab_file=vocab_file, **kw)


def read_records(paths):
    return [r.numpy() for r in tf.data.TFRecordDataset(list(paths))]


def parse(record, max_seq_length=128, max_pred=20):
    ex = tf.io.parse_single_example(record, tw.feature_spec(max_seq_length, max_pred))
    return {k: v.numpy() for k, v in ex.items()}


# ------------------------------------------------------------------------------------ tokenizer


def test_python_wordpiece_equals_bert_tokenizer_on_real_text(shared_data, vocab_file):
    from bert_tf.text.tokenization import BertTokenizer

    lines = []
    for name in ("enwiki_2015_bert_format.txt", "wikitext2_bert_format.txt"):
        with open(shared_data / "pretrain" / name, encoding="utf-8") as f:
            text = [line.strip() for line in f if line.strip()]
        lines += [t for t in text if not t.isascii()][:300] + text[:100]
    lines += ["a\x0bb c\x00d\ufffde", "İstanbul ΣΑΣ Straße ﬁ", "中文字符测试 日本語 한국어",
              "\u2028x\u2029y\u3000z\xa0w", "e\u0301 n\u0303", "x" * 250, "tab\there", "\u200bzw"]
    for lower in (True, False):
        ref = BertTokenizer(vocab_file, do_lower_case=lower).tokenize(lines).to_list()
        ours = text_rules.WordPieceTokenizer.from_vocab_file(vocab_file, lower)
        assert [ours.tokenize_line(t) for t in lines] == ref


def test_python_wordpiece_follows_the_original_rules_by_hand():
    tok = text_rules.WordPieceTokenizer(
        ["[PAD]", "[UNK]", "un", "##aff", "##able", ",", "x", "中", "cafe"], do_lower_case=True)
    assert tok.tokenize_line("UnAffable,x") == [2, 3, 4, 5, 6]
    assert tok.tokenize_line("x中x") == [6, 7, 6]          # CJK split off
    assert tok.tokenize_line("Café\x00 \ufffd") == [8]     # accents stripped, NUL/FFFD dropped
    assert tok.tokenize_line("unx") == [1]                 # no piece for "x" after "un": [UNK]
    # The original's _is_control is Cc/Cf only: a private-use character stays in the word.
    assert tok.tokenize_line("\ue000x") == [1]


# -------------------------------------------------------------------------------- record bytes


def test_record_bytes_equal_tf_example_and_tf_writer(tmp_path):
    rng = random.Random(0)
    enc = tw.ExampleEncoder(128, 20)
    records = []
    for _ in range(100):
        n = rng.randint(5, 128)
        ids = [rng.randint(0, 30521) for _ in range(n)]
        la = rng.randint(1, n - 4)
        seg = [0] * (la + 2) + [1] * (n - la - 2)
        k = rng.randint(1, 20)
        pos = sorted(rng.sample(range(1, n), min(k, n - 1)))
        lab = [rng.randint(0, 30521) for _ in pos]
        rnext = rng.random() < 0.5
        feats = {
            "input_ids": ids + [0] * (128 - n), "input_mask": [1] * n + [0] * (128 - n),
            "segment_ids": seg + [0] * (128 - n),
            "masked_lm_positions": pos + [0] * (20 - len(pos)),
            "masked_lm_ids": lab + [0] * (20 - len(lab)),
            "next_sentence_labels": [int(rnext)]}
        ex = tf.train.Example(features=tf.train.Features(feature={
            **{k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
               for k, v in feats.items()},
            "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(
                value=[1.0] * len(pos) + [0.0] * (20 - len(pos))))}))
        ours = enc.encode(ids, seg, rnext, pos, lab)
        assert ours == ex.SerializeToString(deterministic=True)
        records.append(ours)
    ref = tmp_path / "ref.tfrecord"
    with tf.io.TFRecordWriter(str(ref)) as w:
        for r in records:
            w.write(r)
    assert tw.frame_records(records) == ref.read_bytes()
    back = parse(read_records([ref])[0])
    assert back["input_ids"].shape == (128,) and back["masked_lm_weights"].dtype == np.float32


# ----------------------------------------------------------------------------- job vs. oracle


@pytest.mark.parametrize("wwm,docs,shards,bucket_bytes", [(False, 6, 1, 64 << 20),
                                                         (True, 3, 1, 64 << 20),
                                                         (False, 6, 3, 50_000)])
def test_one_unit_reproduces_the_original_tool(tmp_path, shared_data, vocab_file,
                                               enwiki_lines, wwm, docs, shards, bucket_bytes):
    """A corpus that is one work unit: the original's records, in its order, dealt out to
    the shards round-robin as it does (also when the shuffle pass cuts it into buckets)."""
    lines = first_docs(enwiki_lines, docs)
    src = write_corpus(tmp_path / "c.txt", lines)
    summary = pretraining_job.run(job(tmp_path, src, vocab_file, pool_size=10_000, random_seed=42,
                          do_whole_word_mask=wwm, num_output_shards=shards,
                          shuffle_bucket_bytes=bucket_bytes))
    assert summary["work_units"] == 1
    assert (summary["shuffle_buckets"] > 1) == (bucket_bytes < 1 << 20)

    tok = text_rules.WordPieceTokenizer.from_vocab_file(vocab_file)
    vocab = [line.strip() for line in open(vocab_file, encoding="utf-8")]
    docs = [[]]
    for line in lines:  # the original reader, on token strings
        line = line.strip()
        if not line:
            docs.append([])
        ids = tok.tokenize_line(line)
        if ids:
            docs[-1].append([vocab[i] for i in ids])
    expected = oracle_create_training_instances(docs, vocab, random.Random(42), 128, 2, 0.1,
                                                0.15, 20, wwm)
    per_shard = [read_records([f]) for f in summary["output_files"]]
    assert [len(r) for r in per_shard] == summary["shard_instances"]
    records = [None] * summary["instances"]
    for s, recs in enumerate(per_shard):  # the original writes instance k to file k % N
        records[s::shards] = [parse(r) for r in recs]
    assert len(records) == len(expected) == summary["instances"] > 50
    for rec, (tokens, seg, rnext, positions, labels) in zip(records, expected):
        n = len(tokens)
        assert [vocab[i] for i in rec["input_ids"][:n]] == tokens
        assert not rec["input_ids"][n:].any() and rec["input_mask"].sum() == n
        assert list(rec["segment_ids"][:n]) == seg
        assert rec["next_sentence_labels"][0] == int(rnext)
        k = len(positions)
        assert list(rec["masked_lm_positions"][:k]) == positions
        assert [vocab[i] for i in rec["masked_lm_ids"][:k]] == labels
        assert list(rec["masked_lm_weights"]) == [1.0] * k + [0.0] * (20 - k)


def test_tensorflow_tokenizer_option_gives_the_same_records(tmp_path, shared_data, vocab_file):
    src = str(shared_data / "pretrain" / "bert_sample_text.txt")
    a = pretraining_job.run(job(tmp_path, src, vocab_file, "py/p", tokenizer="python"))
    b = pretraining_job.run(job(tmp_path, src, vocab_file, "tf/p", tokenizer="tensorflow"))
    assert open(a["output_files"][0], "rb").read() == open(b["output_files"][0], "rb").read()
    assert a["instances"] > 0


def test_work_units_do_not_change_the_statistics(tmp_path, vocab_file, enwiki_lines):
    """60 documents as one unit (the original's draws) vs 6 units: random-next documents
    come from the whole corpus either way, so counts and fractions agree within sampling
    noise. (The instance count per document depends only on the draws: a few percent of
    noise from the per-document target lengths.)"""
    src = write_corpus(tmp_path / "c.txt", first_docs(enwiki_lines, 60))
    whole = pretraining_job.run(job(tmp_path, src, vocab_file, "a/p", pool_size=10_000,
                                    dupe_factor=1,
                        unit_bytes=1 << 30))
    units = pretraining_job.run(job(tmp_path, src, vocab_file, "b/p", pool_size=10, dupe_factor=1))
    assert (whole["work_units"], units["work_units"]) == (1, 6)
    assert abs(units["instances"] / whole["instances"] - 1) < 0.05
    for key, tol in (("masked_fraction", 0.002), ("random_next_fraction", 0.02),
                     ("masked_as_mask_fraction", 0.01), ("masked_kept_fraction", 0.01)):
        assert abs(units[key] - whole[key]) < tol, key
    assert abs(whole["masked_fraction"] - 0.15) < 0.005
    assert abs(whole["masked_as_mask_fraction"] - 0.8) < 0.01
    assert abs(whole["masked_random_fraction"] - 0.1) < 0.01
    assert 0.5 < whole["random_next_fraction"] < 0.6


def test_output_independent_of_num_workers(tmp_path, vocab_file, enwiki_lines):
    src = write_corpus(tmp_path / "c.txt", first_docs(enwiki_lines, 30))
    kw = dict(pool_size=4, num_output_shards=3, shuffle_bucket_bytes=100_000)
    a = pretraining_job.run(job(tmp_path, src, vocab_file, "w0/p", num_workers=0, **kw))
    b = pretraining_job.run(job(tmp_path, src, vocab_file, "w2/p", num_workers=2, **kw))
    assert a["work_units"] > 3 and a["shuffle_buckets"] > 2
    assert [os.path.basename(p) for p in a["output_files"]] == \
        ["p-00000-of-00003", "p-00001-of-00003", "p-00002-of-00003"]
    for pa, pb in zip(a["output_files"], b["output_files"]):
        assert open(pa, "rb").read() == open(pb, "rb").read()
    assert a["instances"] == b["instances"] == len(read_records(b["output_files"]))
    # Nothing but the shards in the output directory; the summary beside it; no work files.
    assert sorted(os.listdir(tmp_path / "w2")) == sorted(
        os.path.basename(p) for p in b["output_files"])
    visible = sorted(n for n in os.listdir(tmp_path) if not n.startswith("."))
    assert visible == ["c.txt", "w0", "w0.p.summary.json", "w2", "w2.p.summary.json"]


def test_resume_after_a_failure_in_each_pass(tmp_path, vocab_file, enwiki_lines, monkeypatch):
    lines = first_docs(enwiki_lines, 12)
    bad_at = len(lines) - 2  # a bad line in the last document: only the last unit fails
    raw = ("\n".join(lines) + "\n").encode().split(b"\n")
    raw[bad_at] = b"caf\xe9 latin-1 line"
    src = tmp_path / "c.txt"
    src.write_bytes(b"\n".join(raw))
    cfg = job(tmp_path, str(src), vocab_file, pool_size=4, num_output_shards=3,
              shuffle_bucket_bytes=100_000)
    work = pretraining_job.work_dir_path(cfg)
    with pytest.raises(CorpusError, match=rf"c\.txt:{bad_at + 1}: not valid UTF-8"):
        pretraining_job.run(dataclasses_replace(cfg, strict=True))
    shards = pretraining_job.output_paths(cfg.output_file, 3)
    assert not any(os.path.exists(s) for s in shards)
    assert not os.path.exists(pretraining_job.summary_path(cfg))
    parts = sorted(n for n in os.listdir(work) if n.endswith(".docs"))
    assert parts == ["part-000000.docs", "part-000001.docs"]  # kept for the rerun

    # The rerun (not strict) tokenizes only the last unit; then a failure while writing
    # the second shard leaves the first complete and no partial file.
    tokenized = []
    real_tokenize, real_assemble = pretraining_job._tokenize_task, pretraining_job.assemble_shard
    monkeypatch.setattr(pretraining_job, "_tokenize_task",
                        lambda t: tokenized.append(t[0].index) or real_tokenize(t))

    def failing_assemble(shard, buckets, path):
        if shard == 1:
            raise OSError("disk full")
        real_assemble(shard, buckets, path)

    monkeypatch.setattr(pretraining_job, "assemble_shard", failing_assemble)
    with pytest.raises(OSError, match="disk full"):
        pretraining_job.run(cfg)
    assert tokenized == [2]
    assert [os.path.exists(s) for s in shards] == [True, False, False]
    assert os.listdir(tmp_path / "out") == ["p.tfrecord-00000-of-00003"]
    first = os.stat(shards[0])

    monkeypatch.setattr(pretraining_job, "assemble_shard", real_assemble)
    summary = pretraining_job.run(cfg)
    assert os.stat(shards[0]).st_mtime_ns == first.st_mtime_ns
    assert summary["invalid_lines"] == 1
    assert summary["invalid_examples"] == [f"{src}:{bad_at + 1}: not valid UTF-8 "
                                           f"(byte 3: invalid continuation byte)"]
    assert not os.path.exists(work)
    fresh = pretraining_job.run(job(tmp_path, str(src), vocab_file, "fresh/p.tfrecord", pool_size=4,
                        num_output_shards=3, shuffle_bucket_bytes=100_000))
    assert [open(p, "rb").read() for p in summary["output_files"]] == \
        [open(p, "rb").read() for p in fresh["output_files"]]
    assert summary["instances"] == fresh["instances"]

    # Complete: a rerun does nothing; a deleted shard is redone alone.
    assert pretraining_job.run(cfg)["instances"] == summary["instances"]
    os.remove(shards[1])
    again = pretraining_job.run(cfg)
    assert open(shards[1], "rb").read() == open(fresh["output_files"][1], "rb").read()
    assert os.stat(shards[0]).st_mtime_ns == first.st_mtime_ns
    assert again["instances"] == summary["instances"]

    # Other settings over the same output: refused, nothing touched.
    with pytest.raises(CorpusError, match="other inputs or settings"):
        pretraining_job.run(dataclasses_replace(cfg, random_seed=1))


def dataclasses_replace(cfg, **kw):
    import dataclasses

    return dataclasses.replace(cfg, **kw)


# ------------------------------------------------------------------------------------ bad input


def assert_no_output(tmp_path):
    out = tmp_path / "out"
    assert not out.exists() or os.listdir(out) == []


@pytest.mark.parametrize("content,message", [
    (gzip.compress(b"a sentence.\n\nanother.\n", mtime=0), "gzip-compressed"),
    (bytes(range(256)) * 8, "NUL byte at offset 0"),
    ("text\n".encode("utf-16"), "NUL byte"),
    (__import__("bz2").compress(b"a sentence.\n\nanother.\n"), "bzip2-compressed"),
    ("Café à la crème.\n\nÉté.\n".encode("latin-1") * 20, "lines are not UTF-8"),
])
def test_non_text_input_stops_naming_the_file(tmp_path, vocab_file, content, message):
    src = tmp_path / "corpus.bin"
    src.write_bytes(content)
    good = write_corpus(tmp_path / "good.txt", ["One sentence.", "Two.", "", "Other doc."])
    with pytest.raises(CorpusError, match=message) as e:
        pretraining_job.run(job(tmp_path, f"{good},{src}", vocab_file))
    assert str(src) in str(e.value)
    assert_no_output(tmp_path)


def test_sniff_and_globs_accept_text_that_only_looks_odd(tmp_path):
    # Text starting like a bzip2 header, and a minority of bad lines (reported later), pass.
    ok = tmp_path / "ok.txt"
    ok.write_bytes(b"BZh9 is not a header.\nbad \xff line\nfine.\n\nnext doc.\n")
    corpus.sniff_text_file(str(ok))
    (tmp_path / "sub").mkdir()
    assert corpus.expand_input_globs(f"{tmp_path}/*") == [str(ok)]  # directories skipped
    with pytest.raises(CorpusError, match=r"sub is a directory; give the files"):
        corpus.expand_input_globs(str(tmp_path / "sub"))
    assert issubclass(CorpusError, ValueError)


def test_corpus_without_documents_stops(tmp_path, vocab_file):
    src = write_corpus(tmp_path / "empty.txt", ["", "   ", "\t", ""])
    with pytest.raises(CorpusError, match="no documents in .*empty.txt"):
        pretraining_job.run(job(tmp_path, src, vocab_file))
    assert_no_output(tmp_path)
    src = write_corpus(tmp_path / "controls.txt", ["\x01\x02", "\x03", "", "\x7f"])
    with pytest.raises(CorpusError, match="no instances from .*controls.txt"):
        pretraining_job.run(job(tmp_path, src, vocab_file))
    assert_no_output(tmp_path)


def test_invalid_utf8_line_is_reported_skipped_or_strict(tmp_path, vocab_file):
    src = tmp_path / "c.txt"
    src.write_bytes(b"Good first sentence.\nbad \xff\xfe line\nGood third.\n\nDoc two.\nMore.\n")
    summary = pretraining_job.run(job(tmp_path, str(src), vocab_file))
    assert summary["invalid_lines"] == 1
    assert summary["invalid_examples"][0].startswith(f"{src}:2: not valid UTF-8")
    assert summary["instances"] > 0
    with pytest.raises(CorpusError, match=rf"c\.txt:2: not valid UTF-8.*--strict"):
        pretraining_job.run(job(tmp_path, str(src), vocab_file, "strict/p", strict=True))
    assert not (tmp_path / "strict").exists() or os.listdir(tmp_path / "strict") == []


def test_vocab_without_special_tokens_is_refused(tmp_path, vocab_file):
    vocab = tmp_path / "vocab.txt"
    tokens = [t for t in open(vocab_file, encoding="utf-8").read().split("\n")
              if t not in ("[MASK]", "[SEP]")]
    vocab.write_text("\n".join(tokens), encoding="utf-8")
    src = write_corpus(tmp_path / "c.txt", ["A b.", "C d.", "", "E."])
    with pytest.raises(CorpusError, match=r"lacks the special token\(s\) \[SEP\], \[MASK\]"):
        pretraining_job.run(job(tmp_path, src, str(vocab)))
    assert_no_output(tmp_path)


def test_unmatched_glob_is_named(tmp_path, vocab_file):
    src = write_corpus(tmp_path / "c.txt", ["A b.", "", "C."])
    with pytest.raises(CorpusError, match=r"no file matches '.*nothing-\*\.txt'"):
        pretraining_job.run(job(tmp_path, f"{src},{tmp_path}/nothing-*.txt", vocab_file))
    assert_no_output(tmp_path)


def test_fewer_documents_than_shards_is_refused(tmp_path, vocab_file):
    src = write_corpus(tmp_path / "c.txt", ["A b.", "", "C."])
    with pytest.raises(CorpusError, match="2 documents, fewer than the 3 output shards"):
        pretraining_job.run(job(tmp_path, src, vocab_file, num_output_shards=3))
    assert_no_output(tmp_path)


def test_units_are_cut_by_documents_and_by_bytes(tmp_path):
    lines = []
    for d in range(6):
        lines += [f"doc {d} line {k} " + "x" * 50 for k in range(d + 1)] + [""]
    src = write_corpus(tmp_path / "c.txt", lines)
    units, n = corpus.plan_work_units([src], 4)
    assert n == 6 and [u.num_docs for u in units] == [4, 2]
    units, _ = corpus.plan_work_units([src], 4, max_unit_bytes=150)
    # 64-byte lines: documents 0-1 reach 150 bytes, each later one does alone; documents
    # 3-5 have 150 bytes before their last lines, so they are cut inside (the next unit
    # continues them) and a unit never holds more than 2 x 150 bytes and a line.
    assert [(u.num_docs, u.continues, u.open_end) for u in units] == [
        (2, False, False), (1, False, False), (1, False, True), (1, True, True),
        (1, True, True), (0, True, False)]
    read = [t for u in units for _, t in corpus.read_unit_lines(u)]
    assert read == [t.strip() for t in lines]


def test_units_run_on_across_files(tmp_path):
    # One document per file (e.g. one book a file): the pool must still hold many documents,
    # or every "random next" segment would come from the same document.
    files = [write_corpus(tmp_path / f"book{i}.txt", [f"book {i} line {k}." for k in range(3)])
             for i in range(5)]
    units, n = corpus.plan_work_units(files, 4)
    # 4 + 1: the one-document tail joins the unit before it
    assert n == 5 and [u.num_docs for u in units] == [5]
    assert [sp.path for sp in units[0].spans] == files
    lines = [t for _, t in corpus.read_unit_lines(units[0])]
    assert corpus.split_documents([t.split() if t else None for t in lines]) == [
        [[f"book", f"{i}", "line", f"{k}."] for k in range(3)] for i in range(5)]
    units, _ = corpus.plan_work_units(files, 2)
    assert [u.num_docs for u in units] == [2, 3]
    assert [sp.first_line for sp in units[1].spans] == [1, 1, 1]


def test_output_paths_and_summary_beside_the_output_directory():
    assert pretraining_job.output_paths("a,b", 2) == ["a", "b"]
    with pytest.raises(ValueError, match="names 2 files"):
        pretraining_job.output_paths("a,b", 3)
    assert pretraining_job.default_summary_path("/d/records/x.tfrecord") == \
        "/d/records.x.tfrecord.summary.json"
    assert pretraining_job.default_work_dir("/d/records/x.tfrecord") == "/d/records.x.tfrecord.work"
    # In the root or the working directory nothing goes above it: hidden beside the records,
    # where neither `x.tfrecord*` nor the records' own names match it.
    assert pretraining_job.default_summary_path("/x.tfrecord") == "/.x.tfrecord.summary.json"


def test_records_in_the_working_directory_keep_their_summary_there(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert pretraining_job.default_summary_path("x.tfrecord") == \
        str(tmp_path / ".x.tfrecord.summary.json")
    assert pretraining_job.default_work_dir("x.tfrecord") == str(tmp_path / ".x.tfrecord.work")
    assert pretraining_job.default_summary_path("sub/x.tfrecord") == \
        str(tmp_path / "sub.x.tfrecord.summary.json")


def test_document_store_reads_any_document_of_any_part(tmp_path):
    from array import array

    from data_prep import document_store as ds

    rng = random.Random(0)
    docs = [[array("i", [rng.randint(0, 30000) for _ in range(rng.randint(0, 40))])
             for _ in range(rng.randint(1, 50))] for _ in range(40)]
    cuts = [0, 7, 8, 25, 40]
    paths = []
    for k in range(4):
        paths.append(str(tmp_path / f"p{k}"))
        assert ds.write_part(paths[-1], docs[cuts[k]:cuts[k + 1]])[0] == cuts[k + 1] - cuts[k]
    assert [d for p in paths for d in ds.read_part(p)] == docs
    store = ds.DocumentStore(paths, [b - a for a, b in zip(cuts, cuts[1:])], max_open=1)
    assert len(store) == 40
    for d in rng.sample(range(40), 40):  # any order, one open file at a time
        doc = store[d]
        assert len(doc) == len(docs[d])
        j = rng.randrange(len(doc))  # a random start, then on to the end, as random-next reads
        assert [doc[k] for k in range(j, len(doc))] == docs[d][j:]
    with pytest.raises(IndexError):
        store[40]
    store.close()


# ----------------------------------------------------------------------------------- the CLI


def run_cli(*args):
    return run_command("data_prep.create_pretraining_data", *args, timeout=300)


def test_cli_writes_records_and_summary(tmp_path, shared_data, vocab_file):
    out = tmp_path / "o" / "sample.tfrecord"
    r = run_cli(f"--input_file={shared_data}/pretrain/bert_sample_text.txt",
                f"--output_file={out}", f"--vocab_file={vocab_file}", "--dupe_factor=1",
                "--num_workers=1", "--max_seq_length=64", "--max_predictions_per_seq=10")
    assert r.returncode == 0, r.stderr
    import json

    summary = json.loads((tmp_path / "o.sample.tfrecord.summary.json").read_text())
    assert os.listdir(tmp_path / "o") == ["sample.tfrecord"]
    recs = read_records([out])
    assert len(recs) == summary["instances"] > 0
    assert parse(recs[0], 64, 10)["input_ids"][0] == 101


def test_cli_error_names_the_glob(tmp_path, vocab_file):
    r = run_cli(f"--input_file={tmp_path}/missing-*.txt", f"--output_file={tmp_path}/o",
                f"--vocab_file={vocab_file}")
    assert r.returncode == 1
    assert "no file matches" in r.stderr and "missing-*.txt" in r.stderr
    assert os.listdir(tmp_path) == []


def test_cli_refuses_a_missing_required_flag_in_one_line(tmp_path):
    r = run_cli(f"--input_file={tmp_path}/c.txt", f"--output_file={tmp_path}/o")
    assert r.returncode == 1
    assert ("create_pretraining_data: error: --vocab_file is required (on the command "
            "line)\n") in r.stderr and "Traceback" not in r.stderr
    assert os.listdir(tmp_path) == []


def test_the_flags_are_the_job_config_with_every_core_by_default(tmp_path):
    from bert_tf.app.setting_fields import parse_args
    from data_prep import create_pretraining_data

    fv = parse_args(create_pretraining_data.define_flags,
                    ["--input_file=c.txt", "--output_file=o", "--vocab_file=v.txt",
                     "--dupe_factor=3"])
    cfg = pretraining_passes.JobConfig.from_flags(fv)
    assert (cfg.dupe_factor, cfg.num_workers) == (3, max(1, os.cpu_count() or 1))
    assert pretraining_passes.JobConfig("c", "o", "v").num_workers == 1  # the library's


def test_remote_paths_point_to_the_beam_pipeline(tmp_path, vocab_file):
    src = write_corpus(tmp_path / "c.txt", ["A b.", "", "C d."])
    with pytest.raises(CorpusError, match="--output_file=gs://bucket/x.*data_prep.beam_pipeline"):
        pretraining_job.run(dataclasses_replace(job(tmp_path, src, vocab_file),
                                    output_file="gs://bucket/x.tfrecord"))
    assert not os.path.exists("gs:")  # nothing written under the working directory


# ------------------------------------------------------------------------- mixing and globs


def _marker_corpus(tmp_path, vocab_file, num_docs):
    """`num_docs` small documents; every line starts with its document's own marker word."""
    tok = text_rules.WordPieceTokenizer.from_vocab_file(vocab_file)
    words = [w.strip() for w in open(vocab_file, encoding="utf-8")]
    common = ["the", "city", "was", "built", "near", "a", "river", "in", "year", "one"]
    markers = [w for w in words[2000:] if w.isalpha() and w.isascii() and len(w) >= 4
               and w not in common and tok.tokenize_line(w) == [tok.vocab[w]]][:num_docs]
    assert len(markers) == num_docs
    rng = random.Random(0)
    lines = []
    for m in markers:
        for _ in range(rng.randint(2, 4)):
            lines.append(" ".join([m] + rng.sample(common, 5)) + ".")
        lines.append("")
    doc_of = {tok.vocab[m]: d for d, m in enumerate(markers)}
    return write_corpus(tmp_path / "c.txt", lines), doc_of


def test_records_are_mixed_over_the_whole_corpus(tmp_path, vocab_file):
    """3,000 small documents in 3 work units and 3 shards: within a shard, record order
    says nothing about where the text sits in the corpus, and random-next segments come
    from all over the corpus (not from the unit, i.e. the third of the corpus, around
    the document)."""
    num_docs = 3000
    src, doc_of = _marker_corpus(tmp_path, vocab_file, num_docs)
    summary = pretraining_job.run(job(tmp_path, src, vocab_file, dupe_factor=1, max_seq_length=32,
                          max_predictions_per_seq=5, num_output_shards=3, pool_size=1000,
                          shuffle_bucket_bytes=100_000))
    assert summary["work_units"] == 3 and summary["shuffle_buckets"] > 3
    random_pairs = []
    for path in summary["output_files"]:
        doc_a = []
        for rec in read_records([path]):
            r = parse(rec, 32, 5)
            ids = r["input_ids"].copy()
            k = int(r["masked_lm_weights"].sum())
            ids[r["masked_lm_positions"][:k]] = r["masked_lm_ids"][:k]
            n = int(r["input_mask"].sum())
            seg = r["segment_ids"][:n]
            a = [doc_of[t] for t in ids[:n][seg == 0] if t in doc_of]
            b = [doc_of[t] for t in ids[:n][seg == 1] if t in doc_of]
            if a:
                doc_a.append(a[0])
            if a and b:
                if r["next_sentence_labels"][0]:
                    random_pairs.append((a[0], b[0]))
                else:
                    assert a[0] == b[0]  # the actual next text is the same document's
        assert len(doc_a) > 800
        # Rank correlation of position in the shard with position in the corpus: ~0.
        pos_rank = np.argsort(np.argsort(np.arange(len(doc_a))))
        doc_rank = np.argsort(np.argsort(np.asarray(doc_a), kind="stable"))
        rho = np.corrcoef(pos_rank, doc_rank)[0, 1]
        assert abs(rho) < 0.1, rho
        # Each tenth of the shard holds text from every tenth of the corpus.
        for chunk in np.array_split(np.asarray(doc_a), 10):
            assert len(set((chunk * 10 // num_docs).tolist())) == 10
    a, b = np.asarray(random_pairs).T
    assert len(a) > 1000 and not (a == b).any()
    deciles = np.bincount(b * 10 // num_docs, minlength=10) / len(b)
    assert deciles.min() > 0.07 and deciles.max() < 0.13, deciles
    # Outside the 1,000-document unit of A about 2/3 of the time, as uniform draws are.
    assert abs(np.mean(a // 1000 != b // 1000) - 2 / 3) < 0.05


def _original_reader_count(pattern, max_seq_length, max_pred):
    """run_pretraining.py's input_fn: tf.gfile.Glob, TFRecordDataset, parse every record."""
    files = tf.io.gfile.glob(pattern)
    spec = {"input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
            "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
            "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
            "masked_lm_positions": tf.io.FixedLenFeature([max_pred], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([max_pred], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([max_pred], tf.float32),
            "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64)}
    ds = tf.data.TFRecordDataset(files).map(lambda r: tf.io.parse_single_example(r, spec))
    return len(files), sum(1 for _ in ds)


@pytest.mark.parametrize("shards", [1, 2])
def test_globs_users_write_match_only_records(tmp_path, shared_data, vocab_file, monkeypatch,
                                              shards):
    from bert_tf.data import pretraining, records

    monkeypatch.chdir(tmp_path)
    r = run_cli(f"--input_file={shared_data}/pretrain/bert_sample_text.txt",
                f"--output_file={tmp_path}/records/data.tfrecord", f"--vocab_file={vocab_file}",
                "--dupe_factor=2", "--num_workers=1", "--max_seq_length=64",
                "--max_predictions_per_seq=10", f"--num_output_shards={shards}")
    assert r.returncode == 0, r.stderr
    assert "records.data.tfrecord.summary.json" in r.stderr
    import json

    n = json.loads((tmp_path / "records.data.tfrecord.summary.json").read_text())["instances"]
    for pattern in ("records/*", "records/data.tfrecord*"):
        assert _original_reader_count(pattern, 64, 10) == (shards, n)
        ds = pretraining.pretraining_dataset(pattern, 64, 10, batch_size=1, is_training=False)
        assert sum(1 for _ in ds) == n
    # A file that is not a TFRecord file among the matches is named, with what to do.
    (tmp_path / "records" / "notes.json").write_text('{"a": 1}\n')
    with pytest.raises(records.RecordFormatError,
                       match=r"notes\.json: not a TFRecord file .*narrow the glob"):
        pretraining.pretraining_dataset("records/*", 64, 10, batch_size=1, is_training=False)
    os.mkdir(tmp_path / "records" / "sub")
    with pytest.raises(records.RecordFormatError, match=r"sub: .*matched a directory"):
        records.list_record_files("records/*")


def test_one_unit_equals_the_original_tool_run_beside_it(tmp_path, shared_data, vocab_file,
                                                         enwiki_lines):
    """The original create_pretraining_data.py itself (../shared/peers/google_bert), two
    output files: the same instances, in the same order, in the same files."""
    original = shared_data.parent / "peers" / "google_bert" / "create_pretraining_data.py"
    assert original.exists(), original
    src = write_corpus(tmp_path / "c.txt", first_docs(enwiki_lines, 5))
    outs = [str(tmp_path / "orig" / f"o{k}.tfrecord") for k in range(2)]
    os.makedirs(tmp_path / "orig")
    flags = [f"--input_file={src}", f"--vocab_file={vocab_file}", "--max_seq_length=64",
             "--max_predictions_per_seq=10", "--dupe_factor=2", "--random_seed=7"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    r = subprocess.run([sys.executable, str(original), *flags, "--do_lower_case=True",
                        f"--output_file={','.join(outs)}"], cwd=original.parent, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    ours = pretraining_job.run(job(tmp_path, src, vocab_file, "ours/p", num_output_shards=2,
                       max_seq_length=64, max_predictions_per_seq=10, random_seed=7))
    assert ours["work_units"] == 1
    for theirs_path, ours_path in zip(outs, ours["output_files"]):
        theirs = [parse(x, 64, 10) for x in read_records([theirs_path])]
        mine = [parse(x, 64, 10) for x in read_records([ours_path])]
        assert len(theirs) == len(mine) > 10
        for a, b in zip(theirs, mine):
            assert sorted(a) == sorted(b)
            for k in a:
                np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# ------------------------------------------------------- any corpus shape in bounded memory


def test_a_document_longer_than_a_unit_is_cut_inside_it(tmp_path):
    # No blank line: one document. Units are still cut, every 150+ bytes of it, and read
    # back they are the file's lines, in order.
    lines = [f"line {k} " + "x" * 50 for k in range(20)]
    src = write_corpus(tmp_path / "c.txt", ["short doc a.", "", "short doc b.", ""] + lines)
    units, n = corpus.plan_work_units([src], 1 << 40, max_unit_bytes=150)
    assert n == 3
    assert [(u.num_docs, u.continues, u.open_end) for u in units][:2] == [
        (3, False, True), (0, True, True)]
    assert units[-1].open_end is False and all(u.continues for u in units[1:])
    for u in units:  # bounded: at most 2 x max_unit_bytes plus a line
        assert sum(sp.end - sp.start for sp in u.spans) <= 2 * 150 + 70
    read = [t for u in units for _, t in corpus.read_unit_lines(u)]
    assert read == ["short doc a.", "", "short doc b.", ""] + [t.strip() for t in lines]


def test_the_store_joins_a_long_document_back_in_order(tmp_path, vocab_file, enwiki_lines):
    # Documents longer than a unit, cut over many parts, read back (whole, and from random
    # starts as random-next reads do) equal the documents tokenized whole.
    from data_prep import document_store as ds

    text = [line for line in first_docs(enwiki_lines, 8)]
    text = text[:40] + [line for line in text[40:] if line.strip()]  # docs 2.. run together
    src = write_corpus(tmp_path / "c.txt", text)
    cfg = job(tmp_path, src, vocab_file)
    proc = pretraining_passes.UnitProcessor(cfg)
    whole_unit = corpus.WorkUnit(0, (corpus.FileSpan(src, 0, os.path.getsize(src), 1),), 0)
    expected = [[list(seg) for seg in doc] for doc in proc.documents(whole_unit, [])]
    units, n = corpus.plan_work_units([src], 1 << 40, max_unit_bytes=2000)
    assert len(units) > 10 and n == len(expected)
    parts, stats = [], []
    for u in units:
        parts.append(str(tmp_path / f"part{u.index}"))
        stats.append(proc.tokenize_unit(u, parts[-1]))
    layout = [ds.PartLayout.from_stats(st) for st in stats]
    counts = ds.document_counts(layout)
    store = ds.DocumentStore(parts, counts, layout=layout, max_open=2)
    assert len(store) == len(expected)
    got = [[list(seg) for seg in store.part_documents(u)[k]]
           for u in range(len(units)) for k in range(counts[u])]
    assert got == expected
    rng = random.Random(1)
    for d in rng.choices(range(len(expected)), k=30):
        doc = store[d]
        j = rng.randrange(len(doc))
        assert [list(doc[k]) for k in range(j, min(len(doc), j + 40))] == expected[d][j:j + 40]


def test_a_corpus_without_blank_lines_runs_in_chunks_and_warns(tmp_path, vocab_file,
                                                              enwiki_lines, monkeypatch,
                                                              caplog):
    src = write_corpus(tmp_path / "c.txt", [t for t in first_docs(enwiki_lines, 4) if t.strip()])
    kw = dict(unit_bytes=4000, dupe_factor=2, max_seq_length=64)
    with caplog.at_level("WARNING"):
        a = pretraining_job.run(job(tmp_path, src, vocab_file, "a/p", **kw))
    assert "holds 1 document" in caplog.text and "blank lines" in caplog.text
    assert a["documents"] == 1 and a["work_units"] > 10 and a["instances"] > 100
    assert "blank lines" in a["warnings"][0]
    # The unit holding the document's start makes all its instances; past CHUNK_RECORDS
    # records or CHUNK_BYTES they go to several files: the records do not change.
    for name, value in (("CHUNK_RECORDS", 37), ("CHUNK_BYTES", 9000)):  # ~40 records
        with monkeypatch.context() as m:
            m.setattr(pretraining_passes.UnitProcessor, name, value)
            b = pretraining_job.run(job(tmp_path, src, vocab_file, f"{name}/p", **kw))
        for pa, pb in zip(a["output_files"], b["output_files"]):
            assert open(pa, "rb").read() == open(pb, "rb").read()
    assert a["instances"] == len(read_records(a["output_files"]))


@pytest.mark.parametrize("newline", ["\r", "\r\n"])
def test_cr_and_crlf_line_endings_read_as_lf(tmp_path, vocab_file, enwiki_lines, newline):
    lines = first_docs(enwiki_lines, 12)
    lf = write_corpus(tmp_path / "lf.txt", lines)
    other = tmp_path / "other.txt"
    other.write_bytes(("\n".join(lines) + "\n").replace("\n", newline).encode("utf-8"))
    kw = dict(unit_bytes=20_000, num_output_shards=2)
    a = pretraining_job.run(job(tmp_path, lf, vocab_file, "a/p", **kw))
    b = pretraining_job.run(job(tmp_path, str(other), vocab_file, "b/p", **kw))
    assert a["documents"] == b["documents"] == 12 and a["work_units"] > 1
    for pa, pb in zip(a["output_files"], b["output_files"]):
        assert open(pa, "rb").read() == open(pb, "rb").read()


def test_an_edited_vocab_of_the_same_size_is_not_already_complete(tmp_path, vocab_file):
    # The fingerprint covered the vocab by path and size: a token renamed in place left
    # both unchanged and the rerun said "already complete" over records of the old ids.
    lines = [f"sentence number {k} of document {d}." for d in range(12) for k in range(3)]
    src = write_corpus(tmp_path / "c.txt", lines)
    vocab = tmp_path / "vocab.txt"
    tokens = open(vocab_file, encoding="utf-8").read().split("\n")
    vocab.write_text("\n".join(tokens), encoding="utf-8")
    cfg = job(tmp_path, src, str(vocab), max_seq_length=32)
    pretraining_job.run(cfg)
    i, j = tokens.index("sentence"), tokens.index("document")
    tokens[i], tokens[j] = tokens[j], tokens[i]  # same size, other ids
    vocab.write_text("\n".join(tokens), encoding="utf-8")
    with pytest.raises(CorpusError, match="other inputs or settings"):
        pretraining_job.run(cfg)
    # Copied to another path, the same content: still the same job.
    moved = tmp_path / "elsewhere.txt"
    moved.write_text("\n".join(tokens), encoding="utf-8")
    assert pretraining_job.fingerprint(cfg, [src]) == pretraining_job.fingerprint(
        dataclasses_replace(cfg, vocab_file=str(moved)), [src])


def test_one_document_cut_over_many_units_gives_the_original_instances(
        tmp_path, vocab_file, enwiki_lines):
    """A corpus without blank lines is one document; cut over many units and streamed
    through the store, it goes through the original algorithm whole and in order: with one
    document the unit's generator draws what the original's does, so the records are the
    original tool's instances (in another order: the global shuffle)."""
    lines = [t for t in first_docs(enwiki_lines, 3) if t.strip()]
    src = write_corpus(tmp_path / "c.txt", lines)
    summary = pretraining_job.run(job(tmp_path, src, vocab_file, random_seed=7, unit_bytes=3000))
    assert summary["work_units"] > 10 and summary["documents"] == 1

    tok = text_rules.WordPieceTokenizer.from_vocab_file(vocab_file)
    vocab = [line.strip() for line in open(vocab_file, encoding="utf-8")]
    doc = [[vocab[i] for i in tok.tokenize_line(line)] for line in lines]
    expected = oracle_create_training_instances([[s for s in doc if s]], vocab,
                                                random.Random(7), 128, 2, 0.1, 0.15, 20, False)

    def key(tokens, seg, rnext, positions, labels):
        return (tuple(tokens), tuple(seg), int(rnext), tuple(positions), tuple(labels))

    got = []
    for rec in map(parse, read_records(summary["output_files"])):
        n, k = int(rec["input_mask"].sum()), int(rec["masked_lm_weights"].sum())
        got.append(key([vocab[i] for i in rec["input_ids"][:n]], list(rec["segment_ids"][:n]),
                       rec["next_sentence_labels"][0], list(rec["masked_lm_positions"][:k]),
                       [vocab[i] for i in rec["masked_lm_ids"][:k]]))
    assert len(got) == len(expected) > 100
    assert sorted(got) == sorted(key(*e) for e in expected)


@pytest.mark.parametrize("newline", ["\n", "\r"])
def test_a_line_too_long_to_be_a_sentence_is_refused_naming_it(tmp_path, monkeypatch,
                                                              newline):
    # A file without line breaks would be one line held whole: refused before any work.
    monkeypatch.setattr(corpus, "MAX_LINE_BYTES", 1000)
    src = tmp_path / "c.txt"
    src.write_bytes(newline.join(["a sentence.", "another.", "x" * 5000, "end."]).encode())
    with pytest.raises(CorpusError, match=r"c\.txt:3: a line of more than 1,000 bytes; the "
                                          r"input is one sentence per line"):
        corpus.plan_work_units([str(src)], 10)
