"""docs/contracts.md §6 as a property rather than cases: for every command x every flag that names
an output x every mistaken target (a folder of the user's files, a user's file, `.` inside
that folder, a path through a symlink to it, an input, a folder holding an input, another
command's output, the same job's own output) x with and without --overwrite, every file
that was there keeps its sha256 and the command ends in a one-line refusal (a user error,
printed without a traceback by cli.run_main) or a completed run.

Commands run in process on a tiny model (the CLI wraps the same `run`), so the whole
matrix costs a few minutes. `python -m tests.test_user_files_property` prints the matrix.
"""

import os
import shutil
import sys

import pytest

from bert_tf.app import cli
from bert_tf.core import output_guard
from bert_tf.app.setting_fields import parse_args
from tests.helpers import (SST2_NEGATIVE, SST2_POSITIVE, make_model_dir, snapshot, tiny_config,
                           write_sst2_dir, write_vocab)

WORDS = sorted({w for s in SST2_POSITIVE + SST2_NEGATIVE for w in s.split()})
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "again", "and", ".", *WORDS]
TARGETS = ("user_dir", "user_file", "dot", "symlink", "input", "holds_input",
           "other_output", "same_job")


# ------------------------------------------------------------------ the inputs


def make_inputs(root) -> dict:
    """The inputs every command reads (one folder, so `holds_input` is that folder)."""
    inputs = os.path.join(root, "inputs")
    os.makedirs(inputs)
    vocab = write_vocab(os.path.join(inputs, "vocab.txt"), TOKENS)
    lines = []
    words = SST2_POSITIVE + SST2_NEGATIVE
    for d in range(6):
        lines += [f"{words[(d + i) % len(words)]} again and again ." for i in range(4)] + [""]
    corpus = os.path.join(inputs, "corpus.txt")
    with open(corpus, "w") as f:
        f.write("\n".join(lines) + "\n")
    model = str(make_model_dir(os.path.join(inputs, "model"), TOKENS,
                               tiny_config(vocab_size=len(TOKENS))))
    sst2 = write_sst2_dir(os.path.join(inputs, "sst2"), train_repeats=1)
    from data_prep import pretraining_job, pretraining_passes

    records = os.path.join(inputs, "records", "p.tfrecord")
    pretraining_job.run(pretraining_passes.JobConfig(
        input_file=corpus, output_file=records, vocab_file=vocab, num_workers=0,
        progress=False, dupe_factor=1, max_seq_length=16, max_predictions_per_seq=3,
        summary_file=os.path.join(root, "records_summary.json")))
    # Another command's output: a model dir bearing convert_checkpoint's marker (and, for
    # convert_checkpoint itself, one bearing pretrain's).
    others = {}
    for command in ("convert_checkpoint", "pretrain"):
        other = str(make_model_dir(os.path.join(root, "others", command), TOKENS,
                                   tiny_config(vocab_size=len(TOKENS))))
        output_guard.mark(other, command)
        others[command] = other
    return dict(root=root, inputs=inputs, vocab=vocab, corpus=corpus, model=model,
                sst2=sst2, records=records, others=others)


# ------------------------------------------------------------------ the commands


def _build_vocab(p, out, overwrite):
    from data_prep import build_vocab as bv

    bv.run(bv.BuildVocabConfig.from_flags(parse_args(bv.define_flags, [
        f"--input_file={p['corpus']}", f"--vocab_file={out['vocab_file']}",
        "--vocab_size=40", "--do_lower_case", "--min_frequency=1", "--num_unused=2",
        "--noprogress"])))


def _create_pretraining_data(p, out, overwrite):
    from data_prep import create_pretraining_data as cpd, pretraining_job
    from data_prep.pretraining_passes import JobConfig

    argv = [f"--input_file={p['corpus']}", f"--vocab_file={p['vocab']}",
            f"--output_file={out['output_file']}", "--max_seq_length=16",
            "--max_predictions_per_seq=3", "--dupe_factor=1", "--num_workers=0",
            f"--summary_file={out['summary_file']}",
            f"--work_dir={out['work_dir']}"] + (["--overwrite"] if overwrite else [])
    pretraining_job.run(JobConfig.from_flags(parse_args(cpd.define_flags, argv)))


