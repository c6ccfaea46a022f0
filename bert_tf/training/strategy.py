"""tf.distribute strategies by name (`--distribution_strategy`).

    one_device             the first GPU if any, else the CPU
    mirrored               all local GPUs (or all logical CPUs), all-reduce per step
    multi_worker_mirrored  every worker of `TF_CONFIG` (JSON: cluster + this task)
    tpu                    the TPU named by `tpu` ("local", the default: a TPU VM's own)

Create the strategy before anything else touches TensorFlow devices (multi-worker and
TPU set up the cluster at creation).

Example:

>>> strategy = get_strategy("one_device")
>>> strategy.num_replicas_in_sync
1
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
from typing import Callable, Iterator, Mapping, Optional

import tensorflow as tf

from bert_tf.core.errors import UsageError

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


def set_precision_and_seed(mixed_precision: Optional[str], seed: Optional[int],
                           strategy: Optional[tf.distribute.Strategy] = None) -> str:
    """Keras' global dtype policy (--mixed_precision, one of PRECISIONS; None: this
    machine's default for `strategy`, `default_mixed_precision`, logged when it is not
    float32) and, unless `seed` is None, its global seed (initializers, dropout): set
    before the model is built, float32 included (an earlier run in this process may have
    left another policy). Call it inside `restoring_process_state`, which puts both back
    when the run ends. Returns the policy's name."""
    import keras

    if mixed_precision is None:
        mixed_precision = ("float32" if strategy is None
                           else default_mixed_precision(strategy))
        if mixed_precision != "float32":
            logging.info("--mixed_precision=%s: this CPU has AMX, which runs bfloat16 "
                         "matmuls about 3x faster than float32 (variables, LayerNorm and "
                         "the loss stay float32); --mixed_precision=float32 turns it off",
                         mixed_precision)
    if seed is not None:
        keras.utils.set_random_seed(seed)
    keras.mixed_precision.set_global_policy(mixed_precision)
    return mixed_precision


@contextlib.contextmanager
def restoring_process_state() -> Iterator[None]:
    """Runs a command's `run` so that what it sets for the whole process is put back
    when it ends, however it ends: Keras' global dtype policy, the Python, NumPy,
    TensorFlow and Keras global seeds. A second run in the same process (a notebook,
    a sweep, the tests) then starts as in a fresh one.

    >>> import keras
    >>> with restoring_process_state():
    ...     _ = set_precision_and_seed("mixed_bfloat16", seed=1)
    >>> keras.config.dtype_policy().name
    'float32'
    """
    import random

    import keras
    import numpy as np
    # Keras keeps its global seeds only in its private global state.
    from keras.src.backend.common import global_state
    from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR
    from keras.src.utils.rng_utils import GLOBAL_RANDOM_SEED
    from tensorflow.python.eager import context

    policy = keras.config.dtype_policy()
    python_rng, numpy_rng = random.getstate(), np.random.get_state()
    tf_seed = context.global_seed()
    keras_seeds = {name: global_state.get_global_attribute(name)
                   for name in (GLOBAL_RANDOM_SEED, GLOBAL_SEED_GENERATOR)}
    try:
        yield
    finally:
        keras.config.set_dtype_policy(policy)
        random.setstate(python_rng)
        np.random.set_state(numpy_rng)
        tf.random.set_seed(tf_seed)
        for name, value in keras_seeds.items():
            global_state.set_global_attribute(name, value)


def original_tpu_strategy(settings, **factories) -> Optional[tf.distribute.Strategy]:
    """The TPUStrategy the original TPU flags ask for (`--use_tpu`, with `--tpu_name` else
    `--master`, `--tpu_zone`, `--gcp_project`, `--num_tpu_cores`), else None: how
    extract_features, which has only those flags, picks its device. `factories` go to
    `get_strategy` (tests without a TPU)."""
    if not settings.use_tpu:
        return None
    return get_strategy("tpu", tpu=settings.tpu_name or settings.master,
                        tpu_zone=settings.tpu_zone, gcp_project=settings.gcp_project,
                        num_tpu_cores=settings.num_tpu_cores, **factories)


