"""Files on a local disk or remote storage (gs://, s3://, hdfs://), one set of functions.

A local path is opened, globbed and measured with the standard library, so the offline
data tools (data_prep) and the text rules never start TensorFlow for local files; a path
with a scheme goes through `tf.io.gfile`, imported only then. (The Beam pipeline keeps
Beam's own FileSystems for remote paths: its workers read storage through Beam.)

>>> import os, tempfile
>>> d = tempfile.mkdtemp(); _ = open(os.path.join(d, "a.txt"), "w").write("hi\\n")
>>> is_remote("gs://bucket/a.txt"), is_remote(os.path.join(d, "a.txt"))
(True, False)
>>> [os.path.basename(p) for p in glob(os.path.join(d, "*.txt"))], file_size(os.path.join(d, "a.txt"))
(['a.txt'], 3)
>>> read_bytes(os.path.join(d, "a.txt"))
b'hi\\n'
"""

from __future__ import annotations

import atexit
import glob as _glob
import hashlib
import os
import re
import shutil
import tempfile
from typing import List

_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_remote(path: str) -> bool:
    """True for a path with a scheme (gs://, s3://, hdfs://), which `open` cannot read."""
    return bool(_SCHEME.match(os.fspath(path)))


def open_file(path: str, mode: str = "rb"):
    """`open` for a local path, `tf.io.gfile.GFile` for a remote one. A remote file that
    does not exist raises FileNotFoundError (as `open` does) when opened for reading."""
    if not is_remote(path):
        return open(path, mode)
    import tensorflow as tf  # remote paths only; TF-free module (TensorFlow: 9 s)

    if "r" in mode and not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    return tf.io.gfile.GFile(path, mode)


def read_bytes(path: str) -> bytes:
    """The whole file; FileNotFoundError when it is missing (or is a directory)."""
    try:
        with open_file(path, "rb") as f:
            return f.read()
    except (IsADirectoryError, NotADirectoryError):
        raise FileNotFoundError(f"{path}: not a file") from None


def sha256(path: str) -> str:
    """The hex SHA-256 of a file's bytes, read in 1 MiB blocks (local or remote): how a
    vocab is compared by content and how a test proves a user's file unchanged.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "v.txt"); _ = open(path, "wb").write(b"a")
    >>> sha256(path)[:16]
    'ca978112ca1bbdca'
    """
    digest = hashlib.sha256()
    with open_file(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def glob(pattern: str) -> List[str]:
    """Paths matching `pattern` (unsorted; [] when nothing, or no such directory, matches)."""
    if not is_remote(pattern):
        return _glob.glob(pattern)
    import tensorflow as tf  # remote paths only; TF-free module (TensorFlow: 9 s)

    try:
        return tf.io.gfile.glob(pattern)
    except tf.errors.OpError:
        return []  # e.g. a directory in the pattern that does not exist


def isdir(path: str) -> bool:
    if not is_remote(path):
        return os.path.isdir(path)
    import tensorflow as tf  # remote paths only; TF-free module (TensorFlow: 9 s)

    return tf.io.gfile.isdir(path)


def file_size(path: str) -> int:
    if not is_remote(path):
        return os.path.getsize(path)
    import tensorflow as tf  # remote paths only; TF-free module (TensorFlow: 9 s)

    return tf.io.gfile.stat(path).length


def scratch_dir(prefix: str) -> str:
    """A new local temporary directory, removed when the process exits: for files a
    command needs while it runs (assets an export copies, a vocab read from tokenizer.json),
    so a command leaves nothing behind in the system's temp dir.

    >>> d = scratch_dir("bert_tf_doc_"); os.path.isdir(d)
    True
    """
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
