"""Classification and regression on the user's own files (`--task_name=classification`,
`regression`) and the Korean tasks declared over them: the readers by extension on real
and small files, bad rows as one line naming file:line, label collection and order,
the predictions file, the metrics, and serving == host postprocessing."""

import json

import numpy as np
import pytest

from bert_tf.tasks import make_task, metrics, task_from_config
from bert_tf.tasks.base import TaskDataError
from bert_tf.tasks.text_files import read_rows
from tests.helpers import write_text as write
from tests.helpers.tasks import one_line_error


# ---------------------------------------------------------------------------- readers
def test_each_layout_by_extension(tmp_path):
    tsv = write(tmp_path / "a.tsv", 'id\ttext\tlabel\n7\t"quoted"\tpos\n\n8\t\tneg\n')
    csv = write(tmp_path / "a.csv", 'text,label\n"a, b",pos\n"two\nlines",neg\n')
    json_list = write(tmp_path / "a.json",
                      '[\n  {"guid": "g1", "text": "x", "label": "pos"},\n'
                      '  {"guid": "g2",\n   "text": null, "label": "neg"}\n]\n')
    jsonl = write(tmp_path / "a.jsonl", '{"text": "x", "label": 1}\n\n{"text": "y", '
                                        '"label": 0}\n')
    rows = read_rows(tsv)
    assert [r.values for r in rows] == [{"id": "7", "text": '"quoted"', "label": "pos"},
                                        {"id": "8", "text": "", "label": "neg"}]
    assert [r.source.rsplit(":", 1)[1] for r in rows] == ["2", "4"]  # blank line skipped
    rows = read_rows(csv)
    assert [(r.get("text"), r.source.rsplit(":", 1)[1]) for r in rows] == [
        ("a, b", "2"), ("two\nlines", "3")]
    rows = read_rows(json_list)
    assert [(r.get("guid"), r.source.rsplit(":", 1)[1]) for r in rows] == [("g1", "2"),
                                                                            ("g2", "3")]
    assert [r.source.rsplit(":", 1)[1] for r in read_rows(jsonl)] == ["1", "3"]
    # a .json file of one object a line (as Hugging Face's to_json writes) reads too
    assert len(read_rows(write(tmp_path / "lines.json", '{"a": 1}\n{"a": 2}\n'))) == 2


def test_bad_rows_are_one_line_naming_file_and_line(tmp_path):
    task = make_task("classification", files={
        "train": write(tmp_path / "train.tsv", "text\tlabel\na\tx\nb\ty\textra\n")})
    one_line_error(r"train.tsv:3: 3 tab-separated fields, the header has 2", task.get_examples,
                   "train")
    task = make_task("classification", files={
        "train": write(tmp_path / "t.jsonl", '{"text": "a", "label": "x"}\n{"label": "y"}\n')})
    one_line_error(r"t.jsonl:2: no column 'text' \(this row has: label\)", task.get_examples,
                   "train")
    task = make_task("regression", files={
        "train": write(tmp_path / "r.csv", "text,label\na,1.5\nb,high\n")})
    one_line_error(r"r.csv:3: label 'high' is not a number", task.get_examples, "train")
    task = make_task("classification", files={
        "train": write(tmp_path / "c.csv", "text,label\na,x\nb,y\n"),
        "dev": write(tmp_path / "d.csv", "text,label\na,x\nb,z\n")})
    one_line_error(r"d.csv:3: label 'z' is not one of the labels of --train_file \['x', 'y'\]",
                   task.get_examples, "dev")
    task = make_task("classification", files={"train": write(tmp_path / "bad.json",
                                                             '[{"text": "a"},\n {"text": }]')})
    one_line_error(r"bad.json:2: not valid JSON", task.get_examples, "train")
    task = make_task("classification", files={"train": write(tmp_path / "x.xlsx", "")})
    one_line_error(r"x.xlsx: unknown file type '.xlsx'", task.get_examples, "train")
    task = make_task("classification", files={"train": str(tmp_path / "none.tsv")})
    one_line_error(r"none.tsv: no such file", task.get_examples, "train")


def test_labels_sorted_from_train_or_fixed_by_label_list_and_recorded(tmp_path):
    files = {"train": write(tmp_path / "train.jsonl", "".join(
        json.dumps({"text": t, "label": label}) + "\n"
        for t, label in [("a", "neutral"), ("b", "bad"), ("c", "good"), ("", "bad")])),
        "test": write(tmp_path / "test.jsonl", '{"text": "q"}\n{"text": "r", "label": "good"}\n')}
    task = make_task("classification", files=files)
    assert task.label_list == ["bad", "good", "neutral"]
    assert task.task_config()["label_list"] == ["bad", "good", "neutral"]
    assert [e.text_a for e in task.get_examples("train")] == ["a", "b", "c", ""]  # empty kept
    assert [e.label for e in task.get_examples("test")] == [None, "good"]
    ordered = make_task("classification", files=files, label_list=["good", "neutral", "bad"])
    assert ordered.label_list == ["good", "neutral", "bad"]
    assert ordered._label_array(["bad", "good"]).tolist() == [2, 0]
    # export and a later predict rebuild the task from task_config.json, no train file
    again = task_from_config(ordered.task_config())
    assert again.label_list == ["good", "neutral", "bad"]
    with pytest.raises(TaskDataError, match="--label_list"):
        make_task("regression", label_list=["a"])
    with pytest.raises(TaskDataError, match="pass --train_file .* or --label_list"):
        make_task("classification").build_head(None)


