"""The one entry wrapper of every command (`python -m bert_tf.pretrain`, `data_prep.*`, ...).

A command module imports this module before anything that loads TensorFlow and ends with

    if __name__ == "__main__":
        cli.run_main(main)              # instead of absl's app.run(main)

What it does, in one place for all commands:

* Quiet start-up. TensorFlow's C++ start-up lines (oneDNN, CUDA stub, cuInit, CPU
  features), its per-operation C++ INFO/WARNING lines and its Python INFO lines are not
  for users; progress, results and warnings are. Because TensorFlow reads its logging
  environment when it loads, and its first lines are written by absl C++ logging before
  anything can configure it, importing this module (when the process runs a command)
  sets `TF_CPP_MIN_LOG_LEVEL=2` and routes the process's stderr through a small filter
  process that drops those lines and passes everything else through unchanged, as it
  comes (progress bars included), waiting on a non-blocking stderr rather than dropping
  output; if the filter dies, the command gets its real stderr back (nothing lost, no
  EPIPE). `--verbosity=1` (or higher) turns all of this off and
  shows everything; `TF_CPP_MIN_LOG_LEVEL` set by the caller is respected.
* Usage errors reason first: `COMMAND: error: REASON` then where to find the flags, not
  the whole flag list before the reason.
* Flags defined the same way by every command: `run_main(main, define_flags)` calls the
  command's `define_flags(flags.FLAGS)` before parsing (never at import, so importing
  several command modules never collides), and `main` rejects positional arguments.
* An error derived from `bert_tf.core.errors.BertTfError` (and a missing file) is printed as
  one line, `COMMAND: error: MESSAGE`, with exit status 1 and no traceback;
  `errors.Preempted` (SIGTERM, checkpoint written) is logged and exits 143.

This module imports no TensorFlow (data_prep commands stay TF-free).
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import re
import subprocess
import sys
import threading
import time
from typing import Callable, List, Optional, Sequence

from absl import app, flags, logging as absl_logging

from bert_tf.core.errors import BertTfError, Preempted, UsageError

_PACKAGES = ("bert_tf", "data_prep")
# Lines a user does not need, in TensorFlow's two C++ log formats (absl and tsl):
# INFO and WARNING from C++ sources, the absl pre-initialisation banner, the CPU
# feature hint, and C++ "errors" that are normal on a machine without a GPU.
NOISE = re.compile(
    r"^(?:"
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IW]\d{4} [\d:.]+\s+\d+ [\w./+-]+\.(?:cc|h|cpp|cu):\d+\] "
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IW] [\w./+-]+\.(?:cc|h|cpp|cu):\d+\] "
    r"|To enable the following instructions: .* rebuild TensorFlow"
    r"|(?:E\d{4} [\d:.]+\s+\d+ |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: E )"
    r"[\w./+-]+\.(?:cc|h):\d+\] (?:failed call to cuInit|Unable to register cu"
    r"|oneDNN supports DT_\w+ only on platforms with AVX-512|Could not find cuda drivers)"
    r")")

# The filter: reads the command's stderr from a pipe, drops NOISE lines, writes the rest
# to the real stderr as soon as it arrives. It runs as its own process (its own copy of
# the code keeps it free of imports: python -I -S starts in ~20 ms), which ignores
# SIGINT/SIGTERM/SIGHUP and exits when the command (and every child holding the pipe) has
# exited, so a crash message written just before an abort still gets through. The same
# `pump` runs in the command itself if that process dies (see _install_stderr_filter).
# Not a byte is lost: a non-blocking real stderr (EAGAIN, short writes) is waited on
# until it takes the data; only a real stderr that is gone (EPIPE) drops it.
_FILTER_CODE = r"""
import os, re, select

def write_all(fd, data):
    while data:
        try:
            data = data[os.write(fd, data):]
        except (BlockingIOError, InterruptedError):
            select.select([], [fd], [])

def pump(source, sink, pattern):
    noise = re.compile(pattern)
    pending = b""
    def emit(data):
        try:
            write_all(sink, data)
        except OSError:
            pass  # the real stderr is gone: keep reading so the command never blocks
    while True:
        try:
            chunk = os.read(source, 65536)
        except InterruptedError:
            continue
        except BlockingIOError:
            select.select([source], [], [])
            continue
        if not chunk:
            break
        pending += chunk
        parts = re.split(rb"(?<=[\n\r])", pending)
        pending = parts.pop()
        kept = b"".join(p for p in parts if not noise.match(p))
        # A partial line that cannot become a noise line goes out now (progress bars).
        if pending and (pending[:1] not in b"WIET0123456789" or len(pending) > 4096):
            kept, pending = kept + pending, b""
        if kept:
            emit(kept)
    if pending and not noise.match(pending):
        emit(pending)

