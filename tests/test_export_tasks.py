"""Task exports (classifier, regressor, NER, SQuAD): raw-text and ids signatures, parity
with the Keras model, bad inputs, assets, warmup and a clean-process load."""

import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.export import saved_model
from bert_tf.model import model_dir
from tests.helpers.export import (BAD_TEXTS, TASK_VOCAB, as_bytes, call, fine_tuned_dir, packed,
                                  read_warmup, run_clean)


# ------------------------------------------------------------------ classifier

@pytest.fixture(scope="module")
def mrpc(tmp_path_factory, task_vocab_file, task_tokenizer):
    root = tmp_path_factory.mktemp("mrpc_model")
    task, model = fine_tuned_dir(root, "mrpc", task_vocab_file, task_tokenizer, max_seq_length=16)
    path = saved_model.export_model_dir(model_dir.resolve(str(root)),
                                   str(tmp_path_factory.mktemp("mrpc_export")))
    return task, model, path, tf.saved_model.load(path)


def test_classifier_layout_and_assets(mrpc):
    _, _, path, loaded = mrpc
    assert sorted(loaded.signatures) == [saved_model.SERVING_DEFAULT, saved_model.IDS_SIGNATURE]
    vocab = open(os.path.join(path, "assets", "vocab.txt")).read().split("\n")
    assert vocab[:len(TASK_VOCAB)] == TASK_VOCAB
    assert open(os.path.join(path, "assets", "labels.txt")).read().split() == ["0", "1"]
    text_fn = loaded.signatures[saved_model.SERVING_DEFAULT]
    assert sorted(text_fn.structured_input_signature[1]) == ["text", "text_b"]
    assert sorted(text_fn.structured_outputs) == ["label", "label_id", "logits", "probabilities"]


def test_classifier_text_and_ids_match_keras(mrpc, task_tokenizer):
    _, model, _, loaded = mrpc
    a = BAD_TEXTS
    b = list(reversed(BAD_TEXTS))
    got = call(loaded.signatures[saved_model.SERVING_DEFAULT], text=as_bytes(a), text_b=as_bytes(b))
    ids = packed(task_tokenizer, a, b)
    assert ids["input_word_ids"].shape[1] == 16  # the long pair is truncated, not an error
    want = model(ids, training=False)["logits"].numpy()
    np.testing.assert_allclose(got["logits"], want, atol=1e-5)
    np.testing.assert_allclose(got["probabilities"], tf.nn.softmax(want).numpy(), atol=1e-5)
    assert got["label_id"].tolist() == want.argmax(-1).tolist()
    assert [x.decode() for x in got["label"]] == [["0", "1"][i] for i in want.argmax(-1)]
    by_ids = call(loaded.signatures[saved_model.IDS_SIGNATURE], **ids)
    np.testing.assert_allclose(by_ids["logits"], want, atol=1e-5)


def test_classifier_split_in_two_matches_keras(tmp_path, task_vocab_file, task_tokenizer):
    """A task export with its layers split (export_model --parallel_branches=2): the
    classifier's logits as the Keras model's; a split the model cannot take is refused
    before anything is restored or written."""
    (tmp_path / "m").mkdir()
    _, model = fine_tuned_dir(tmp_path / "m", "mrpc", task_vocab_file, task_tokenizer,
                              max_seq_length=16)
    resolved = model_dir.resolve(str(tmp_path / "m"))
    path = saved_model.export_model_dir(resolved, str(tmp_path / "e"), parallel_branches=2)
    ids = packed(task_tokenizer, BAD_TEXTS, list(reversed(BAD_TEXTS)))
    got = call(tf.saved_model.load(path).signatures[saved_model.IDS_SIGNATURE], **ids)
    np.testing.assert_allclose(got["logits"], model(ids, training=False)["logits"].numpy(),
                               atol=1e-5)
    with pytest.raises(saved_model.ExportError, match="--parallel_branches=3 must divide"):
        saved_model.export_model_dir(resolved, str(tmp_path / "e3"), parallel_branches=3)
    assert not os.path.exists(tmp_path / "e3")


