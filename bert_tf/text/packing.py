"""Packing: `[CLS] a [SEP] (b [SEP])`, truncated as the original, in the graph.

`pack_inputs` is the one packing function: `BertTokenizer.encode` (so the GLUE/SWAG
features and the SavedModel raw-text signatures) and the SQuAD serving windows use it.
A pair longer than fits is truncated as the original `_truncate_seq_pair`: repeatedly
drop the last token of the currently longer segment (B on ties); a single text is cut
from the end. Zero padded; the keys are the model inputs (`constants.MODEL_INPUTS`).

>>> import tensorflow as tf
>>> a = tf.ragged.constant([[7, 8, 9], [7]], tf.int64)
>>> b = tf.ragged.constant([[5], [5, 6]], tf.int64)
>>> packed = pack_inputs(a, b, 6, cls_id=2, sep_id=3)
>>> packed["input_word_ids"].numpy().tolist()
[[2, 7, 8, 3, 5, 3], [2, 7, 3, 5, 6, 3]]
>>> packed["input_type_ids"].numpy().tolist()
[[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1]]
>>> pack_inputs(a, None, 4, cls_id=2, sep_id=3)["input_word_ids"].numpy().tolist()
[[2, 7, 8, 3], [2, 7, 3, 0]]
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

from bert_tf.core import constants


def truncated_pair_lengths(len_a, len_b, budget):
    """Lengths the original `_truncate_seq_pair` leaves (pop from the longer, B on ties)."""
    len_a = tf.convert_to_tensor(len_a)
    len_b = tf.convert_to_tensor(len_b, dtype=len_a.dtype)
    budget = tf.cast(budget, len_a.dtype)
    excess = tf.maximum(len_a + len_b - budget, 0)
    diff = tf.abs(len_a - len_b)
    shorter = tf.minimum(len_a, len_b)
    # Phase 1: the longer loses min(diff, excess); then both alternate, B first.
    rest = tf.maximum(excess - diff, 0)
    a_long = len_a > len_b
    a1 = tf.where(a_long, len_a - tf.minimum(diff, excess), len_a)
    b1 = tf.where(a_long, len_b, len_b - tf.minimum(diff, excess))
    even = rest > 0
    a2 = tf.where(even, shorter - rest // 2, a1)
    b2 = tf.where(even, shorter - (rest + 1) // 2, b1)
    return a2, b2


def pack_inputs(a: tf.RaggedTensor, b: Optional[tf.RaggedTensor], max_seq_length: int,
                cls_id: int, sep_id: int):
    """[CLS] a [SEP] (b [SEP]) -> int32 dict of [batch, max_seq_length] (zero padded).

    `a`, `b`: 2-D ragged ids. Truncation as the original (see `truncated_pair_lengths`;
    a single segment keeps its first max_seq_length - 2). Dense ops only (quick to trace).
    """
    max_seq_length = int(max_seq_length)
    a_values = tf.cast(a.flat_values, tf.int32)
    a_starts, a_len = a.row_starts(), a.row_lengths()
    if b is None:
        keep_a = tf.minimum(a_len, max_seq_length - 2)
        keep_b = tf.zeros_like(keep_a)
    else:
        keep_a, keep_b = truncated_pair_lengths(a_len, b.row_lengths(), max_seq_length - 3)
    pos = tf.range(max_seq_length, dtype=a_len.dtype)[None, :]        # [1, L]
    ka, kb = keep_a[:, None], keep_b[:, None]                          # [batch, 1]
    in_a = (pos >= 1) & (pos <= ka)
    sep_a = tf.equal(pos, ka + 1)
    ids = tf.where(tf.equal(pos, 0), cls_id, 0)
    ids = tf.where(sep_a, sep_id, ids)
    a_index = tf.clip_by_value(a_starts[:, None] + pos - 1, 0,
                               tf.maximum(tf.size(a_values, out_type=pos.dtype) - 1, 0))
    ids = tf.where(in_a, tf.gather(tf.concat([a_values, [0]], 0), a_index), ids)
    length = ka + 2
    type_ids = tf.zeros_like(ids)
    if b is not None:
        b_values = tf.cast(b.flat_values, tf.int32)
        in_b = (pos >= ka + 2) & (pos < ka + 2 + kb)
        sep_b = tf.equal(pos, ka + kb + 2)
        b_index = tf.clip_by_value(b.row_starts()[:, None] + pos - ka - 2, 0,
                                   tf.maximum(tf.size(b_values, out_type=pos.dtype) - 1, 0))
        ids = tf.where(in_b, tf.gather(tf.concat([b_values, [0]], 0), b_index), ids)
        ids = tf.where(sep_b, sep_id, ids)
        type_ids = tf.cast(in_b | sep_b, tf.int32)
        length = length + kb + 1
    mask = tf.cast(pos < length, tf.int32)
    return {constants.INPUT_WORD_IDS: ids * mask, constants.INPUT_MASK: mask,
            constants.INPUT_TYPE_IDS: type_ids}
