"""Converts BERT checkpoints between formats (docs/contracts.md §3).

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

A fine-tuned Hugging Face model (BertForSequenceClassification, -TokenClassification,
-QuestionAnswering, -MultipleChoice) comes in with its head: the output is a fine-tuned
model dir (task_config.json, labels from id2label) that export_model serves on raw text;
`--task_name` says which task when config.json does not (a classifier's GLUE task):

    python -m bert_tf.convert_checkpoint --source_format=huggingface \
        --input=my_hf_sentiment_model --output_dir=models/sentiment --task_name=sst-2

keras-hub presets (`save_to_preset` directories: BertBackbone, BertTextClassifier with
its head) both ways, through keras-hub itself:

    python -m bert_tf.convert_checkpoint --source_format=keras_hub \
        --input=my_preset --output_dir=models/from_keras_hub
    python -m bert_tf.convert_checkpoint --source_format=bert_tf --target_format=keras_hub \
        --input=models/bert_base --output_dir=exported/bert_base_keras_hub

Any source format converts to any other (`--target_format=tf1` from a Hugging Face
source, `keras_hub` from a TF1 one, ...). The output is built in a hidden directory next to
`--output_dir` and swapped in when complete (`output_guard.new_output_dir`), so a failed run
leaves nothing behind. An existing non-empty `--output_dir` is refused; `--overwrite` replaces
it only when an earlier bert_tf command wrote it, and never when it is, holds or lies inside
the input.
"""

import dataclasses
import json
import os
from typing import Optional

from absl import flags, logging

from bert_tf.app import cli  # first: quiets TensorFlow before anything loads it
from bert_tf.app import setting_fields
from bert_tf.app.setting_fields import setting
from bert_tf.core import errors, file_io, output_guard
from bert_tf.tasks import canonical_task_name

SOURCE_FORMATS = ("tf1", "huggingface", "keras_hub", "bert_tf")
TARGET_FORMATS = ("bert_tf", "tf1", "huggingface", "keras_hub")
# Sources whose readers know task heads (and so take --task_name).
_TASK_SOURCES = ("huggingface", "keras_hub")

FLAGS = flags.FLAGS


class UsageError(errors.UsageError):
    """Flag values that do not make a conversion."""


