"""SWAG: the official csv layout, errors, four (context, ending) pairs, the choice head."""

import csv

import numpy as np
import pytest

from bert_tf.model.encoder import BertEncoder
from bert_tf.tasks import make_task
from bert_tf.tasks.base import TaskDataError
from tests.helpers import tiny_config

HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
          "ending0", "ending1", "ending2", "ending3", "label"]
ROWS = [
    ["0", "anetv_jkn6uvmqwh4", "3416", "Members of the procession walk down the street "
     "holding small horn brass instruments. A drum line", "Members of the procession walk "
     "down the street holding small horn brass instruments.", "A drum line", "gold",
     "passes by walking down the street playing their instruments.",
     "has heard approaching them.", "arrives and they're outside dancing and asleep.",
     "turns the lead singer watches the performance.", "0"],
    ["1", "lsmdc3001", "17", "He, sits. Someone", "He, sits.", "Someone", "gen",
     'says "hi, there".', "stands.", "leaves, quickly.", "smiles.", "3"],
]


def write_csv(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def test_reads_official_layout_with_quotes_and_commas(tmp_path):
    write_csv(tmp_path / "train.csv", HEADER, ROWS)
    examples = make_task("swag", data_dir=str(tmp_path)).get_examples("train")
    assert len(examples) == 2
    first, second = examples
    assert first.context.startswith("Members of the procession")
    assert first.start_ending == "A drum line"
    assert first.endings[0] == "passes by walking down the street playing their instruments."
    assert (first.label, first.guid) == (0, "0")
    assert second.endings == ['says "hi, there".', "stands.", "leaves, quickly.", "smiles."]
    assert second.label == 3
    # the test file has no label column; the layout without the unnamed index reads too
    write_csv(tmp_path / "test.csv", HEADER[1:-1], [r[1:-1] for r in ROWS])
    test = make_task("swag", data_dir=str(tmp_path)).get_examples("test")
    assert [e.label for e in test] == [None, None] and test[1].guid == "1"


def test_errors_name_file_and_line(tmp_path):
    write_csv(tmp_path / "val.csv", HEADER, [ROWS[0], ROWS[1][:-1] + ["4"]])
    with pytest.raises(TaskDataError, match=r"val.csv:3: label '4' is not one of 0, 1, 2, 3"):
        make_task("swag", data_dir=str(tmp_path)).get_examples("dev")
    write_csv(tmp_path / "val.csv", HEADER, [ROWS[0], ROWS[1][:-2]])
    with pytest.raises(TaskDataError, match=r"val.csv:3: 10 columns, expected 12"):
        make_task("swag", data_dir=str(tmp_path)).get_examples("dev")
    write_csv(tmp_path / "val.csv", [h for h in HEADER if h != "ending3"],
              [r[:10] + r[11:] for r in ROWS])
    with pytest.raises(TaskDataError, match=r"val.csv:1: header lacks \['ending3'\]"):
        make_task("swag", data_dir=str(tmp_path)).get_examples("dev")


class PairTokenizer:
    """Records what it was asked to encode; ids count the words of each segment."""

    def __init__(self):
        self.calls = []

    def encode(self, texts_a, texts_b=None, max_seq_length=8):
        self.calls.append((list(texts_a), list(texts_b)))
        n = len(texts_a)
        ids = np.zeros((n, max_seq_length), np.int32)
        for i, (a, b) in enumerate(zip(texts_a, texts_b)):
            ids[i, :3] = [101, len(a.split()), len(b.split())]
        return {"input_word_ids": ids, "input_mask": (ids > 0).astype(np.int32),
                "input_type_ids": np.zeros_like(ids)}


def test_four_pairs_per_example_and_choice_head(tmp_path):
    write_csv(tmp_path / "train.csv", HEADER, ROWS)
    tokenizer = PairTokenizer()
    task = make_task("swag", data_dir=str(tmp_path), tokenizer=tokenizer, max_seq_length=8)
    examples = task.get_examples("train")
    features = task.convert_examples(examples, "train")
    texts_a, texts_b = tokenizer.calls[0]
    assert texts_a[4:8] == ["He, sits."] * 4
    assert texts_b[4:8] == ['Someone says "hi, there".', "Someone stands.",
                            "Someone leaves, quickly.", "Someone smiles."]
    assert features["input_word_ids"].shape == (2, 4, 8)
    assert features["input_word_ids"][1, :, 2].tolist() == [4, 2, 3, 2]
    assert features["label_ids"].tolist() == [0, 3]

    cfg = tiny_config(vocab_size=200, max_position_embeddings=512)
    encoder = BertEncoder(cfg)
    model = task.build_model(encoder)
    outputs = model(features, training=False)
    logits = np.asarray(outputs["logits"])
    assert logits.shape == (2, 4)
    # each choice is scored on its own pair: the same as running the pairs one by one
    flat = {k: features[k][1] for k in ("input_word_ids", "input_mask", "input_type_ids")}
    alone = np.asarray(model.task_head(encoder(flat))["logits"])
    np.testing.assert_allclose(logits[1], alone, rtol=1e-5, atol=1e-6)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(log_probs[0, 0] + log_probs[1, 3]) / 2
    assert float(task.loss(features, outputs)) == pytest.approx(expected, rel=1e-5)
    predictions = task.postprocess({"logits": np.array([[0, 1, 0, 0], [0, 0, 0, 2.0]])})
    assert predictions == [1, 3]
    assert task.evaluate(predictions, examples) == {"accuracy": 0.5}
    [path] = task.write_predictions(predictions, examples, str(tmp_path))
    assert open(path).read() == "index,prediction\n0,1\n1,3\n"


def test_serving_equals_host_postprocess(tmp_path):
    """The raw-text signature picks the ending postprocess picks, with the same logits."""
    import tensorflow as tf

    from bert_tf.text.tokenization import BertTokenizer
    from tests.helpers.tasks import tiny_task_model

    words = sorted({w for row in ROWS for text in row[3:11] for w in
                    text.lower().replace(".", " . ").replace(",", " , ").replace('"', ' " ')
                    .split()})
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
    tokenizer = BertTokenizer(str(vocab), do_lower_case=True)
    write_csv(tmp_path / "val.csv", HEADER, ROWS)
    task = make_task("swag", data_dir=str(tmp_path), tokenizer=tokenizer, max_seq_length=24)
    examples = task.get_examples("dev")
    model = tiny_task_model(task, len(words) + 5)
    features = task.convert_examples(examples, "dev")
    logits = model({k: features[k] for k in task.model_input_names})["logits"]
    module = task.serving_module(model, tokenizer, 24)
    got = module.serve_text(
        tf.constant([e.context for e in examples]),
        tf.constant([[f"{e.start_ending} {ending}".strip() for ending in e.endings]
                     for e in examples]))
    np.testing.assert_allclose(got["logits"], logits, atol=1e-5)
    assert got["label_id"].numpy().tolist() == task.postprocess({"logits": logits})
