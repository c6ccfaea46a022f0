"""LiteRT (TensorFlow Lite) export for on-device use: `export_model --format=litert`.

`export_litert_dir(model_dir.resolve(DIR), EXPORT_DIR)` converts the ids signature of what a model dir holds
(encoder, classifier / regressor, NER, SQuAD, multiple choice) into a `.tflite` flatbuffer
and returns `EXPORT_DIR/<version>/`:

    EXPORT_DIR/<version>/model.tflite            one signature, `serving_default`
    EXPORT_DIR/<version>/vocab.txt               the WordPiece vocab (clients tokenize)
    EXPORT_DIR/<version>/labels.txt              classifier / NER label names (if any)
    EXPORT_DIR/<version>/model_info.json         inputs, outputs, quantization, casing,
                                                 max_seq_length: what an app needs

The model is converted from the very SavedModel `export_model` writes with
`--notext_signatures` (so both formats compute the same function on ids), with LiteRT
builtin ops only: it runs on the plain LiteRT runtime of a phone (`ai_edge_litert` in
Python, `com.google.ai.edge.litert` on Android), no TF Select ("Flex") ops, no custom ops.
`quantization="dynamic_int8"` (default) stores the weights of the matmuls as int8 with a
float scale per output channel (LiteRT's dynamic-range quantization: activations stay
float, no calibration data); `"float32"` keeps float weights.

Raw text is not offered: the in-graph tokenizer needs core TF string ops (UnicodeDecode,
RegexReplace, StringSplit, ...) that LiteRT has only as Flex ops, and TF Text's
FastWordpieceTokenizeWithOffsets as a custom op; neither the `ai_edge_litert` interpreter nor
TF 2.21's own `tf.lite.Interpreter` links the Flex delegate (docs/serving.md has the
details). Clients tokenize with the exported vocab.txt, as the original FullTokenizer does.

Example: `convert_saved_model` below; whole exports in tests/test_export_litert.py.
"""

from __future__ import annotations

import os
import re
import tempfile
from typing import Optional

import tensorflow as tf

from bert_tf.export import saved_model, export_converted
from bert_tf.export.saved_model import ExportError

MODEL_FILE = "model.tflite"
INFO_FILE = export_converted.INFO_FILE
QUANTIZATIONS = ("dynamic_int8", "float32")


def convert_saved_model(saved_model_dir: str, quantization: str = "dynamic_int8",
                        signature_key: str = saved_model.SERVING_DEFAULT,
                        source: Optional[str] = None) -> bytes:
    """One SavedModel signature -> LiteRT flatbuffer bytes (builtin ops only).

    A graph with an op LiteRT has no builtin kernel for raises ExportError naming the ops
    and `source` (what the user exported; default: the SavedModel).

    >>> class M(tf.Module):
    ...     @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    ...     def f(self, x):
    ...         return {"y": x * 2}
    >>> m = M(); d = tempfile.mkdtemp(); tf.saved_model.save(m, d, signatures={"f": m.f})
    >>> len(convert_saved_model(d, "float32", "f")) > 0
    True
    """
    _check_quantization(quantization)
    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir,
                                                         signature_keys=[signature_key])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantization == "dynamic_int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    try:
        return converter.convert()
    except Exception as e:  # TF's ConverterError (not public): its message is pages of MLIR
        ops = sorted(set(re.findall(r"'tf\.(\w+)' op is neither a custom op nor a flex op",
                                    str(e))))
        if not ops:
            raise
        raise ExportError(
            f"{source or saved_model_dir}: signature {signature_key!r} uses TensorFlow ops "
            f"with no LiteRT builtin kernel ({', '.join(ops)}), so it cannot run on the "
            f"plain LiteRT runtime; export its ids signature (raw-text tokenization cannot "
            f"be converted: tokenize on the device with vocab.txt) or use "
            f"--format=saved_model") from None


def _check_quantization(quantization: str) -> None:
    export_converted.check_quantization(quantization, QUANTIZATIONS, "litert")


def export_litert_dir(resolved, export_dir: str, version: Optional[int] = None,
                      max_seq_length: Optional[int] = None, *,
                      quantization: str = "dynamic_int8") -> str:
    """Exports a model dir (`resolved`: its `model_dir.resolve` result, with the config,
    vocab and casing overrides) as a LiteRT model; returns `export_dir/<version>`.
    The version directory appears complete or not at all, as for SavedModels.
    """
    _check_quantization(quantization)

    def convert(ids_model: str, out: str) -> dict:
        flatbuffer = convert_saved_model(ids_model, quantization, source=resolved.path)
        with tf.io.gfile.GFile(os.path.join(out, MODEL_FILE), "wb") as f:
            f.write(flatbuffer)
        return _model_info(flatbuffer, quantization)

    return export_converted.export_converted_dir(resolved, export_dir, convert, version,
                                                 max_seq_length)


def _model_info(flatbuffer: bytes, quantization: str) -> dict:
    """The tensor names, dtypes and shapes, read back by the LiteRT runtime (which so
    proves it loads the model)."""
    runner = load_interpreter(model_content=flatbuffer).get_signature_runner(
        saved_model.SERVING_DEFAULT)

    def describe(details):
        return {name: {"dtype": d["dtype"].__name__,
                       "shape": [int(n) for n in d["shape_signature"]]}
                for name, d in sorted(details.items())}

    return {"format": "litert", "quantization": quantization,
            "inputs": describe(runner.get_input_details()),
            "outputs": describe(runner.get_output_details())}


def load_interpreter(model_path: Optional[str] = None, model_content: Optional[bytes] = None,
                     num_threads: Optional[int] = None):
    """The LiteRT runtime's Interpreter: the `ai_edge_litert` package, the same C++ runtime
    (builtin ops + XNNPACK) as on Android and iOS (TF's tf.lite.Interpreter is deprecated)."""
    from ai_edge_litert.interpreter import Interpreter  # optional (--format=litert)

    return Interpreter(model_path=model_path, model_content=model_content,
                       num_threads=num_threads)
