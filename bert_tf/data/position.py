"""Where a training input stream starts: epochs whose order depends only on (seed, epoch).

A run stopped at step N and started again must read, from step N on, what the
uninterrupted run would have read (docs/contracts.md §6). Every training pipeline of bert_tf is
therefore a sequence of epochs in which epoch `e` is shuffled with a seed derived from
`(seed, e)` only (no shuffle buffer, file order or random state carries over from one
epoch to the next), and `epochs` starts that sequence at any element: whole epochs are
skipped by arithmetic, the rest of the first epoch by reading past its elements before
they are decoded or batched (a TFRecord pipeline reads at most one epoch of raw
records; an in-memory one only counts indices).

The Trainer hands each input pipeline an `InputPosition` (`Trainer.train`): the run's
seed (given, or drawn at the first start and kept in the checkpoint) and the step the
pipeline must start at; `InputPosition.batches(ctx)` is how many per-replica batches
this pipeline delivered before that step.

>>> import tensorflow as tf
>>> one_epoch = lambda e: tf.data.Dataset.range(4).map(lambda i: i + 10 * e)
>>> [int(x) for x in epochs(one_epoch).take(6)]
[0, 1, 2, 3, 10, 11]
>>> [int(x) for x in epochs(one_epoch, start=6, epoch_size=4).take(3)]
[12, 13, 20]
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import tensorflow as tf

# Epochs are numbered from 0; the stream never ends (training takes what it needs).
_NO_END = 2 ** 62


@dataclasses.dataclass(frozen=True)
class InputPosition:
    """Where a training pipeline starts: the run's data `seed` and the `step` it resumes at.

    >>> class Ctx:  # a tf.distribute.InputContext: 2 workers of 4 replicas each
    ...     num_replicas_in_sync, num_input_pipelines = 8, 2
    >>> InputPosition(seed=1, step=10).batches(Ctx())
    40
    """
    seed: int
    step: int = 0

    def batches(self, input_context: Optional[tf.distribute.InputContext]) -> int:
        """Per-replica batches this input pipeline delivered in `step` steps: each step
        takes one from it for every replica it feeds (distribute_datasets_from_function
        gives a pipeline's consecutive batches to its worker's replicas in turn)."""
        if input_context is None:
            return self.step
        replicas = input_context.num_replicas_in_sync // input_context.num_input_pipelines
        return self.step * max(1, replicas)


def epoch_seed(seed, epoch) -> tf.Tensor:
    """The int64 shuffle seed of `epoch` (a Python int or an int64 tensor)."""
    return tf.cast(seed, tf.int64) * 1000003 + tf.cast(epoch, tf.int64)


def shuffle(dataset: tf.data.Dataset, window: int, seed, epoch) -> tf.data.Dataset:
    """`dataset`'s elements permuted within consecutive windows of `window` elements,
    window i by a stateless permutation seeded by (seed, epoch, i).

    Stateless on purpose: `Dataset.shuffle` mixes its seed with TensorFlow's global seed
    (and fails on a tensor seed when that is 0), so its order would depend on what else
    the process seeded. A window of the whole epoch is a full permutation; a smaller one
    shuffles like a shuffle buffer of that size, in the same memory.

    >>> ds = shuffle(tf.data.Dataset.range(6), 3, seed=1, epoch=tf.constant(0, tf.int64))
    >>> sorted(int(x) for x in ds.take(3)), sorted(int(x) for x in ds.skip(3))
    ([0, 1, 2], [3, 4, 5])
    """
    key = epoch_seed(seed, epoch)

    def permute(i, chunk):
        rows = tf.shape(tf.nest.flatten(chunk)[0])[0]
        order = tf.random.experimental.stateless_shuffle(
            tf.range(rows), seed=tf.stack([key, tf.cast(i, tf.int64)]))
        return tf.data.Dataset.from_tensor_slices(
            tf.nest.map_structure(lambda t: tf.gather(t, order), chunk))

    return dataset.batch(max(1, int(window))).enumerate().flat_map(permute)


def epochs(epoch_fn: Callable[[tf.Tensor], tf.data.Dataset], start: int = 0,
           epoch_size: Optional[int] = None) -> tf.data.Dataset:
    """Epochs 0, 1, 2, ... of `epoch_fn(epoch)` (epoch: an int64 scalar tensor) one after
    another, without end, from element `start` on.

    With `start` > 0, `epoch_size` (elements per epoch, the same for every epoch) is
    required: whole epochs are skipped by arithmetic, the rest by `skip`.
    """
    first = offset = 0
    if start:
        if not epoch_size or epoch_size <= 0:
            raise ValueError(f"epochs: start={start} needs the epoch size (got {epoch_size})")
        first, offset = divmod(int(start), int(epoch_size))
    dataset = tf.data.Dataset.range(first, _NO_END).flat_map(epoch_fn)
    # Known to be infinite (as `repeat()` would be): multi_worker_mirrored keeps a static
    # batch dimension only for infinite datasets.
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(
        tf.data.INFINITE_CARDINALITY))
    return dataset.skip(offset) if offset else dataset
