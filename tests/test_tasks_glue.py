"""GLUE tasks: readers on the real files and on small official-layout files, errors,
features, head/loss, metrics and the submission files."""

import numpy as np
import pytest

from bert_tf.model.config import BertConfig
from bert_tf.model.encoder import BertEncoder
from bert_tf.tasks import canonical_task_name, make_task, task_from_config
from bert_tf.tasks.base import TaskDataError
from tests.helpers.tasks import tiny_task_model

TINY = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=32, max_position_embeddings=64)

# (task, GLUE folder, examples in train / dev / test) as the GLUE paper counts them
REAL_COUNTS = [
    ("cola", "CoLA", 8551, 1043, 1063),
    ("sst-2", "SST-2", 67349, 872, 1821),
    ("mrpc", "MRPC", 3668, 408, 1725),
    ("sts-b", "STS-B", 5749, 1500, 1379),
    ("qnli", "QNLI", None, 5463, 5463),
    ("rte", "RTE", 2490, 277, 3000),
    ("wnli", "WNLI", 635, 71, 146),
]


@pytest.mark.parametrize("name, folder, n_train, n_dev, n_test", REAL_COUNTS)
def test_real_glue_files_read_with_the_published_counts(shared_data, name, folder, n_train,
                                                        n_dev, n_test):
    task = make_task(name, data_dir=str(shared_data / "glue" / folder))
    splits = {"dev": n_dev, "test": n_test}
    if n_train:
        splits["train"] = n_train
    for split, count in splits.items():
        examples = task.get_examples(split)
        assert len(examples) == count, (name, split)
        if split == "test":
            assert [e.guid for e in examples[:3]] == ["0", "1", "2"]
            assert all(e.label is None for e in examples)
        elif task.is_regression:
            assert all(0.0 <= e.label <= 5.0 for e in examples)
        else:
            assert {e.label for e in examples} == set(task.label_list)
        pair = task.text_input_names == ("text", "text_b")
        assert all((e.text_b is not None) == pair for e in examples)


def test_real_file_quirks(shared_data):
    glue = shared_data / "glue"
    # MRPC: BOM stripped from the header, stray quotes kept verbatim (QUOTE_NONE)
    mrpc = make_task("mrpc", data_dir=str(glue / "MRPC")).get_examples("dev")
    assert mrpc[0].label == "1" and mrpc[0].text_b.startswith('" The foodservice')
    # CoLA has no header: its first line is an example
    cola = make_task("cola", data_dir=str(glue / "CoLA")).get_examples("dev")
    assert cola[0].text_a == "The sailors rode the breeze clear of the rocks."
    assert cola[-1].source.endswith("dev.tsv:1043")  # last line, no final newline
    stsb = make_task("sts-b", data_dir=str(glue / "STS-B")).get_examples("train")
    assert (stsb[1].text_a, stsb[1].label) == ("A man is playing a large flute.", 3.8)


def write(path, lines, bom=False):
    path.write_text(("\ufeff" if bom else "") + "\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_wrong_column_count_names_file_and_line(tmp_path):
    write(tmp_path / "train.tsv", ["index\tquestion\tsentence\tlabel",
                                   "0\tWho?\tHim.\tentailment",
                                   "1\tWhat?\tIt.\tnot_entailment\textra"])
    with pytest.raises(TaskDataError, match=r"train.tsv:3: 5 tab-separated columns, expected 4"):
        make_task("qnli", data_dir=str(tmp_path)).get_examples("train")
    # CoLA: 4 columns, no header
    write(tmp_path / "dev.tsv", ["gj04\t1\t\tGood.", "gj04\t0\tBad."])
    with pytest.raises(TaskDataError, match=r"dev.tsv:2: 3 tab-separated columns, expected 4"):
        make_task("cola", data_dir=str(tmp_path)).get_examples("dev")


def test_unknown_label_and_bad_score_are_refused(tmp_path):
    write(tmp_path / "dev.tsv", ["index\tsentence1\tsentence2\tlabel",
                                 "0\tA.\tB.\tentailment", "1\tA.\tB.\tneutral"])
    with pytest.raises(TaskDataError, match=r"dev.tsv:3: label 'neutral' is not a RTE label"):
        make_task("rte", data_dir=str(tmp_path)).get_examples("dev")
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    write(tmp_path / "train.tsv", [header, "0\tg\tf\t2012\t1\tn\tn\tA.\tB.\thigh"])
    with pytest.raises(TaskDataError, match=r"train.tsv:2: score 'high' is not a number"):
        make_task("sts-b", data_dir=str(tmp_path)).get_examples("train")
    with pytest.raises(TaskDataError, match="no such file"):
        make_task("sst-2", data_dir=str(tmp_path / "nowhere")).get_examples("train")


MNLI_TRAIN_HEADER = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\t"
                     "sentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\t"
                     "sentence2\tlabel1\tgold_label")
