"""Token classification on the user's own files and KLUE-NER: the three layouts (CoNLL
columns, JSON tokens/tags, KLUE's character-level lines) on real and small files, bad
lines as one line naming file:line, tag collection, characters <-> pieces, KLUE's
official entity_f1 / char_f1 by hand, the predictions file, and serving == host."""

import json

import numpy as np
import pytest

from bert_tf.tasks import make_task, metrics, task_from_config
from bert_tf.tasks.token_classification import (KLUE_NER_LABELS, char_tags_from_units,
                                                read_char_level)
from tests.helpers import write_text as write, write_vocab
from tests.helpers.tasks import one_line_error, tiny_task_model

KLUE_NER = ("korean", "klue", "klue-ner-v1.1_dev.first3000.tsv")
SMALL_CONLL = "-DOCSTART- -X- O O\n\nEU NNP I-ORG\nrejects VBZ O\nGerman JJ I-MISC\n\n" \
              "Peter NNP I-PER\nBlackburn NNP I-PER\n"
# Two sentences in KLUE-NER's layout: a space inside the PS entity and one after it.
SMALL_CHARS = ("## 토큰, 레이블 구분자 : \\t\n## s1\t<김 철수:PS>는 갔다\n김\tB-PS\n \tI-PS\n"
               "철\tI-PS\n수\tI-PS\n는\tO\n \tO\n갔\tO\n다\tO\n\n## s2\t<서울:LC>\n서\tB-LC\n"
               "울\tI-LC\n")


def char_tokenizer(directory, texts):
    """A BertTokenizer whose vocab is every character of `texts`, alone and as ##piece
    (Hangul kept whole: --nostrip_accents)."""
    from bert_tf.text.tokenization import BertTokenizer

    chars = sorted({c for t in texts for c in t.lower() if not c.isspace()})
    vocab = write_vocab(directory / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                        + chars + ["##" + c for c in chars])
    return BertTokenizer(vocab, do_lower_case=True, strip_accents=False)


def klue_slice(shared_data, tmp_path, sentences):
    """The first `sentences` sentences of the real KLUE-NER dev file, as a file."""
    text = (shared_data.joinpath(*KLUE_NER)).read_text(encoding="utf-8")
    blocks = text.split("\n\n")[:sentences]
    return write(tmp_path / "klue-ner-v1.1_dev.tsv", "\n\n".join(blocks) + "\n")


# ---------------------------------------------------------------------------- readers
def test_character_level_reader_on_the_real_klue_file(shared_data):
    path = str(shared_data.joinpath(*KLUE_NER))
    task = make_task("klue-ner", files={"dev": path})
    examples = task.get_examples("dev")
    assert len(examples) == 3000
    first = examples[0]
    assert first.guid == "klue-ner-v1_dev_00000-wikitree"
    assert first.text.startswith("경찰은 또 성매매") and first.source == f"{path}:7"
    assert len(first.tags) == len(first.text) and first.tags[:4] == ["B-OG", "I-OG", "O", "O"]
    assert [(k, first.text[s:e + 1]) for k, s, e in metrics.get_entities(first.tags)][:3] == [
        ("OG", "경찰"), ("PS", "박"), ("QT", "32")]
    # spaces are characters with tags; an entity may hold one
    assert any(c == " " and t.startswith("I-") for e in examples for c, t in zip(e.text, e.tags))
    assert {t for e in examples for t in e.tags} <= set(KLUE_NER_LABELS)


