"""The Trainer's compiled step functions: one training step per replica, the
`steps_per_loop` block around it, and the evaluation step (`bert_tf.training.loop`).

The block is one `tf.function` (`strategy.run` in a `tf.while_loop`) whose condition
depends only on the step count and the host-side preemption flag, so a TPU runs the
steps back to back; the loss and metrics are summed on the side and read once per block,
and the first non-finite loss is remembered (step and value) for the host to raise on.

Mixed float16: a step the loss scaler skips (non-finite gradients) still counts as a
step: the optimizer's `iterations` (the learning-rate schedule's step) is set to the
Trainer's `step` after each step, so the schedule never lags the step counter.
"""

from __future__ import annotations

import inspect
from typing import Callable, Optional

import tensorflow as tf

from bert_tf.data.position import InputPosition
from bert_tf.layers import dropout
from bert_tf.training.strategy import input_options, needs_static_shapes


def inner_optimizer(optimizer):
    """The optimizer a loss-scale wrapper holds (its schedule and `iterations`), or itself."""
    return getattr(optimizer, "inner_optimizer", optimizer)


def split_batch(tree, parts: int):
    """Each [batch, ...] tensor of `tree` -> [parts, batch / parts, ...] (the batch is
    static; other axes may not be: length-bucketed batches).

    >>> split_batch({"x": tf.zeros([4, 3])}, 2)["x"].shape
    TensorShape([2, 2, 3])
    """
    def reshape(t):
        shape = t.shape.as_list()
        rest = [tf.shape(t)[i] if d is None else d for i, d in enumerate(shape) if i > 0]
        return tf.reshape(t, [parts, shape[0] // parts] + rest)
    return tf.nest.map_structure(reshape, tree)


def check_model_and_optimizer(model, optimizer, strategy: tf.distribute.Strategy) -> None:
    """Refuses a model the steps cannot train on `strategy`: unbuilt, built outside
    `strategy.scope()`, or (several replicas) with an optimizer that expects the
    gradients of one replica."""
    variables = model.trainable_variables
    if not variables:
        raise ValueError("Trainer: the model has no trainable variables; build it first")
    first = variables[0]
    if not strategy.extended.variable_created_in_scope(getattr(first, "value", first)):
        raise ValueError("Trainer: the model's variables were not created under "
                         "`strategy.scope()`; build the model (and the optimizer) "
                         "inside `with strategy.scope():`")
    if (strategy.num_replicas_in_sync > 1
            and not getattr(inner_optimizer(optimizer), "expects_reduced_gradients", False)):
        raise ValueError("Trainer: with several replicas use an optimizer from "
                         "bert_tf.training.optimization (it takes gradients summed "
                         "over replicas, so clipping sees the global gradient)")


def _takes_position(dataset_fn) -> bool:
    """Whether `dataset_fn` takes `(input_context, position)` (`Trainer.train`)."""
    try:
        parameters = inspect.signature(dataset_fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in positional for p in parameters) >= 2


def distribute_training_data(strategy: tf.distribute.Strategy, dataset_fn: Callable,
                             position: InputPosition):
    """The training dataset of `dataset_fn(ctx)` or `dataset_fn(ctx, position)` on
    `strategy`, its shapes checked: a static batch size always (the block is traced
    once); on TPUs every dimension static."""
    if _takes_position(dataset_fn):
        dataset_fn = (lambda fn: lambda ctx: fn(ctx, position))(dataset_fn)
    dataset = strategy.distribute_datasets_from_function(dataset_fn,
                                                         input_options(strategy))
    specs = [s for s in tf.nest.flatten(dataset.element_spec, expand_composites=True)
             if hasattr(s, "shape")]
    # Off TPUs the sequence axis may vary among a few lengths (length-bucketed
    # fine-tuning): XLA compiles once per length.
    tpu = needs_static_shapes(strategy)
    bad = [s.shape for s in specs if not (
        s.shape.is_fully_defined() if tpu
        else s.shape.rank is not None and (s.shape.rank == 0 or s.shape[0] is not None))]
    if bad:
        raise ValueError(f"Trainer: the dataset's element shapes are not static ({bad}); "
                         f"batch with drop_remainder=True" +
                         (" and without length buckets on TPUs" if tpu else ""))
    return dataset


class StepFunctions:
    """The per-replica steps of one model, loss and optimizer under one strategy, and
    `train_loop()`, the compiled block of training steps (see the module doc).

    `step` and `input_seed` are the Trainer's counters (the dropout masks are a function
    of both); `stop_requested` the preemption watcher's host flag; `agree_on_stop`: the
    flag rides on the gradient all-reduce so every worker stops after the same step.
    """

    def __init__(self, model, optimizer, strategy: tf.distribute.Strategy, *,
                 loss_fn: Callable, metrics_fn: Optional[Callable],
                 label_fn: Optional[Callable], step: tf.Variable, input_seed: tf.Variable,
                 accumulation: int, jit_compile: bool, stop_requested: tf.Variable,
                 agree_on_stop: bool):
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy
        self.loss_fn = loss_fn
        self.metrics_fn = metrics_fn
        self.label_fn = label_fn
        self.step = step
        self.input_seed = input_seed
        self.accumulation = accumulation
        self.jit_compile = jit_compile
        self.stop_requested = stop_requested
        self.agree_on_stop = agree_on_stop
        self.train_loop_traces = 0  # how often the block was traced (tests check 1)

    def loss_and_metrics(self, labels, outputs):
        """(float32 loss, metric pairs) of one batch: `loss_fn` may return its metrics."""
        value = self.loss_fn(labels, outputs)
        loss, metrics = value if isinstance(value, tuple) else (value, {})
        if self.metrics_fn:
            metrics = dict(metrics, **self.metrics_fn(labels, outputs))
        return tf.cast(loss, tf.float32), metrics

    def _forward_backward(self, features, labels, seed, micro_step):
        """Loss, gradients (this replica's share) and metric sums of one micro-batch;
        its dropout masks from the step's `seed` and `micro_step`."""
        variables = self.model.trainable_variables
        shards = self.strategy.num_replicas_in_sync * self.accumulation
        with tf.GradientTape() as tape:
            with dropout.step_masks(tf.random.experimental.stateless_fold_in(
                    seed, micro_step)):
                outputs = self.model(features, training=True)
            loss, metrics = self.loss_and_metrics(labels, outputs)
            scaled = loss / shards
            if hasattr(self.optimizer, "scale_loss"):
                scaled = self.optimizer.scale_loss(scaled)
        grads = tape.gradient(scaled, variables)
        grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                 for g, v in zip(grads, variables)]
        return loss, grads, metrics

    def _accumulate(self, features, labels, seed):
        """Sums gradients over `accumulation` micro-batches, one after another."""
        if self.accumulation == 1:
            return self._forward_backward(features, labels, seed, 0)
        parts = self.accumulation
        f_split, l_split = split_batch(features, parts), split_batch(labels, parts)
        take = lambda tree, i: tf.nest.map_structure(lambda t: t[i], tree)
        loss, grads, metrics = self._forward_backward(take(f_split, 0), take(l_split, 0),
                                                      seed, 0)

        def body(i, loss, grads, metrics):
            l, g, m = self._forward_backward(take(f_split, i), take(l_split, i), seed, i)
            return (i + 1, loss + l, [a + b for a, b in zip(grads, g)],
                    tf.nest.map_structure(tf.add, metrics, m))

        # A while_loop (not unrolled) with parallel_iterations=1 keeps one micro-batch's
        # activations alive at a time.
        _, loss, grads, metrics = tf.while_loop(
            lambda i, *_: i < parts, body, (tf.constant(1), loss, grads, metrics),
            parallel_iterations=1)
        return loss / parts, grads, metrics

    def _replica_train_step(self, features, labels):
        if self.label_fn is not None:
            labels = self.label_fn(labels)
        accumulate = self._accumulate
        if self.jit_compile:
            accumulate = tf.function(accumulate, jit_compile=True, autograph=False)
        # Dropout masks: a function of the run's seed (kept in the checkpoint), the step,
        # the replica and the micro-batch, so a resumed run draws the uninterrupted
        # run's masks.
        seed = dropout.training_step_seed(self.input_seed, self.step)
        loss, grads, metrics = accumulate(features, labels, seed)
        ctx = tf.distribute.get_replica_context()
        stop_votes = tf.zeros([], tf.float32)
        if self.agree_on_stop:
            # This worker's preemption flag travels in the gradient all-reduce: after
            # it, every replica of every worker holds the same count.
            stop_votes = tf.cast(self.stop_requested.read_value(), tf.float32)
            *grads, stop_votes = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                                                grads + [stop_votes])
        elif ctx.num_replicas_in_sync > 1:
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        self.optimizer.apply(grads, self.model.trainable_variables)
        return loss, metrics, stop_votes

    def replica_eval_step(self, features, labels):
        """One replica's evaluation batch: the loss summed over its rows, their number
        and the metric pairs (`InferenceLoop.sum` adds them over batches and replicas)."""
        # Under multi-worker (and for a last partial batch over several replicas) a
        # replica whose data ran out gets an empty batch: its loss counts with weight 0.
        rows = tf.shape(tf.nest.flatten(features)[0])[0]
        outputs = self.model(features, training=False)
        loss, metrics = self.loss_and_metrics(labels, outputs)
        weight = tf.cast(rows, tf.float32)
        loss_sum = tf.where(rows > 0, loss * weight, 0.0)
        return {"loss_sum": loss_sum, "weight": weight, "metrics": metrics}

    def train_loop(self):
        """The compiled block: `loop(iterator, num_steps)` runs up to `num_steps` steps
        (fewer when a stop is requested) and returns their loss sum, metric sums, the
        number run, the first non-finite loss (`bad_step` -1: none) and `stopped`."""
        strategy = self.strategy
        step_counter = self.step
        # Autograph off throughout: the step code has no data-dependent Python control
        # flow, and converting Keras internals dominated tracing time.
        replica_step = tf.autograph.experimental.do_not_convert(self._replica_train_step)

        iterations = inner_optimizer(self.optimizer).iterations

        @tf.function(autograph=False)
        def one_step(iterator):
            features, labels = next(iterator)
            loss, metrics, stop_votes = strategy.run(replica_step, args=(features, labels))
            loss = strategy.reduce(tf.distribute.ReduceOp.MEAN, loss, axis=None)
            metrics = tf.nest.map_structure(
                lambda t: strategy.reduce(tf.distribute.ReduceOp.SUM, t, axis=None), metrics)
            step_counter.assign_add(1)
            # A step the loss scaler skipped did not advance `iterations`; the schedule
            # must still see this step.
            iterations.assign(tf.cast(step_counter, iterations.dtype))
            if self.agree_on_stop:
                # Every replica holds the same all-reduced count: no collective here.
                stop = strategy.experimental_local_results(stop_votes)[0] > 0
            else:
                stop = self.stop_requested.read_value()
            return loss, metrics, stop

        def loop(iterator, num_steps):
            self.train_loop_traces += 1
            # The first step is peeled off so the metric totals get their structure;
            # `one_step` is a tf.function, so it is traced once and called twice.
            loss, metrics, stop = one_step(iterator)
            not_finite = lambda loss: tf.logical_not(tf.math.is_finite(loss))
            bad_step = tf.where(not_finite(loss), tf.identity(step_counter),
                                tf.constant(-1, tf.int64))

            # The condition reads no device value except, on several workers, the
            # agreed stop flag: the loss is only summed, and checked after the loop.
            def cond(done, stop, *_):
                return tf.logical_and(done < num_steps, tf.logical_not(stop))

            def body(done, stop, bad_step, bad_loss, loss_sum, metrics):
                loss, step_metrics, stop = one_step(iterator)
                first_bad = tf.logical_and(bad_step < 0, not_finite(loss))
                bad_step = tf.where(first_bad, tf.identity(step_counter), bad_step)
                bad_loss = tf.where(first_bad, loss, bad_loss)
                return (done + 1, stop, bad_step, bad_loss, loss_sum + loss,
                        tf.nest.map_structure(tf.add, metrics, step_metrics))

            done, stop, bad_step, bad_loss, loss_sum, metrics = tf.while_loop(
                cond, body, (tf.constant(1), stop, bad_step, loss, loss, metrics))
            return {"loss_sum": loss_sum, "steps": done,
                    "bad_step": bad_step, "bad_loss": bad_loss, "stopped": stop,
                    "metrics": metrics}

        return tf.function(loop, autograph=False)