def get_strategy(name: str, tpu: Optional[str] = None,
                 all_reduce_alg: Optional[str] = None, *, tpu_zone: Optional[str] = None,
                 gcp_project: Optional[str] = None, num_tpu_cores: Optional[int] = None,
                 tpu_resolver_factory: Optional[Callable] = None,
                 tpu_strategy_factory: Optional[Callable] = None,
                 tpu_initializer: Optional[Callable] = None) -> tf.distribute.Strategy:
    """Returns the tf.distribute.Strategy called `name` (one of STRATEGIES).

    For `tpu`: `tpu` is a Cloud TPU name, a `grpc://` address or `"local"` (a TPU VM's own
    TPU; also the default when `tpu` is None or ""), `tpu_zone`/`gcp_project` locate a
    named TPU, `num_tpu_cores` (the original `--num_tpu_cores`) uses only that many cores
    (default: all). `tpu_resolver_factory` (default `TPUClusterResolver`) and
    `tpu_strategy_factory` (default `TPUStrategy`) and `tpu_initializer(resolver,
    remote) -> topology` (default: connect to a remote TPU, then `initialize_tpu_system`)
    are for tests without a TPU.

    Raises ValueError for an unknown name, or for multi_worker_mirrored without a
    TF_CONFIG naming this task.
    """
    if name == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
        cross_device = None
        if not gpus:
            # NCCL does not exist for CPUs; reduce on the host.
            cross_device = tf.distribute.ReductionToOneDevice()
        return tf.distribute.MirroredStrategy(devices, cross_device_ops=cross_device)
    if name == "multi_worker_mirrored":
        config = os.environ.get("TF_CONFIG")
        if not config or "task" not in json.loads(config):
            raise ValueError("--distribution_strategy=multi_worker_mirrored needs the "
                             "TF_CONFIG environment variable (cluster and this task), e.g. "
                             '{"cluster": {"worker": ["host1:2222", "host2:2222"]}, '
                             '"task": {"type": "worker", "index": 0}}')
        options = None
        if all_reduce_alg:
            impl = {"ring": tf.distribute.experimental.CommunicationImplementation.RING,
                    "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL}
            options = tf.distribute.experimental.CommunicationOptions(
                implementation=impl[all_reduce_alg])
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if name == "tpu":
        return _tpu_strategy(tpu, tpu_zone, gcp_project, num_tpu_cores,
                             tpu_resolver_factory or
                             tf.distribute.cluster_resolver.TPUClusterResolver,
                             tpu_strategy_factory or tf.distribute.TPUStrategy,
                             tpu_initializer or _initialize_tpu)
    raise ValueError(f"--distribution_strategy={name!r}: expected one of {', '.join(STRATEGIES)}")


def _initialize_tpu(resolver, remote: bool):
    if remote:
        # A TPU node or pod slice driven from this host: its workers are remote.
        tf.config.experimental_connect_to_cluster(resolver)
    return tf.tpu.experimental.initialize_tpu_system(resolver)


def _tpu_strategy(tpu, zone, project, num_cores, resolver_factory, strategy_factory,
                  initializer):
    # "local" is what attaches a TPU VM's own chips; "" would take the Cloud TPU *node*
    # path (look up TPU_NAME / the metadata server) and fail on a TPU VM.
    tpu = tpu or "local"
    resolver = resolver_factory(tpu=tpu, zone=zone, project=project)
    topology = initializer(resolver, tpu != "local")
    total = int(topology.num_tasks * topology.num_tpus_per_task)
    device_assignment = None
    if num_cores and num_cores != total:
        if num_cores > total:
            raise ValueError(f"--num_tpu_cores={num_cores}: the TPU {tpu} has {total} cores")
        # The original's TPUConfig(num_shards=N): data parallelism over N cores only.
        device_assignment = tf.tpu.experimental.DeviceAssignment.build(
            topology, num_replicas=int(num_cores))
    logging.info("TPU %s: %d cores, using %d", tpu, total, num_cores or total)
    return strategy_factory(resolver, experimental_device_assignment=device_assignment)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the task that writes checkpoints and summaries (always true off-cluster)."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return True  # one host drives the pod slice here
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    cluster = resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in cluster


def needs_static_shapes(strategy: tf.distribute.Strategy) -> bool:
    """Whether every input shape must be static under `strategy`: on TPUs (XLA compiles
    the whole program once per shape). So no length buckets there (finetune's batches
    are padded to --max_seq_length) and no traces with an unknown sequence length.

    >>> needs_static_shapes(get_strategy("one_device"))
    False
    """
    return isinstance(strategy, tf.distribute.TPUStrategy)


def replicas_on_cpus(strategy: tf.distribute.Strategy) -> bool:
    """Whether every replica of `strategy` runs on a CPU (no GPU or TPU).

    >>> replicas_on_cpus(get_strategy("one_device"))  # this machine has no GPU
    True
    """
    return {tf.DeviceSpec.from_string(d).device_type
            for d in strategy.extended.worker_devices} == {"CPU"}


def input_options(strategy: tf.distribute.Strategy) -> tf.distribute.InputOptions:
    """How `strategy` should distribute datasets: fetch to the devices unless all are CPUs.

    When every replica runs on a CPU the batches are already in host memory, so there
    is nothing to fetch; and TF's per-device prefetch iterator starts a tf.data
    autotuning thread that sleeps up to a minute between rounds, which the iterator's
    deletion waits for (measured: 42-57 s after the last step of a fine-tuning run).
    GPUs and TPUs keep the default (prefetch to the device, overlapping the copy).

    >>> input_options(get_strategy("one_device")).experimental_fetch_to_device  # on a CPU
    False
    """
    return tf.distribute.InputOptions(experimental_fetch_to_device=not replicas_on_cpus(strategy))


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """How many worker processes take part in `strategy`'s collectives (1 off-cluster
    and on TPUs, where one host drives the slice).

    >>> num_workers(get_strategy("one_device"))
    1
    """
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return 1
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return 1
    cluster = resolver.cluster_spec().as_dict()
    return sum(len(cluster.get(job, [])) for job in ("chief", "worker")) or 1


# oneDNN's ISA names at or above AVX-512 (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA values).
_AVX512_OR_ABOVE = ("AVX512", "AVX10", "AMX", "ALL", "DEFAULT")


# A testing switch: edits to the CPU flags bert_tf reads (the hardware is unchanged),
# so that the defaults decided from the CPU (precision, XLA) can be exercised on any
# machine: "+amx_bf16" makes it report AMX, "-avx512f" no AVX-512, "-amx_bf16" no AMX.
CPU_FLAGS_VARIABLE = "BERT_TF_CPU_FLAGS"


def _cpu_flags(cpuinfo: Optional[str],
               environ: Mapping[str, str] = os.environ) -> Optional[frozenset]:
    """The x86 CPU's flags (from `cpuinfo`, default /proc/cpuinfo) with the edits of
    `environ[CPU_FLAGS_VARIABLE]` applied; None when unknown (not x86 or no
    /proc/cpuinfo) and not edited.

    >>> sorted(_cpu_flags("flags\t: avx2 avx512f", {CPU_FLAGS_VARIABLE: "+amx_bf16,-avx512f"}))
    ['amx_bf16', 'avx2']
    """
    flags = None
    if cpuinfo is None and platform.machine().lower() in ("x86_64", "amd64"):
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            pass
    for line in (cpuinfo or "").splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[-1].split())
            break
    edits = environ.get(CPU_FLAGS_VARIABLE, "").replace(",", " ").split()
    for edit in edits:
        if edit[:1] not in "+-" or len(edit) < 2:
            raise UsageError(f"{CPU_FLAGS_VARIABLE}={environ[CPU_FLAGS_VARIABLE]!r}: "
                             f"each edit is +FLAG or -FLAG (e.g. +amx_bf16,-avx512f)")
        flags = set() if flags is None else flags
        (flags.add if edit[0] == "+" else flags.discard)(edit[1:])
    return None if flags is None else frozenset(flags)


