"""`InferenceLoop`: THE inference loop, under `Trainer.evaluate`, `Trainer.predict`
(`bert_tf.training.loop`) and `bert_tf.extract_features`; see the class."""

from __future__ import annotations

from typing import Callable, Dict, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

from bert_tf.core.errors import StopRequested
from bert_tf.training.strategy import (get_strategy, input_options, needs_static_shapes,
                                       num_workers)

# What a length-bucketed prediction holds at the positions its bucket cut off (the
# attention mask's constant for padded keys).
PADDED_OUTPUT_VALUE = -10000.0


def _relax_batch_dimension(*element):
    """Dataset map: the same tensors with an unknown first (batch) dimension."""
    def relax(t):
        return tf.compat.v1.placeholder_with_default(t, [None] + t.shape.as_list()[1:])
    return tf.nest.map_structure(relax, element)


def _any_length(spec):
    """`spec` (a dataset's element_spec) with the sequence axis (the last axis of rank
    >= 2 tensors, where `predict` cuts bucketed rows) unknown, so one trace serves every
    bucket length; unchanged when it holds per-replica (composite) specs, which keep one
    trace per length."""
    leaves = tf.nest.flatten(spec)
    if not all(type(s) is tf.TensorSpec for s in leaves):
        return spec
    return tf.nest.map_structure(
        lambda s: tf.TensorSpec(s.shape[:-1].concatenate([None]), s.dtype, s.name)
        if s.shape.rank >= 2 else s, spec)


