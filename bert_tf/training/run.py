"""The skeleton of a training command's run, shared by pretrain and finetune: the
strategy, the --output_dir lifecycle (docs/contracts.md §6), the Trainer and its start
point. Commands supply the model, its loss, optimizer and datasets, and read their config
once (`settings.TrainingSettings`: `training_run`, `check_output_dir`, `make_optimizer`):
no function here takes the config, each gets the values it needs.

    with config.training_run("pretrain") as run:   # strategy, precision and seed set
        resolved = ...                              # the command's model dir
        config.check_output_dir(run, resolved, inputs=[...])  # run.check(its record):
                                                    # refused here, nothing written
        with run.strategy.scope():
            model = ...
            optimizer = config.make_optimizer(num_train_steps, num_warmup_steps,
                                              run.mixed_precision)
        trainer, step = run.start(model, loss_fn, optimizer, initialize)
        run.write_record()                          # from here the dir is this run's
        trainer.train(...); trainer.evaluate(...)
        run.finish()                                # --overwrite's earlier run goes

    check -> lock -> [build, read inputs, restore the start point] -> set aside the
    replaced run -> write the run record -> [train, evaluate, predict] -> remove it

`OutputDirRun.check` refuses, before anything is written, an --output_dir that is or
holds an input, that another run is writing (the lock, held to the end), that holds
files no bert_tf run wrote or another command's output (never replaced, whatever the
flags), or another run of this command (replaced only with --overwrite). `start` makes the
Trainer and resumes it from --output_dir's latest checkpoint, or else restores its start
point (--init_checkpoint: read once, and never by a run that resumes); an --overwrite moves the earlier run aside only
after that succeeded, so a new run refused for a missing --init_checkpoint or unreadable
data leaves the earlier one in place. `close` (always, in a `finally`) puts the earlier
run back if the new one failed before writing its record, and releases the lock; a kill
at that point is repaired by the next run's `check` (`output_guard.restore_set_aside`).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Iterator, Optional, Tuple

import tensorflow as tf
from absl import logging

from bert_tf.core import output_guard
from bert_tf.model import model_dir, run_record
from bert_tf.training import strategy as strategy_lib
from bert_tf.training.loop import LoopOptions, Trainer


class OutputDirRun:
    """One training command's hold on its --output_dir (see module doc)."""

    def __init__(self, command: str, output_dir: str, *, overwrite: bool):
        self.command = command
        self.output_dir = output_dir
        self.overwrite = overwrite
        self.replace = False  # --overwrite is to replace an earlier run
        self.is_chief = True
        self._lock = contextlib.ExitStack()
        self._aside: Optional[str] = None
        self._recorded = False

    def check(self, record: run_record.RunRecord, *, init_checkpoint: Optional[str],
              inputs: Iterable[Optional[str]], is_chief: bool,
              model_files: Iterable[Optional[str]] = (),
              length_may_change: bool = False) -> Optional[str]:
        """Refuses (one line, nothing written) an --output_dir this run may not write;
        takes its lock (chief). `inputs`: the data the run reads (never inside or around
        --output_dir); `model_files`: the vocab and config it reads, which a resume may
        take from --output_dir itself but a replacing run may not. Returns
        `check_run_dir`'s note (pretraining's phase 2)."""
        self.is_chief = is_chief
        model_dir.check_checkpoint_path(self.output_dir, "--output_dir")
        if output_guard.is_file(self.output_dir):
            raise output_guard.OutputGuardError(f"--output_dir={self.output_dir} is a file; "
                                                f"name a directory")
        same_dir = bool(init_checkpoint) and output_guard.same_path(
            model_dir.model_dir_of(init_checkpoint), self.output_dir)
        inputs = [p for p in inputs if p]
        output_guard.check_apart(self.output_dir,
                                 [None if same_dir else init_checkpoint, *inputs],
                                 flag="--output_dir", allow_inside=True)
        if is_chief:
            self._lock.enter_context(output_guard.locked(self.output_dir,
                                                         flag="--output_dir"))
            restored = output_guard.restore_set_aside(self.output_dir)
            if restored:
                logging.warning("%s: put back the earlier run an --overwrite had moved to "
                                "%s (the new run had not started)", self.output_dir, restored)
        try:
            return run_record.check_run_dir(self.output_dir, record,
                                           length_may_change=length_may_change)
        except run_record.RunMismatchError:
            if not self.overwrite or same_dir:
                raise
        # The earlier run is moved away with all it holds: nothing the new run reads may
        # be in there.
        output_guard.check_replaceable(self.output_dir, self.command, flag="--output_dir")
        for given in [init_checkpoint, *inputs, *model_files]:
            if given and output_guard.lies_within(given, self.output_dir):
                raise output_guard.OutputGuardError(
                    f"{given} lies inside --output_dir={self.output_dir}, which --overwrite "
                    f"replaces: this run reads it; copy it out of there first, or choose "
                    f"another --output_dir")
        self.replace = True
        return None

    def start(self, make_trainer: Callable[[], Trainer],
              initialize: Callable[[], Optional[model_dir.StartPoint]]) -> Tuple[Trainer, int]:
        """(trainer, step): THE start of a run. The Trainer (`make_trainer()`) resumes from
        --output_dir's latest checkpoint (model, optimizer, step, input seed); only when
        there is none is `initialize()` called: the start point (`Task.initialize`,
        pretrain's --init_checkpoint), which restores what it chooses through
        `model_dir.restore_start_point` and returns that StartPoint, or None for random
        weights. A run that replaces an earlier one (--overwrite) never continues its
        checkpoints: it restores its start point first, then moves the earlier run aside,
        then makes the Trainer in the emptied --output_dir."""
        if self.replace:
            start = initialize()  # a missing or unfitting --init_checkpoint fails here
            if self.is_chief:
                self._aside = output_guard.set_aside(self.output_dir, self.command)
            trainer = make_trainer()
        else:
            trainer = make_trainer()
            step = trainer.resume()
            if step is not None:
                return trainer, step
            start = initialize()
        if start is not None:
            logging.info("started fresh at step 0 from init_checkpoint %s", start)
        else:
            logging.info("started fresh at step 0 (no checkpoint in %s)", self.output_dir)
        return trainer, int(trainer.step.numpy())

    def write_record(self, record: run_record.RunRecord) -> None:
        """The model dir's metadata and marker (chief): from here the dir is the new
        run's, and the earlier one is removed when the run ends (`finish`)."""
        if self.is_chief:
            run_record.write_run_record(self.output_dir, record)
        self._recorded = True

    def finish(self) -> None:
        """The run ended: the earlier run --overwrite replaced is deleted."""
        if self.is_chief:
            output_guard.remove_set_aside(self.output_dir)

    def close(self) -> None:
        """Always (`finally`): an earlier run set aside by a new one that failed before
        writing its record is put back; the lock is released."""
        try:
            if self._aside and not self._recorded:
                output_guard.restore_set_aside(self.output_dir)
        finally:
            self._lock.close()