def test_invalid_utf8_bytes_are_dropped_as_the_original(mrpc):
    _, _, _, loaded = mrpc
    fn = loaded.signatures[saved_model.SERVING_DEFAULT]
    bad = call(fn, text=as_bytes([b"bad \xff\xfe fox\xc3"]), text_b=as_bytes(["dog"]))
    clean = call(fn, text=as_bytes(["bad  fox"]), text_b=as_bytes(["dog"]))
    np.testing.assert_allclose(bad["logits"], clean["logits"], atol=1e-6)


def test_classifier_clean_process_and_warmup(mrpc, tmp_path):
    _, _, path, loaded = mrpc
    inputs = {"text": as_bytes(BAD_TEXTS[:4]), "text_b": as_bytes(BAD_TEXTS[3:7])}
    (got,) = run_clean(path, [(saved_model.SERVING_DEFAULT, inputs)], tmp_path)
    want = call(loaded.signatures[saved_model.SERVING_DEFAULT], **inputs)
    np.testing.assert_allclose(got["logits"], want["logits"], atol=1e-5)
    assert got["label"].tolist() == want["label"].tolist()
    logs = read_warmup(path)
    assert sorted(log.predict_log.request.model_spec.signature_name for log in logs) == \
        [saved_model.SERVING_DEFAULT, saved_model.IDS_SIGNATURE]
    for log in logs:
        request = log.predict_log.request
        inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
        out = call(loaded.signatures[request.model_spec.signature_name], **inputs)
        assert np.isfinite(out["logits"]).all()


def test_regression_export(tmp_path, task_vocab_file, task_tokenizer):
    (tmp_path / "m").mkdir()
    _, model = fine_tuned_dir(tmp_path / "m", "sts-b", task_vocab_file, task_tokenizer,
                              max_seq_length=16)
    path = saved_model.export_model_dir(model_dir.resolve(str(tmp_path / "m")), str(tmp_path / "e"))
    fn = tf.saved_model.load(path).signatures[saved_model.SERVING_DEFAULT]
    got = call(fn, text=as_bytes(BAD_TEXTS), text_b=as_bytes(BAD_TEXTS))
    want = model(packed(task_tokenizer, BAD_TEXTS, BAD_TEXTS), training=False)["logits"].numpy()
    np.testing.assert_allclose(got["score"], want[:, 0], atol=1e-5)
    assert not os.path.exists(os.path.join(path, "assets", "labels.txt"))


# ------------------------------------------------------------------ NER

def test_ner_words_tags_and_offsets(tmp_path, task_vocab_file, task_tokenizer):
    (tmp_path / "m").mkdir()
    task, model = fine_tuned_dir(tmp_path / "m", "conll2003", task_vocab_file, task_tokenizer,
                                 max_seq_length=8)  # 6 pieces per window: long texts split
    path = saved_model.export_model_dir(model_dir.resolve(str(tmp_path / "m")), str(tmp_path / "e"))
    loaded = tf.saved_model.load(path)
    texts = ["The quick brown foxes jumping.", "", "  ", "서울 北京  is U.S.A. capital",
             "the lazy dog " * 5]
    got = call(loaded.signatures[saved_model.SERVING_DEFAULT], text=as_bytes(texts))
    for row, text in enumerate(texts):
        words = text.split()
        n = int(got["num_words"][row])
        assert n == len(words)
        spans = list(zip(got["start_char"][row][:n].tolist(), got["end_char"][row][:n].tolist()))
        assert [text[s:e] for s, e in spans] == words
        assert [w.decode() for w in got["words"][row][:n]] == words
        assert (got["start_char"][row][n:] == -1).all() and (got["tags"][row][n:] == b"").all()
    # Invalid UTF-8 bytes are dropped; offsets count each bad byte as one character.
    bad = call(loaded.signatures[saved_model.SERVING_DEFAULT],
               text=as_bytes([b"bad \xff\xfe fox\xc3", b"\xff"]))
    assert bad["num_words"].tolist() == [2, 0]
    assert bad["words"][0][:2].tolist() == [b"bad", b"fox"]
    assert bad["start_char"][0][:2].tolist() == [0, 7]
    assert bad["end_char"][0][:2].tolist() == [3, 10]
    # The ids signature equals the Keras model.
    ids = packed(task_tokenizer, texts, length=8)
    by_ids = call(loaded.signatures[saved_model.IDS_SIGNATURE], **ids)
    want_logits = model(ids, training=False)["logits"].numpy()
    np.testing.assert_allclose(by_ids["logits"], want_logits, atol=1e-5)
    assert by_ids["tag_ids"].tolist() == want_logits.argmax(-1).tolist()
    # Tags: the host's convert_examples (windows split at word boundaries, 6 pieces) +
    # postprocess (the tag at each word's first piece) on the same words.
    from bert_tf.tasks.ner import NerExample

    words = texts[0].split()
    examples = [NerExample(guid="0", words=words, tags=["O"] * len(words))]
    features = task.convert_examples(examples, "dev")
    assert len(features["example_index"]) == 2  # this row spans two windows
    want = task.postprocess(model({k: features[k] for k in task.model_input_names}),
                            features, examples)
    assert [t.decode() for t in got["tags"][0][:len(words)]] == want[0]


