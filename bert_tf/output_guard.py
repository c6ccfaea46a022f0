"""What every command promises about the user's files (DESIGN 2.6), written once.

Every command that writes a directory or a file a user reads goes through here:

- **Ownership.** A directory a command creates carries a marker file (`MARKER_FILE`, a
  small hidden JSON naming the command). A command deletes or replaces only directories
  bearing its marker, and never a path that is an input, contains one, or lies inside an
  input directory (`check_apart`).
- **Work directories** (`claim_work_dir` / `release_work_dir`): a `--work_dir` that does
  not exist is created and marked; one that is ours (an earlier run of the same job) is
  reused; any other existing folder gets a fresh marked subfolder, so only what the job
  wrote is removed at the end.
- **Whole or nothing.** Files are written under a hidden, unpredictable temporary name
  beside the target and renamed (`atomic_file`, `write_text`, `write_json`); directories
  are built beside their target and swapped in when complete (`new_output_dir`), with
  `--overwrite` replacing only an earlier output of ours. On object stores (gs://), where a
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
bert_tf.output_guard.OutputGuardError: --output_dir=... contains the input .../corpus.txt: ...
>>> out = os.path.join(base, "out")
>>> with new_output_dir(out, "demo", inputs=[corpus]) as tmp:
...     write_text(os.path.join(tmp, "a.txt"), "done")
>>> sorted(os.listdir(out)), owner(out)["command"]
(['.bert_tf_output.json', 'a.txt'], 'demo')
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from typing import Iterable, Iterator, Optional, Sequence

from bert_tf import file_io
from bert_tf.errors import BertTfError

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


def _gfile():
    import tensorflow as tf  # remote paths only

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
    bert_tf.output_guard.OutputGuardError: --output_dir=.../sub is inside the input ...: ...
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
    path = os.path.join(directory, MARKER_FILE)
    try:
        with file_io.open_file(path, "rb") as f:
            record = json.loads(f.read().decode("utf-8"))
    except (FileNotFoundError, NotADirectoryError, ValueError, UnicodeDecodeError):
        return None
    except Exception as e:  # a remote store's not-found error
        if type(e).__name__ == "NotFoundError":
            return None
        raise
    return record if isinstance(record, dict) and "command" in record else None


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
            if name in last:
                deferred.append(pair)
            else:
                gfile.copy(*pair, overwrite=True)
    for source, dest in deferred:
        gfile.copy(source, dest, overwrite=True)
    gfile.rmtree(tmp)


@contextlib.contextmanager
def new_output_dir(output_dir: str, command: str, *, overwrite: bool = False,
                   inputs: Sequence[Optional[str]] = (), flag: str = "--output_dir",
                   last: Sequence[str] = ("saved_model.pb", "checkpoint"),
                   allow_existing_empty: bool = True, marked: bool = True) -> Iterator[str]:
    """Yields a hidden directory beside `output_dir` to build the output in; when the
    block ends without error it becomes `output_dir` (marked as `command`'s), replacing
    an earlier output only with `overwrite` and only when that one bears a bert_tf marker;
    on error it is removed and `output_dir` is untouched. `marked=False` leaves out the
    marker (outputs that are never replaced, such as SavedModel versions).

    Refused (OutputGuardError, nothing written): `output_dir` is, contains or lies inside
    an input; it exists, is not empty, and `overwrite` is off; with `overwrite`, it holds
    files no bert_tf command wrote.
    """
    check_apart(output_dir, inputs, flag=flag)
    remote = file_io.is_remote(output_dir)
    target = output_dir.rstrip("/") if remote else os.path.abspath(output_dir)
    replace = False
    if _exists(target):
        if not _isdir(target):
            raise OutputGuardError(f"{flag}={output_dir} is a file; name a directory")
        if not (allow_existing_empty and _is_empty_dir(target)):
            if not overwrite:
                raise OutputGuardError(f"{flag}={output_dir} exists and is not empty: choose "
                                       f"another directory, or pass --overwrite to replace "
                                       f"an earlier output of bert_tf")
            if not is_ours(target):
                raise OutputGuardError(
                    f"{flag}={output_dir} holds files no bert_tf command wrote (it has no "
                    f"{MARKER_FILE}); --overwrite replaces only bert_tf's own outputs: "
                    f"choose another directory, or move it away yourself")
        replace = True
    parent = os.path.dirname(target)
    _makedirs(parent)
    tmp = os.path.join(parent, f".{os.path.basename(target)}.{uuid.uuid4().hex[:12]}.tmp")
    _makedirs(tmp)
    try:
        yield tmp
        if marked:
            mark(tmp, command)
        if replace:
            old = os.path.join(parent,
                               f".{os.path.basename(target)}.{uuid.uuid4().hex[:12]}.old")
            if remote:
                _publish_replacing(tmp, target, last)
            else:
                os.rename(target, old)
                os.rename(tmp, target)
                _rmtree(old)
        else:
            _publish(tmp, target, last)
    finally:
        if _exists(tmp):
            _rmtree(tmp)


def _publish_replacing(tmp: str, target: str, last: Sequence[str]) -> None:
    """Object stores: the old output's files are removed, then the new one copied in
    (there is no atomic directory swap; `last` files go in last)."""
    _gfile().rmtree(target)
    _publish(tmp, target, last)


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


_SET_ASIDE = ".replaced"


def set_aside(directory: str, command: str) -> str:
    """`--overwrite` of a training run's model dir: moves the earlier run to a hidden
    sibling (`.NAME.<id>.replaced`, marked) so the new run starts in an empty `directory`;
    `remove_set_aside` deletes it once the new run has finished. Returns the new path."""
    parent, name = os.path.split(_norm(directory) if not file_io.is_remote(directory)
                                 else directory.rstrip("/"))
    aside = os.path.join(parent, f".{name}.{uuid.uuid4().hex[:12]}{_SET_ASIDE}")
    if not is_ours(directory):
        mark(directory, command, role="replaced")
    if file_io.is_remote(directory):
        _gfile().rename(directory, aside)
    else:
        os.rename(directory, aside)
    _makedirs(directory)
    return aside


def remove_set_aside(directory: str) -> None:
    """Deletes the earlier runs `set_aside` moved away from `directory` (only hidden
    siblings of its name that bear a bert_tf marker)."""
    remote = file_io.is_remote(directory)
    parent, name = os.path.split(directory.rstrip("/") if remote else _norm(directory))
    if not _isdir(parent):
        return
    for entry in _listdir(parent):
        if entry.startswith(f".{name}.") and entry.endswith(_SET_ASIDE):
            path = os.path.join(parent, entry)
            if is_ours(path):
                _rmtree(path)
