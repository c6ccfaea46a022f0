"""What the exports converted from the ids SavedModel share (LiteRT, ONNX, OpenVINO).

`export_converted_dir(resolved, EXPORT_DIR, convert, ...)` exports a model dir (its
`model_dir.resolve` result) as the SavedModel `export_model --notext_signatures` writes,
into a scratch directory, lets `convert(saved_model_dir, out_dir)` write the other
format's files into the new version directory, and adds what a client needs besides the
model:

    EXPORT_DIR/<version>/<the format's model files>
    EXPORT_DIR/<version>/vocab.txt               the WordPiece vocab (clients tokenize)
    EXPORT_DIR/<version>/labels.txt              classifier / NER label names (if any)
    EXPORT_DIR/<version>/model_info.json         inputs, outputs, quantization, casing,
                                                 max_seq_length

So every format computes the function of the SavedModel's ids signature (the same input
and output names), and the version directory appears complete or not at all
(`saved_model.written_atomically`), numbered as SavedModel versions are.

Example (a "format" that only copies the SavedModel's graph file):

>>> import tempfile, shutil
>>> from bert_tf.model.config import BertConfig
>>> from bert_tf.model.encoder import BertEncoder
>>> from bert_tf.model import model_dir
>>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
...                  num_attention_heads=2, intermediate_size=16)
>>> src = tempfile.mkdtemp()
>>> _ = model_dir.write_model_dir(src, cfg, {"encoder": BertEncoder(cfg)})
>>> def copy(saved_model, out):
...     shutil.copy(os.path.join(saved_model, "saved_model.pb"), out)
...     return {"format": "copy", "inputs": {}, "outputs": {}}
>>> path = export_converted_dir(model_dir.resolve(src), tempfile.mkdtemp(), copy)
>>> sorted(os.listdir(path))
['model_info.json', 'saved_model.pb']
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Callable, Optional

import tensorflow as tf

from bert_tf.export import saved_model
from bert_tf.model import model_dir

INFO_FILE = "model_info.json"


def export_converted_dir(resolved, export_dir: str,
                         convert: Callable[[str, str], dict],
                         version: Optional[int] = None,
                         max_seq_length: Optional[int] = None) -> str:
    """Exports `resolved` (a `model_dir.resolve` result) through `convert` (see the module
    docstring); returns `export_dir/<version>`. `convert` returns the format's fields of
    model_info.json (at least format, quantization, inputs and outputs, read back by the
    format's runtime so that a model it cannot load fails the export)."""
    target = saved_model.new_version_dir(export_dir, version)
    with tempfile.TemporaryDirectory(prefix="bert_tf_converted_") as scratch:
        ids_model = saved_model.export_model_dir(resolved, scratch, version=1,
                                                 max_seq_length=max_seq_length,
                                                 text_signatures=False)
        with saved_model.written_atomically(target) as tmp:
            info = convert(ids_model, tmp)
            for name in (saved_model.LABELS_FILE, "vocab.txt"):
                asset = os.path.join(ids_model, "assets", name)
                if tf.io.gfile.exists(asset):
                    tf.io.gfile.copy(asset, os.path.join(tmp, name))
            write_model_info(os.path.join(tmp, INFO_FILE),
                             dict(info, **_text_info(resolved, max_seq_length, ids_model)))
    return target


def write_model_info(path: str, info: dict) -> None:
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(info, indent=2) + "\n")


def _text_info(resolved, max_seq_length: Optional[int], ids_model: str) -> dict:
    """The text settings the ids must be made with (the model dir's, with the export's
    overrides: flags, model dir or inferred from the vocab, resolved once by
    model_dir.resolve), the task and the lengths."""
    config, task_config = resolved.config, resolved.task_config or {}
    tokenizer = {}
    path = os.path.join(ids_model, "assets.extra", model_dir.TOKENIZER_CONFIG_FILE)
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            tokenizer = json.load(f)
    return {"signature": saved_model.SERVING_DEFAULT, "task": task_config.get("task_name"),
            "tokenizer": tokenizer,
            "max_seq_length": saved_model.serving_max_seq_length(config, max_seq_length,
                                                                 task_config),
            "max_position_embeddings": int(config.max_position_embeddings)}


def check_quantization(quantization: str, allowed, fmt: str) -> None:
    """ExportError unless `quantization` is one of `allowed` (what format `fmt` offers).

    >>> check_quantization("static_int8", ("float32",), "onnx")
    Traceback (most recent call last):
    ...
    bert_tf.export.saved_model.ExportError: quantization='static_int8': --format=onnx takes one of float32
    """
    if quantization not in allowed:
        raise saved_model.ExportError(f"quantization={quantization!r}: --format={fmt} takes one "
                                 f"of {', '.join(allowed)}")