def convert(source_format: str, input_path: str, output_dir: str, *,
            target_format: str = "bert_tf", overwrite: bool = False,
            bert_config_file: Optional[str] = None, vocab_file: Optional[str] = None,
            do_lower_case: Optional[bool] = None, task_name: Optional[str] = None) -> str:
    """Reads `input_path` in `source_format`, writes `output_dir` in `target_format`.

    A fine-tuned source (a Hugging Face BertFor* task model, a keras-hub
    BertTextClassifier) keeps its task head: the output is a fine-tuned model dir
    (`task_config.json`; `task_name` names the task when the source does not).

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
        raise UsageError("--bert_config_file/--vocab_file/--do_lower_case apply to tf1, "
                         "huggingface and keras_hub sources; a bert_tf model dir carries its "
                         "own")
    if task_name and source_format not in _TASK_SOURCES:
        raise UsageError(f"--task_name applies to fine-tuned {' and '.join(_TASK_SOURCES)} "
                         f"sources; a {source_format} source's task (if any) is its own")
    if task_name:
        from bert_tf.checkpoints.huggingface import split_task_name  # TensorFlow: not for --help

        # an unknown name is a usage error, before any work
        canonical_task_name(split_task_name(task_name)[0])
    if file_io.is_remote(output_dir):  # the writers write local files
        raise UsageError(f"--output_dir={output_dir}: convert_checkpoint writes a local "
                         f"directory (built beside it, renamed when complete); write it "
                         f"locally, then copy it: gsutil -m cp -r DIR {output_dir}")
    if ("://" not in input_path and not os.path.exists(input_path)
            and not os.path.exists(input_path + ".index")):
        raise FileNotFoundError(f"--input={input_path}: no such file or directory")
    if target_format in ("bert_tf", "tf1"):  # read by TF's reader, which globs the path
        from bert_tf.model import model_dir  # TensorFlow: not loaded by --help (0.5 s, not 9 s)

        model_dir.check_checkpoint_path(output_dir, "--output_dir")
    inputs = [input_path, input_path + ".index", bert_config_file, vocab_file]
    # What this conversion is: a rerun of it (after a kill once the output was in place)
    # finds its output complete instead of refusing the now non-empty --output_dir.
    job = json.dumps([source_format, target_format, os.path.abspath(input_path),
                      bert_config_file, vocab_file, do_lower_case, task_name])
    if output_guard.is_complete(output_dir, "convert_checkpoint", job) and not overwrite:
        logging.info("%s: already holds this conversion, nothing to do", output_dir)
        return _written_prefix(output_dir)
    # Built beside --output_dir and swapped in when complete; --overwrite replaces only an
    # earlier bert_tf output, never an input or a folder holding one (docs/contracts.md §6).
    with output_guard.new_output_dir(output_dir, "convert_checkpoint", overwrite=overwrite,
                                     inputs=inputs, job=job) as tmp_dir:
        prefix = _convert_into(source_format, target_format, input_path, tmp_dir,
                               bert_config_file, vocab_file, do_lower_case, task_name)
    prefix = os.path.join(output_dir, os.path.basename(prefix))
    logging.info("wrote %s", prefix)
    return prefix


def _written_prefix(output_dir: str) -> str:
    """The checkpoint prefix or weights file an earlier run of the job wrote there."""
    import tensorflow as tf  # not loaded by --help (0.5 s, not 9 s)

    latest = tf.train.latest_checkpoint(output_dir)
    if latest:
        return latest
    for name in ("model.safetensors", "bert_model.ckpt", "model.weights.h5"):
        if os.path.exists(os.path.join(output_dir, name)) or os.path.exists(
                os.path.join(output_dir, name + ".index")):
            return os.path.join(output_dir, name)
    return output_dir


def _convert_into(source_format, target_format, input_path, tmp_dir, bert_config_file,
                  vocab_file, do_lower_case, task_name) -> str:
    # late: flag errors are reported without loading TF (9 s)
    from bert_tf.model import model_dir
    from bert_tf.checkpoints import huggingface, keras_hub, tf1, weights as weights_lib

    if source_format == "bert_tf":
        weights = weights_lib.read_model_dir(input_path)
    else:
        read = {"tf1": tf1.read_tf1_checkpoint, "huggingface": huggingface.read_huggingface,
                "keras_hub": keras_hub.read_keras_hub}
        extra = {"task_name": task_name} if source_format in _TASK_SOURCES else {}
        weights = read[source_format](input_path, config_file=bert_config_file,
                                      vocab_file=vocab_file, do_lower_case=do_lower_case,
                                      **extra)
    logging.info("read %s (%d layers, hidden %d, heads: %s)", input_path,
                 weights.config.num_hidden_layers, weights.config.hidden_size,
                 ", ".join(weights.heads + ((f"{weights.task_config['task_name']} task head",)
                                            if weights.task_config else ())) or "none")
    if target_format == "tf1" and weights.task_config is not None:
        logging.warning("%s: the %s task head is not exported (%s has no place for it); "
                        "only the encoder is", input_path,
                        weights.task_config.get("task_name"), target_format)
    if target_format == "tf1":
        return tf1.write_tf1_checkpoint(weights, tmp_dir)
    if target_format == "huggingface":
        return huggingface.write_huggingface(weights, tmp_dir)
    if target_format == "keras_hub":
        return keras_hub.write_keras_hub(weights, tmp_dir)
    _, objects = weights_lib.build_model(weights)
    return model_dir.write_model_dir(
        tmp_dir, weights.config, objects, vocab_file=weights.vocab_file,
        do_lower_case=weights.do_lower_case, strip_accents=weights.strip_accents,
        task_config=weights.task_config)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConvertConfig(setting_fields.Settings):
    """One conversion (what the flags say); `run(config)` does it."""
    source_format: Optional[str] = setting(
        None, "Format of --input: tf1 (original google-research/bert checkpoint), "
        "huggingface (model.safetensors / pytorch_model.bin), keras_hub (a keras-hub preset "
        "directory: BertBackbone or BertTextClassifier), bert_tf (our model dir).",
        choices=SOURCE_FORMATS)
    target_format: str = setting(
        "bert_tf", "Format to write: bert_tf (model dir for --init_checkpoint), tf1 "
        "(original layout: bert_model.ckpt + bert_config.json + vocab.txt) or huggingface "
        "(config.json + model.safetensors + vocab.txt + tokenizer_config.json, for "
        "transformers' from_pretrained) or keras_hub (a preset directory for keras_hub's "
        "from_preset).", choices=TARGET_FORMATS)
    input: Optional[str] = setting(
        None, "tf1: checkpoint prefix (DIR/bert_model.ckpt) or its directory; huggingface: "
        "model directory or weights file; keras_hub: preset directory; bert_tf: model dir.")
    output_dir: Optional[str] = setting(
        None, "Directory to write (created; must be empty or absent unless --overwrite).")
    overwrite: bool = setting(
        False, "Replace an earlier output of bert_tf at --output_dir once the new one is "
        "complete (never a folder of other files, nor one that is or holds the input).")
    # The source's files and casing, overridden (not a model dir to start from).
    bert_config_file: Optional[str] = setting(
        None, "Config to use instead of the one next to --input (tf1: bert_config.json; "
        "huggingface: config.json).")
    vocab_file: Optional[str] = setting(None, "vocab.txt to use instead of the one next to "
                                        "--input.")
    do_lower_case: Optional[bool] = setting(
        None, "Record this casing instead of what the source says (tokenizer_config.json, "
        "or an `uncased_`/`cased_` directory name).")
    task_name: Optional[str] = setting(
        None, "A fine-tuned source (huggingface, keras_hub): the task its head serves (cola, "
        "sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli, conll2003, squad, squad_v2, swag), "
        "when its config does not say (squad_v2: a SQuAD 2.0 model, which may answer "
        "nothing); the output is then a fine-tuned model dir that export_model serves.")


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines this command's flags; called only when run as a program (or by tests on
    their own FlagValues), so importing `convert` never collides with other CLIs' flags.

    >>> fv = flags.FlagValues()
    >>> define_flags(fv)
    >>> _ = fv(["convert_checkpoint", "--source_format=tf1", "--input=ckpt", "--output_dir=out"])
    >>> fv.source_format, fv.target_format
    ('tf1', 'bert_tf')
    """
    ConvertConfig.define_flags(flag_values)
    flags.mark_flags_as_required(["source_format", "input", "output_dir"],
                                 flag_values=flag_values)


def run(config: ConvertConfig) -> str:
    """Runs the conversion `config` describes (`convert`); a bad input raises a
    BertTfError, impossible flag combinations a UsageError."""
    return convert(config.source_format, config.input, config.output_dir,
                   target_format=config.target_format, overwrite=config.overwrite,
                   bert_config_file=config.bert_config_file, vocab_file=config.vocab_file,
                   do_lower_case=config.do_lower_case, task_name=config.task_name)


def main(argv):
    del argv  # cli.run_main refuses positional arguments
    print(f"wrote {run(ConvertConfig.from_flags(FLAGS))}")


if __name__ == "__main__":
    cli.run_main(main, define_flags)
