"""SQuAD v1.1 / v2.0 as a Task: the span head, its loss, and the pieces tied together.

Behaviour follows the original BERT `run_squad` step by step: data and windows in
`squad_data`, answers (host and in-graph serving) in `squad_postprocess`. Head and loss:
a dense [H, 2] on the sequence output gives start and end logits; the loss is the mean
of the start and end softmax cross-entropies over all positions.

>>> SquadTask().default_file("dev"), SquadTask(version_2_with_negative=True).default_file("train")
('dev-v1.1.json', 'train-v2.0.json')
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf.core.errors import UsageError
from bert_tf.tasks.base import Task, TaskDataError, require_examples, sparse_ce
from bert_tf.tasks.squad_data import (SquadExample, convert_examples_to_features,
                                      read_squad_examples, tokenizer_basic_fn,
                                      tokenizer_id_to_token, tokenizer_ids_fn)
from bert_tf.tasks.squad_postprocess import (SpanServing, SquadPrediction,
                                             evaluate_predictions, postprocess_predictions,
                                             write_prediction_files)


@keras.saving.register_keras_serializable(package="bert_tf")
class SquadHead(keras.layers.Layer):
    """Dense [H, 2] on the sequence output -> start and end logits (float32).

    No dropout before it, as the original. Example:

    >>> import numpy as np
    >>> out = SquadHead(hidden_size=8)({"sequence_output": np.zeros((2, 5, 8), "float32")})
    >>> out["start_logits"].shape, out["end_logits"].shape
    (TensorShape([2, 5]), TensorShape([2, 5]))
    """

    def __init__(self, hidden_size, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(
            2, dtype=self.dtype_policy, name="dense",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range))

    def build(self, input_shape=None):
        self.dense.build((None, None, self.hidden_size))
        self.built = True

    def call(self, encoder_outputs, training=None):
        logits = keras.ops.cast(self.dense(encoder_outputs["sequence_output"]), "float32")
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, initializer_range=self.initializer_range)
        return config


def squad_head(hidden_size: int, initializer_range: float = 0.02, **kwargs) -> SquadHead:
    """A built SquadHead."""
    head = SquadHead(hidden_size=hidden_size, initializer_range=initializer_range, **kwargs)
    head.build()
    return head


def span_loss(start_positions, end_positions, start_logits, end_logits):
    """Mean of the start and end softmax cross-entropies (over all positions)."""
    return (sparse_ce(start_positions, start_logits) + sparse_ce(end_positions, end_logits)) / 2.0


# ---------------------------------------------------------------------- the task
class SquadTask(Task):
    """SQuAD v1.1 (default) or v2.0 (`version_2_with_negative=True`) as a Task.

    Files: `files={"train": train_file, "dev": predict_file, "test": predict_file}` or
    `data_dir` holding train-v1.1.json / dev-v1.1.json (v2.0: train-v2.0.json /
    dev-v2.0.json). Features carry windows (several per example); postprocess merges
    them back into one SquadPrediction per example.
    """

    name = "squad"
    option_names = ("doc_stride", "max_query_length", "n_best_size", "max_answer_length",
                    "version_2_with_negative", "null_score_diff_threshold")
    label_names = ("start_positions", "end_positions")
    primary_metric = "f1"
    submission_name = "predictions.json"  # (+ nbest_predictions.json, null_odds.json)
    default_max_seq_length = 384  # as the original run_squad
    huggingface_class = "BertForQuestionAnswering"
    # A paragraph's questions have windows of about one length: grouped by length, a
    # batch of 16 held 2.5 same-paragraph pairs (SQuAD v1.1 at seq 256; 0.3 at random).
    rows_share_text = True
    # The raw-text serving inputs (bert_tf.export.saved_model's span signature).
    text_input_names = ("question", "context")

    def __init__(self, tokenizer=None, max_seq_length: Optional[int] = None, data_dir=None,
                 files=None, doc_stride: int = 128, max_query_length: int = 64, n_best_size: int = 20,
                 max_answer_length: int = 30, version_2_with_negative: bool = False,
                 null_score_diff_threshold: float = 0.0):
        super().__init__(tokenizer=tokenizer, max_seq_length=max_seq_length,
                         data_dir=data_dir, files=files, doc_stride=int(doc_stride),
                         max_query_length=int(max_query_length), n_best_size=int(n_best_size),
                         max_answer_length=int(max_answer_length),
                         version_2_with_negative=bool(version_2_with_negative),
                         null_score_diff_threshold=float(null_score_diff_threshold))
        self.doc_stride = int(doc_stride)
        self.max_query_length = int(max_query_length)
        self.n_best_size = int(n_best_size)
        self.max_answer_length = int(max_answer_length)
        self.version_2_with_negative = bool(version_2_with_negative)
        self.null_score_diff_threshold = float(null_score_diff_threshold)

    @classmethod
    def check_options(cls, max_seq_length: int, **options) -> None:
        # A window is [CLS] question [SEP] context [SEP], the question up to
        # max_query_length: without room for context no feature can be made.
        query = int(options.get("max_query_length", 64))
        if max_seq_length <= query + 3:
            raise UsageError(f"--max_seq_length={max_seq_length}: SQuAD needs more than "
                             f"--max_query_length + 3 = {query + 3} (the question, [CLS] "
                             f"and 2 [SEP], then the context)")

    # ------------------------------------------------------------------ data
    def default_file(self, split: str) -> str:
        version = "v2.0" if self.version_2_with_negative else "v1.1"
        return f"{'train' if split == 'train' else 'dev'}-{version}.json"

    def get_examples(self, split: str) -> List[SquadExample]:
        path = self.split_file(split)

        if not tf.io.gfile.exists(path):
            raise TaskDataError(f"{path}: no such file; pass --train_file / --predict_file "
                                f"(official SQuAD json) or a --data_dir holding "
                                f"{self.default_file(split)}")
        return require_examples(
            read_squad_examples(path, is_training=(split == "train"),
                                version_2_with_negative=self.version_2_with_negative),
            path, split, "questions in the official SQuAD layout (a training question's "
                         "answer must occur in its context at answer_start)")

    def _require_tokenizer(self):
        if self.tokenizer is None:
            raise ValueError("squad: this step needs a tokenizer (pass a BertTokenizer)")
        return self.tokenizer

    def convert_examples(self, examples: Sequence[SquadExample], split: str) -> Dict[str, np.ndarray]:
        tokenizer = self._require_tokenizer()
        return convert_examples_to_features(
            examples, tokenizer_ids_fn(tokenizer), int(tokenizer.cls_id), int(tokenizer.sep_id),
            max_seq_length=self.max_seq_length, doc_stride=self.doc_stride,
            max_query_length=self.max_query_length, is_training=(split == "train"))

    def feature_spec(self):
        spec = {k: ([self.max_seq_length], "int64") for k in self.model_input_names}
        spec.update({k: ([], "int64") for k in self.label_names})
        return spec

    # ------------------------------------------------------------------ model
    def build_head(self, config):
        return squad_head(config.hidden_size, config.initializer_range, name="task_head")

    def loss(self, features, outputs):
        return span_loss(features["start_positions"], features["end_positions"],
                         outputs["start_logits"], outputs["end_logits"])

    # ------------------------------------------------------------------ results
    def postprocess(self, outputs, features, examples) -> List[SquadPrediction]:
        tokenizer = self._require_tokenizer()
        return postprocess_predictions(
            examples, features, np.asarray(outputs["start_logits"]),
            np.asarray(outputs["end_logits"]), id_to_token=tokenizer_id_to_token(tokenizer),
            basic_tokenize=tokenizer_basic_fn(tokenizer), n_best_size=self.n_best_size,
            max_answer_length=self.max_answer_length,
            version_2_with_negative=self.version_2_with_negative,
            null_score_diff_threshold=self.null_score_diff_threshold)

    def evaluate(self, predictions, examples) -> Dict[str, float]:
        return evaluate_predictions(predictions, examples, self.version_2_with_negative)

    def write_predictions(self, predictions, examples, output_dir: str) -> List[str]:
        return write_prediction_files(predictions, output_dir, self.version_2_with_negative)

    def serving_module(self, model, tokenizer, max_seq_length: int,
                       text_signatures: bool = True) -> SpanServing:
        """The SavedModel signatures of this task (bert_tf.export.saved_model writes them)."""
        return SpanServing(model, tokenizer, max_seq_length, doc_stride=self.doc_stride,
                           max_query_length=self.max_query_length,
                           n_best_size=self.n_best_size,
                           max_answer_length=self.max_answer_length,
                           version_2_with_negative=self.version_2_with_negative,
                           null_score_diff_threshold=self.null_score_diff_threshold,
                           text_signatures=text_signatures)