def test_predictions_keep_test_order_and_ids(tmp_path):
    test_tsv = write(tmp_path / "test.tsv", "guid\ttext\nz9\tb\na1\ta\n")
    task = make_task("classification", files={"test": test_tsv}, label_list=["x", "y"])
    examples = task.get_examples("test")
    [path] = task.write_predictions(["y", "x"], examples, str(tmp_path / "out"))
    assert path.endswith("out/predictions.tsv")
    assert open(path).read() == "guid\tprediction\nz9\ty\na1\tx\n"
    # JSON input -> .jsonl; no id column -> the row's index; a given id column
    test_json = write(tmp_path / "test.json", '[{"text": "a", "n": 5}, {"text": "b", "n": 3}]')
    for id_column, expected in ((None, [("index", "0"), ("index", "1")]),
                                ("n", [("n", "5"), ("n", "3")])):
        task = make_task("regression", files={"test": test_json}, id_column=id_column)
        [path] = task.write_predictions([1.25, 4.0], task.get_examples("test"),
                                        str(tmp_path / f"out{id_column}"))
        rows = [json.loads(line) for line in open(path)]
        assert [(k, r[k]) for r in rows for k in r if k != "prediction"] == expected
        assert [r["prediction"] for r in rows] == [1.25, 4.0]


def test_metrics_by_hand():
    # a: tp 1, fp 2, fn 1 -> 2/5; b: tp 1, fp 1, fn 1 -> 1/2; c: tp 0, fn 1 -> 0
    labels, predictions = ["a", "a", "b", "b", "c"], ["a", "b", "b", "a", "a"]
    assert metrics.macro_f1(labels, predictions) == pytest.approx((0.4 + 0.5 + 0) / 3)
    task = make_task("classification", label_list=["a", "b", "c"])
    examples = [type("E", (), {"label": v}) for v in labels]
    assert task.evaluate(predictions, examples) == {"accuracy": 0.4,
                                                    "macro_f1": pytest.approx(0.3)}
    # KLUE-STS f1: "similar" is >= 3.0 on both sides; tp 1 (3.0 / 3.2), fp 1, fn 1 -> 0.5
    sts = make_task("klue-sts")
    gold = [type("E", (), {"label": v}) for v in (3.0, 4.5, 1.0, 0.2)]
    scores = sts.evaluate([3.2, 2.9, 3.5, 0.0], gold)
    assert scores["f1"] == pytest.approx(0.5)
    assert scores["pearson"] == pytest.approx(metrics.pearson([3.0, 4.5, 1.0, 0.2],
                                                              [3.2, 2.9, 3.5, 0.0]))
    assert set(make_task("klue-ynat").evaluate(["경제"], [type("E", (), {"label": "경제"})])
               ) == {"macro_f1"}


# ---------------------------------------------------------------- the Korean tasks
def test_korean_tasks_read_their_real_files(shared_data):
    korean = shared_data / "korean"
    nsmc = make_task("nsmc", data_dir=str(korean / "nsmc_rebuilt"))
    dev = nsmc.get_examples("dev")  # ratings_dev.txt: the rebuilt set has one
    assert len(dev) == 10000 and dev[0].source.endswith("ratings_dev.txt:2")
    assert (dev[0].guid, dev[0].label, dev[0].id_name) == ("8402282", "1", "id")
    assert {e.label for e in dev} == {"0", "1"}
    assert any(e.text_a == "" for e in nsmc.get_examples("train"))  # NSMC's empty reviews
    korsts = make_task("korsts", data_dir=str(korean / "korsts"))
    train = korsts.get_examples("train")
    assert len(train) == 5749 and all(0.0 <= e.label <= 5.0 for e in train)
    assert korsts.text_input_names == ("text", "text_b") and train[0].text_b
    kornli = make_task("kornli", files={"dev": str(korean / "kornli" / "xnli.dev.ko.tsv")})
    dev = kornli.get_examples("dev")
    assert len(dev) == 2490 and dev[0].text_a.endswith('"엄마, 저 왔어요."')  # quotes kept
    assert {e.label for e in dev} == set(kornli.label_list)
    klue_nli = make_task("klue-nli", data_dir=str(korean / "klue"))
    dev = klue_nli.get_examples("dev")
    assert len(dev) == 3000 and dev[0].guid == "klue-nli-v1_dev_00000"
    assert {e.label for e in dev} == {"entailment", "neutral", "contradiction"}
    assert len(klue_nli.get_examples("test")) == 3000  # KLUE's test labels are not public
    klue_sts = make_task("klue-sts", files={
        "dev": str(korean / "klue" / "klue-sts-v1.1_dev.json")})
    dev = klue_sts.get_examples("dev")
    assert len(dev) == 519 and dev[0].label == pytest.approx(4.857142857142857)
    binary = [e["labels"]["binary-label"] for e in json.load(
        open(korean / "klue" / "klue-sts-v1.1_dev.json", encoding="utf-8"))]
    assert [int(e.label >= 3.0) for e in dev] == binary  # KLUE binarises at 3.0


