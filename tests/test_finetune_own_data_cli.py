"""`python -m bert_tf.finetune` end to end on Korean data with a tiny model: NSMC by name
(--data_dir), classification on the user's JSONL files and a predict-only run from the
fine-tuned dir (its labels and columns recorded), KLUE-NER on a character-level slice;
each export serves what the host predicted."""

import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.export import saved_model
from bert_tf.model import model_dir
from tests.helpers import first_lines, make_model_dir, run_command

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TINY = ["--max_seq_length=24", "--train_batch_size=8", "--eval_batch_size=8",
        "--predict_batch_size=8", "--learning_rate=1e-3", "--steps_per_loop=4",
        "--num_train_epochs=1", "--mixed_precision=float32"]


@pytest.fixture(scope="module")
def workspace(shared_data, tmp_path_factory):
    """NSMC and KLUE-NER slices, and a tiny encoder whose vocab is their characters."""
    from bert_tf.model.config import BertConfig

    root = tmp_path_factory.mktemp("korean")
    nsmc = root / "nsmc"
    nsmc.mkdir()
    train = first_lines(shared_data / "korean" / "nsmc_rebuilt" / "ratings_train.txt", 49)
    dev = first_lines(shared_data / "korean" / "nsmc_rebuilt" / "ratings_dev.txt", 17)
    (nsmc / "ratings_train.txt").write_text("\n".join(train) + "\n", encoding="utf-8")
    (nsmc / "ratings_dev.txt").write_text("\n".join(dev) + "\n", encoding="utf-8")
    (nsmc / "ratings_test.txt").write_text("\n".join(dev[:1] + dev[9:]) + "\n",
                                           encoding="utf-8")
    ner = (shared_data / "korean" / "klue" / "klue-ner-v1.1_dev.first3000.tsv").read_text(
        encoding="utf-8").split("\n\n")
    (root / "ner_train.tsv").write_text("\n\n".join(ner[:24]) + "\n", encoding="utf-8")
    (root / "ner_dev.tsv").write_text("\n\n".join(ner[24:32]) + "\n", encoding="utf-8")
    text = "\n".join(train + dev + ner[:32])
    chars = sorted({c for c in text.lower() if not c.isspace()})
    vocab = SPECIAL + chars + ["##" + c for c in chars]
    make_model_dir(root / "init", vocab, BertConfig(
        vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64), strip_accents=False)
    return root, train, dev


def finetune(*args):
    result = run_command("bert_tf.finetune", *TINY, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def served(out, tmp_path, **texts):
    path = saved_model.export_model_dir(model_dir.resolve(str(out)), str(tmp_path / "export"))
    fn = tf.saved_model.load(path).signatures[saved_model.SERVING_DEFAULT]
    return {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in texts.items()}).items()}


def test_nsmc_by_name_trains_evaluates_and_predicts(workspace):
    root, _, dev = workspace
    out = root / "nsmc_out"
    finetune("--task_name=nsmc", f"--data_dir={root / 'nsmc'}",
             f"--init_checkpoint={root / 'init'}", f"--output_dir={out}", "--do_train",
             "--do_eval", "--do_predict")
    results = json.loads((out / "eval_results.json").read_text())
    assert results["eval_examples"] == 16 and 0.0 <= results["accuracy"] <= 1.0
    assert results["global_step"] == 6  # 48 rows / 8
    lines = (out / "predictions.tsv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "id\tprediction"
    test_ids = [row.split("\t")[0] for row in dev[9:]]
    assert [line.split("\t")[0] for line in lines[1:]] == test_ids  # order and ids
    assert {line.split("\t")[1] for line in lines[1:]} <= {"0", "1"}
    config = json.loads((out / "task_config.json").read_text())
    assert (config["task_name"], config["label_list"]) == ("nsmc", ["0", "1"])


def test_own_jsonl_files_then_predict_from_the_fine_tuned_dir(workspace, tmp_path):
    root, train, dev = workspace

    def jsonl(name, rows, labelled=True):
        path = tmp_path / name
        path.write_text("".join(json.dumps(
            {"guid": f"g{r.split(chr(9))[0]}", "review": r.split("\t")[1],
             **({"stars": "high" if r.endswith("1") else "low"} if labelled else {})},
            ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        return path

    out = tmp_path / "out"
    finetune("--task_name=classification", f"--train_file={jsonl('train.jsonl', train[1:])}",
             f"--validation_file={jsonl('dev.jsonl', dev[1:])}", "--text_column=review",
             "--label_column=stars", "--label_list=low,high",
             f"--init_checkpoint={root / 'init'}", f"--output_dir={out}", "--do_train",
             "--do_eval")
    config = json.loads((out / "task_config.json").read_text())
    assert (config["label_list"], config["text_column"]) == (["low", "high"], "review")
    assert set(json.loads((out / "eval_results.json").read_text())) >= {"accuracy",
                                                                        "macro_f1"}
    # predict only: the fine-tuned dir gives the labels and columns; no train file
    test = jsonl("test.jsonl", dev[5:12], labelled=False)
    again = tmp_path / "predicted"
    finetune("--task_name=classification", f"--test_file={test}",
             f"--init_checkpoint={out}", f"--output_dir={again}", "--do_predict")
    rows = [json.loads(line) for line in open(again / "predictions.jsonl", encoding="utf-8")]
    assert [r["guid"] for r in rows] == [f"g{r.split(chr(9))[0]}" for r in dev[5:12]]
    got = served(out, tmp_path, text=np.array([r.split("\t")[1].encode() for r in dev[5:12]],
                                              dtype=object))
    assert [v.decode() for v in got["label"]] == [r["prediction"] for r in rows]


def test_klue_ner_on_a_character_level_slice(workspace, tmp_path):
    root, _, _ = workspace
    out = tmp_path / "ner"
    dev = root / "ner_dev.tsv"
    finetune("--task_name=klue-ner", f"--train_file={root / 'ner_train.tsv'}",
             f"--validation_file={dev}", f"--test_file={dev}",
             f"--init_checkpoint={root / 'init'}", f"--output_dir={out}", "--do_train",
             "--do_eval", "--do_predict")
    results = json.loads((out / "eval_results.json").read_text())
    assert {"entity_f1", "char_f1", "f1", "f1_PS"} <= set(results)
    from bert_tf.tasks.token_classification import read_char_level

    path = out / "predictions.tsv"
    predicted = read_char_level(str(path), path.read_text(encoding="utf-8"))
    gold = read_char_level(str(dev), dev.read_text(encoding="utf-8"))
    assert [(p.guid, p.text) for p in predicted] == [(g.guid, g.text) for g in gold]
    got = served(out, tmp_path, text=np.array([g.text.encode() for g in gold], dtype=object))
    assert sorted(got) == ["end_char", "entity_text", "entity_type", "num_entities",
                           "start_char"]
    from bert_tf.tasks.token_classification import char_entities

    for row, p in enumerate(predicted):
        n = int(got["num_entities"][row])
        assert [(t.decode(), int(s), int(e)) for t, s, e in zip(
            got["entity_type"][row, :n], got["start_char"][row, :n], got["end_char"][row, :n])
        ] == [(x["entity_type"], x["start_char"], x["end_char"])
              for x in char_entities(p.text, p.tags)]
