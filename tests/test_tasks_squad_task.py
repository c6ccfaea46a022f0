"""SquadTask through the Task interface and the finetune command, on a tiny model."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bert_tf.tasks import squad
from tests.helpers.squad import CTX1, VOCAB, make_qa, v1_data, v2_data, write_json

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_config():
    from bert_tf.model.config import BertConfig

    return BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=64, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)


def test_task_files_options_and_config(tmp_path, squad_tokenizer):
    from bert_tf import tasks

    task = tasks.make_task("squad", tokenizer=squad_tokenizer, data_dir=str(tmp_path),
                           max_seq_length=32, version_2_with_negative=True, doc_stride=7)
    assert task.split_file("train").endswith("train-v2.0.json")
    assert task.split_file("dev").endswith("dev-v2.0.json")
    with pytest.raises(Exception, match="dev-v2.0.json"):
        task.get_examples("dev")
    config = task.task_config()
    assert config["task_name"] == "squad" and config["doc_stride"] == 7
    again = tasks.task_from_config(config, squad_tokenizer)
    assert again.version_2_with_negative and again.doc_stride == 7
    assert again.max_seq_length == 32
    spec = task.feature_spec()
    assert spec["start_positions"] == ([], "int64")
    assert spec["input_word_ids"] == ([32], "int64")


def test_overfit_one_paragraph_then_answer(tmp_path, squad_tokenizer):
    """Train the tiny model on the training features; it must then answer them."""
    import keras
    import tensorflow as tf

    from bert_tf.model.encoder import BertEncoder

    keras.utils.set_random_seed(1)
    path = write_json(tmp_path / "train.json", v1_data())
    task = squad.SquadTask(tokenizer=squad_tokenizer, max_seq_length=24, doc_stride=4,
                           max_query_length=6, files={"train": path, "dev": path})
    train = task.get_examples("train")
    features = task.convert_examples(train, "train")
    model = task.build_model(BertEncoder(tiny_config()))
    assert sorted(model.checkpoint_items()) == ["encoder", "task_head"]
    inputs = {k: features[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
    labels = {k: features[k] for k in task.label_names}
    outputs = model(inputs)
    assert outputs["start_logits"].shape == features["input_word_ids"].shape
    first_loss = float(task.loss(labels, outputs))
    # Untrained, the loss is near log(seq) = log(24).
    assert abs(first_loss - np.log(24)) < 1.0
    optimizer = keras.optimizers.Adam(3e-3)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = task.loss(labels, model(inputs, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for _ in range(80):
        loss = step()
    assert float(loss) < 0.1 * first_loss

    dev = task.get_examples("dev")
    assert len(dev) == 4                                    # eval keeps the bad question
    dev_features = task.convert_examples(dev, "dev")
    dev_out = {k: np.asarray(v) for k, v in model({k: dev_features[k] for k in inputs}).items()}
    predictions = task.postprocess(dev_out, dev_features, dev)
    assert [p.text for p in predictions[:3]] == ["Café Müller", "1895", "later"]
    assert task.evaluate(predictions[:3], dev[:3]) == {"exact_match": 100.0, "f1": 100.0}
    paths = task.write_predictions(predictions, dev, str(tmp_path / "out"))
    assert len(paths) == 2
    written = json.loads((tmp_path / "out" / "predictions.json").read_text(encoding="utf-8"))
    assert written["first"] == "Café Müller"


def test_finetune_command_squad_v2(tmp_path, squad_vocab_file):
    """`finetune --task_name=squad --version_2_with_negative` end to end (2 steps)."""
    from bert_tf.model.encoder import BertEncoder
    from bert_tf.model.model_dir import write_model_dir

    init = tmp_path / "init"
    write_model_dir(str(init), tiny_config(), {"encoder": BertEncoder(tiny_config())},
                    vocab_file=squad_vocab_file, do_lower_case=True)
    train = write_json(tmp_path / "train.json", v2_data(), "v2.0")
    dev = write_json(tmp_path / "dev.json", v2_data() + [{"paragraphs": [{
        "context": CTX1, "qas": [make_qa("extra", "When?", "1895", CTX1.index("1895"))]}]}], "v2.0")
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "bert_tf.finetune", "--task_name=squad", f"--init_checkpoint={init}",
            f"--train_file={train}", f"--predict_file={dev}", f"--output_dir={out}",
            "--do_train", "--do_eval", "--version_2_with_negative", "--max_seq_length=32",
            "--doc_stride=8", "--max_query_length=8", "--train_batch_size=2",
            "--eval_batch_size=4", "--num_train_steps=2", "--steps_per_loop=1",
            "--null_score_diff_threshold=0.5"]
    # As a user runs it: a process of its own (the command defines its flags when run).
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO_ROOT, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads((out / "eval_results.json").read_text())
    for key in ("exact_match", "f1", "best_exact", "best_exact_thresh", "best_f1",
                "best_f1_thresh", "HasAns_exact", "NoAns_exact"):
        assert key in saved
    assert 0.0 <= saved["exact_match"] <= 100.0
    task_config = json.loads((out / "task_config.json").read_text())
    assert task_config["version_2_with_negative"] is True
    assert task_config["null_score_diff_threshold"] == 0.5
    predictions = json.loads((out / "eval_predictions" / "predictions.json").read_text())
    assert sorted(predictions) == ["extra", "neg", "pos"]
    odds = json.loads((out / "eval_predictions" / "null_odds.json").read_text())
    assert all((predictions[q] == "") == (odds[q] > 0.5) for q in odds)
