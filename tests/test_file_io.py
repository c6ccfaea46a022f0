"""bert_tf.core.file_io: local paths without TensorFlow, remote ones (a scheme) through tf.io.gfile.

TensorFlow's in-memory file system (`ram://`) stands in for gs:// here: the same code
path (a scheme, so tf.io.gfile), no network."""

import subprocess
import sys

import pytest
import tensorflow as tf

from bert_tf.core import file_io
from bert_tf.text import text_rules
from data_prep import corpus
from tests.helpers import REPO, command_env


def test_remote_paths_go_through_gfile():
    root = "ram://file_io_test"
    tf.io.gfile.makedirs(f"{root}/sub")
    for name, data in (("a.txt", b"one\n"), ("b.txt", b"two\nthree\n")):
        with tf.io.gfile.GFile(f"{root}/{name}", "wb") as f:
            f.write(data)
    assert file_io.is_remote(f"{root}/a.txt")
    assert file_io.read_bytes(f"{root}/b.txt") == b"two\nthree\n"
    assert file_io.file_size(f"{root}/b.txt") == 10
    assert sorted(file_io.glob(f"{root}/*.txt")) == [f"{root}/a.txt", f"{root}/b.txt"]
    assert file_io.isdir(f"{root}/sub") and not file_io.isdir(f"{root}/a.txt")
    with file_io.open_file(f"{root}/a.txt") as f:
        assert f.read() == b"one\n"
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        file_io.open_file(f"{root}/missing.txt")
    # The readers built on it: input globs (directories skipped) and vocab files.
    assert corpus.expand_input_globs(f"{root}/*") == [f"{root}/a.txt", f"{root}/b.txt"]
    with pytest.raises(corpus.CorpusError, match="no file matches"):
        corpus.expand_input_globs(f"{root}/nothing-*.txt")
    assert text_rules.load_vocab(f"{root}/b.txt") == ["two", "three"]
    with pytest.raises(FileNotFoundError, match="vocab file not found"):
        text_rules.load_vocab(f"{root}/missing.txt")


def test_local_paths(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"x\n")
    (tmp_path / "d").mkdir()
    assert not file_io.is_remote(str(tmp_path / "a.txt"))
    assert file_io.read_bytes(str(tmp_path / "a.txt")) == b"x\n"
    assert sorted(file_io.glob(str(tmp_path / "*"))) == [str(tmp_path / "a.txt"),
                                                         str(tmp_path / "d")]
    with pytest.raises(FileNotFoundError):
        file_io.read_bytes(str(tmp_path / "d"))  # a directory is not a file
    with pytest.raises(FileNotFoundError):
        file_io.read_bytes(str(tmp_path / "missing"))


def test_local_paths_load_no_tensorflow(tmp_path):
    (tmp_path / "a.txt").write_text("x\n")
    script = ("import sys; from bert_tf.core import file_io; "
              f"assert file_io.read_bytes({str(tmp_path / 'a.txt')!r}) == b'x\\n'; "
              f"file_io.glob({str(tmp_path / '*')!r}); file_io.file_size({str(tmp_path)!r}); "
              "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=command_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]


def test_scratch_dirs_are_gone_when_the_process_exits(tmp_path):
    code = ("from bert_tf.core import file_io; import os; d = file_io.scratch_dir('x_'); "
            "open(os.path.join(d, 'vocab.txt'), 'w').write('a'); print(d)")
    env = command_env(TMPDIR=str(tmp_path))
    made = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()
    assert made.startswith(str(tmp_path)) and list(tmp_path.iterdir()) == []