def _onednn_cap(environ: Mapping[str, str]) -> str:
    """oneDNN's ISA cap (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA), upper case, or ''."""
    for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        cap = environ.get(name, "").strip().upper()
        if cap:
            return cap
    return ""


def cpu_has_avx512(cpuinfo: Optional[str] = None,
                   environ: Mapping[str, str] = os.environ) -> Optional[bool]:
    """Whether this x86 CPU's AVX-512 is usable for TF's kernels: its `avx512f` flag
    (from `cpuinfo`, default /proc/cpuinfo), unless oneDNN is capped below AVX-512
    (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA, e.g. =AVX2). None when unknown (not x86 or
    no /proc/cpuinfo).

    >>> cpu_has_avx512("flags\t: fpu sse avx2 fma avx512f avx512bw", environ={})
    True
    >>> cpu_has_avx512("flags\t: fpu sse avx2 fma avx512f", {"ONEDNN_MAX_CPU_ISA": "AVX2"})
    False
    >>> cpu_has_avx512("flags\t: fpu sse avx2 fma", environ={})
    False
    """
    cap = _onednn_cap(environ)
    if cap and not cap.startswith(_AVX512_OR_ABOVE):
        return False
    flags = _cpu_flags(cpuinfo, environ)
    return None if flags is None else "avx512f" in flags


