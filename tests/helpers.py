"""What the tests share: the tiny model config, a model directory to start from, and a
runner of the commands (`python -m bert_tf.X` / `python -m data_prep.X`) in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Optional, Sequence, Union

from tests.conftest import REPO_ROOT

REPO = str(REPO_ROOT)
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tiny_config(**overrides):
    """A BertConfig small enough for a test: L1/H16/A2, intermediate 32, 64 positions,
    vocab 30; any field can be overridden."""
    from bert_tf.config import BertConfig

    values = dict(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=32, max_position_embeddings=64)
    values.update(overrides)
    return BertConfig(**values)


def write_vocab(path, tokens: Sequence[str]) -> str:
    """Writes `tokens` one per line (UTF-8); returns the path as a string."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return str(path)


def make_model_dir(directory, vocab: Union[str, os.PathLike, Sequence[str], None] = None,
                   config=None, *, seed: int = 0, do_lower_case: Optional[bool] = True,
                   **text_settings) -> str:
    """A model directory holding a randomly initialized encoder (weights fixed by `seed`).

    `vocab`: a vocab file, or tokens (written into the directory as vocab.txt), or None.
    `config` defaults to `tiny_config` sized to the vocab. `text_settings` (strip_accents,
    pre_tokenizer) go to tokenizer_config.json. Returns the directory as a string.
    """
    import keras

    from bert_tf.encoder import BertEncoder
    from bert_tf.model_dir import write_model_dir

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
