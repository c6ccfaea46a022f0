r"""Pretraining parity: `python -m bert_tf.pretrain` vs transformers' BertForPreTraining.

Question: does a model pretrained here learn as the reference implementation does? Both
sides train the same small BERT from the same initial weights on the same records in
the same order, with the same update rule, and evaluate the same held-out records every
--eval_every steps. Goal: final held-out masked-LM accuracy within 1 point and
next-sentence accuracy within 2 points of the reference.

* Data: ../shared/data/pretrain/enwiki_2015_bert_format.txt split by documents (every
  20th held out, benchmarks/pretraining_run.split_documents); a --vocab_size WordPiece
  vocab learned on the training part with `python -m data_prep.build_vocab`; records made
  by `python -m data_prep.create_pretraining_data` (train: --train_dupe_factor passes,
  held-out: 1).
* Model: L/H/A/I from the flags (default L2 H128 A2 I512, exact GELU, dropout 0.1),
  initialised once by bert_tf (seeded) into WORK_DIR/init, exported to Hugging Face with
  `python -m bert_tf.convert_checkpoint --target_format=huggingface` (WORK_DIR/init_hf):
  the reference loads that with BertForPreTraining.from_pretrained.
* Order: both read the train records through bert_tf.data.pretraining_dataset with the
  same seed (a fixed shuffled order; the reference turns each batch into torch tensors).
* Update: AdamW with bias correction on both sides (ours `--optimizer=adamw_bias_correction`;
  torch.optim.AdamW, eps 1e-6, weight decay 0.01 except LayerNorm and biases), gradient
  clipping to global norm 1.0, the learning rate schedule of ours (linear warmup over
  --warmup_fraction, then the original BERT linear decay from step 0 to 0 at the last
  step) written as a torch LambdaLR. Loss: masked-LM cross-entropy averaged over the
  masked tokens plus next-sentence cross-entropy, on both sides.
* Evaluation (both): masked-LM accuracy and loss (over masked tokens), next-sentence
  accuracy on every held-out record, at step 0 and every --eval_every steps. Ours runs it
  inside `pretrain` (--eval_every_steps), which writes it to TensorBoard too.
* Speed: training examples/s, evaluation excluded (ours: the console lines after the
  first loop; reference: steps after the first 20).

Then (stage `sst2`) SST-2 is fine-tuned (--sst2_train_examples rows, the whole dev set)
from our pretrained checkpoint and from the untrained initial weights, same settings.

    PYTHONPATH=. KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/pretraining_parity.py \
        --work_dir=/tmp/pretraining_parity [--stages=prepare,ours,reference,sst2,report]

Stages skip work whose output exists, so `ours` and `reference` may run as two processes
after `prepare`. `report` prints the table and writes docs/pretraining_parity.{csv,png}.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pretraining_run import chance_levels, split_documents  # noqa: E402

DATA = os.path.join(os.path.dirname(REPO), "shared", "data")
METRICS = ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default=f"{DATA}/pretrain/enwiki_2015_bert_format.txt")
    p.add_argument("--work_dir", default="/tmp/pretraining_parity")
    p.add_argument("--stages", default="prepare,ours,reference,sst2,report")
    p.add_argument("--vocab_size", type=int, default=4096)
    p.add_argument("--strip_accents", action=argparse.BooleanOptionalAction, default=None,
                   help="text setting of the vocab, records and model dir (default: follows "
                        "lower-casing; --no-strip_accents keeps Hangul syllables)")
    p.add_argument("--num_hidden_layers", type=int, default=2)
    p.add_argument("--hidden_size", type=int, default=128)
    p.add_argument("--num_attention_heads", type=int, default=2)
    p.add_argument("--intermediate_size", type=int, default=512)
    p.add_argument("--max_seq_length", type=int, default=64)
    p.add_argument("--max_predictions_per_seq", type=int, default=10)
    p.add_argument("--train_dupe_factor", type=int, default=3)
    p.add_argument("--heldout_every", type=int, default=20)
    p.add_argument("--num_train_steps", type=int, default=8000)
    p.add_argument("--train_batch_size", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=2e-3)
    p.add_argument("--warmup_fraction", type=float, default=0.1)
    p.add_argument("--eval_every", type=int, default=1000)
    p.add_argument("--mixed_precision", default=None,
                   help="ours: pretrain --mixed_precision (default: the machine's; the "
                        "reference runs float32)")
    p.add_argument("--save_every", type=int, default=None,
                   help="ours: keep a checkpoint every this many steps (default: the last only)")
    p.add_argument("--eval_batch_size", type=int, default=128)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--reference_threads", type=int, default=1,
                   help="torch threads; on a loaded machine 2 OpenMP threads spin-wait "
                        "(measured 4x the CPU time per step of 1 thread at load 17)")
    p.add_argument("--sst2_train_examples", type=int, default=4000)
    p.add_argument("--sst2_learning_rate", type=float, default=1e-4)
    p.add_argument("--sst2_epochs", type=float, default=3)
    p.add_argument("--docs_dir", default=os.path.join(REPO, "docs"))
    return p.parse_args(argv)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def env():
    return dict(os.environ, PYTHONPATH=REPO, KERAS_BACKEND="tensorflow",
                TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")


def run(cmd, log_path):
    log(" ".join(cmd[1:]) + f"  > {log_path}")
    with open(log_path, "w") as f:
        code = subprocess.call(cmd, cwd=REPO, env=env(), stdout=f, stderr=subprocess.STDOUT)
    if code:
        sys.exit(f"failed ({code}): see {log_path}")


def paths(args):
    w = args.work_dir
    return {k: os.path.join(w, v) for k, v in dict(
        train_txt="train.txt", held_txt="heldout.txt", vocab="vocab.txt",
        train_rec="train.tfrecord", held_rec="heldout.tfrecord", config="bert_config.json",
        init="init", init_hf="init_hf", ours="ours", ours_log="ours.log",
        reference="reference.json", reference_model="reference_hf", chance="chance.json",
        sst2="sst2").items()}


def text_flags(args):
    """The text-handling flags of build_vocab and create_pretraining_data."""
    return ["--do_lower_case"] + (["--nostrip_accents"] if args.strip_accents is False else [])


def num_warmup(args):
    return int(round(args.warmup_fraction * args.num_train_steps))


# ------------------------------------------------------------------ prepare
def prepare(args):
    p = paths(args)
    os.makedirs(args.work_dir, exist_ok=True)
    if not os.path.exists(p["held_txt"]):
        n_train, n_held = split_documents(args.corpus, p["train_txt"], p["held_txt"],
                                          args.heldout_every)
        log(f"documents: {n_train} train, {n_held} held-out")
    py = sys.executable
    if not os.path.exists(p["vocab"]):
        run([py, "-m", "data_prep.build_vocab", f"--input_file={p['train_txt']}",
             f"--vocab_file={p['vocab']}", f"--vocab_size={args.vocab_size}",
             *text_flags(args), "--num_unused=0", "--noprogress"], p["vocab"] + ".log")
    for text, rec, dupe in ((p["train_txt"], p["train_rec"], args.train_dupe_factor),
                            (p["held_txt"], p["held_rec"], 1)):
        if not os.path.exists(rec + ".summary.json"):
            run([py, "-m", "data_prep.create_pretraining_data", f"--input_file={text}",
                 f"--output_file={rec}", f"--summary_file={rec}.summary.json",
                 f"--work_dir={rec}.work", f"--vocab_file={p['vocab']}", *text_flags(args),
                 f"--max_seq_length={args.max_seq_length}",
                 f"--max_predictions_per_seq={args.max_predictions_per_seq}",
                 f"--dupe_factor={dupe}", "--num_workers=2", "--num_output_shards=1",
                 f"--random_seed={12345 + dupe}"], rec + ".log")
    if not os.path.exists(p["chance"]):
        with open(p["chance"], "w") as f:
            json.dump(chance_levels(p["held_rec"], p["vocab"]), f, indent=2)
    if not os.path.exists(os.path.join(p["init"], "checkpoint")):
        make_init(args, p)
    export_huggingface(p["init"], p["init_hf"])


def export_huggingface(model_dir, out):
    """`convert_checkpoint --target_format=huggingface` of a bert_tf model dir, as a user
    would run it (once: an existing export is kept)."""
    if not os.path.exists(os.path.join(out, "model.safetensors")):
        run([sys.executable, "-m", "bert_tf.convert_checkpoint", "--source_format=bert_tf",
             "--target_format=huggingface", f"--input={model_dir}", f"--output_dir={out}"],
            out + ".log")


def make_init(args, p):
    """The shared initial weights: bert_tf's initialisers, seeded."""
    import keras

    from bert_tf.model import model_dir
    from bert_tf.model.config import BertConfig
    from bert_tf.model.pretrainer import BertPretrainer

    with open(p["vocab"]) as f:
        vocab_size = sum(1 for _ in f)
    config = BertConfig(vocab_size=vocab_size, hidden_size=args.hidden_size,
                        num_hidden_layers=args.num_hidden_layers,
                        num_attention_heads=args.num_attention_heads,
                        intermediate_size=args.intermediate_size,
                        max_position_embeddings=max(128, args.max_seq_length))
    config.to_json_file(p["config"])
    keras.utils.set_random_seed(args.seed)
    model = BertPretrainer(config)
    model_dir.write_model_dir(p["init"], config, {"encoder": model.encoder,
                                                 "masked_lm": model.masked_lm,
                                                 "next_sentence": model.next_sentence},
                              vocab_file=p["vocab"], do_lower_case=True,
                              strip_accents=args.strip_accents)
    log(f"initial weights: {p['init']} ({config})")


