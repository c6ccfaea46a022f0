r"""What does each export format and precision cost on dev? (SST-2, MRPC, CoNLL-2003, ...)

For each fine-tuned model dir (what `bert_tf.finetune` wrote, e.g. the `ours_*` dirs of
benchmarks/finetune_quality.py), writes every export `--formats` names through
`export_model.run` (the command itself: `export_model --format=... --quantization=...
--mixed_precision=... [--calibration_file=...]`), sends the whole dev set through each, and scores what comes back
with the task's own post-processing and metrics (`task.postprocess` + `task.evaluate`, as
finetune's eval_results.json), so a token classifier's tags are decoded to words and
scored as entities exactly as in training. Every format is fed the same ids: the dev set
through `task.convert_examples` (our tokenizer, the model dir's vocab and settings),
batches of 32; the SavedModels through their ids signature (their raw-text signature
computes the same ids in the graph; tests/test_export*.py prove both equal).

Formats (FORMATS): the SavedModel in float32 (the baseline) and mixed_bfloat16; ONNX float32
and dynamic_int8 (onnxruntime); OpenVINO f32, bf16, dynamic_int8 and static_int8 (NNCF,
ranges measured on `--calibration_examples` training examples written to
WORK_DIR/<model>/calibration.txt as `--calibration_file` lines: a text, a pair as text TAB
text, a sentence's words joined by spaces). Prints, per model and format, each metric, its difference from the float32
SavedModel in points, how many predictions differ (sentences, for a tagger) and the logit
differences (a tagger's on real tokens);
writes WORK_DIR/export_precision_quality.json. Exports already in WORK_DIR are reused.

    PYTHONPATH=. KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/export_precision_quality.py \
        --model_dirs=/tmp/ftq/ours_SST-2_...,/tmp/ftq/ours_conll2003_... \
        [--formats=saved_model_bf16,onnx_int8,openvino_static_int8] \
        [--data_dir=../shared/data] [--work_dir=/tmp/export_precision_quality]

The dev data of each task is `--data_dir/glue/<TASK>` (SST-2, MRPC, ...) or
`--data_dir/<task>` (conll2003).
"""

import argparse
import json
import os
import pathlib
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
BASELINE = "saved_model_f32"
#: name -> its export_model flags (static_int8 also gets --calibration_file)
FORMATS = {
    "saved_model_f32": {"format": "saved_model", "mixed_precision": "float32"},
    "saved_model_bf16": {"format": "saved_model", "mixed_precision": "mixed_bfloat16"},
    "onnx_f32": {"format": "onnx", "quantization": "float32"},
    "onnx_int8": {"format": "onnx", "quantization": "dynamic_int8"},
    "openvino_f32": {"format": "openvino", "quantization": "float32"},
    "openvino_bf16": {"format": "openvino", "quantization": "float32",
                      "mixed_precision": "mixed_bfloat16"},
    "openvino_dynamic_int8": {"format": "openvino", "quantization": "dynamic_int8"},
    "openvino_static_int8": {"format": "openvino", "quantization": "static_int8"},
}
IDS_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")
BATCH = 32


def calibration_lines(examples) -> list:
    """`--calibration_file` lines of `examples`: a text, a pair (text TAB text) or a
    sentence's words joined by spaces (what the model is fed, read from a file)."""
    lines = []
    for e in examples:
        if getattr(e, "words", None) is not None:
            lines.append(" ".join(e.words))
        elif getattr(e, "text_b", None) is not None:
            lines.append(f"{e.text_a}\t{e.text_b}")
        else:
            lines.append(e.text_a)
    return [line.replace("\n", " ") for line in lines]


def export(fmt: str, model: str, export_dir: str, calibration_file: str) -> str:
    """The version directory of `fmt`'s export of the model dir `model` (written once,
    by `export_model.run`)."""
    from bert_tf import export_model
    from bert_tf.export import saved_model

    versions = saved_model.list_versions(export_dir)
    if versions:
        return os.path.join(export_dir, str(versions[-1]))
    flags = dict(FORMATS[fmt])
    if flags.get("quantization") == "static_int8":
        flags["calibration_file"] = calibration_file
    return export_model.run(export_model.ExportConfig(init_checkpoint=model,
                                                      export_dir=export_dir, **flags))


