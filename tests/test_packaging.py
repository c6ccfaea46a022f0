"""pyproject.toml: one dependency list (requirements*.txt), and an installed copy that runs
every command from any directory, without PYTHONPATH or the checkout."""

import os
import re
import subprocess
import sys
import tomllib

from packaging.requirements import Requirement

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pyproject():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def _requirements(name):
    """(requirement lines, files included with -r) of a requirements file."""
    lines, included = [], []
    with open(os.path.join(REPO, name)) as f:
        for line in f:
            line = line.strip()
            if line.startswith("-r "):
                included.append(line[3:].strip())
            elif line and not line.startswith("#"):
                lines.append(line)
    return lines, included


def test_dependencies_are_requirements_txt_and_extras_agree_with_their_files():
    project = _pyproject()
    assert project["project"]["dynamic"] == ["dependencies"]
    assert project["tool"]["setuptools"]["dynamic"]["dependencies"] == {
        "file": ["requirements.txt"]}
    runtime, _ = _requirements("requirements.txt")
    for line in runtime:  # what setuptools reads: plain pinned requirements, one a line
        assert Requirement(line).specifier, f"requirements.txt: {line!r} is not pinned"
    extras = project["project"]["optional-dependencies"]
    files = {"beam": "requirements-beam.txt", "dev": "requirements-dev.txt",
             "korean": "requirements-korean.txt"}
    assert set(extras) == set(files)
    extra_of_file = {v: k for k, v in files.items()}
    for extra, name in files.items():
        if not os.path.exists(os.path.join(REPO, name)):
            assert extra == "korean", f"{name} is missing"
            continue  # added with the Korean pre-tokenizer (another branch)
        lines, included = _requirements(name)
        expected = {str(Requirement(line)) for line in lines}
        expected |= {f"bert-tf[{extra_of_file[f]}]" for f in included
                     if f != "requirements.txt"}
        assert {str(Requirement(r)) for r in extras[extra]} == expected, extra


def test_an_installed_copy_runs_the_commands_from_another_directory(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(target), REPO],
                   check=True, capture_output=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, PYTHONPATH=str(target), KERAS_BACKEND="tensorflow")
    where = subprocess.run(
        [sys.executable, "-c", "import bert_tf, data_prep; print(bert_tf.__file__); "
                               "print(data_prep.__file__)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    assert all(p.startswith(str(target)) for p in where.stdout.split()), where.stdout
    corpus = elsewhere / "corpus.txt"
    corpus.write_text("The cat sat on the mat.\nIt was warm.\n\nA dog ran in the park.\n")
    vocab = subprocess.run(
        [sys.executable, "-m", "data_prep.build_vocab", f"--input_file={corpus}",
         "--vocab_file=vocab.txt", "--vocab_size=150", "--noprogress"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert vocab.returncode == 0, vocab.stderr[-2000:]
    assert (elsewhere / "vocab.txt").exists()
    usage = subprocess.run([sys.executable, "-m", "bert_tf.pretrain", "--input_file=x"],
                           cwd=elsewhere, env=env, capture_output=True, text=True,
                           timeout=300)
    assert usage.returncode == 1
    assert re.match(r"pretrain: error: --output_dir is required", usage.stderr), usage.stderr