def cpu_has_amx_bf16(cpuinfo: Optional[str] = None,
                     environ: Mapping[str, str] = os.environ) -> Optional[bool]:
    """Whether oneDNN may run bfloat16 matmuls on this x86 CPU's AMX tiles: its
    `amx_bf16` flag (Intel Sapphire Rapids and later), unless oneDNN is capped below AMX
    (e.g. ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16). None when unknown.

    >>> cpu_has_amx_bf16("flags\t: avx512f avx512_bf16 amx_bf16 amx_tile", environ={})
    True
    >>> capped = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}
    >>> cpu_has_amx_bf16("flags\t: avx512f avx512_bf16 amx_bf16", capped)
    False
    >>> cpu_has_amx_bf16("flags\t: avx512f avx512_bf16", environ={})  # AMD Zen 4 / 5
    False
    """
    cap = _onednn_cap(environ)  # oneDNN's names with AMX: AVX512_CORE_AMX(_FP16), ...
    if cap and "AMX" not in cap and cap not in ("ALL", "DEFAULT"):
        return False
    flags = _cpu_flags(cpuinfo, environ)
    return None if flags is None else "amx_bf16" in flags


def default_jit_compile(strategy: tf.distribute.Strategy,
                        has_avx512: Optional[bool] = None) -> bool:
    """Whether the training step is XLA-compiled when `--jit_compile` is not given: on
    CPU replicas of an x86 CPU without AVX-512. On such a CPU (2 cores, AVX2) XLA made
    the fine-tuning step 1.24x and the pretraining step 1.25x faster than oneDNN's
    (padded batches). An emulated AVX2 cap on an AVX-512 CPU only brackets it
    (benchmarks/README.md, finetune_quality.py --isa_cap=avx2): XLA's dots at their
    lower bound trail oneDNN with its finer length buckets, at their upper bound they
    lead; a run on a real AVX2-only CPU decides. With AVX-512 oneDNN's step is as fast
    without compiling once per bucket length, and GPUs/TPUs keep their own paths.

    >>> default_jit_compile(get_strategy("one_device"), has_avx512=False)  # a CPU
    True
    >>> default_jit_compile(get_strategy("one_device"), has_avx512=True)
    False
    """
    if not replicas_on_cpus(strategy):
        return False
    if has_avx512 is None:
        has_avx512 = cpu_has_avx512()
    return has_avx512 is False


def choose_jit_compile(jit_compile: Optional[bool], strategy: tf.distribute.Strategy) -> bool:
    """--jit_compile as given, else `default_jit_compile` for `strategy` (logged when on).

    >>> choose_jit_compile(False, get_strategy("one_device"))
    False
    """
    if jit_compile is None:
        jit_compile = default_jit_compile(strategy)
        if jit_compile:
            logging.info("XLA-compiling the training step: this CPU has no AVX-512 "
                         "(--nojit_compile to turn off)")
    return jit_compile


def default_mixed_precision(strategy: tf.distribute.Strategy,
                            has_amx_bf16: Optional[bool] = None) -> str:
    """The Keras dtype policy training uses when `--mixed_precision` is not given:
    `mixed_bfloat16` on CPU replicas of a CPU with AMX, `float32` everywhere else.

    AMX runs bfloat16 matmuls at about 3.3x float32's rate (386-439 against
    113-131 GFLOP/s on a 2-core Xeon; a whole fine-tuning step, with its elementwise
    kernels, gained 1.0-2.0x there), and bfloat16 fine-tuning (float32 variables,
    LayerNorm, softmax and loss) scored within the seed spread of float32 on MRPC, STS-B,
    CoNLL-2003 and SQuAD, two seeds each, on that CPU (benchmarks/README.md). On CPUs
    with AVX512-BF16 but no AMX bfloat16 is faster too (1.48-1.70x measured on a Zen 4
    fine-tuning step) but is not chosen for the user: pass
    `--mixed_precision=mixed_bfloat16`. GPUs and TPUs keep float32 unless asked (their
    own mixed-precision choice belongs to the user's recipe).

    >>> default_mixed_precision(get_strategy("one_device"), has_amx_bf16=True)  # a CPU
    'mixed_bfloat16'
    >>> default_mixed_precision(get_strategy("one_device"), has_amx_bf16=False)
    'float32'
    """
    if not replicas_on_cpus(strategy):
        return "float32"
    if has_amx_bf16 is None:
        has_amx_bf16 = cpu_has_amx_bf16()
    return "mixed_bfloat16" if has_amx_bf16 else "float32"