class InferenceLoop:
    """THE inference loop: a function of model inputs run over data under a strategy.

    `Trainer.evaluate` (sums of loss and metrics over a dataset), `Trainer.predict` (the
    tasks' outputs per example) and `bert_tf.extract_features` (per-token layers) all
    run here. Each step function is traced once per input signature and kept.

    * `predict(features, batch_size)`: rows of in-memory arrays -> numpy outputs in row
      order. Batches have a static size (a multiple of the replica count; TPUs need it):
      the rows are padded with zero rows to a whole number of batches, whose outputs are
      dropped. Each input pipeline (one per worker) takes every k-th row and every row
      carries its index, so under multi_worker_mirrored each worker gathers all workers'
      outputs (`strategy.gather`) and every worker returns the same complete arrays.
    * `sum(dataset_fn, replica_fn)`: the sums over every batch and replica of what
      `replica_fn(features, labels)` returns (a nest of scalars).

    >>> import numpy as np
    >>> loop = InferenceLoop(lambda x: {"double": 2 * x["input_word_ids"]})
    >>> loop.predict({"input_word_ids": np.arange(5, dtype="int32")[:, None]},
    ...              batch_size=2)["double"].ravel().tolist()
    [0, 2, 4, 6, 8]
    """

    def __init__(self, fn: Callable, strategy: Optional[tf.distribute.Strategy] = None):
        self.fn = fn
        # No strategy: the one device (the default strategy cannot distribute datasets).
        self.strategy = strategy or get_strategy("one_device")
        # Several workers: outputs are gathered so that every worker holds every row.
        self._several_workers = num_workers(strategy) > 1
        self._steps = []

    def _distribute(self, dataset_fn):
        return self.strategy.distribute_datasets_from_function(
            dataset_fn, input_options(self.strategy))

    def _step(self, kind, spec, build):
        """The step function of `kind` for inputs of `spec`, traced once and kept (specs
        hold dicts: compared, not hashed)."""
        for known_kind, known_spec, step in self._steps:
            if known_kind == kind and known_spec == spec:
                return step
        step = tf.function(build(), autograph=False, input_signature=list(spec))
        self._steps.append((kind, spec, step))
        return step

    def predict(self, features: Mapping[str, np.ndarray], batch_size: int,
                input_names: Optional[Sequence[str]] = None,
                length_buckets: Optional[Sequence[int]] = None) -> Dict[str, np.ndarray]:
        """`fn` over every row of `features` (only `input_names`, default all keys,
        int32); a dict of numpy arrays [rows, ...] in row order (see the class doc).

        With `length_buckets` (inputs [rows, seq] with an `input_mask`), rows run in
        batches cut to the shortest bucket length that holds them; outputs with the
        batch's sequence length on axis 1 (per-token outputs) are padded back to seq.
        When every row falls in one bucket, nothing is cut (so no output can be
        mistaken for a per-token one). The padding value is PADDED_OUTPUT_VALUE: as a
        logit (the tasks' outputs are logits) a padded position is never a best
        candidate (SQuAD's n-best spans, a tag's argmax).
        """
        replicas = self.strategy.num_replicas_in_sync
        batch_size = max(replicas, -(-int(batch_size) // replicas) * replicas)
        names = list(input_names or features)
        inputs = {k: np.asarray(features[k], np.int32) for k in names if k in features}
        n = len(next(iter(inputs.values())))
        seq = inputs["input_word_ids"].shape[-1] if "input_word_ids" in inputs else None
        groups = [(np.arange(n), seq)]
        if length_buckets and "input_mask" in inputs and inputs["input_mask"].ndim == 2:
            bounds = sorted(set(int(b) for b in length_buckets if b < seq)) + [seq]
            bucket = np.searchsorted(bounds, inputs["input_mask"].sum(axis=1))
            used = np.unique(bucket)
            if len(used) > 1:
                groups = [(np.flatnonzero(bucket == b), bounds[b]) for b in used]
        results = [self._predict_batches({k: v[rows][..., :width] for k, v in inputs.items()},
                                         batch_size) for rows, width in groups]
        widths = [width for _, width in groups]
        keep = np.argsort(np.concatenate([rows for rows, _ in groups]))
        merged = {}
        for key in results[0]:
            values = [r[key] for r in results]
            # Per-token: axis 1 follows the batch's length in every group (two or more
            # different lengths, so a fixed-size axis cannot match them all).
            if len(groups) > 1 and all(v.ndim >= 2 and v.shape[1] == w
                                       for v, w in zip(values, widths)):
                values = [np.pad(v, [(0, 0), (0, seq - w)] + [(0, 0)] * (v.ndim - 2),
                                 constant_values=PADDED_OUTPUT_VALUE)
                          for v, w in zip(values, widths)]
            merged[key] = np.concatenate(values)[keep]
        return merged

    def _predict_batches(self, inputs, batch_size) -> Dict[str, np.ndarray]:
        """`fn` over `inputs` (same shapes per row) in static batches; outputs in order."""
        strategy = self.strategy
        n = len(next(iter(inputs.values())))
        extra = (-n) % batch_size
        if extra:
            inputs = {k: np.concatenate([v, np.zeros((extra,) + v.shape[1:], v.dtype)])
                      for k, v in inputs.items()}
        rows = np.arange(n + extra, dtype=np.int32)

        def dataset_fn(ctx):
            dataset = tf.data.Dataset.from_tensor_slices((inputs, rows))
            # By row, not by file: every pipeline gets the same number of whole batches.
            dataset = dataset.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            return dataset.batch(ctx.get_per_replica_batch_size(batch_size),
                                 drop_remainder=True)

        dataset = self._distribute(dataset_fn)
        gather = self._several_workers
        fn = tf.autograph.experimental.do_not_convert(self.fn)

        def build():
            def step(batch, batch_rows):
                outputs = strategy.run(fn, args=(batch,))
                if gather:
                    return (tf.nest.map_structure(lambda t: strategy.gather(t, axis=0),
                                                  outputs),
                            strategy.gather(batch_rows, axis=0))
                return outputs, batch_rows
            return step

        # Length-bucketed rows: one trace for all lengths (but TPUs need static shapes).
        spec = dataset.element_spec
        if not needs_static_shapes(strategy):
            spec = _any_length(spec)
        step = self._step("predict", spec, build)

        def local(value):
            if gather:
                return np.asarray(value)
            parts = strategy.experimental_local_results(value)
            return np.concatenate([np.asarray(t) for t in parts])

        parts: Dict[str, list] = {}
        order = []
        for batch, batch_rows in dataset:
            outputs, out_rows = step(batch, batch_rows)
            order.append(local(out_rows))
            for key, value in outputs.items():
                parts.setdefault(key, []).append(local(value))
        order = np.concatenate(order)
        if sorted(order.tolist()) != list(range(n + extra)):
            raise RuntimeError(f"predict: got rows {sorted(order.tolist())[:20]}... for "
                               f"{n + extra} inputs; the strategy lost or repeated rows")
        keep = np.argsort(order)[:n]
        return {k: np.concatenate(v)[keep] for k, v in parts.items()}

    def sum(self, dataset_fn: Callable, replica_fn: Callable,
            num_steps: Optional[int] = None, stop_flag: Optional[tf.Variable] = None):
        """(sums over batches and replicas of `replica_fn(features, labels)` as floats,
        number of batches), over at most `num_steps` batches of `dataset_fn`'s data.

        `stop_flag` (a host bool variable, the PreemptionWatcher's): each worker's flag is
        summed with the batch's values, so every worker sees a stop request after the
        same batch; then it raises StopRequested (the sums are dropped)."""
        strategy = self.strategy
        if self._several_workers:
            # Several workers: the batch dimension made unknown, so the strategy hands
            # empty batches to workers whose data has ended while others still have
            # some, and the step below is traced once for every batch size (a retrace
            # on one worker only would make the workers' collectives disagree and hang).
            # One host (TPUs included) keeps static shapes.
            relaxed_fn = lambda ctx: dataset_fn(ctx).map(_relax_batch_dimension)
        else:
            relaxed_fn = dataset_fn
        dataset = self._distribute(relaxed_fn)
        fn = tf.autograph.experimental.do_not_convert(replica_fn)
        if stop_flag is not None:
            inner = fn

            def fn(features, labels):  # the stop votes ride on the batch's reduction
                return inner(features, labels), tf.cast(stop_flag.read_value(), tf.float32)

        def build():
            def step(features, labels):
                values = strategy.run(fn, args=(features, labels))
                return tf.nest.map_structure(
                    lambda t: strategy.reduce(tf.distribute.ReduceOp.SUM, t, axis=None),
                    values)
            return step

        step = self._step(("sum", replica_fn, stop_flag is not None), dataset.element_spec,
                          build)
        totals, steps = None, 0
        for features, labels in dataset:
            if num_steps is not None and steps >= num_steps:
                break
            values = tf.nest.map_structure(lambda t: float(t.numpy()),
                                           step(features, labels))
            if stop_flag is not None:
                values, votes = values
                if votes > 0:
                    raise StopRequested(f"stop requested during evaluation (batch {steps})")
            totals = values if totals is None else tf.nest.map_structure(
                lambda a, b: a + b, totals, values)
            steps += 1
        return totals, steps
