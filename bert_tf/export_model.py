"""Exports a model dir as a SavedModel for TF Serving (docs/contracts.md §5), or for LiteRT.

    python -m bert_tf.export_model --init_checkpoint=DIR --export_dir=EXPORT_DIR \\
        [--version=N] [--max_seq_length=128] [--mixed_precision=mixed_bfloat16] \\
        [--parallel_branches=2] \\
        [--format=litert|onnx|openvino [--quantization=...] [--calibration_file=F]]

DIR is what convert_checkpoint, pretrain or finetune wrote. The SavedModel goes to
EXPORT_DIR/<version> (default: the next free integer, 1 for a new EXPORT_DIR), ready for
`tensorflow_model_server --model_base_path=EXPORT_DIR`; the path is printed last.
See docs/serving.md for the signatures and client requests. `--mixed_precision=mixed_bfloat16`
(the trainers' flag, docs/contracts.md §3: matmuls in 16 bits, the rest in float32) stores and runs
the encoder's matmuls in bfloat16, inputs and outputs float32: for serving CPUs with
AVX512-BF16 or AMX (docs/serving.md, "Which precision"). `--format=litert` writes
EXPORT_DIR/<version>/model.tflite (ids input, int8 weights) for phones instead
(bert_tf/export/export_litert.py; docs/serving.md, "LiteRT"); `--format=onnx` model.onnx for
onnxruntime (bert_tf/export/export_onnx.py) and `--format=openvino` model.xml/.bin for OpenVINO
Model Server (bert_tf/export/export_openvino.py), both on ids (docs/serving.md, "ONNX and
OpenVINO"); `--format=openvino --text_signatures` also writes the raw-text IR (tokenizer
inside; classification, regression, encoders) to EXPORT_DIR/text/<version>. A model pretrained on text pre-split by `--pre_tokenizer=kiwi` keeps its
raw-text signatures, which take text split the same way (the client runs the analyser;
the export warns and records it in assets.extra/tokenizer_config.json).
"""

import dataclasses
import os
from typing import Optional

from absl import flags, logging

