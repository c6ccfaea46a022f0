"""The Task base: what every task in `tasks.TASKS` declares for its callers (finetune,
export, the checkpoint converters read these attributes and never probe for them), and
the one way to make a task."""

import pytest

from bert_tf import tasks
from bert_tf.checkpoints.names import TASK_HEAD_MAPPINGS
from bert_tf.core.errors import UsageError
from bert_tf.tasks.base import Task


@pytest.mark.parametrize("name", sorted(tasks.TASKS))
def test_every_task_declares_what_its_callers_read(name):
    task = tasks.make_task(name)
    # the file write_predictions writes, in the output dir itself
    assert task.submission_name and "/" not in task.submission_name
    # a transformers class whose head is this task's (convert_checkpoint both ways)
    assert task.huggingface_class in TASK_HEAD_MAPPINGS
    # its own serving signatures (export), not the base's refusal
    assert type(task).serving_module is not Task.serving_module
    assert isinstance(task.default_max_seq_length, int)
    assert 3 <= task.default_max_seq_length <= 512
    assert task.max_seq_length == task.default_max_seq_length  # the length when none given
    # num_choices is the extra axis the features (and so the records) carry
    assert isinstance(task.num_choices, int) and task.num_choices >= 1
    shape, _ = task.feature_spec()["input_word_ids"]
    assert list(shape) == ([] if task.num_choices == 1 else [task.num_choices]) + [
        task.max_seq_length]
    assert task.primary_metric and task.text_input_names


def test_declared_values_of_the_tasks_that_differ():
    assert tasks.make_task("squad").default_max_seq_length == 384  # as run_squad
    assert tasks.make_task("swag").num_choices == 4
    assert tasks.make_task("sts-b").huggingface_class == "BertForSequenceClassification"
    assert tasks.make_task("ner").submission_name == "conll2003_predictions.txt"


def test_a_task_without_serving_signatures_says_to_export_the_encoder():
    class Plain(Task):
        name = "plain"

    with pytest.raises(UsageError, match="'plain': Plain has no serving_module.*encoder"):
        Plain().serving_module(None, None, 8)


def test_task_spec_gives_the_task_its_own_options_after_the_cross_flag_check():
    flags = {"doc_stride": 64, "max_query_length": 16, "n_best_size": 20,
             "max_answer_length": 30, "version_2_with_negative": False,
             "null_score_diff_threshold": 0.0}
    squad = tasks.TaskSpec("squad", predict_file="dev.json", options=flags)
    task = tasks.make_task("squad", **squad.task_arguments(64))
    assert (task.doc_stride, task.max_query_length, task.files) == (
        64, 16, {"dev": "dev.json", "test": "dev.json"})
    assert tasks.TaskSpec("sst-2", options=flags).task_arguments(64) == {
        "max_seq_length": 64, "data_dir": None, "files": {}}  # SQuAD's flags dropped
    with pytest.raises(UsageError, match="--max_seq_length=19"):
        squad.task_arguments(19)


def test_task_from_config_is_make_task_with_the_recorded_options():
    made = tasks.make_task("squad", max_seq_length=96, doc_stride=32,
                           version_2_with_negative=True)
    again = tasks.task_from_config(made.task_config())
    assert again.task_config() == made.task_config()
    assert (type(again), again.doc_stride, again.version_2_with_negative) == (
        type(made), 32, True)
