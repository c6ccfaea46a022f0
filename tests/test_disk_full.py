"""A full disk (docs/contracts.md §6): a checkpoint, eval_results.json, prediction file or export
that cannot be written ends the command in one line (cli's message, exit 1, no
traceback), leaves what was there before byte for byte, and leaves no temporary file or
folder (`.NAME.<id>.tmp`, TensorFlow's `ckpt-N_temp`). The full disk is simulated where
the bytes go: Python's file writes raise OSError(ENOSPC), TensorFlow's checkpoint and
SavedModel writers ResourceExhaustedError after leaving their partial files, as they do."""

import errno
import os

import pytest
import tensorflow as tf

from bert_tf import finetune
from bert_tf.app import cli
from bert_tf.core import file_io
from bert_tf.model import model_dir
from bert_tf.app.setting_fields import parse_args
from tests.helpers import (SST2_NEGATIVE, SST2_POSITIVE, make_model_dir, snapshot, tiny_config,
                           write_sst2_dir)

WORDS = sorted({w for s in SST2_POSITIVE + SST2_NEGATIVE for w in s.split()})
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
FULL = "No space left on device"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A fine-tuned dir with checkpoints, eval_results.json and SST-2.tsv."""
    root = tmp_path_factory.mktemp("disk_full")
    make_model_dir(root / "init", TOKENS, tiny_config(vocab_size=len(TOKENS)))
    write_sst2_dir(root / "sst2", train_repeats=1)
    _finetune(root, 1)
    return root


def _finetune(root, steps, *extra):
    finetune.run(finetune.FinetuneConfig.from_flags(parse_args(finetune.define_flags, [
        "--task_name=SST-2", f"--data_dir={root / 'sst2'}", f"--init_checkpoint={root / 'init'}",
        f"--output_dir={root / 'out'}", "--do_train", "--do_eval", "--do_predict",
        "--max_seq_length=16", "--train_batch_size=8", f"--num_train_steps={steps}",
        "--steps_per_loop=1", *extra])))


def _one_line(error) -> str:
    message = cli._storage_full(error)
    assert message and "\n" not in message and "free some space" in message, message
    return message


def _no_temporaries(directory) -> None:
    left = [n for n in os.listdir(directory)
            if n.endswith((".tmp", "_temp")) or ".tmp" in n or n.endswith(".old")]
    assert not left, left


def _python_writes_fail(monkeypatch, part: str):
    """Python writes of a temporary whose name holds `part` raise ENOSPC."""
    real = file_io.open_file

    def open_file(path, mode="r", *args, **kwargs):
        if "w" in mode and part in os.path.basename(path):
            raise OSError(errno.ENOSPC, FULL, path)
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(file_io, "open_file", open_file)


@pytest.mark.parametrize("what", ["checkpoint", "eval_results", "predictions"])
def test_a_full_disk_ends_in_one_line_and_keeps_the_earlier_run(trained, monkeypatch, what):
    out = trained / "out"
    before = snapshot(out)
    if what == "checkpoint":
        real_save = tf.train.CheckpointManager.save

        def save(self, checkpoint_number=None, **kwargs):
            # What TensorFlow leaves when a shard write fails: the partial temp folder.
            partial = os.path.join(self.directory, f"ckpt-{int(checkpoint_number)}_temp")
            tf.io.gfile.makedirs(partial)
            with open(os.path.join(partial, "part-00000-of-00001.data-00000-of-00001"),
                      "wb") as f:
                f.write(b"partial")
            raise tf.errors.ResourceExhaustedError(None, None, f"{partial}; {FULL}")

        monkeypatch.setattr(tf.train.CheckpointManager, "save", save)
        assert real_save is not save
    else:
        _python_writes_fail(monkeypatch, {"eval_results": "eval_results.json",
                                          "predictions": "SST-2.tsv"}[what])
    with pytest.raises((OSError, tf.errors.OpError)) as failed:
        _finetune(trained, 2)
    _one_line(failed.value)
    after = snapshot(out)
    # What failed to be written is as it was; so is every earlier checkpoint.
    kept = {"checkpoint": [k for k in before if k.startswith("ckpt-")],
            "eval_results": ["eval_results.json"],
            "predictions": ["SST-2.tsv", os.path.join("eval_predictions", "SST-2.tsv")]}[what]
    assert kept and all(after.get(k) == before[k] for k in kept)
    assert model_dir.resolve_checkpoint(str(out))  # still a model dir to resume
    _no_temporaries(out)
    _no_temporaries(trained)


def test_a_full_disk_during_an_export_keeps_the_earlier_versions(trained, monkeypatch,
                                                                 tmp_path):
    from bert_tf.export import saved_model

    resolved = model_dir.resolve(str(trained / "out"))
    first = saved_model.export_model_dir(resolved, str(tmp_path), max_seq_length=16)
    before = snapshot(tmp_path)
    real_save = tf.saved_model.save

    def save(obj, export_dir, *args, **kwargs):
        os.makedirs(os.path.join(export_dir, "variables", "variables_temp"))
        raise tf.errors.ResourceExhaustedError(None, None, f"{export_dir}; {FULL}")

    monkeypatch.setattr(tf.saved_model, "save", save)
    with pytest.raises(tf.errors.OpError) as failed:
        saved_model.export_model_dir(resolved, str(tmp_path), max_seq_length=16)
    monkeypatch.setattr(tf.saved_model, "save", real_save)
    _one_line(failed.value)
    assert snapshot(tmp_path) == before and os.listdir(tmp_path) == [os.path.basename(first)]