if __name__ == "__main__":
    import signal, sys
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    pump(0, 1, sys.argv[1].encode())
"""

# The running filter process (tests look at it), or None.
_filter_process: Optional[subprocess.Popen] = None

_configured = False


def requested_verbosity(argv: Sequence[str]) -> Optional[int]:
    """The value of absl's `--verbosity` / `-v` on a command line, or None.

    >>> requested_verbosity(["prog", "--verbosity=1"]), requested_verbosity(["prog", "-v", "2"])
    (1, 2)
    >>> requested_verbosity(["prog", "--input_file=x"]) is None
    True
    """
    value = None
    for i, arg in enumerate(argv):
        for name in ("--verbosity", "-verbosity", "--v", "-v"):
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def is_command_process() -> bool:
    """True when this process runs one of our commands (`python -m bert_tf.X`), not when
    a test or a notebook imports a command module."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return bool(spec and spec.name.split(".")[0] in _PACKAGES)


def _install_stderr_filter() -> None:
    """Points fd 2 at a pipe read by the filter process, which writes to the real stderr.

    This process keeps the pipe's read end open and a thread waits on the filter: if the
    filter dies before the command ends (killed, out of memory), the thread becomes the
    filter (the same `pump`, in this process), so the command never gets EPIPE or blocks
    on a full pipe, its lines keep their order, and nothing is lost but the one chunk the
    filter may have been holding when it was killed."""
    global _filter_process
    try:
        sys.stderr.flush()
        read_end, write_end = os.pipe()
        real_stderr = os.dup(2)
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _FILTER_CODE, NOISE.pattern],
            stdin=read_end, stdout=real_stderr, stderr=real_stderr, close_fds=True)
        os.dup2(write_end, 2)
        os.close(write_end)
    except OSError:
        return  # no filter: the output is noisier, never lost
    _filter_process = process
    code: dict = {"__name__": "bert_tf_stderr_filter"}
    exec(_FILTER_CODE, code)  # noqa: S102 - our own constant: the filter's pump, in process

    def take_over_if_the_filter_dies():
        process.wait()
        # Reached at the end too (the filter saw EOF): then the pipe is at EOF and this
        # returns at once. fd 2 stays on the pipe: putting it back on the real stderr
        # while the command writes would let its new lines overtake those still in the
        # pipe (seen under load), so everything keeps flowing through the pipe, in order,
        # until `drain` closes it at exit.
        code["pump"](read_end, real_stderr, NOISE.pattern.encode())

    watcher = threading.Thread(target=take_over_if_the_filter_dies, daemon=True,
                               name="stderr-filter-watch")
    watcher.start()

    def drain():
        # Everything written so far reaches the terminal before the shell prompt: give
        # fd 2 back (closing our end of the pipe) and let the filter finish.
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(real_stderr, 2)
        try:
            process.wait(timeout=5)  # longer only while a child still holds the pipe
        except subprocess.TimeoutExpired:
            return
        watcher.join(timeout=5)

    atexit.register(drain)


def configure_environment(argv: Optional[Sequence[str]] = None) -> None:
    """Sets TensorFlow's logging environment for a command (before TensorFlow loads) and,
    unless `--verbosity` >= 1 asks for everything, filters its C++ noise from stderr.
    Idempotent."""
    global _configured
    if _configured:
        return
    _configured = True
    verbosity = requested_verbosity(sys.argv if argv is None else argv)
    verbose = verbosity is not None and verbosity >= 1
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if verbose else "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    # A multiprocessing worker (spawn re-imports the command module) writes to the
    # command's stderr, which is filtered already.
    worker = "--multiprocessing-fork" in sys.argv or (
        "multiprocessing" in sys.modules
        and sys.modules["multiprocessing"].parent_process() is not None)
    if not verbose and not worker and "tensorflow" not in sys.modules:
        _install_stderr_filter()


