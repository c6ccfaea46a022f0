"""Sentence (pair) classification and regression on the user's own files, and the Korean
benchmarks that are such files (`nsmc`, `korsts`, `kornli`, `klue-nli`, `klue-sts`,
`klue-ynat`) as declarations over them, as the GLUE tasks are over `GlueTask`.

`--task_name=classification` (or `regression`) reads `--train_file`, `--validation_file`,
`--test_file` (`tasks.text_files`: .tsv/.txt, .csv, .json, .jsonl) with `--text_column`
(default `text`), `--text_b_column` (a pair when given), `--label_column` (default `label`)
and `--id_column` (default: `id` or `guid` when the file has one). Labels are
`--label_list` in its order, else the sorted labels of the train file; task_config.json
records them, so export and a later predict use the same order. A dev or test label
outside them, a missing column and a regression label that is not a number are one-line
errors naming file:line. Empty texts are rows like any other (NSMC has some).

Features, head, loss, the raw-text export (`ClassifierServing`: `logits`,
`probabilities`, `label_id`, `label`; regression `logits`, `score`) are `GlueTask`'s.
Metrics: classification `accuracy` and `macro_f1`; regression `pearson` and `spearman`
(each named task: its official ones). `--do_predict` writes OUTPUT_DIR/predictions.tsv
(`<id column or index>` TAB `prediction`, a header row) or, for JSON input,
predictions.jsonl (one object a line with the same two keys), one row per test row in
its order.

A named task fixes its columns, labels and file names in --data_dir (the file flags
override them). Where the official files differ from one split to the next:
NSMC's dev split is `ratings_dev.txt` when --data_dir has one (the rebuilt set), else
`ratings_test.txt` (the official release has no dev file); KorNLI trains on
`multinli.train.ko.tsv` and `snli_1.0_train.ko.tsv` together (those in --data_dir; rows
whose gold label is `-`, SNLI's "no consensus", are skipped); KLUE publishes no test
labels, so the KLUE tasks' test split with --data_dir is the dev file.

>>> task = KlueStsTask()
>>> task.metric_names, task.label_column, task.text_input_names
(('pearson', 'spearman', 'f1'), 'labels.real-label', ('text', 'text_b'))
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Optional, Sequence

import tensorflow as tf

from bert_tf.core import output_guard
from bert_tf.tasks import metrics as metrics_lib
from bert_tf.tasks.base import Task, TaskDataError, require_examples
from bert_tf.tasks.glue import GlueExample, GlueTask
from bert_tf.tasks.text_files import is_json, read_rows

#: The options of a task on the user's own files (flag name == option name).
OWN_DATA_OPTIONS = ("label_list", "text_column", "text_b_column", "label_column",
                    "id_column")
ID_COLUMNS = ("id", "guid")  # taken as the id column when the file has one


@dataclasses.dataclass(frozen=True)
class RowExample(GlueExample):
    """A row of a data file; `id_name` is the column `guid` came from ("" = the row's
    0-based index in its file)."""

    id_name: str = ""


def row_id(rows, id_column: Optional[str]) -> Optional[str]:
    """The column naming each row: `id_column`, else `id` / `guid` when the first row has
    it, else None (rows are then named by their index)."""
    if id_column:
        return id_column
    return next((c for c in ID_COLUMNS if rows and rows[0].has(c)), None)


def prediction_file(output_dir: str, source_file: str) -> str:
    """OUTPUT_DIR/predictions.jsonl for JSON input, else predictions.tsv."""
    return os.path.join(output_dir,
                        "predictions.jsonl" if is_json(source_file) else "predictions.tsv")


def write_prediction_rows(path: str, id_name: str, ids: Sequence[str],
                          values: Sequence, key: str = "prediction") -> str:
    """`path` as `prediction_file` names it: a header + `id TAB value` lines, or one JSON
    object a line; whole or not at all (output_guard)."""
    if path.endswith(".jsonl"):
        lines = [json.dumps({id_name: i, key: v}, ensure_ascii=False)
                 for i, v in zip(ids, values)]
    else:
        lines = [f"{id_name}\t{key}"] + [f"{i}\t{v}" for i, v in zip(ids, values)]
    output_guard.write_text(path, "\n".join(lines) + "\n")
    return path


def file_of(source: str) -> str:
    """The file of a "file:line" source."""
    return source.rsplit(":", 1)[0]


class TextClassificationTask(GlueTask):
    """`--task_name=classification`: one text or a pair, any label set (module docstring).

    Subclasses (the named tasks) set the class attributes: columns, `fixed_labels`,
    `default_files` (split -> file names in --data_dir, the first one present is read;
    `combine_train_files`: all present ones), `metric_names`, `skip_labels`."""

    name = "classification"
    option_names = OWN_DATA_OPTIONS
    regression = False
    fixed_labels: Optional[List[str]] = None
    default_text_column = "text"
    default_text_b_column: Optional[str] = None
    default_label_column = "label"
    default_id_column: Optional[str] = None
    default_files: Dict[str, Sequence[str]] = {}
    combine_train_files = False
    skip_labels: Sequence[str] = ()
    metric_names: Sequence[str] = ("accuracy", "macro_f1")
    primary_metric = "accuracy"
    submission_name = "predictions.tsv"

    def __init__(self, tokenizer=None, max_seq_length: Optional[int] = None, data_dir=None,
                 files=None, label_list: Optional[Sequence[str]] = None,
                 text_column: Optional[str] = None, text_b_column: Optional[str] = None,
                 label_column: Optional[str] = None, id_column: Optional[str] = None):
        if label_list and self.regression:
            raise TaskDataError(f"--label_list: {self.name} is a regression task; it has "
                                f"no labels")
        given = dict(label_list=list(label_list) if label_list else None,
                     text_column=text_column, text_b_column=text_b_column,
                     label_column=label_column, id_column=id_column)
        Task.__init__(self, tokenizer=tokenizer, max_seq_length=max_seq_length,
                      data_dir=data_dir, files=files,
                      **{k: v for k, v in given.items() if v is not None})
        self.text_column = text_column or self.default_text_column
        self.text_b_column = text_b_column or self.default_text_b_column
        self.label_column = label_column or self.default_label_column
        self.id_column = id_column or self.default_id_column
        self._labels = ([str(label) for label in label_list] if label_list
                        else list(self.fixed_labels) if self.fixed_labels else None)

    # ------------------------------------------------------------------ labels
    @property
    def labels(self) -> Optional[List[str]]:
        """The labels (index = label id): fixed, --label_list, or the train file's sorted;
        [] while there is no train file to read them from (build_head then refuses)."""
        if self.regression:
            return None
        if self._labels is None:
            if not (self.files.get("train") or self.data_dir):
                return []
            self._labels = sorted({e.label for e in self._read_split("train", check=False)})
        return self._labels

    @property
    def is_regression(self) -> bool:
        return self.regression

    def build_head(self, config):
        if not self.is_regression and not self.labels:
            raise TaskDataError(f"{self.name}: no labels to size the classifier; pass "
                                f"--train_file (its labels, sorted) or --label_list (a "
                                f"fine-tuned model dir's task_config.json lists its labels)")
        return super().build_head(config)

    # ------------------------------------------------------------------ reading
    def default_file(self, split: str) -> str:
        return self._default_paths(split)[0]

    def _default_paths(self, split: str) -> List[str]:
        names = list(self.default_files.get(split, ()))
        if not names:
            raise TaskDataError(f"{self.name}: no file for the {split} split; pass "
                                f"--{'validation' if split == 'dev' else split}_file")
        present = [os.path.join(self.data_dir, n) for n in names
                   if tf.io.gfile.exists(os.path.join(self.data_dir, n))]
        if not present:
            return [os.path.join(self.data_dir, names[0])]  # named as missing when read
        return present if split == "train" and self.combine_train_files else present[:1]

    def split_paths(self, split: str) -> List[str]:
        if self.files.get(split) or not self.data_dir:
            return [self.split_file(split)]
        return self._default_paths(split)

    def get_examples(self, split: str) -> List[RowExample]:
        if split not in ("train", "dev", "test"):
            raise ValueError(f"{self.name}: unknown split {split!r} (train, dev or test)")
        return self._read_split(split, check=True)

    def _read_split(self, split: str, check: bool) -> List[RowExample]:
        examples = []
        for path in self.split_paths(split):
            examples += require_examples(self._read_file(path, split, check), path, split,
                                         self._expected())
        return examples

    def _expected(self) -> str:
        columns = [self.text_column, self.text_b_column, self.label_column]
        return "rows with the columns " + ", ".join(c for c in columns if c)

    def _read_file(self, path: str, split: str, check: bool) -> List[RowExample]:
        hint = (f"--data_dir must hold the {self.name} files "
                f"({', '.join(n for names in self.default_files.values() for n in names)})"
                if self.default_files else "check --train_file, --validation_file, "
                "--test_file")
        rows = read_rows(path, hint)
        id_name = row_id(rows, self.id_column)
        examples = []
        for index, row in enumerate(rows):
            label = None
            if split != "test" or row.has(self.label_column):
                raw = row.get(self.label_column)
                if str(raw).strip() in self.skip_labels:
                    continue
                label = self._parse_label(raw, row.source, check)
            examples.append(RowExample(
                guid=str(row.get(id_name)) if id_name else str(index),
                text_a=_text(row.get(self.text_column)),
                text_b=(_text(row.get(self.text_b_column)) if self.text_b_column
                        else None),
                label=label, source=row.source, id_name=id_name or ""))
        return examples

    def _parse_label(self, value, where: str, check: bool = True):
        if self.regression:
            try:
                number = float(value)
            except (TypeError, ValueError):
                number = float("nan")
            if isinstance(value, bool) or number != number:
                raise TaskDataError(f"{where}: label {value!r} is not a number; "
                                    f"{self.name} needs a number in column "
                                    f"{self.label_column!r}")
            return number
        label = _text(value).strip()
        if check and label not in self.labels:
            given = ("--label_list" if self.options.get("label_list") else
                     "its labels" if self.fixed_labels else "the labels of --train_file")
            raise TaskDataError(f"{where}: label {label!r} is not one of {given} "
                                f"{self.labels}; fix the row or pass --label_list")
        return label

    # ------------------------------------------------------------------ results
    def evaluate(self, predictions, examples) -> Dict[str, float]:
        labels = [e.label for e in examples]
        if len(predictions) != len(labels):
            raise ValueError(f"{len(predictions)} predictions for {len(labels)} examples")
        scores = {
            "accuracy": lambda: metrics_lib.accuracy(labels, predictions),
            "macro_f1": lambda: metrics_lib.macro_f1(labels, predictions),
            "pearson": lambda: metrics_lib.pearson(labels, predictions),
            "spearman": lambda: metrics_lib.spearman(labels, predictions),
            # KLUE-STS: F1 of "similar" (score >= 3.0) on both sides
            "f1": lambda: metrics_lib.binary_f1(
                [float(v) >= 3.0 for v in labels], [float(v) >= 3.0 for v in predictions],
                positive=True)}
        return {name: scores[name]() for name in self.metric_names}

    def write_predictions(self, predictions, examples, output_dir: str) -> List[str]:
        """OUTPUT_DIR/predictions.tsv (.jsonl for JSON input): one row per example."""
        if not examples:
            return []
        values = [round(float(p), 6) if self.regression else p for p in predictions]
        path = prediction_file(output_dir, file_of(examples[0].source))
        return [write_prediction_rows(path, examples[0].id_name or "index",
                                      [e.guid for e in examples], values)]


class TextRegressionTask(TextClassificationTask):
    """`--task_name=regression`: one text or a pair -> a number (mean squared error)."""

    name = "regression"
    regression = True
    metric_names = ("pearson", "spearman")
    primary_metric = "pearson"


def _text(value) -> str:
    """A text field: a JSON null is the empty text, numbers become their spelling."""
    return "" if value is None else value if isinstance(value, str) else str(value)


# ------------------------------------------------------------------- the Korean tasks
class _NamedTask:
    """The named tasks take the file flags and --label_list, not other columns."""

    option_names = ("label_list",)


class NsmcTask(_NamedTask, TextClassificationTask):
    """NSMC (e9t/nsmc): `id, document, label` (0 negative, 1 positive); accuracy."""

    name = "nsmc"
    fixed_labels = ["0", "1"]
    default_text_column, default_label_column, default_id_column = "document", "label", "id"
    default_files = {"train": ("ratings_train.txt",),
                     "dev": ("ratings_dev.txt", "ratings_test.txt"),
                     "test": ("ratings_test.txt",)}
    metric_names = ("accuracy",)


class KorStsTask(_NamedTask, TextRegressionTask):
    """KorSTS (kakaobrain/KorNLUDatasets): `genre, filename, year, id, score, sentence1,
    sentence2`; Pearson and Spearman."""

    name = "korsts"
    default_text_column, default_text_b_column = "sentence1", "sentence2"
    default_label_column, default_id_column = "score", "id"
    default_files = {"train": ("sts-train.tsv",), "dev": ("sts-dev.tsv",),
                     "test": ("sts-test.tsv",)}


class KorNliTask(_NamedTask, TextClassificationTask):
    """KorNLI (kakaobrain/KorNLUDatasets): `sentence1, sentence2, gold_label`; trained on
    the MultiNLI and SNLI translations, scored on XNLI's; accuracy."""

    name = "kornli"
    fixed_labels = ["entailment", "neutral", "contradiction"]
    default_text_column, default_text_b_column = "sentence1", "sentence2"
    default_label_column = "gold_label"
    default_files = {"train": ("multinli.train.ko.tsv", "snli_1.0_train.ko.tsv"),
                     "dev": ("xnli.dev.ko.tsv",), "test": ("xnli.test.ko.tsv",)}
    combine_train_files = True
    skip_labels = ("-",)
    metric_names = ("accuracy",)


