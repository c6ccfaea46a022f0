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
onnxruntime has run since 1.14 (1.32 here). tf2onnx writes Keras's LayerNorm as 13 ops
(its means as GlobalAveragePool) and the exact GELU as TensorFlow's erfc form, which
onnxruntime's fusions do not recognise: `with_fused_kernels` rewrites them as the
LayerNormalization op and GELU's erf form, which onnxruntime runs as one kernel each
(LayerNormalization, its Gelu fusion), as it does for transformers' exports.
`quantization="dynamic_int8"` applies onnxruntime's dynamic quantization (int8 matmul
weights with a scale per output column, activations quantized per call, no calibration
data: per-column scales cost a NER model 0.6 F1 where one scale per matrix costs 1.3,
benchmarks/export_precision_quality.py); `"float32"` (default) keeps float weights and
equals the SavedModel to 1e-4.

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


def with_fused_kernels(proto):
    """`proto` (an ONNX ModelProto from `convert_saved_model`, changed in place and
    returned) with tf2onnx's form of Keras's LayerNorm -- mean and variance as
    GlobalAveragePool, `x * (gamma / sqrt(var + eps)) + (beta - mean * gamma / sqrt(var +
    eps))` -- as one LayerNormalization (the same mean, variance of x - mean and eps
    inside the square root), and the exact GELU `0.5 * x * erfc(-x / sqrt(2))` (Erfc
    written as 1 - Erf) as `x * (1 + erf(x / sqrt(2))) * 0.5`, the form onnxruntime's
    GeluFusion matches. Nodes left unused are dropped.

    >>> import tempfile, tensorflow as tf, onnxruntime
    >>> from bert_tf.layers import get_activation
    >>> from bert_tf.layers.normalization import float32_layer_norm
    >>> norm = float32_layer_norm(1e-12); norm.build((None, None, 4))
    >>> norm.set_weights([np.float32([1, 2, 3, 4]), np.float32([0, 0, 0, 1])])
    >>> class M(tf.Module):
    ...     @tf.function(input_signature=[tf.TensorSpec([None, None, 4], tf.float32, name="x")])
    ...     def f(self, x):
    ...         return {"y": get_activation("gelu")(norm(x))}
    >>> m = M(); m.norm = norm; d = tempfile.mkdtemp()
    >>> tf.saved_model.save(m, d, signatures={"f": m.f})
    >>> proto = with_fused_kernels(convert_saved_model(d, "f"))
    >>> sorted(n.op_type for n in proto.graph.node)
    ['Add', 'Div', 'Erf', 'LayerNormalization', 'Mul', 'Mul']
    >>> x = np.float32([[[1, 2, 3, 4], [0, 0, 1, 1]]])
    >>> session = onnxruntime.InferenceSession(proto.SerializeToString())
    >>> bool(np.abs(session.run(None, {"x": x})[0] - m.f(x)["y"].numpy()).max() < 1e-5)
    True
    """
    from onnx import helper, numpy_helper  # optional (--format=onnx)

    graph = proto.graph
    constants = {t.name: t for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    replacements = {}  # id(node) -> nodes written in its place

    def made(name, op_type=None):
        node = producer.get(name)
        return node if node is not None and op_type in (None, node.op_type) else None

    def scalar(name):
        t = constants.get(name)
        return None if t is None or t.dims not in ([], [1]) else \
            float(numpy_helper.to_array(t).reshape(-1)[0])

    def vector(name):
        """(a 1-D initializer of the constant `name`'s values, their count), or None when
        `name` is no constant or has more than one axis longer than 1."""
        t = constants.get(name)
        if t is None or sum(d > 1 for d in t.dims) > 1:
            return None
        values = numpy_helper.to_array(t)
        flat = numpy_helper.from_array(values.reshape(-1), name=f"{name}__1d")
        if flat.name not in constants:
            graph.initializer.append(flat)
            constants[flat.name] = flat
        return flat.name, values.size

    def other(node, name):
        """The input of a two-input `node` that is not `name`."""
        a, b = node.input
        return b if a == name else a if b == name else None

    def layer_norm_parts(x, m, shift):
        """(gamma, eps) when `m` is gamma / sqrt(var(x) + eps) and `shift` is
        Mul(Neg(mean(x)), m) in tf2onnx's form of Keras's LayerNorm; else None."""
        scale = made(m, "Mul")
        if scale is None or other(shift, m) is None:
            return None
        neg = made(other(shift, m), "Neg")
        mean = made(neg.input[0], "GlobalAveragePool") if neg is not None else None
        if mean is None or mean.input[0] != x:
            return None
        for rsqrt_name, gamma in (tuple(scale.input), tuple(reversed(scale.input))):
            reciprocal = made(rsqrt_name, "Reciprocal")
            sqrt = made(reciprocal.input[0], "Sqrt") if reciprocal is not None else None
            plus = made(sqrt.input[0], "Add") if sqrt is not None else None
            if plus is None:
                continue
            for variance_name, eps_name in (tuple(plus.input), tuple(reversed(plus.input))):
                variance, eps = made(variance_name, "GlobalAveragePool"), scalar(eps_name)
                square = made(variance.input[0], "Mul") if variance is not None else None
                if square is None or eps is None or square.input[0] != square.input[1]:
                    continue
                centred = made(square.input[0], "Sub")
                if centred is None or list(centred.input) != [x, mean.output[0]]:
                    continue
                return gamma, eps
        return None

    def layer_norm(out_add):
        # out = x * m + (beta - mean * m), m = gamma / sqrt(var + eps); tf2onnx writes
        # beta - mean * m as Add(Mul(Neg(mean), m), beta), or Mul(Neg(mean), m) for a
        # beta of zeros.
        for scaled_name, shift_name in (tuple(out_add.input), tuple(reversed(out_add.input))):
            scaled, shift = made(scaled_name, "Mul"), producer.get(shift_name)
            if scaled is None or shift is None:
                continue
            beta = None
            if shift.op_type == "Add":
                for a, b in (tuple(shift.input), tuple(reversed(shift.input))):
                    if made(a, "Mul") is not None and b in constants:
                        shift, beta = made(a, "Mul"), b
                        break
                else:
                    continue
            if shift.op_type != "Mul":
                continue
            for x, m in (tuple(scaled.input), tuple(reversed(scaled.input))):
                found = layer_norm_parts(x, m, shift)
                gamma_vector = vector(found[0]) if found is not None else None
                beta_vector = vector(beta) if beta is not None else None
                if gamma_vector is None or (beta is not None and (
                        beta_vector is None or beta_vector[1] != gamma_vector[1])):
                    continue
                gamma1d, size = gamma_vector
                if beta is None:
                    zeros = numpy_helper.from_array(np.zeros(size, np.float32),
                                                    name=f"{out_add.output[0]}__beta")
                    graph.initializer.append(zeros)
                    constants[zeros.name] = zeros
                    beta1d = zeros.name
                else:
                    beta1d = beta_vector[0]
                eps = found[1]
                return helper.make_node("LayerNormalization", [x, gamma1d, beta1d],
                                        list(out_add.output), name=out_add.name,
                                        axis=-1, epsilon=eps)
        return None

    def gelu(out_mul):
        # 0.5 * x * erfc(-x / sqrt(2)) = Mul(Mul(0.5, x), Sub(1, Erf(Mul(Neg(x), c))))
        for half_name, erfc_name in (tuple(out_mul.input), tuple(reversed(out_mul.input))):
            half, erfc = made(half_name, "Mul"), made(erfc_name, "Sub")
            if half is None or erfc is None or scalar(erfc.input[0]) != 1.0:
                continue
            erf = made(erfc.input[1], "Erf")
            inner = made(erf.input[0], "Mul") if erf is not None else None
            if inner is None:
                continue
            for neg_name, c in (tuple(inner.input), tuple(reversed(inner.input))):
                neg = made(neg_name, "Neg")
                if neg is None or scalar(c) is None or abs(scalar(c) - 0.5 ** 0.5) > 1e-6:
                    continue
                x = neg.input[0]
                if other(half, x) is None or scalar(other(half, x)) != 0.5:
                    continue
                name = out_mul.output[0]
                consts = [numpy_helper.from_array(np.array(v, np.float32), f"{name}__{k}")
                          for k, v in (("sqrt2", 2 ** 0.5), ("one", 1.0), ("half", 0.5))]
                for t in consts:
                    graph.initializer.append(t)
                    constants[t.name] = t
                return [helper.make_node("Div", [x, consts[0].name], [f"{name}__scaled"]),
                        helper.make_node("Erf", [f"{name}__scaled"], [f"{name}__erf"]),
                        helper.make_node("Add", [f"{name}__erf", consts[1].name],
                                         [f"{name}__erfc"]),
                        helper.make_node("Mul", [x, f"{name}__erfc"], [f"{name}__x_erfc"]),
                        helper.make_node("Mul", [f"{name}__x_erfc", consts[2].name],
                                         list(out_mul.output), name=out_mul.name)]
        return None

    for node in graph.node:
        new = (layer_norm(node) if node.op_type == "Add" else
               gelu(node) if node.op_type == "Mul" else None)
        if new is not None:
            replacements[id(node)] = new if isinstance(new, list) else [new]
    if replacements:
        nodes = [n for node in graph.node for n in replacements.get(id(node), [node])]
        del graph.node[:]
        graph.node.extend(_used(nodes, {o.name for o in graph.output}))
        used = {i for n in graph.node for i in n.input}
        kept = [t for t in graph.initializer if t.name in used]
        del graph.initializer[:]
        graph.initializer.extend(kept)
    return proto


def _used(nodes, outputs):
    """`nodes` (in order) without those none of whose outputs reaches `outputs`."""
    needed, kept = set(outputs), []
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(node.input)
    return list(reversed(kept))


def export_onnx_dir(resolved, export_dir: str, version: Optional[int] = None,
                    max_seq_length: Optional[int] = None, *,
                    quantization: str = "float32") -> str:
    """Exports a model dir (`resolved`: its `model_dir.resolve` result, with the config,
    vocab and casing overrides) as an ONNX model; returns `export_dir/<version>`.
    The version directory appears complete or not at all, as for SavedModels.
    """
    export_converted.check_quantization(quantization, QUANTIZATIONS, "onnx")

    def convert(ids_model: str, out: str) -> dict:
        proto = with_fused_kernels(convert_saved_model(ids_model, source=resolved.path))
        path = os.path.join(out, MODEL_FILE)
        if quantization == "dynamic_int8":
            import onnx  # optional (--format=onnx)
            from onnxruntime.quantization import QuantType, quantize_dynamic  # optional

            float_path = os.path.join(ids_model, "float32.onnx")
            onnx.save(proto, float_path)
            quantize_dynamic(float_path, path, weight_type=QuantType.QInt8,
                             per_channel=True)
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
