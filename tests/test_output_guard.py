"""docs/contracts.md §6: nothing a user already has is lost or changed by a failed or mistaken
command. Each test makes the mistake a user would (a folder of theirs as --work_dir, the
output dir as the work dir, --overwrite onto a parent of the input, a rerun into a dir of
another task, a failed run into a fine-tuned dir) and checks the bytes of every file that
was there before."""

import dataclasses
import hashlib
import json
import os

import pytest
import tensorflow as tf

from bert_tf.model import model_dir, run_record
from bert_tf.core import output_guard
from bert_tf.core.output_guard import OutputGuardError
from data_prep import pretraining_job, pretraining_passes
from data_prep.corpus import CorpusError
from tests.helpers import (REPO, SST2_NEGATIVE, SST2_POSITIVE, make_model_dir, run_command,
                           tiny_config, write_sst2_dir, write_vocab)


def snapshot(root) -> dict:
    """Every file below `root` -> sha256 of its bytes."""
    out = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def assert_kept(before: dict, root) -> None:
    after = snapshot(root)
    changed = {k for k in before if after.get(k) != before[k]}
    assert not changed, f"changed or lost: {sorted(changed)}"


# ------------------------------------------------------------------ the guard itself


def test_work_dir_of_the_user_keeps_its_files_and_ours_is_reused(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    before = snapshot(tmp_path)
    work = output_guard.claim_work_dir(str(mine), "job")
    assert work == str(mine / "job.work")
    assert output_guard.claim_work_dir(str(mine), "job") == work  # the rerun finds it
    (mine / "job.work" / "part-0").write_text("x")
    output_guard.release_work_dir(work, "job")
    assert_kept(before, tmp_path)
    assert sorted(os.listdir(mine)) == ["notes.txt"]
    # A work dir the job creates is its own and goes whole; one holding an output is not.
    new = output_guard.claim_work_dir(str(tmp_path / "new"), "job")
    assert new == str(tmp_path / "new")
    output_guard.release_work_dir(new, "job")
    assert not (tmp_path / "new").exists()
    holding = output_guard.claim_work_dir(str(tmp_path / "w"), "job",
                                          outputs=[str(tmp_path / "w" / "records")])
    assert holding == str(tmp_path / "w" / "job.work")
    with pytest.raises(OutputGuardError, match="contains the input"):
        output_guard.claim_work_dir(str(tmp_path), "job", inputs=[str(mine / "notes.txt")])


def test_new_output_dir_refusals_write_nothing(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights").write_text("w")
    before = snapshot(tmp_path)
    for target, overwrite, message in [
            (model, True, "is the input"), (tmp_path, True, "contains the input"),
            (model / "sub", False, "is inside the input")]:
        with pytest.raises(OutputGuardError, match=message):
            with output_guard.new_output_dir(str(target), "c", overwrite=overwrite,
                                             inputs=[str(model)]):
                pass
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("k")
    before = snapshot(tmp_path)
    with pytest.raises(OutputGuardError, match="no bert_tf command wrote"):
        with output_guard.new_output_dir(str(other), "c", overwrite=True):
            pass
    # A failure while building leaves neither a partial output nor a temporary.
    with pytest.raises(RuntimeError):
        with output_guard.new_output_dir(str(tmp_path / "out"), "c") as tmp:
            output_guard.write_text(os.path.join(tmp, "half"), "h")
            raise RuntimeError("disk full")
    assert_kept(before, tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["model", "other"]


def test_atomic_file_leaves_nothing_on_failure(tmp_path):
    path = tmp_path / "eval_results.json"
    output_guard.write_json(str(path), {"accuracy": 1.0})
    with pytest.raises(RuntimeError):
        with output_guard.atomic_file(str(path)) as tmp:
            open(tmp, "w").write("{half")
            raise RuntimeError("killed")
    assert json.loads(path.read_text()) == {"accuracy": 1.0}
    assert os.listdir(tmp_path) == ["eval_results.json"]


def test_saved_model_on_an_object_store_gets_saved_model_pb_last(monkeypatch):
    """ram:// is a filesystem whose rename is not one atomic step for a directory (as
    gs://): the version must become loadable only with its last file."""
    from bert_tf.export import saved_model

    class Doubler(tf.Module):
        def __init__(self):
            super().__init__()
            self.scale = tf.Variable([2.0])

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def double(self, x):
            return {"y": x * self.scale}

    copied, real_copy = [], tf.io.gfile.copy

    def recording_copy(source, target, overwrite=False):
        if target.endswith("saved_model.pb"):  # everything else is there already
            root = os.path.dirname(target)
            assert tf.io.gfile.exists(os.path.join(root, "variables", "variables.index"))
        copied.append(os.path.basename(target))
        real_copy(source, target, overwrite=overwrite)

    monkeypatch.setattr(tf.io.gfile, "copy", recording_copy)
    module = Doubler()
    version = saved_model.save_versioned(module, {"serving_default": module.double},
                                    "ram://guard_test/export")
    assert copied[-1] == "saved_model.pb" and len(copied) > 2
    assert tf.io.gfile.listdir("ram://guard_test/export") == ["1"]  # no temporary left
    loaded = tf.saved_model.load(version)
    assert loaded.signatures["serving_default"](x=tf.constant([3.0]))["y"].numpy() == [6.0]


def _tree(root):
    """Every file below `root` on any file system -> its bytes."""
    files = {}
    for directory, _, names in tf.io.gfile.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with tf.io.gfile.GFile(path, "rb") as f:
                files[os.path.relpath(path, root)] = f.read()
    return files


def _write_output(root, files, command="demo", overwrite=False):
    with output_guard.new_output_dir(root, command, overwrite=overwrite) as tmp:
        for name, data in files.items():
            tf.io.gfile.makedirs(os.path.dirname(os.path.join(tmp, name)))
            with tf.io.gfile.GFile(os.path.join(tmp, name), "wb") as f:
                f.write(data)


@pytest.mark.parametrize("fail_at", [None, 0, 1, 2, 3])
def test_an_object_store_overwrite_never_holds_neither_output(monkeypatch, fail_at):
    """On an object store (ram:// for gs://: no atomic rename of a folder) an --overwrite
    copies file by file. After every copy, the whole earlier output or the whole new one
    is somewhere under the parent; a copy that fails (`fail_at`: the copy that raises)
    leaves the earlier output in place, whole, and nothing else."""
    parent = f"ram://swap_{fail_at}"
    target = f"{parent}/out"
    old = {"a.txt": b"old a", "sub/b.txt": b"old b", "checkpoint": b"old ckpt"}
    new = {"a.txt": b"new a", "sub/b.txt": b"new b", "checkpoint": b"new ckpt",
           "c.txt": b"new c"}
    _write_output(target, old)
    marker = output_guard.MARKER_FILE

    def whole_copies():
        found = []
        for directory, _, _ in tf.io.gfile.walk(parent):
            if tf.io.gfile.exists(os.path.join(directory, marker)):
                tree = {k: v for k, v in _tree(directory).items() if k != marker}
                found += [name for name, want in (("old", old), ("new", new)) if tree == want]
        return found

    real_copy, copies_of_new = tf.io.gfile.copy, []

    def checked_copy(source, dest, overwrite=False):
        assert whole_copies(), f"neither output whole before copying {dest}"
        if ".tmp/" in source:  # a file of the new output going in
            if len(copies_of_new) == fail_at:
                raise tf.errors.ResourceExhaustedError(None, None, "quota exceeded")
            copies_of_new.append(dest)
        real_copy(source, dest, overwrite=overwrite)
        assert whole_copies(), f"neither output whole after copying {dest}"

    monkeypatch.setattr(tf.io.gfile, "copy", checked_copy)
    if fail_at is None:
        _write_output(target, new, overwrite=True)
        assert {k: v for k, v in _tree(target).items() if k != marker} == new
    else:
        with pytest.raises(tf.errors.ResourceExhaustedError):
            _write_output(target, new, overwrite=True)
        assert {k: v for k, v in _tree(target).items() if k != marker} == old
    assert tf.io.gfile.listdir(parent) == ["out"]  # no .tmp or .old left


def test_an_object_store_swap_killed_mid_copy_is_put_back_by_the_next_run():
    """A kill while the new output was being copied in leaves a target without its
    marker (the marker is copied last) beside the whole earlier output in `.old`: the
    next run puts the earlier output back."""
    parent = "ram://swap_killed"
    target = f"{parent}/out"
    _write_output(target, {"a.txt": b"old a", "checkpoint": b"old"})
    aside = f"{parent}/.out.0123456789ab.old"
    output_guard._rename(target, aside)
    tf.io.gfile.makedirs(target)  # the cut-short copy, as _publish starts it
    with tf.io.gfile.GFile(f"{target}/a.txt", "wb") as f:
        f.write(b"new a")
    output_guard.remove_left_overs(target)
    assert tf.io.gfile.listdir(parent) == ["out"]
    assert {k: v for k, v in _tree(target).items()
            if k != output_guard.MARKER_FILE} == {"a.txt": b"old a", "checkpoint": b"old"}


# ------------------------------------------------------------------ create_pretraining_data


def _corpus(path, docs=30):
    words = SST2_POSITIVE + SST2_NEGATIVE
    lines = []
    for d in range(docs):
        lines += [f"{words[(d + i) % len(words)]} again and again ." for i in range(6)] + [""]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _vocab(path):
    words = sorted({w for s in SST2_POSITIVE + SST2_NEGATIVE for w in s.split()})
    return write_vocab(path, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "again", "and",
                              ".", *words])


def _job(tmp_path, **kw):
    return pretraining_passes.JobConfig(input_file=str(tmp_path / "corpus.txt"),
                         output_file=str(tmp_path / "out" / "p.tfrecord"),
                         vocab_file=str(tmp_path / "vocab.txt"), num_workers=0,
                         progress=False, dupe_factor=2, max_seq_length=16,
                         max_predictions_per_seq=3, **kw)


def test_create_pretraining_data_work_dir_mistakes(tmp_path):
    _corpus(tmp_path / "corpus.txt")
    _vocab(tmp_path / "vocab.txt")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    before = snapshot(tmp_path)
    # A folder of the user's as --work_dir: its notes survive the end-of-job cleanup.
    summary = pretraining_job.run(_job(tmp_path, work_dir=str(mine), num_output_shards=3))
    assert_kept(before, tmp_path)
    assert os.listdir(mine) == ["notes.txt"]
    reference = {p: open(p, "rb").read() for p in summary["output_files"]}
    # --work_dir = the output directory: the shards it just wrote survive.
    out2 = tmp_path / "out2"
    cfg = _job(tmp_path, work_dir=str(out2), num_output_shards=3)
    cfg = dataclasses.replace(cfg, output_file=str(out2 / "p.tfrecord"))
    second = pretraining_job.run(cfg)
    assert sorted(os.listdir(out2)) == sorted(os.path.basename(p)
                                              for p in second["output_files"])
    assert [open(p, "rb").read() for p in second["output_files"]] == list(reference.values())


def test_create_pretraining_data_overwrite_removes_only_its_surplus_shards(tmp_path):
    _corpus(tmp_path / "corpus.txt")
    _vocab(tmp_path / "vocab.txt")
    first = pretraining_job.run(_job(tmp_path, num_output_shards=3))
    (tmp_path / "out" / "README.txt").write_text("mine")
    before = snapshot(tmp_path)
    with pytest.raises(CorpusError, match="--overwrite"):
        pretraining_job.run(_job(tmp_path, num_output_shards=2))
    assert_kept(before, tmp_path)
    second = pretraining_job.run(_job(tmp_path, num_output_shards=2, overwrite=True))
    assert sorted(os.listdir(tmp_path / "out")) == sorted(
        ["README.txt"] + [os.path.basename(p) for p in second["output_files"]])
    assert set(first["output_files"]) - set(second["output_files"])  # one was surplus
    assert sum(second["shard_instances"]) == sum(first["shard_instances"])
    # The records' folder given as --output_file's parent of the corpus: refused.
    with pytest.raises(OutputGuardError, match="is the input"):
        pretraining_job.run(dataclasses.replace(_job(tmp_path),
                                                output_file=str(tmp_path / "corpus.txt")))


def test_create_pretraining_data_cli_refuses_in_one_line(tmp_path):
    _corpus(tmp_path / "corpus.txt")
    _vocab(tmp_path / "vocab.txt")
    before = snapshot(tmp_path)
    result = run_command("data_prep.create_pretraining_data",
                         f"--input_file={tmp_path / 'corpus.txt'}",
                         f"--output_file={tmp_path / 'corpus.txt'}",
                         f"--vocab_file={tmp_path / 'vocab.txt'}")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "is the input" in result.stderr.strip().splitlines()[-1]
    assert_kept(before, tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "vocab.txt"]


# ------------------------------------------------------------------ extend_vocab, demo


def test_extend_vocab_overwrite_onto_its_own_init_checkpoint_is_refused(tmp_path):
    from bert_tf.extend_vocab import extend_model_dir

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]
    init = make_model_dir(tmp_path / "init", tokens, tiny_config(vocab_size=len(tokens)))
    _corpus(tmp_path / "corpus.txt", docs=3)
    before = snapshot(tmp_path)
    for output, message in [(init, "is the input"), (str(tmp_path), "contains the input")]:
        with pytest.raises(OutputGuardError, match=message):
            extend_model_dir(init, str(tmp_path / "corpus.txt"), output, num_new_tokens=3,
                             overwrite=True)
    assert_kept(before, tmp_path)
    model_dir.load_encoder(init)


def test_demo_refuses_the_checkout_and_folders_of_the_user(tmp_path):
    from demo import run_demo

    with pytest.raises(OutputGuardError, match="contains the input"):
        output_guard.claim_output_dir(REPO, "run_demo", flag="--output_dir",
                                      inputs=[run_demo.DATA], clear=True)
    assert not os.path.exists(os.path.join(REPO, output_guard.MARKER_FILE))
    (tmp_path / "thesis.tex").write_text("years of work")
    before = snapshot(tmp_path)
    result = run_command("demo.run_demo", f"--output_dir={tmp_path}")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "not made by bert_tf" in result.stderr
    assert_kept(before, tmp_path)


# ------------------------------------------------------------------ finetune model dirs


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    root = tmp_path_factory.mktemp("guard_finetune")
    words = sorted({w for s in SST2_POSITIVE + SST2_NEGATIVE for w in s.split()})
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    make_model_dir(root / "init", tokens, tiny_config(vocab_size=len(tokens)))
    write_sst2_dir(root / "sst2", train_repeats=2)
    # In process (the command line runs below, on the refusals): a fine-tuned dir as
    # finetune writes it.
    from bert_tf import finetune
    from bert_tf.app.setting_fields import parse_args

    finetune.run(finetune.FinetuneConfig.from_flags(parse_args(finetune.define_flags, [
        "--task_name=SST-2", "--max_seq_length=16", f"--data_dir={root / 'sst2'}",
        f"--init_checkpoint={root / 'init'}", f"--output_dir={root / 'out'}", "--do_train",
        "--train_batch_size=8", "--num_train_epochs=1"])))
    return root


def test_failed_finetune_into_a_finetuned_dir_changes_nothing(finetuned, tmp_path):
    """The issue's mistake 2: a --data_dir without train.tsv used to rewrite the dir's
    config, vocab and task_config before failing."""
    empty = tmp_path / "no_train"
    empty.mkdir()
    before = snapshot(finetuned / "out")
    result = run_command("bert_tf.finetune", "--task_name=SST-2", "--max_seq_length=16",
                         f"--data_dir={empty}", f"--init_checkpoint={finetuned / 'init'}",
                         f"--output_dir={finetuned / 'out'}", "--do_train",
                         "--train_batch_size=8")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert_kept(before, finetuned / "out")
    assert set(snapshot(finetuned / "out")) == set(before)


def test_finetune_into_a_dir_of_another_run_names_the_setting(finetuned):
    before = snapshot(finetuned / "out")
    cola = finetuned / "cola"
    cola.mkdir()
    (cola / "train.tsv").write_text("".join(f"src\t1\t\t{s}\n" for s in SST2_POSITIVE))
    common = [f"--init_checkpoint={finetuned / 'init'}", f"--output_dir={finetuned / 'out'}",
              "--do_train", "--train_batch_size=8"]
    # Through the command line once (exit 1, one line, no traceback) ...
    result = run_command("bert_tf.finetune", "--max_seq_length=16", "--task_name=CoLA",
                         f"--data_dir={cola}", *common)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "task SST-2" in result.stderr and "--overwrite" in result.stderr
    assert_kept(before, finetuned / "out")
    # ... and the other settings in process (the same refusal, no interpreter start-up).
    from bert_tf import finetune
    from bert_tf.app.setting_fields import parse_args

    for flags, setting in [(["--task_name=SST-2", f"--data_dir={finetuned / 'sst2'}",
                             "--optimizer=lamb"], "optimizer adamw"),
                           (["--task_name=SST-2", f"--data_dir={finetuned / 'sst2'}",
                             "--max_seq_length=32"], "max_seq_length 16")]:
        config = finetune.FinetuneConfig.from_flags(parse_args(
            finetune.define_flags, ["--max_seq_length=16", *flags, *common]))
        with pytest.raises(run_record.RunMismatchError) as refused:
            finetune.run(config)
        assert "\n" not in str(refused.value), str(refused.value)
        assert setting in str(refused.value) and "--overwrite" in str(refused.value)
        assert_kept(before, finetuned / "out")


# ------------------------------------------------------------------ untrusted model dirs


def test_safetensors_index_may_not_name_files_outside_its_directory(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    from bert_tf.checkpoints import huggingface
    from bert_tf.checkpoints.weights import CheckpointFormatError

    outside = tmp_path / "secret.safetensors"
    save_file({"x": np.zeros(2, np.float32)}, str(outside))
    model = tmp_path / "model"
    model.mkdir()
    for shard in ["../secret.safetensors", str(outside), "sub/../../secret.safetensors", 7]:
        index = model / "model.safetensors.index.json"
        index.write_text(json.dumps({"weight_map": {"x": shard}}))
        with pytest.raises(CheckpointFormatError, match="plain file names"):
            huggingface.load_huggingface_tensors(str(index))
    save_file({"x": np.ones(2, np.float32)}, str(model / "part-1.safetensors"))
    index.write_text(json.dumps({"weight_map": {"x": "part-1.safetensors"}}))
    assert huggingface.load_huggingface_tensors(str(index))["x"].tolist() == [1.0, 1.0]


def test_pytorch_bin_is_refused_with_a_torch_whose_weights_only_load_is_unsafe(
        tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from bert_tf.checkpoints import huggingface
    from bert_tf.checkpoints.weights import CheckpointFormatError

    path = tmp_path / "pytorch_model.bin"
    torch.save({"x": torch.ones(2)}, str(path))
    assert huggingface.load_huggingface_tensors(str(path))["x"].tolist() == [1.0, 1.0]
    monkeypatch.setattr(torch, "__version__", "2.5.1+cpu")
    with pytest.raises(CheckpointFormatError, match="cannot read pytorch_model.bin safely"):
        huggingface.load_huggingface_tensors(str(path))


def test_pytorch_bin_that_is_no_state_dict_is_one_line(tmp_path):
    torch = pytest.importorskip("torch")
    from bert_tf.checkpoints import huggingface
    from bert_tf.checkpoints.weights import CheckpointFormatError

    path = tmp_path / "pytorch_model.bin"
    for content in ([torch.ones(2)], {"x": [1, 2]}):
        torch.save(content, str(path))
        with pytest.raises(CheckpointFormatError, match="not a state dict") as refused:
            huggingface.load_huggingface_tensors(str(path))
        assert "\n" not in str(refused.value)


def test_a_checkpoint_path_holding_a_glob_character_is_one_line(tmp_path):
    with pytest.raises(model_dir.ModelDirError, match="holds `\\[`"):
        model_dir.check_checkpoint_files(str(tmp_path / "runs[1]" / "ckpt-1"))


# ------------------------------------------------------------------ the other commands


def test_every_other_command_refuses_to_write_over_its_inputs(tmp_path):
    from bert_tf import export_model, extract_features
    from bert_tf.app.setting_fields import parse_args
    from data_prep import build_vocab

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]
    model = make_model_dir(tmp_path / "model", tokens, tiny_config(vocab_size=len(tokens)))
    corpus = _corpus(tmp_path / "corpus.txt", docs=2)
    before = snapshot(tmp_path)
    with pytest.raises(OutputGuardError, match="is the input"):
        export_model.run(export_model.ExportConfig.from_flags(parse_args(
            export_model.define_flags,
            [f"--init_checkpoint={model}", f"--export_dir={model}"])))
    with pytest.raises(OutputGuardError, match="contains the input"):
        export_model.run(export_model.ExportConfig.from_flags(parse_args(
            export_model.define_flags,
            [f"--init_checkpoint={model}", f"--export_dir={tmp_path}"])))
    with pytest.raises(OutputGuardError, match="is the input"):
        build_vocab.build_vocab(corpus, corpus, 50, do_lower_case=True)
    with pytest.raises(OutputGuardError, match="is the input"):
        extract_features.run(extract_features.ExtractConfig.from_flags(parse_args(
            extract_features.define_flags,
            [f"--init_checkpoint={model}", f"--input_file={corpus}",
             f"--output_file={corpus}"])))
    assert_kept(before, tmp_path)
    assert set(snapshot(tmp_path)) == set(before)


def test_create_finetuning_data_writes_nothing_on_bad_input_and_keeps_others_files(tmp_path):
    from bert_tf.app.setting_fields import parse_args
    from data_prep import create_finetuning_data as cfd

    words = sorted({w for s in SST2_POSITIVE + SST2_NEGATIVE for w in s.split()})
    model = make_model_dir(tmp_path / "model", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                *words], tiny_config(vocab_size=5 + len(words)))
    data = write_sst2_dir(tmp_path / "sst2", train_repeats=1)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "results.tsv").write_text("keep")

    def run(data_dir, output_dir, shards):
        return cfd.run(cfd.FinetuningDataConfig.from_flags(parse_args(cfd.define_flags, [
            "--task_name=SST-2", f"--data_dir={data_dir}", f"--init_checkpoint={model}",
            "--max_seq_length=16", f"--output_dir={output_dir}",
            f"--num_output_shards={shards}"])))

    before = snapshot(tmp_path)
    with pytest.raises(OutputGuardError, match="not made by bert_tf"):
        run(data, theirs, 1)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(Exception):  # no train.tsv: the task's one-line error
        run(empty, tmp_path / "records", 1)
    assert_kept(before, tmp_path)
    assert not (tmp_path / "records").exists()
    run(data, tmp_path / "records", 3)
    run(data, tmp_path / "records", 2)  # a rerun with fewer shards removes its surplus
    assert sorted(n for n in os.listdir(tmp_path / "records") if n.startswith("train")) == [
        "train-00000-of-00002.tf_record", "train-00001-of-00002.tf_record", "train.meta.json"]


