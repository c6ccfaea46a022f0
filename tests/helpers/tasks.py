"""What the task tests share: a tiny model of a task, and the check that a data error is
one line."""

import keras
import numpy as np
import pytest

from bert_tf.model.config import BertConfig
from bert_tf.model.encoder import BertEncoder
from bert_tf.tasks.base import TaskDataError


def tiny_task_model(task, vocab_size, seed=0, scale=2.0):
    """`task.build_model` on a one-layer encoder, the same every run, with large head
    weights so that the task's outputs differ from input to input."""
    keras.utils.set_random_seed(seed)
    cfg = BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=32)
    model = task.build_model(BertEncoder(cfg))
    for v in model.task_head.weights:
        v.assign(np.random.default_rng(seed).normal(0, scale, v.shape).astype("float32"))
    return model


def one_line_error(match, fn, *args):
    """The message of the TaskDataError `fn(*args)` raises, checked to match `match` and
    to be one line."""
    with pytest.raises(TaskDataError, match=match) as caught:
        fn(*args)
    assert "\n" not in str(caught.value)
    return str(caught.value)
