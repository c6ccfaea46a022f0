"""The raw-text OpenVINO IR: our tokenizer as openvino-tokenizers ops in front of the ids IR
(`export_model --format=openvino --text_signatures`).

`text_encoder(tokenizer, max_seq_length, text_inputs)` is an `ov.Model` from string inputs
(`text_inputs`: ("text",) or ("text", "text_b")) to the int32 `input_word_ids`,
`input_mask`, `input_type_ids` that `tokenizer.encode(a, b, max_seq_length)` gives, cut
to the longest row as the SavedModel's raw-text signatures cut them.
`raw_text_model(ids_model, tokenizer, max_seq_length, text_inputs)` connects it to an ids
IR: the SavedModel's raw-text signature as one IR (its outputs, by name; with
`with_ids=True` also the ids, as the encoder's `serving_text`).

How. openvino-tokenizers converts a Hugging Face `BertTokenizerFast` (transformers'
`BertTokenizer`) built from the tokenizer's WordPiece vocab and text settings; its
WordPiece, truncation, [CLS]/[SEP] packing and padding are kept. Its conversion differs
from the original BERT tokenizer (ours) in these points, so they are replaced:
  * it splits special tokens typed in the text ("[CLS]" becomes the [CLS] id; the original
    reads "[", "cls", "]"): no special-token split;
  * its text cleanup keeps U+FFFD (the original drops it, as NUL and controls);
  * it isolates `\\p{Han}` characters, not the original's CJK ranges
    (`text_rules.CJK_RANGES`), so e.g. U+3005 differs;
  * it case-folds (ς and final Σ to σ, U+0345 to ι) after stripping accents, while the
    original lower-cases (`str.lower`, final Σ to ς) and then strips: a lower-case map
    made from Python's `str.lower` (a sentencepiece charsmap) and a final-sigma rule;
  * it strips accents whenever it lower-cases (strip_accents=False is ignored), and never
    NFC-normalizes (ours does in that mode, `text_rules.text_mode`): the mode's own steps;
  * it ignores WordPiece's max_input_chars_per_word (the original's 200 characters; a
    limit of 100 bytes instead): words longer than the tokenizer's limit become [UNK]
    before WordPiece, whose byte limit is raised to fit the longest allowed word;
  * a pair too long for max_seq_length: it leaves the odd token of the budget to the longer
    text, the original to the first: the original's truncation, as OpenVINO ops.
Whitespace and punctuation splitting stay as converted (they equal the original's).
What still differs, measured on every code point (tests/test_export_openvino.py): the
Unicode version (openvino-tokenizers' regular expressions know a few characters Python
3.11's Unicode 14 does not) and canonical reordering of combining marks, which
openvino-tokenizers' NFD / NFC skip: only non-"Mn" marks in stripping modes (musical
symbols U+1D165...), out-of-order marks in the NFC mode.

The IR's tokenizer ops come from the openvino_tokenizers extension: a process that loads
it must `import openvino_tokenizers` first (OpenVINO Model Server bundles it).
"""

from __future__ import annotations

import functools
from typing import Sequence

from bert_tf.export.export_onnx import require
from bert_tf.text import text_rules

#: The ids IR's inputs, by the names the converted tokenizer gives its outputs.
TOKENIZER_OUTPUTS = {"input_ids": "input_word_ids", "attention_mask": "input_mask",
                     "token_type_ids": "input_type_ids"}
FINAL_SIGMA = "\u03c2"
# Σ preceded by a cased letter (case-ignorable ones between) and not followed by one:
# Python's str.lower rule (Unicode's Final_Sigma), as a PCRE2 replacement.
_FINAL_SIGMA_RULE = r"(\p{Cased}\p{Case_Ignorable}*)\x{03A3}(?!\p{Case_Ignorable}*\p{Cased})"
# The original's cleanup: controls ("Cc" but tab, newline, return; "Cf"), NUL and U+FFFD.
_DROPPED = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F\p{Cf}\x{FFFD}]"


