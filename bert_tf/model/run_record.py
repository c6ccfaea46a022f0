"""The run a model directory holds, for the training commands: `RunRecord` (what decides
whether a run may continue in an existing --output_dir), `check_run_dir` (compared before
the run writes anything) and `write_run_record` (the dir's metadata and marker, written
once the run's inputs were read and its start point restored; docs/contracts.md §6).
The directory's files are `model_dir`'s.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from absl import logging
import tensorflow as tf

from bert_tf.core import file_io, output_guard
from bert_tf.core.errors import BertTfError
from bert_tf.model.config import BertConfig
from bert_tf.model.model_dir import (TokenizerConfig, find_config, find_vocab, read_task_config,
                                     read_tokenizer_config, write_metadata)


class RunMismatchError(BertTfError, ValueError):
    """An --output_dir that holds another run than the one asked for (docs/contracts.md §6)."""


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What decides whether a training run may continue in an existing model dir: the
    command, model config, vocab, text settings, task (name, labels, max_seq_length) and
    optimizer (and, to warn on a resume on other files, the training data).
    `write_run_record` writes it; `check_run_dir` compares it before a run writes
    anything."""
    command: str
    config: BertConfig
    vocab_file: Optional[str]
    text: TokenizerConfig
    optimizer: Optional[str]  # None: a run that does not train (evaluate, predict)
    max_seq_length: int
    task_config: Optional[dict] = None
    # `TrainingSettings.schedule_settings`: what a resume must keep (learning rate,
    # batch...) and what it may change (steps, epochs); None when the run does not train.
    schedule: Optional[dict] = None
    training_length: Optional[dict] = None
    # The training data read (flag -> value): a resume on other files is logged.
    data: Optional[dict] = None

    def marker_fields(self) -> dict:
        # The length a dir trains at; an evaluation at another (pretrain allows it) does
        # not change it, or the next resume would pass for a phase 2.
        fields = {"optimizer": self.optimizer,
                  "max_seq_length": self.max_seq_length if self.optimizer else None,
                  "schedule": self.schedule, "training_length": self.training_length,
                  "data": self.data if self.optimizer else None}
        return {k: v for k, v in fields.items() if v is not None}