def runner(fmt: str, path: str, output: str):
    """fn(ids inputs dict of int32 [b, seq]) -> `output` [b, ...] float32 of the export."""
    kind = FORMATS[fmt]["format"]
    if kind == "saved_model":
        import tensorflow as tf
        from bert_tf.serving.modules import IDS_SIGNATURE

        fn = tf.saved_model.load(path).signatures[IDS_SIGNATURE]
        return lambda x: fn(**{k: tf.constant(v) for k, v in x.items()})[output].numpy()
    if kind == "onnx":
        from bert_tf.export import export_onnx

        session = export_onnx.load_session(os.path.join(path, export_onnx.MODEL_FILE),
                                           threads=os.cpu_count())
        return lambda x: session.run([output], x)[0]
    from bert_tf.export import export_openvino

    compiled = export_openvino.compile_model(path)
    port = compiled.output(output)
    return lambda x: compiled(x)[port]


def dev_outputs(run, features: dict) -> np.ndarray:
    """`run` over `features`' ids in batches of BATCH, concatenated."""
    rows = len(features["input_word_ids"])
    return np.concatenate([
        np.asarray(run({k: np.ascontiguousarray(features[k][i:i + BATCH], np.int32)
                        for k in IDS_INPUTS}), np.float32)
        for i in range(0, rows, BATCH)])


def real_positions(values: np.ndarray, features: dict) -> np.ndarray:
    """`values` [b, C] as they are; per token [b, seq, C]: the rows of real tokens only
    (padding's logits are never read and may differ freely)."""
    if values.ndim < 3:
        return values
    return values[np.asarray(features["input_mask"])[:, :values.shape[1]] > 0]


def task_data_dir(root: str, name: str) -> str:
    glue = os.path.join(root, "glue", name)
    return glue if os.path.isdir(glue) else os.path.join(root, name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dirs", required=True, help="comma-separated finetune dirs")
    parser.add_argument("--formats", default=",".join(FORMATS),
                        help=f"comma-separated, of {', '.join(FORMATS)}; {BASELINE} always runs")
    parser.add_argument("--calibration_examples", type=int, default=300,
                        help="first N training examples: static_int8's calibration text")
    parser.add_argument("--data_dir", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--work_dir", default="/tmp/export_precision_quality")
    args = parser.parse_args()
    formats = [BASELINE] + [f for f in args.formats.split(",") if f and f != BASELINE]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        parser.error(f"--formats: unknown {', '.join(unknown)}; known: {', '.join(FORMATS)}")

    import tensorflow_text  # noqa: F401  (the SavedModels' raw-text ops, loaded with them)

    from bert_tf.model import model_dir
    from bert_tf.tasks import task_from_config

    report = {}
    for directory in args.model_dirs.split(","):
        resolved = model_dir.resolve(directory)
        name = resolved.task_config["task_name"]
        task = task_from_config(resolved.task_config, resolved.tokenizer(),
                                data_dir=task_data_dir(args.data_dir, name))
        dev = task.get_examples("dev")
        features = task.convert_examples(dev, "dev")
        model_work_dir = os.path.join(args.work_dir, os.path.basename(directory.rstrip("/")))
        os.makedirs(model_work_dir, exist_ok=True)
        calibration_file = os.path.join(model_work_dir, "calibration.txt")
        with open(calibration_file, "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in calibration_lines(
                task.get_examples("train")[:args.calibration_examples]))
        entry = report.setdefault(name, {"model_dir": directory, "dev_examples": len(dev)})
        base = None
        for fmt in formats:
            start = time.time()
            path = export(fmt, directory, os.path.join(model_work_dir, fmt), calibration_file)
            logits = dev_outputs(runner(fmt, path, "logits"), features)
            predictions = task.postprocess({"logits": logits}, features, dev)
            scores = {k: float(v) for k, v in task.evaluate(predictions, dev).items()}
            row = {"export": path, "scores": scores, "seconds": time.time() - start}
            if base is None:
                base = (logits, predictions, scores)
            else:
                row["points_vs_float32"] = {k: 100 * (v - base[2][k]) for k, v in scores.items()}
                row["predictions_differing"] = int(sum(
                    a != b for a, b in zip(predictions, base[1])))
                diff = real_positions(np.abs(logits - base[0]), features)
                row["max_abs_logit_diff"] = float(diff.max())
                row["mean_abs_logit_diff"] = float(diff.mean())
            entry[fmt] = row
            line = ", ".join(
                f"{k} {100 * v:.2f}" + (f" ({row['points_vs_float32'][k]:+.2f})"
                                        if "points_vs_float32" in row else "")
                for k, v in scores.items())
            if "predictions_differing" in row:
                line += (f"; predictions differing {row['predictions_differing']}; logits "
                         f"|diff| mean {row['mean_abs_logit_diff']:.4f}, max "
                         f"{row['max_abs_logit_diff']:.4f}")
            print(f"{name} dev ({len(dev)}) {fmt}: {line}", flush=True)
    os.makedirs(args.work_dir, exist_ok=True)
    out = os.path.join(args.work_dir, "export_precision_quality.json")
    with open(out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
