r"""Where a SavedModel export's serving time goes, op by op (TF profiler), at one shape.

Loads an export (`export_model`'s version directory) as TF Serving would, with the
weights pre-packed (`TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1`, docs/serving.md), calls its ids
signature (`serving_ids` of a task export, `serving_default` of an encoder's) on random
ids of `--batch` x `--seq_length`, or its raw-text signature on the first `--batch`
examples of a GLUE dev set (`--glue_dev=sst-2` sentences or `mrpc` pairs, read as
serving_latency.py reads them), and prints the kernel time per call by op type
(benchmarks/op_profile.py), the dense products' share of it and the time between kernels.
Ops run one at a time (one inter-op thread) so kernel times add up to the call; the
question it answers is what is not a dense product, the part issue 43 item 3 asks to
shrink. The peer for the time itself is serving_latency.py; this script only splits it.

    PYTHONPATH=. KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/serving_profile.py \
        --export=/tmp/s43/w3/export/sst-2_bf16/1 --batch=32 --seq_length=128 \
        [--glue_dev=sst-2] [--calls=10] [--threads=2]
"""

import argparse
import os
import tempfile
import time

import numpy as np

from serving_latency import FROZEN_WEIGHTS_ENV, glue_dev

os.environ.setdefault(FROZEN_WEIGHTS_ENV, "1")  # before TensorFlow loads

#: op types that are dense products (oneDNN's fused matmuls, the attention's batched ones)
PRODUCTS = ("_MklNativeFusedMatMul", "_MklFusedMatMul", "_MklMatMul", "MatMul",
            "_MklNativeBatchMatMulV2", "_MklBatchMatMulV2", "BatchMatMulV2",
            "_FusedMatMul", "_MklNativeFusedBatchMatMulV2", "_MklFusedBatchMatMulV2")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", required=True, help="an export's version directory")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--glue_dev", default=None, choices=["sst-2", "mrpc"],
                        help="raw-text signature on this dev set instead of random ids")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--logdir", default=None)
    args = parser.parse_args()

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the raw-text signatures' ops)

    import op_profile
    from bert_tf.serving.modules import IDS_SIGNATURE, SERVING_DEFAULT, TEXT_SIGNATURE

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    signatures = tf.saved_model.load(args.export).signatures
    if args.glue_dev:
        rows = glue_dev(args.glue_dev)[:args.batch]
        name = TEXT_SIGNATURE if TEXT_SIGNATURE in signatures else SERVING_DEFAULT
        fn = signatures[name]
        inputs = {key: tf.constant([row[i] for row in rows])
                  for i, key in enumerate(("text", "text_b")[:len(rows[0])])}
        shape = f"{len(rows)} {args.glue_dev} dev examples, raw text"
    else:
        name = IDS_SIGNATURE if IDS_SIGNATURE in signatures else SERVING_DEFAULT
        fn = signatures[name]
        ids = np.random.default_rng(0).integers(1000, 2000, (args.batch, args.seq_length))
        inputs = {"input_word_ids": tf.constant(ids, tf.int32),
                  "input_mask": tf.ones(ids.shape, tf.int32),
                  "input_type_ids": tf.zeros(ids.shape, tf.int32)}
        shape = f"{args.batch} x {args.seq_length} ids"
    def calls(count):
        for _ in range(count):
            tf.nest.map_structure(lambda t: t.numpy(), fn(**inputs))

    calls(3)
    start = time.perf_counter()
    calls(args.calls)
    untraced = (time.perf_counter() - start) / args.calls
    logdir = args.logdir or tempfile.mkdtemp(prefix="serving_profile_")
    with op_profile.trace(logdir) as timing:
        calls(args.calls)
    totals = op_profile.read(logdir)
    kernels = sum(s for s, _ in totals.values())
    products = sum(s for (_, op), (s, _) in totals.items() if op in PRODUCTS)
    print(f"{args.export} {name}, {shape}, {args.threads} threads, one op at a time: "
          f"{untraced * 1e3:.1f} ms a call untraced")
    print(op_profile.table(totals, args.calls, timing["wall_s"]))
    print(f"dense products {products / args.calls * 1e3:.1f} ms a call = "
          f"{products / kernels:.0%} of kernel time; everything else "
          f"{(kernels - products) / args.calls * 1e3:.1f} ms; between kernels "
          f"{max(timing['wall_s'] - kernels, 0) / args.calls * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
