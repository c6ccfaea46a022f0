"""`data_prep.create_pretraining_data` beside the original google-research/bert tool, in one run.

Runs both command lines (fresh processes, start-up included) on the same corpora:
1. the 10 MB Wikipedia corpus: ours with 1 and 2 workers, the original once per seed;
2. a large corpus, that text repeated (`--large_mb`, default 300 MB, written to a temporary
   directory): ours with 1 and 2 workers; the original capped by `--original_timeout` seconds
   and `--original_max_rss_gb` of memory (it holds every document and instance in memory),
   reported as killed if it hits either;
3. the data statistics (instances, masked fraction, 80/10/10, random-next fraction) of ours
   and of the original over `--seeds`, computed the same way from each tool's records, and
   whether ours fall within the original's run-to-run range;
4. corpora without blank lines (one document: sentences one per line, no document breaks,
   a common shape), the 10 MB text and `--no_blank_mb` of it repeated: peak RSS of ours (2
   workers; a document longer than a work unit is cut over many units and streamed through
   the document store) and of the original on the 10 MB one. `--only_no_blank` runs just
   this part.

Prints instances/s, peak RSS of the largest single process (parent or worker; sampled from
/proc every 50 ms) and of the whole process tree, CPU seconds, and the ratio to the original.

    python benchmarks/create_pretraining_data.py [--large_mb=300] [--dupe_factor=2] \
        [--seeds=1,2,3] [--original_timeout=900] [--original_max_rss_gb=8] \
        [--no_blank_mb=300] [--only_no_blank]

The original is run from ../shared/peers/google_bert (unchanged: it imports
tensorflow.compat.v1 and runs under TF 2.x as is). The CPU is shared with whatever else runs:
the load average before each run is printed beside wall and CPU seconds.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared")
ORIGINAL_DIR = os.path.join(SHARED, "peers", "google_bert")
MAX_SEQ, MAX_PRED, MASK_ID = 128, 20, 103


def _children(pid):
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    kids.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return kids


def _rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_s(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class RssSampler(threading.Thread):
    """Every 50 ms: each process's RSS in the tree, the largest one and the tree's sum;
    optionally kills the tree above `max_rss_kb`."""

    def __init__(self, pid, max_rss_kb=None):
        super().__init__(daemon=True)
        self.pid, self.max_rss_kb = pid, max_rss_kb
        self.peak_tree_kb = self.peak_proc_kb = 0
        self.cpu = {}
        self.killed = False
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            stack, total = [self.pid], 0
            while stack:
                p = stack.pop()
                rss = _rss_kb(p)
                total += rss
                self.peak_proc_kb = max(self.peak_proc_kb, rss)
                self.cpu[p] = max(self.cpu.get(p, 0.0), _cpu_s(p))
                stack.extend(_children(p))
            self.peak_tree_kb = max(self.peak_tree_kb, total)
            if self.max_rss_kb and total > self.max_rss_kb and not self.killed:
                self.killed = True
                os.killpg(self.pid, signal.SIGKILL)
            self._halt.wait(0.05)

    def stop(self):
        self._halt.set()
        self.join()


def _run(cmd, cwd, env, timeout=None, max_rss_kb=None, log=None):
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    with open(log or os.devnull, "w") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=err, stderr=subprocess.STDOUT,
                                start_new_session=True)
        sampler = RssSampler(proc.pid, max_rss_kb)
        sampler.start()
        try:
            proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            timed_out = True
    seconds = time.perf_counter() - start
    sampler.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dict(seconds=seconds, load=load, returncode=proc.returncode, timed_out=timed_out,
                killed_rss=sampler.killed, cpu=max(cpu, sum(sampler.cpu.values())),
                proc_rss_mb=sampler.peak_proc_kb / 1024, tree_rss_mb=sampler.peak_tree_kb / 1024)


def run_ours(corpus, vocab, workers, dupe, seed, out_dir, tag=""):
    name = f"ours{tag}-w{workers}-s{seed}"
    out = os.path.join(out_dir, name, "pretrain.tfrecord")
    summary = out + ".summary.json"
    cmd = [sys.executable, "-m", "data_prep.create_pretraining_data", f"--input_file={corpus}",
           f"--output_file={out}", f"--vocab_file={vocab}", "--do_lower_case",
           f"--max_seq_length={MAX_SEQ}", f"--max_predictions_per_seq={MAX_PRED}",
           "--masked_lm_prob=0.15", f"--dupe_factor={dupe}", f"--random_seed={seed}",
           f"--num_workers={workers}", "--num_output_shards=1", f"--summary_file={summary}"]
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    log = os.path.join(out_dir, name + ".log")
    r = _run(cmd, REPO, env, log=log)
    if r["returncode"] != 0:
        with open(log) as f:
            raise SystemExit(f"ours ({workers} workers) failed:\n{f.read()[-3000:]}")
    with open(summary) as f:
        s = json.load(f)
    r.update(tool="ours", workers=workers, instances=s["instances"], records=[out],
             summary=s)
    return r


def run_original(corpus, vocab, dupe, seed, out_dir, timeout, max_rss_gb):
    out = os.path.join(out_dir, f"orig-s{seed}.tfrecord")
    cmd = [sys.executable, "create_pretraining_data.py", f"--input_file={corpus}",
           f"--output_file={out}", f"--vocab_file={vocab}", "--do_lower_case=True",
           f"--max_seq_length={MAX_SEQ}", f"--max_predictions_per_seq={MAX_PRED}",
           "--masked_lm_prob=0.15", f"--dupe_factor={dupe}", f"--random_seed={seed}"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    r = _run(cmd, ORIGINAL_DIR, env, timeout=timeout, max_rss_kb=int(max_rss_gb * 2**20),
             log=out + ".log")
    r.update(tool="original", workers=1, records=[out], instances=None)
    if r["returncode"] == 0:
        with open(out + ".log") as f:
            for line in f:
                if "Wrote" in line and "total instances" in line:
                    r["instances"] = int(line.split("Wrote")[1].split()[0])
    return r


def record_statistics(paths):
    """The data statistics of a record file, the same computation for both tools."""
    import tensorflow as tf

    spec = {"input_ids": tf.io.FixedLenFeature([MAX_SEQ], tf.int64),
            "input_mask": tf.io.FixedLenFeature([MAX_SEQ], tf.int64),
            "masked_lm_positions": tf.io.FixedLenFeature([MAX_PRED], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([MAX_PRED], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([MAX_PRED], tf.float32),
            "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64)}
    c = dict(instances=0, tokens=0, masked=0, as_mask=0, kept=0, random_next=0)
    ds = tf.data.TFRecordDataset(paths).batch(4096).map(
        lambda r: tf.io.parse_example(r, spec))
    for b in ds:
        b = {k: v.numpy() for k, v in b.items()}
        valid = b["masked_lm_weights"] > 0
        out_at = np.take_along_axis(b["input_ids"], b["masked_lm_positions"], axis=1)
        as_mask = valid & (out_at == MASK_ID)
        c["instances"] += len(valid)
        c["tokens"] += int(b["input_mask"].sum())
        c["masked"] += int(valid.sum())
        c["as_mask"] += int(as_mask.sum())
        c["kept"] += int((valid & ~as_mask & (out_at == b["masked_lm_ids"])).sum())
        c["random_next"] += int(b["next_sentence_labels"].sum())
    m = max(1, c["masked"])
    return {"instances": c["instances"], "masked_tokens": c["masked"],
            "masked_fraction": c["masked"] / max(1, c["tokens"]),
            "as_mask": c["as_mask"] / m, "random": (m - c["as_mask"] - c["kept"]) / m,
            "kept": c["kept"] / m, "random_next": c["random_next"] / max(1, c["instances"])}


def make_large_corpus(src, target_mb, directory):
    path = os.path.join(directory, f"corpus_{target_mb}mb.txt")
    size = os.path.getsize(src)
    copies = -(-target_mb * 10**6 // size)
    with open(src, "rb") as f:
        text = f.read()
    if not text.endswith(b"\n\n"):
        text = text.rstrip(b"\n") + b"\n\n"
    with open(path, "wb") as out:
        for _ in range(copies):
            out.write(text)
    return path, copies


def make_no_blank_corpus(src, target_mb, directory):
    """`src` without its blank lines (one document), repeated to about `target_mb` MB (0:
    once)."""
    with open(src, "rb") as f:
        text = b"".join(line for line in f if line.strip())
    copies = max(1, -(-target_mb * 10**6 // len(text)))
    path = os.path.join(directory, f"no_blank_{target_mb}mb.txt")
    with open(path, "wb") as out:
        for _ in range(copies):
            out.write(text)
    return path, copies


def no_blank_section(args, tmp, ref_rate):
    """Part 4: corpora without blank lines; returns (label, MB, run) rows for the summary."""
    rows = []
    small, _ = make_no_blank_corpus(args.input_file, 0, tmp)
    small_mb = os.path.getsize(small) / 1e6
    r = run_ours(small, args.vocab_file, 2, args.dupe_factor, 12345, tmp, tag="-noblank")
    rows.append(("ours, 2 workers, no blank lines", small_mb, r))
    _row(rows[-1][0], small_mb, r, ref_rate)
    o = run_original(small, args.vocab_file, args.dupe_factor, 12345, tmp,
                     args.original_timeout, args.original_max_rss_gb)
    rows.append(("original, no blank lines", small_mb, o))
    _row(rows[-1][0], small_mb, o)
    for path in r["records"] + o["records"]:
        if os.path.exists(path):
            os.remove(path)
    if args.no_blank_mb:
        large, copies = make_no_blank_corpus(args.input_file, args.no_blank_mb, tmp)
        large_mb = os.path.getsize(large) / 1e6
        r = run_ours(large, args.vocab_file, 2, args.dupe_factor, 12345, tmp,
                     tag="-noblank-large")
        rows.append((f"ours, 2 workers, no blank lines ({copies}x)", large_mb, r))
        _row(rows[-1][0], large_mb, r, ref_rate)
        os.remove(r["records"][0])
        os.remove(large)
    for label, mb, run in rows:
        s = run.get("summary") or {}
        print(f"  {label}, {mb:.0f} MB: largest process RSS {run['proc_rss_mb']:.0f} MB, "
              f"tree {run['tree_rss_mb']:.0f} MB"
              + (f"; {s['documents']} document(s), {s['work_units']} work units, "
                 f"{s['instances']} instances, warning: {bool(s.get('warnings'))}"
                 if s else ""))
    return rows


def _row(label, corpus_mb, r, ref=None):
    inst = r["instances"]
    rate = inst / r["seconds"] if inst else None
    per_cpu = inst / r["cpu"] if inst and r["cpu"] else None
    if r.get("timed_out"):
        note = f"stopped at the {r['seconds']:.0f} s cap"
    elif r.get("killed_rss"):
        note = f"killed at the RSS cap after {r['seconds']:.0f} s"
    else:
        note = ""
    ratio = f"{rate / ref[0]:.1f}x" if rate and ref else "-"
    cpu_ratio = f"{per_cpu / ref[1]:.1f}x" if per_cpu and ref else "-"
    print(f"| {label:<22} | {corpus_mb:>7.0f} | {r['load']:>4.1f} | {r['seconds']:>7.1f} | "
          f"{r['cpu']:>7.1f} | {inst if inst else '-':>9} | "
          f"{f'{rate:,.0f}' if rate else '-':>8} | {ratio:>7} | "
          f"{f'{per_cpu:,.0f}' if per_cpu else '-':>8} | {cpu_ratio:>7} | "
          f"{r['proc_rss_mb']:>9.0f} | {r['tree_rss_mb']:>8.0f} | {note}")
    return (rate, per_cpu) if rate else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input_file", default=os.path.join(
        SHARED, "data", "pretrain", "enwiki_2015_bert_format.txt"))
    ap.add_argument("--vocab_file", default=os.path.join(
        SHARED, "data", "vocab", "bert-base-uncased-vocab.txt"))
    ap.add_argument("--dupe_factor", type=int, default=2)
    ap.add_argument("--seeds", default="12345,1,2")
    ap.add_argument("--large_mb", type=int, default=300, help="0: skip the large corpus")
    ap.add_argument("--original_timeout", type=float, default=900)
    ap.add_argument("--original_max_rss_gb", type=float, default=8)
    ap.add_argument("--work_dir", default=None, help="temporary files (default: a temp dir)")
    ap.add_argument("--no_blank_mb", type=int, default=300,
                    help="size of the large corpus without blank lines (0: only the 10 MB one)")
    ap.add_argument("--only_no_blank", action="store_true",
                    help="run only part 4 (corpora without blank lines)")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    small_mb = os.path.getsize(args.input_file) / 1e6
    print(f"corpus {args.input_file} ({small_mb:.1f} MB); max_seq_length {MAX_SEQ}, "
          f"dupe_factor {args.dupe_factor}; {os.cpu_count()} CPUs")
    tmp = tempfile.mkdtemp(dir=args.work_dir, prefix="bench_cpd_")
    try:
        print("\n| run | corpus MB | load | wall s | cpu s | instances | inst/s | vs orig | "
              "inst/cpu-s | vs orig | max proc RSS MB | tree RSS MB | note |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        if args.only_no_blank:
            no_blank_section(args, tmp, None)
            return
        originals = [run_original(args.input_file, args.vocab_file, args.dupe_factor, s, tmp,
                                  args.original_timeout, args.original_max_rss_gb)
                     for s in seeds]
        ref_rate = None  # the original's first finished run: (inst/s, inst/cpu-s)
        for s, r in zip(seeds, originals):
            rate = _row(f"original, seed {s}", small_mb, r)
            ref_rate = ref_rate or rate
        ours_small = {}
        for w in (1, 2):
            ours_small[w] = run_ours(args.input_file, args.vocab_file, w, args.dupe_factor,
                                     seeds[0], tmp)
            _row(f"ours, {w} worker(s)", small_mb, ours_small[w], ref_rate)
        ours_seeds = [ours_small[2]] + [
            run_ours(args.input_file, args.vocab_file, 2, args.dupe_factor, s, tmp)
            for s in seeds[1:]]
        for s, r in zip(seeds[1:], ours_seeds[1:]):
            _row(f"ours, 2 workers, seed {s}", small_mb, r, ref_rate)

        ours_large = {}
        if args.large_mb:
            large, copies = make_large_corpus(args.input_file, args.large_mb, tmp)
            large_mb = os.path.getsize(large) / 1e6
            for w in (1, 2):
                ours_large[w] = run_ours(large, args.vocab_file, w, args.dupe_factor,
                                         seeds[0], tmp, tag="-large")
                _row(f"ours, {w} worker(s)", large_mb, ours_large[w], ref_rate)
                shutil.rmtree(os.path.dirname(ours_large[w]["records"][0]))
            orig_large = run_original(large, args.vocab_file, args.dupe_factor, seeds[0], tmp,
                                      args.original_timeout, args.original_max_rss_gb)
            _row("original", large_mb, orig_large, None)
            print(f"(large corpus: the {small_mb:.1f} MB text {copies} times; 'vs orig' is "
                  f"against the original's rates on the {small_mb:.1f} MB corpus; inst/cpu-s "
                  f"counts every process's CPU, start-up included, so on a loaded machine it "
                  f"is the figure that compares)")
        print("\nCorpora without blank lines (one document):")
        no_blank_section(args, tmp, ref_rate)

        print("\nData statistics from the records (same computation for both tools):")
        print("| tool, seed | instances | masked fraction | [MASK] | random | kept | "
              "random next |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        stats = {"original": [], "ours": []}
        for tool, runs in (("original", originals), ("ours", ours_seeds)):
            for s, r in zip(seeds, runs):
                if r["returncode"] != 0:
                    continue
                st = record_statistics(r["records"])
                stats[tool].append(st)
                print(f"| {tool}, {s} | {st['instances']} | {st['masked_fraction']:.5f} | "
                      f"{st['as_mask']:.4f} | {st['random']:.4f} | {st['kept']:.4f} | "
                      f"{st['random_next']:.4f} |")
        keys = ("instances", "masked_fraction", "as_mask", "random", "kept", "random_next")
        print("\n| statistic | original, each seed | ours, each seed | original mean | ours mean "
              "| difference / its std | within the original's run-to-run spread |")
        print("|---|---|---|---:|---:|---:|---|")
        for k in keys:
            o = np.array([st[k] for st in stats["original"]], float)
            u = np.array([st[k] for st in stats["ours"]], float)
            if len(o) < 2 or not len(u):
                continue
            # A run's spread: the seeds' standard deviation, or, when a few seeds happen to
            # agree more closely than sampling allows, the binomial one of the fraction
            # (predictions for the 80/10/10 split, instances for random next).
            per_run = o.std(ddof=1)
            if k in ("as_mask", "random", "kept", "random_next"):
                n = np.mean([st["masked_tokens"] if k != "random_next" else st["instances"]
                             for st in stats["original"]])
                per_run = max(per_run, np.sqrt(o.mean() * (1 - o.mean()) / n))
            std = per_run * np.sqrt(1 / len(o) + 1 / len(u))
            z = (u.mean() - o.mean()) / std if std else 0.0
            fmt = "{:.0f}" if k == "instances" else "{:.5f}"
            print(f"| {k} | {', '.join(fmt.format(x) for x in o)} | "
                  f"{', '.join(fmt.format(x) for x in u)} | {fmt.format(o.mean())} | "
                  f"{fmt.format(u.mean())} | {z:+.1f} | {'yes' if abs(z) <= 3 else 'NO'} |")
        if ours_large:
            s = ours_large[2]["summary"]
            print(f"\nours on the large corpus (2 workers, summary): {s['instances']} instances, "
                  f"masked {s['masked_fraction']:.4f}, 80/10/10 "
                  f"{s['masked_as_mask_fraction']:.4f}/{s['masked_random_fraction']:.4f}/"
                  f"{s['masked_kept_fraction']:.4f}, random next "
                  f"{s['random_next_fraction']:.4f}; {s['work_units']} work units, "
                  f"{s['shuffle_buckets']} shuffle buckets")
            print(f"peak RSS of the largest process: {ours_small[1]['proc_rss_mb']:.0f} / "
                  f"{ours_small[2]['proc_rss_mb']:.0f} MB (1 / 2 workers) at {small_mb:.0f} MB, "
                  f"{ours_large[1]['proc_rss_mb']:.0f} / {ours_large[2]['proc_rss_mb']:.0f} MB "
                  f"at {large_mb:.0f} MB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