def _require():
    require("openvino", "openvino==2026.4.1")
    require("openvino_tokenizers", "openvino-tokenizers==2026.4.1")
    require("sentencepiece", "sentencepiece==0.2.3")
    require("transformers", "transformers==5.23.0")


def text_encoder(tokenizer, max_seq_length: int, text_inputs: Sequence[str] = ("text",)):
    """The tokenizer (a `BertTokenizer`) as an ov.Model: see the module docstring."""
    _require()
    import openvino as ov  # optional (--format=openvino)
    from openvino_tokenizers import tokenizer_pipeline as steps
    from openvino_tokenizers.hf_parser import TransformersTokenizerPipelineParser
    from openvino_tokenizers.tokenizer_transformations import add_second_input
    from openvino_tokenizers.utils import (TokenzierConversionParams, change_outputs_type,
                                           update_rt_info_with_processor_template)
    from transformers import BertTokenizerFast

    mode = text_rules.text_mode(tokenizer.do_lower_case, tokenizer.strip_accents)
    hf = BertTokenizerFast(vocab=tokenizer.wordpiece_vocab, do_lower_case=mode.lower,
                           strip_accents=mode.strip, tokenize_chinese_chars=True,
                           model_max_length=int(max_seq_length))
    # The original's limit (Hugging Face's default is 100); the conversion ignores it (a
    # byte limit instead), hence long_words_unknown below.
    hf.backend_tokenizer.model.max_input_chars_per_word = tokenizer.max_input_chars_per_word
    pipeline = TransformersTokenizerPipelineParser(hf, TokenzierConversionParams(
        max_length=int(max_seq_length), truncation=True)).parse()
    keep_in_place, no_special_tokens, long_words_unknown = _step_classes()
    kept = []
    for step in pipeline.steps:
        if isinstance(step, (steps.SpecialTokensSplit, steps.NormalizationStep)):
            continue  # replaced by _normalization
        if isinstance(step, steps.WordPieceTokenizationStep):
            kept.append(long_words_unknown(tokenizer.max_input_chars_per_word))
            step.max_bytes_per_word = 4 * tokenizer.max_input_chars_per_word + 8
        kept.append(step)
    pipeline.steps = []
    pipeline.add_steps([no_special_tokens()] + _normalization(mode, keep_in_place) + kept)
    model = pipeline.get_tokenizer_ov_subgraph()
    if len(text_inputs) == 2:
        update_rt_info_with_processor_template(model, hf)  # what add_second_input reads
        add_second_input(model)
        _truncate_pairs_as_the_original(model)
    _drop_truncation_state(model)
    if len(model.outputs) != 3:
        raise RuntimeError(f"openvino-tokenizers gave {len(model.outputs)} outputs, not 3")
    for output, name in zip(model.outputs, ("input_ids", "token_type_ids", "attention_mask")):
        output.get_tensor().set_names({TOKENIZER_OUTPUTS[name]})
    for parameter, name in zip(model.get_parameters(), text_inputs):
        parameter.set_friendly_name(name)
        parameter.output(0).get_tensor().set_names({name})
    return change_outputs_type(model, ov.Type.i32)


def raw_text_model(ids_model, tokenizer, max_seq_length: int,
                   text_inputs: Sequence[str] = ("text",), with_ids: bool = False):
    """`ids_model` (an ov.Model on input_word_ids, input_mask, input_type_ids; cloned, not
    changed) behind `text_encoder`: string inputs `text_inputs`, the ids model's outputs
    (and with `with_ids` the ids themselves, as the encoder's raw-text signature)."""
    import openvino as ov  # optional (--format=openvino)

    encoder = text_encoder(tokenizer, max_seq_length, text_inputs)
    model = ids_model.clone()
    for output in encoder.outputs:
        name = output.get_any_name()
        parameter = model.input(name).get_node()
        produced = output.get_node().input_value(0)  # what the Result returns
        for target in parameter.output(0).get_target_inputs():
            target.replace_source_output(produced)
    outputs = list(model.outputs)
    if with_ids:
        for output in encoder.outputs:
            result = ov.opset15.result(output.get_node().input_value(0))
            result.output(0).get_tensor().set_names({output.get_any_name()})
            outputs.append(result.output(0))
    text = ov.Model(outputs, encoder.get_parameters(), "bert_tf_raw_text")
    text.validate_nodes_and_infer_types()
    return text


