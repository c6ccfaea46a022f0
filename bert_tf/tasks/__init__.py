"""Fine-tuning tasks: one Task object per task (see bert_tf/tasks/base.py).

`TASKS` maps a `--task_name` (lower case, as the original run_classifier spells them)
to "module:Class". The classes are imported only when asked for, so reading one task's
data does not import every other task's code. `make_task` makes one (`task_from_config`:
the one a fine-tuned model dir records).

>>> type(make_task("SST-2")).__name__
'Sst2Task'
>>> sorted(TASKS)[:3]
['classification', 'cola', 'conll2003']
"""

import dataclasses
import importlib
from typing import TYPE_CHECKING, Mapping, Optional

from bert_tf.core.errors import UsageError

if TYPE_CHECKING:  # tasks.base imports Keras: not at flag parsing
    from bert_tf.tasks.base import Task

TASKS = {
    "cola": "bert_tf.tasks.glue:ColaTask",
    "sst-2": "bert_tf.tasks.glue:Sst2Task",
    "mrpc": "bert_tf.tasks.glue:MrpcTask",
    "sts-b": "bert_tf.tasks.glue:StsbTask",
    "qqp": "bert_tf.tasks.glue:QqpTask",
    "mnli": "bert_tf.tasks.glue:MnliTask",
    "qnli": "bert_tf.tasks.glue:QnliTask",
    "rte": "bert_tf.tasks.glue:RteTask",
    "wnli": "bert_tf.tasks.glue:WnliTask",
    "conll2003": "bert_tf.tasks.ner:Conll2003NerTask",
    "ner": "bert_tf.tasks.ner:Conll2003NerTask",
    "swag": "bert_tf.tasks.swag:SwagTask",
    "squad": "bert_tf.tasks.squad:SquadTask",
    # the user's own files
    "classification": "bert_tf.tasks.classification:TextClassificationTask",
    "regression": "bert_tf.tasks.classification:TextRegressionTask",
    "token-classification": "bert_tf.tasks.token_classification:TokenClassificationTask",
    # Korean benchmarks, on their official files
    "nsmc": "bert_tf.tasks.classification:NsmcTask",
    "korsts": "bert_tf.tasks.classification:KorStsTask",
    "kornli": "bert_tf.tasks.classification:KorNliTask",
    "klue-nli": "bert_tf.tasks.classification:KlueNliTask",
    "klue-sts": "bert_tf.tasks.classification:KlueStsTask",
    "klue-ynat": "bert_tf.tasks.classification:KlueYnatTask",
    "klue-ner": "bert_tf.tasks.token_classification:KlueNerTask",
}

# Spellings people use for the same GLUE tasks (sst2, stsb, ...).
_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "sts": "sts-b", "conll": "conll2003",
            "kluenli": "klue-nli", "kluests": "klue-sts", "klueynat": "klue-ynat",
            "ynat": "klue-ynat", "kluener": "klue-ner",
            "tokenclassification": "token-classification"}


def canonical_task_name(name: str) -> str:
    key = name.strip().lower().replace("_", "-")
    key = _ALIASES.get(key.replace("-", ""), key)
    if key not in TASKS:
        raise UsageError(f"--task_name: unknown task {name!r}; known tasks: "
                         f"{', '.join(sorted(TASKS))}")
    return key


def _task_class(name: str):
    module, cls = TASKS[canonical_task_name(name)].split(":")
    return getattr(importlib.import_module(module), cls)


