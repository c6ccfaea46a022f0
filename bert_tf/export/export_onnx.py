"""ONNX export for onnxruntime and other ONNX servers: `export_model --format=onnx`.

`export_onnx_dir(model_dir.resolve(DIR), EXPORT_DIR)` converts the ids signature of what
a model dir holds (encoder, classifier / regressor, NER, SQuAD, multiple choice) into an
ONNX model and returns `EXPORT_DIR/<version>/`:

    EXPORT_DIR/<version>/model.onnx              inputs input_word_ids, input_mask,
                                                 input_type_ids (int32); the outputs of
                                                 the SavedModel's ids signature, by name
    EXPORT_DIR/<version>/vocab.txt, labels.txt, model_info.json  (export_converted)

The graph is converted by tf2onnx from the very SavedModel `export_model
--notext_signatures` writes, so both compute the same function on ids, task heads and
label names included. Why tf2onnx rather than an ONNX graph written from the weights: it
converts every model kind the SavedModel export serves, from the one graph the tests
hold to the Keras model, instead of a second description of the encoder and of each
head that would have to be kept equal to it; it runs on TF 2.21 / protobuf 6 / numpy 2
with one op missing, TF's `Erfc` (the exact GELU), written here as 1 - Erf.

Opset 17: the first with LayerNormalization, within what tf2onnx 1.17 writes and what
onnxruntime has run since 1.14 (1.32 here). `quantization="dynamic_int8"` applies
onnxruntime's dynamic quantization (int8 matmul weights, activations quantized per call,
no calibration data); `"float32"` (default) keeps float weights and equals the SavedModel
to 1e-4.

The SavedModel's in-graph request checks (rows per request, id ranges) are TF Assert ops
that ONNX has no counterpart for: tf2onnx drops them. onnxruntime still refuses an id >=
vocab_size (Gather's bounds check) with its own message; a negative id wraps (docs/serving.md).
Raw text is not offered: the in-graph tokenizer's TF Text and string ops have no ONNX
form; clients tokenize with the exported vocab.txt.

Example: `convert_saved_model` below; whole exports in tests/test_export_onnx.py.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Optional

import numpy as np

from bert_tf.export import saved_model, export_converted
from bert_tf.export.saved_model import ExportError

MODEL_FILE = "model.onnx"
OPSET = 17
QUANTIZATIONS = ("float32", "dynamic_int8")
#: onnxruntime's type names that differ from numpy's (model_info.json uses numpy's).
_NUMPY_NAMES = {"tensor(float)": "float32", "tensor(double)": "float64"}


def _erfc(ctx, node, name, args):
    """tf2onnx handler of TF's Erfc (tf.nn.gelu's exact form): 1 - Erf(x)."""
    from tf2onnx import utils  # optional (--format=onnx)

    erf = ctx.make_node("Erf", [node.input[0]])
    one = ctx.make_const(utils.make_name("one"),
                         np.array(1, utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))))
    node.type = "Sub"
    ctx.replace_inputs(node, [one.output[0], erf.output[0]])
    return node


def require(module: str, package: str):
    """Imports `module` or raises an ExportError naming the pip package to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ExportError(f"this export format needs {package}: pip install {package} "
                          f"(pinned in requirements-dev.txt)") from None


def convert_saved_model(saved_model_dir: str, signature_key: str = saved_model.SERVING_DEFAULT,
                        source: Optional[str] = None):
    """One SavedModel signature -> an ONNX ModelProto (opset OPSET) with the signature's
    input and output names.

    A graph with an op ONNX has no form for raises ExportError naming the ops and
    `source` (what the user exported; default: the SavedModel).

    >>> import tempfile, tensorflow as tf
    >>> class M(tf.Module):
    ...     @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    ...     def f(self, x):
    ...         return {"y": tf.math.erfc(x)}
    >>> m = M(); d = tempfile.mkdtemp(); tf.saved_model.save(m, d, signatures={"f": m.f})
    >>> proto = convert_saved_model(d, "f")
    >>> [i.name for i in proto.graph.input], [o.name for o in proto.graph.output]
    (['x'], ['y'])
    """
    tf2onnx = require("tf2onnx", "tf2onnx==1.17.0")
    import onnx  # optional (--format=onnx)
    from tf2onnx import tf_loader  # optional (--format=onnx)

    tf2onnx_logger = logging.getLogger("tf2onnx")
    level = tf2onnx_logger.level
    tf2onnx_logger.setLevel(logging.CRITICAL)  # unsupported ops are reported below, once
    try:
        graph_def, inputs, outputs, _, renamed = tf_loader.from_saved_model(
            saved_model_dir, None, None, "serve", [signature_key],
            return_initialized_tables=True, return_tensors_to_rename=True)
        proto, _ = tf2onnx.convert.from_graph_def(
            graph_def, name=signature_key, input_names=inputs, output_names=outputs,
            tensors_to_rename=renamed, opset=OPSET, custom_op_handlers={"Erfc": (_erfc, [])})
    finally:
        tf2onnx_logger.setLevel(level)
    # tf2onnx keeps an op it cannot convert as a node of the TF op's name.
    missing = sorted({n.op_type for n in proto.graph.node
                      if not onnx.defs.has(n.op_type, n.domain or "")})
    if missing:
        raise ExportError(
            f"{source or saved_model_dir}: signature {signature_key!r} uses TensorFlow ops "
            f"with no ONNX form ({', '.join(missing)}); export its ids signature (raw-text "
            f"tokenization cannot be converted: tokenize with vocab.txt) or use "
            f"--format=saved_model")
    return proto


def export_onnx_dir(resolved, export_dir: str, version: Optional[int] = None,
                    max_seq_length: Optional[int] = None, *,
                    quantization: str = "float32") -> str:
    """Exports a model dir (`resolved`: its `model_dir.resolve` result, with the config,
    vocab and casing overrides) as an ONNX model; returns `export_dir/<version>`.
    The version directory appears complete or not at all, as for SavedModels.
    """
    export_converted.check_quantization(quantization, QUANTIZATIONS, "onnx")

    def convert(ids_model: str, out: str) -> dict:
        proto = convert_saved_model(ids_model, source=resolved.path)
        path = os.path.join(out, MODEL_FILE)
        if quantization == "dynamic_int8":
            import onnx  # optional (--format=onnx)
            from onnxruntime.quantization import QuantType, quantize_dynamic  # optional

            float_path = os.path.join(ids_model, "float32.onnx")
            onnx.save(proto, float_path)
            quantize_dynamic(float_path, path, weight_type=QuantType.QInt8)
        else:
            with open(path, "wb") as f:
                f.write(proto.SerializeToString())
        return {"format": "onnx", "opset": OPSET, "quantization": quantization,
                **describe(load_session(path))}

    return export_converted.export_converted_dir(resolved, export_dir, convert, version,
                                                 max_seq_length)


def describe(session) -> dict:
    """inputs / outputs: name -> dtype and shape (-1 for a dynamic axis) as onnxruntime
    reads them (so proving it loads the model)."""
    def tensors(args):
        return {a.name: {"dtype": _NUMPY_NAMES.get(a.type, a.type[len("tensor("):-1]),
                         "shape": [d if isinstance(d, int) else -1 for d in a.shape]}
                for a in sorted(args, key=lambda a: a.name)}

    return {"inputs": tensors(session.get_inputs()), "outputs": tensors(session.get_outputs())}


def load_session(path: str, threads: Optional[int] = None):
    """An onnxruntime CPU InferenceSession of `path` (all graph optimizations)."""
    onnxruntime = require("onnxruntime", "onnxruntime==1.32.0")
    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
