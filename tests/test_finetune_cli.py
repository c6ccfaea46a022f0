"""`python -m bert_tf.finetune` end to end on a tiny model: records from
create_finetuning_data, train, eval_results.json, GLUE submission file, resume, a
fine-tuned dir as --init_checkpoint (head restored, under MirroredStrategy), and an
init checkpoint of another size refused with both shapes named."""

import json
import os

import pytest

from bert_tf.model.config import BertConfig
from tests.helpers import make_model_dir, run_command, write_sst2_dir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = os.path.join(os.path.dirname(REPO), "shared", "data", "vocab",
                     "bert-base-uncased-vocab.txt")
TINY = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64)

@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A random tiny encoder dir (real uncased vocab) and an SST-2-format data dir."""
    if not os.path.exists(VOCAB):
        pytest.skip(f"{VOCAB} not present")
    root = tmp_path_factory.mktemp("finetune")
    make_model_dir(root / "init", VOCAB, BertConfig(**TINY))  # same weights on every run
    write_sst2_dir(root / "sst2", train_repeats=6)
    return root


COMMON = ["--task_name=SST-2", "--max_seq_length=16", "--eval_batch_size=5",
          "--predict_batch_size=4", "--steps_per_loop=5"]


@pytest.fixture(scope="module")
def trained(workspace):
    records = workspace / "records"
    made = run_command("data_prep.create_finetuning_data", "--task_name=SST-2",
                       f"--data_dir={workspace / 'sst2'}",
                       f"--init_checkpoint={workspace / 'init'}", "--max_seq_length=16",
                       f"--output_dir={records}", "--num_output_shards=2")
    assert made.returncode == 0, made.stderr[-3000:]
    meta = json.loads((records / "train.meta.json").read_text())
    assert (meta["num_examples"], meta["files"]) == (
        72, ["train-00000-of-00002.tf_record", "train-00001-of-00002.tf_record"])
    out = workspace / "out"
    result = run_command("bert_tf.finetune", *COMMON, f"--data_dir={workspace / 'sst2'}",
                         f"--init_checkpoint={workspace / 'init'}", f"--output_dir={out}",
                         f"--input_file={records}/train-*", "--do_train", "--do_eval",
                         "--do_predict", "--train_batch_size=8", "--learning_rate=2e-3",
                         "--num_train_epochs=8", "--warmup_proportion=0.1")
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result.stderr


def test_train_eval_predict(trained):
    out, log = trained
    assert "started fresh at step 0 from init_checkpoint" in log
    results = json.loads((out / "eval_results.json").read_text())
    # 72 records / batch 8 * 8 epochs; the toy sentiment split is learnt
    assert results["global_step"] == 72
    assert results["accuracy"] == 1.0
    assert results["eval_examples"] == 12
    lines = (out / "SST-2.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction"
    assert [line.split("\t")[0] for line in lines[1:]] == ["0", "1", "2", "3", "4"]
    assert [line.split("\t")[1] for line in lines[1:]] == ["1"] * 5
    task_config = json.loads((out / "task_config.json").read_text())
    assert task_config == {"task_name": "SST-2", "label_list": ["0", "1"],
                           "max_seq_length": 16, "do_lower_case": True}
    for name in ("bert_config.json", "vocab.txt", "tokenizer_config.json"):
        assert (out / name).exists()


def test_rerun_resumes_and_finetuned_dir_restores_its_head(trained, workspace):
    out, _ = trained
    first = json.loads((out / "eval_results.json").read_text())
    again = run_command("bert_tf.finetune", *COMMON, f"--data_dir={workspace / 'sst2'}",
                        f"--init_checkpoint={workspace / 'init'}", f"--output_dir={out}",
                        "--do_train", "--do_eval", "--train_batch_size=8", "--num_train_epochs=8",
                        "--learning_rate=2e-3")  # the same command: the same schedule
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from step 72" in again.stderr
    assert json.loads((out / "eval_results.json").read_text())["eval_loss"] == pytest.approx(
        first["eval_loss"], rel=1e-5)
    # the fine-tuned dir as init: config, vocab, casing and head come from it; two replicas
    other = workspace / "eval_only"
    result = run_command("bert_tf.finetune", *COMMON, f"--data_dir={workspace / 'sst2'}",
                         f"--init_checkpoint={out}", f"--output_dir={other}", "--do_eval",
                         "--distribution_strategy=mirrored")
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((other / "eval_results.json").read_text())
    assert results["accuracy"] == 1.0
    assert results["eval_loss"] == pytest.approx(first["eval_loss"], rel=1e-4)


def test_init_checkpoint_of_another_size_is_refused(workspace, tmp_path):
    smaller = dict(TINY, hidden_size=16, intermediate_size=32)
    config = tmp_path / "small.json"
    config.write_text(json.dumps(smaller))
    result = run_command("bert_tf.finetune", *COMMON, f"--data_dir={workspace / 'sst2'}",
                         f"--init_checkpoint={workspace / 'init'}", f"--bert_config_file={config}",
                         f"--output_dir={tmp_path / 'out'}", "--do_train")
    assert result.returncode != 0
    assert "has shape [32] in the checkpoint but [16] in the model" in result.stderr, \
        result.stderr[-2000:]
    assert "training examples" not in result.stderr  # refused before any data work
    assert "Traceback" not in result.stderr


def test_eval_only_from_a_model_without_this_head_is_refused(workspace, tmp_path):
    result = run_command("bert_tf.finetune", *COMMON, f"--data_dir={workspace / 'sst2'}",
                         f"--init_checkpoint={workspace / 'init'}",
                         f"--output_dir={tmp_path / 'out'}", "--do_eval")
    assert result.returncode != 0
    assert "would score a random head" in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_unknown_task_is_a_message(workspace, tmp_path):
    result = run_command("bert_tf.finetune", "--task_name=glue-foo",
                         f"--data_dir={workspace / 'sst2'}",
                         f"--init_checkpoint={workspace / 'init'}",
                         f"--output_dir={tmp_path / 'out'}", "--do_train")
    assert result.returncode != 0
    assert "unknown task 'glue-foo'" in result.stderr and "Traceback" not in result.stderr
