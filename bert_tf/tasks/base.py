"""The Task interface: one object per fine-tuning task (the TF Model Garden's pattern: one Task object per task).

A Task holds everything that differs between tasks -- the example reader, the
conversion of examples into fixed-size features, the head on top of the encoder, the
loss, the official metrics and the prediction writer -- so that `bert_tf.finetune`,
`data_prep.create_finetuning_data` and the one training loop stay task-agnostic.

The life of a task, as `bert_tf.finetune` drives it:

    task = Sst2Task(tokenizer=tok, max_seq_length=128, data_dir=".../SST-2")
    examples = task.get_examples("train")          # list of task-defined example objects
    features = task.convert_examples(examples, "train")
                                                   # dict name -> numpy array, first axis = feature
    model = task.build_model(encoder)              # TaskModel: inputs dict -> outputs dict
    loss = task.loss(batch_of_features, model(batch_of_features, training=True))
    outputs = trainer.predict(features, batch_size)   # numpy, dict name -> [n_features, ...]
    predictions = task.postprocess(outputs, features, examples)   # one per example
    task.evaluate(predictions, examples)           # {"accuracy": 0.93, ...}  official metrics
    task.write_predictions(predictions, examples, output_dir)     # e.g. OUTPUT_DIR/SST-2.tsv

Contract of each piece:

* `__init__(tokenizer, max_seq_length=None, data_dir=None, files=None, **options)`
  (made by `bert_tf.tasks.make_task(name, ...)`): no flags here; max_seq_length None is
  the task's `default_max_seq_length`. `files` maps a split to a file and overrides the
  file `data_dir` would give (`--train_file`, `--validation_file`, `--test_file`; SQuAD's
  `--predict_file`). `options` are the task's own settings,
  named in the class attribute `option_names` (SQuAD: doc_stride, max_query_length, ...;
  GLUE and NER: label_list, set by an import, not a flag); the CLI passes those flags. `tokenizer` is a `bert_tf.text.tokenization.BertTokenizer`
  (the commands pass `tasks.pre_split.host_tokenizer`'s: the same, or one that splits
  text as a kiwi-pretrained model's was; may be None for tasks used only to read examples
  or compute metrics).
* `get_examples(split)`: split is "train", "dev" or "test". Pure: same file, same list.
  Bad input raises `TaskDataError` naming file, line and what to do.
* `convert_examples(examples, split)`: deterministic; returns a dict of numpy arrays with
  the model inputs (`input_word_ids`, `input_mask`, `input_type_ids`, int32; shape
  [n, max_seq_length], or [n, choices, max_seq_length] for multiple choice), the labels
  named in `label_names` (when the split has labels) and any per-feature bookkeeping the
  task's `postprocess` needs (e.g. `example_index` for SQuAD windows). Only
  `model_input_names` + `label_names` go into the model / TFRecords (`feature_spec`);
  the rest stays on the host.
* `build_model(encoder)`: a `TaskModel`, a keras.Model with exactly two checkpoint
  children, `encoder` and `task_head` (the names `model_dir` uses). `task_head` is a Keras
  layer mapping the encoder's output dict to the task's output dict (float32 logits).
* `loss(features, outputs)`: scalar float32, the mean over the examples (or labelled
  tokens) of the local batch. The training loop divides by the replica count itself.
* `postprocess(outputs, features, examples)`: host-side numpy; one prediction per example
  (a label string, a float, a list of tags, an answer text ...).
* `evaluate(predictions, examples)`: dict metric name -> float, as the official
  evaluation defines them (this is what eval_results.json holds).
* `write_predictions(predictions, examples, output_dir)`: writes the task's submission
  files and returns their paths.
* `serving_module(model, tokenizer, max_seq_length, text_signatures)`: the exported
  signatures (a `serving.TaskServing`), next to the `postprocess` they equal.
* Declared per task (class attributes, defaults on `Task`): `submission_name`,
  `num_choices`, `default_max_seq_length`, `huggingface_class`, `primary_metric`,
  `text_input_names`, `raw_text_from_ids`; callers read them, never probe for them.
* `task_config()`: the JSON written to a fine-tuned model dir as `task_config.json`;
  `bert_tf.tasks.task_from_config(cfg, tokenizer)` rebuilds the same task from it
  (export_model uses that to rebuild the model before restoring `task_head`).

Example (a toy task; GLUE, NER, SWAG and SQuAD follow the same shape):

>>> import numpy as np
>>> from bert_tf.model.config import BertConfig
>>> from bert_tf.model.encoder import BertEncoder
>>> from bert_tf.tasks.glue import Sst2Task
>>> task = Sst2Task(tokenizer=None, max_seq_length=8)
>>> model = task.build_model(BertEncoder(BertConfig(vocab_size=30, hidden_size=8,
...     num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)))
>>> ids = np.array([[2, 5, 3, 0, 0, 0, 0, 0]], "int32")
>>> batch = {"input_word_ids": ids, "input_mask": (ids > 0).astype("int32"),
...          "input_type_ids": np.zeros_like(ids), "label_ids": np.array([1], "int32")}
>>> outputs = model(batch)
>>> outputs["logits"].shape
TensorShape([1, 2])
>>> float(task.loss(batch, outputs)) > 0
True
>>> sorted(model.checkpoint_items())
['encoder', 'task_head']
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from bert_tf.core import output_guard
from bert_tf.core.constants import ENCODER, MODEL_INPUTS, TASK_HEAD
from bert_tf.core.errors import BertTfError, UsageError
from bert_tf.layers.heads import ClassificationHead
from bert_tf.model import model_dir



class TaskDataError(BertTfError, ValueError):
    """Task data that cannot be read: names the file, the line and what to do."""


def read_task_text(path: str, missing_hint: str, encoding: str = "utf-8-sig") -> str:
    """The text of a task data file (local or gs://), or TaskDataError: a missing file
    (`missing_hint` says what the directory must hold) or bytes that are not UTF-8, named
    by line and byte.

        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "train.tsv")
        >>> _ = open(p, "wb").write(b"a\\tb\\ncaf\\xe9\\t1\\n")
        >>> try: read_task_text(p, "")
        ... except TaskDataError as e: print(str(e).split(": ", 1)[1])
        line 2, byte 3: not valid UTF-8 (invalid continuation byte); save the file as UTF-8
    """
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            data = f.read()
    except tf.errors.NotFoundError:
        raise TaskDataError(f"{path}: no such file; {missing_hint}") from None
    except tf.errors.OpError as e:  # a directory, no permission, ...
        raise TaskDataError(f"{path}: cannot read ({e.message})") from None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1)
        raise TaskDataError(f"{path}: line {line}, byte {column}: not valid UTF-8 "
                            f"({e.reason}); save the file as UTF-8") from None


def require_examples(examples: list, path: str, split: str, what: str) -> list:
    """`examples`, or TaskDataError when the file gave none (an empty or header-only
    split would otherwise fail later, far from its cause)."""
    if not examples:
        raise TaskDataError(f"{path}: no examples in this {split} file; expected {what}")
    return examples


class TaskModel(keras.Model):
    """Encoder + task head as one keras.Model; call(inputs dict) -> the head's outputs.

    Its checkpoint children are exactly `encoder` and `task_head` (model_dir's names).
    With `num_choices`, inputs are [batch, num_choices, seq]: they are flattened to
    [batch * num_choices, seq] for the encoder, and the head's outputs get the
    [batch, num_choices, ...] leading shape back (SWAG's multiple choice).
    """

    def __init__(self, encoder, task_head, num_choices=None, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.task_head = task_head
        self.num_choices = num_choices
        if not task_head.built:
            task_head.build()  # variables exist before the first call: restore can fill them
        self.built = True

    def call(self, inputs, training=None):
        return self.run(inputs, lambda x: self.encoder(x, training=training), training)

    def run(self, inputs, encode, training=None):
        """The forward pass with `encode` (model inputs -> the encoder's outputs) in the
        encoder's place: `call` passes the encoder, a serving module its inference
        encoder (`serving_graph.InferenceEncoder`)."""
        inputs = {k: inputs[k] for k in MODEL_INPUTS if k in inputs}
        if self.num_choices:
            seq = keras.ops.shape(inputs["input_word_ids"])[-1]
            inputs = {k: keras.ops.reshape(v, (-1, seq)) for k, v in inputs.items()}
        encoder_outputs = encode(inputs)
        outputs = self.task_head(encoder_outputs, training=training)
        if self.num_choices:
            outputs = {k: keras.ops.reshape(v, (-1, self.num_choices) + tuple(v.shape[1:]))
                       for k, v in outputs.items()}
        return outputs

    def checkpoint_items(self) -> Dict[str, Any]:
        """The root children of a fine-tuning checkpoint."""
        return {ENCODER: self.encoder, TASK_HEAD: self.task_head}


class Task:
    """Base class; see the module docstring for the contract of each method."""

    name: str = ""
    #: task-specific constructor options the CLI passes through (flag name == option name)
    option_names: Sequence[str] = ()
    #: keys of the features dict that hold labels (fed to `loss`, written to TFRecords)
    label_names: Sequence[str] = ("label_ids",)
    #: the model inputs (also TFRecord features); multiple choice has an extra axis
    model_input_names: Sequence[str] = MODEL_INPUTS
    #: the metric `sweep` and "best checkpoint" pick by (a key of `evaluate`'s dict)
    primary_metric: str = "accuracy"
    #: the raw-text inputs of an exported serving signature ("text", "text_b")
    text_input_names: Sequence[str] = ("text",)
    #: the file `write_predictions` writes in the output dir (the main one of several)
    submission_name: str = ""
    #: sequences per example: 1, or a multiple-choice task's choices (inputs
    #: [n, num_choices, max_seq_length]; a step costs num_choices sequences per example)
    num_choices: int = 1
    #: max_seq_length unless one is given (finetune, imports; SQuAD: 384 as run_squad)
    default_max_seq_length: int = 128
    #: the transformers class with the same head (`checkpoints.huggingface` import and
    #: export; keras-hub's classifier takes BertForSequenceClassification's), or None
    huggingface_class: Optional[str] = None
    #: training rows share texts (SQuAD: the questions on one paragraph): rows of one
    #: length then come from a few texts, so training batches are drawn at random and
    #: only cut to their length bucket (`data.finetuning.cut_to_bucket`), never grouped
    #: by length
    rows_share_text: bool = False
    #: the raw-text signature's outputs are the ids signature's on the packed text (no
    #: host logic: classification, regression), so an export that tokenizes in the model
    #: but cannot run that logic (`export_model --format=openvino --text_signatures`) can
    #: serve it; NER entities, SQuAD spans and multiple choice cannot
    raw_text_from_ids: bool = False

    def __init__(self, tokenizer=None, max_seq_length: Optional[int] = None,
                 data_dir: Optional[str] = None, files: Optional[Mapping[str, str]] = None,
                 **options):
        unknown = set(options) - set(self.option_names)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown options {sorted(unknown)}; "
                            f"known: {list(self.option_names)}")
        self.tokenizer = tokenizer
        self.max_seq_length = self.sequence_length(max_seq_length)
        self.data_dir = data_dir
        self.files = dict(files or {})
        self.options = options

    @classmethod
    def sequence_length(cls, max_seq_length: Optional[int] = None) -> int:
        """`max_seq_length`, else (None) the task's `default_max_seq_length`: the one
        place a run's length is decided when --max_seq_length is not given."""
        return int(cls.default_max_seq_length if max_seq_length is None else max_seq_length)

    @classmethod
    def check_options(cls, max_seq_length: int, **options) -> None:
        """Raises `errors.UsageError` naming the flags when `max_seq_length` and the task's
        options (flag values) cannot work together; called before any data is read
        (`tasks.TaskSpec.task_arguments`). Per-flag ranges are declared with the flags."""

    # ------------------------------------------------------------------ data
    @property
    def label_list(self) -> Optional[List[str]]:
        """The label strings (index = label id); None for regression / span tasks."""
        return None

    def split_file(self, split: str) -> str:
        """The file a split is read from: `files[split]`, else data_dir/<default name>."""
        if split in self.files and self.files[split]:
            return self.files[split]
        if not self.data_dir:
            raise TaskDataError(f"{self.name}: no file for split {split!r}; pass "
                                f"--data_dir (or the task's file flag)")
        return os.path.join(self.data_dir, self.default_file(split))

    def default_file(self, split: str) -> str:
        raise NotImplementedError

    def get_examples(self, split: str) -> list:
        raise NotImplementedError

    def convert_examples(self, examples: Sequence, split: str) -> Dict[str, np.ndarray]:
        raise NotImplementedError

    def feature_spec(self) -> Dict[str, tuple]:
        """TFRecord layout of a feature: name -> (shape, dtype) of `model_input_names`
        and `label_names` (what create_finetuning_data writes and data.finetuning reads)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ model
    def build_head(self, config):
        raise NotImplementedError

    def build_model(self, encoder):
        return TaskModel(encoder, self.build_head(encoder.config),
                         num_choices=self.num_choices if self.num_choices > 1 else None,
                         name=f"{self._slug()}_model")

    def loss(self, features: Mapping, outputs: Mapping):
        raise NotImplementedError

    def serving_module(self, model, tokenizer, max_seq_length: int,
                       text_signatures: bool = True):
        """The task's `serving.TaskServing` (its SavedModel signatures, which equal its
        `postprocess`); `bert_tf.export.saved_model` writes it. A task without one says so."""
        raise UsageError(f"task {self.name!r}: {type(self).__name__} has no serving_module "
                         f"(classification, regression, NER, SQuAD and multiple choice "
                         f"have one); export its encoder instead")

    def initialize(self, model: TaskModel, resolved) -> Optional[Any]:
        """Restores the run's start point into `model` from --init_checkpoint (`resolved`,
        a `model_dir.ResolvedModelDir`); the Trainer calls it only when --output_dir holds
        nothing to resume. The encoder, plus the head when the dir was fine-tuned on this
        very task (same labels). Returns the `model_dir.StartPoint`, or None without
        --init_checkpoint (random weights).
        """
        if not resolved.path:
            return None
        objects = {ENCODER: model.encoder}
        recorded = resolved.task_config
        if recorded:
            if (recorded.get("task_name", "").lower() == self.name.lower()
                    and recorded.get("label_list") == self.label_list):
                objects[TASK_HEAD] = model.task_head
            else:
                logging.info("init_checkpoint was fine-tuned on %s: using its encoder only",
                             recorded.get("task_name"))
        return model_dir.restore_start_point(resolved, objects)

    # ------------------------------------------------------------------ results
    def postprocess(self, outputs: Mapping[str, np.ndarray], features: Mapping,
                    examples: Sequence) -> list:
        raise NotImplementedError

    def evaluate(self, predictions: Sequence, examples: Sequence) -> Dict[str, float]:
        raise NotImplementedError

    def write_predictions(self, predictions: Sequence, examples: Sequence,
                          output_dir: str) -> List[str]:
        raise NotImplementedError

    def task_config(self) -> Dict[str, Any]:
        """What a fine-tuned model dir records so export can rebuild this task's model."""
        config = {"task_name": self.name, "label_list": self.label_list,
                  "max_seq_length": self.max_seq_length}
        if self.tokenizer is not None and hasattr(self.tokenizer, "do_lower_case"):
            config["do_lower_case"] = bool(self.tokenizer.do_lower_case)
            if getattr(self.tokenizer, "strip_accents", None) is not None:
                config["strip_accents"] = bool(self.tokenizer.strip_accents)
        config.update({k: v for k, v in self.options.items()})
        return config

    def _slug(self) -> str:
        return "".join(c if c.isalnum() else "_" for c in self.name.lower())


def write_tsv_lines(path: str, lines: Sequence[str]) -> str:
    output_guard.write_text(path, "\n".join(lines) + "\n")
    return path


def sparse_ce(labels, logits, weights=None):
    """Mean sparse softmax cross-entropy in float32, optionally weighted (0 = ignored)."""
    logits = keras.ops.cast(logits, "float32")
    labels = keras.ops.cast(labels, "int32")
    losses = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    if weights is None:
        return keras.ops.mean(losses)
    weights = keras.ops.cast(weights, "float32")
    # max(1, .) so a batch with no labelled token gives 0, not NaN.
    return keras.ops.sum(losses * weights) / keras.ops.maximum(keras.ops.sum(weights), 1.0)


@keras.saving.register_keras_serializable(package="bert_tf")
class TaskHead(ClassificationHead):
    """Dropout + dense on one encoder output: the GLUE, NER and SWAG heads.

    `input_key` picks `pooled_output` ([CLS] after the pooler: classification, regression,
    multiple choice) or `sequence_output` (per-token tagging); the result is returned
    as `{output_key: float32 logits}`.
    """

    def __init__(self, num_classes, hidden_size, input_key="pooled_output",
                 output_key="logits", **kwargs):
        super().__init__(num_classes=num_classes, hidden_size=hidden_size, **kwargs)
        self.input_key = input_key
        self.output_key = output_key

    def call(self, encoder_outputs, training=None):
        return {self.output_key: super().call(encoder_outputs[self.input_key],
                                              training=training)}

    def get_config(self):
        config = super().get_config()
        config.update(input_key=self.input_key, output_key=self.output_key)
        return config


def make_head(config, num_classes: int, input_key: str = "pooled_output") -> TaskHead:
    """A TaskHead sized for `config` (dropout = the encoder's hidden dropout, as BERT)."""
    return TaskHead(num_classes=num_classes, hidden_size=config.hidden_size,
                    input_key=input_key, dropout_rate=config.hidden_dropout_prob,
                    initializer_range=config.initializer_range, name="task_head")
