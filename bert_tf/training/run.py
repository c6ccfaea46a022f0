"""The training run's --output_dir lifecycle, shared by pretrain and finetune (docs/contracts.md §6).

    check -> lock -> [build, read inputs, restore the start point] -> set aside the
    replaced run -> write the run record -> [train, evaluate, predict] -> remove it

`OutputDirRun.check` refuses, before anything is written, an --output_dir that is or
holds an input, that another run is writing (the lock, held to the end), that holds
files no bert_tf run wrote or another command's output (never replaced, whatever the
flags), or another run of this command (replaced only with --overwrite). `start` makes the
Trainer and restores its start point; an --overwrite moves the earlier run aside only
after that succeeded, so a new run refused for a missing --init_checkpoint or unreadable
data leaves the earlier one in place. `close` (always, in a `finally`) puts the earlier
run back if the new one failed before writing its record, and releases the lock; a kill
at that point is repaired by the next run's `check` (`output_guard.restore_set_aside`).
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Iterable, Iterator, Optional

from absl import logging

from bert_tf.core import output_guard
from bert_tf.model import model_dir, run_record
from bert_tf.training import strategy


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
        same_dir = bool(init_checkpoint) and _same_path(model_dir.model_dir_of(init_checkpoint),
                                                       self.output_dir)
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

    def start(self, make_trainer: Callable, initialize: Callable):
        """(trainer, step): the Trainer (`make_trainer()`) with its start point. A run
        that replaces an earlier one restores its start point first, then moves the
        earlier run aside, then makes the Trainer in the emptied --output_dir."""
        if not self.replace:
            trainer = make_trainer()
            return trainer, trainer.restore_or_initialize(initialize)
        start = initialize()  # a missing or unfitting --init_checkpoint fails here
        if self.is_chief:
            self._aside = output_guard.set_aside(self.output_dir, self.command)
        trainer = make_trainer()
        return trainer, trainer.restore_or_initialize(lambda: start, resume=False)

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


@contextlib.contextmanager
def output_dir_run(command: str, output_dir: str, *, overwrite: bool) -> Iterator[OutputDirRun]:
    """The frame of a training command's `run`: its `OutputDirRun`, closed however the
    run ends, inside `strategy.restoring_process_state` (the dtype policy and seeds the
    run sets are put back when it ends)."""
    output = OutputDirRun(command, output_dir, overwrite=overwrite)
    with strategy.restoring_process_state():
        try:
            yield output
        finally:
            output.close()


def _same_path(a: str, b: str) -> bool:
    return os.path.abspath(os.path.expanduser(a)) == os.path.abspath(os.path.expanduser(b))
