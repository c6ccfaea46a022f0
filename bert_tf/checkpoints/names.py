"""One variable under four names: ours, the original TF1 checkpoint's, Hugging Face's and
keras-hub's.

The name mappings are plain data (`ENCODER_MAPPINGS`, `LAYER_MAPPINGS`,
`MASKED_LM_MAPPINGS`, `NEXT_SENTENCE_MAPPINGS`, `TASK_HEAD_MAPPINGS`), read in both
directions by every reader and writer (`checkpoints.tf1`, `checkpoints.huggingface`,
`checkpoints.keras_hub`).
Our kernels are [in, out] like TF1's; Hugging Face `Linear` weights are [out, in] and are
transposed, as is TF1's `cls/seq_relationship/output_weights` ([2, H]); keras-hub's
attention kernels are [H, heads, head_size] / [heads, head_size, H], ours reshaped. TF-free.

>>> [m.hf for m in mappings_for(1) if m.ours == "encoder/layer_0/output_dense/kernel"]
['encoder.layer.0.output.dense.weight']
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, Iterable, List, Tuple

from bert_tf.core.constants import MASKED_LM, NEXT_SENTENCE, PRETRAINING_HEADS
from bert_tf.model.config import BertConfig


@dataclasses.dataclass(frozen=True)
class WeightMapping:
    """One variable under its three names; `{i}` stands for the layer index.

    `tf1_transpose` / `hf_transpose`: the source holds the transpose of ours.
    `keras_hub`: the variable's `path` in keras-hub's BertBackbone / BertTextClassifier
    ("" where keras-hub has no such variable); its value is ours reshaped.

    >>> m = LAYER_MAPPINGS[0].for_layer(3)
    >>> m.ours, m.tf1, m.hf
    ('encoder/layer_3/attention/query/kernel', 'bert/encoder/layer_3/attention/self/query/kernel', 'encoder.layer.3.attention.self.query.weight')
    """

    ours: str
    tf1: str
    hf: str
    tf1_transpose: bool = False
    hf_transpose: bool = False
    keras_hub: str = ""

    def for_layer(self, i: int) -> "WeightMapping":
        return dataclasses.replace(self, ours=self.ours.format(i=i), tf1=self.tf1.format(i=i),
                                   hf=self.hf.format(i=i), keras_hub=self.keras_hub.format(i=i))


def _dense(ours: str, tf1: str, hf: str, kh: str = "") -> List[WeightMapping]:
    """Kernel + bias of a dense layer (HF stores the kernel as [out, in])."""
    return [WeightMapping(f"{ours}/kernel", f"{tf1}/kernel", f"{hf}.weight", hf_transpose=True,
                          keras_hub=f"{kh}/kernel" if kh else ""),
            WeightMapping(f"{ours}/bias", f"{tf1}/bias", f"{hf}.bias",
                          keras_hub=f"{kh}/bias" if kh else "")]


def _norm(ours: str, tf1: str, hf: str, kh: str = "") -> List[WeightMapping]:
    """gamma + beta of a LayerNorm (HF: weight + bias)."""
    return [WeightMapping(f"{ours}/gamma", f"{tf1}/gamma", f"{hf}.weight",
                          keras_hub=f"{kh}/gamma" if kh else ""),
            WeightMapping(f"{ours}/beta", f"{tf1}/beta", f"{hf}.bias",
                          keras_hub=f"{kh}/beta" if kh else "")]


# HF names here are relative to the encoder (`bert.` is prepended for BertFor* models).
ENCODER_MAPPINGS: Tuple[WeightMapping, ...] = tuple(
    [WeightMapping(f"encoder/embeddings/{n}", f"bert/embeddings/{n}", f"embeddings.{n}.weight",
                   keras_hub=f"{kh}/embeddings")
     for n, kh in (("word_embeddings", "token_embedding"),
                   ("position_embeddings", "position_embedding"),
                   ("token_type_embeddings", "segment_embedding"))]
    + _norm("encoder/embeddings/layer_norm", "bert/embeddings/LayerNorm", "embeddings.LayerNorm",
            "embeddings_layer_norm")
    + _dense("encoder/pooler/dense", "bert/pooler/dense", "pooler.dense", "pooled_dense"))

LAYER_MAPPINGS: Tuple[WeightMapping, ...] = tuple(
    [m for part in ("query", "key", "value")
     for m in _dense(f"encoder/layer_{{i}}/attention/{part}",
                     f"bert/encoder/layer_{{i}}/attention/self/{part}",
                     f"encoder.layer.{{i}}.attention.self.{part}",
                     f"transformer_layer_{{i}}/self_attention_layer/{part}")]
    + _dense("encoder/layer_{i}/attention/output_dense",
             "bert/encoder/layer_{i}/attention/output/dense",
             "encoder.layer.{i}.attention.output.dense",
             "transformer_layer_{i}/self_attention_layer/attention_output")
    + _norm("encoder/layer_{i}/attention_layer_norm",
            "bert/encoder/layer_{i}/attention/output/LayerNorm",
            "encoder.layer.{i}.attention.output.LayerNorm",
            "transformer_layer_{i}/self_attention_layer_norm")
    + _dense("encoder/layer_{i}/intermediate", "bert/encoder/layer_{i}/intermediate/dense",
             "encoder.layer.{i}.intermediate.dense",
             "transformer_layer_{i}/feedforward_intermediate_dense")
    + _dense("encoder/layer_{i}/output_dense", "bert/encoder/layer_{i}/output/dense",
             "encoder.layer.{i}.output.dense", "transformer_layer_{i}/feedforward_output_dense")
    + _norm("encoder/layer_{i}/output_layer_norm", "bert/encoder/layer_{i}/output/LayerNorm",
            "encoder.layer.{i}.output.LayerNorm", "transformer_layer_{i}/feedforward_layer_norm"))

MASKED_LM_MAPPINGS: Tuple[WeightMapping, ...] = tuple(
    _dense("masked_lm/transform", "cls/predictions/transform/dense",
           "cls.predictions.transform.dense")
    + _norm("masked_lm/layer_norm", "cls/predictions/transform/LayerNorm",
            "cls.predictions.transform.LayerNorm")
    + [WeightMapping("masked_lm/output_bias", "cls/predictions/output_bias",
                     "cls.predictions.bias")])

NEXT_SENTENCE_MAPPINGS: Tuple[WeightMapping, ...] = (
    WeightMapping("next_sentence/dense/kernel", "cls/seq_relationship/output_weights",
                  "cls.seq_relationship.weight", tf1_transpose=True, hf_transpose=True),
    WeightMapping("next_sentence/dense/bias", "cls/seq_relationship/output_bias",
                  "cls.seq_relationship.bias"),
)

HEAD_MAPPINGS = {MASKED_LM: MASKED_LM_MAPPINGS, NEXT_SENTENCE: NEXT_SENTENCE_MAPPINGS}
# A fine-tuned model's `task_head` (bert_tf.tasks), by the transformers class that has the
# same head; TF1 names are those of the original run_classifier / run_squad, keras-hub's
# those of BertTextClassifier (sequence classification only).
_CLASSIFIER_MAPPINGS: Tuple[WeightMapping, ...] = (
    WeightMapping("task_head/dense/kernel", "output_weights", "classifier.weight",
                  tf1_transpose=True, hf_transpose=True, keras_hub="logits/kernel"),
    WeightMapping("task_head/dense/bias", "output_bias", "classifier.bias",
                  keras_hub="logits/bias"))
TASK_HEAD_MAPPINGS: Dict[str, Tuple[WeightMapping, ...]] = {
    "BertForSequenceClassification": _CLASSIFIER_MAPPINGS,
    "BertForTokenClassification": _CLASSIFIER_MAPPINGS,
    "BertForMultipleChoice": _CLASSIFIER_MAPPINGS,
    "BertForQuestionAnswering": (
        WeightMapping("task_head/dense/kernel", "cls/squad/output_weights", "qa_outputs.weight",
                      tf1_transpose=True, hf_transpose=True),
        WeightMapping("task_head/dense/bias", "cls/squad/output_bias", "qa_outputs.bias")),
}
# HF names that sit beside `bert.` rather than under it (heads of BertFor* classes).
_HF_HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.")

POOLER = ("encoder/pooler/dense/kernel", "encoder/pooler/dense/bias")
# Other names the same HF weight has had (old pytorch-pretrained-bert LayerNorm names;
# the MLM bias duplicated on the decoder).
_HF_ALTERNATIVES = {".weight": ".gamma", ".bias": ".beta"}


def mappings_for(num_layers: int, heads: Iterable[str] = ()) -> List[WeightMapping]:
    """All mappings of a model with `num_layers` layers and the given heads.

    >>> len(mappings_for(2)), len(mappings_for(2, PRETRAINING_HEADS))
    (39, 46)
    """
    result = list(ENCODER_MAPPINGS)
    for i in range(num_layers):
        result += [m.for_layer(i) for m in LAYER_MAPPINGS]
    for head in heads:
        result += list(HEAD_MAPPINGS[head])
    return result


def expected_shapes(config: BertConfig,
                    heads: Iterable[str] = PRETRAINING_HEADS) -> Dict[str, tuple]:
    """Our variable name -> the shape `config` gives it (kernels [in, out]).

    >>> expected_shapes(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
    ...                            intermediate_size=16))["encoder/layer_0/output_dense/kernel"]
    (16, 8)
    """
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    shapes = {}
    for m in mappings_for(config.num_hidden_layers, heads):
        last = m.ours.split("/")[-1]
        if re.search(r"^encoder/layer_\d+/intermediate/", m.ours):
            kernel = (h, i)
        elif re.search(r"^encoder/layer_\d+/output_dense/", m.ours):
            kernel = (i, h)
        else:
            kernel = (h, h)
        if m.ours.startswith("encoder/embeddings/") and last.endswith("_embeddings"):
            rows = {"word_embeddings": v, "position_embeddings": config.max_position_embeddings,
                    "token_type_embeddings": config.type_vocab_size}[last]
            shapes[m.ours] = (rows, h)
        elif m.ours == "masked_lm/output_bias":
            shapes[m.ours] = (v,)
        elif m.ours.startswith("next_sentence/"):
            shapes[m.ours] = (h, 2) if last == "kernel" else (2,)
        elif last == "kernel":
            shapes[m.ours] = kernel
        elif last == "bias":
            shapes[m.ours] = (kernel[1],)
        else:  # LayerNorm gamma / beta
            shapes[m.ours] = (h,)
    return shapes


def hf_name(m: WeightMapping, prefix: str) -> str:
    """A mapping's HF name in a model whose encoder is under `prefix` (`bert.` or ``).

    >>> hf_name(NEXT_SENTENCE_MAPPINGS[1], "bert."), hf_name(ENCODER_MAPPINGS[0], "bert.")
    ('cls.seq_relationship.bias', 'bert.embeddings.word_embeddings.weight')
    """
    return m.hf if m.hf.startswith(_HF_HEAD_PREFIXES) else prefix + m.hf


def hf_names(m: WeightMapping, prefix: str) -> List[str]:
    """The names a mapping's weight may have in HF weights, preferred first.

    >>> hf_names(LAYER_MAPPINGS[8].for_layer(0), "")
    ['encoder.layer.0.attention.output.LayerNorm.weight', 'encoder.layer.0.attention.output.LayerNorm.gamma']
    """
    base = hf_name(m, prefix)
    names = [base] + [base[: -len(new)] + old for new, old in _HF_ALTERNATIVES.items()
                      if "LayerNorm" in base and base.endswith(new)]
    if m.ours == "masked_lm/output_bias":
        names.append("cls.predictions.decoder.bias")
    return names