# ------------------------------------------------------------------ ours
def run_ours(args):
    p = paths(args)
    model = p["ours"]
    if not glob.glob(os.path.join(model, f"ckpt-{args.num_train_steps}.index")):
        run([sys.executable, "-m", "bert_tf.pretrain", "--do_train",
             f"--input_file={p['train_rec']}", f"--eval_input_file={p['held_rec']}",
             f"--output_dir={model}", f"--init_checkpoint={p['init']}",
             f"--max_seq_length={args.max_seq_length}",
             f"--max_predictions_per_seq={args.max_predictions_per_seq}",
             f"--train_batch_size={args.train_batch_size}",
             f"--eval_batch_size={args.eval_batch_size}", "--max_eval_steps=1000000",
             f"--learning_rate={args.learning_rate}",
             f"--num_train_steps={args.num_train_steps}",
             f"--num_warmup_steps={num_warmup(args)}", "--optimizer=adamw_bias_correction",
             "--weight_decay_rate=0.01", "--clip_norm=1.0",
             f"--eval_every_steps={args.eval_every}", f"--steps_per_loop={args.eval_every}",
             f"--save_checkpoints_steps={args.save_every or args.num_train_steps}",
             f"--seed={args.seed}",
             *([f"--mixed_precision={args.mixed_precision}"] if args.mixed_precision else [])],
            p["ours_log"])
    result = ours_results(args)
    for row in result["curve"]:
        log("bert_tf eval " + " ".join(f"{k} {v:.4g}" for k, v in row.items()))
    log(f"bert_tf training speed {result['train_examples_per_second']:.1f} ex/s")
    return result


