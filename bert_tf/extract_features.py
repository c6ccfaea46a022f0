r"""Per-token feature vectors from chosen encoder layers (the paper's feature-based use).

    python -m bert_tf.extract_features --input_file=in.txt --output_file=out.jsonl \
        --init_checkpoint=DIR [--layers=-1,-2,-3,-4] [--concat_layers] \
        [--max_seq_length=128] [--batch_size=32]

Input as the original: one text per line, or a pair as `text_a ||| text_b`. Output as
the original: one JSON object per input line,

    {"linex_index": 0, "features": [{"token": "[CLS]", "layers": [
        {"index": -1, "values": [0.1234, ...]}, {"index": -2, "values": [...]}, ...]}, ...]}

with one entry per WordPiece token of the packed input (`[CLS] a [SEP] (b [SEP])`, a
pair truncated longest-first, a single text cut to max_seq_length - 2: the tokenizer's
`encode`, the one packing function) and values
rounded to 6 decimals. `--concat_layers` writes, per token, one entry whose `index` is
the list of layers and whose `values` are those layers concatenated in that order: the
paper's best feature-based setting with the default layers (last four, 4H values).

`--init_checkpoint=DIR` supplies config, vocab and casing (from convert_checkpoint,
pretrain or finetune); `--bert_config_file`, `--vocab_file`, `--do_lower_case` override.
A model pretrained on text pre-split by --pre_tokenizer=kiwi gets --input_file split the
same way (the tokens written are those of the split text).
The original's TPU flags are accepted as they are: `--use_tpu` runs the encoder on the TPU
named by `--tpu_name` / `--master` (default: a TPU VM's own), over `--num_tpu_cores`;
`--use_one_hot_embeddings` is accepted (the embedding gather is used on every device).

Library use (no flags):

>>> import tempfile, os
>>> d = tempfile.mkdtemp(); p = os.path.join(d, "in.txt")
>>> _ = open(p, "w").write("hello world\nhi ||| there\n")
>>> [(e.unique_id, e.text_a, e.text_b) for e in read_examples(p)]
[(0, 'hello world', None), (1, 'hi', 'there')]
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from typing import Iterable, Iterator, List, Optional, Sequence

from absl import flags, logging

from bert_tf.app import cli  # first: quiets TensorFlow before anything loads it
from bert_tf.app import setting_fields, settings
from bert_tf.app.setting_fields import setting
from bert_tf.core import output_guard
from bert_tf.core.errors import UsageError

FLAGS = flags.FLAGS

_PAIR = re.compile(r"^(.*) \|\|\| (.*)$")


@dataclasses.dataclass(frozen=True)
class InputExample:
    unique_id: int
    text_a: str
    text_b: Optional[str] = None


def read_examples(input_file: str) -> List[InputExample]:
    """One example per line (UTF-8); `A ||| B` is a pair. Unique ids count lines from 0."""
    import tensorflow as tf  # gs:// inputs too; not loaded by --help (0.5 s, not 9 s)

    examples = []
    with tf.io.gfile.GFile(input_file, "rb") as f:
        raw_lines = f.read().split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()  # the newline that ends the last line is not an extra (empty) line
    for unique_id, raw in enumerate(raw_lines):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            # The original read with decode("utf-8", "ignore"): keep the line, say where.
            logging.warning("%s:%d: not valid UTF-8 (byte %d: %s); invalid bytes dropped",
                            input_file, unique_id + 1, e.start, e.reason)
            line = raw.decode("utf-8", "ignore")
        line = line.strip()
        match = _PAIR.match(line)
        if match:
            examples.append(InputExample(unique_id, match.group(1), match.group(2)))
        else:
            examples.append(InputExample(unique_id, line))
    return examples


def parse_layers(layers: str, num_hidden_layers: int) -> List[int]:
    """`"-1,-2"` -> [-1, -2], checked against the model's depth.

    >>> parse_layers("-1, 0", 2)
    [-1, 0]
    """
    try:
        indexes = [int(x) for x in layers.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--layers={layers!r}: expected comma-separated integers such as "
                         f"-1,-2,-3,-4") from None
    if not indexes:
        raise UsageError("--layers is empty; name at least one layer (e.g. -1)")
    for index in indexes:
        if not -num_hidden_layers <= index < num_hidden_layers:
            raise UsageError(f"--layers: layer {index} does not exist in a model with "
                             f"{num_hidden_layers} layers (use {-num_hidden_layers}..."
                             f"{num_hidden_layers - 1})")
    return indexes


def extract(encoder, tokenizer, examples: Sequence[InputExample], layer_indexes: Sequence[int],
            max_seq_length: int = 128, batch_size: int = 32,
            concat_layers: bool = False, strategy=None) -> Iterator[dict]:
    """Yields one output object (as the JSON lines hold them) per example, in order.

    The encoder runs on the training loop's inference loop (`InferenceLoop.predict`):
    with a `strategy` (the encoder built in its scope, e.g. a TPUStrategy), batches have
    a static size divisible by the replicas and are split among them.
    """
    import numpy as np  # as TensorFlow: not loaded by --help
    import tensorflow as tf  # not loaded by --help (0.5 s, not 9 s)

    if max_seq_length > encoder.config.max_position_embeddings:
        raise ValueError(f"--max_seq_length={max_seq_length} exceeds the model's "
                         f"max_position_embeddings={encoder.config.max_position_embeddings}")
    if max_seq_length < 3:
        raise ValueError(f"--max_seq_length={max_seq_length} cannot hold [CLS] and [SEP]")
    layer_indexes = list(layer_indexes)
    from bert_tf.training.inference import InferenceLoop  # TensorFlow: not for --help

    def layer_outputs(inputs):
        outputs = encoder(inputs, training=False)["encoder_outputs"]
        return {str(i): tf.cast(outputs[i], tf.float32) for i in layer_indexes}

    inference = InferenceLoop(layer_outputs, strategy)
    # A few batches per call of the shared loop: its per-call set-up is amortised and
    # the per-token outputs held at once stay bounded.
    chunk_size = batch_size * 8
    for start in range(0, len(examples), chunk_size):
        chunk = examples[start:start + chunk_size]
        inputs = _packed_inputs(tokenizer, chunk, max_seq_length)
        values = inference.predict(inputs, batch_size)
        values = [values[str(i)] for i in layer_indexes]
        lengths = inputs["input_mask"].sum(axis=1)
        for row, example in enumerate(chunk):
            tokens = []
            for i in range(lengths[row]):
                if concat_layers:
                    vector = np.concatenate([v[row, i] for v in values])
                    layers = [{"index": layer_indexes, "values": _rounded(vector)}]
                else:
                    layers = [{"index": index, "values": _rounded(v[row, i])}
                              for index, v in zip(layer_indexes, values)]
                tokens.append({"token": tokenizer.id_to_token(
                    int(inputs["input_word_ids"][row, i])), "layers": layers})
            yield {"linex_index": example.unique_id, "features": tokens}


def _packed_inputs(tokenizer, examples: Sequence[InputExample], max_seq_length: int):
    """Model inputs (numpy int32) of `[CLS] a [SEP] (b [SEP])` per example, packed and
    truncated by the tokenizer's one packing function (`BertTokenizer.encode`)."""
    import numpy as np  # as TensorFlow: not loaded by --help

    inputs = {name: np.zeros((len(examples), max_seq_length), np.int32)
              for name in ("input_word_ids", "input_mask", "input_type_ids")}
    for has_b in (False, True):
        rows = [i for i, e in enumerate(examples) if bool(e.text_b) == has_b]
        if not rows:
            continue
        packed = tokenizer.encode([examples[i].text_a for i in rows],
                                  [examples[i].text_b for i in rows] if has_b else None,
                                  max_seq_length=max_seq_length)
        for name, value in packed.items():
            inputs[name][rows] = np.asarray(value)
    return inputs


