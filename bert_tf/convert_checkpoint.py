"""Converts BERT checkpoints between formats (DESIGN 2.3).

Into a bert_tf model dir (what `--init_checkpoint=DIR` and `bert_tf.load_encoder` read):

    python -m bert_tf.convert_checkpoint --source_format=tf1 \\
        --input=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=models/bert_base
    python -m bert_tf.convert_checkpoint --source_format=huggingface \\
        --input=path/to/hf_model_dir --output_dir=models/minilm

And back to the original TF1 layout (`bert_model.ckpt`, `bert_config.json`, `vocab.txt`):

    python -m bert_tf.convert_checkpoint --source_format=bert_tf --target_format=tf1 \\
        --input=models/bert_base --output_dir=exported/bert_base

And to Hugging Face (`config.json`, `model.safetensors`, `vocab.txt`, `tokenizer_config.json`),
loadable by transformers as BertModel, BertForPreTraining (a `pretrain` output) or the
task's class (a `finetune` output: BertForSequenceClassification, -TokenClassification,
-QuestionAnswering, -MultipleChoice):

    python -m bert_tf.convert_checkpoint --source_format=bert_tf --target_format=huggingface \\
        --input=models/bert_base --output_dir=exported/bert_base_hf

`--target_format=tf1` also accepts a Hugging Face source, `huggingface` a TF1 one. The output is written to a
temporary directory next to `--output_dir` and renamed at the end, so a failed run leaves
nothing behind; an existing non-empty `--output_dir` is refused unless `--overwrite`.
"""

import dataclasses
import os
import shutil
import tempfile
from typing import Optional

from absl import flags, logging

from bert_tf import cli  # first: quiets TensorFlow before anything loads it
from bert_tf import errors, file_io, flags_common