MNLI_DEV_HEADER = MNLI_TRAIN_HEADER.replace("label1\tgold_label",
                                            "label1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label")


def mnli_row(i, a, b, labels):
    return "\t".join([str(i), "1", "1a", "fiction", "(x)", "(y)", "(X)", "(Y)", a, b] + labels)


def test_mnli_and_qqp_small_official_files(tmp_path):
    write(tmp_path / "train.tsv", [MNLI_TRAIN_HEADER,
                                   mnli_row(0, "A man sleeps.", "A man is awake.",
                                            ["contradiction", "contradiction"])])
    write(tmp_path / "dev_matched.tsv", [MNLI_DEV_HEADER] + [
        mnli_row(i, "P.", "H.", ["neutral"] * 5 + [label])
        for i, label in enumerate(["neutral", "entailment"])])
    write(tmp_path / "dev_mismatched.tsv", [MNLI_DEV_HEADER,
                                            mnli_row(9, "P.", "H.", ["entailment"] * 6)])
    mnli = make_task("MNLI", data_dir=str(tmp_path))
    train = mnli.get_examples("train")
    assert (train[0].text_a, train[0].text_b, train[0].label) == (
        "A man sleeps.", "A man is awake.", "contradiction")
    dev = mnli.get_examples("dev")
    assert [(e.subset, e.label) for e in dev] == [
        ("matched", "neutral"), ("matched", "entailment"), ("mismatched", "entailment")]
    scores = mnli.evaluate(["neutral", "neutral", "entailment"], dev)
    assert scores == {"accuracy_matched": 0.5, "accuracy_mismatched": 1.0, "accuracy": 0.5}
    paths = mnli.write_predictions(["neutral", "neutral", "entailment"], dev, str(tmp_path))
    assert [p.rsplit("/", 1)[1] for p in paths] == ["MNLI-m.tsv", "MNLI-mm.tsv"]

    qqp_dir = tmp_path / "qqp"
    qqp_dir.mkdir()
    write(qqp_dir / "dev.tsv", ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
                                "7\t1\t2\tHow old?\tWhat age?\t1", "8\t3\t4\tWhy?\tWho?\t0"])
    write(qqp_dir / "test.tsv", ["id\tquestion1\tquestion2", "0\tHow old?\tWhat age?"])
    qqp = make_task("qqp", data_dir=str(qqp_dir))
    dev = qqp.get_examples("dev")
    assert [(e.text_a, e.text_b, e.label) for e in dev] == [
        ("How old?", "What age?", "1"), ("Why?", "Who?", "0")]
    assert qqp.evaluate(["1", "1"], dev) == {"accuracy": 0.5, "f1": pytest.approx(2 / 3)}
    test = qqp.get_examples("test")
    assert (test[0].guid, test[0].text_a, test[0].text_b) == ("0", "How old?", "What age?")


