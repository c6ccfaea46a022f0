r"""Can TensorFlow's own int8 ops beat bfloat16 for the encoder's dense layers on this CPU?

The question behind an int8 SavedModel: TF Serving runs only TF ops, and
TF 2.21's CPU int8 matmuls are (a) `tf.linalg.matmul` on int8 with an int32 result (Keras'
`Dense.quantize("int8")` path) and (b) the quantized-op family that oneDNN implements,
`QuantizeV2` + `QuantizedMatMulWithBiasAndDequantize` (uint8 activations x int8 weights,
VNNI kernels). A dynamic-range int8 dense layer must also find its input's range and
quantize it on every call (`reduce_min`/`reduce_max` + `QuantizeV2`). This times, for
MiniLM-L6-H384's dense shapes (fused QKV [384, 1152], attention output [384, 384], FFN
[384, 1536] and [1536, 384]) at 1 x 128 and 32 x 128 tokens, in one process and in rounds:

* float32 and bfloat16 `MatMul` + `BiasAdd` (what our float32 / bfloat16 exports run),
* int8 (a): `tf.linalg.matmul(int8, int8, output_type=int32)` + rescale,
* int8 (b): dynamic range quantization + `QuantizedMatMulWithBiasAndDequantize`,

and reports GFLOP/s (FLOPs of the float product) and each one's time over bfloat16's, and
the largest error of each product against float32 relative to the output's largest value.
An int8 path is usable only where that error is small (bfloat16's is about 4e-3): (b)'s
kernels are oneDNN-only internal ops without a documented contract, and with the arguments
here (uint8 MIN_FIRST activations, symmetric int8 weights) their results are not the
product (its error column shows it; QuantizedMatMulWithBias' int32 accumulators are not
q(x) @ q(w) either), so (b) times the kernels, not a working int8 layer.

    PYTHONPATH=. python benchmarks/int8_dense_products.py [--threads=2] [--rounds=5]
"""

import argparse
import os
import statistics
import time

import numpy as np

SHAPES = [(384, 1152), (384, 384), (384, 1536), (1536, 384)]  # MiniLM's dense (in, out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rng = np.random.default_rng(0)
    flags = open("/proc/cpuinfo").read().split("flags", 1)[1].split("\n", 1)[0].split()
    model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                 if line.startswith("model name"))
    print(f"CPU: {model}; flags "
          f"{' '.join(f for f in ('avx512_vnni', 'avx512_bf16', 'amx_bf16', 'amx_int8') if f in flags)}"
          f"; load average {os.getloadavg()[0]:.2f}")
    for rows in (128, 32 * 128):
        weights = [(rng.standard_normal(s) * 0.05).astype(np.float32) for s in SHAPES]
        biases = [(rng.standard_normal(s[1]) * 0.05).astype(np.float32) for s in SHAPES]
        inputs = {k: rng.standard_normal((rows, k)).astype(np.float32) for k in (384, 1536)}
        w32 = [tf.Variable(w) for w in weights]
        b32 = [tf.Variable(b) for b in biases]
        w16 = [tf.Variable(tf.cast(w, tf.bfloat16)) for w in weights]
        b16 = [tf.Variable(tf.cast(b, tf.bfloat16)) for b in biases]
        x32 = {k: tf.constant(v) for k, v in inputs.items()}
        x16 = {k: tf.cast(v, tf.bfloat16) for k, v in x32.items()}
        # Symmetric per-tensor int8 weights, stored quantized (as an int8 export would).
        scales = [float(np.abs(w).max()) for w in weights]
        wq = [tf.Variable(np.round(w / s * 127).astype(np.int8)) for w, s in zip(weights, scales)]

        @tf.function
        def fp32():
            return [tf.nn.bias_add(tf.matmul(x32[w.shape[0]], w), b) for w, b in zip(w32, b32)]

        @tf.function
        def bf16():
            return [tf.nn.bias_add(tf.matmul(x16[w.shape[0]], w), b) for w, b in zip(w16, b16)]

        @tf.function
        def int8_matmul():  # (a): int8 x int8 -> int32 (Eigen), dynamic symmetric inputs
            out = []
            for w, s, b in zip(wq, scales, b32):
                x = x32[w.shape[0]]
                xs = tf.reduce_max(tf.abs(x)) / 127.0
                xq = tf.cast(tf.round(x / xs), tf.int8)
                acc = tf.linalg.matmul(xq, w, output_type=tf.int32)
                out.append(tf.cast(acc, tf.float32) * (xs * s / 127.0) + b)
            return out

        @tf.function
        def int8_onednn():  # (b): QuantizeV2 (uint8, input's own range) + oneDNN VNNI matmul
            out = []
            for w, s, b in zip(wq, scales, b32):
                x = x32[w.shape[0]]
                q = tf.quantization.quantize(x, tf.reduce_min(x), tf.reduce_max(x), tf.quint8,
                                             mode="MIN_FIRST")
                out.append(tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
                    a=q.output, b=tf.bitcast(w, tf.qint8), bias=b, min_a=q.output_min, max_a=q.output_max,
                    min_b=-s, max_b=s, min_freezed_output=-1.0, max_freezed_output=1.0,
                    Toutput=tf.float32, input_quant_mode="MIN_FIRST"))
            return out

        contestants = {"float32": fp32, "bfloat16": bf16, "int8 tf.linalg.matmul": int8_matmul,
                       "int8 QuantizedMatMulWithBiasAndDequantize": int8_onednn}
        want = [v.numpy() for v in fp32()]
        errors = {}
        for name, fn in contestants.items():
            got = [np.asarray(tf.cast(v, tf.float32)) for v in fn()]
            errors[name] = max(float(np.abs(g - w).max() / np.abs(w).max())
                               for g, w in zip(got, want))
        times = {name: [] for name in contestants}
        for _ in range(args.rounds):
            for name, fn in contestants.items():
                for _ in range(args.calls):
                    start = time.perf_counter()
                    [v.numpy() for v in fn()]
                    times[name].append(time.perf_counter() - start)
        flops = sum(2 * rows * k * n for k, n in SHAPES)
        base = statistics.median(times["bfloat16"])
        print(f"-- {rows} tokens (MiniLM's 4 dense products of one layer, bias included)")
        for name, values in times.items():
            s = statistics.median(values)
            print(f"   {name:44s} {s * 1e3:8.2f} ms {flops / s / 1e9:6.0f} GFLOP/s   "
                  f"time / bfloat16's {s / base:5.2f}   max error / max |y| {errors[name]:.1e}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
