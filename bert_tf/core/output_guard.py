"""What every command promises about the user's files (docs/contracts.md §6), written once.

Every command that writes a directory or a file a user reads goes through here:

- **Ownership.** A directory a command creates carries a marker file (`MARKER_FILE`, a
  small hidden JSON naming the command). A command may create what is absent (an empty
  directory counts as absent: it holds nothing to lose), and replaces only what bears
  the marker of the same kind of job (`--overwrite` never widens that to another
  command's output, to an unmarked folder, to `.` or a folder holding the working
  directory); it never writes its marker into a folder that holds files it did not
  write, and never touches a path that is an input, contains one, or lies inside an
  input directory (`check_apart`).
- **Single-file outputs** (`--vocab_file` of build_vocab, `--output_file` of
  extract_features, `--summary_file`: `check_output_file` / `output_file`): a file has
  no room for a marker, so its marker is a hidden sidecar beside it,
  `.NAME.bert_tf_output.json`, naming the command and the sha256 of what it wrote. A
  file is replaced only when its sidecar names the same command and its content is still
  what that command wrote (a file the user edited since is the user's); a file without
  one (the user's, an input, a model dir's vocab.txt) is never replaced.
- **One writer at a time** (`locked`): an output directory (or export base path) is
  locked for the whole run by an exclusive `flock` on a hidden sibling `.NAME.lock`
  holding the holder's pid and host; a second run is refused in one line naming them.
  The kernel drops the lock when its process dies, so a killed run's lock is taken over
  by the next run without any guess about stale pids.
- **Work directories** (`claim_work_dir` / `release_work_dir`): a `--work_dir` that does
  not exist is created and marked; one that is ours (an earlier run of the same job) is
  reused; any other existing folder gets a fresh marked subfolder, so only what the job
  wrote is removed at the end.
- **Whole or nothing.** Files are written under a hidden, unpredictable temporary name
  beside the target and renamed (`atomic_file`, `write_text`, `write_json`); directories
  are built beside their target and swapped in when complete (`new_output_dir`), with
  `--overwrite` replacing only an earlier output of the same command. The swap is two
  renames (the old output to a hidden `.NAME.<id>.old`, the new one in its place); a
  run killed between them leaves the old copy complete, and the next run puts it back
  (`recover`) instead of deleting it. On object stores (gs://), where a
  "rename" is a copy per object, the files named `last` (a SavedModel's `saved_model.pb`,
  a checkpoint's `checkpoint` state file) are copied after everything else, so a reader
  polling the target (TF Serving) never loads a partial one.

TF-free for local paths (the offline data tools use it); remote paths go through
`tf.io.gfile`, imported only then.

>>> import tempfile
>>> base = tempfile.mkdtemp(); corpus = os.path.join(base, "corpus.txt")
>>> _ = open(corpus, "w").write("text\\n")
>>> check_apart(base, [corpus], flag="--output_dir")
Traceback (most recent call last):
...
bert_tf.core.output_guard.OutputGuardError: --output_dir=... contains the input .../corpus.txt: ...
>>> out = os.path.join(base, "out")
>>> with new_output_dir(out, "demo", inputs=[corpus]) as tmp:
...     write_text(os.path.join(tmp, "a.txt"), "done")
>>> sorted(os.listdir(out)), owner(out)["command"]
(['.bert_tf_output.json', 'a.txt'], 'demo')
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import socket
import uuid
from typing import Iterable, Iterator, Optional, Sequence

from bert_tf.core import file_io
from bert_tf.core.errors import BertTfError

MARKER_FILE = ".bert_tf_output.json"


class OutputGuardError(BertTfError, FileExistsError):
    """A path a command refuses to write or delete; says which and what to do instead."""


# ------------------------------------------------------------------ paths


def _norm(path: str) -> str:
    """A comparable form: the real absolute path (symlinks resolved) locally, the
    URL without a trailing slash remotely."""
    path = os.fspath(path)
    if file_io.is_remote(path):
        return path.rstrip("/")
    return os.path.realpath(os.path.abspath(os.path.expanduser(path)))


def _within(child: str, parent: str) -> bool:
    """`child` is `parent` or lies below it (both normalised)."""
    sep = "/" if file_io.is_remote(parent) else os.sep
    return child == parent or child.startswith(parent.rstrip(sep) + sep)


def lies_within(path: str, directory: str) -> bool:
    """`path` is `directory` or lies below it (symlinks resolved)."""
    return _within(_norm(path), _norm(directory))


def same_path(a: str, b: str) -> bool:
    """`a` and `b` name the same place: local paths with symlinks, `~` and `..` resolved,
    remote ones (gs://) as text without a trailing slash.

    >>> same_path("gs://bucket/run/", "gs://bucket/run"), same_path("gs://b/run", "gs://b/RUN")
    (True, False)
    """
    return _norm(a) == _norm(b)


def _gfile():
    import tensorflow as tf  # remote paths only; TF-free module (TensorFlow: 9 s)

    return tf.io.gfile


def _exists(path: str) -> bool:
    return _gfile().exists(path) if file_io.is_remote(path) else os.path.lexists(path)


def _isdir(path: str) -> bool:
    return file_io.isdir(path)


def _listdir(path: str) -> list:
    if file_io.is_remote(path):
        return [n.rstrip("/") for n in _gfile().listdir(path)]
    return os.listdir(path)


def _makedirs(path: str) -> None:
    if file_io.is_remote(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def _rmtree(path: str) -> None:
    if file_io.is_remote(path):
        if _gfile().exists(path):
            _gfile().rmtree(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def check_apart(path: str, inputs: Iterable[Optional[str]], *, flag: str,
                allow_inside: bool = False) -> None:
    """Raises OutputGuardError when the output `path` is an input, contains an input, or
    lies inside an input directory: writing or replacing it could change what the user
    gave the command to read. `allow_inside`: a new folder inside an input directory is
    fine (a training run's --output_dir inside its --data_dir changes no input file).

    >>> import tempfile; model = tempfile.mkdtemp()
    >>> check_apart(model + ".out", [model], flag="--output_dir")   # siblings: fine
    >>> check_apart(os.path.join(model, "sub"), [model], flag="--output_dir")
    Traceback (most recent call last):
    ...
    bert_tf.core.output_guard.OutputGuardError: --output_dir=.../sub is inside the input ...: ...
    """
    target = _norm(path)
    for given in inputs:
        if not given:
            continue
        source = _norm(given)
        if target == source:
            what = "is the input"
        elif _within(source, target):
            what = "contains the input"
        elif not allow_inside and _within(target, source) and _isdir(given):
            what = "is inside the input"
        else:
            continue
        raise OutputGuardError(f"{flag}={path} {what} {given}: a command never writes over "
                               f"what it reads; choose an output path outside it")


# ------------------------------------------------------------------ markers


def owner(directory: str) -> Optional[dict]:
    """The marker a command left in `directory` ({"command": ..., ...}), or None."""
    return owner_record(os.path.join(directory, MARKER_FILE))


def is_complete(directory: str, command: str, job: str) -> bool:
    """`directory` is `command`'s finished output of this very `job` (`new_output_dir`):
    a rerun after a kill that came once the output was in place has nothing to do."""
    record = owner(directory)
    return bool(record) and record["command"] == command and record.get("job") == job


def is_ours(directory: str, command: Optional[str] = None) -> bool:
    """`directory` bears a marker (of `command`, when given)."""
    record = owner(directory)
    return record is not None and (command is None or record["command"] == command)


def mark(directory: str, command: str, **record) -> None:
    """Writes the marker that makes `directory` the output of `command`."""
    write_json(os.path.join(directory, MARKER_FILE), dict(record, command=command))


def _is_empty_dir(path: str) -> bool:
    return _isdir(path) and not _listdir(path)


# ------------------------------------------------------------------ work dirs


def claim_work_dir(requested: str, command: str, *, inputs: Sequence[Optional[str]] = (),
                   outputs: Sequence[Optional[str]] = (), flag: str = "--work_dir") -> str:
    """The directory a job keeps its temporary files in, for `release_work_dir` to remove
    at the end: `requested` itself when it does not exist yet (created and marked) or is an
    earlier run's of the same command; else a marked subfolder `requested/<command>.work`,
    so a folder of the user's (or the output directory) keeps everything it had.

    Refuses a work dir that is, contains or lies inside an input.

    >>> import tempfile; mine = tempfile.mkdtemp()
    >>> _ = open(os.path.join(mine, "notes.txt"), "w").write("keep me")
    >>> work = claim_work_dir(mine, "job"); os.path.relpath(work, mine)
    'job.work'
    >>> release_work_dir(work, "job"); os.listdir(mine)
    ['notes.txt']
    """
    check_apart(requested, inputs, flag=flag)
    chosen = requested
    if _exists(requested) and not is_ours(requested, command) or any(
            out and _within(_norm(out), _norm(requested)) for out in outputs):
        if _exists(requested) and not _isdir(requested):
            raise OutputGuardError(f"{flag}={requested} is a file; name a directory")
        chosen = os.path.join(requested, f"{command}.work")
        if _exists(chosen) and not is_ours(chosen, command):
            raise OutputGuardError(f"{flag}={requested}: {chosen} exists and was not made by "
                                   f"{command}; choose another {flag}")
    if not _exists(chosen):
        _makedirs(chosen)
        mark(chosen, command, role="work_dir")
    elif not is_ours(chosen, command):
        mark(chosen, command, role="work_dir")  # an empty folder we just made the parent of
    return chosen


def release_work_dir(work: str, command: str) -> None:
    """Removes a work dir `claim_work_dir` returned (only if it still bears our marker)."""
    if _exists(work) and is_ours(work, command):
        _rmtree(work)


# ------------------------------------------------------------------ files


def _temporary_name(path: str) -> str:
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.{uuid.uuid4().hex[:12]}.tmp")


_LEFT_OVER = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{12}\.(?P<kind>tmp|old)$")


def remove_left_overs(path: str) -> None:
    """Clears what a killed writer of `path` left beside it: hidden `.NAME.<12 hex>.tmp`
    files or dirs (`atomic_file`, `new_output_dir`) are removed; a `.NAME.<12 hex>.old`
    dir (a swap killed between its two renames) is put back when `path` is missing (it
    is the complete earlier output), else removed (the swap had finished). Only this
    module makes such names, so a rerun may act on them."""
    remote = file_io.is_remote(path)
    path = path.rstrip("/") if remote else os.path.abspath(path)
    directory, name = os.path.split(path)
    if not _isdir(directory):
        return
    entries = sorted(_listdir(directory))
    for entry in entries:
        match = _LEFT_OVER.match(entry)
        if not match or match.group("name") != name:
            continue
        left = os.path.join(directory, entry)
        cut_short = remote and _exists(path) and not _exists(os.path.join(path, MARKER_FILE))
        if match.group("kind") == "old" and is_ours(left) and (not _exists(path)
                                                               or cut_short):
            if cut_short:  # an object-store copy killed before its marker: not whole
                _rmtree(path)
            _rename(left, path)  # the earlier output, whole: the swap never finished
        elif _isdir(left):
            _rmtree(left)
        elif remote:
            _gfile().remove(left)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.remove(left)


def _rename(source: str, target: str) -> None:
    """Moves a directory. On an object store a directory is its objects, which no rename
    moves at once (TensorFlow's in-memory and some remote file systems move only the
    name and lose the files): each file is copied, the marker last, then `source` goes."""
    if file_io.is_remote(source):
        _publish(source, target, last=())
    else:
        os.rename(source, target)


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[str]:
    """Yields a hidden, unpredictable temporary path beside `path` (a left-over one never
    matches `records/*`-style globs of visible files); it is renamed to `path` when the
    block ends without error and removed when it raises, so `path` is always whole.

    >>> import tempfile; p = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> with atomic_file(p) as tmp:
    ...     _ = open(tmp, "w").write("done")
    >>> open(p).read(), os.listdir(os.path.dirname(p))
    ('done', ['out.txt'])
    """
    path = os.fspath(path)
    remote = file_io.is_remote(path)
    if not remote:
        path = os.path.abspath(path)
    directory = os.path.dirname(path)
    if directory:
        _makedirs(directory)
    remove_left_overs(path)  # a killed earlier writer's temporary
    tmp = _temporary_name(path)
    try:
        yield tmp
        if remote:
            _gfile().rename(tmp, path, overwrite=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(Exception):
            if remote:
                if _gfile().exists(tmp):
                    _gfile().remove(tmp)
            elif os.path.lexists(tmp):
                os.remove(tmp)
        raise


def write_bytes(path: str, data: bytes) -> None:
    """Writes `data` to `path` whole or not at all."""
    with atomic_file(path) as tmp:
        with file_io.open_file(tmp, "wb") as f:
            f.write(data)


def write_text(path: str, text: str) -> None:
    """Writes `text` (UTF-8) to `path` whole or not at all."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str, obj, **dump_kwargs) -> None:
    """Writes `obj` as JSON to `path` whole or not at all (indent 2, sorted keys unless
    `dump_kwargs` say otherwise)."""
    options = dict(indent=2, sort_keys=True)
    options.update(dump_kwargs)
    write_text(path, json.dumps(obj, **options) + "\n")


def copy_file(source: str, target: str) -> None:
    """Copies `source` to `target` whole or not at all."""
    with atomic_file(target) as tmp:
        if file_io.is_remote(source) or file_io.is_remote(tmp):
            _gfile().copy(source, tmp, overwrite=True)
        else:
            shutil.copyfile(source, tmp)


# ------------------------------------------------------------------ directories


def _publish(tmp: str, target: str, last: Sequence[str]) -> None:
    """Moves the finished `tmp` to `target`. Locally one rename; on an object store a
    copy per file, the files named in `last` after every other one, then `tmp` removed."""
    if not file_io.is_remote(target):
        os.rename(tmp, target)
        return
    gfile = _gfile()
    deferred = []
    for root, _, files in gfile.walk(tmp):
        relative = os.path.relpath(root, tmp) if root.rstrip("/") != tmp.rstrip("/") else ""
        gfile.makedirs(os.path.join(target, relative))
        for name in files:
            pair = (os.path.join(root, name), os.path.join(target, relative, name))
            if name in last or name == MARKER_FILE:
                deferred.append(pair)
            else:
                gfile.copy(*pair, overwrite=True)
    # The marker after everything: a copy that holds it is whole (remove_left_overs).
    deferred.sort(key=lambda pair: os.path.basename(pair[0]) == MARKER_FILE)
    for source, dest in deferred:
        gfile.copy(source, dest, overwrite=True)
    gfile.rmtree(tmp)


@contextlib.contextmanager
def new_output_dir(output_dir: str, command: str, *, overwrite: bool = False,
                   inputs: Sequence[Optional[str]] = (), flag: str = "--output_dir",
                   last: Sequence[str] = ("saved_model.pb", "checkpoint"),
                   allow_existing_empty: bool = True, marked: bool = True,
                   job: Optional[str] = None) -> Iterator[str]:
    """Yields a hidden directory beside `output_dir` to build the output in; when the
    block ends without error it becomes `output_dir` (marked as `command`'s), replacing
    an earlier output only with `overwrite` and only when that one bears `command`'s
    marker; on error it is removed and `output_dir` is untouched. `marked=False` leaves out the
    marker (outputs that are never replaced, such as SavedModel versions); `job` (what
    made the output, recorded in the marker) lets a rerun see it is already done
    (`is_complete`).

    Refused (OutputGuardError, nothing written): `output_dir` is, contains or lies inside
    an input; it exists, is not empty, and `overwrite` is off; with `overwrite`, it is
    not `command`'s output (`check_replaceable`).
    """
    check_apart(output_dir, inputs, flag=flag)
    remote = file_io.is_remote(output_dir)
    target = output_dir.rstrip("/") if remote else os.path.abspath(output_dir)
    with locked(target, flag=flag):
        remove_left_overs(target)  # a killed earlier build; a half-done swap put back
        yield from _build_output_dir(output_dir, target, command, overwrite=overwrite,
                                     flag=flag, last=last, marked=marked, job=job,
                                     allow_existing_empty=allow_existing_empty)


def _build_output_dir(output_dir, target, command, *, overwrite, flag, last, marked, job,
                      allow_existing_empty):
    remote = file_io.is_remote(target)
    replace = False
    if _exists(target):
        if not _isdir(target):
            raise OutputGuardError(f"{flag}={output_dir} is a file; name a directory")
        if not (allow_existing_empty and _is_empty_dir(target)):
            if not overwrite:
                raise OutputGuardError(f"{flag}={output_dir} exists and is not empty: choose "
                                       f"another directory, or pass --overwrite to replace "
                                       f"an earlier output of bert_tf")
            check_replaceable(target, command, flag=flag, given=output_dir)
        replace = True
    parent = os.path.dirname(target)
    _makedirs(parent)
    tmp = os.path.join(parent, f".{os.path.basename(target)}.{uuid.uuid4().hex[:12]}.tmp")
    _makedirs(tmp)
    try:
        yield tmp
        if marked:
            mark(tmp, command, **({"job": job} if job else {}))
        if replace:
            old = os.path.join(parent,
                               f".{os.path.basename(target)}.{uuid.uuid4().hex[:12]}.old")
            if remote:
                _publish_replacing(tmp, target, last)
            elif _is_empty_dir(target):
                os.rmdir(target)
                os.rename(tmp, target)
            else:  # a kill between the renames: the next run puts `old` back
                os.rename(target, old)
                os.rename(tmp, target)
                _rmtree(old)
        else:
            _publish(tmp, target, last)
    finally:
        if _exists(tmp):
            _rmtree(tmp)


def _publish_replacing(tmp: str, target: str, last: Sequence[str]) -> None:
    """Object stores have no atomic directory swap: the earlier output is copied aside
    (`.NAME.<hex>.old`), the new one copied in (`last` files, then the marker, last),
    then the earlier one removed. Until the new copy is whole, the new output is whole
    in `tmp` and the earlier one in `.old`, so no moment holds neither; a copy that fails
    puts the earlier output back, and after a kill the next run does
    (`remove_left_overs`: a target without its marker is a copy cut short)."""
    parent, name = os.path.split(target)
    old = os.path.join(parent, f".{name}.{uuid.uuid4().hex[:12]}.old")
    _rename(target, old)
    try:
        _publish(tmp, target, last)
    except BaseException:
        if _exists(target):
            _rmtree(target)
        _rename(old, target)
        raise
    _rmtree(old)


def claim_output_dir(directory: str, command: str, *, flag: str,
                     inputs: Sequence[Optional[str]] = (), clear: bool = False) -> None:
    """Makes `directory` the output of `command` before the command writes into it in
    place (each file it adds written whole): it must be new, empty, or an earlier output
    of `command` (`clear` then empties it first); created and marked when new. Refuses a
    directory that is, contains or lies inside an input, or holds others' files.

    >>> import tempfile; d = os.path.join(tempfile.mkdtemp(), "run")
    >>> claim_output_dir(d, "demo", flag="--output_dir"); is_ours(d, "demo")
    True
    """
    check_apart(directory, inputs, flag=flag)
    if _exists(directory):
        if not _isdir(directory):
            raise OutputGuardError(f"{flag}={directory} is a file; name a directory")
        if is_ours(directory, command):
            if clear:
                _rmtree(directory)
                _makedirs(directory)
                mark(directory, command)
            return
        if not _is_empty_dir(directory):
            other = owner(directory)
            made_by = f"the output of {other['command']}" if other else "not made by bert_tf"
            raise OutputGuardError(f"{flag}={directory} exists, is not empty and is "
                                   f"{made_by}; choose a new or empty directory")
    _makedirs(directory)
    mark(directory, command)


def _holds_working_dir(target: str) -> bool:
    return not file_io.is_remote(target) and _within(_norm(os.getcwd()), _norm(target))


def check_replaceable(directory: str, command: str, *, flag: str,
                      given: Optional[str] = None) -> None:
    """Raises OutputGuardError unless `directory` may be replaced by `command`: it bears
    `command`'s own marker (an output of the same kind of job; another command's output,
    or a folder without a marker, is never replaced whatever the flags) and does not hold
    the working directory (`.`: renaming it would move the command's own cwd).

    >>> import tempfile; d = tempfile.mkdtemp(); mark(d, "pretrain")
    >>> check_replaceable(d, "convert_checkpoint", flag="--output_dir")
    Traceback (most recent call last):
    ...
    bert_tf.core.output_guard.OutputGuardError: --output_dir=... is the output of pretrain; ...
    """
    given = given or directory
    record = owner(directory)
    if record is None:
        raise OutputGuardError(
            f"{flag}={given} holds files no bert_tf command wrote (it has no {MARKER_FILE}); "
            f"a command never replaces them, even with --overwrite: choose another "
            f"directory, or move it away yourself")
    if record["command"] != command:
        raise OutputGuardError(
            f"{flag}={given} is the output of {record['command']}; {command} replaces only "
            f"its own outputs, even with --overwrite: choose another directory")
    if _holds_working_dir(directory):
        raise OutputGuardError(f"{flag}={given} is or holds the working directory: run the "
                               f"command from outside it to replace it")


_SET_ASIDE = ".replaced"
_SET_ASIDE_NAME = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{12}\.replaced$")


def set_aside(directory: str, command: str, *, flag: str = "--output_dir") -> str:
    """`--overwrite` of a training run's model dir, once every check of the new run has
    passed: moves the earlier run (which must be `command`'s: `check_replaceable`) to a
    hidden sibling `.NAME.<id>.replaced` so the new run starts in an empty `directory`;
    `remove_set_aside` deletes it once the new run has finished, `restore_set_aside`
    puts it back when the new run failed before writing anything. Returns the new path."""
    check_replaceable(directory, command, flag=flag)
    parent, name = os.path.split(_norm(directory) if not file_io.is_remote(directory)
                                 else directory.rstrip("/"))
    aside = os.path.join(parent, f".{name}.{uuid.uuid4().hex[:12]}{_SET_ASIDE}")
    _rename(os.path.join(parent, name), aside)
    _makedirs(directory)
    return aside


def _set_asides(directory: str) -> list:
    """The hidden `.NAME.<id>.replaced` siblings of `directory` that bear a marker."""
    remote = file_io.is_remote(directory)
    parent, name = os.path.split(directory.rstrip("/") if remote else _norm(directory))
    if not _isdir(parent):
        return []
    found = []
    for entry in _listdir(parent):
        match = _SET_ASIDE_NAME.match(entry)
        if match and match.group("name") == name and is_ours(os.path.join(parent, entry)):
            found.append(os.path.join(parent, entry))
    return found


def remove_set_aside(directory: str) -> None:
    """Deletes the earlier runs `set_aside` moved away from `directory` (only hidden
    siblings of its name that bear a bert_tf marker)."""
    for path in _set_asides(directory):
        _rmtree(path)


def restore_set_aside(directory: str) -> Optional[str]:
    """Puts an earlier run `set_aside` moved away back in place when `directory` is
    missing or empty (the new run was stopped or failed before writing anything): an
    `--overwrite` that never got going loses nothing. Returns the restored copy's name."""
    asides = _set_asides(directory)
    if not asides or (_exists(directory) and not _is_empty_dir(directory)):
        return None
    newest = max(asides, key=lambda p: os.path.getmtime(p) if not file_io.is_remote(p) else 0)
    if _exists(directory):
        if file_io.is_remote(directory):
            _gfile().rmtree(directory)
        else:
            os.rmdir(directory)
    _rename(newest, directory.rstrip("/") if file_io.is_remote(directory) else _norm(directory))
    return newest


# ------------------------------------------------------------------ single files

_FILE_MARKER = "{name}.bert_tf_output.json"


def _sidecar(path: str) -> str:
    directory, name = os.path.split(path.rstrip("/") if file_io.is_remote(path)
                                    else os.path.abspath(path))
    return os.path.join(directory, "." + _FILE_MARKER.format(name=name))


def file_owner(path: str) -> Optional[dict]:
    """The sidecar marker `output_file` left beside the file `path` ({"command",
    "sha256": [...]}), or None."""
    return owner_record(_sidecar(path))


def owner_record(path: str) -> Optional[dict]:
    """The JSON object in a marker file `path` that names a command, or None."""
    try:
        with file_io.open_file(path, "rb") as f:
            record = json.loads(f.read().decode("utf-8"))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError,
            UnicodeDecodeError):
        return None
    except Exception as e:  # a remote store's not-found error
        if type(e).__name__ == "NotFoundError":
            return None
        raise
    return record if isinstance(record, dict) and "command" in record else None


def is_own_file(path: str, command: str) -> bool:
    """`path` is a file `command` wrote and nobody changed since (its sidecar names
    `command` and the file's sha256)."""
    record = file_owner(path)
    return (record is not None and record["command"] == command
            and is_file(path) and file_io.sha256(path) in record.get("sha256", []))


def is_file(path: str) -> bool:
    """`path` exists and is not a directory."""
    return _exists(path) and not _isdir(path)


def check_output_file(path: str, command: str, *, flag: str,
                      inputs: Iterable[Optional[str]] = ()) -> bool:
    """Raises OutputGuardError unless the single-file output `path` may be written by
    `command`: it is no input (nor inside an input directory), and it is absent or a
    file `command` wrote and nobody changed since (`is_own_file`). Returns True when an
    earlier output of `command` is there (to be replaced).

    >>> import tempfile; d = tempfile.mkdtemp(); mine = os.path.join(d, "vocab.txt")
    >>> _ = open(mine, "w").write("the user's\\n")
    >>> check_output_file(mine, "build_vocab", flag="--vocab_file")
    Traceback (most recent call last):
    ...
    bert_tf.core.output_guard.OutputGuardError: --vocab_file=.../vocab.txt exists and was not written by build_vocab ...
    >>> new = os.path.join(d, "new.txt"); check_output_file(new, "build_vocab", flag="--vocab_file")
    False
    >>> with output_file(new, "build_vocab") as tmp:
    ...     _ = open(tmp, "w").write("[PAD]\\n")
    >>> check_output_file(new, "build_vocab", flag="--vocab_file")
    True
    """
    check_apart(path, inputs, flag=flag)
    if not _exists(path):
        return False
    if _isdir(path):
        raise OutputGuardError(f"{flag}={path} is a directory; name a file")
    if is_own_file(path, command):
        return True
    record = file_owner(path)
    why = ("was changed since" if record and record["command"] == command else
           f"is an output of {record['command']}" if record else
           f"has no {os.path.basename(_sidecar(path))} beside it")
    raise OutputGuardError(f"{flag}={path} exists and was not written by {command} ({why}): "
                           f"a command never replaces a file it did not write; choose "
                           f"another path, or move that file away yourself")


@contextlib.contextmanager
def output_file(path: str, command: str) -> Iterator[str]:
    """`atomic_file` for a single-file output of `command`, which also leaves the
    sidecar marker that lets a later run of `command` replace it (`check_output_file`;
    call that first). The sidecar lists the sha256 of both the old and the new content
    while the file is swapped, so a kill at any point leaves a file a rerun recognises."""
    path = os.fspath(path)
    previous = (file_owner(path) or {}).get("sha256", []) if is_file(path) else []
    with atomic_file(path) as tmp:
        yield tmp
        digest = file_io.sha256(tmp)
        write_json(_sidecar(path), {"command": command, "sha256": [digest, *previous[:1]]})
    write_json(_sidecar(path), {"command": command, "sha256": [digest]})


# ------------------------------------------------------------------ one writer at a time

class OutputLockedError(OutputGuardError):
    """Another run holds the output's lock."""


@contextlib.contextmanager
def locked(path: str, *, flag: str) -> Iterator[None]:
    """Holds an exclusive lock on the output `path` (a directory or an export base path)
    for the block: an open, `flock`ed hidden sibling `.NAME.lock` that records the
    holder's pid and host. A second run is refused (OutputLockedError, one line naming
    the holder). A killed holder's lock is free again (the kernel drops a dead process's
    flocks), so the next run takes it over; the file itself is removed when the block
    ends. Remote paths (object stores have no locks) are not locked.

    >>> import tempfile; out = os.path.join(tempfile.mkdtemp(), "run")
    >>> with locked(out, flag="--output_dir"):
    ...     with locked(out, flag="--output_dir"):
    ...         pass
    Traceback (most recent call last):
    ...
    bert_tf.core.output_guard.OutputLockedError: --output_dir=... is being written by another run (pid ...
    """
    if file_io.is_remote(path):
        yield
        return

    parent, name = os.path.split(_norm(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise OutputGuardError(f"{flag}={path}: {parent} is a file, not a directory; move "
                               f"that file or name another {flag}") from None
    lock_path = os.path.join(parent, f".{name}.lock")
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = {}
            with contextlib.suppress(OSError, ValueError):
                holder = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
            os.close(fd)
            raise OutputLockedError(
                f"{flag}={path} is being written by another run (pid {holder.get('pid', '?')} "
                f"on {holder.get('host', '?')}): wait for it to end, or choose another "
                f"{flag}") from None
        # The file may have been removed by the holder that just released it: a lock on
        # an unlinked file guards nothing, so lock the file now at that path instead.
        try:
            same = os.fstat(fd).st_ino == os.stat(lock_path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()})
                  .encode("utf-8"), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(lock_path)
        os.close(fd)