def test_metrics_per_task():
    cola = make_task("cola")
    examples = [type("E", (), {"label": label})() for label in ["1", "1", "0", "0"]]
    scores = cola.evaluate(["1", "0", "0", "0"], examples)
    assert scores["matthews_corr"] == pytest.approx(2 / np.sqrt(12))
    assert scores["accuracy"] == 0.75
    stsb = make_task("stsb")
    examples = [type("E", (), {"label": v})() for v in [1.0, 2.0, 3.0, 4.0]]
    scores = stsb.evaluate([10.0, 20.0, 40.0, 30.0], examples)
    assert scores["spearman"] == pytest.approx(0.8)
    assert set(scores) == {"pearson", "spearman"}


def test_submission_files(tmp_path, shared_data):
    task = make_task("sst-2", data_dir=str(shared_data / "glue" / "SST-2"))
    test = task.get_examples("test")[:3]
    [path] = task.write_predictions(["1", "0", "1"], test, str(tmp_path))
    assert path.endswith("/SST-2.tsv")
    assert (tmp_path / "SST-2.tsv").read_text() == "index\tprediction\n0\t1\n1\t0\n2\t1\n"
    stsb = make_task("sts-b", data_dir=str(shared_data / "glue" / "STS-B"))
    test = stsb.get_examples("test")[:2]
    stsb.write_predictions([4.12345, 0.5], test, str(tmp_path))
    assert (tmp_path / "STS-B.tsv").read_text() == "index\tprediction\n0\t4.123\n1\t0.500\n"


def test_task_names_and_config_round_trip():
    assert canonical_task_name("SST_2") == "sst-2"
    assert type(make_task("STSB")).__name__ == "StsbTask"
    with pytest.raises(ValueError, match="unknown task 'glue'"):
        canonical_task_name("glue")
    task = make_task("mnli", max_seq_length=64)
    config = task.task_config()
    assert config == {"task_name": "MNLI", "label_list": ["contradiction", "entailment",
                                                          "neutral"], "max_seq_length": 64}
    again = task_from_config(config)
    assert (type(again), again.max_seq_length) == (type(task), 64)


@pytest.mark.parametrize("name", ["mrpc", "sts-b"])
def test_head_outputs_and_loss(name):
    task = make_task(name, max_seq_length=8)
    model = task.build_model(BertEncoder(TINY))
    ids = np.array([[101, 2023, 102, 2008, 102, 0, 0, 0]] * 2, np.int32)
    batch = {"input_word_ids": ids, "input_mask": (ids > 0).astype(np.int32),
             "input_type_ids": np.array([[0, 0, 0, 1, 1, 0, 0, 0]] * 2, np.int32),
             "label_ids": (np.array([0.5, 4.0], np.float32) if task.is_regression
                           else np.array([0, 1], np.int32))}
    outputs = model(batch, training=False)
    logits = np.asarray(outputs["logits"])
    assert logits.shape == (2, 1 if task.is_regression else 2)
    loss = float(task.loss(batch, outputs))
    if task.is_regression:
        assert loss == pytest.approx(np.mean((logits[:, 0] - [0.5, 4.0]) ** 2), rel=1e-5)
    else:
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        assert loss == pytest.approx(-np.mean(log_probs[[0, 1], [0, 1]]), rel=1e-5)
    predictions = task.postprocess({"logits": logits})
    assert len(predictions) == 2
    names = sorted(v.path for v in model.task_head.weights)
    assert names == ["task_head/dense/bias", "task_head/dense/kernel"]


