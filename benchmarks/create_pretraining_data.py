"""How fast is `data_prep.create_pretraining_data`, and how much memory does it take?

Runs the command line (a fresh process each time, so start-up is included, as in the peer
figure) on a corpus of several MB with 1 and 2 workers, and prints instances/s, peak RSS
(largest single process, and the whole process tree summed, sampled from /proc), CPU seconds,
the ratio 2 workers / 1 worker and the ratio to the original google-research/bert tool.

The original tool is not installed here; its figures are the ones measured on this machine
class and quoted in the issue (max_seq_length 128, dupe_factor 2, start-up included):
ORIGINAL_INSTANCES_PER_S and ORIGINAL_PEAK_RSS_MB (for a 3.3 MB corpus; it keeps every
instance in memory, so that grows with the corpus).

    python benchmarks/create_pretraining_data.py \
        [--input_file=../shared/data/pretrain/enwiki_2015_bert_format.txt] [--dupe_factor=2]

The CPU is shared with whatever else runs: the load average before each run is printed, and
CPU seconds are given beside wall time so a loaded run can be read.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time

ORIGINAL_INSTANCES_PER_S = 1900.0   # google-research/bert create_pretraining_data.py, here
ORIGINAL_PEAK_RSS_MB = 760.0        # same tool, 3.3 MB corpus, dupe_factor 2

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared", "data")


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


class TreeRssSampler(threading.Thread):
    """Samples the summed RSS of a process and its descendants every 50 ms."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak_kb, self._halt = pid, 0, threading.Event()

    def run(self):
        while not self._halt.is_set():
            stack, total = [self.pid], 0
            while stack:
                p = stack.pop()
                total += _rss_kb(p)
                stack.extend(_children(p))
            self.peak_kb = max(self.peak_kb, total)
            self._halt.wait(0.05)

    def stop(self):
        self._halt.set()
        self.join()


def run_once(input_file, vocab_file, workers, dupe_factor, out_dir):
    out = os.path.join(out_dir, f"w{workers}", "pretrain.tfrecord")
    cmd = [sys.executable, "-m", "data_prep.create_pretraining_data",
           f"--input_file={input_file}", f"--output_file={out}", f"--vocab_file={vocab_file}",
           "--do_lower_case", "--max_seq_length=128", "--max_predictions_per_seq=20",
           "--masked_lm_prob=0.15", f"--dupe_factor={dupe_factor}", "--random_seed=12345",
           f"--num_workers={workers}", f"--num_output_shards={max(2, workers)}"]
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    sampler = TreeRssSampler(proc.pid)
    sampler.start()
    _, err = proc.communicate()
    seconds = time.perf_counter() - start
    sampler.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"run with {workers} workers failed:\n{err}")
    with open(out + ".summary.json") as f:
        summary = json.load(f)
    return dict(workers=workers, seconds=seconds, instances=summary["instances"],
                rate=summary["instances"] / seconds, load=load,
                cpu=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
                max_process_rss_mb=after.ru_maxrss / 1024, tree_rss_mb=sampler.peak_kb / 1024,
                summary=summary)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input_file",
                    default=os.path.join(SHARED, "pretrain", "enwiki_2015_bert_format.txt"))
    ap.add_argument("--vocab_file",
                    default=os.path.join(SHARED, "vocab", "bert-base-uncased-vocab.txt"))
    ap.add_argument("--dupe_factor", type=int, default=2)
    ap.add_argument("--workers", default="1,2")
    args = ap.parse_args()
    size_mb = os.path.getsize(args.input_file) / 1e6
    print(f"corpus {args.input_file} ({size_mb:.1f} MB), max_seq_length 128, "
          f"dupe_factor {args.dupe_factor}, {os.cpu_count()} CPUs")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for w in (int(x) for x in args.workers.split(",")):
            rows.append(run_once(args.input_file, args.vocab_file, w, args.dupe_factor, tmp))
    print(f"{'workers':>7} {'load':>5} {'wall s':>7} {'cpu s':>6} {'instances':>9} "
          f"{'inst/s':>8} {'vs original':>11} {'inst/cpu-s':>10} {'max proc RSS MB':>15} "
          f"{'tree RSS MB':>11}")
    for r in rows:
        print(f"{r['workers']:>7} {r['load']:>5.1f} {r['seconds']:>7.2f} {r['cpu']:>6.2f} "
              f"{r['instances']:>9} {r['rate']:>8.0f} "
              f"{r['rate'] / ORIGINAL_INSTANCES_PER_S:>10.1f}x "
              f"{r['instances'] / r['cpu']:>10.0f} {r['max_process_rss_mb']:>15.0f} "
              f"{r['tree_rss_mb']:>11.0f}")
    print("(inst/cpu-s: instances per CPU-second of the whole process tree, start-up included; "
          "on a loaded machine it is the figure that compares, the original being "
          "single-threaded, i.e. ~1 CPU-second per wall second when measured alone)")
    if len(rows) >= 2:
        print(f"ratio {rows[1]['workers']} workers / {rows[0]['workers']} worker: "
              f"{rows[1]['rate'] / rows[0]['rate']:.2f}x")
    print(f"peer: original tool {ORIGINAL_INSTANCES_PER_S:.0f} instances/s, "
          f"{ORIGINAL_PEAK_RSS_MB:.0f} MB peak RSS (3.3 MB corpus), measured here earlier")
    s = rows[-1]["summary"]
    print(f"data: masked {s['masked_fraction']:.4f} of tokens "
          f"(80/10/10: {s['masked_as_mask_fraction']:.3f}/{s['masked_random_fraction']:.3f}/"
          f"{s['masked_kept_fraction']:.3f}), random next {s['random_next_fraction']:.3f}")


if __name__ == "__main__":
    main()
