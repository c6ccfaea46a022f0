"""Fine-tuning tasks: one Task object per task (see bert_tf/tasks/base.py).

`TASKS` maps a `--task_name` (lower case, as the original run_classifier spells them)
to "module:Class". The classes are imported only when asked for, so reading one task's
data does not import every other task's code.

>>> get_task_class("SST-2").__name__
'Sst2Task'
>>> sorted(TASKS)[:3]
['cola', 'conll2003', 'mnli']
"""

import dataclasses
import importlib
from typing import Mapping, Optional

from bert_tf.errors import UsageError

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
}

# Spellings people use for the same GLUE tasks (sst2, stsb, ...).
_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "sts": "sts-b", "conll": "conll2003"}


def canonical_task_name(name: str) -> str:
    key = name.strip().lower().replace("_", "-")
    key = _ALIASES.get(key.replace("-", ""), key)
    if key not in TASKS:
        raise UsageError(f"--task_name: unknown task {name!r}; known tasks: "
                         f"{', '.join(sorted(TASKS))}")
    return key


def get_task_class(name: str):
    module, cls = TASKS[canonical_task_name(name)].split(":")
    return getattr(importlib.import_module(module), cls)


def make_task(name: str, **kwargs):
    """The Task for `--task_name=name`; kwargs go to its constructor."""
    return get_task_class(name)(**kwargs)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A task as finetune and create_finetuning_data name it: `--task_name`, its data
    (`--data_dir`, SQuAD's `--train_file` / `--predict_file`) and options (each task
    takes those of its `option_names`, e.g. SQuAD's doc_stride).

    >>> spec = TaskSpec("sst2", data_dir="glue/SST-2")
    >>> spec.task_class().__name__, spec.files()
    ('Sst2Task', {})
    """
    task_name: str
    data_dir: Optional[str] = None
    train_file: Optional[str] = None
    predict_file: Optional[str] = None
    options: Mapping = dataclasses.field(default_factory=dict)

    def task_class(self):
        return get_task_class(self.task_name)

    def files(self) -> dict:
        """Split -> file given explicitly (SQuAD): --predict_file serves dev and test."""
        return {k: v for k, v in (("train", self.train_file), ("dev", self.predict_file),
                                  ("test", self.predict_file)) if v}

    def make(self, tokenizer, max_seq_length: int):
        """The Task object, reading its data from `data_dir` / the files."""
        cls = self.task_class()
        options = {k: v for k, v in self.options.items() if k in cls.option_names}
        cls.check_options(max_seq_length, **options)
        return cls(tokenizer=tokenizer, max_seq_length=max_seq_length, data_dir=self.data_dir,
                   files=self.files(), **options)


def task_from_config(task_config: dict, tokenizer=None, **kwargs):
    """Rebuilds the task recorded in a fine-tuned model dir's task_config.json."""
    cls = get_task_class(task_config["task_name"])
    options = {k: task_config[k] for k in cls.option_names if k in task_config}
    options.update(kwargs)
    return cls(tokenizer=tokenizer, max_seq_length=task_config.get("max_seq_length", 128),
               **options)


def default_max_seq_length(name: str, fallback: int = 128) -> int:
    """The task's own default sequence length (SQuAD: 384, as the original run_squad).

        >>> default_max_seq_length("squad"), default_max_seq_length("sst-2")
        (384, 128)
    """
    import inspect

    parameter = inspect.signature(get_task_class(name).__init__).parameters.get("max_seq_length")
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return fallback
    return int(parameter.default)
