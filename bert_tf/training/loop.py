"""The training loop shared by pretraining and fine-tuning: `Trainer`.

What goes in: a Keras model, a loss function, a metrics function, an optimizer (from
`optimization.create_optimizer`), a dataset function and a tf.distribute strategy. What
comes out: checkpoints, TensorBoard summaries, a console line per loop and
`eval_results.json`.

Contracts:

* Build the model and the optimizer inside `strategy.scope()`.
* `dataset_fn(input_context) -> tf.data.Dataset` of `(features, labels)` dicts in
  **per-replica** batches: `input_context.get_per_replica_batch_size(global_batch_size)`,
  sharded with `input_context` (see `bert_tf.data.pretraining`). Use
  `drop_remainder=True` for training: shapes must be static (TPU, XLA), and the loop
  traces its step function once. A training `dataset_fn(input_context, position)` of
  two parameters also gets an `InputPosition` (`bert_tf.data.position`): the run's
  data seed and the step the pipeline starts at, so that a resumed run reads, from
  step N on, what the uninterrupted run would have read (docs/contracts.md §6). The seed is the
  `input_seed` given to `train`, or drawn at the first start; the checkpoint keeps it
  (root child `input_seed`), so every restart continues the same order. It also seeds
  the dropout masks: a step's masks are a function of (seed, step, micro-batch,
  replica) (`bert_tf.layers.dropout.step_masks`), so a resumed run draws the masks the
  uninterrupted run drew and ends with its weights; nothing else random is saved.
* `loss_fn(labels, outputs) -> scalar` or `-> (scalar, {name: (numerator, denominator)})`:
  the mean loss of this replica's (micro-)batch, float32, and optionally the metrics
  computed from the same per-example quantities (the pretraining loss returns the
  masked-LM accuracy and loss from the one cross-entropy it computes). The loop
  averages the loss over replicas and micro-batches (it divides the gradient by their
  number and sums over replicas).
* `metrics_fn(labels, outputs) -> {name: (numerator, denominator)}` (optional): more
  metrics. The loop sums numerators and denominators over steps and replicas, then
  reports numerator / denominator. Optional `metrics_finalizer(dict) -> dict` derives
  more values (e.g. perplexity).
* `label_fn(labels) -> labels` (optional) runs in replica context on the whole
  per-replica batch before the forward pass, outside XLA: the place for all-reduces
  that a loss needs (the pretraining loss normalises by the global masked-LM weight).
* `checkpoint_items`: the checkpoint's root children besides `optimizer`, `step` and
  `input_seed`, named as `bert_tf.model.model_dir` says (`encoder`, `masked_lm`, `next_sentence` or
  `encoder`, `task_head`), so `output_dir` is a model dir any `--init_checkpoint`
  accepts. Write `bert_config.json`/vocab into it with `model_dir.write_metadata`.

Example (a fine-tuning task would look the same; pretrain and finetune make their Trainer
through the run skeleton, `bert_tf.training.run`, which also restores the start point):

    strategy = get_strategy("mirrored")
    with strategy.scope():
        model = BertPretrainer(config)
        optimizer = create_optimizer(1e-4, num_train_steps=1000, num_warmup_steps=100)
    trainer = Trainer(model, losses.pretraining_loss_and_metrics, optimizer, strategy,
                      output_dir="/tmp/run",
                      label_fn=losses.add_global_mlm_weight,
                      checkpoint_items=model.checkpoint_items(),
                      options=run_settings.loop_options(strategy))  # the flags
    trainer.resume()  # from output_dir's latest checkpoint, if any (logs "resumed from step N")
    trainer.train(lambda ctx: make_dataset(ctx.get_per_replica_batch_size(256), ctx),
                  global_batch_size=256, num_steps=1000)
    trainer.evaluate(eval_dataset_fn, num_steps=100)
    trainer.predict({"input_word_ids": ids, ...}, batch_size=64)  # numpy outputs, in order

`evaluate` and `predict` (and `bert_tf.extract_features`) run on one inference loop,
`bert_tf.training.inference.InferenceLoop`: the distributed dataset, the step function
traced once per input
signature, and, under multi_worker_mirrored, every worker's rows gathered in order.

Inside `train`, `steps_per_loop` steps run in one compiled block
(`bert_tf.training.train_step`); a non-finite loss is checked at the block's end: the
loop raises `NonFiniteLossError` naming the first bad step, without saving. Checkpoints
and the input position: `bert_tf.training.checkpoints`; summaries: `bert_tf.training.summaries`.

Preemption (`bert_tf.training.preemption`): SIGTERM or SIGINT during `train` stops the
loop after the running step (not the running block), saves a checkpoint and returns
`"preempted"` with the `exit_code` (143 or 130). Under multi_worker_mirrored the notice
rides on the gradient all-reduce, so every worker stops after the same step and they
save the same checkpoint. Outside the step loop: during the held-out evaluation the
notice rides on each batch's reduction (the evaluation ends after the running batch on
every worker, its values are dropped, and the checkpoint is saved); during a
`--skip_corrupt_records` copy or the record count that positions the input, the host
work polls `stop_requested()` and ends; during the first trace/compile it is read after
the first step; during a checkpoint write, the write finishes and (one worker) is the
checkpoint, or (several) the next step stops them all.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Dict, Mapping, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.model import model_dir
from bert_tf.core.constants import INPUT_SEED, INPUT_WORD_IDS, MODEL_INPUTS, OPTIMIZER, STEP
from bert_tf.data.position import InputPosition
from bert_tf.core.errors import BertTfError, Preempted, StopRequested, UsageError
from bert_tf.training import checkpoints
from bert_tf.training.inference import InferenceLoop
from bert_tf.training.preemption import PreemptionWatcher
from bert_tf.training.strategy import is_chief, num_workers
from bert_tf.training.summaries import Summaries, format_values
from bert_tf.training.train_step import (StepFunctions, check_model_and_optimizer,
                                         distribute_training_data, inner_optimizer)


class NonFiniteLossError(BertTfError, RuntimeError):
    """The training loss became NaN or Inf; the run stopped without saving."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoopOptions:
    """How a Trainer runs: the training flags it reads, named and valued as the flags
    (`settings.TrainingSettings`, where their defaults live), with `jit_compile` decided
    (`strategy.choose_jit_compile`), and the process's stop signals and summaries. Made
    by `TrainingSettings.loop_options` only, where the command's config is read.

    >>> from bert_tf.app.settings import TrainingSettings
    >>> TrainingSettings(steps_per_loop=10, jit_compile=False).loop_options(
    ...     tf.distribute.get_strategy()).save_checkpoints_steps
    1000
    """
    steps_per_loop: int
    save_checkpoints_steps: int
    keep_checkpoint_max: int  # 0: every checkpoint, as the original's
    gradient_accumulation_steps: int
    jit_compile: bool
    write_summaries: bool
    handle_sigterm: bool
    # Polled while training (a cloud's maintenance notice): True stops it as SIGTERM does.
    termination_watcher_fn: Optional[Callable[[], bool]]

    @property
    def max_to_keep(self) -> Optional[int]:
        """`keep_checkpoint_max` as tf.train.CheckpointManager takes it (None: all)."""
        return self.keep_checkpoint_max or None