def test_sweep_refuses_finetune_flags_that_set_the_output_dir(tmp_path):
    result = run_command("bert_tf.sweep", "--task_name=SST-2", f"--output_dir={tmp_path}/s",
                         f"--finetune_flags=--output_dir={tmp_path}/elsewhere")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "--finetune_flags sets --output_dir" in result.stderr
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ one writer, recoverable swaps


def test_a_second_run_is_refused_naming_the_holder_and_a_killed_holders_lock_is_taken(
        tmp_path):
    import signal
    import socket
    import subprocess
    import sys

    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from bert_tf.core import output_guard\n"
         f"with output_guard.locked({str(out)!r}, flag='--output_dir'):\n"
         "    print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=REPO))
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(output_guard.OutputLockedError) as refused:
            with output_guard.locked(str(out), flag="--output_dir"):
                pass
        message = str(refused.value)
        assert "\n" not in message
        assert f"pid {holder.pid} on {socket.gethostname()}" in message
    finally:
        holder.send_signal(signal.SIGKILL)  # a kill -9: the lock file stays behind
        holder.wait()
    assert (tmp_path / ".run.lock").exists()
    with output_guard.locked(str(out), flag="--output_dir"):  # taken over
        assert json.loads((tmp_path / ".run.lock").read_text())["pid"] == os.getpid()
    assert os.listdir(tmp_path) == []