def _pretrain(p, out, overwrite):
    from bert_tf import pretrain

    pretrain.run(pretrain.PretrainConfig.from_flags(parse_args(pretrain.define_flags, [
        f"--input_file={p['records']}*", f"--init_checkpoint={p['model']}",
        f"--output_dir={out['output_dir']}", "--do_train", "--train_batch_size=2",
        "--max_seq_length=16", "--max_predictions_per_seq=3", "--num_train_steps=1",
        "--num_warmup_steps=0", "--steps_per_loop=1"] + (["--overwrite"] if overwrite else []))))


def _finetune(p, out, overwrite):
    from bert_tf import finetune

    finetune.run(finetune.FinetuneConfig.from_flags(parse_args(finetune.define_flags, [
        "--task_name=SST-2", f"--data_dir={p['sst2']}", f"--init_checkpoint={p['model']}",
        f"--output_dir={out['output_dir']}", "--do_train", "--max_seq_length=16",
        "--train_batch_size=8", "--num_train_steps=1", "--steps_per_loop=1"]
        + (["--overwrite"] if overwrite else []))))


def _extract_features(p, out, overwrite):
    from bert_tf import extract_features as ef

    ef.run(ef.ExtractConfig.from_flags(parse_args(ef.define_flags, [
        f"--input_file={p['corpus']}", f"--output_file={out['output_file']}",
        f"--init_checkpoint={p['model']}", "--layers=-1", "--max_seq_length=16"])))


def _convert_checkpoint(p, out, overwrite):
    from bert_tf import convert_checkpoint as cc

    cc.run(cc.ConvertConfig.from_flags(parse_args(cc.define_flags, [
        "--source_format=bert_tf", "--target_format=tf1", f"--input={p['model']}",
        f"--output_dir={out['output_dir']}"] + (["--overwrite"] if overwrite else []))))


def _export_model(p, out, overwrite):
    from bert_tf import export_model

    export_model.run(export_model.ExportConfig.from_flags(parse_args(
        export_model.define_flags, [f"--init_checkpoint={p['model']}",
                                    f"--export_dir={out['export_dir']}", "--max_seq_length=16",
                                    "--max_batch_size=4", "--notext_signatures"])))


def _extend_vocab(p, out, overwrite):
    from bert_tf import extend_vocab as ev

    config = ev.ExtendVocabConfig.from_flags(parse_args(ev.define_flags, [
        f"--init_checkpoint={p['model']}", f"--input_file={p['corpus']}",
        f"--output_dir={out['output_dir']}", "--num_new_tokens=2", "--min_frequency=1"]
        + (["--overwrite"] if overwrite else [])))
    ev.extend_model_dir(config.init_checkpoint, config.input_file, config.output_dir,
                        num_new_tokens=config.num_new_tokens,
                        do_lower_case=config.do_lower_case,
                        strip_accents=config.strip_accents, pre_tokenizer=config.pre_tokenizer,
                        min_frequency=config.min_frequency,
                        max_input_lines=config.max_input_lines, overwrite=config.overwrite)


def _create_finetuning_data(p, out, overwrite):
    from data_prep import create_finetuning_data as cfd

    cfd.run(cfd.FinetuningDataConfig.from_flags(parse_args(cfd.define_flags, [
        "--task_name=SST-2", f"--data_dir={p['sst2']}", f"--init_checkpoint={p['model']}",
        "--max_seq_length=16", f"--output_dir={out['output_dir']}"])))