def test_features_with_the_real_tokenizer(shared_data):
    from bert_tf.text.tokenization import BertTokenizer

    tokenizer = BertTokenizer(shared_data / "vocab" / "bert-base-uncased-vocab.txt",
                              do_lower_case=True)
    task = make_task("mrpc", data_dir=str(shared_data / "glue" / "MRPC"), tokenizer=tokenizer,
                     max_seq_length=32)
    examples = task.get_examples("dev")[:6]
    features = task.convert_examples(examples, "dev", batch_size=4)  # two chunks
    expected = tokenizer.encode([e.text_a for e in examples], [e.text_b for e in examples],
                                max_seq_length=32)
    for key in ("input_word_ids", "input_mask", "input_type_ids"):
        assert features[key].dtype == np.int32 and features[key].shape == (6, 32)
        np.testing.assert_array_equal(features[key], np.asarray(expected[key]))
    assert features["label_ids"].tolist() == [int(e.label) for e in examples]
    test = task.convert_examples(task.get_examples("test")[:2], "test")
    assert "label_ids" not in test
    stsb = make_task("sts-b", tokenizer=tokenizer, max_seq_length=16)
    from bert_tf.tasks.glue import GlueExample

    labels = stsb.convert_examples([GlueExample("0", "a", "b", 3.8)], "dev")["label_ids"]
    assert labels.dtype == np.float32 and labels.tolist() == [pytest.approx(3.8)]


def test_mnli_test_predictions_include_the_diagnostic_set(tmp_path):
    mnli_dir = tmp_path / "MNLI"
    mnli_dir.mkdir()
    test_header = "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\t" \
                  "sentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2"
    for subset, i in (("matched", 0), ("mismatched", 1)):
        write(mnli_dir / f"test_{subset}.tsv", [test_header, mnli_row(i, "P.", "H.", [])])
    (tmp_path / "diagnostic").mkdir()
    write(tmp_path / "diagnostic" / "diagnostic.tsv",
          ["index\tsentence1\tsentence2", "0\tThe cat sat.\tThe cat did not sit."])
    mnli = make_task("MNLI", data_dir=str(mnli_dir))
    test = mnli.get_examples("test")
    assert [(e.subset, e.guid) for e in test] == [
        ("matched", "0"), ("mismatched", "1"), ("diagnostic", "0")]
    assert (test[2].text_a, test[2].text_b) == ("The cat sat.", "The cat did not sit.")
    paths = mnli.write_predictions(["neutral", "entailment", "contradiction"], test,
                                   str(tmp_path))
    assert [p.rsplit("/", 1)[1] for p in paths] == ["MNLI-m.tsv", "MNLI-mm.tsv", "AX.tsv"]
    assert (tmp_path / "AX.tsv").read_text().split("\n")[:2] == ["index\tprediction",
                                                                  "0\tcontradiction"]


@pytest.mark.parametrize("name,folder", [("mrpc", "MRPC"), ("sst-2", "SST-2")])
def test_serving_equals_host_postprocess(shared_data, name, folder):
    """The raw-text signature (in-graph tokenizer, cut to the longest row) gives the logits
    and labels of convert_examples + model + postprocess on the same real dev examples."""
    import tensorflow as tf

    from bert_tf.text.tokenization import BertTokenizer

    tokenizer = BertTokenizer(shared_data / "vocab" / "bert-base-uncased-vocab.txt",
                              do_lower_case=True)
    task = make_task(name, data_dir=str(shared_data / "glue" / folder), tokenizer=tokenizer,
                     max_seq_length=48)
    examples = task.get_examples("dev")[:24]
    model = tiny_task_model(task, tokenizer.vocab_size)
    features = task.convert_examples(examples, "dev")
    inputs = {k: features[k] for k in task.model_input_names}
    bias = model.task_head.weights[-1]  # centre the logits: both labels get predicted
    bias.assign(bias - np.median(model(inputs)["logits"], axis=0))
    logits = model(inputs)["logits"]
    want = task.postprocess({"logits": logits})
    assert len(set(want)) == 2

    module = task.serving_module(model, tokenizer, 48)
    texts = [tf.constant([e.text_a for e in examples])]
    if examples[0].text_b is not None:
        texts.append(tf.constant([e.text_b for e in examples]))
    got = module.serve_text(*texts)
    np.testing.assert_allclose(got["logits"], logits, atol=1e-5)
    assert [label.decode() for label in got["label"].numpy()] == want
    longest = int(inputs["input_mask"].sum(axis=1).max())  # the host features' longest row
    assert module.encode(*texts)["input_word_ids"].shape[1] == longest