# ------------------------------------------------------------------ pipeline steps

@functools.lru_cache(maxsize=1)
def _lower_case_charsmap() -> bytes:
    """Python's `str.lower` of every code point it changes, as a sentencepiece precompiled
    charsmap (what openvino-tokenizers' CharsMapNormalization takes)."""
    import sentencepiece  # optional (--format=openvino --text_signatures)

    rules = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        char = chr(cp)
        if char.lower() != char:
            rules.append((char, char.lower()))
    normalizer = sentencepiece.SentencePieceNormalizer(
        norm_map=rules, add_dummy_prefix=False, escape_whitespaces=False,
        remove_extra_whitespaces=False)
    return _proto_bytes_field(normalizer.serialized_normalizer_spec(), 2)


def _proto_bytes_field(message: bytes, number: int) -> bytes:
    """Field `number` (length-delimited) of a serialized protobuf message (here
    NormalizerSpec.precompiled_charsmap: sentencepiece's generated module needs another
    protobuf runtime than the one installed).

    >>> _proto_bytes_field(bytes([0x0a, 1, 65, 0x12, 2, 66, 67, 0x18, 1]), 2)
    b'BC'
    """
    def varint(i):
        value, shift = 0, 0
        while True:
            byte = message[i]
            value |= (byte & 0x7F) << shift
            shift += 7
            i += 1
            if byte < 0x80:
                return value, i

    i = 0
    while i < len(message):
        key, i = varint(i)
        if key & 7 == 2:
            length, i = varint(i)
            if key >> 3 == number:
                return message[i:i + length]
            i += length
        elif key & 7 == 0:
            _, i = varint(i)
        else:
            raise ValueError(f"unexpected protobuf wire type {key & 7}")
    raise ValueError(f"no field {number}")


def _normalization(mode, keep_in_place) -> list:
    """The original's text cleanup and per-word rules (`mode`: a `text_rules.TextMode`),
    before openvino-tokenizers' whitespace and punctuation split (`keep_in_place`: the
    wrapper that stops the pipeline from merging unicode forms and charsmaps)."""
    from openvino_tokenizers import tokenizer_pipeline as steps

    cjk = "".join(f"\\x{{{first:X}}}-\\x{{{last:X}}}" for first, last in text_rules.CJK_RANGES)
    out = [steps.RegexNormalizationStep(_DROPPED, ""),
           steps.RegexNormalizationStep(r"\s", " ")]
    if mode.nfc:
        out.append(keep_in_place(steps.NormalizeUnicode("NFC")))
    out.append(steps.RegexNormalizationStep(f"([{cjk}])", " $1 "))
    if mode.lower:
        out.append(steps.RegexNormalizationStep(_FINAL_SIGMA_RULE, "$1" + FINAL_SIGMA))
        out.append(keep_in_place(steps.CharsmapStep(charsmap=_lower_case_charsmap(),
                                            remove_extra_whitespaces=False)))
    if mode.strip:
        out += [keep_in_place(steps.NormalizeUnicode("NFD")),
                steps.RegexNormalizationStep(r"\p{Mn}", "")]
    return out