class TrainingRun:
    """One run of a training command (see the module doc): its `strategy`, `options`
    (the Trainer's), `mixed_precision` (the dtype policy set) and `output` (its
    --output_dir). It never sees the command's config: the command hands it these
    values and the pieces it made (run record, model, loss, optimizer, start point)."""

    def __init__(self, command: str, strategy: tf.distribute.Strategy, options: LoopOptions,
                 output: OutputDirRun, mixed_precision: str):
        self.command = command
        self.strategy = strategy
        self.options = options
        self.output = output
        self.mixed_precision = mixed_precision
        self.trainer: Optional[Trainer] = None
        self._record: Optional[run_record.RunRecord] = None

    def check(self, record: run_record.RunRecord, *, init_checkpoint: Optional[str],
              inputs: Iterable[Optional[str]], model_files: Iterable[Optional[str]] = (),
              length_may_change: bool = False) -> Optional[str]:
        """`record` (what the command will write as this run's: `TrainingSettings.run_record`)
        checked against --output_dir before anything is written there
        (`OutputDirRun.check`: the same arguments, its note returned)."""
        self._record = record
        return self.output.check(record, init_checkpoint=init_checkpoint, inputs=inputs,
                                 model_files=model_files,
                                 is_chief=strategy_lib.is_chief(self.strategy),
                                 length_may_change=length_may_change)

    def start(self, model, loss_fn: Callable, optimizer,
              initialize: Callable[[], Optional[model_dir.StartPoint]], **trainer_args
              ) -> Tuple[Trainer, int]:
        """(trainer, step): the Trainer of `model` and `optimizer` (both built in
        `strategy.scope()`) and `loss_fn`, resumed or started from `initialize()`
        (`OutputDirRun.start`). `trainer_args`: more `Trainer` keywords (metrics,
        label_fn, ...)."""

        def make_trainer():
            return Trainer(model, loss_fn, optimizer, self.strategy,
                           output_dir=self.output.output_dir, options=self.options,
                           checkpoint_items=model.checkpoint_items(), **trainer_args)

        self.trainer, step = self.output.start(make_trainer, initialize)
        return self.trainer, step

    def write_record(self) -> None:
        """From here --output_dir is this run's (`OutputDirRun.write_record`)."""
        self.output.write_record(self._record)

    def finish(self) -> None:
        """The run's work is done: the Trainer is closed and the earlier run --overwrite
        replaced is deleted."""
        self.trainer.close()
        self.output.finish()


@contextlib.contextmanager
def training_run(command: str, strategy: tf.distribute.Strategy, options: LoopOptions, *,
                 output_dir: str, overwrite: bool, mixed_precision: Optional[str],
                 seed: Optional[int]) -> Iterator[TrainingRun]:
    """The frame of a training command's `run` (`TrainingSettings.training_run` gives it
    the values of the command's flags): its `TrainingRun` on `strategy` (made first:
    multi-worker collectives and TPU init must be configured before TensorFlow runs any
    op), inside `strategy.restoring_process_state` (the dtype policy and seeds set here
    are put back when it ends), its --output_dir released however the run ends."""
    with strategy_lib.restoring_process_state():
        precision = strategy_lib.set_precision_and_seed(mixed_precision, seed, strategy)
        run = TrainingRun(command, strategy, options,
                          OutputDirRun(command, output_dir, overwrite=overwrite), precision)
        try:
            yield run
        finally:
            run.output.close()