class KlueNliTask(_NamedTask, TextClassificationTask):
    """KLUE-NLI: official JSON (guid, premise, hypothesis, gold_label); accuracy."""

    name = "klue-nli"
    fixed_labels = ["entailment", "neutral", "contradiction"]
    default_text_column, default_text_b_column = "premise", "hypothesis"
    default_label_column, default_id_column = "gold_label", "guid"
    default_files = {"train": ("klue-nli-v1.1_train.json",),
                     "dev": ("klue-nli-v1.1_dev.json",), "test": ("klue-nli-v1.1_dev.json",)}
    metric_names = ("accuracy",)


class KlueStsTask(_NamedTask, TextRegressionTask):
    """KLUE-STS: official JSON (guid, sentence1, sentence2, labels: {label, real-label,
    binary-label}); trained and scored on `real-label` as KLUE's baseline: Pearson,
    Spearman and the F1 of "similar" (>= 3.0) on both sides (KLUE's `f1`)."""

    name = "klue-sts"
    default_text_column, default_text_b_column = "sentence1", "sentence2"
    default_label_column, default_id_column = "labels.real-label", "guid"
    default_files = {"train": ("klue-sts-v1.1_train.json",),
                     "dev": ("klue-sts-v1.1_dev.json",), "test": ("klue-sts-v1.1_dev.json",)}
    metric_names = ("pearson", "spearman", "f1")


class KlueYnatTask(_NamedTask, TextClassificationTask):
    """KLUE-YNAT (topic of a news headline): official JSON (guid, title, label, ...);
    macro F1 over the seven topics."""

    name = "klue-ynat"
    fixed_labels = ["IT과학", "경제", "사회", "생활문화", "세계", "스포츠", "정치"]
    default_text_column, default_label_column, default_id_column = "title", "label", "guid"
    default_files = {"train": ("ynat-v1.1_train.json",), "dev": ("ynat-v1.1_dev.json",),
                     "test": ("ynat-v1.1_dev.json",)}
    metric_names = ("macro_f1",)
    primary_metric = "macro_f1"
