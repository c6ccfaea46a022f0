"""GLUE tasks: the official tsv layouts, [CLS] classifier / regressor, official metrics.

One class per task, each a `GlueTask` with a few class attributes saying where its
columns are; everything else (reading, checks, features, head, loss, metrics, the
submission file) is shared. Files are read as the original run_classifier reads them:
tab-separated, no quoting (QNLI/RTE/WNLI/MRPC carry stray double quotes), a UTF-8 BOM
dropped (MRPC), CoLA train/dev without a header.

>>> task = RteTask(data_dir=None)
>>> task.label_list, task.primary_metric, task.submission_name
(['entailment', 'not_entailment'], 'accuracy', 'RTE.tsv')
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Union

import keras
import numpy as np
import tensorflow as tf

from bert_tf.serving import modules as serving
from bert_tf.tasks import metrics as metrics_lib
from bert_tf.tasks.base import (Task, TaskDataError, make_head, read_task_text,
                                require_examples, sparse_ce, write_tsv_lines)


@dataclasses.dataclass(frozen=True)
class GlueExample:
    """One row: `guid` is the test `index` column (what the submission file keys on)."""

    guid: str
    text_a: str
    text_b: Optional[str] = None
    label: Union[str, float, None] = None
    subset: str = ""  # MNLI: "matched" / "mismatched"
    source: str = ""  # "file:line" for error messages


def read_tsv(path: str) -> List[List[str]]:
    """Rows of a tab-separated file, no quote handling, BOM dropped, blank lines skipped."""
    text = read_task_text(path, "--data_dir must hold the task's GLUE files (train.tsv, "
                                "dev.tsv, test.tsv)")
    return [line.rstrip("\r").split("\t") for line in text.split("\n")]


class GlueTask(Task):
    """Base of the GLUE tasks; subclasses set the column layout and metrics.

    Column indices may be negative (STS-B's score is the last column). `header` says
    whether train/dev have a header row (CoLA's do not); test files always have one.
    """

    name = ""
    labels: Optional[List[str]] = None  # None = regression
    header = True
    text_a_column = 0
    text_b_column: Optional[int] = None
    label_column = -1
    test_text_a_column = 1
    test_text_b_column: Optional[int] = None
    expected_columns: Optional[int] = None  # train/dev width when there is no header
    positive_label = "1"
    huggingface_class = "BertForSequenceClassification"
    raw_text_from_ids = True  # ClassifierServing: logits, probabilities, label of the ids
    extra_metrics: Sequence[str] = ()  # "f1", "matthews_corr"
    # `label_list` replaces the task's labels (a classifier imported with other label
    # names, e.g. a Hugging Face model's id2label); task_config.json records it.
    option_names = ("label_list",)

    def __init__(self, tokenizer=None, max_seq_length: Optional[int] = None, data_dir=None,
                 files=None, label_list: Optional[Sequence[str]] = None):
        if label_list is not None and self.labels is None:
            raise ValueError(f"{self.name} is a regression task: it takes no label_list")
        super().__init__(tokenizer=tokenizer, max_seq_length=max_seq_length,
                         data_dir=data_dir, files=files,
                         **({} if label_list is None else {"label_list": list(label_list)}))
        if label_list is not None:
            self.labels = [str(label) for label in label_list]

    @property
    def label_list(self):
        return list(self.labels) if self.labels is not None else None

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def text_input_names(self):
        return ("text", "text_b") if self.text_b_column is not None else ("text",)

    def default_file(self, split: str) -> str:
        return {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}[split]

    # ------------------------------------------------------------------ reading
    def get_examples(self, split: str) -> List[GlueExample]:
        if split not in ("train", "dev", "test"):
            raise ValueError(f"{self.name}: unknown split {split!r} (train, dev or test)")
        return self._read(self.split_file(split), split)

    def _read(self, path: str, split: str, subset: str = "") -> List[GlueExample]:
        rows = read_tsv(path)
        test = split == "test"
        has_header = test or self.header
        width = len(rows[0]) if has_header and rows else self.expected_columns
        used = ([0, self.test_text_a_column, self.test_text_b_column] if test else
                [self.text_a_column, self.text_b_column, self.label_column])
        needed = max(c + 1 if c >= 0 else -c for c in used if c is not None)
        if width is not None and width < needed:
            raise TaskDataError(f"{path}:1: {width} tab-separated column(s), the {self.name} "
                                f"{split} file has at least {needed}; is this the {self.name} "
                                f"{split} file in the official GLUE layout?")
        examples = []
        for line_no, row in enumerate(rows, start=1):
            if row == [""]:
                continue  # blank line (usually the final newline)
            if len(row) != width:
                raise TaskDataError(
                    f"{path}:{line_no}: {len(row)} tab-separated columns, expected {width} "
                    f"(as {'the header' if has_header else self.name + ' files'}); is this "
                    f"the {self.name} {split} file in the official GLUE layout?")
            if has_header and line_no == 1:
                continue
            where = f"{path}:{line_no}"
            if test:
                a, b = self.test_text_a_column, self.test_text_b_column
                examples.append(GlueExample(
                    guid=row[0], text_a=row[a], text_b=row[b] if b is not None else None,
                    subset=subset, source=where))
                continue
            b = self.text_b_column
            examples.append(GlueExample(
                guid=f"{split}-{line_no}", text_a=row[self.text_a_column],
                text_b=row[b] if b is not None else None,
                label=self._parse_label(row[self.label_column], where),
                subset=subset, source=where))
        return require_examples(examples, path, split,
                                f"the {self.name} rows in the official GLUE layout")

    def _parse_label(self, value: str, where: str):
        value = value.strip()
        if self.is_regression:
            try:
                return float(value)
            except ValueError:
                raise TaskDataError(f"{where}: score {value!r} is not a number; {self.name} "
                                    f"needs a float score in its last column") from None
        if value not in self.labels:
            raise TaskDataError(f"{where}: label {value!r} is not a {self.name} label "
                                f"(expected one of {self.labels}); fix or drop the row")
        return value

    # ------------------------------------------------------------------ features
    def convert_examples(self, examples: Sequence[GlueExample], split: str = "train",
                         batch_size: int = 2048) -> Dict[str, np.ndarray]:
        """Tokenized, packed ([CLS] a [SEP] b [SEP]) and padded features; labels when known."""
        if self.tokenizer is None:
            raise ValueError(f"{self.name}: convert_examples needs a tokenizer")
        parts = {k: [] for k in self.model_input_names}
        for start in range(0, len(examples), batch_size):
            chunk = examples[start:start + batch_size]
            texts_b = ([e.text_b for e in chunk] if self.text_b_column is not None else None)
            encoded = self.tokenizer.encode([e.text_a for e in chunk], texts_b,
                                            max_seq_length=self.max_seq_length)
            for k in self.model_input_names:
                parts[k].append(np.asarray(encoded[k], dtype=np.int32))
        features = {k: (np.concatenate(v) if v else
                        np.zeros((0, self.max_seq_length), np.int32))
                    for k, v in parts.items()}
        if examples and all(e.label is not None for e in examples):
            features["label_ids"] = self._label_array([e.label for e in examples])
        return features

    def _label_array(self, labels) -> np.ndarray:
        if self.is_regression:
            return np.asarray(labels, np.float32)
        index = {label: i for i, label in enumerate(self.labels)}
        return np.asarray([index[label] for label in labels], np.int32)

    def feature_spec(self):
        label_dtype = "float32" if self.is_regression else "int64"
        spec = {k: ([self.max_seq_length], "int64") for k in self.model_input_names}
        spec["label_ids"] = ([], label_dtype)
        return spec

    # ------------------------------------------------------------------ model
    def build_head(self, config):
        return make_head(config, 1 if self.is_regression else len(self.labels))

    def loss(self, features, outputs):
        logits = outputs["logits"]
        if self.is_regression:
            predictions = keras.ops.cast(logits, "float32")[:, 0]
            labels = keras.ops.cast(features["label_ids"], "float32")
            return keras.ops.mean(keras.ops.square(predictions - labels))
        return sparse_ce(features["label_ids"], logits)

    # ------------------------------------------------------------------ results
    def postprocess(self, outputs, features=None, examples=None) -> list:
        logits = np.asarray(outputs["logits"], np.float32)
        if self.is_regression:
            return [float(v) for v in logits[:, 0]]
        return [self.labels[i] for i in np.argmax(logits, axis=-1)]

    def serving_module(self, model, tokenizer, max_seq_length: int,
                       text_signatures: bool = True) -> "ClassifierServing":
        """The SavedModel signatures of this task (bert_tf.export.saved_model writes them)."""
        return ClassifierServing(model, tokenizer, max_seq_length,
                                 None if self.is_regression else self.labels,
                                 pair=len(self.text_input_names) == 2,
                                 text_signatures=text_signatures)

    def evaluate(self, predictions, examples) -> Dict[str, float]:
        return self._scores(predictions, [e.label for e in examples])

    def _scores(self, predictions, labels) -> Dict[str, float]:
        if len(predictions) != len(labels):
            raise ValueError(f"{len(predictions)} predictions for {len(labels)} examples")
        if self.is_regression:
            return {"pearson": metrics_lib.pearson(labels, predictions),
                    "spearman": metrics_lib.spearman(labels, predictions)}
        results = {"accuracy": metrics_lib.accuracy(labels, predictions)}
        if "f1" in self.extra_metrics:
            results["f1"] = metrics_lib.binary_f1(labels, predictions, self.positive_label)
        if "matthews_corr" in self.extra_metrics:
            results["matthews_corr"] = metrics_lib.matthews_corr(labels, predictions)
        return results

    def write_predictions(self, predictions, examples, output_dir: str) -> List[str]:
        """OUTPUT_DIR/<TASK>.tsv in the GLUE submission format (header index, prediction)."""
        return [self._write(os.path.join(output_dir, self.submission_name),
                            predictions, examples)]

    def _write(self, path, predictions, examples) -> str:
        lines = ["index\tprediction"]
        for example, prediction in zip(examples, predictions):
            value = (f"{prediction:.3f}" if self.is_regression else str(prediction))
            lines.append(f"{example.guid}\t{value}")
        return write_tsv_lines(path, lines)


class ClassifierServing(serving.TaskServing):
    """GLUE-style classifier / regressor: the in-graph `GlueTask.postprocess`.

    Text signature: `text` (+ `text_b`) -> `logits` [b, C], `probabilities` [b, C],
    `label_id` [b] int32, `label` [b] string (regression: `logits` [b, 1], `score` [b]).
    The ids signature gives the same outputs on ids.
    """

    def __init__(self, model, tokenizer, max_seq_length, labels, pair=False,
                 text_signatures=True):
        self.text_inputs = ("text", "text_b") if pair else ("text",)
        super().__init__(model, tokenizer, max_seq_length, name="bert_classifier_serving",
                         text_signatures=text_signatures)
        self.labels = list(labels) if labels is not None else None
        if self.labels is not None:
            self.labels_asset = tf.saved_model.Asset(serving.write_labels(self.labels))
            self._label_names = tf.constant(self.labels)

    def from_ids(self, inputs):
        logits = tf.cast(self._model(inputs)["logits"], tf.float32)
        if self.labels is None:
            return {"logits": logits, "score": logits[:, 0]}
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "label_id": label_id, "label": tf.gather(self._label_names, label_id)}


class ColaTask(GlueTask):
    """CoLA: train/dev `source, label, mark, sentence` with no header; Matthews corr."""

    name = "CoLA"
    labels = ["0", "1"]
    header = False
    expected_columns = 4
    text_a_column, label_column = 3, 1
    submission_name = "CoLA.tsv"
    extra_metrics = ("matthews_corr",)
    primary_metric = "matthews_corr"


class Sst2Task(GlueTask):
    """SST-2: `sentence, label`; accuracy."""

    name = "SST-2"
    labels = ["0", "1"]
    text_a_column, label_column = 0, 1
    submission_name = "SST-2.tsv"


class MrpcTask(GlueTask):
    """MRPC: `Quality, #1 ID, #2 ID, #1 String, #2 String` (BOM); F1 and accuracy."""

    name = "MRPC"
    labels = ["0", "1"]
    text_a_column, text_b_column, label_column = 3, 4, 0
    test_text_a_column, test_text_b_column = 3, 4
    submission_name = "MRPC.tsv"
    extra_metrics = ("f1",)
    primary_metric = "f1"


class StsbTask(GlueTask):
    """STS-B: sentence1/2 in columns 7/8, the 0-5 score last; Pearson and Spearman."""

    name = "STS-B"
    labels = None
    text_a_column, text_b_column, label_column = 7, 8, -1
    test_text_a_column, test_text_b_column = 7, 8
    submission_name = "STS-B.tsv"
    primary_metric = "pearson"


class QqpTask(GlueTask):
    """QQP: `id, qid1, qid2, question1, question2, is_duplicate`; F1 and accuracy."""

    name = "QQP"
    labels = ["0", "1"]
    text_a_column, text_b_column, label_column = 3, 4, 5
    test_text_a_column, test_text_b_column = 1, 2
    submission_name = "QQP.tsv"
    extra_metrics = ("f1",)
    primary_metric = "f1"


class QnliTask(GlueTask):
    """QNLI: `index, question, sentence, label`; accuracy."""

    name = "QNLI"
    labels = ["entailment", "not_entailment"]
    text_a_column, text_b_column, label_column = 1, 2, 3
    test_text_a_column, test_text_b_column = 1, 2
    submission_name = "QNLI.tsv"


class RteTask(QnliTask):
    """RTE: `index, sentence1, sentence2, label`; accuracy."""

    name = "RTE"
    submission_name = "RTE.tsv"


class WnliTask(GlueTask):
    """WNLI: `index, sentence1, sentence2, label` with 0/1 labels; accuracy."""

    name = "WNLI"
    labels = ["0", "1"]
    text_a_column, text_b_column, label_column = 1, 2, 3
    test_text_a_column, test_text_b_column = 1, 2
    submission_name = "WNLI.tsv"


class MnliTask(GlueTask):
    """MNLI: sentence1/2 in columns 8/9, gold label last; matched and mismatched accuracy.

    The "dev" split is dev_matched.tsv + dev_mismatched.tsv (examples carry `subset`), so
    one evaluation reports both: `accuracy` (= matched, the number usually quoted),
    `accuracy_matched`, `accuracy_mismatched`. "test" likewise writes MNLI-m.tsv and
    MNLI-mm.tsv, and AX.tsv from GLUE's diagnostic.tsv (in --data_dir or ../diagnostic/)
    when it is there, as the GLUE submission expects.
    """

    name = "MNLI"
    labels = ["contradiction", "entailment", "neutral"]
    text_a_column, text_b_column, label_column = 8, 9, -1
    test_text_a_column, test_text_b_column = 8, 9
    submission_name = "MNLI-m.tsv"

    def get_examples(self, split: str) -> List[GlueExample]:
        if split == "train":
            return self._read(self.split_file("train"), "train")
        if split not in ("dev", "test"):
            raise ValueError(f"MNLI: unknown split {split!r} (train, dev or test)")
        if split in self.files:  # one explicit file: treat it as matched
            return self._read(self.files[split], split, "matched")
        examples = []
        for subset in ("matched", "mismatched"):
            path = os.path.join(self.data_dir or "", f"{split}_{subset}.tsv")
            examples += self._read(path, split, subset)
        if split == "test":
            examples += self._read_diagnostic()
        return examples

    def _read_diagnostic(self) -> List[GlueExample]:
        """GLUE's diagnostic set (AX), which the submission predicts with the MNLI model:
        `diagnostic.tsv` in --data_dir or in the GLUE layout's `../diagnostic/`, if present."""
        for path in (os.path.join(self.data_dir or "", "diagnostic.tsv"),
                     os.path.join(self.data_dir or "", os.pardir, "diagnostic",
                                  "diagnostic.tsv")):
            if self.data_dir and tf.io.gfile.exists(path):
                rows = read_tsv(path)
                if not rows or rows[0][:3] != ["index", "sentence1", "sentence2"]:
                    raise TaskDataError(f"{path}:1: expected the header "
                                        f"index<TAB>sentence1<TAB>sentence2 of GLUE's AX set")
                examples = []
                for line_no, row in enumerate(rows[1:], start=2):
                    if row == [""]:
                        continue
                    if len(row) < 3:
                        raise TaskDataError(f"{path}:{line_no}: {len(row)} tab-separated "
                                            f"columns, expected 3 (index, sentence1, sentence2)")
                    examples.append(GlueExample(guid=row[0], text_a=row[1], text_b=row[2],
                                                subset="diagnostic", source=f"{path}:{line_no}"))
                return examples
        return []

    def evaluate(self, predictions, examples) -> Dict[str, float]:
        results = {}
        for subset in ("matched", "mismatched"):
            chosen = [i for i, e in enumerate(examples) if e.subset == subset]
            if chosen:
                results[f"accuracy_{subset}"] = metrics_lib.accuracy(
                    [examples[i].label for i in chosen], [predictions[i] for i in chosen])
        results["accuracy"] = results.get("accuracy_matched",
                                          metrics_lib.accuracy([e.label for e in examples],
                                                               predictions))
        return results

    def write_predictions(self, predictions, examples, output_dir: str) -> List[str]:
        paths = []
        for subset, filename in (("matched", "MNLI-m.tsv"), ("mismatched", "MNLI-mm.tsv"),
                                 ("diagnostic", "AX.tsv")):
            chosen = [i for i, e in enumerate(examples) if e.subset == subset]
            if chosen:
                paths.append(self._write(os.path.join(output_dir, filename),
                                         [predictions[i] for i in chosen],
                                         [examples[i] for i in chosen]))
        return paths