from bert_tf.app import cli  # first: quiets TensorFlow before anything loads it
from bert_tf.app import settings
from bert_tf.app.setting_fields import setting
from bert_tf.core import file_io, output_guard
from bert_tf.core.errors import UsageError

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportConfig(settings.ModelDirSettings):
    """One export (what the flags say); `run(config)` does it."""
    export_dir: Optional[str] = setting(
        None, "Base directory; the model goes to EXPORT_DIR/<version>.")
    version: Optional[int] = setting(
        None, "Version subdirectory (default: the next free integer).", lower=0)
    max_seq_length: Optional[int] = setting(
        None, "Raw-text signatures pack and truncate to this many tokens (default: the "
        "fine-tuning max_seq_length; 128 for encoders).", lower=3)
    max_batch_size: Optional[int] = setting(
        None, "Requests of more rows are refused (INVALID_ARGUMENT) by every signature "
        "(default: bert_tf.serving.modules.DEFAULT_MAX_BATCH_SIZE, 256).", lower=1)
    max_text_length: Optional[int] = setting(
        None, "Raw-text requests with a string of more UTF-8 bytes are refused "
        "(INVALID_ARGUMENT); NER and SQuAD windows grow with the text (default: "
        "bert_tf.serving.modules.DEFAULT_MAX_TEXT_LENGTH, 20000).", lower=1)
    # None: not given (saved_model: included; the ids-only formats refuse them when asked).
    text_signatures: Optional[bool] = setting(
        None, "Include the raw-text signatures (tokenizer in the graph: needs TF Text ops "
        "in the server). --notext_signatures exports ids signatures only. openvino: not "
        "by default; given, also a raw-text IR in EXPORT_DIR/text/<version> (needs "
        "openvino_tokenizers; classification, regression and encoders only).",
        flag_default=True)
    format: str = setting(
        "saved_model", "saved_model: TF Serving SavedModel. litert: a LiteRT (TFLite) model "
        "on ids for on-device use (EXPORT_DIR/<version>/model.tflite). onnx: an ONNX model "
        "on ids for onnxruntime (model.onnx). openvino: an OpenVINO IR on ids for OpenVINO "
        "Model Server (model.xml, model.bin, plugin_config.json).",
        choices=("saved_model", "litert", "onnx", "openvino"))
    quantization: Optional[str] = setting(
        None, "litert, onnx, openvino only. float32: float weights (default for onnx and "
        "openvino). dynamic_int8: int8 matmul weights, float activations (default for "
        "litert). static_int8 (openvino): int8 weights and activations, ranges measured on "
        "--calibration_file.", choices=("dynamic_int8", "static_int8", "float32"))
    calibration_file: Optional[str] = setting(
        None, "--quantization=static_int8 only: a UTF-8 text file of calibration examples, "
        "one a line (a tab separates a pair's texts; multiple choice: context TAB endings); "
        "a few hundred lines like the served traffic.")
    mixed_precision: str = setting(
        "float32", "saved_model and openvino only. openvino: mixed_bfloat16 sets the CPU "
        "plugin's inference precision to bf16 (plugin_config.json). saved_model: "
        "mixed_bfloat16: the encoder's matmul weights are "
        "stored and run in bfloat16 (embeddings, LayerNorm, softmax, logits, inputs and "
        "outputs float32): faster on CPUs with AVX512-BF16 or AMX, slower on others "
        "(docs/serving.md).", choices=("float32", "mixed_bfloat16"))
    parallel_branches: int = setting(
        1, "saved_model only. N > 1 splits each transformer layer into N independent "
        "chains (attention heads and FFN units divided between them; the same outputs up "
        "to rounding) that "
        "one request runs on N cores when the server has N inter-op threads and one "
        "intra-op thread: --tensorflow_intra_op_parallelism=1 "
        "--tensorflow_inter_op_parallelism=N (docs/serving.md, \"Splitting each "
        "layer\"; it helped float32 exports). N must divide num_attention_heads and "
        "intermediate_size.", lower=1)


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines this command's flags (only when run as a program, so importing this module
    never collides with other CLIs' flags).

    >>> fv = flags.FlagValues()
    >>> define_flags(fv)
    >>> _ = fv(["export_model", "--init_checkpoint=m", "--export_dir=e", "--version=3"])
    >>> fv.version, fv.max_seq_length
    (3, None)
    """
    ExportConfig.define_flags(flag_values)
    registered_on = {"flag_values": flag_values}
    flags.register_multi_flags_validator(
        ["format", "mixed_precision"],
        lambda v: v["mixed_precision"] == "float32" or v["format"] in ("saved_model",
                                                                       "openvino"),
        message="--mixed_precision applies to --format=saved_model or openvino only",
        **registered_on)
    flags.register_multi_flags_validator(
        ["format", "parallel_branches"],
        lambda v: v["parallel_branches"] == 1 or v["format"] == "saved_model",
        message="--parallel_branches applies to --format=saved_model only", **registered_on)
    flags.register_multi_flags_validator(
        ["format", "quantization"],
        lambda v: v["quantization"] is None or v["format"] != "saved_model",
        message="--quantization applies to --format=litert, onnx or openvino only "
                "(saved_model: see --mixed_precision)", **registered_on)
    flags.register_multi_flags_validator(
        ["format", "quantization"],
        lambda v: v["quantization"] != "static_int8" or v["format"] == "openvino",
        message="--quantization=static_int8 applies to --format=openvino only (litert and "
                "onnx: dynamic_int8)", **registered_on)
    flags.register_multi_flags_validator(
        ["quantization", "calibration_file"],
        lambda v: (v["calibration_file"] is None) == (v["quantization"] != "static_int8"),
        message="--calibration_file is required by, and only taken with, "
                "--quantization=static_int8", **registered_on)
    flags.mark_flags_as_required(["init_checkpoint", "export_dir"], flag_values=flag_values)


def run(config: ExportConfig) -> str:
    """Exports as `config` says; returns EXPORT_DIR/<version>. One export into an
    EXPORT_DIR at a time (a lock: two would pick the same next version)."""
    if output_guard.is_file(config.export_dir):
        raise output_guard.OutputGuardError(f"--export_dir={config.export_dir} is a file; "
                                            f"name a directory (versions go inside it)")
    other = output_guard.owner(config.export_dir)
    if other is not None:  # versions go into a folder of their own, not into a model dir
        raise output_guard.OutputGuardError(
            f"--export_dir={config.export_dir} is the output of {other['command']}: export "
            f"into a folder of its own (e.g. {os.path.join(config.export_dir, 'export')})")
    with output_guard.locked(config.export_dir, flag="--export_dir"):
        return _run(config)


def _run(config: ExportConfig) -> str:
    # EXPORT_DIR gains a version folder: never the model dir it exports nor a parent of it
    # (docs/contracts.md §6); a folder inside the model dir (MODEL/export/1) changes no input file.
    output_guard.check_apart(config.export_dir, [config.init_checkpoint, config.vocab_file,
                                                 config.bert_config_file], flag="--export_dir",
                             allow_inside=True)
    if config.format not in ("saved_model", "openvino") and config.text_signatures:
        raise UsageError(f"--format={config.format} exports the ids input only (it has no "
                         f"ops for the in-graph tokenizer); drop --text_signatures and "
                         f"tokenize in the client with the exported vocab.txt")
    calibration_texts = None
    if config.calibration_file:
        try:
            calibration_texts = file_io.read_bytes(config.calibration_file).decode(
                "utf-8").splitlines()
        except OSError as e:
            raise UsageError(f"--calibration_file={config.calibration_file}: cannot read it "
                             f"({e.__class__.__name__})") from None
        except UnicodeDecodeError as e:
            raise UsageError(f"--calibration_file={config.calibration_file}: not UTF-8 "
                             f"(byte {e.start})") from None
    # The model dir read once (with the flags' overrides); every format exports from it.
    resolved = config.resolve()  # late: TensorFlow loads after the flags parse
    # What every format takes: the version and the length.
    common = dict(version=config.version, max_seq_length=config.max_seq_length)
    if config.format == "litert":
        from bert_tf.export.export_litert import export_litert_dir  # optional, TensorFlow

        return export_litert_dir(resolved, config.export_dir,
                                 quantization=config.quantization or "dynamic_int8", **common)
    if config.format == "onnx":
        from bert_tf.export.export_onnx import export_onnx_dir  # optional, TensorFlow

        return export_onnx_dir(resolved, config.export_dir,
                               quantization=config.quantization or "float32", **common)
    if config.format == "openvino":
        from bert_tf.export.export_openvino import export_openvino_dir  # optional, TF

        _warn_pre_split(config, resolved, bool(config.text_signatures))
        return export_openvino_dir(resolved, config.export_dir,
                                   quantization=config.quantization or "float32",
                                   mixed_precision=config.mixed_precision,
                                   calibration_texts=calibration_texts,
                                   calibration_source=config.calibration_file,
                                   text_signatures=bool(config.text_signatures), **common)
    from bert_tf.export.saved_model import export_model_dir  # TensorFlow (9 s): not for --help

    _warn_pre_split(config, resolved, config.text_signatures is not False)
    return export_model_dir(resolved, config.export_dir,
                            text_signatures=config.text_signatures is not False,
                            mixed_precision=config.mixed_precision,
                            max_batch_size=config.max_batch_size,
                            max_text_length=config.max_text_length,
                            parallel_branches=config.parallel_branches, **common)


def _warn_pre_split(config: ExportConfig, resolved, text_signatures: bool) -> None:
    if resolved.text.pre_tokenizer and text_signatures:
        # The analyser is Python: the graph cannot run it, the client must (README, Korean).
        logging.warning(
            "%s was pretrained on text pre-split by --pre_tokenizer=%s, which cannot run in "
            "a SavedModel: its raw-text signatures take text split the same way (python -m "
            "bert_tf.pre_tokenizers, or bert_tf.pre_tokenizers.split_lines; "
            "assets.extra/tokenizer_config.json records it) and their offsets index the "
            "split text", config.init_checkpoint, resolved.text.pre_tokenizer)


def main(argv):
    del argv  # cli.run_main refuses positional arguments
    path = run(ExportConfig.from_flags(FLAGS))  # BertTfError: one line from cli.run_main
    logging.info("exported %s", path)
    print(path)


if __name__ == "__main__":
    cli.run_main(main, define_flags)
