"""Where a TensorFlow function's time goes, op by op: a TF profiler trace summed by op type.

    with op_profile.trace(logdir):
        step()                       # the calls to profile (after warm-up)
    print(op_profile.table(op_profile.read(logdir), calls=n))

`read` sums the kernels' own time from the trace (`tf.profiler.experimental`, the XPlane
file) by op type and by phase: "backward" for ops under the gradient tape's
`gradient_tape/` name scope (the backward pass), "update" for the optimizer's apply ops,
"forward" for the rest. Kernel times add up across threads, so with inter-op parallelism
their sum can exceed the wall time; `table` prints both.
"""

from __future__ import annotations

import collections
import contextlib
import glob
import os
import time

import tensorflow as tf

UPDATE_OPS = ("ResourceApplyAdam", "AssignSubVariableOp", "AssignAddVariableOp",
              "AssignVariableOp")


@contextlib.contextmanager
def trace(logdir: str):
    """Profiles the enclosed calls into `logdir` (yields a dict that gets 'wall_s')."""
    timing = {}
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    try:
        yield timing
    finally:
        timing["wall_s"] = time.perf_counter() - start
        tf.profiler.experimental.stop()


def phase_of(op_name: str, op_type: str) -> str:
    """'backward' / 'update' / 'forward' from the op's graph name and type.

    >>> phase_of("gradient_tape/encoder/layer_0/output/MatMul", "_MklNativeFusedMatMul")
    'backward'
    >>> phase_of("AdamWeightDecay/update_3/ResourceApplyAdam", "ResourceApplyAdam")
    'update'
    >>> phase_of("encoder/layer_0/output/MatMul", "_MklNativeFusedMatMul")
    'forward'
    """
    if "gradient_tape/" in op_name or "/gradients/" in op_name:
        return "backward"
    if op_type in UPDATE_OPS or "ResourceApply" in op_type:
        return "update"
    return "forward"


def read(logdir: str) -> dict:
    """{(phase, op type): [total seconds, count]} from the newest trace under `logdir`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True),
                   key=os.path.getmtime)
    if not paths:
        raise FileNotFoundError(f"no *.xplane.pb under {logdir}")
    space = xplane_pb2.XSpace()
    with open(paths[-1], "rb") as f:
        space.ParseFromString(f.read())
    totals = collections.defaultdict(lambda: [0.0, 0])
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            for event in line.events:
                meta = plane.event_metadata[event.metadata_id]
                # Kernel events are named "<op name>:<op type>" with the type as display name.
                # "Iterator::*" events are the input pipeline's waits, not kernel work.
                if (not meta.display_name or ":" not in meta.name
                        or meta.name.startswith("Iterator::")):
                    continue
                op_name = meta.name.rsplit(":", 1)[0]
                key = (phase_of(op_name, meta.display_name), meta.display_name)
                totals[key][0] += event.duration_ps * 1e-12
                totals[key][1] += 1
    return dict(totals)


def table(totals: dict, calls: int, wall_s: float = None, top: int = 25) -> str:
    """The per-call op time by phase and by op type (largest first), as text."""
    total = sum(seconds for seconds, _ in totals.values()) or 1e-12
    lines = []
    if wall_s is not None:
        lines.append(f"wall {wall_s / calls * 1e3:.1f} ms per call; kernels {total / calls * 1e3:.1f} "
                     f"ms per call (summed over threads)")
    phases = collections.Counter()
    for (phase, _), (seconds, _) in totals.items():
        phases[phase] += seconds
    lines.append("by phase: " + ", ".join(f"{phase} {seconds / total:.1%}"
                                          for phase, seconds in phases.most_common()))
    lines.append(f"{'phase':9s} {'op type':36s} {'ms/call':>8s} {'share':>6s} {'ops/call':>8s}")
    for (phase, op_type), (seconds, count) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{phase:9s} {op_type:36s} {seconds / calls * 1e3:8.2f} "
                     f"{seconds / total:6.1%} {count / calls:8.1f}")
    return "\n".join(lines)
