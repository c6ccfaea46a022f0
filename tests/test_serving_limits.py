"""Serving bounds: every signature refuses more rows than `max_batch_size`, the
raw-text ones strings longer than `max_text_length` UTF-8 bytes, and the ids signatures
ids outside the embedding tables, in the graph with INVALID_ARGUMENT naming the limit
(the same on every device); the limits come from export_model's flags and are recorded
in assets.extra/serving_limits.json."""

import json
import os

import pytest
import tensorflow as tf
from absl import flags

from bert_tf import export_model
from bert_tf.export import saved_model
from bert_tf.model import model_dir
from bert_tf.serving import modules as serving
from tests.helpers.export import as_bytes, call, fine_tuned_dir, ids_batch, packed, read_warmup


def _refused(fn, match, **inputs):
    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        call(fn, **inputs)


@pytest.fixture(scope="module")
def encoder_export(encoder_dir, tmp_path_factory):
    src, _ = encoder_dir
    path = saved_model.export_model_dir(model_dir.resolve(str(src)),
                                   str(tmp_path_factory.mktemp("limits")),
                                   max_batch_size=3, max_text_length=40)
    return path, tf.saved_model.load(path)


def test_encoder_signatures_refuse_requests_beyond_the_limits(encoder_export):
    path, loaded = encoder_export
    # The warmup requests are cut to the limits: TF Serving would not load the model if
    # one of them failed.
    warmup = read_warmup(path)
    assert len(warmup) == 2
    for log in warmup:
        request = log.predict_log.request
        inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
        assert max(len(t) for t in inputs.get("text", [b""])) <= 40
        call(loaded.signatures[request.model_spec.signature_name], **inputs)
    limits = json.load(open(os.path.join(path, "assets.extra", serving.LIMITS_FILE)))
    assert limits["max_batch_size"] == 3 and limits["max_text_length_utf8_bytes"] == 40
    ids_fn = loaded.signatures[saved_model.SERVING_DEFAULT]
    text_fn = loaded.signatures[saved_model.TEXT_SIGNATURE]
    good = ids_batch(batch=3)
    assert call(ids_fn, **good)["pooled_output"].shape[0] == 3
    _refused(ids_fn, "max_batch_size=3", **ids_batch(batch=4))
    vocab_size = 40  # tests.test_export.TINY
    for bad, match in ((vocab_size, "input_word_ids >= vocab_size=40"),
                       (-1, "input_word_ids below 0")):
        ids = {k: v.copy() for k, v in good.items()}
        ids["input_word_ids"][1, 2] = bad
        _refused(ids_fn, match, **ids)
    types = {k: v.copy() for k, v in good.items()}
    types["input_type_ids"][0, 1] = 2
    _refused(ids_fn, "input_type_ids >= type_vocab_size=2", **types)
    # Inputs that disagree are refused, not broadcast (1 row of ids, 3 of mask and types).
    _refused(ids_fn, "disagree on the batch size",
             **dict(good, input_word_ids=good["input_word_ids"][:1]))
    _refused(ids_fn, "shape of input_word_ids",
             **dict(good, input_mask=good["input_mask"][:, :2]))
    # Raw text: 40 bytes pass, 41 do not; a multi-byte character counts its bytes.
    assert call(text_fn, text=as_bytes(["a" * 40]))["pooled_output"].shape[0] == 1
    _refused(text_fn, "max_text_length=40 bytes", text=as_bytes(["ok", "a" * 41]))
    _refused(text_fn, "max_text_length=40 bytes", text=as_bytes(["서" * 14]))
    _refused(text_fn, "max_batch_size=3", text=as_bytes(["a"] * 4))


def test_defaults_apply_without_the_flags(encoder_dir, tmp_path):
    src, _ = encoder_dir
    path = saved_model.export_model_dir(model_dir.resolve(str(src)), str(tmp_path))
    limits = json.load(open(os.path.join(path, "assets.extra", serving.LIMITS_FILE)))
    assert limits["max_batch_size"] == serving.DEFAULT_MAX_BATCH_SIZE == 256
    assert limits["max_text_length_utf8_bytes"] == serving.DEFAULT_MAX_TEXT_LENGTH == 20000
    loaded = tf.saved_model.load(path)
    _refused(loaded.signatures[saved_model.TEXT_SIGNATURE], "max_text_length=20000",
             text=as_bytes(["word " * 4001]))


def test_ner_and_squad_long_texts_are_refused_not_split_into_thousands_of_windows(
        tmp_path, task_vocab_file, task_tokenizer):
    (tmp_path / "ner").mkdir()
    fine_tuned_dir(tmp_path / "ner", "conll2003", task_vocab_file, task_tokenizer, max_seq_length=8)
    ner = tf.saved_model.load(saved_model.export_model_dir(
        model_dir.resolve(str(tmp_path / "ner")), str(tmp_path / "ner_export"),
        max_text_length=100))
    fn = ner.signatures[saved_model.SERVING_DEFAULT]
    assert call(fn, text=as_bytes(["the lazy dog " * 7]))["num_words"].tolist() == [21]
    _refused(fn, "max_text_length=100", text=as_bytes(["the lazy dog " * 8]))
    ids = packed(task_tokenizer, ["the fox"], length=8)
    ids["input_word_ids"][0, 1] = 10 ** 6
    _refused(ner.signatures[saved_model.IDS_SIGNATURE], "vocab_size", **ids)

    (tmp_path / "squad").mkdir()
    fine_tuned_dir(tmp_path / "squad", "squad", task_vocab_file, task_tokenizer, max_seq_length=16,
                   doc_stride=3, max_query_length=4, n_best_size=5, max_answer_length=4)
    squad = tf.saved_model.load(saved_model.export_model_dir(
        model_dir.resolve(str(tmp_path / "squad")), str(tmp_path / "squad_export"),
        max_text_length=60, max_batch_size=2))
    fn = squad.signatures[saved_model.SERVING_DEFAULT]
    question, context = as_bytes(["where is seoul?"]), as_bytes(["seoul is the capital"])
    assert call(fn, question=question, context=context)["answer_text"].shape == (1,)
    _refused(fn, "max_text_length=60", question=question,
             context=as_bytes(["seoul is the capital of korea . " * 3]))
    _refused(fn, "max_batch_size=2", question=as_bytes(["q"] * 3),
             context=as_bytes(["c"] * 3))
    # The total work is bounded: one question whose context makes 5 windows (> 2 rows).
    _refused(fn, "more model rows", question=question,
             context=as_bytes(["a b c d e f g h i j k l m n o p q r s t"]))
    _refused(fn, "disagree on the batch size", question=question,
             context=as_bytes(["seoul", "korea"]))


def test_export_model_flags_set_the_limits_and_refuse_zero():
    fv = flags.FlagValues()
    export_model.define_flags(fv)
    fv(["export_model", "--init_checkpoint=m", "--export_dir=e", "--max_batch_size=8",
        "--max_text_length=1000"])
    config = export_model.ExportConfig.from_flags(fv)
    assert (config.max_batch_size, config.max_text_length) == (8, 1000)
    bad = flags.FlagValues()
    export_model.define_flags(bad)
    with pytest.raises(flags.IllegalFlagValueError, match="max_batch_size"):
        bad(["export_model", "--init_checkpoint=m", "--export_dir=e", "--max_batch_size=0"])