def test_kornli_trains_on_both_translations_and_skips_no_consensus(tmp_path):
    header = "sentence1\tsentence2\tgold_label\n"
    write(tmp_path / "multinli.train.ko.tsv", header + "a\tb\tneutral\n")
    write(tmp_path / "snli_1.0_train.ko.tsv", header + "c\td\t-\ne\tf\tentailment\n")
    train = make_task("kornli", data_dir=str(tmp_path)).get_examples("train")
    assert [(e.text_a, e.label) for e in train] == [("a", "neutral"), ("e", "entailment")]


def test_nsmc_dev_is_the_test_file_in_the_official_layout(tmp_path):
    write(tmp_path / "ratings_test.txt", "id\tdocument\tlabel\n1\t좋다\t1\n")
    assert make_task("nsmc", data_dir=str(tmp_path)).get_examples("dev")[0].source.endswith(
        "ratings_test.txt:2")


def test_ynat_reads_the_official_json_layout(tmp_path):
    rows = [{"guid": "ynat-v1_train_00000", "title": "유튜브 내달 2일까지 크리에이터 지원 공간 운영",
             "predefined_news_category": "생활문화", "label": "생활문화",
             "annotations": {"annotators": ["05", "03", "06"], "annotations": {
                 "first-scope": ["생활문화", "생활문화", "IT과학"]}},
             "url": "https://news.naver.com/x", "date": "2016.06.30. 오전 10:36"},
            {"guid": "ynat-v1_train_00001", "title": "어버이날 맑다가 흐려져…남부지방 옅은 황사",
             "label": "생활문화"},
            {"guid": "ynat-v1_train_00002", "title": "내년부터 국가RD 평가 때 논문건수는 반영 않는다",
             "label": "사회"}]
    path = write(tmp_path / "ynat-v1.1_train.json", json.dumps(rows, ensure_ascii=False,
                                                               indent=4))
    task = make_task("klue-ynat", data_dir=str(tmp_path))
    train = task.get_examples("train")
    assert [(e.guid, e.label) for e in train] == [("ynat-v1_train_00000", "생활문화"),
                                                  ("ynat-v1_train_00001", "생활문화"),
                                                  ("ynat-v1_train_00002", "사회")]
    lines = open(path, encoding="utf-8").read().split("\n")
    starts = [n for n, line in enumerate(lines, start=1) if line == "    {"]
    assert [e.source for e in train] == [f"{path}:{n}" for n in starts]
    assert task.primary_metric == "macro_f1"
    rows[2]["label"] = "연예"
    write(tmp_path / "dev.json", json.dumps(rows, ensure_ascii=False, indent=4))
    one_line_error(rf"dev.json:{starts[2]}: label '연예' is not one of its labels",
                   make_task("klue-ynat", files={"dev": str(tmp_path / "dev.json")}).get_examples,
                   "dev")


# --------------------------------------------------------------------------- serving
@pytest.mark.parametrize("name, folder, columns", [
    ("classification", "MRPC", dict(text_column="#1 String", text_b_column="#2 String",
                                    label_column="Quality")),
    ("regression", "STS-B", dict(text_column="sentence1", text_b_column="sentence2",
                                 label_column="score"))])
def test_serving_equals_host_postprocess(shared_data, name, folder, columns):
    """The raw-text export of a task on the user's files (here GLUE's dev files named by
    their columns) gives the host's logits and labels / scores on the same rows."""
    import tensorflow as tf

    from bert_tf.text.tokenization import BertTokenizer
    from tests.helpers.tasks import tiny_task_model

    tokenizer = BertTokenizer(shared_data / "vocab" / "bert-base-uncased-vocab.txt",
                              do_lower_case=True)
    dev = str(shared_data / "glue" / folder / "dev.tsv")
    task = make_task(name, tokenizer=tokenizer, max_seq_length=40,
                     files={"train": dev, "dev": dev}, **columns)
    examples = task.get_examples("dev")[:16]
    model = tiny_task_model(task, tokenizer.vocab_size)
    features = task.convert_examples(examples, "dev")
    inputs = {k: features[k] for k in task.model_input_names}
    logits = model(inputs)["logits"]
    want = task.postprocess({"logits": logits})
    module = task.serving_module(model, tokenizer, 40)
    got = module.serve_text(tf.constant([e.text_a for e in examples]),
                            tf.constant([e.text_b for e in examples]))
    np.testing.assert_allclose(got["logits"], logits, atol=1e-5)
    if task.is_regression:
        np.testing.assert_allclose(got["score"].numpy(), want, atol=1e-5)
    else:
        assert task.label_list == ["0", "1"]
        assert [v.decode() for v in got["label"].numpy()] == want
        np.testing.assert_allclose(got["probabilities"].numpy().sum(-1), 1.0, atol=1e-5)
