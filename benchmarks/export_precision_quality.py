r"""Does a bfloat16 SavedModel score what its float32 export scores? (GLUE dev, raw text.)

For each fine-tuned model dir (what `bert_tf.finetune` wrote, e.g. the `ours_*` dirs of
benchmarks/finetune_quality.py), exports it twice with `bert_tf.export.saved_model.export_model_dir`,
`mixed_precision=float32` and `mixed_precision=mixed_bfloat16` (what `export_model
--mixed_precision` does), loads both with plain `tf.saved_model.load`, sends the whole dev
set through their raw-text `serving_default` signature in batches of 32, and scores the
labels with the task's own metrics (`task.evaluate`, as finetune's eval_results.json).
Prints each metric for both exports and their difference in points, how many labels
differ, and the largest logit difference; writes WORK_DIR/export_precision_quality.json.

    PYTHONPATH=. KERAS_BACKEND=tensorflow python benchmarks/export_precision_quality.py \
        --model_dirs=/tmp/ftq/ours_SST-2_...,/tmp/ftq/ours_MRPC_... \
        --data_dir=../shared/data [--work_dir=/tmp/export_precision_quality]

The data folder of each task is `--data_dir/glue/<TASK>` (SST-2, MRPC, ...).
"""

import argparse
import json
import os
import pathlib

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
PRECISIONS = ("float32", "mixed_bfloat16")
BATCH = 32


def dev_outputs(saved_model: str, examples, pair: bool) -> dict:
    """logits [n, C] and label strings of the raw-text signature on `examples`."""
    import tensorflow as tf

    fn = tf.saved_model.load(saved_model).signatures["serving_default"]
    logits, labels = [], []
    for i in range(0, len(examples), BATCH):
        rows = examples[i:i + BATCH]
        inputs = {"text": tf.constant([e.text_a for e in rows])}
        if pair:
            inputs["text_b"] = tf.constant([e.text_b for e in rows])
        out = fn(**inputs)
        logits.append(out["logits"].numpy())
        if "label" in out:
            labels += [v.decode() for v in out["label"].numpy()]
    return {"logits": np.concatenate(logits), "labels": labels}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dirs", required=True, help="comma-separated finetune dirs")
    parser.add_argument("--data_dir", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--work_dir", default="/tmp/export_precision_quality")
    args = parser.parse_args()

    import tensorflow_text  # noqa: F401  (the raw-text signatures' ops)

    from bert_tf.export import saved_model
    from bert_tf.model import model_dir
    from bert_tf import tasks

    report = {}
    for directory in args.model_dirs.split(","):
        resolved = model_dir.resolve(directory)
        name = resolved.task_config["task_name"]
        task = tasks.make_task(name, data_dir=os.path.join(args.data_dir, "glue", name))
        dev = task.get_examples("dev")
        pair = dev[0].text_b is not None
        entry = report.setdefault(name, {"model_dir": directory, "dev_examples": len(dev)})
        outputs = {}
        for precision in PRECISIONS:
            export_dir = os.path.join(args.work_dir, os.path.basename(directory.rstrip("/")),
                                      precision)
            versions = saved_model.list_versions(export_dir)
            path = (os.path.join(export_dir, str(versions[-1])) if versions else
                    saved_model.export_model_dir(resolved, export_dir, mixed_precision=precision))
            outputs[precision] = dev_outputs(path, dev, pair)
            scores = task.evaluate(outputs[precision]["labels"], dev)
            entry[precision] = scores
        a, b = (outputs[p] for p in PRECISIONS)
        entry["labels_differing"] = int(sum(x != y for x, y in zip(a["labels"], b["labels"])))
        entry["max_abs_logit_diff"] = float(np.abs(a["logits"] - b["logits"]).max())
        entry["mean_abs_logit_diff"] = float(np.abs(a["logits"] - b["logits"]).mean())
        line = ", ".join(
            f"{k} float32 {100 * entry['float32'][k]:.2f} / bf16 "
            f"{100 * entry['mixed_bfloat16'][k]:.2f} "
            f"({100 * (entry['mixed_bfloat16'][k] - entry['float32'][k]):+.2f} points)"
            for k in entry["float32"])
        print(f"{name} dev ({len(dev)} examples): {line}; labels differing "
              f"{entry['labels_differing']}; logits |bf16 - float32| mean "
              f"{entry['mean_abs_logit_diff']:.4f}, max {entry['max_abs_logit_diff']:.4f}",
              flush=True)
    os.makedirs(args.work_dir, exist_ok=True)
    out = os.path.join(args.work_dir, "export_precision_quality.json")
    with open(out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