def read_scalars(event_dir):
    """tag -> {step: value} from the TensorBoard event files `pretrain` wrote."""
    import tensorflow as tf

    values = {}
    for path in sorted(glob.glob(os.path.join(event_dir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for v in event.summary.value:
                values.setdefault(v.tag, {})[event.step] = float(
                    tf.make_ndarray(v.tensor)) if v.HasField("tensor") else v.simple_value
    return values


def ours_results(args):
    import re

    p = paths(args)
    scalars = read_scalars(os.path.join(p["ours"], "eval"))
    steps = sorted(scalars[METRICS[0]])
    curve = [dict(step=s, **{m: scalars[m][s] for m in METRICS}) for s in steps]
    loops = []  # (step, examples/s) of each training console line
    for line in open(p["ours_log"], errors="replace"):
        m = re.search(r"step (\d+): .*examples_per_second ([\d.e+]+)", line)
        if m:
            loops.append((int(m.group(1)), float(m.group(2))))
    seconds = examples = 0.0
    prev = loops[0][0] if loops else 0
    for step, eps in loops[1:]:  # the first loop includes tracing
        n = (step - prev) * args.train_batch_size
        seconds += n / eps
        examples += n
        prev = step
    return {"curve": curve, "train_examples_per_second": examples / seconds if seconds else
            float("nan")}


# ------------------------------------------------------------------ reference
def run_reference(args):
    p = paths(args)
    if os.path.exists(p["reference"]):
        with open(p["reference"]) as f:
            return json.load(f)
    import keras
    import numpy as np
    import tensorflow as tf
    import torch
    import transformers

    from bert_tf.data.pretraining import pretraining_dataset

    torch.set_num_threads(args.reference_threads)
    torch.manual_seed(args.seed)
    keras.utils.set_random_seed(args.seed)  # what `pretrain --seed` sets before its dataset
    model = transformers.BertForPreTraining.from_pretrained(
        p["init_hf"], dtype=torch.float32)
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (no_decay if "LayerNorm" in name or "bias" in name else decay).append(param)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.learning_rate, betas=(0.9, 0.999), eps=1e-6)
    total, warmup = args.num_train_steps, num_warmup(args)

    def schedule(step):  # bert_tf.training.optimization.WarmupLinearDecay, as a factor
        if step < warmup:
            return step / warmup
        return 1.0 - min(step, total) / total

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    train = pretraining_dataset(p["train_rec"], args.max_seq_length,
                                args.max_predictions_per_seq, args.train_batch_size,
                                is_training=True, seed=args.seed)

    def to_torch(features, labels):
        f = {k: torch.from_numpy(np.asarray(v, np.int64)) for k, v in features.items()}
        l = {k: torch.from_numpy(np.array(v)) for k, v in labels.items()}
        return f, l

    def forward(f):
        """BertForPreTraining's modules, the MLM head only at the masked positions (as
        the original and ours compute it: the same math, without [batch, seq, vocab])."""
        out = model.bert(input_ids=f["input_word_ids"], attention_mask=f["input_mask"],
                         token_type_ids=f["input_type_ids"])
        sequence = out.last_hidden_state
        index = f["masked_lm_positions"][:, :, None].expand(-1, -1, sequence.shape[-1])
        return model.cls(torch.gather(sequence, 1, index), out.pooler_output)

    def losses(mlm_logits, nsp_logits, l):
        """Per-token masked-LM NLL and per-example NSP NLL."""
        nll = torch.nn.functional.cross_entropy(mlm_logits.transpose(1, 2),
                                                l["masked_lm_ids"].long(), reduction="none")
        nsp = torch.nn.functional.cross_entropy(
            nsp_logits, l["next_sentence_labels"].long().reshape(-1), reduction="none")
        return nll, nsp

    def evaluate(step):
        model.eval()
        sums = dict.fromkeys(("acc", "loss", "tokens", "nsp", "examples"), 0.0)
        held = pretraining_dataset(p["held_rec"], args.max_seq_length,
                                   args.max_predictions_per_seq, args.eval_batch_size,
                                   is_training=False)
        with torch.no_grad():
            for features, labels in held.as_numpy_iterator():
                f, l = to_torch(features, labels)
                logits, nsp_logits = forward(f)
                nll, _ = losses(logits, nsp_logits, l)
                w = l["masked_lm_weights"].float()
                ids = l["masked_lm_ids"].long()
                sums["acc"] += float((w * (logits.argmax(-1) == ids).float()).sum())
                sums["loss"] += float((w * nll).sum())
                sums["tokens"] += float(w.sum())
                nsp = l["next_sentence_labels"].long().reshape(-1)
                sums["nsp"] += float((nsp_logits.argmax(-1) == nsp).sum())
                sums["examples"] += len(nsp)
        model.train()
        row = {"step": step, "masked_lm_accuracy": sums["acc"] / sums["tokens"],
               "masked_lm_loss": sums["loss"] / sums["tokens"],
               "next_sentence_accuracy": sums["nsp"] / sums["examples"]}
        log("reference eval " + " ".join(f"{k} {v:.4g}" for k, v in row.items()))
        return row

    curve = [evaluate(0)]
    model.train()
    iterator = train.as_numpy_iterator()
    seconds = examples = 0.0
    start = time.time()
    for step in range(1, total + 1):
        t0 = time.time()
        f, l = to_torch(*next(iterator))
        nll, nsp = losses(*forward(f), l)
        w = l["masked_lm_weights"].float()
        # = BertForPreTraining's loss: mean NLL over the masked tokens + mean NSP NLL
        loss = (w * nll).sum() / w.sum().clamp(min=1.0) + nsp.mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if step > 20:
            seconds += time.time() - t0
            examples += args.train_batch_size
        if step % 50 == 0:
            log(f"reference step {step}: loss {loss.item():.4f} lr "
                f"{scheduler.get_last_lr()[0]:.3g} "
                f"ex/s {examples / max(seconds, 1e-9):.1f}")
        if step % args.eval_every == 0 or step == total:
            curve.append(evaluate(step))
    result = {"curve": curve, "train_examples_per_second": examples / seconds,
              "wall_seconds": time.time() - start}
    # The pretrained model, for fine-tuning with transformers (the tokenizer files as
    # convert_checkpoint wrote them for the initial weights).
    model.save_pretrained(p["reference_model"])
    for name in os.listdir(p["init_hf"]):
        if not name.startswith(("config", "model")) and name.endswith((".txt", ".json")):
            shutil.copy(os.path.join(p["init_hf"], name), p["reference_model"])
    with open(p["reference"], "w") as f:
        json.dump(result, f, indent=2)
    return result


# ------------------------------------------------------------------ SST-2
def run_sst2(args):
    from finetune_quality import run_ours as finetune

    p = paths(args)
    data_dir = os.path.join(DATA, "glue", "SST-2")
    results = {}
    for name, init in (("pretrained", p["ours"]), ("random_init", p["init"])):
        out = os.path.join(p["sst2"], name)
        results[name] = finetune("SST-2", data_dir, init, out, args.max_seq_length,
                                 args.sst2_learning_rate, args.sst2_epochs,
                                 args.sst2_train_examples, None, args.seed,
                                 "adamw_bias_correction", True)
        log(f"SST-2 from {name}: dev accuracy {results[name]['accuracy']:.4f}")
    with open(os.path.join(p["sst2"], "summary.json"), "w") as f:
        json.dump(results, f, indent=2)
    return results


# ------------------------------------------------------------------ report
def same_order(args, batches=3):
    """Whether `pretrain`'s input pipeline (seeded, under its tf.distribute strategy) and
    the reference's plain iteration yield the same first batches."""
    import hashlib

    import keras
    import numpy as np
    import tensorflow as tf

    from bert_tf.data.pretraining import pretraining_dataset
    from bert_tf.training.strategy import get_strategy, input_options

    p = paths(args)
    make = lambda batch, ctx=None: pretraining_dataset(
        p["train_rec"], args.max_seq_length, args.max_predictions_per_seq, batch,
        is_training=True, input_context=ctx, seed=args.seed)
    digest = lambda f: hashlib.md5(np.asarray(f["input_word_ids"]).tobytes()).hexdigest()
    keras.utils.set_random_seed(args.seed)
    reference = [digest(f) for f, _ in make(args.train_batch_size).take(batches)
                 .as_numpy_iterator()]
    keras.utils.set_random_seed(args.seed)
    strategy = get_strategy("one_device")
    iterator = iter(strategy.distribute_datasets_from_function(
        lambda ctx: make(ctx.get_per_replica_batch_size(args.train_batch_size), ctx),
        input_options(strategy)))
    ours = [digest(tf.nest.map_structure(lambda t: t.numpy(), next(iterator))[0])
            for _ in range(batches)]
    return ours == reference


def report(args):
    p = paths(args)
    ours, ref = ours_results(args), run_reference(args)
    with open(p["chance"]) as f:
        chance = json.load(f)
    by_step = {r["step"]: r for r in ref["curve"]}
    rows = [(o, by_step[o["step"]]) for o in ours["curve"] if o["step"] in by_step]
    os.makedirs(args.docs_dir, exist_ok=True)
    csv_path = os.path.join(args.docs_dir, "pretraining_parity.csv")
    with open(csv_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step"] + [f"{side}_{m}" for side in ("bert_tf", "transformers")
                                    for m in METRICS])
        for o, r in rows:
            writer.writerow([o["step"]] + [f"{o[m]:.5f}" for m in METRICS]
                            + [f"{r[m]:.5f}" for m in METRICS])
    print(f"\nL{args.num_hidden_layers} H{args.hidden_size} A{args.num_attention_heads} "
          f"I{args.intermediate_size}, vocab {args.vocab_size}, seq {args.max_seq_length}, "
          f"batch {args.train_batch_size}, lr {args.learning_rate}, warmup {num_warmup(args)}, "
          f"{args.num_train_steps} steps; held-out {chance['examples']} records")
    print(f"chance: masked-LM accuracy {chance['mlm_majority_accuracy']:.4f} (always "
          f"'{chance['top_token']}'), unigram entropy {chance['mlm_unigram_entropy']:.3f}, "
          f"next-sentence {chance['nsp_majority_accuracy']:.4f}\n")
    print("| step | MLM acc bert_tf | MLM acc transformers | MLM loss bert_tf | "
          "MLM loss transformers | NSP acc bert_tf | NSP acc transformers |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for o, r in rows:
        print(f"| {o['step']} | {o['masked_lm_accuracy']:.4f} | {r['masked_lm_accuracy']:.4f} "
              f"| {o['masked_lm_loss']:.3f} | {r['masked_lm_loss']:.3f} "
              f"| {o['next_sentence_accuracy']:.4f} | {r['next_sentence_accuracy']:.4f} |")
    o, r = rows[-1]
    d_mlm = 100 * (o["masked_lm_accuracy"] - r["masked_lm_accuracy"])
    d_nsp = 100 * (o["next_sentence_accuracy"] - r["next_sentence_accuracy"])
    print(f"\nfinal: MLM accuracy {d_mlm:+.2f} points (goal within 1), NSP accuracy "
          f"{d_nsp:+.2f} points (goal within 2): "
          f"{'met' if abs(d_mlm) <= 1 and abs(d_nsp) <= 2 else 'NOT met'}")
    print(f"input order: the first 3 training batches are the same on both sides: "
          f"{same_order(args)}")
    so, sr = ours["train_examples_per_second"], ref["train_examples_per_second"]
    print(f"training speed: bert_tf {so:.1f} ex/s, transformers {sr:.1f} ex/s "
          f"(x{so / sr:.2f}); load average now {os.getloadavg()[0]:.1f}")
    sst2 = os.path.join(p["sst2"], "summary.json")
    if os.path.exists(sst2):
        with open(sst2) as f:
            s = json.load(f)
        print(f"SST-2 dev accuracy ({args.sst2_train_examples} train rows): from the "
              f"pretrained checkpoint {s['pretrained']['accuracy']:.4f}, from random "
              f"weights {s['random_init']['accuracy']:.4f}")
    plot(args, rows, chance)
    print(f"wrote {csv_path} and {os.path.join(args.docs_dir, 'pretraining_parity.png')}")


def plot(args, rows, chance):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    steps = [o["step"] for o, _ in rows]
    baselines = {"masked_lm_accuracy": chance["mlm_majority_accuracy"],
                 "masked_lm_loss": chance["mlm_unigram_entropy"],
                 "next_sentence_accuracy": chance["nsp_majority_accuracy"]}
    for ax, metric in zip(axes, METRICS):
        ax.plot(steps, [o[metric] for o, _ in rows], "o-", label="bert_tf pretrain")
        ax.plot(steps, [r[metric] for _, r in rows], "s--", label="transformers (PyTorch)")
        ax.axhline(baselines[metric], color="gray", lw=0.8, ls=":",
                   label="majority" if "accuracy" in metric else "unigram entropy")
        ax.set_title(f"held-out {metric.replace('_', ' ')}")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"BERT L{args.num_hidden_layers}/H{args.hidden_size} on English Wikipedia "
                 f"(vocab {args.vocab_size}, seq {args.max_seq_length}, batch "
                 f"{args.train_batch_size}, lr {args.learning_rate})", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(args.docs_dir, "pretraining_parity.png"), dpi=110)


def main(argv=None):
    args = parse_args(argv)
    stages = args.stages.split(",")
    for stage, fn in (("prepare", prepare), ("ours", run_ours), ("reference", run_reference),
                      ("sst2", run_sst2), ("report", report)):
        if stage in stages:
            log(f"stage {stage}")
            fn(args)


if __name__ == "__main__":
    main()