def test_three_layouts_and_label_collection(tmp_path):
    conll = make_task("token_classification", files={
        "train": write(tmp_path / "train.txt", SMALL_CONLL)})
    examples = conll.get_examples("train")
    assert [(e.words, e.tags) for e in examples] == [
        (["EU", "rejects", "German"], ["B-ORG", "O", "B-MISC"]),  # IOB1 -> BIO
        (["Peter", "Blackburn"], ["B-PER", "I-PER"])]
    assert conll.label_list == ["B-MISC", "B-ORG", "B-PER", "I-PER", "O"]  # sorted
    assert conll.task_config()["units"] == "words"
    jsonl = write(tmp_path / "train.jsonl", '{"id": "a", "tokens": ["Kim", "went"], "tags": '
                  '["B-PS", "O"]}\n{"id": "b", "tokens": [], "tags": []}\n')
    task = make_task("token_classification", files={"train": jsonl},
                     label_list=["O", "B-PS", "I-PS"])
    assert [(e.guid, e.words) for e in task.get_examples("train")] == [
        ("a", ["Kim", "went"]), ("b", [])]
    assert task.label_list == ["O", "B-PS", "I-PS"]
    chars = make_task("token_classification", files={
        "train": write(tmp_path / "chars.tsv", SMALL_CHARS)})
    [s1, s2] = chars.get_examples("train")
    assert (s1.guid, s1.text, s2.text) == ("s1", "김 철수는 갔다", "서울")
    assert chars.task_config()["units"] == "pieces"
    assert task_from_config(chars.task_config()).unit_kind() == "pieces"  # export's
    # a test file may leave the tags out
    test = make_task("token_classification", files={
        "test": write(tmp_path / "test.txt", "EU\nrejects\n\nPeter\n")}, label_list=["O"])
    assert [(e.words, e.tags) for e in test.get_examples("test")] == [
        (["EU", "rejects"], None), (["Peter"], None)]


def test_bad_lines_name_file_and_line(tmp_path):
    task = make_task("token_classification", files={
        "train": write(tmp_path / "t.jsonl", '{"tokens": ["a"], "tags": ["O"]}\n'
                                             '{"tokens": ["a", "b"], "tags": ["O"]}\n')})
    one_line_error(r"t.jsonl:2: 2 tokens but 1 tags", task.get_examples, "train")
    task = make_task("token_classification", files={
        "train": write(tmp_path / "c.tsv", "## s\n가\tO\n나다\tO\n")})
    one_line_error(r"c.tsv:3: expected one character, a tab and its tag", task.get_examples,
                   "train")
    task = make_task("klue-ner", files={"dev": write(tmp_path / "d.tsv",
                                                     "## s\n가\tB-PS\n나\tB-XX\n")})
    one_line_error(r"d.tsv:3: tag 'B-XX' is not one of its tags", task.get_examples, "dev")
    task = make_task("token_classification", files={
        "train": write(tmp_path / "train.txt", SMALL_CONLL),
        "dev": write(tmp_path / "dev.txt", "EU NNP B-ORG\n\nX NNP B-GPE\n")})
    one_line_error(r"dev.txt:3: tag 'B-GPE' is not one of the tags of --train_file",
                   task.get_examples, "dev")
    task = make_task("token_classification", files={
        "train": write(tmp_path / "w.txt", "EU B-ORG\nalone\n")})
    one_line_error(r"w.txt:2: expected `word ... tag` columns", task.get_examples, "train")


# --------------------------------------------------------------- characters and pieces
def test_piece_tags_go_back_to_characters_and_keep_the_entities():
    # 김 철수는: units 김 | 철 | 수 | 는 ; the space between 김 and 철 is no piece's
    spans = [(0, 1), (2, 3), (3, 4), (4, 5)]
    assert char_tags_from_units(5, spans, ["B-PS", "I-PS", "I-PS", "O"]) == [
        "B-PS", "I-PS", "I-PS", "I-PS", "O"]
    # a B- after the space starts a new entity: the space stays O
    assert char_tags_from_units(5, spans, ["B-PS", "B-PS", "I-PS", "O"]) == [
        "B-PS", "O", "B-PS", "I-PS", "O"]
    # a piece of several characters: its first gets the tag, the others I-
    assert char_tags_from_units(4, [(0, 3), (3, 4)], ["B-LC", "O"]) == [
        "B-LC", "I-LC", "I-LC", "O"]
    # the entities of the characters are those of the pieces, in characters
    rng = np.random.default_rng(0)
    tags = ["O", "B-PS", "I-PS", "B-LC", "I-LC", "I-PS"]
    for _ in range(200):
        widths = rng.integers(1, 4, 8)
        gaps = rng.integers(0, 2, 8)
        spans, position = [], 0
        for w, g in zip(widths, gaps):
            position += int(g)
            spans.append((position, position + int(w)))
            position += int(w)
        unit_tags = [tags[i] for i in rng.integers(0, len(tags), 8)]
        chars = char_tags_from_units(position, spans, unit_tags)
        want = [(k, spans[s][0], spans[e][1] - 1) for k, s, e in metrics.get_entities(unit_tags)]
        assert metrics.get_entities(chars) == want