def command_name() -> str:
    """`pretrain`, `create_pretraining_data`, ... (the module's last name)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = spec.name if spec else os.path.basename(sys.argv[0] or "bert_tf")
    return name.rsplit(".", 1)[-1].replace(".py", "")


def _print_error(message: str) -> None:
    sys.stdout.flush()
    print(f"{command_name()}: error: {message}", file=sys.stderr, flush=True)


def _usage_error(message: str) -> None:
    _print_error(message)
    print(f"Run `python -m {_module_name()} --help` for this command's flags "
          f"(--helpfull for all).", file=sys.stderr, flush=True)
    sys.exit(1)


def _module_name() -> str:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name if spec else command_name()


# The repository (this file is bert_tf/app/cli.py): our own log records come from there.
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_OUR_DIRS = tuple(os.path.join(_REPO, package, "") for package in _PACKAGES + ("demo",))


class _OursOrWarnings:
    """A logging filter: INFO records of our own code, and warnings and errors of any.

    TensorFlow and Keras log through absl too (saver timings, traced functions, renamed
    signature inputs), so the source file, not the logger, tells them apart."""

    @staticmethod
    def filter(record) -> bool:
        return (record.levelno >= 30 or not record.pathname
                or os.path.abspath(record.pathname).startswith(_OUR_DIRS))


def _short_format(record, message: str) -> str:
    """`2026-11-24 12:03:04 message` (`... WARNING: message` above INFO) instead of absl's
    `I1124 12:03:04.123456 140112258055040 file.py:162] message`."""
    level = "" if record.levelno <= 20 else f"{record.levelname}: "
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created))
    return f"{when} {level}{message}"


def _quiet_python_loggers() -> None:
    """Other libraries' Python INFO lines, and absl's long line prefix, only at
    --verbosity >= 1."""
    if flags.FLAGS["verbosity"].value >= 1:
        return

    class ShortFormatter(logging.Formatter):
        def format(self, record):
            return _short_format(record, super().format(record))

    absl_handler = absl_logging.get_absl_handler()
    absl_handler.setFormatter(ShortFormatter())
    for handler in [absl_handler] + logging.getLogger().handlers:
        if _OursOrWarnings not in handler.filters:
            handler.addFilter(_OursOrWarnings)


def _user_errors() -> tuple:
    """Exception types printed as one line: ours, missing files, and TensorFlow's
    file-system errors (gs:// paths) when TensorFlow is loaded."""
    kinds = [BertTfError, FileNotFoundError, NotADirectoryError, IsADirectoryError,
             PermissionError]
    tf = sys.modules.get("tensorflow")
    errors = getattr(tf, "errors", None)
    if errors is not None:
        kinds += [errors.NotFoundError, errors.PermissionDeniedError]
    return tuple(kinds)


_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def _storage_full(error: BaseException) -> Optional[str]:
    """One line for a write the storage refused (a full disk or quota, a read-only file
    system; TensorFlow's ResourceExhaustedError or a file-system OpError saying so), or
    None. Every output is written whole or not at all (output_guard), so what was there
    before is intact: the message says so.

    >>> _storage_full(OSError(errno.ENOSPC, "No space left on device", "/out/x"))
    'No space left on device: /out/x: free some space (or choose another output path) and run the command again; nothing written before was changed'
    """
    text = None
    if isinstance(error, OSError) and error.errno in _FULL_ERRNOS:
        text = f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    tf = sys.modules.get("tensorflow")
    errors = getattr(tf, "errors", None)
    if errors is not None and isinstance(error, errors.OpError):
        message = (error.message or "").strip()
        first = message.splitlines()[0][:300] if message else type(error).__name__
        if any(s in message for s in ("No space left", "Disk quota", "Read-only file")):
            text = first
        elif isinstance(error, errors.ResourceExhaustedError):  # memory, not storage
            return (f"{first}: out of memory; lower the batch size or --max_seq_length and "
                    f"run the command again")
    if text is None:
        return None
    return (f"{text}: free some space (or choose another output path) and run the command "
            f"again; nothing written before was changed")


def run_errors_as_messages(function: Callable, *args):
    """Calls `function(*args)`; usage and user errors become a message and exit 1."""
    try:
        return function(*args)
    except (app.UsageError, flags.ValidationError, UsageError) as e:
        _usage_error(str(e))
    except KeyboardInterrupt:
        _print_error("interrupted")
        sys.exit(130)
    except Preempted as e:
        absl_logging.warning("%s", e)
        absl_logging.flush()
        sys.exit(e.exit_code)
    except Exception as e:  # noqa: BLE001 - re-raised unless it is the user's to fix
        full = _storage_full(e)
        if full:
            _print_error(full)
            sys.exit(1)
        if not isinstance(e, _user_errors()):
            raise
        message = getattr(e, "message", None) if not isinstance(e, BertTfError) else None
        _print_error(message or str(e))
        sys.exit(1)


def _parse_flags(argv: List[str]) -> List[str]:
    """absl's flag parsing with the reason first (absl's own says FATAL before it)."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        _usage_error(str(e))


def run_main(main: Callable[[List[str]], object],
             define_flags: Optional[Callable[..., None]] = None,
             argv: Optional[List[str]] = None) -> None:
    """Runs `main(argv)` as absl's app.run does, with the behaviour of this module;
    `define_flags(flags.FLAGS)` defines the command's flags first."""
    configure_environment(argv)
    if define_flags is not None:
        define_flags(flags.FLAGS)

    def wrapped(args):
        _quiet_python_loggers()
        if len(args) > 1:
            _usage_error(f"unexpected arguments: {' '.join(args[1:])}")
        return run_errors_as_messages(main, args)

    app.run(wrapped, argv=argv, flags_parser=_parse_flags)


def run_plain(main: Callable[[], object]) -> None:
    """For a command that parses its own arguments (the Beam pipeline): the same quiet
    start-up and one-line user errors, without absl flags."""
    configure_environment()
    code = run_errors_as_messages(main)
    sys.exit(code)


if is_command_process():
    configure_environment()
