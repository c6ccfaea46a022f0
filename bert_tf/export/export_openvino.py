"""OpenVINO IR export for OpenVINO Model Server and the OpenVINO runtime:
`export_model --format=openvino`.

`export_openvino_dir(model_dir.resolve(DIR), EXPORT_DIR)` converts the ids signature of
what a model dir holds (encoder, classifier / regressor, NER, SQuAD, multiple choice) into
an OpenVINO IR and returns `EXPORT_DIR/<version>/`:

    EXPORT_DIR/<version>/model.xml, model.bin    inputs input_word_ids, input_mask,
                                                 input_type_ids (int32); the outputs of
                                                 the SavedModel's ids signature, by name
    EXPORT_DIR/<version>/plugin_config.json      the CPU plugin's settings this model is
                                                 exported for (INFERENCE_PRECISION_HINT)
    EXPORT_DIR/<version>/vocab.txt, labels.txt, model_info.json  (export_converted)

The IR is OpenVINO's own conversion (`openvino.convert_model`, its TensorFlow frontend) of
the very SavedModel `export_model --notext_signatures` writes, so both compute the same
function on ids, task heads and label names (a string output) included. It loads with the
`openvino` package alone (`compile_model` below shows how; OVMS: docs/serving.md).

Precision. OpenVINO's CPU plugin runs a model in bfloat16 by default on CPUs with
AVX512-BF16 or AMX, whatever the IR stores; the inference precision is a setting of the
runtime, and OpenVINO 2026.4 does not apply one stored in the IR's rt_info. So the export
writes it to `plugin_config.json`, in the form OVMS's `plugin_config` takes, and the
loader applies it: `f32` (default: equals the SavedModel to 1e-4) or, with
`mixed_precision="mixed_bfloat16"`, `bf16` (matmuls in bfloat16, as the SavedModel's
mixed_bfloat16 export). Weights are stored in float32 (no float16 compression).
`quantization`:
* "float32" (default): float weights.
* "dynamic_int8": NNCF weight compression: int8 matmul weights (per output channel),
  activations float; no calibration data (LiteRT's and onnxruntime's dynamic int8).
* "static_int8": NNCF post-training quantization: weights and activations int8, the
  activation ranges measured on `calibration_texts` (one example per line; a tab
  separates a pair's texts, or a multiple-choice context from its endings), tokenized
  with the model dir's vocab and text settings as the raw-text signature does.

Raw text (`text_signatures=True`; classification, regression and an encoder with a vocab):
a second IR, the raw-text signature of the SavedModel (same input and output names:
`text` (+ `text_b`) -> the task's outputs; the encoder's also returns the ids), our
tokenizer in front of the ids IR as openvino-tokenizers ops (`openvino_text`: equal ids
to ours), as an OVMS model of its own beside the ids one:

    EXPORT_DIR/text/<version>/model.xml, model.bin, plugin_config.json

It needs `import openvino_tokenizers` in the loading process (OVMS bundles it);
model_info.json's "text_model" describes it. NER, SQuAD and multiple choice, whose
raw-text outputs are host logic, are refused (ExportError), as is a dir without a vocab.

Example:

>>> import tempfile, os
>>> from bert_tf.model.config import BertConfig
>>> from bert_tf.model.encoder import BertEncoder
>>> from bert_tf.model import model_dir
>>> cfg = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
...                  num_attention_heads=2, intermediate_size=16)
>>> src = tempfile.mkdtemp()
>>> _ = model_dir.write_model_dir(src, cfg, {"encoder": BertEncoder(cfg)})
>>> path = export_openvino_dir(model_dir.resolve(src), tempfile.mkdtemp())
>>> sorted(os.listdir(path))
['model.bin', 'model.xml', 'model_info.json', 'plugin_config.json']
>>> compile_model(path).get_property("INFERENCE_PRECISION_HINT").get_type_name()
'f32'
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from bert_tf.export import export_converted, openvino_text, saved_model
from bert_tf.export.export_onnx import require
from bert_tf.export.saved_model import ExportError
from bert_tf.model import model_dir
from bert_tf.tasks import task_from_config

MODEL_FILE = "model.xml"
TEXT_DIR = "text"  # EXPORT_DIR/text/<version>: the raw-text IR, an OVMS model of its own
PLUGIN_CONFIG_FILE = "plugin_config.json"
QUANTIZATIONS = ("float32", "dynamic_int8", "static_int8")
#: export_model --mixed_precision -> the CPU plugin's INFERENCE_PRECISION_HINT.
PRECISION_HINTS = {"float32": "f32", "mixed_bfloat16": "bf16"}


def export_openvino_dir(resolved, export_dir: str, version: Optional[int] = None,
                        max_seq_length: Optional[int] = None, *,
                        quantization: str = "float32", mixed_precision: str = "float32",
                        calibration_texts: Optional[Sequence[str]] = None,
                        calibration_source: str = "--calibration_file",
                        text_signatures: bool = False) -> str:
    """Exports a model dir (`resolved`: its `model_dir.resolve` result) as an OpenVINO IR;
    returns `export_dir/<version>`, which appears complete or not at all.
    `calibration_texts` (lines; `calibration_source` names them in errors) are required
    by, and only taken with, quantization="static_int8". `text_signatures`: also the
    raw-text IR, in `export_dir/text/<version>` (staged first, moved into place right
    after the ids version; a failure leaves neither; see the module docstring)."""
    export_converted.check_quantization(quantization, QUANTIZATIONS, "openvino")
    text = raw_text_plan(resolved, max_seq_length) if text_signatures else None
    if text is None:
        return _export(resolved, export_dir, version, max_seq_length, quantization,
                       mixed_precision, calibration_texts, calibration_source, None)
    version = saved_model.next_version(export_dir) if version is None else version
    saved_model.new_version_dir(export_dir, version)  # refused now, before any writing
    text_target = saved_model.new_version_dir(os.path.join(export_dir, TEXT_DIR), version)
    with saved_model.written_atomically(text_target) as text_out:
        return _export(resolved, export_dir, version, max_seq_length, quantization,
                       mixed_precision, calibration_texts, calibration_source,
                       dict(text, out=text_out, path=os.path.join(TEXT_DIR, str(version))))


def raw_text_plan(resolved, max_seq_length: Optional[int] = None) -> dict:
    """What the raw-text IR of `resolved` takes: its tokenizer, length, inputs and whether
    the ids are outputs too (the encoder's raw-text signature); ExportError for a model
    whose raw-text outputs are host logic, or without a vocab."""
    if resolved.task_config is not None:
        task = task_from_config(resolved.task_config)
        if not task.raw_text_from_ids:
            raise ExportError(
                f"--format=openvino --text_signatures: the raw-text outputs of a "
                f"{task.name} model ({type(task).__name__}: entities with offsets, answer "
                f"spans or choices) are host logic an OpenVINO IR cannot run; drop "
                f"--text_signatures (ids IR; the client tokenizes) or export a SavedModel")
    try:
        tokenizer = resolved.tokenizer()
    except model_dir.ModelDirError as e:
        raise ExportError(f"--format=openvino --text_signatures tokenizes in the IR: {e}") \
            from None
    length = saved_model.serving_max_seq_length(resolved.config, max_seq_length,
                                                resolved.task_config)
    inputs = (tuple(task.text_input_names) if resolved.task_config is not None
              else ("text",))
    return {"tokenizer": tokenizer, "max_seq_length": length, "text_inputs": inputs,
            "with_ids": resolved.task_config is None}


def _export(resolved, export_dir, version, max_seq_length, quantization, mixed_precision,
            calibration_texts, calibration_source, text) -> str:
    if mixed_precision not in PRECISION_HINTS:
        raise ExportError(f"mixed_precision={mixed_precision!r}: --format=openvino takes "
                          f"one of {', '.join(PRECISION_HINTS)}")
    if (quantization == "static_int8") != (calibration_texts is not None):
        raise ExportError("--calibration_file is required by, and only taken with, "
                          "--quantization=static_int8")
    calibration = None
    if calibration_texts is not None:
        calibration = _calibration_rows(calibration_texts, calibration_source)
    require("openvino", "openvino==2026.4.1")
    import openvino as ov  # optional (--format=openvino)

    plugin_config = {"INFERENCE_PRECISION_HINT": PRECISION_HINTS[mixed_precision]}

    def convert(ids_model: str, out: str) -> dict:
        model = with_fused_kernels(ov.convert_model(ids_model))
        if quantization == "dynamic_int8":
            require("nncf", "nncf==3.4.0")  # a one-line error when it is not installed
            import nncf  # optional (int8 only)

            model = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_SYM)
        elif quantization == "static_int8":
            length = saved_model.serving_max_seq_length(resolved.config, max_seq_length,
                                                        resolved.task_config)
            model = _quantized(model, _calibration_inputs(model, calibration, resolved,
                                                          length, calibration_source))
        info = {}
        if text is not None:  # from the final ids model (quantized or not), cloned
            raw_text = openvino_text.raw_text_model(
                model, text["tokenizer"], text["max_seq_length"], text["text_inputs"],
                with_ids=text["with_ids"])
            _save(raw_text, text["out"], plugin_config)
            info["text_model"] = {"path": text["path"],
                                  "requires": "import openvino_tokenizers",
                                  **describe(compile_model(text["out"], raw_text=True))}
        _save(model, out, plugin_config)
        return {"format": "openvino", "quantization": quantization,
                "plugin_config": plugin_config, **describe(compile_model(out)), **info}

    return export_converted.export_converted_dir(resolved, export_dir, convert, version,
                                                 max_seq_length)


def _save(model, out: str, plugin_config: dict) -> None:
    import openvino as ov  # optional (--format=openvino)

    ov.save_model(model, os.path.join(out, MODEL_FILE), compress_to_fp16=False)
    with tf.io.gfile.GFile(os.path.join(out, PLUGIN_CONFIG_FILE), "w") as f:
        f.write(json.dumps(plugin_config, indent=2) + "\n")


def compile_model(path: str, device: str = "CPU", config: Optional[dict] = None,
                  raw_text: bool = False):
    """The IR in `path` (an export's version directory) compiled by the OpenVINO runtime
    with the export's plugin_config.json (then `config`, e.g. INFERENCE_NUM_THREADS);
    `raw_text`: the raw-text IR (EXPORT_DIR/text/<version>), whose tokenizer ops need
    `import openvino_tokenizers` first."""
    import openvino as ov  # optional (--format=openvino)

    if raw_text:
        import openvino_tokenizers  # noqa: F401  (registers the tokenizer ops)
    settings = {}
    plugin_config = os.path.join(path, PLUGIN_CONFIG_FILE)
    if os.path.exists(plugin_config):
        with open(plugin_config) as f:
            settings = json.load(f)
    settings.update(config or {})
    return ov.Core().compile_model(os.path.join(path, MODEL_FILE), device, settings)


def describe(compiled) -> dict:
    """inputs / outputs: name -> dtype and shape (-1 for a dynamic axis)."""
    import openvino as ov  # optional (--format=openvino)

    def tensors(ports):
        return {p.get_any_name(): {
            "dtype": "string" if p.get_element_type() == ov.Type.string
            else p.get_element_type().to_dtype().name,
            "shape": [d.get_length() if d.is_static else -1 for d in p.get_partial_shape()]}
            for p in sorted(ports, key=lambda p: p.get_any_name())}

    return {"inputs": tensors(compiled.inputs), "outputs": tensors(compiled.outputs)}


def with_fused_kernels(model):
    """`model` (an ov.Model, changed in place and returned) with the forms the TensorFlow
    frontend converts Keras's LayerNorm and exact GELU into rewritten as OpenVINO's own
    ops, which OpenVINO's fusions (MVNFusion, GeluFusion) do not recognise in these forms
    and the CPU plugin runs as one kernel each (GELU fused into the matmul before it):
    * LayerNorm: moments, then `x * (rsqrt(var + eps) * gamma) + (-mean * rsqrt(var + eps)
      * gamma + beta)` (the conversion drops a `+ beta` of zeros) -> `MVN(x) * gamma +
      beta`, 2 reductions and 8 elementwise ops fewer; the same mean, variance of x - mean
      and eps inside the square root;
    * GELU: `0.5 * x * erfc(-x / sqrt(2))` (tf.nn.gelu; Erfc converted as 1 - Erf) ->
      `Gelu(x)` in its erf mode;
    * attention: the fused query/key/value matmul, reshaped and split into 3 (a Split the
      CPU plugin runs with its reference kernel) -> 3 matmuls; the query's scaling
      before the attention op -> the attention op's own scale input;
    * dense layers on tokens: the SavedModel flattens [batch, seq, hidden] to
      [batch * seq, hidden] before each (what TensorFlow's MatMul+BiasAdd fusion needs,
      `dense_on_tokens`) -> the products on the 3-D tensor itself (`_products_on_tokens`).
      With a Reshape between a LayerNorm and its products, NNCF's int8 quantizers sat
      after the Reshape, where the CPU plugin cannot fuse them into the LayerNorm: 31
      stand-alone FakeQuantize and reorder kernels a call on MiniLM, int8 slower than
      bf16.

    >>> import keras, openvino as ov
    >>> from bert_tf.layers import get_activation
    >>> from bert_tf.layers.normalization import float32_layer_norm
    >>> norm = float32_layer_norm(1e-12)
    >>> norm.build((None, 4))
    >>> norm.set_weights([np.float32([1, 2, 3, 4]), np.float32([0, 0, 0, 1])])
    >>> layer = lambda x: get_activation("gelu")(norm(x))
    >>> fn = tf.function(layer, input_signature=[tf.TensorSpec([None, 4])])
    >>> model = with_fused_kernels(ov.convert_model(fn.get_concrete_function()))
    >>> sorted(op.get_type_name() for op in model.get_ordered_ops()
    ...        if op.get_type_name() not in ("Constant", "Parameter", "Result"))
    ['Add', 'Gelu', 'MVN', 'Multiply']
    >>> x = np.float32([[1, 2, 3, 4], [0, 0, 1, 1]])
    >>> bool(np.abs(ov.compile_model(model)(x)[0] - layer(x).numpy()).max() < 1e-6)
    True
    """
    from openvino import opset13 as ops  # optional (--format=openvino)
    from openvino.passes import AnyInput, Manager, Matcher, MatcherPass, Or, WrapType

    def constant(value=None):
        def single(output):
            data = output.get_node().get_data()
            return data.size == 1 and (value is None
                                       or abs(float(data.reshape(-1)[0]) - value) < 1e-7)

        return WrapType("opset13.Constant", single)

    def op(name, *inputs):
        return WrapType(f"opset13.{name}", list(inputs))

    def value(output) -> float:
        return float(output.get_node().get_data().reshape(-1)[0])

    def replace(root, out) -> bool:
        out.set_friendly_name(root.get_friendly_name())
        root.output(0).replace(out.output(0))
        return True

    x, gamma, beta = AnyInput(), AnyInput(), AnyInput()
    mean_axes, variance_axes, eps = (WrapType("opset13.Constant"), WrapType("opset13.Constant"),
                                     constant())
    mean = op("ReduceMean", x, mean_axes)
    variance = op("ReduceMean", op("SquaredDifference", x, mean), variance_axes)
    scale = op("Multiply", op("Power", op("Add", variance, eps), constant(-0.5)), gamma)
    centre = op("Multiply", op("Multiply", mean, constant(-1.0)), scale)
    normalized = op("Add", op("Multiply", x, scale), Or([op("Add", centre, beta), centre]))

    def mvn(matcher) -> bool:
        found = matcher.get_pattern_value_map()
        axes = [found[a].get_node().get_data().reshape(-1).tolist()
                for a in (mean_axes, variance_axes)]
        if axes[0] != axes[1] or not all(found[r].get_node().get_keep_dims()
                                         for r in (mean, variance)):
            return False
        out = ops.multiply(ops.mvn(found[x], found[mean_axes], True, value(found[eps]),
                                   "inside_sqrt"), found[gamma])
        return replace(found[normalized].get_node(),
                       ops.add(out, found[beta]) if beta in found else out)

    y = AnyInput()
    erfc = op("Subtract", constant(1.0), op("Erf", op("Multiply", y, constant(-(0.5 ** 0.5)))))
    gelu = op("Multiply", op("Multiply", constant(0.5), y), erfc)

    def gelu_op(matcher) -> bool:
        found = matcher.get_pattern_value_map()
        return replace(found[gelu].get_node(), ops.gelu(found[y], "erf"))

    inputs, weights, bias, shape, axis = (AnyInput(), WrapType("opset13.Constant"),
                                          WrapType("opset13.Constant"), AnyInput(),
                                          WrapType("opset13.Constant"))
    product = op("MatMul", inputs, weights)
    heads = op("Reshape", Or([op("Add", product, bias), product]), shape)  # zero bias: none
    split = op("Split", heads, axis)

    def split_product(matcher) -> bool:
        """Output i of the split is the product with the i-th block of output columns
        when the reshape only unfolds the product's last axis from the split axis on;
        a Squeeze of the split axis (Keras' unstack) takes that product as it is, any
        other consumer an Unsqueeze of it."""
        found = matcher.get_pattern_value_map()
        node, matmul = found[split].get_node(), found[product].get_node()
        parts, shaped = node.get_attributes()["num_splits"], found[heads].get_partial_shape()
        at = int(found[axis].get_node().get_data()) % shaped.rank.get_length()
        columns = found[product].get_partial_shape()[-1].get_length()
        w = found[weights].get_node().get_data()
        b = found[bias].get_node().get_data() if bias in found else np.zeros(columns, w.dtype)
        transposed = matmul.get_attributes()["transpose_b"]
        if (matmul.get_attributes()["transpose_a"] or not shaped[at:].is_static
                or shaped[at].get_length() != parts or b.size != columns
                or int(np.prod([d.get_length() for d in shaped[at:]])) != columns):
            return False
        width = columns // parts
        kept = [i for i in range(shaped.rank.get_length()) if i != at]
        shape_of_part = ops.gather(found[shape], np.int64(kept), np.int64(0))
        for i in range(parts):
            block = slice(i * width, (i + 1) * width)
            part = ops.add(ops.matmul(found[inputs], np.ascontiguousarray(
                w[block] if transposed else w[:, block]), False, transposed),
                np.ascontiguousarray(b.reshape(-1)[block].reshape(b.shape[:-1] + (width,))))
            part = ops.reshape(part, shape_of_part, False)
            unsqueezed = None
            for target in list(node.output(i).get_target_inputs()):
                consumer = target.get_node()
                if (consumer.get_type_name() == "Squeeze" and consumer.get_input_size() == 2
                        and _squeezed_axes(consumer) == [at]):
                    for after in list(consumer.output(0).get_target_inputs()):
                        after.replace_source_output(part.output(0))
                    continue
                if unsqueezed is None:
                    unsqueezed = ops.unsqueeze(part, np.int64([at]))
                target.replace_source_output(unsqueezed.output(0))
        return True

    query, factor, order, keys, values, mask, one = (
        AnyInput(), constant(), WrapType("opset13.Constant"), AnyInput(), AnyInput(),
        AnyInput(), constant(1.0))
    attention = op("ScaledDotProductAttention",
                   op("Transpose", op("Multiply", query, factor), order), keys, values, mask, one)

    def scale_inside(matcher) -> bool:
        found = matcher.get_pattern_value_map()
        node = found[attention].get_node()
        if node.get_attributes()["causal"]:
            return False
        return replace(node, ops.scaled_dot_product_attention(
            ops.transpose(found[query], found[order]), found[keys], found[values], found[mask],
            np.float32(value(found[factor])), causal=False))

    manager = Manager()
    manager.register_pass(MatcherPass(Matcher(normalized, "LayerNormAsMVN"), mvn))
    manager.register_pass(MatcherPass(Matcher(split, "SplitProductAsProducts"), split_product))
    manager.register_pass(MatcherPass(Matcher(attention, "ScaleInsideAttention"), scale_inside))
    manager.register_pass(MatcherPass(Matcher(gelu, "ErfcGeluAsGelu"), gelu_op))
    manager.run_passes(model)
    _products_on_tokens(model)
    return model


def _products_on_tokens(model) -> None:
    """Feeds each MatMul that takes a [batch, seq, hidden] tensor flattened to
    [batch * seq, hidden] the 3-D tensor itself (the product is the same per token); what
    follows the products (bias, GELU, the next product, the reshapes to heads or back to 3-D,
    whose target shapes come from the input's shape) takes the 3-D form as it is. `model`
    is changed in place; a graph in which that would not hold is left as it was."""
    rewired = []
    for node in model.get_ordered_ops():
        if node.get_type_name() != "Reshape":
            continue
        source = node.input(0).get_source_output()
        shape_in, shape_out = source.get_partial_shape(), node.get_output_partial_shape(0)
        if (shape_in.rank.is_dynamic or shape_in.rank.get_length() != 3
                or shape_out.rank.is_dynamic or shape_out.rank.get_length() != 2
                or not shape_in[2].is_static or shape_in[2] != shape_out[1]):
            continue
        targets = list(node.output(0).get_target_inputs())
        if not targets or not all(
                t.get_node().get_type_name() == "MatMul" and t.get_index() == 0
                and not t.get_node().get_attributes()["transpose_a"] for t in targets):
            continue
        for target in targets:
            rewired.append((target, target.get_source_output()))
            target.replace_source_output(source)
    outputs = [o.get_partial_shape() for o in model.outputs]
    try:
        model.validate_nodes_and_infer_types()
        same = [o.get_partial_shape() for o in model.outputs] == outputs
    except RuntimeError:
        same = False
    if not same:  # a consumer needed the 2-D form: put every edge back
        for target, source in reversed(rewired):
            target.replace_source_output(source)
        model.validate_nodes_and_infer_types()


def _squeezed_axes(squeeze):
    """The sorted non-negative axes a Squeeze with an axes input removes, or None when
    they are not a constant or the rank is unknown."""
    axes_node = squeeze.input(1).get_source_output().get_node()
    rank = squeeze.input(0).get_partial_shape().rank
    if axes_node.get_type_name() != "Constant" or rank.is_dynamic:
        return None
    return sorted(int(a) % rank.get_length() for a in axes_node.get_data().reshape(-1))

# ---------------------------------------------------------------------------- int8

def _calibration_rows(texts: Sequence[str], source: str) -> list:
    """(line number, fields) of each non-blank line; ExportError when there is none."""
    rows = [(n, line.rstrip("\r\n").split("\t")) for n, line in enumerate(texts, 1)
            if line.strip()]
    if not rows:
        raise ExportError(f"{source}: no calibration text; write one example per line")
    return rows


def _calibration_inputs(model, rows: list, resolved, length: int, source: str) -> list:
    """One inputs dict (batch 1, cut to its own length: no padding) per calibration row,
    packed as the raw-text signature packs: a text or a pair; for a multiple-choice model
    (ids of rank 3) a context and its num_choices endings. Texts and pairs are tokenized
    in one batch each (one traced function per kind, not one per length)."""
    try:
        tokenizer = resolved.tokenizer()
    except model_dir.ModelDirError as e:
        raise ExportError(f"--quantization=static_int8 tokenizes the calibration text: {e}") \
            from None
    shape = model.input("input_word_ids").get_partial_shape()
    choices = shape[1].get_length() if shape.rank.get_length() == 3 else 0
    groups = {}  # texts per example -> [(row index, texts)]
    for index, (number, fields) in enumerate(rows):
        if choices and len(fields) != 1 + choices:
            raise ExportError(f"{source}:{number}: {len(fields)} tab-separated texts; "
                              f"this multiple-choice model takes a context and "
                              f"{choices} endings (context TAB ending ...)")
        if not choices and len(fields) > 2:
            raise ExportError(f"{source}:{number}: {len(fields)} tab-separated texts; "
                              f"an example is one text or a pair (text TAB text)")
        groups.setdefault(len(fields), []).append((index, fields))
    inputs = [None] * len(rows)
    for width, members in groups.items():
        if choices:  # each choice is the pair (context, ending)
            a = [f[0] for _, f in members for _ in range(choices)]
            b = [ending for _, f in members for ending in f[1:]]
        else:
            a, b = [f[0] for _, f in members], ([f[1] for _, f in members] if width == 2
                                                else None)
        packed = {k: v.numpy().reshape(len(members), max(choices, 1), -1)
                  for k, v in tokenizer.encode(a, b, max_seq_length=length).items()}
        for row, (index, _) in enumerate(members):
            used = max(int(packed["input_mask"][row].sum(-1).max()), 1)
            inputs[index] = {k: v[row:row + 1, :, :used] if choices else v[row:row + 1, 0, :used]
                             for k, v in packed.items()}
    return inputs


def _quantized(model, inputs: list):
    """NNCF post-training int8 quantization of `model`, ranges measured on `inputs`
    (the transformer preset: softmax, LayerNorm and GELU stay in float)."""
    require("nncf", "nncf==3.4.0")
    import nncf  # optional (int8 only)

    return nncf.quantize(model, nncf.Dataset([{k: np.asarray(v) for k, v in x.items()}
                                              for x in inputs]),
                         model_type=nncf.ModelType.TRANSFORMER, subset_size=len(inputs))
