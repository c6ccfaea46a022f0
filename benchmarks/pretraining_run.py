"""A short real pretraining run: bert_tiny from scratch on English Wikipedia, held-out curve.

Question: does `python -m bert_tf.pretrain` actually learn on real text? Pretrains
bert_tiny (L2/H128, official_configs/models/bert_tiny.yaml) from random initialisation
on ~10 MB of English Wikipedia and prints the held-out masked-LM accuracy / loss and
next-sentence accuracy at several points, next to their chance levels, plus training
examples/s. One command, all through the command-line tools:

    PYTHONPATH=. KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/pretraining_run.py \
        [--num_train_steps=4000] [--train_batch_size=64] [--learning_rate=1e-3] \
        [--eval_every=500] [--work_dir=/tmp/pretrain_run]

Stages (each skipped when its output already exists, so a rerun continues):
1. Split the corpus by documents (blank-line separated) into train and held-out text
   files: document i is held out when i % --heldout_every == --heldout_every // 2
   (deterministic, ~5% with the default 20).
2. `python -m data_prep.create_pretraining_data` on each (max_seq_length 128,
   max_predictions_per_seq 20, dupe_factor --train_dupe_factor for train, 1 for held-out).
3. `python -m bert_tf.pretrain --do_train` for --num_train_steps with a checkpoint every
   --eval_every steps (the linear warmup/decay schedule is the one of the whole run; a
   rerun resumes from the latest checkpoint; with another --num_train_steps the warmup
   changes too, which pretrain refuses: use another --run_name).
4. While it trains, each new checkpoint is evaluated on the held-out records by
   `python -m bert_tf.pretrain --do_eval --init_checkpoint=CKPT` into its own output dir
   (step 0 = the untrained model with the same seed). The table is printed at the end
   (and written to WORK_DIR/RUN_NAME/curve.json).

Chance levels are computed from the held-out records: masked-LM accuracy of always
predicting the most frequent masked token, the loss of the best context-free (unigram)
predictor = entropy of the held-out masked-token distribution (a lower bound for any
context-free model; ln(30522) = 10.33 for a uniform guess), and next-sentence accuracy of
always predicting the majority label.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import math
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "/work/shared/data"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default=f"{DATA}/pretrain/enwiki_2015_bert_format.txt")
    p.add_argument("--vocab_file", default=f"{DATA}/vocab/bert-base-uncased-vocab.txt")
    p.add_argument("--bert_config_file", default="official_configs/models/bert_tiny.yaml")
    p.add_argument("--work_dir", default="/tmp/pretrain_run")
    p.add_argument("--run_name", default="run",
                   help="model and eval dirs go to WORK_DIR/RUN_NAME (the data is shared)")
    p.add_argument("--heldout_every", type=int, default=20)
    p.add_argument("--train_dupe_factor", type=int, default=3)
    p.add_argument("--max_seq_length", type=int, default=128)
    p.add_argument("--max_predictions_per_seq", type=int, default=20)
    p.add_argument("--num_workers", type=int, default=2)
    p.add_argument("--num_train_steps", type=int, default=4000)
    p.add_argument("--train_batch_size", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--warmup_fraction", type=float, default=0.1)
    p.add_argument("--eval_every", type=int, default=500)
    p.add_argument("--eval_batch_size", type=int, default=32)
    p.add_argument("--steps_per_loop", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--nice", type=int, default=5, help="niceness of the child processes")
    p.add_argument("--skip_train", action="store_true",
                   help="only evaluate existing checkpoints and print the table")
    return p.parse_args(argv)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("KERAS_BACKEND", "tensorflow")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def run_cmd(args, cmd, log_path):
    full = ["nice", "-n", str(args.nice), sys.executable, "-m"] + cmd
    log(" ".join(full[3:]) + f"  > {log_path}")
    with open(log_path, "w") as f:
        code = subprocess.call(full, cwd=REPO, env=child_env(), stdout=f,
                               stderr=subprocess.STDOUT)
    if code:
        sys.exit(f"failed ({code}): see {log_path}")


# ------------------------------------------------------------------ 1. split
def split_documents(corpus, train_path, heldout_path, every):
    """Deterministic document split; returns (train docs, held-out docs)."""
    with open(corpus, encoding="utf-8") as f:
        text = f.read()
    docs = [d.strip("\n") for d in re.split(r"\n\s*\n", text) if d.strip()]
    train, held = [], []
    for i, d in enumerate(docs):
        (held if i % every == every // 2 else train).append(d)
    for path, part in ((train_path, train), (heldout_path, held)):
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write("\n\n".join(part) + "\n")
        os.replace(path + ".tmp", path)
    return len(train), len(held)


# ------------------------------------------------------------------ 2. records
def make_records(args, text_path, record_path, dupe_factor):
    summary_path = record_path + ".summary.json"  # --summary_file: beside the records
    if os.path.exists(summary_path):
        return json.load(open(summary_path))
    run_cmd(args, ["data_prep.create_pretraining_data",
                   f"--input_file={text_path}", f"--output_file={record_path}",
                   f"--vocab_file={args.vocab_file}", "--do_lower_case",
                   f"--max_seq_length={args.max_seq_length}",
                   f"--max_predictions_per_seq={args.max_predictions_per_seq}",
                   f"--dupe_factor={dupe_factor}", f"--num_workers={args.num_workers}",
                   "--num_output_shards=1", f"--random_seed={12345 + dupe_factor}",
                   f"--summary_file={summary_path}"],
            record_path + ".log")
    return json.load(open(summary_path))


def chance_levels(record_path, vocab_file):
    """Majority-token MLM accuracy, unigram entropy, majority NSP label of the records."""
    import tensorflow as tf

    counts = collections.Counter()
    nsp = collections.Counter()
    for raw in tf.data.TFRecordDataset(record_path):
        ex = tf.train.Example.FromString(raw.numpy()).features.feature
        ids = ex["masked_lm_ids"].int64_list.value
        weights = ex["masked_lm_weights"].float_list.value
        for i, w in zip(ids, weights):
            if w > 0:
                counts[i] += 1
        nsp[ex["next_sentence_labels"].int64_list.value[0]] += 1
    vocab = [line.rstrip("\n") for line in open(vocab_file, encoding="utf-8")]
    total = sum(counts.values())
    top_id, top_n = counts.most_common(1)[0]
    entropy = -sum(n / total * math.log(n / total) for n in counts.values())
    n_examples = sum(nsp.values())
    return {"examples": n_examples, "masked_tokens": total,
            "top_token": vocab[top_id], "mlm_majority_accuracy": top_n / total,
            "mlm_unigram_entropy": entropy, "mlm_uniform_loss": math.log(len(vocab)),
            "nsp_random_next_fraction": nsp[1] / n_examples,
            "nsp_majority_accuracy": max(nsp.values()) / n_examples}


# ------------------------------------------------------------------ 3./4. train, eval
def pretrain_flags(args):
    return [f"--bert_config_file={args.bert_config_file}", f"--vocab_file={args.vocab_file}",
            f"--max_seq_length={args.max_seq_length}",
            f"--max_predictions_per_seq={args.max_predictions_per_seq}",
            f"--seed={args.seed}"]


def checkpoint_steps(model_dir):
    steps = set()
    for path in glob.glob(os.path.join(model_dir, "**", "ckpt-*.index"), recursive=True):
        steps.add((int(re.search(r"ckpt-(\d+)\.index$", path).group(1)), path[:-6]))
    return sorted(steps)


def evaluate(args, prefix, step, heldout_records):
    out = os.path.join(args.work_dir, args.run_name, "eval", f"step_{step:06d}")
    result = os.path.join(out, "eval_results.json")
    if not os.path.exists(result):
        os.makedirs(out, exist_ok=True)
        cmd = ["bert_tf.pretrain", "--do_eval", f"--input_file={heldout_records}",
               f"--output_dir={out}", f"--eval_batch_size={args.eval_batch_size}",
               "--max_eval_steps=100000"] + pretrain_flags(args)
        if prefix:
            cmd.append(f"--init_checkpoint={prefix}")
        run_cmd(args, cmd, os.path.join(out, "eval.log"))
    with open(result) as f:
        res = json.load(f)
    res["step"] = step
    return res


def train_speed(train_log):
    """step -> examples/s of each console line of the training log(s)."""
    speed = {}
    if os.path.exists(train_log):
        for line in open(train_log, errors="replace"):
            m = re.search(r"step (\d+): .*examples_per_second ([\d.e+]+)", line)
            if m:
                speed[int(m.group(1))] = float(m.group(2))
    return speed


def interval_speed(speed, lo, hi):
    vals = [v for s, v in speed.items() if lo < s <= hi]
    return sum(vals) / len(vals) if vals else float("nan")


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.work_dir, exist_ok=True)
    start = time.time()
    train_txt = os.path.join(args.work_dir, "train.txt")
    held_txt = os.path.join(args.work_dir, "heldout.txt")
    n_train, n_held = split_documents(args.corpus, train_txt, held_txt, args.heldout_every)
    log(f"documents: {n_train} train, {n_held} held-out")
    train_rec = os.path.join(args.work_dir, "train.tfrecord")
    held_rec = os.path.join(args.work_dir, "heldout.tfrecord")
    s_train = make_records(args, train_txt, train_rec, args.train_dupe_factor)
    s_held = make_records(args, held_txt, held_rec, 1)
    log(f"records: train {s_train.get('instances')}, held-out {s_held.get('instances')} "
        f"({time.time() - start:.0f} s)")
    chance = chance_levels(held_rec, args.vocab_file)
    log("chance levels (held-out): " + json.dumps(chance))

    model_dir = os.path.join(args.work_dir, args.run_name, "model")
    train_log = os.path.join(args.work_dir, args.run_name, "train.log")
    os.makedirs(model_dir, exist_ok=True)
    warmup = int(round(args.warmup_fraction * args.num_train_steps))
    proc = None
    if not args.skip_train:
        cmd = ["nice", "-n", str(args.nice), sys.executable, "-m", "bert_tf.pretrain",
               "--do_train", f"--input_file={train_rec}", f"--output_dir={model_dir}",
               f"--train_batch_size={args.train_batch_size}",
               f"--learning_rate={args.learning_rate}",
               f"--num_train_steps={args.num_train_steps}", f"--num_warmup_steps={warmup}",
               f"--save_checkpoints_steps={args.eval_every}",
               f"--steps_per_loop={args.steps_per_loop}",
               f"--keep_checkpoint_max={args.num_train_steps // args.eval_every + 2}",
               ] + pretrain_flags(args)
        log(" ".join(cmd[3:]) + f"  >> {train_log}")
        logf = open(train_log, "a")
        proc = subprocess.Popen(cmd, cwd=REPO, env=child_env(), stdout=logf,
                                stderr=subprocess.STDOUT)
    t_train = time.time()

    results = {0: evaluate(args, None, 0, held_rec)}
    while True:
        done = proc is None or proc.poll() is not None
        pending = [(s, p) for s, p in checkpoint_steps(model_dir) if s not in results]
        for s, p in pending:
            results[s] = evaluate(args, p, s, held_rec)
            r = results[s]
            log(f"step {s}: masked_lm_accuracy {r['masked_lm_accuracy']:.4f} "
                f"masked_lm_loss {r['masked_lm_loss']:.4f} "
                f"next_sentence_accuracy {r['next_sentence_accuracy']:.4f}")
        if done and not pending:
            break
        if not pending:
            time.sleep(20)
    if proc is not None and proc.returncode:
        log(f"training exited with {proc.returncode}: see {train_log}")
    train_wall = time.time() - t_train

    speed = train_speed(train_log)
    rows = []
    prev = 0
    for s in sorted(results):
        r = results[s]
        rows.append({"step": s, "masked_lm_accuracy": r["masked_lm_accuracy"],
                     "masked_lm_loss": r["masked_lm_loss"],
                     "next_sentence_accuracy": r["next_sentence_accuracy"],
                     "next_sentence_loss": r.get("next_sentence_loss"),
                     "eval_examples": r["eval_steps"] * args.eval_batch_size,
                     "train_examples_per_second": interval_speed(speed, prev, s)})
        prev = s
    print()
    print(f"bert_tiny from scratch, batch {args.train_batch_size}, lr {args.learning_rate}, "
          f"warmup {warmup}, {args.num_train_steps} steps; held-out "
          f"{chance['examples']} examples ({rows[-1]['eval_examples']} evaluated)")
    print(f"chance: masked-LM accuracy {chance['mlm_majority_accuracy']:.4f} (always "
          f"'{chance['top_token']}'), context-free masked-LM loss "
          f"{chance['mlm_unigram_entropy']:.3f} (unigram entropy; uniform "
          f"{chance['mlm_uniform_loss']:.2f}), next-sentence accuracy "
          f"{chance['nsp_majority_accuracy']:.4f} (random-next fraction "
          f"{chance['nsp_random_next_fraction']:.4f})")
    print()
    print("| step | masked_lm_accuracy | masked_lm_loss | next_sentence_accuracy "
          "| train examples/s |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        eps = r["train_examples_per_second"]
        print(f"| {r['step']} | {r['masked_lm_accuracy']:.4f} | {r['masked_lm_loss']:.3f} "
              f"| {r['next_sentence_accuracy']:.4f} | "
              f"{'' if math.isnan(eps) else f'{eps:.1f}'} |")
    all_eps = [v for v in speed.values()]
    print()
    print(f"training wall time (this invocation, evaluation running alongside): "
          f"{train_wall / 60:.1f} min; total {(time.time() - start) / 60:.1f} min; "
          f"mean examples/s over console lines "
          f"{(sum(all_eps) / len(all_eps)) if all_eps else float('nan'):.1f}; "
          f"load average now {os.getloadavg()[0]:.1f}")
    with open(os.path.join(args.work_dir, args.run_name, "curve.json"), "w") as f:
        json.dump({"args": vars(args), "chance": chance, "rows": rows,
                   "train_wall_seconds": train_wall}, f, indent=2)


if __name__ == "__main__":
    main()