def test_klue_metrics_by_hand():
    gold = [["B-PS", "I-PS", "O", "B-LC", "I-LC"], ["B-DT", "O"]]
    pred = [["B-PS", "I-PS", "O", "B-LC", "O"], ["I-DT", "O"]]
    # strict entities: gold PS, LC, DT; predicted PS, LC(3-3); I-DT starts nothing
    # per type F1: PS 1, LC 0, DT 0 -> macro 1/3 (conlleval would count the I-DT)
    assert metrics.klue_ner_entity_macro_f1(gold, pred) == pytest.approx(1 / 3)
    assert metrics.entity_f1_per_type(gold, pred) == {"DT": 1.0, "LC": 0.0, "PS": 1.0}
    # characters: B-PS 1, I-PS 1, O: tp 2, fp 1 -> 4/5, B-LC 1, I-LC: fn 1 -> 0,
    # B-DT: fn 1 -> 0, I-DT: fp 1 -> 0; the 6 tags in neither side count 1 each
    expected = (1 + 1 + 0.8 + 1 + 0 + 0 + 0 + 6 * 1) / 13
    assert metrics.klue_ner_char_macro_f1(gold, pred, KLUE_NER_LABELS) == pytest.approx(
        expected)


def test_klue_ner_scores_characters_that_are_not_spaces(tmp_path):
    task = make_task("klue-ner", files={"dev": write(tmp_path / "d.tsv", SMALL_CHARS)})
    examples = task.get_examples("dev")
    # the prediction differs from gold only on the space inside 김 철수 (spaces excluded:
    # KLUE's scores stay 1; the entity itself is cut, so the micro f1 of all chars is not)
    predicted = [list(e.tags) for e in examples]
    predicted[0][1] = "O"
    predicted[0][2] = "B-PS"
    scores = task.evaluate(predicted, examples)
    assert scores["char_f1"] < 1.0 and scores["entity_f1"] < 1.0
    predicted[0][1:3] = ["O", "I-PS"]  # only the space differs
    scores = task.evaluate(predicted, examples)
    assert (scores["char_f1"], scores["entity_f1"]) == (1.0, 1.0)
    assert scores["f1"] < 1.0  # conlleval on all characters sees two PS entities


def test_real_klue_round_trip_and_predictions_file(shared_data, tmp_path):
    """Logits that put each piece's gold tag first give back every gold tag of the
    characters that are not spaces (KLUE's scores 1.0); the predictions file reads back."""
    path = klue_slice(shared_data, tmp_path, 60)
    task = make_task("klue-ner", files={"dev": path, "test": path}, max_seq_length=24)
    examples = task.get_examples("dev")
    task.tokenizer = char_tokenizer(tmp_path, [e.text for e in examples])
    features = task.convert_examples(examples, "dev")
    assert len(features["example_index"]) > len(examples)  # long sentences: windows
    logits = np.zeros(features["label_ids"].shape + (13,), np.float32)
    rows, cols = np.nonzero(features["label_ids"] >= 0)
    logits[rows, cols, features["label_ids"][rows, cols]] = 5.0
    predicted = task.postprocess({"logits": logits}, features, examples)
    for e, tags in zip(examples, predicted):
        assert [t for c, t in zip(e.text, tags) if c != " "] == [
            t for c, t in zip(e.text, e.tags) if c != " "]
    scores = task.evaluate(predicted, examples)
    assert scores["entity_f1"] == scores["char_f1"] == 1.0
    [out] = task.write_predictions(predicted, examples, str(tmp_path / "out"))
    assert out.endswith("out/predictions.tsv")
    again = read_char_level(out, open(out, encoding="utf-8").read())
    assert [(e.guid, e.text, e.tags) for e in again] == [
        (e.guid, e.text, p) for e, p in zip(examples, predicted)]