class Trainer:
    """Runs training and evaluation of one model under one strategy (see module doc)."""

    def __init__(self, model: keras.Model, loss_fn: Callable, optimizer,
                 strategy: Optional[tf.distribute.Strategy] = None, *, output_dir: str,
                 options: LoopOptions,
                 metrics_fn: Optional[Callable] = None,
                 metrics_finalizer: Optional[Callable] = None,
                 label_fn: Optional[Callable] = None,
                 checkpoint_items: Optional[Mapping[str, object]] = None,
                 tokens_per_example: Optional[int] = None):
        self.model = model
        self.metrics_finalizer = metrics_finalizer
        self.optimizer = optimizer
        self.strategy = strategy or tf.distribute.get_strategy()
        self.output_dir = output_dir
        self.options = options
        self.tokens_per_example = tokens_per_example
        self.is_chief = is_chief(self.strategy)
        self.history = []  # one dict per loop: step + reported values
        self.eval_history = []  # one dict per evaluation during `train`
        check_model_and_optimizer(model, optimizer, self.strategy)
        with self.strategy.scope():
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step",
                                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            # The training data's seed (-1: not chosen yet), kept so a resumed run
            # continues the same order (see `train`).
            self.input_seed = tf.Variable(
                -1, dtype=tf.int64, trainable=False, name="input_seed",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self.optimizer.build(self.model.trainable_variables)
        self.checkpoints = checkpoints.RunCheckpoints(
            checkpoint_items or {"model": model},
            {OPTIMIZER: self.optimizer, STEP: self.step, INPUT_SEED: self.input_seed},
            output_dir, is_chief=self.is_chief, max_to_keep=options.max_to_keep)
        self.inference = InferenceLoop(lambda inputs: self.model(inputs, training=False),
                                       self.strategy)
        self.summaries = Summaries(output_dir,
                                   enabled=options.write_summaries and self.is_chief)
        # Several workers must agree on the step to stop at (see module doc).
        self._agree_on_stop = num_workers(self.strategy) > 1
        self._preemption = PreemptionWatcher(options.handle_sigterm,
                                             options.termination_watcher_fn)
        self.steps = StepFunctions(
            model, optimizer, self.strategy, loss_fn=loss_fn, metrics_fn=metrics_fn,
            label_fn=label_fn, step=self.step, input_seed=self.input_seed,
            accumulation=options.gradient_accumulation_steps,
            jit_compile=options.jit_compile, stop_requested=self._preemption.requested,
            agree_on_stop=self._agree_on_stop)
        self._train_loop = None

    @property
    def train_loop_traces(self) -> int:
        """How often the block of training steps was traced (tests check 1)."""
        return self.steps.train_loop_traces

    def resume(self) -> Optional[int]:
        """Restores model, optimizer, step and input seed from the latest checkpoint in
        output_dir and returns the step (logged), or returns None when there is none. A
        run's start (resume, else its start point) is `training.run.resume_or_start`."""
        latest = self.checkpoints.restore_latest()
        if latest is None:
            return None
        step = int(self.step.numpy())
        logging.info("resumed from step %d (%s)", step, latest)
        return step

    def save(self) -> Optional[str]:
        """Saves model, optimizer and step; returns the path (chief) or None (see
        `checkpoints.RunCheckpoints.save`)."""
        return self.checkpoints.save()

    # ------------------------------------------------------------------ train
    def train(self, dataset_fn: Callable, global_batch_size: int, num_steps: int, *,
              on_data_loss: Optional[Callable] = None,
              eval_dataset_fn: Optional[Callable] = None, eval_every_steps: int = 0,
              eval_steps: Optional[int] = None,
              eval_on_data_loss: Optional[Callable] = None,
              input_seed: Optional[int] = None) -> Dict:
        """Trains until `step == num_steps`; returns the last loop's values.

        A `dataset_fn(input_context, position)` gets the `InputPosition` to start at (see
        the module doc): the seed recorded in the checkpoint, else `input_seed`, else a
        random one (under multi_worker_mirrored, the chief's), and the current step.
        Several workers first check that they all resumed the same step (else
        WorkerMismatchError naming the workers that differ from the chief).

        Returns a dict with `status` ("finished" or "preempted"), `step`, `loss` and the
        metrics of the last loop. While it trains, SIGTERM (a preemption notice) or SIGINT
        makes it stop after the running step (or evaluation batch), save a checkpoint and
        return "preempted" with `exit_code` 143 or 130 (on every worker, at the same
        step); outside of it the signals keep their previous meaning.

        A damaged input record (tf.errors.DataLossError) stops the run without saving;
        `on_data_loss(error)` (e.g. `bert_tf.data.pretraining.RecordFiles.handle_data_loss`)
        may explain it by raising, or repair the input and return: training then goes on
        from the current step with a new input pipeline from `dataset_fn`.

        With `eval_dataset_fn` and `eval_every_steps` > 0, it evaluates (at most
        `eval_steps` batches) at the start and every `eval_every_steps` steps; the values
        go to `eval_history` and the `eval` summaries (a held-out learning curve);
        `eval_on_data_loss` is `on_data_loss` for the evaluation's records.
        """
        with self._preemption:
            return self._train(dataset_fn, global_batch_size, num_steps, on_data_loss,
                               eval_dataset_fn, eval_every_steps if eval_dataset_fn else 0,
                               eval_steps, eval_on_data_loss, input_seed)

    def _input_position(self, input_seed: Optional[int]) -> InputPosition:
        """The position training starts at (`checkpoints.input_position`)."""
        return checkpoints.input_position(self.strategy, int(self.step.numpy()),
                                          self.input_seed, input_seed)

    def _training_dataset(self, dataset_fn, position: InputPosition):
        try:  # positioning may read the records (a damaged one is the user's to fix)
            return distribute_training_data(self.strategy, dataset_fn, position)
        except BertTfError as e:
            self._raise_with_checkpoint_state(e)

    def _raise_with_checkpoint_state(self, error: BertTfError):
        """Re-raises a user error that stops training with what was saved."""
        latest = self.checkpoints.latest
        state = (f"the last checkpoint ({latest}) is intact and the same command "
                 f"resumes from it" if latest else "no checkpoint had been written yet")
        raise type(error)(f"{error}. Stopped at step {int(self.step.numpy())} without "
                          f"saving; {state}") from None

    def _data_loss(self, error, on_data_loss) -> None:
        """Lets `on_data_loss` explain or repair a damaged input record; a user error it
        raises gets the checkpoint state appended (nothing was saved)."""
        if on_data_loss is None:
            raise error
        try:
            on_data_loss(error)
        except BertTfError as e:
            self._raise_with_checkpoint_state(e)

    def _train(self, dataset_fn: Callable, global_batch_size: int, num_steps: int,
               on_data_loss: Optional[Callable] = None,
               eval_dataset_fn: Optional[Callable] = None, eval_every: int = 0,
               eval_steps: Optional[int] = None,
               eval_on_data_loss: Optional[Callable] = None,
               input_seed: Optional[int] = None) -> Dict:
        divisor = (self.strategy.num_replicas_in_sync
                   * self.options.gradient_accumulation_steps)
        if global_batch_size % divisor:
            raise UsageError(
                f"train_batch_size {global_batch_size} must be a multiple of replicas x "
                f"gradient_accumulation_steps = {divisor}")
        position = self._input_position(input_seed)
        step = position.step
        if step >= num_steps:
            logging.info("step %d >= num_train_steps %d: nothing to train", step, num_steps)
            return {"status": "finished", "step": step}
        result = {}
        try:  # a stop request outside the step loop (see `_stopped`)
            dataset = self._training_dataset(dataset_fn, position)
        except StopRequested:
            return self._stopped(result, "while positioning the input")
        if self._train_loop is None:
            self._train_loop = self.steps.train_loop()
        seq_length = self._sequence_length(dataset)
        iterator = iter(dataset)

        def evaluate_at(step):  # the held-out curve: at the start and every eval_every steps
            if eval_every > 0 and step % eval_every == 0:
                logging.info("held-out evaluation at step %d", step)
                self.eval_history.append(self.evaluate(eval_dataset_fn, eval_steps,
                                                       write_results=False,
                                                       on_data_loss=eval_on_data_loss,
                                                       stop_on_request=True))

        try:
            evaluate_at(step)
        except StopRequested:
            return self._stopped(result, "during the held-out evaluation")
        # The first call traces (and with XLA compiles) the loop: a stop request then is
        # read after its first step.
        logging.info("training from step %d to %d", step, num_steps)
        while step < num_steps:
            every = self.options.save_checkpoints_steps
            next_save = (step // every + 1) * every
            n = min(self.options.steps_per_loop, num_steps - step, next_save - step)
            if eval_every > 0:
                n = min(n, (step // eval_every + 1) * eval_every - step)
            start = time.time()
            try:
                out = self._train_loop(iterator, tf.constant(n, tf.int32))
                out = tf.nest.map_structure(lambda t: t.numpy(), out)
            except tf.errors.DataLossError as e:
                try:
                    self._data_loss(e, on_data_loss)  # raises, or the input was repaired
                    step = int(self.step.numpy())
                    logging.warning("continuing from step %d with a new input pipeline", step)
                    position = InputPosition(seed=position.seed, step=step)
                    iterator = iter(self._training_dataset(dataset_fn, position))
                except StopRequested:
                    return self._stopped(result, "while skipping a damaged record")
                continue
            seconds = time.time() - start
            if out["bad_step"] >= 0:
                raise NonFiniteLossError(
                    f"loss is {float(out['bad_loss'])} at step {int(out['bad_step'])}; "
                    f"stopped without saving a checkpoint (the last good one is "
                    f"{self.checkpoints.latest}). Lower --learning_rate, raise "
                    f"--num_warmup_steps or check the input records")
            step = int(self.step.numpy())
            result = self._report(out, step, seconds, global_batch_size, seq_length)
            if bool(out["stopped"]):
                return self._stopped(result, "")
            if step % self.options.save_checkpoints_steps == 0 or step >= num_steps:
                path = self.save()
                if path:
                    logging.info("saved checkpoint %s", path)
                if self.stop_requested() and not self._agree_on_stop and step < num_steps:
                    # One worker: the request came during the save; it is the checkpoint.
                    return self._stopped(result, "", saved=path)
            try:
                evaluate_at(step)
            except StopRequested:
                return self._stopped(result, "during the held-out evaluation")
        if self.stop_requested() and not self._agree_on_stop:
            # The request came during the last steps or the final save: training is done
            # and saved, but the command must still stop (one worker: several would
            # disagree on the evaluation's collectives that follow).
            return self._stopped(result, "after the last step",
                                 saved=self.checkpoints.latest)
        self.summaries.flush()
        result.update(status="finished", step=step)
        return result

    def raise_if_preempted(self, result: Dict) -> None:
        """THE end of a command whose `train` was stopped by SIGTERM/SIGINT (result
        "preempted", checkpoint written): closes the Trainer and raises errors.Preempted,
        which `cli.run_main` turns into exit status 143 (130)."""
        if result.get("status") != "preempted":
            return
        self.close()
        raise Preempted(f"preempted at step {result['step']}: checkpoint written; the same "
                        f"command resumes from it", exit_code=result.get("exit_code", 143))

    def stop_requested(self) -> bool:
        """Whether SIGTERM/SIGINT (or the termination watcher) asked this worker to stop
        (while `train` runs); long host work inside training polls it."""
        return self._preemption.event.is_set()

    def _stopped(self, result: Dict, where: str, saved: Optional[str] = None) -> Dict:
        """Saves a checkpoint of the current step (unless `saved`) and returns the
        "preempted" result: every worker gets here after the same step (the stop vote
        rides on a collective), so they save the same checkpoint."""
        step = int(self.step.numpy())
        path = saved or self.save()
        watcher = self._preemption
        logging.info("%s: saved checkpoint %s at step %d%s; rerun the same command to "
                     "resume", watcher.signal_name, path or "(chief's)", step,
                     f" ({where})" if where else "")
        self.summaries.flush()
        result.update(status="preempted", step=step, exit_code=watcher.exit_code,
                      signal=watcher.signal_name)
        return result

    @staticmethod
    def _sequence_length(dataset):
        # The readers rename the records' `input_ids` (docs/contracts.md §4): one name to look for.
        features = dataset.element_spec[0]
        if isinstance(features, dict) and INPUT_WORD_IDS in features:
            spec = tf.nest.flatten(features[INPUT_WORD_IDS], expand_composites=True)[0]
            return spec.shape[-1]
        return None

    def _report(self, out, step, seconds, global_batch_size, seq_length):
        steps = int(out["steps"])
        values = {"loss": float(out["loss_sum"]) / steps}
        for name, (num, den) in out["metrics"].items():
            values[name] = float(num) / max(float(den), 1e-12)
        if self.metrics_finalizer:
            values = self.metrics_finalizer(values)
        lr = inner_optimizer(self.optimizer).learning_rate
        values["learning_rate"] = float(keras.ops.convert_to_numpy(lr))
        values["examples_per_second"] = steps * global_batch_size / max(seconds, 1e-9)
        tokens = self.tokens_per_example or seq_length
        if tokens:
            values["tokens_per_second"] = values["examples_per_second"] * tokens
        logging.info("step %d: %s", step, format_values(values))
        self.summaries.write("train", values, step)
        self.history.append(dict(values, step=step))
        return dict(values)

    # ------------------------------------------------- evaluate / predict
    def evaluate(self, dataset_fn: Callable, num_steps: Optional[int] = None,
                 write_results: bool = True, on_data_loss: Optional[Callable] = None,
                 stop_on_request: bool = False) -> Dict:
        """Runs over the eval dataset (at most `num_steps` batches) and returns metrics.

        `loss` is the mean of the batches' losses weighted by their rows. Writes
        OUTPUT_DIR/eval_results.json (metric name -> number, plus `global_step` and
        `eval_steps`) on the chief. Under multi_worker_mirrored, workers whose eval data
        ends first take part with empty batches until every worker's data has ended.
        A damaged record goes to `on_data_loss` as in `train`; when it returns, the
        evaluation starts over on the repaired input. `stop_on_request` (the held-out
        evaluation inside `train`): a stop request ends it after the running batch, on
        every worker, with StopRequested.
        """
        stop_flag = self._preemption.requested if stop_on_request else None
        while True:
            try:
                return self._evaluate(dataset_fn, num_steps, write_results, stop_flag)
            except tf.errors.DataLossError as e:
                self._data_loss(e, on_data_loss)
                logging.warning("evaluating again on the repaired input")

    def _evaluate(self, dataset_fn, num_steps, write_results, stop_flag=None) -> Dict:
        totals, steps = self.inference.sum(dataset_fn, self.steps.replica_eval_step, num_steps,
                                           stop_flag)
        if steps == 0:
            raise UsageError("evaluate: the eval dataset yielded no batch; is the eval "
                             "batch size larger than the eval data?")
        results = {"loss": totals["loss_sum"] / max(totals["weight"], 1.0)}
        for name, (num, den) in totals["metrics"].items():
            results[name] = num / max(den, 1e-12)
        if self.metrics_finalizer:
            results = self.metrics_finalizer(results)
        step = int(self.step.numpy())
        results.update(global_step=step, eval_steps=steps)
        logging.info("eval at step %d: %s", step, format_values(results))
        self.summaries.write("eval", {k: v for k, v in results.items()
                                 if k not in ("global_step", "eval_steps")}, step)
        self.summaries.flush()
        if write_results and self.is_chief:
            model_dir.write_eval_results(self.output_dir, results)
        return results

    def predict(self, features: Mapping[str, np.ndarray], batch_size: int,
                input_names: Sequence[str] = MODEL_INPUTS,
                length_buckets: Optional[Sequence[int]] = None) -> Dict[str, np.ndarray]:
        """The model's outputs (training=False) for every row of `features`, as numpy
        arrays in row order, on every worker (see `InferenceLoop.predict`; with
        `length_buckets`, rows run in batches cut to their bucket's length: callers pass
        None on TPUs, `strategy.needs_static_shapes`)."""
        return self.inference.predict(features, batch_size, input_names, length_buckets)

    def close(self):
        """Flushes summaries and removes a non-chief worker's scratch dir."""
        self.summaries.flush()
        self.checkpoints.close()
