"""Names and bytes every part of bert_tf and data_prep agrees on, in one place (TF-free).

* The model's input names (docs/contracts.md §4), which the readers, the tasks, packing and the
  SavedModel signatures all use.
* BERT's special tokens; every vocab must hold them (`text_rules.check_special_tokens`).
* The root children of a model dir's checkpoint (`bert_tf.model.model_dir` documents the
  layout; the Trainer, the converters and the tasks all name them from here).
* The protobuf base-128 varint, which the hand-written record encoders (the pretraining
  TFRecords in `data_prep.tfrecord_writer`, the TF Serving warmup requests in
  `bert_tf.export.saved_model`) build their messages from.

>>> MODEL_INPUTS
('input_word_ids', 'input_mask', 'input_type_ids')
>>> SPECIAL_TOKENS
('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]')
>>> PRETRAINING_HEADS
('masked_lm', 'next_sentence')
>>> varint(1), varint(300)
(b'\\x01', b'\\xac\\x02')
"""

INPUT_WORD_IDS = "input_word_ids"
INPUT_MASK = "input_mask"
INPUT_TYPE_IDS = "input_type_ids"
MODEL_INPUTS = (INPUT_WORD_IDS, INPUT_MASK, INPUT_TYPE_IDS)

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
MASK_TOKEN = "[MASK]"
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)

# A checkpoint's root children: the model's parts (each present when it exists) ...
ENCODER = "encoder"
MASKED_LM = "masked_lm"
NEXT_SENTENCE = "next_sentence"
TASK_HEAD = "task_head"
PRETRAINING_HEADS = (MASKED_LM, NEXT_SENTENCE)
# ... and the training state a Trainer adds (resume only; never a start point).
OPTIMIZER = "optimizer"
STEP = "step"
INPUT_SEED = "input_seed"


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int.

    >>> varint(0), varint(127), varint(128)
    (b'\\x00', b'\\x7f', b'\\x80\\x01')
    """
    if value < 0:
        raise ValueError(f"varint of a negative value {value}: only ids >= 0 are written")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def length_delimited(field_number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2: messages, strings, packed lists).

    >>> length_delimited(1, b"hi")
    b'\\n\\x02hi'
    """
    return varint(field_number << 3 | 2) + varint(len(payload)) + payload