def make_task(name: str, tokenizer=None, max_seq_length: Optional[int] = None, *,
              data_dir: Optional[str] = None, files: Optional[Mapping[str, str]] = None,
              **options) -> "Task":
    """THE way to make a Task: the one `--task_name=name` names (any spelling
    `canonical_task_name` takes), with `options` its own (`option_names`); max_seq_length
    None is the task's `default_max_seq_length`. Making one reads no data, so
    `make_task(name).primary_metric` is how to ask a task what it declares.

    >>> task = make_task("SQuAD")
    >>> type(task).__name__, task.max_seq_length, task.huggingface_class
    ('SquadTask', 384, 'BertForQuestionAnswering')
    """
    return _task_class(name)(tokenizer=tokenizer, max_seq_length=max_seq_length,
                             data_dir=data_dir, files=files, **options)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A task as finetune and create_finetuning_data name it: `--task_name`, its data
    (`--data_dir`, SQuAD's `--train_file` / `--predict_file`) and options (every task
    option flag; each task takes those of its `option_names`, e.g. SQuAD's doc_stride).
    The task itself: `make_task(spec.task_name, tokenizer, **spec.task_arguments(length))`.

    >>> spec = TaskSpec("sst2", data_dir="glue/SST-2", options={"doc_stride": 128})
    >>> spec.task_arguments(64)
    {'max_seq_length': 64, 'data_dir': 'glue/SST-2', 'files': {}}
    """
    task_name: str
    data_dir: Optional[str] = None
    train_file: Optional[str] = None
    predict_file: Optional[str] = None
    options: Mapping = dataclasses.field(default_factory=dict)
    validation_file: Optional[str] = None
    test_file: Optional[str] = None

    def files(self) -> dict:
        """Split -> file given explicitly: --train_file, --validation_file, --test_file;
        SQuAD's --predict_file serves dev and test when those two are not given."""
        return {k: v for k, v in (("train", self.train_file),
                                  ("dev", self.validation_file or self.predict_file),
                                  ("test", self.test_file or self.predict_file)) if v}

    def task_arguments(self, max_seq_length: Optional[int],
                       recorded: Optional[dict] = None) -> dict:
        """`make_task`'s keyword arguments for these flags at `max_seq_length` (None: the
        task's own, `Task.sequence_length`): the data
        and the task's own options, after the task's cross-flag check (`check_options`:
        a UsageError naming the flags, before any data is read).

        `recorded`: the task_config.json of --init_checkpoint's dir. When it is this
        task's, the options the flags leave unset are its (the columns, the layout),
        and so are its labels when no training data is given: a fine-tuned dir predicts
        a --test_file with the labels and reader it was trained with.

        >>> spec = TaskSpec("classification", test_file="t.tsv", options={"label_list": None})
        >>> spec.task_arguments(64, {"task_name": "classification", "label_list": ["b", "a"],
        ...                          "text_column": "review"})["label_list"]
        ['b', 'a']
        """
        cls = _task_class(self.task_name)
        options = {k: v for k, v in self.options.items() if k in cls.option_names}
        if recorded and _same_task(recorded.get("task_name"), self.task_name):
            training_data = self.data_dir or self.train_file
            for name in cls.option_names:
                if (options.get(name) is None and recorded.get(name) is not None
                        and not (name == "label_list" and training_data)):
                    options[name] = recorded[name]
        max_seq_length = cls.sequence_length(max_seq_length)
        cls.check_options(max_seq_length, **options)
        return dict(max_seq_length=max_seq_length, data_dir=self.data_dir,
                    files=self.files(), **options)


def _same_task(recorded_name: Optional[str], name: str) -> bool:
    try:
        return canonical_task_name(recorded_name or "") == canonical_task_name(name)
    except UsageError:
        return False


def task_from_config(task_config: dict, tokenizer=None, **data) -> "Task":
    """The task a fine-tuned model dir's task_config.json records (`Task.task_config`):
    `make_task` with the recorded length and options; `data`: its `data_dir` / `files`
    (to read the task's examples again, e.g. to score an export on dev).

    >>> task_from_config(make_task("mnli", max_seq_length=64).task_config()).max_seq_length
    64
    """
    options = {k: task_config[k] for k in _task_class(task_config["task_name"]).option_names
               if k in task_config}
    return make_task(task_config["task_name"], tokenizer, task_config.get("max_seq_length"),
                     **data, **options)
