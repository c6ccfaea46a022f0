"""SWAG: multiple choice over four (context, ending) pairs, as the BERT paper does it.

Data: the official swagaf csv files (`train.csv`, `val.csv`, `test.csv`) with the
columns `video-id, fold-ind, startphrase, sent1, sent2, gold-source, ending0..ending3,
label` (the released files also start with an unnamed index column; columns are found
by header name, so both layouts read). Test files have no `label` column.

Each example becomes four pairs: segment A = `sent1`, segment B = `sent2 + " " +
ending_i`. Every pair goes through the encoder; the [CLS] (pooled) vector is scored by
one dense unit and a softmax over the four scores gives the choice.

>>> SwagTask().num_choices
4
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
from typing import Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from bert_tf.serving import modules as serving
from bert_tf.core.constants import MODEL_INPUTS
from bert_tf.tasks import metrics as metrics_lib
from bert_tf.tasks.base import (Task, TaskDataError, TaskHead, read_task_text,
                                require_examples, sparse_ce, write_tsv_lines)

NUM_CHOICES = 4
REQUIRED_COLUMNS = ("sent1", "sent2", "ending0", "ending1", "ending2", "ending3")


@dataclasses.dataclass(frozen=True)
class SwagExample:
    guid: str
    context: str
    start_ending: str
    endings: List[str]
    label: Optional[int] = None
    source: str = ""


def read_swag(path: str, require_labels: bool) -> List[SwagExample]:
    text = read_task_text(path, "--data_dir must hold the SWAG csv files (train.csv, "
                                "val.csv, test.csv)")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        return _swag_rows(path, reader, require_labels)
    except csv.Error as e:  # a NUL byte, a quote left open by a cut file, ...
        raise TaskDataError(f"{path}:{reader.line_num}: not valid csv ({e})") from None


def _swag_rows(path: str, reader, require_labels: bool) -> List[SwagExample]:
    header = next(reader, None)
    if header is None:
        raise TaskDataError(f"{path}: empty file; expected the SWAG csv header")
    column = {name: i for i, name in enumerate(header)}
    missing = [c for c in REQUIRED_COLUMNS + (("label",) if require_labels else ())
               if c not in column]
    if missing:
        raise TaskDataError(f"{path}:1: header lacks {missing}; expected the swagaf columns "
                            f"video-id, fold-ind, startphrase, sent1, sent2, gold-source, "
                            f"ending0..ending3, label")
    examples = []
    for row in reader:
        line_no = reader.line_num
        if not row:
            continue
        if len(row) != len(header):
            raise TaskDataError(f"{path}:{line_no}: {len(row)} columns, expected "
                                f"{len(header)} (as the header)")
        label = None
        if "label" in column and row[column["label"]] != "":
            value = row[column["label"]]
            if value not in ("0", "1", "2", "3"):
                raise TaskDataError(f"{path}:{line_no}: label {value!r} is not one of "
                                    f"0, 1, 2, 3 (the index of the right ending)")
            label = int(value)
        elif require_labels:
            raise TaskDataError(f"{path}:{line_no}: no label; train and dev rows need one")
        guid = row[0] if header[0] == "" else str(len(examples))
        examples.append(SwagExample(
            guid=guid, context=row[column["sent1"]], start_ending=row[column["sent2"]],
            endings=[row[column[f"ending{i}"]] for i in range(NUM_CHOICES)],
            label=label, source=f"{path}:{line_no}"))
    return examples


class _ChoiceHead(TaskHead):
    """One score per (context, ending) pair: [pairs, 1] logits squeezed to [pairs]."""

    def call(self, encoder_outputs, training=None):
        logits = super().call(encoder_outputs, training=training)[self.output_key]
        return {self.output_key: logits[:, 0]}


class SwagTask(Task):
    """`--task_name=swag`: accuracy over the four endings."""

    name = "swag"
    num_choices = NUM_CHOICES
    label_names = ("label_ids",)
    submission_name = "swag_predictions.csv"
    huggingface_class = "BertForMultipleChoice"
    text_input_names = ("text", "text_b")

    @property
    def label_list(self):
        return [str(i) for i in range(NUM_CHOICES)]

    def default_file(self, split: str) -> str:
        return {"train": "train.csv", "dev": "val.csv", "test": "test.csv"}[split]

    def get_examples(self, split: str) -> List[SwagExample]:
        if split not in ("train", "dev", "test"):
            raise ValueError(f"swag: unknown split {split!r} (train, dev or test)")
        path = self.split_file(split)
        return require_examples(read_swag(path, require_labels=split != "test"), path, split,
                                "rows of the swagaf csv layout")

    def convert_examples(self, examples: Sequence[SwagExample], split: str = "train",
                         batch_size: int = 512) -> Dict[str, np.ndarray]:
        """Inputs [n, 4, max_seq_length]; `label_ids` [n] when every example has a label."""
        if self.tokenizer is None:
            raise ValueError("swag: convert_examples needs a tokenizer")
        parts = {k: [] for k in self.model_input_names}
        for start in range(0, len(examples), batch_size):
            chunk = examples[start:start + batch_size]
            contexts = [e.context for e in chunk for _ in range(NUM_CHOICES)]
            endings = [f"{e.start_ending} {ending}".strip()
                       for e in chunk for ending in e.endings]
            encoded = self.tokenizer.encode(contexts, endings,
                                            max_seq_length=self.max_seq_length)
            for k in self.model_input_names:
                parts[k].append(np.asarray(encoded[k], np.int32).reshape(
                    len(chunk), NUM_CHOICES, self.max_seq_length))
        shape = (0, NUM_CHOICES, self.max_seq_length)
        features = {k: np.concatenate(v) if v else np.zeros(shape, np.int32)
                    for k, v in parts.items()}
        if examples and all(e.label is not None for e in examples):
            features["label_ids"] = np.asarray([e.label for e in examples], np.int32)
        return features

    def feature_spec(self):
        spec = {k: ([NUM_CHOICES, self.max_seq_length], "int64")
                for k in self.model_input_names}
        spec["label_ids"] = ([], "int64")
        return spec

    def build_head(self, config):
        return _ChoiceHead(num_classes=1, hidden_size=config.hidden_size,
                           dropout_rate=config.hidden_dropout_prob,
                           initializer_range=config.initializer_range, name="task_head")

    def loss(self, features, outputs):
        return sparse_ce(features["label_ids"], outputs["logits"])

    def postprocess(self, outputs, features=None, examples=None) -> List[int]:
        return [int(i) for i in np.argmax(np.asarray(outputs["logits"]), axis=-1)]

    def serving_module(self, model, tokenizer, max_seq_length: int,
                       text_signatures: bool = True) -> "MultipleChoiceServing":
        """The SavedModel signatures of this task (bert_tf.export.saved_model writes them)."""
        return MultipleChoiceServing(model, tokenizer, max_seq_length, self.num_choices,
                                     text_signatures=text_signatures)

    def evaluate(self, predictions, examples) -> Dict[str, float]:
        return {"accuracy": metrics_lib.accuracy([e.label for e in examples], predictions)}

    def write_predictions(self, predictions, examples, output_dir: str) -> List[str]:
        """`index,prediction` rows (the index column of the csv, else the row number)."""
        lines = ["index,prediction"] + [f"{e.guid},{p}" for e, p in zip(examples, predictions)]
        return [write_tsv_lines(os.path.join(output_dir, self.submission_name), lines)]


class MultipleChoiceServing(serving.TaskServing):
    """Multiple choice (SWAG), the in-graph `SwagTask.postprocess`: each (context, ending)
    pair is scored from its [CLS] vector and a softmax over the choices picks one.

    Text signature: `text` [b] (the context, segment A) and `endings` [b, num_choices]
    (segment B of each pair: for SWAG the second sentence's start and the ending, joined by
    a space, as finetune builds them) -> `logits` [b, num_choices], `probabilities`,
    `label_id` [b] int32 (the chosen ending). The ids signature takes
    [b, num_choices, seq] ids, masks and type ids and gives the same outputs.
    """

    text_inputs = ("text", "endings")

    def __init__(self, model, tokenizer, max_seq_length, num_choices, text_signatures=True):
        self.num_choices = int(num_choices)
        super().__init__(model, tokenizer, max_seq_length, name="bert_multiple_choice_serving",
                         text_signatures=text_signatures)
        self.serve_ids = tf.function(self.bounded(self._serve_ids, text=False),
                                     autograph=False, input_signature=[
            tf.TensorSpec([None, self.num_choices, None], tf.int32, name=n)
            for n in MODEL_INPUTS])
        if self.has_text_signatures:
            self.serve_text = tf.function(self.bounded(self._serve_text_2, text=True),
                                          autograph=False, input_signature=[
                serving.text_spec("text"),
                tf.TensorSpec([None, self.num_choices], tf.string, name="endings")])

    def _model(self, inputs):
        ids = inputs["input_word_ids"]
        flat = serving.check_length(tf.reshape(ids, [-1, tf.shape(ids)[-1]]),
                                    self.max_positions)
        inputs = dict(inputs, input_word_ids=tf.reshape(flat, tf.shape(ids)))
        return self.run_model({k: inputs[k] for k in MODEL_INPUTS})

    def from_ids(self, inputs):
        logits = tf.cast(self._model(inputs)["logits"], tf.float32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "label_id": tf.argmax(logits, axis=-1, output_type=tf.int32)}

    def encode(self, a, b=None):
        # Every context once per choice, paired with its endings row by row.
        contexts = tf.repeat(a, self.num_choices)
        flat = serving.cut_to_longest(serving.encode_text(
            self.tok, contexts, tf.reshape(b, [-1]), self.max_seq_length))
        return {k: tf.reshape(v, [-1, self.num_choices, tf.shape(v)[-1]])
                for k, v in flat.items()}

    def warmup_texts(self) -> Dict[str, np.ndarray]:
        endings = [[f"{b} ({k})".encode() for k in range(self.num_choices)]
                   for b in serving.WARMUP_TEXTS_B]
        return {"text": np.array([t.encode() for t in serving.WARMUP_TEXTS], dtype=object),
                "endings": np.array(endings, dtype=object)}