def check_run_dir(output_dir: str, record: RunRecord, *, flag: str = "--output_dir",
                  length_may_change: bool = False) -> Optional[str]:
    """Checks, before a run writes anything, that `output_dir` is new, empty, or a model
    dir of this very run; raises RunMismatchError naming the first setting that differs
    (--overwrite may replace such a run), or output_guard.OutputGuardError when it holds
    files without a marker or another command's output (never replaced). Returns a note to log when the dir continues with a
    new max_seq_length (`length_may_change`: pretraining's phase 2), else None.

    >>> import tempfile
    >>> cfg = BertConfig(vocab_size=3, hidden_size=8, num_hidden_layers=1,
    ...                  num_attention_heads=2, intermediate_size=16)
    >>> run = RunRecord("pretrain", cfg, None, TokenizerConfig(), "adamw", 128)
    >>> d = tempfile.mkdtemp(); write_run_record(d, run)
    >>> check_run_dir(d, run) is None
    True
    >>> check_run_dir(d, dataclasses.replace(run, optimizer="lamb"))
    Traceback (most recent call last):
    ...
    bert_tf.model.run_record.RunMismatchError: --output_dir=... holds a pretrain run with optimizer adamw; this run has lamb: ...
    >>> write_run_record(d, dataclasses.replace(run, schedule={"learning_rate": 1e-4}))
    >>> check_run_dir(d, dataclasses.replace(run, schedule={"learning_rate": 2e-4}))
    Traceback (most recent call last):
    ...
    bert_tf.model.run_record.RunMismatchError: --output_dir=... holds a pretrain run with learning_rate 0.0001; this run has 0.0002: ...
    """
    if not tf.io.gfile.isdir(output_dir) or not tf.io.gfile.listdir(output_dir):
        return None
    marker = output_guard.owner(output_dir)
    # Never another's: a folder without a marker (the user's files, a downloaded model)
    # or another command's output is refused whatever the flags (OutputGuardError, which
    # --overwrite does not override, unlike RunMismatchError).
    if not marker:
        raise output_guard.OutputGuardError(
            f"{flag}={output_dir} exists and holds files no bert_tf run wrote (it has no "
            f"{output_guard.MARKER_FILE}); a run never writes into or replaces them, even "
            f"with --overwrite: choose a new or empty {flag}")
    if marker["command"] != record.command:
        raise output_guard.OutputGuardError(
            f"{flag}={output_dir} is the output of {marker['command']}; {record.command} "
            f"never writes into or replaces it, even with --overwrite: choose another "
            f"{flag} (with --init_checkpoint={output_dir} to start from it)")
    previous = marker["command"]
    differences = []
    old_config = find_config(output_dir)
    if old_config is not None and old_config != record.config:
        fields = [f.name for f in dataclasses.fields(BertConfig)
                  if getattr(old_config, f.name) != getattr(record.config, f.name)]
        differences += [(f"model config {name}", getattr(old_config, name),
                         getattr(record.config, name)) for name in fields]
    old_vocab = find_vocab(output_dir)
    if (old_vocab and record.vocab_file
            and os.path.abspath(old_vocab) != os.path.abspath(record.vocab_file)
            and file_io.sha256(old_vocab) != file_io.sha256(record.vocab_file)):
        differences.append(("vocab", old_vocab, record.vocab_file))
    old_text = read_tokenizer_config(output_dir)
    if old_text:
        was = TokenizerConfig(bool(old_text.get("do_lower_case")), old_text.get("strip_accents"),
                           old_text.get("pre_tokenizer") or None)
        for name in ("do_lower_case", "strip_accents", "pre_tokenizer"):
            if getattr(was, name) != getattr(record.text, name):
                differences.append((name, getattr(was, name), getattr(record.text, name)))
    old_task = read_task_config(output_dir)
    new_task = record.task_config
    if (old_task is None) != (new_task is None):
        differences.append(("task", (old_task or {}).get("task_name", "none (pretraining)"),
                            (new_task or {}).get("task_name", "none (pretraining)")))
    elif old_task is not None:
        if str(old_task.get("task_name", "")).lower() != str(new_task["task_name"]).lower():
            differences.append(("task", old_task.get("task_name"), new_task["task_name"]))
        elif old_task.get("label_list") != new_task.get("label_list"):
            differences.append(("labels", old_task.get("label_list"),
                                new_task.get("label_list")))
    differences += _changed(marker, {"optimizer": record.optimizer} if record.optimizer
                            else None)
    note = None
    old_length = marker.get("max_seq_length",
                            (old_task or {}).get("max_seq_length"))
    if old_length is not None and old_length != record.max_seq_length:
        if length_may_change:
            note = (f"{output_dir}: continuing its checkpoints (trained at max_seq_length "
                    f"{old_length}) with --max_seq_length={record.max_seq_length}, from "
                    f"their step on (the paper's phase 2 continues phase 1's step count)")
        else:
            differences.append(("max_seq_length", old_length, record.max_seq_length))
    length_changes = []
    if note is None:  # a resume continues the checkpoint's schedule; phase 2 sets its own
        differences += _changed(marker.get("schedule"), record.schedule)
        length_changes = _changed(marker.get("training_length"), record.training_length)
    if differences:
        name, old, new = differences[0]
        raise RunMismatchError(
            f"{flag}={output_dir} holds a {previous} run with {name} {old}; this run has "
            f"{new}: choose another {flag} (with --init_checkpoint={output_dir} to start "
            f"from it), or pass --overwrite to start over there")
    if note is None and record.data and marker.get("data") not in (None, record.data):
        # Not a mismatch (docs/contracts.md §6's same run is model, vocab, text, task, optimizer and
        # schedule; phase 2 continues on other records on purpose), but the input stream
        # cannot continue where it stopped on other files: said in one line.
        logging.warning("%s: resuming a run that read %s; this one reads %s: the data "
                        "order starts over on these files", output_dir,
                        _data_text(marker["data"]), _data_text(record.data))
    for name, old, new in length_changes:
        logging.info("%s: continuing a run that had --%s=%s with --%s=%s (the learning "
                     "rate's decay now ends there)", output_dir, name, old, name, new)
    return note


def _data_text(data) -> str:
    return ", ".join(f"--{k}={v}" for k, v in sorted(data.items())) if isinstance(
        data, dict) else str(data)


def _changed(recorded, settings: Optional[dict]) -> list:
    """(name, recorded value, this run's) of each setting in both that differs."""
    if not isinstance(recorded, dict) or not settings:
        return []
    return [(name, recorded[name], value) for name, value in settings.items()
            if name in recorded and recorded[name] != value]


def write_run_record(output_dir: str, record: RunRecord) -> None:
    """Writes the model dir's metadata (config, vocab, tokenizer and task settings, each
    file whole: `output_guard`) and its marker; call it only once the run's inputs were
    read and its start point restored."""
    write_metadata(output_dir, record.config, vocab_file=record.vocab_file,
                   do_lower_case=record.text.do_lower_case,
                   strip_accents=record.text.strip_accents,
                   pre_tokenizer=record.text.pre_tokenizer, task_config=record.task_config)
    previous = output_guard.owner(output_dir) or {}
    previous.pop("command", None)
    output_guard.mark(output_dir, record.command, **{**previous, **record.marker_fields()})