def _sweep(p, out, overwrite):
    from bert_tf import sweep

    # No points: what the sweep itself writes (its output dir and summary); each point is
    # a finetune run, covered above.
    sweep.run_sweep([], out["output_dir"], ["--task_name=SST-2"], "accuracy")


# command -> (runner, {output flag: "dir" | "file"}, has --overwrite, main input)
COMMANDS = {
    "build_vocab": (_build_vocab, {"vocab_file": "file"}, False, "corpus"),
    "create_pretraining_data": (_create_pretraining_data,
                                {"output_file": "file", "summary_file": "file",
                                 "work_dir": "dir"}, True, "corpus"),
    "pretrain": (_pretrain, {"output_dir": "dir"}, True, "model"),
    "finetune": (_finetune, {"output_dir": "dir"}, True, "sst2"),
    "extract_features": (_extract_features, {"output_file": "file"}, False, "corpus"),
    "convert_checkpoint": (_convert_checkpoint, {"output_dir": "dir"}, True, "model"),
    "export_model": (_export_model, {"export_dir": "dir"}, False, "model"),
    "extend_vocab": (_extend_vocab, {"output_dir": "dir"}, True, "model"),
    "create_finetuning_data": (_create_finetuning_data, {"output_dir": "dir"}, False, "sst2"),
    "sweep": (_sweep, {"output_dir": "dir"}, False, "sst2"),
}


def _default_outputs(case: str, flags: dict) -> dict:
    """Each output flag's harmless default in the case's own folder."""
    return {flag: os.path.join(case, f"default_{flag}" + (".txt" if kind == "file" else ""))
            for flag, kind in flags.items()}


def _target(name: str, p: dict, case: str, command: str, kind: str) -> str:
    user = os.path.join(case, "user")
    if name == "user_dir":
        return user
    if name == "user_file":
        return os.path.join(user, "notes.txt")
    if name == "dot":
        return "."
    if name == "symlink":
        return os.path.join(case, "link") if kind == "dir" else os.path.join(
            case, "link", "notes.txt")
    if name == "input":
        return p[COMMANDS[command][3]]
    if name == "holds_input":
        return p["inputs"]
    if name == "other_output":
        other = p["others"]["pretrain" if command == "convert_checkpoint"
                            else "convert_checkpoint"]
        return other if kind == "dir" else os.path.join(other, "vocab.txt")
    return os.path.join(case, "mine" + (".txt" if kind == "file" else ""))  # same_job


def _outcome(call) -> str:
    """'completed', or 'refused' for an error cli.run_main prints as one line (exit 1);
    anything else (a traceback) fails the test."""
    try:
        call()
    except SystemExit as e:  # absl usage errors
        assert e.code not in (0, None)
        return "refused"
    except Exception as e:  # noqa: BLE001 - classified below
        one_line = (isinstance(e, cli._user_errors()) or cli._storage_full(e)
                    or isinstance(e, ValueError))  # data_prep mains: CorpusError
        if not one_line:
            raise
        assert "\n" not in str(e).strip(), str(e)
        return "refused"
    return "completed"


