"""Where a training run starts and what it saves: the checkpoints in --output_dir and the
input position (`bert_tf.training.loop.Trainer` holds one `RunCheckpoints`).

A checkpoint's root children are the model's (`checkpoint_items`, named as
`bert_tf.model.model_dir` says) and the training state: `optimizer`, `step` and `input_seed`,
the run's data seed, so a resumed run reads the uninterrupted run's input order and
draws its dropout masks (docs/contracts.md §6). Non-chief workers take part in every
save but write into a scratch dir of their own.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from typing import Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.core import file_io
from bert_tf.model import model_dir
from bert_tf.core.constants import INPUT_SEED
from bert_tf.data.position import InputPosition
from bert_tf.core.errors import BertTfError
from bert_tf.training.strategy import num_workers


class WorkerMismatchError(BertTfError, RuntimeError):
    """The workers of one multi-worker run resumed from different steps."""


def remove_partial_saves(directory: str) -> None:
    """Removes the `ckpt-N_temp` folders TensorFlow writes a checkpoint's shards into
    before merging them under the final name; one is left only by a failed save."""
    try:
        entries = tf.io.gfile.listdir(directory)
    except tf.errors.NotFoundError:
        return
    for entry in entries:
        if re.fullmatch(r"ckpt-\d+_temp/?", entry):
            tf.io.gfile.rmtree(os.path.join(directory, entry.rstrip("/")))


class RunCheckpoints:
    """The checkpoints of one run in `output_dir`: `items` (the model's children) and
    `training_state` (optimizer, step, input seed; never part of a start point), keeping
    the latest `max_to_keep` (None: all), numbered by `training_state["step"]`."""

    def __init__(self, items: Mapping[str, object], training_state: Mapping[str, object],
                 output_dir: str, *, is_chief: bool, max_to_keep: Optional[int]):
        self.items = dict(items)
        self.training_state = dict(training_state)
        self.output_dir = output_dir
        self.is_chief = is_chief
        self.checkpoint = tf.train.Checkpoint(**self.items, **self.training_state)
        tf.io.gfile.makedirs(output_dir)
        if is_chief:  # a save a kill cut short (the dir is this run's: locked)
            remove_partial_saves(output_dir)
        # Non-chief workers must take part in saving but write to a scratch dir.
        self.save_dir = output_dir if is_chief else file_io.scratch_dir("ckpt_worker_")
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self.save_dir, max_to_keep=max_to_keep,
            step_counter=self.training_state["step"], checkpoint_name="ckpt")

    @property
    def latest(self) -> Optional[str]:
        """The last checkpoint this run saved or resumed from (chief), else None."""
        return self.manager.latest_checkpoint

    def restore_latest(self) -> Optional[str]:
        """Restores everything from the latest checkpoint in output_dir and returns its
        path, or returns None when there is none."""
        latest = tf.train.latest_checkpoint(self.output_dir)
        if not latest:
            return None
        # The same checks and one-line errors as an --init_checkpoint (a damaged file, a
        # variable of another shape), without the unrestored-values warning flood.
        saved = model_dir.check_checkpoint_files(latest).get_variable_to_shape_map()
        if any(name.startswith(f"{INPUT_SEED}/") for name in saved):
            model_dir.restore(latest, {**self.items, **self.training_state},
                              require_all=True, checkpoint=self.checkpoint)
        else:  # written by a bert_tf that kept no run seed: all but the seed restored
            state = {k: v for k, v in self.training_state.items() if k != INPUT_SEED}
            model_dir.restore(latest, {**self.items, **state}, require_all=True)
            logging.warning("%s holds no input_seed (an earlier bert_tf wrote it): the input "
                            "order and the dropout masks continue from a new seed, not as "
                            "the uninterrupted run would have", latest)
        return latest

    def save(self) -> Optional[str]:
        """Saves a checkpoint of the current step; returns the path (chief) or None. A
        save that fails (a full disk) leaves the earlier checkpoints as they were and no
        partial `ckpt-N_temp` folder behind."""
        try:
            path = self.manager.save(checkpoint_number=self.training_state["step"])
        except BaseException:
            remove_partial_saves(self.save_dir)
            raise
        if not self.is_chief:
            tf.io.gfile.rmtree(self.save_dir)
            tf.io.gfile.makedirs(self.save_dir)
            return None
        return path

    def close(self) -> None:
        """Removes a non-chief worker's scratch dir."""
        if not self.is_chief and os.path.isdir(self.save_dir):
            shutil.rmtree(self.save_dir, ignore_errors=True)


def gather_from_workers(strategy: tf.distribute.Strategy, values: Sequence[int]) -> np.ndarray:
    """Every worker's `values` (ints), one row per worker in task order (a collective:
    every worker calls it at the same point)."""
    mine = tf.constant([list(values)], tf.int64)

    @tf.function(autograph=False)
    def gather():
        return strategy.gather(strategy.run(lambda: tf.identity(mine)), axis=0)

    rows = gather().numpy()
    return rows[::max(1, len(rows) // num_workers(strategy))]


def input_position(strategy: tf.distribute.Strategy, step: int, seed_variable: tf.Variable,
                   input_seed: Optional[int]) -> InputPosition:
    """The position training starts at: `step` and the data seed, read back from the
    checkpoint (`seed_variable`), else `input_seed`, else drawn (under several workers,
    the chief's), and stored in `seed_variable`. Several workers first check that they
    all resumed the same step (else WorkerMismatchError)."""
    recorded = int(seed_variable.numpy())
    if recorded >= 0:
        seed = recorded
        if input_seed is not None and input_seed != recorded:
            logging.warning("the checkpoint's input order was drawn with seed %d, not "
                            "%d: continuing it", recorded, input_seed)
    else:
        seed = input_seed if input_seed is not None else random.randrange(1 << 31)
    if num_workers(strategy) > 1:
        rows = gather_from_workers(strategy, [step, seed])
        differ = [w for w in range(1, len(rows)) if rows[w][0] != rows[0][0]]
        if differ:
            raise WorkerMismatchError(
                "workers resumed from different steps: " + ", ".join(
                    f"worker {w} at step {rows[w][0]}" for w in differ) +
                f", the chief (worker 0) at step {rows[0][0]}; every worker must read "
                f"the chief's checkpoints: give all of them the same --output_dir on "
                f"a shared filesystem (e.g. gs://...)")
        seed = int(rows[0][1])  # the chief's: a drawn seed differs per worker
    seed_variable.assign(seed)
    return InputPosition(seed=seed, step=step)