# ------------------------------------------------------------------ SQuAD

def test_squad_answers_match_the_original_rule(tmp_path, task_vocab_file, task_tokenizer):
    (tmp_path / "m").mkdir()
    opts = dict(max_seq_length=16, doc_stride=3, max_query_length=4, n_best_size=5,
                max_answer_length=4)
    task, model = fine_tuned_dir(tmp_path / "m", "squad", task_vocab_file, task_tokenizer, **opts)
    path = saved_model.export_model_dir(model_dir.resolve(str(tmp_path / "m")), str(tmp_path / "e"))
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures[saved_model.SERVING_DEFAULT]
    assert sorted(fn.structured_input_signature[1]) == ["context", "question"]
    questions = ["where is seoul?", "what jumps over the lazy dog in korea?", "서울", "fox",
                 b"\xff where", "  "]
    contexts = ["seoul is the capital of korea.",
                "the quick brown fox jumps over the lazy dog in seoul, korea, " * 3,
                "서울 北京 capital", "", b"seoul \xfe is \xc3", "the lazy dog"]
    got = call(fn, question=as_bytes(questions), context=as_bytes(contexts))
    # Invalid bytes: no error; the offsets index the text decoded with "replace" and the
    # answer is the input's own bytes for that span.
    s, e = int(got["start_char"][4]), int(got["end_char"][4])
    assert (b"seoul \xfe is \xc3".decode("utf-8", "replace")[s:e]
            == got["answer_text"][4].decode("utf-8", "replace"))
    # The host postprocessing (the original run_squad's rule) on the same questions.
    from bert_tf.tasks.squad_data import examples_from_json

    examples = examples_from_json([{"paragraphs": [
        {"context": c, "qas": [{"id": str(i), "question": q, "answers": []}]}
        for i, (q, c) in enumerate(zip(questions[:4], contexts[:4]))]}], is_training=False)
    features = task.convert_examples(examples, "dev")
    want = task.postprocess(model({k: features[k] for k in task.model_input_names}),
                            features, examples)
    for row, (q, c) in enumerate(zip(questions[:4], contexts[:4])):
        answer = got["answer_text"][row].decode()
        s, e = int(got["start_char"][row]), int(got["end_char"][row])
        if not c:
            assert (answer, s, e) == ("", -1, -1)
            continue
        assert c[s:e] == answer
        assert answer == ("" if want[row].text == "empty" else want[row].text), row
        if answer:
            best = want[row].nbest[0]
            np.testing.assert_allclose(got["score"][row], best["start_logit"] + best["end_logit"],
                                       atol=1e-5)
    ids = packed(task_tokenizer, ["where is seoul?"], ["seoul is the capital of korea."])
    by_ids = call(loaded.signatures[saved_model.IDS_SIGNATURE], **ids)
    want = model(ids, training=False)
    np.testing.assert_allclose(by_ids["start_logits"], want["start_logits"].numpy(), atol=1e-5)
    np.testing.assert_allclose(by_ids["end_logits"], want["end_logits"].numpy(), atol=1e-5)