def run_case(p: dict, work: str, command: str, flag: str, target: str, overwrite: bool):
    """One cell of the matrix; returns its outcome after checking every file's bytes."""
    runner, flags, _, _ = COMMANDS[command]
    kind = flags[flag]
    case = case_dir(work, command, flag, target, overwrite)
    user = os.path.join(case, "user")
    if os.path.exists(case):  # the same job's output, made for the first variant
        shutil.rmtree(user)
        os.remove(os.path.join(case, "link"))
    os.makedirs(user)
    for name, text in (("notes.txt", "my notes\n"), ("results.csv", "a,b\n1,2\n")):
        with open(os.path.join(user, name), "w") as f:
            f.write(text)
    os.symlink(user, os.path.join(case, "link"))
    out = _default_outputs(case, flags)
    out[flag] = _target(target, p, case, command, kind)
    if target == "same_job" and not os.path.exists(out[flag]):
        runner(p, out, False)  # the job's own earlier output (once for both variants)
    before = snapshot(p["root"])
    own = os.path.relpath(out[flag], p["root"]) if target == "same_job" else None
    cwd = os.getcwd()
    os.chdir(user)
    try:
        outcome = _outcome(lambda: runner(p, out, overwrite))
    finally:
        os.chdir(cwd)
    after = snapshot(p["root"])
    changed = sorted(k for k in before if after.get(k) != before[k]
                     and not (own and (k == own or k.startswith(own + os.sep)
                                       or k.startswith(os.path.dirname(own) + os.sep + ".")
                                       or k.startswith(own + "."))))
    assert not changed, f"{command} --{flag}={target} overwrite={overwrite}: {changed}"
    if target != "same_job":
        for name in os.listdir(case):  # nothing left beside the user's folder: no temp
            assert name in ("user", "link", *[os.path.basename(v) for v in out.values()],
                            *[f".{os.path.basename(v)}.lock" for v in out.values()]) \
                or name.startswith(".") and name.endswith(output_guard.MARKER_FILE), name
    return outcome


def case_dir(work: str, command: str, flag: str, target: str, overwrite: bool) -> str:
    """A folder per case; the same job's variants share one (its first run is reused)."""
    variant = "" if target == "same_job" else f"-{int(overwrite)}"
    return os.path.join(work, f"{command}-{flag}-{target}{variant}")


def cases():
    for command, (_, flags, has_overwrite, _) in COMMANDS.items():
        for flag in flags:
            for target in TARGETS:
                for overwrite in ((False, True) if has_overwrite else (False,)):
                    yield command, flag, target, overwrite


def run_matrix(root: str, log=None) -> list:
    p = make_inputs(root)
    work = os.path.join(root, "cases")
    rows = []
    for command, flag, target, overwrite in cases():
        outcome = run_case(p, work, command, flag, target, overwrite)
        rows.append((command, flag, target, overwrite, outcome))
        if log:
            log(f"{command:24s} --{flag:13s} {target:13s} "
                f"{'--overwrite' if overwrite else '           '} -> {outcome}")
        if target != "same_job" or overwrite or not COMMANDS[command][2]:
            shutil.rmtree(case_dir(work, command, flag, target, overwrite),
                          ignore_errors=True)
    return rows


# Mistakes a command must refuse whatever the flags: the rest may complete (a new file in
# the user's folder, a marked work subfolder there, the same job's rerun).
MUST_REFUSE = {"user_file", "input", "holds_input", "other_output"}


def test_every_output_flag_of_every_command_keeps_every_file(tmp_path):
    rows = run_matrix(str(tmp_path))
    assert len(rows) == sum(1 for _ in cases())
    # (A --work_dir in any folder, another command's output too, only adds a marked
    # subfolder of its own and removes it at the end.)
    wrongly_completed = [r for r in rows if r[2] in MUST_REFUSE and r[4] == "completed"
                         and not (r[1] == "work_dir" and r[2] == "other_output")]
    assert not wrongly_completed, wrongly_completed
    # A folder of the user's is never taken as a directory output (it holds files).
    # (--work_dir gets a marked subfolder there, --export_dir a new version folder.)
    taken = [r for r in rows if r[2] in ("user_dir", "dot", "symlink") and r[4] == "completed"
             and COMMANDS[r[0]][1][r[1]] == "dir" and r[1] not in ("work_dir", "export_dir")]
    assert not taken, taken
    # The same job's rerun completes (where the command has --overwrite, with it; without
    # it a command may refuse to redo a finished output).
    same_job = [r for r in rows if r[2] == "same_job" and (r[3] or not COMMANDS[r[0]][2])]
    assert all(r[4] == "completed" for r in same_job), same_job


if __name__ == "__main__":
    import tempfile

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with tempfile.TemporaryDirectory() as root:
        run_matrix(root, log=lambda line: print(line, file=sys.stdout, flush=True))
