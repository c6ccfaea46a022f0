"""Checkpoints cut short or damaged (an interrupted download or copy): every reader names
the file and says to fetch it again (model.safetensors, pytorch_model.bin, a TF1
checkpoint, a bert_tf model dir), and the command prints that as one line."""

import glob
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bert_tf.checkpoints import huggingface, names, tf1, weights as weights_lib
from bert_tf.model import model_dir
from bert_tf.model.encoder import BertEncoder
from bert_tf.model.pretrainer import BertPretrainer
from tests.helpers import tiny_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CFG = tiny_config(vocab_size=60, num_hidden_layers=2, max_position_embeddings=32,
                  hidden_act="gelu_approximate")


def _cut(path, keep):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: int(len(data) * keep)])


def _flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 1]))


@pytest.fixture(scope="module")
def weights():
    return weights_lib.weights_from_model(BertPretrainer(CFG))


def test_cut_short_model_safetensors(minilm_dir, tmp_path):
    hf = tmp_path / "hf"
    hf.mkdir()
    for name in ("config.json", "vocab.txt", "model.safetensors"):
        shutil.copy(minilm_dir / name, hf / name)
    _cut(hf / "model.safetensors", 0.3)
    with pytest.raises(model_dir.DamagedCheckpointError,
                       match=r"model.safetensors: cannot be read .* cut short .*download"):
        huggingface.read_huggingface(str(hf))
    env = dict(os.environ, PYTHONPATH=REPO, KERAS_BACKEND="tensorflow")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    result = subprocess.run(
        [sys.executable, "-m", "bert_tf.convert_checkpoint", "--source_format=huggingface",
         f"--input={hf}", f"--output_dir={tmp_path / 'out'}"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"convert_checkpoint: error: {hf / 'model.safetensors'}: cannot be read"), result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_cut_short_pytorch_model_bin(weights, tmp_path):
    torch = pytest.importorskip("torch")
    hf = tmp_path / "hf"
    hf.mkdir()
    state = {f"bert.{m.hf}": torch.from_numpy(np.ascontiguousarray(
                 weights.arrays[m.ours].T if m.hf_transpose else weights.arrays[m.ours]))
             for m in names.mappings_for(CFG.num_hidden_layers)}
    torch.save(state, hf / "pytorch_model.bin")
    (hf / "config.json").write_text(
        '{"model_type": "bert", "vocab_size": 60, "hidden_size": 16, "num_hidden_layers": 2,'
        ' "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 32}')
    assert huggingface.read_huggingface(str(hf)).config.hidden_size == 16  # sound: reads
    _cut(hf / "pytorch_model.bin", 0.5)
    with pytest.raises(model_dir.DamagedCheckpointError,
                       match=r"pytorch_model.bin: cannot be read .* cut short or damaged"):
        huggingface.read_huggingface(str(hf))


def test_cut_short_or_damaged_tf1_checkpoint(weights, tmp_path):
    prefix = tf1.write_tf1_checkpoint(weights, str(tmp_path / "tf1"))
    data = glob.glob(prefix + ".data-*")[0]
    saved = open(data, "rb").read()
    _cut(data, 0.5)
    with pytest.raises(model_dir.DamagedCheckpointError,
                       match=r"bert_model.ckpt.data-00000-of-00001: [\d,]+ bytes, but the "
                             r"index lists [\d,]+ bytes .* cut short"):
        tf1.read_tf1_checkpoint(prefix)
    open(data, "wb").write(saved)
    _flip(data, len(saved) // 2)
    with pytest.raises(model_dir.DamagedCheckpointError,
                       match=r"bert_model.ckpt: cannot read the checkpoint's tensors "
                             r"\(.*Checksum does not match"):
        tf1.read_tf1_checkpoint(prefix)
    index = prefix + ".index"
    _cut(index, 0.3)
    with pytest.raises(model_dir.DamagedCheckpointError,
                       match=r"bert_model.ckpt.index: cannot be read"):
        tf1.read_tf1_checkpoint(prefix)


def test_cut_short_or_damaged_model_dir_restore(tmp_path):
    out = str(tmp_path / "dir")
    prefix = model_dir.write_model_dir(out, CFG, {"encoder": BertEncoder(CFG)})
    data = glob.glob(prefix + ".data-*")[0]
    saved = open(data, "rb").read()
    _flip(data, len(saved) // 2)
    with pytest.raises(model_dir.DamagedCheckpointError, match="Checksum does not match"):
        model_dir.load_encoder(out)
    open(data, "wb").write(saved)
    os.remove(data)
    with pytest.raises(model_dir.DamagedCheckpointError, match=r"1 data file\(s\) .* 0 found"):
        model_dir.load_encoder(out)
    open(data, "wb").write(saved[: len(saved) // 3])
    with pytest.raises(model_dir.DamagedCheckpointError, match="cut short"):
        model_dir.load_encoder(out)
    open(data, "wb").write(saved)
    model_dir.load_encoder(out)  # the sound copy reads again
