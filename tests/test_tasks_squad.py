"""SQuAD v1.1 / v2.0: reading, sliding-window features, answers mapped back, files."""

import functools
import json
import logging
import os

import numpy as np
import pytest

from bert_tf.tasks import squad_data, squad_postprocess
from bert_tf.tasks.base import TaskDataError

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
         "cafe", "muller", "opened", "in", "paris", "(", ")", ".", "-", "18", "##95", "19",
         "##43", "it", "closed", "later", "who", "when", "what", "then", "?", "where",
         "did", "the", "cat", "sat", "on", "mat", "is", "dog", "sit", "a", "b", "c", "x",
         "y", "z", ","]

CTX1 = "Café  Müller opened\tin Paris (1895-1943). It closed later"
CTX2 = "The cat sat\u202fon the mat ."


@functools.lru_cache(maxsize=None)
def shared_tokenizer():
    """(vocab_file, BertTokenizer), built once for all SQuAD test modules (building and
    tracing a tokenizer costs seconds)."""
    from bert_tf.text.tokenization import BertTokenizer

    from bert_tf.core import file_io

    path = os.path.join(file_io.scratch_dir("squad_vocab_"), "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB) + "\n")
    return path, BertTokenizer(path, do_lower_case=True)


@pytest.fixture(scope="module")
def tokenizer():
    return shared_tokenizer()[1]


def _qa(qid, question, text=None, start=None, impossible=False, answers=None):
    qa = {"id": qid, "question": question}
    if answers is not None:
        qa["answers"] = answers
    elif impossible:
        qa["answers"] = []
    else:
        qa["answers"] = [{"text": text, "answer_start": start}]
    if impossible:
        qa["is_impossible"] = True
    return qa


def v1_data():
    return [{"title": "t", "paragraphs": [{"context": CTX1, "qas": [
        _qa("first", "Who opened in Paris?", "Café  Müller", 0),
        _qa("year", "When?", "1895", CTX1.index("1895")),
        _qa("last", "What then?", "later", CTX1.index("later")),
        _qa("wrong", "Where?", "Paris", 0),                    # wrong answer_start
    ]}]}]


def v2_data():
    return [{"title": "t", "paragraphs": [{"context": CTX2, "qas": [
        _qa("pos", "Where did the cat sit?", "on the mat", CTX2.index("on")),
        _qa("neg", "Where is the dog?", impossible=True),
    ]}]}]


def write_json(path, articles, version="v1.1"):
    path.write_text(json.dumps({"version": version, "data": articles}, ensure_ascii=False),
                    encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------------- reading
def test_split_doc_tokens_unicode_and_whitespace_runs():
    tokens, offsets = squad_data.split_doc_tokens(CTX1)
    assert tokens == ["Café", "Müller", "opened", "in", "Paris", "(1895-1943).", "It",
                      "closed", "later"]
    assert offsets[CTX1.index("Müller")] == 1
    assert offsets[CTX1.index("  ") + 1] == 0      # whitespace maps to the token before
    tokens2, _ = squad_data.split_doc_tokens(CTX2)
    assert tokens2 == ["The", "cat", "sat", "on", "the", "mat", "."]   # U+202F separates


def test_read_training_examples_and_skip_wrong_answer_start(tmp_path, caplog):
    path = write_json(tmp_path / "train.json", v1_data())
    with caplog.at_level(logging.WARNING):
        examples = squad_data.read_squad_examples(path, is_training=True)
    assert [e.qas_id for e in examples] == ["first", "year", "last"]
    assert "wrong" in caplog.text and "could not find answer" in caplog.text
    first, year, last = examples
    assert (first.start_position, first.end_position) == (0, 1)     # answer at the start
    assert (year.start_position, year.end_position) == (5, 5)
    assert (last.start_position, last.end_position) == (8, 8)       # answer at the end
    assert first.orig_answer_text == "Café  Müller"


def test_eval_examples_keep_every_question_and_all_golds(tmp_path):
    data = v1_data()
    data[0]["paragraphs"][0]["qas"][0]["answers"].append({"text": "Café", "answer_start": 0})
    examples = squad_data.read_squad_examples(write_json(tmp_path / "dev.json", data), False)
    assert [e.qas_id for e in examples] == ["first", "year", "last", "wrong"]
    assert examples[0].answers == ["Café  Müller", "Café"]
    assert examples[0].start_position is None


def test_answer_start_past_the_context_is_skipped(caplog):
    data = [{"paragraphs": [{"context": "a b", "qas": [_qa("far", "?", "b", 7)]}]}]
    with caplog.at_level(logging.WARNING):
        assert squad_data.examples_from_json(data, is_training=True) == []
    assert "far" in caplog.text


def test_training_question_needs_exactly_one_answer(tmp_path):
    data = [{"paragraphs": [{"context": "a b", "qas": [_qa("two", "?", answers=[
        {"text": "a", "answer_start": 0}, {"text": "b", "answer_start": 2}])]}]}]
    path = write_json(tmp_path / "t.json", data)
    with pytest.raises(TaskDataError, match=r"t\.json.*two.*exactly one"):
        squad_data.read_squad_examples(path, is_training=True)


def test_bad_json_names_the_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{", encoding="utf-8")
    with pytest.raises(TaskDataError, match="bad.json"):
        squad_data.read_squad_examples(str(path), is_training=False)


def test_v2_impossible_questions():
    examples = squad_data.examples_from_json(v2_data(), True, version_2_with_negative=True)
    pos, neg = examples
    assert (pos.start_position, pos.end_position, pos.is_impossible) == (3, 5, False)
    assert (neg.start_position, neg.end_position, neg.is_impossible) == (-1, -1, True)
    assert neg.answers == []
    # Read as v1.1 the flag is ignored and the question (no answer) is refused.
    with pytest.raises(TaskDataError, match="neg"):
        squad_data.examples_from_json(v2_data(), True, version_2_with_negative=False)


# ---------------------------------------------------------------------- features
def _features(tokenizer, examples, training, max_seq_length=16, doc_stride=3, max_query_length=5):
    return squad_data.convert_examples_to_features(
        examples, squad_data.tokenizer_ids_fn(tokenizer), tokenizer.cls_id, tokenizer.sep_id,
        max_seq_length=max_seq_length, doc_stride=doc_stride,
        max_query_length=max_query_length, is_training=training)


def _tokens(tokenizer, ids):
    return [tokenizer.id_to_token(int(i)) for i in ids]


def test_windows_labels_and_max_context(tokenizer):
    examples = squad_data.examples_from_json(v1_data(), is_training=True)
    f = _features(tokenizer, examples, training=True)
    n = len(f["example_index"])
    for key in ("input_word_ids", "input_mask", "input_type_ids", "token_to_orig_map",
                "token_is_max_context"):
        assert f[key].shape == (n, 16)
    assert f["unique_ids"][0] == squad_data.FIRST_UNIQUE_ID
    expected_answers = {0: ["cafe", "muller"], 1: ["18", "##95"], 2: ["later"]}
    for ex_index in range(3):
        rows = np.flatnonzero(f["example_index"] == ex_index)
        assert len(rows) > 1, "the doc (16 pieces) must need several windows"
        found = 0
        for r in rows:
            tokens = _tokens(tokenizer, f["input_word_ids"][r])
            s, e = f["start_positions"][r], f["end_positions"][r]
            if s == 0:
                assert e == 0
                continue
            found += 1
            # The span is tightened to the answer's own pieces ("1895" inside "(1895-1943).").
            assert tokens[s:e + 1] == expected_answers[ex_index]
            assert f["input_type_ids"][r][s] == 1
        assert found >= 1
        # Every doc piece has exactly one window where it has max context.
        doc_pieces = {}
        for r in rows:
            first_doc = int(np.argmax(f["input_type_ids"][r]))
            for pos in np.flatnonzero(f["token_to_orig_map"][r] >= 0):
                piece = f["doc_span_index"][r] * 3 + (pos - first_doc)   # stride 3
                doc_pieces.setdefault(piece, 0)
                doc_pieces[piece] += int(f["token_is_max_context"][r][pos])
        assert set(doc_pieces.values()) == {1}


def test_packing_of_one_window(tokenizer):
    examples = squad_data.examples_from_json(v1_data(), is_training=False)[:1]
    f = _features(tokenizer, examples, training=False, max_seq_length=32, max_query_length=3)
    assert "start_positions" not in f
    assert len(f["example_index"]) == 1
    tokens = _tokens(tokenizer, f["input_word_ids"][0][: int(f["input_mask"][0].sum())])
    # The query is cut to max_query_length pieces.
    assert tokens[:5] == ["[CLS]", "who", "opened", "in", "[SEP]"]
    assert tokens[-1] == "[SEP]" and tokens[5:7] == ["cafe", "muller"]
    assert f["input_type_ids"][0][:5].tolist() == [0] * 5
    assert f["token_to_orig_map"][0][5:8].tolist() == [0, 1, 2]
    assert f["token_to_orig_map"][0][:5].tolist() == [-1] * 5


def test_v2_features_point_impossible_at_cls(tokenizer):
    examples = squad_data.examples_from_json(v2_data(), True, version_2_with_negative=True)
    f = _features(tokenizer, examples, training=True, max_seq_length=32)
    rows = f["example_index"].tolist()
    assert rows == [0, 1]
    assert (f["start_positions"][1], f["end_positions"][1]) == (0, 0)
    s, e = f["start_positions"][0], f["end_positions"][0]
    assert _tokens(tokenizer, f["input_word_ids"][0][s:e + 1]) == ["on", "the", "mat"]


def test_max_seq_length_must_leave_room():
    with pytest.raises(ValueError, match="max_query_length"):
        squad_data.convert_examples_to_features([], lambda t: [], 2, 3, max_seq_length=10,
                                           max_query_length=7)


def test_improve_answer_span_and_doc_spans():
    assert squad_data.improve_answer_span([1, 2, 3, 2, 3], 0, 4, [2, 3]) == (1, 2)
    assert squad_data.doc_spans(5, 5, 2) == [(0, 5)]
    assert squad_data.doc_spans(7, 4, 2) == [(0, 4), (2, 4), (4, 3)]


# ---------------------------------------------------------------------- answers
def _oracle_logits(features):
    """Logits peaking at the training labels (the model everyone wishes they had)."""
    n, length = features["input_word_ids"].shape
    start = np.zeros((n, length), np.float32)
    end = np.zeros((n, length), np.float32)
    start[np.arange(n), features["start_positions"]] = 8.0
    end[np.arange(n), features["end_positions"]] = 8.0
    return start, end


def _postprocess(tokenizer, examples, features, start, end, **kwargs):
    return squad_postprocess.postprocess_predictions(
        examples, features, start, end, id_to_token=squad_data.tokenizer_id_to_token(tokenizer),
        basic_tokenize=squad_data.tokenizer_basic_fn(tokenizer), **kwargs)


def test_oracle_logits_recover_original_text(tokenizer):
    examples = squad_data.examples_from_json(v1_data(), is_training=True)
    f = _features(tokenizer, examples, training=True)
    start, end = _oracle_logits(f)
    predictions = _postprocess(tokenizer, examples, f, start, end, n_best_size=5)
    # Original casing and accents come back; whitespace runs collapse to one space.
    assert [p.text for p in predictions] == ["Café Müller", "1895", "later"]
    for p in predictions:
        assert len(p.nbest) <= 5
        assert sum(n["probability"] for n in p.nbest) == pytest.approx(1.0)
        assert p.null_score_diff is None
    assert list(predictions[0].nbest[0]) == ["text", "probability", "start_logit", "end_logit"]


def test_postprocess_rules(tokenizer):
    examples = squad_data.examples_from_json(v1_data(), is_training=False)[:1]
    f = _features(tokenizer, examples, training=False, max_seq_length=32)
    assert len(f["example_index"]) == 1
    doc = int(np.argmax(f["input_type_ids"][0]))          # position of "cafe"
    start = np.zeros((1, 32), np.float32)
    end = np.zeros((1, 32), np.float32)
    start[0, 0] = end[0, 0] = 50.0                          # [CLS]: not a doc token in v1.1
    start[0, doc + 4] = 9.0                                 # "paris"
    end[0, doc + 2] = 9.0                                   # "opened": end before start
    end[0, doc + 6] = 5.0                                   # "18": "paris ( 18" 3 pieces
    start[0, doc + 1] = 4.0                                 # "muller"
    end[0, doc + 1] = 4.5
    out = _postprocess(tokenizer, examples, f, start, end, n_best_size=3)
    # As the original: the span is cut inside the doc token "(1895-1943)." where the
    # prediction ends ("18"), since get_final_text aligns characters, not tokens.
    assert out[0].text == "Paris (18"
    # With max_answer_length=2 "paris ( 18" is out and paris..opened ends before it
    # starts; best left: muller..opened (4 + 9; muller's own end 4.5 is not in the top 3).
    out = _postprocess(tokenizer, examples, f, start, end, n_best_size=3, max_answer_length=2)
    assert out[0].text == "Müller opened"
    assert [n["text"] for n in out[0].nbest] == ["Müller opened"]


def test_non_max_context_window_is_ignored(tokenizer):
    examples = squad_data.examples_from_json(v1_data(), is_training=False)[:1]
    f = _features(tokenizer, examples, training=False)
    # 16 doc pieces, 8 per window, stride 3: windows start at pieces 0, 3, 6, 9.
    assert f["doc_span_index"].tolist() == [0, 1, 2, 3]
    # "paris" (doc token 4, piece 4) is in windows 0 and 1; window 0 gives it more
    # context (min(4, 3) vs min(1, 6)), so a huge score in window 1 must be ignored.
    where = {r: int(np.flatnonzero(f["token_to_orig_map"][r] == 4)[0]) for r in (0, 1)}
    assert f["token_is_max_context"][0][where[0]] and not f["token_is_max_context"][1][where[1]]
    start = np.zeros((4, 16), np.float32)
    end = np.zeros((4, 16), np.float32)
    start[0, where[0]] = end[0, where[0]] = 3.0
    start[1, where[1]] = end[1, where[1]] = 100.0
    out = _postprocess(tokenizer, examples, f, start, end, n_best_size=2)
    assert out[0].text == "Paris"
    assert out[0].nbest[0]["start_logit"] == pytest.approx(3.0)


def test_v2_null_answer_and_threshold(tokenizer, tmp_path):
    examples = squad_data.examples_from_json(v2_data(), False, version_2_with_negative=True)
    f = _features(tokenizer, examples, training=False, max_seq_length=32)
    n = len(f["example_index"])
    start = np.zeros((n, 32), np.float32)
    end = np.zeros((n, 32), np.float32)
    start[:, 0] = end[:, 0] = 3.0                            # null score 6 in every window
    doc = [int(np.argmax(f["input_type_ids"][r])) for r in range(n)]
    for r in range(n):
        start[r, doc[r] + 3] = 4.0                          # "on"
        end[r, doc[r] + 5] = 4.0                            # "mat"
    start[1, doc[1] + 3] = end[1, doc[1] + 5] = 1.0          # weak span for "neg"
    out = _postprocess(tokenizer, examples, f, start, end, version_2_with_negative=True)
    assert [p.text for p in out] == ["on the mat", ""]
    assert out[0].null_score_diff == pytest.approx(6.0 - 8.0)
    assert out[1].null_score_diff == pytest.approx(6.0 - 2.0)
    assert "" in [n_["text"] for n_ in out[0].nbest]          # the null entry is listed
    out = _postprocess(tokenizer, examples, f, start, end, version_2_with_negative=True,
                       null_score_diff_threshold=5.0)
    assert [p.text for p in out] == ["on the mat", "on the mat"]

    paths = squad_postprocess.write_prediction_files(out, str(tmp_path), version_2_with_negative=True)
    assert sorted(p.rsplit("/", 1)[1] for p in paths) == [
        "nbest_predictions.json", "null_odds.json", "predictions.json"]
    assert json.loads((tmp_path / "predictions.json").read_text()) == {
        "pos": "on the mat", "neg": "on the mat"}
    assert json.loads((tmp_path / "null_odds.json").read_text())["neg"] == pytest.approx(4.0)
    nbest = json.loads((tmp_path / "nbest_predictions.json").read_text())
    assert nbest["pos"][0]["text"] == "on the mat"

    results = squad_postprocess.evaluate_predictions(out, examples, version_2_with_negative=True)
    assert results["exact_match"] == 50.0 and results["f1"] == 50.0
    assert results["HasAns_exact"] == 100.0 and results["NoAns_exact"] == 0.0
    # Odds: pos -2, neg 4 -> best threshold keeps pos, blanks neg.
    assert results["best_exact"] == 100.0 and results["best_exact_thresh"] == -2.0


def test_get_final_text_cases():
    assert squad_postprocess.get_final_text("muller", "Müller,", ["muller", ","]) == "Müller"
    # A prediction not found in the basic tokens falls back to the whole original text.
    assert squad_postprocess.get_final_text("zzz", "Müller,", ["muller", ","]) == "Müller,"
    # Normalization that changes the length (here a fake) -> the whole original text.
    assert squad_postprocess.get_final_text("ab", "abc", ["ab"]) == "abc"


def test_empty_context_gets_a_filler_answer(tokenizer):
    data = [{"paragraphs": [{"context": "   ", "qas": [_qa("e", "who?", answers=[])]}]}]
    examples = squad_data.examples_from_json(data, False)
    f = _features(tokenizer, examples, training=False)
    assert len(f["example_index"]) == 0
    empty = np.zeros((0, 16), np.float32)
    assert _postprocess(tokenizer, examples, f, empty, empty)[0].text == "empty"
    out = _postprocess(tokenizer, examples, f, empty, empty, version_2_with_negative=True)
    assert out[0].text == "" and out[0].null_score_diff > 0


def test_malformed_answers_name_the_question():
    data = [{"paragraphs": [{"context": "a b", "qas": [
        {"id": "q7", "question": "?", "answers": [{"answer_start": 0}]}]}]}]
    with pytest.raises(TaskDataError, match="q7.*answers"):
        squad_data.examples_from_json(data, is_training=False, source="dev.json")