def test_squad_v2_null_answer(tmp_path, task_vocab_file, task_tokenizer):
    (tmp_path / "m").mkdir()
    fine_tuned_dir(tmp_path / "m", "squad", task_vocab_file, task_tokenizer, max_seq_length=16,
                   version_2_with_negative=True, null_score_diff_threshold=-1e6)
    path = saved_model.export_model_dir(model_dir.resolve(str(tmp_path / "m")), str(tmp_path / "e"))
    fn = tf.saved_model.load(path).signatures[saved_model.SERVING_DEFAULT]
    got = call(fn, question=as_bytes(["where is seoul?"]),
               context=as_bytes(["seoul is the capital of korea."]))
    # A threshold far below any score difference: every question is unanswerable.
    assert got["answer_text"].tolist() == [b""] and got["start_char"].tolist() == [-1]
    assert np.isfinite(got["null_score"]).all()


def test_ids_only_export_has_no_tf_text_ops(tmp_path, task_vocab_file, task_tokenizer):
    from tensorflow.core.protobuf import saved_model_pb2

    (tmp_path / "m").mkdir()
    _, model = fine_tuned_dir(tmp_path / "m", "sst-2", task_vocab_file, task_tokenizer,
                              max_seq_length=16)
    path = saved_model.export_model_dir(model_dir.resolve(str(tmp_path / "m")), str(tmp_path / "e"),
                                   text_signatures=False)
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    graph = proto.meta_graphs[0].graph_def
    ops = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
    assert not any("Wordpiece" in op for op in ops), sorted(ops)
    assert os.path.exists(os.path.join(path, "assets", "vocab.txt"))
    loaded = tf.saved_model.load(path)
    assert sorted(loaded.signatures) == [saved_model.SERVING_DEFAULT]
    ids = packed(task_tokenizer, ["the quick fox", "서울"])
    got = call(loaded.signatures[saved_model.SERVING_DEFAULT], **ids)
    np.testing.assert_allclose(got["logits"], model(ids, training=False)["logits"].numpy(),
                               atol=1e-5)
    (log,) = read_warmup(path)
    assert log.predict_log.request.model_spec.signature_name == saved_model.SERVING_DEFAULT


# ------------------------------------------------------------------ SWAG (multiple choice)

def test_multiple_choice_export(tmp_path, task_vocab_file, task_tokenizer):
    (tmp_path / "m").mkdir()
    task, model = fine_tuned_dir(tmp_path / "m", "swag", task_vocab_file, task_tokenizer,
                                 max_seq_length=16)
    path = saved_model.export_model_dir(model_dir.resolve(str(tmp_path / "m")), str(tmp_path / "e"))
    loaded = tf.saved_model.load(path)
    assert sorted(loaded.signatures) == [saved_model.SERVING_DEFAULT, saved_model.IDS_SIGNATURE]
    contexts = BAD_TEXTS[:4]
    endings = [[BAD_TEXTS[(i + k) % len(BAD_TEXTS)] for k in range(4)] for i in range(4)]
    got = call(loaded.signatures[saved_model.SERVING_DEFAULT], text=as_bytes(contexts),
               endings=np.array([as_bytes(row) for row in endings]))
    flat = packed(task_tokenizer, [c for c in contexts for _ in range(4)],
                  [e for row in endings for e in row])
    ids = {k: v.reshape(4, 4, -1) for k, v in flat.items()}
    want = model(ids, training=False)["logits"].numpy()
    assert got["logits"].shape == (4, 4)
    np.testing.assert_allclose(got["logits"], want, atol=1e-5)
    np.testing.assert_allclose(got["probabilities"], tf.nn.softmax(want).numpy(), atol=1e-5)
    assert got["label_id"].tolist() == want.argmax(-1).tolist()
    by_ids = call(loaded.signatures[saved_model.IDS_SIGNATURE], **ids)
    np.testing.assert_allclose(by_ids["logits"], want, atol=1e-5)
    for log in read_warmup(path):
        request = log.predict_log.request
        inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
        out = call(loaded.signatures[request.model_spec.signature_name], **inputs)
        assert out["logits"].shape[1] == 4 and np.isfinite(out["logits"]).all()
