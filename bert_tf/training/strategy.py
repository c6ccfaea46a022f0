"""tf.distribute strategies by name (`--distribution_strategy`).

    one_device             the first GPU if any, else the CPU
    mirrored               all local GPUs (or all logical CPUs), all-reduce per step
    multi_worker_mirrored  every worker of `TF_CONFIG` (JSON: cluster + this task)
    tpu                    the TPU named by `tpu` ("" or "local" for a TPU VM's own)

Create the strategy before anything else touches TensorFlow devices (multi-worker and
TPU set up the cluster at creation).

Example:

>>> strategy = get_strategy("one_device")
>>> strategy.num_replicas_in_sync
1
"""

from __future__ import annotations

import json
import logging
import os
from typing import Optional

import tensorflow as tf

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")


def get_strategy(name: str, tpu: Optional[str] = None,
                 all_reduce_alg: Optional[str] = None) -> tf.distribute.Strategy:
    """Returns the tf.distribute.Strategy called `name` (one of STRATEGIES).

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
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu="" if tpu in (None, "local") else tpu)
        if tpu not in (None, "", "local"):
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        logging.info("TPU %s: %d cores", tpu or "local",
                     resolver.num_accelerators().get("TPU", 0))
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(f"--distribution_strategy={name!r}: expected one of {', '.join(STRATEGIES)}")


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
    types = {tf.DeviceSpec.from_string(d).device_type
             for d in strategy.extended.worker_devices}
    return tf.distribute.InputOptions(experimental_fetch_to_device=types != {"CPU"})