@functools.lru_cache(maxsize=1)
def _step_classes():
    """Pipeline steps of our own (classes over openvino-tokenizers', made once it is
    imported: it is optional)."""
    from openvino_tokenizers import tokenizer_pipeline as steps

    class Step(steps.NormalizationStep):
        """A normalization step the pipeline keeps where it is (it merges every
        NormalizeUnicode and CharsmapStep into one, at the first one's place)."""

        def __init__(self, step):
            self.step = step

        def get_ov_subgraph(self, input_nodes):
            return self.step.get_ov_subgraph(input_nodes)

    class NoSpecialTokens(steps.SpecialTokensSplit):
        """The first step: drops bytes that are not valid UTF-8 (as ours; the regular
        expressions after it would crash the runtime on them); no special-token split,
        only the per-string "skip" flags the later steps take (all False)."""

        def get_ov_subgraph(self, input_nodes):
            from openvino import opset15 as ops
            from openvino_tokenizers.constants import UTF8ReplaceMode

            strings = steps.UTF8ValidateStep(UTF8ReplaceMode.IGNORE).get_ov_subgraph(
                list(input_nodes[2:5]))
            skips = ops.broadcast(ops.constant(False, dtype=bool), ops.shape_of(strings[0]))
            return list(input_nodes[:2]) + list(strings) + skips.outputs()

    class LongWordsUnknown(steps.PreTokenizatinStep):
        """Words of more than `max_chars` code points become "[UNK]" (the original's
        max_input_chars_per_word), then WordPiece maps that to [UNK]'s id."""

        def __init__(self, max_chars):
            self.max_chars = int(max_chars)

        def get_ov_subgraph(self, input_nodes):
            # (ragged begins, ends; word begins, ends, bytes; skips): the words' strings.
            rule = steps.RegexNormalizationStep(f"^.{{{self.max_chars + 1},}}$", "[UNK]",
                                                global_replace=False)
            words = rule.get_ov_subgraph(list(input_nodes[2:5]))
            return list(input_nodes[:2]) + list(words) + list(input_nodes[5:])

    return Step, NoSpecialTokens, LongWordsUnknown


def _truncate_pairs_as_the_original(model) -> None:
    """Replaces openvino-tokenizers' pair truncation (Hugging Face's longest_first: the
    longer text keeps the odd token of the budget) by the original's (drop the last token
    of the longer text, of the second on a tie: the first keeps the odd token)."""
    from openvino import opset15 as ops

    truncate = next(op for op in model.get_ordered_ops() if op.get_type_name() == "Truncate")
    begins_a, ends_a, data_a, begins_b, ends_b, data_b, budget = truncate.input_values()[:7]
    length_a, length_b = ops.subtract(ends_a, begins_a), ops.subtract(ends_b, begins_b)
    budget = ops.convert(budget, length_a.get_element_type())
    half_b = ops.divide(budget, ops.constant(2, length_a.get_element_type()))  # >= 0: floor
    half_a = ops.subtract(budget, half_b)
    fits = ops.less_equal(ops.add(length_a, length_b), budget)
    b_short = ops.less_equal(length_b, half_b)
    a_short = ops.less_equal(length_a, half_a)
    keep_a = ops.select(fits, length_a, ops.select(b_short, ops.subtract(budget, length_b),
                                                   ops.select(a_short, length_a, half_a)))
    keep_b = ops.select(fits, length_b, ops.select(b_short, length_b, ops.select(
        a_short, ops.subtract(budget, length_a), half_b)))
    replacements = [begins_a, ops.add(begins_a, keep_a).output(0), data_a,
                    begins_b, ops.add(begins_b, keep_b).output(0), data_b]
    for output, replacement in zip(truncate.outputs(), replacements):
        for target in output.get_target_inputs():
            target.replace_source_output(replacement)
    model.validate_nodes_and_infer_types()


def _drop_truncation_state(model) -> None:
    """openvino-tokenizers keeps "truncate or not" in a state variable (ReadValue/Assign,
    default: truncate); an IR with state is a stateful model to OVMS. The constant it
    starts from replaces it."""
    for op in model.get_ordered_ops():
        if op.get_type_name() == "ReadValue":
            for target in op.output(0).get_target_inputs():
                target.replace_source_output(op.input_value(0))
    for sink in list(model.get_sinks()):
        model.remove_sink(sink)
    model.validate_nodes_and_infer_types()