def _rounded(vector) -> List[float]:
    return [round(float(x), 6) for x in vector]


def write_jsonl(path: str, records: Iterable[dict]) -> int:
    """Writes one JSON object per line as extract_features' output; returns how many."""
    import tensorflow as tf  # not loaded by --help (0.5 s, not 9 s)

    count = 0
    with output_guard.output_file(path, "extract_features") as tmp, \
            tf.io.gfile.GFile(tmp, "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
            count += 1
    return count


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExtractConfig(settings.ModelDirSettings, settings.OriginalTpuSettings):
    """One extraction (what the flags say); `run(config)` does it."""
    input_file: Optional[str] = setting(None, "Text file: one sentence, or `A ||| B`, per "
                                        "line.")
    output_file: Optional[str] = setting(None, "JSON lines to write (one object per input "
                                         "line).")
    layers: str = setting("-1,-2,-3,-4", "Comma-separated encoder layers to output "
                          "(negative counts from the last).")
    concat_layers: bool = setting(False, "Write one concatenation of --layers per token (the "
                                  "paper's best feature-based setting with the last four).")
    max_seq_length: int = setting(128, "Tokens per input after WordPiece, including "
                                  "[CLS]/[SEP]; longer inputs are truncated.", lower=3)
    batch_size: int = setting(32, "Inputs per forward pass.", lower=1)
    use_one_hot_embeddings: bool = setting(False, "Original flag, accepted: the embedding "
                                           "lookup is a gather on every device.")

    @classmethod
    def from_flags(cls, flag_values: flags.FlagValues = FLAGS) -> "ExtractConfig":
        setting_fields.require(flag_values, ["input_file", "output_file", "init_checkpoint"])
        return super().from_flags(flag_values)


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines this command's flags (`ExtractConfig`'s); called only when run as a program
    (or by tests on their own FlagValues), so importing this module never collides with
    other CLIs.

    >>> fv = flags.FlagValues()
    >>> define_flags(fv)
    >>> _ = fv(["extract_features", "--input_file=a", "--output_file=b",
    ...         "--init_checkpoint=c"])
    >>> fv.layers, fv.max_seq_length, fv.batch_size, fv.concat_layers
    ('-1,-2,-3,-4', 128, 32, False)
    """
    ExtractConfig.define_flags(flag_values)


def run(config: ExtractConfig) -> int:
    """Runs the extraction `config` describes; returns the number of lines written."""
    with output_guard.locked(config.output_file, flag="--output_file"):
        return _run(config)


def _run(config: ExtractConfig) -> int:
    from bert_tf.core import output_guard
    from bert_tf.model import model_dir
    from bert_tf.tasks.pre_split import host_tokenizer
    from bert_tf.training import strategy as strategy_lib

    # Written only where nothing is, or over an earlier extract_features output.
    output_guard.check_output_file(
        config.output_file, "extract_features", flag="--output_file",
        inputs=[config.input_file, config.init_checkpoint, config.vocab_file,
                config.bert_config_file])
    resolved = config.resolve().require(config=True, vocab=True)
    layer_indexes = parse_layers(config.layers, resolved.config.num_hidden_layers)
    if config.max_seq_length < 3:
        raise UsageError(f"--max_seq_length={config.max_seq_length} cannot hold [CLS] "
                         f"and [SEP]")
    resolved.check_max_seq_length(config.max_seq_length)
    strategy = strategy_lib.original_tpu_strategy(config)
    with strategy.scope() if strategy else contextlib.nullcontext():
        encoder = model_dir.load_encoder(resolved)
    # --input_file as written; a model pretrained on pre-split text has it split the same way.
    tokenizer = host_tokenizer(resolved)
    examples = read_examples(config.input_file)
    count = write_jsonl(config.output_file, extract(
        encoder, tokenizer, examples, layer_indexes, max_seq_length=config.max_seq_length,
        batch_size=config.batch_size, concat_layers=config.concat_layers, strategy=strategy))
    logging.info("wrote %d lines of features (layers %s%s) to %s", count, layer_indexes,
                 ", concatenated" if config.concat_layers else "", config.output_file)
    return count


def main(argv):
    del argv  # cli.run_main refuses positional arguments
    run(ExtractConfig.from_flags(FLAGS))  # BertTfError: one line from cli.run_main


if __name__ == "__main__":
    cli.run_main(main, define_flags)