def test_a_kill_between_the_two_renames_of_an_overwrite_is_repaired_not_deleted(
        tmp_path, monkeypatch):
    out = tmp_path / "out"
    with output_guard.new_output_dir(str(out), "c") as tmp:
        output_guard.write_text(os.path.join(tmp, "a.txt"), "first")
    real_rename = os.rename
    calls = []

    def killed_after_the_first(source, target):
        calls.append(target)
        real_rename(source, target)
        if len(calls) == 1:
            raise KeyboardInterrupt  # stands for a kill: nothing after the first rename

    monkeypatch.setattr(os, "rename", killed_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        with output_guard.new_output_dir(str(out), "c", overwrite=True) as tmp:
            output_guard.write_text(os.path.join(tmp, "a.txt"), "second")
    monkeypatch.setattr(os, "rename", real_rename)
    assert not out.exists() and any(n.endswith(".old") for n in os.listdir(tmp_path))
    # The next run of any writer of that path puts the complete earlier output back.
    output_guard.remove_left_overs(str(out))
    assert (out / "a.txt").read_text() == "first" and os.listdir(tmp_path) == ["out"]


def test_an_overwrite_that_failed_before_its_record_puts_the_earlier_run_back(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "ckpt-1.index").write_text("earlier run")
    output_guard.mark(str(out), "finetune")
    before = snapshot(out)
    with pytest.raises(OutputGuardError, match="output of finetune"):
        output_guard.set_aside(str(out), "pretrain")  # another command's: never moved
    aside = output_guard.set_aside(str(out), "finetune")
    assert os.listdir(out) == [] and os.path.isdir(aside)
    # Killed here (the new run wrote nothing): the next run's check restores it.
    assert output_guard.restore_set_aside(str(out)) == aside
    assert snapshot(out) == before and sorted(os.listdir(tmp_path)) == ["out"]


def test_same_path_resolves_symlinks_locally_and_compares_remote_paths_as_text(tmp_path,
                                                                            monkeypatch):
    """A training run resumes when --init_checkpoint names its own --output_dir
    (training/run.py asks `same_path`): a symlink to the dir, `..` or `~` are that dir."""
    real = tmp_path / "run"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert output_guard.same_path(str(link), str(real))
    assert output_guard.same_path(str(real / ".." / "link") + "/", "~/run")
    assert not output_guard.same_path(str(link), str(tmp_path))
    assert output_guard.same_path("gs://bucket/runs/a/", "gs://bucket/runs/a")
    assert not output_guard.same_path("gs://bucket/runs/a", "gs://bucket/runs/b")
    # Remote paths are never resolved against the local file system.
    assert not output_guard.same_path("gs://bucket/run", str(real))


def test_single_file_outputs_replace_only_their_own_unchanged_file(tmp_path):
    path = tmp_path / "features.jsonl"
    assert output_guard.check_output_file(str(path), "extract_features",
                                          flag="--output_file") is False
    with output_guard.output_file(str(path), "extract_features") as tmp:
        output_guard.write_text(tmp, "{}\n")
    assert output_guard.check_output_file(str(path), "extract_features", flag="--output_file")
    with pytest.raises(OutputGuardError, match="output of extract_features"):
        output_guard.check_output_file(str(path), "build_vocab", flag="--vocab_file")
    path.write_text("edited by the user\n")
    with pytest.raises(OutputGuardError, match="changed since"):
        output_guard.check_output_file(str(path), "extract_features", flag="--output_file")