SOURCE_FORMATS = ("tf1", "huggingface", "bert_tf")
TARGET_FORMATS = ("bert_tf", "tf1", "huggingface")

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines this command's flags; called only when run as a program (or by tests on
    their own FlagValues), so importing `convert` never collides with other CLIs' flags.

    >>> fv = flags.FlagValues()
    >>> define_flags(fv)
    >>> _ = fv(["convert_checkpoint", "--source_format=tf1", "--input=ckpt", "--output_dir=out"])
    >>> fv.source_format, fv.target_format
    ('tf1', 'bert_tf')
    """
    fv = {"flag_values": flag_values}
    flags.DEFINE_enum("source_format", None, SOURCE_FORMATS,
                      "Format of --input: tf1 (original google-research/bert checkpoint), "
                      "huggingface (model.safetensors / pytorch_model.bin), bert_tf (our "
                      "model dir).", **fv)
    flags.DEFINE_enum("target_format", "bert_tf", TARGET_FORMATS,
                      "Format to write: bert_tf (model dir for --init_checkpoint), tf1 "
                      "(original layout: bert_model.ckpt + bert_config.json + vocab.txt) or "
                      "huggingface (config.json + model.safetensors + vocab.txt + "
                      "tokenizer_config.json, for transformers' from_pretrained).", **fv)
    flags.DEFINE_string("input", None, "tf1: checkpoint prefix (DIR/bert_model.ckpt) or its "
                        "directory; huggingface: model directory or weights file; bert_tf: "
                        "model dir.", **fv)
    flags.DEFINE_string("output_dir", None, "Directory to write (created; must be empty or "
                        "absent unless --overwrite).", **fv)
    flags.DEFINE_bool("overwrite", False, "Replace a non-empty --output_dir.", **fv)
    flags.DEFINE_string("bert_config_file", None, "Config to use instead of the one next to "
                        "--input (tf1: bert_config.json; huggingface: config.json).", **fv)
    flags.DEFINE_string("vocab_file", None, "vocab.txt to use instead of the one next to "
                        "--input.", **fv)
    flags.DEFINE_bool("do_lower_case", None, "Record this casing instead of what the source "
                      "says (tokenizer_config.json, or an `uncased_`/`cased_` directory name).",
                      **fv)
    flags.mark_flags_as_required(["source_format", "input", "output_dir"], **fv)


class UsageError(errors.UsageError):
    """Flag values that do not make a conversion."""


def check_output_dir(output_dir: str, overwrite: bool) -> None:
    """Refuses a non-empty output dir (unless overwriting) before any work is done.

    >>> check_output_dir(tempfile.mkdtemp(), overwrite=False)  # empty: fine
    """
    if os.path.isfile(output_dir):
        raise UsageError(f"--output_dir={output_dir} is a file; name a directory")
    if os.path.isdir(output_dir) and os.listdir(output_dir) and not overwrite:
        raise UsageError(f"--output_dir={output_dir} exists and is not empty; pass "
                         f"--overwrite to replace it or choose another directory")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _publish(tmp_dir: str, output_dir: str) -> None:
    """Moves the finished tmp_dir to output_dir, replacing what was there last."""
    old = None
    if os.path.isdir(output_dir):
        old = tempfile.mkdtemp(prefix=".old-", dir=os.path.dirname(output_dir))
        os.rmdir(old)
        os.rename(output_dir, old)
    os.rename(tmp_dir, output_dir)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def convert(source_format: str, input_path: str, output_dir: str, *,
            target_format: str = "bert_tf", overwrite: bool = False,
            bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None,
            do_lower_case: Optional[bool] = None) -> str:
    """Reads `input_path` in `source_format`, writes `output_dir` in `target_format`.

    Returns the written checkpoint prefix or weights file (inside `output_dir`). Raises UsageError for
    impossible argument combinations, FileNotFoundError for missing inputs and
    ValueError subclasses (checkpoints.weights.CheckpointFormatError, CheckpointMismatchError,
    ConfigError) for sources that do not fit.
    """
    if source_format not in SOURCE_FORMATS:
        raise UsageError(f"--source_format={source_format!r}: expected one of "
                         f"{', '.join(SOURCE_FORMATS)}")
    if target_format not in TARGET_FORMATS:
        raise UsageError(f"--target_format={target_format!r}: expected one of "
                         f"{', '.join(TARGET_FORMATS)}")
    if source_format == target_format:
        raise UsageError(f"--source_format and --target_format are both {source_format}; "
                         f"nothing to convert")
    if not input_path or not output_dir:
        raise UsageError("--input and --output_dir are required")
    if source_format == "bert_tf" and (bert_config_file or vocab_file or do_lower_case is not None):
        raise UsageError("--bert_config_file/--vocab_file/--do_lower_case apply to tf1 and "
                         "huggingface sources; a bert_tf model dir carries its own")
    if file_io.is_remote(output_dir):  # os.path would make it ./gs:/...
        raise UsageError(f"--output_dir={output_dir}: convert_checkpoint writes a local "
                         f"directory (built beside it, renamed when complete); write it "
                         f"locally, then copy it: gsutil -m cp -r DIR {output_dir}")
    output_dir = os.path.abspath(output_dir)
    if os.path.abspath(input_path).rstrip("/") == output_dir:
        raise UsageError(f"--output_dir={output_dir} is the input itself; choose another one")
    check_output_dir(output_dir, overwrite)
    if ("://" not in input_path and not os.path.exists(input_path)
            and not os.path.exists(input_path + ".index")):
        raise FileNotFoundError(f"--input={input_path}: no such file or directory")

    # late: flag errors are reported without loading TF
    from bert_tf import model_dir
    from bert_tf.checkpoints import huggingface, tf1, weights as weights_lib

    if source_format == "bert_tf":
        weights = weights_lib.read_model_dir(input_path)
    else:
        read = {"tf1": tf1.read_tf1_checkpoint, "huggingface": huggingface.read_huggingface}
        weights = read[source_format](input_path, config_file=bert_config_file,
                                      vocab_file=vocab_file, do_lower_case=do_lower_case)
    logging.info("read %s (%d layers, hidden %d, heads: %s)", input_path,
                 weights.config.num_hidden_layers, weights.config.hidden_size,
                 ", ".join(weights.heads) or "none")
    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(prefix=f".{os.path.basename(output_dir)}.tmp-", dir=parent)
    os.chmod(tmp_dir, 0o777 & ~_umask())  # mkdtemp makes it private; the output should not be
    try:
        if target_format != "huggingface" and weights.task_config is not None:
            logging.warning("%s: the %s task head is not exported (%s has no place for "
                            "it); only the encoder is", input_path,
                            weights.task_config.get("task_name"), target_format)
        if target_format == "tf1":
            prefix = tf1.write_tf1_checkpoint(weights, tmp_dir)
        elif target_format == "huggingface":
            prefix = huggingface.write_huggingface(weights, tmp_dir)
        else:
            _, objects = weights_lib.build_model(weights)
            prefix = model_dir.write_model_dir(
                tmp_dir, weights.config, objects, vocab_file=weights.vocab_file,
                do_lower_case=weights.do_lower_case, strip_accents=weights.strip_accents)
        _publish(tmp_dir, output_dir)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    prefix = os.path.join(output_dir, os.path.basename(prefix))
    logging.info("wrote %s", prefix)
    return prefix


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConvertConfig:
    """One conversion (what the flags say); `run(config)` does it."""
    source_format: str
    input: str
    output_dir: str
    target_format: str = "bert_tf"
    overwrite: bool = False
    bert_config_file: Optional[str] = None
    vocab_file: Optional[str] = None
    do_lower_case: Optional[bool] = None

    @classmethod
    def from_flags(cls, flag_values: flags.FlagValues = FLAGS) -> "ConvertConfig":
        return flags_common.config_from_flags(cls, flag_values)


def run(config: ConvertConfig) -> str:
    """Runs the conversion `config` describes (`convert`); a bad input raises a
    BertTfError, impossible flag combinations a UsageError."""
    return convert(config.source_format, config.input, config.output_dir,
                   target_format=config.target_format, overwrite=config.overwrite,
                   bert_config_file=config.bert_config_file, vocab_file=config.vocab_file,
                   do_lower_case=config.do_lower_case)


def main(argv):
    del argv  # cli.run_main refuses positional arguments
    print(f"wrote {run(ConvertConfig.from_flags(FLAGS))}")


if __name__ == "__main__":
    cli.run_main(main, define_flags)