def test_jsonl_predictions_keep_ids_and_give_entities(tmp_path):
    test = write(tmp_path / "test.jsonl", '{"guid": "z", "tokens": ["Kim", "Min", "went"]}\n'
                                          '{"guid": "a", "tokens": ["Seoul"]}\n')
    task = make_task("token_classification", files={"test": test},
                     label_list=["O", "B-PS", "I-PS", "B-LC"])
    examples = task.get_examples("test")
    [out] = task.write_predictions([["B-PS", "I-PS", "O"], ["B-LC"]], examples, str(tmp_path))
    rows = [json.loads(line) for line in open(out, encoding="utf-8")]
    assert [r["id"] for r in rows] == ["z", "a"]
    assert rows[0]["entities"] == [{"entity_text": "Kim Min", "entity_type": "PS",
                                    "start_char": 0, "end_char": 7}]
    assert rows[1]["tags"] == ["B-LC"]


# --------------------------------------------------------------------------- serving
def _serving_vs_host(task, tokenizer, examples, texts, length):
    import tensorflow as tf

    model = tiny_task_model(task, tokenizer.vocab_size, scale=3.0)
    features = task.convert_examples(examples, "dev")
    logits = model({k: features[k] for k in task.model_input_names})["logits"]
    want = task.postprocess({"logits": logits}, features, examples)
    module = task.serving_module(model, tokenizer, length)
    got = module.serve_text(tf.constant(texts))
    found = 0
    for row, (example, tags) in enumerate(zip(examples, want)):
        n = int(got["num_entities"][row])
        served = [{"entity_text": got["entity_text"][row, i].numpy().decode(),
                   "entity_type": got["entity_type"][row, i].numpy().decode(),
                   "start_char": int(got["start_char"][row, i]),
                   "end_char": int(got["end_char"][row, i])} for i in range(n)]
        assert served == task.entities(tags, example), row
        found += n
    assert found > len(examples)  # the random head tags plenty
    return got, want


def test_serving_equals_host_postprocess_on_words(shared_data):
    from bert_tf.text.tokenization import BertTokenizer

    tokenizer = BertTokenizer(shared_data / "vocab" / "bert-base-uncased-vocab.txt",
                              do_lower_case=True)
    dev = str(shared_data / "conll2003" / "eng.testa")
    task = make_task("token_classification", tokenizer=tokenizer, max_seq_length=16,
                     files={"train": dev, "dev": dev})
    examples = task.get_examples("dev")[:30]
    got, want = _serving_vs_host(task, tokenizer, examples,
                                 [" ".join(e.words) for e in examples], 16)
    for row, (example, tags) in enumerate(zip(examples, want)):
        n = int(got["num_words"][row])
        assert [t.decode() for t in got["tags"][row, :n].numpy()] == tags


def test_serving_equals_host_postprocess_on_characters(shared_data, tmp_path):
    path = klue_slice(shared_data, tmp_path, 40)
    task = make_task("klue-ner", files={"dev": path}, max_seq_length=20)
    examples = task.get_examples("dev")
    tokenizer = char_tokenizer(tmp_path, [e.text for e in examples])
    task.tokenizer = tokenizer
    got, _ = _serving_vs_host(task, tokenizer, examples, [e.text for e in examples], 20)
    assert "words" not in got  # characters: entities only
