"""CoNLL-2003 NER: reader (IOB1 -> BIO, -DOCSTART-, sentences), first-sub-token labels,
splitting of long sentences, postprocessing back to words, entity F1, predictions file."""

import numpy as np
import pytest

from bert_tf.model.encoder import BertEncoder
from bert_tf.tasks import make_task, metrics
from bert_tf.tasks.base import TaskDataError
from bert_tf.tasks.ner import CONLL2003_LABELS, IGNORE, iob1_to_iob2, read_conll
from tests.helpers import tiny_config

SMALL_CONLL = """-DOCSTART- -X- O O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC
call NN I-NP O
. . O O

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER
Smith NNP I-NP B-PER

-DOCSTART- -X- O O

BRUSSELS NNP I-NP I-LOC
1996-08-22 CD I-NP O
"""


def test_reader_converts_iob1_and_splits_sentences(tmp_path):
    (tmp_path / "eng.train").write_text(SMALL_CONLL)
    examples = make_task("conll2003", data_dir=str(tmp_path)).get_examples("train")
    assert [e.words for e in examples] == [
        ["EU", "rejects", "German", "call", "."], ["Peter", "Blackburn", "Smith"],
        ["BRUSSELS", "1996-08-22"]]
    assert [e.tags for e in examples] == [
        ["B-ORG", "O", "B-MISC", "O", "O"], ["B-PER", "I-PER", "B-PER"], ["B-LOC", "O"]]
    assert examples[1].source.endswith("eng.train:9")
    assert iob1_to_iob2(["I-ORG", "I-LOC", "I-LOC", "O", "I-LOC", "B-LOC"]) == [
        "B-ORG", "B-LOC", "I-LOC", "O", "B-LOC", "B-LOC"]


def test_reader_errors_name_file_and_line(tmp_path):
    (tmp_path / "eng.testa").write_text("EU NNP I-NP I-ORG\nrejects VBZ I-VP I-GPE\n")
    with pytest.raises(TaskDataError, match=r"eng.testa:2: tag 'I-GPE' is not a CoNLL-2003"):
        make_task("ner", data_dir=str(tmp_path)).get_examples("dev")
    (tmp_path / "bad").write_text("lonely\n")
    with pytest.raises(TaskDataError, match=r"bad:1: expected `word ... tag` columns \(the "
                                            r"tag last\), got 'lonely'; is this a CoNLL-2003"):
        read_conll(str(tmp_path / "bad"))


def test_one_reader_for_conll2003_and_own_files(tmp_path):
    """CoNLL-2003 and --task_name=token_classification read columns with `read_conll`:
    the same sentences; they differ only in the tags allowed, untagged test lines and
    the hint of a bad line."""
    (tmp_path / "eng.testb").write_text(SMALL_CONLL)
    (tmp_path / "test.txt").write_text(SMALL_CONLL)
    conll = make_task("conll2003", data_dir=str(tmp_path)).get_examples("test")
    own = make_task("token_classification", label_list=CONLL2003_LABELS,
                    files={"test": str(tmp_path / "test.txt")}).get_examples("test")
    assert [(e.words, e.tags, e.source.rsplit(":", 1)[1]) for e in conll] == [
        (e.words, e.tags, e.source.rsplit(":", 1)[1]) for e in own]
    untagged = "EU NNP I-NP I-ORG\nrejects\n"
    (tmp_path / "eng.testb").write_text(untagged)
    (tmp_path / "test.txt").write_text(untagged)
    with pytest.raises(TaskDataError) as caught:
        make_task("conll2003", data_dir=str(tmp_path)).get_examples("test")
    assert str(caught.value) == (f"{tmp_path / 'eng.testb'}:2: expected `word ... tag` "
                                 f"columns (the tag last), got 'rejects'; is this a "
                                 f"CoNLL-2003 file?")
    [sentence] = make_task("token_classification", label_list=CONLL2003_LABELS, files={
        "test": str(tmp_path / "test.txt")}).get_examples("test")
    assert (sentence.words, sentence.tags) == (["EU", "rejects"], None)
    with pytest.raises(TaskDataError) as caught:
        make_task("token_classification", files={
            "train": str(tmp_path / "test.txt")}).get_examples("train")
    assert str(caught.value).endswith(":2: expected `word ... tag` columns (the tag last), "
                                      "got 'rejects'; give every line its tag (only "
                                      "--test_file may leave them out)")
    assert "\n" not in str(caught.value)


def test_real_conll_counts(shared_data):
    task = make_task("conll2003", data_dir=str(shared_data / "conll2003"))
    for split, sentences, tokens, entities in [("train", 14041, 203621, 23499),
                                               ("dev", 3250, 51362, 5942)]:
        examples = task.get_examples(split)
        assert len(examples) == sentences
        assert sum(len(e.words) for e in examples) == tokens
        assert sum(len(metrics.get_entities(e.tags)) for e in examples) == entities
        # BIO after conversion: an I- always continues an entity of its type
        for e in examples[:2000]:
            for prev, tag in zip(["O"] + e.tags, e.tags):
                assert not tag.startswith("I-") or prev[2:] == tag[2:]


class PieceTokenizer:
    """Words split into 3-character pieces: enough to test first-sub-token labelling."""

    cls_id, sep_id, pad_id, unk_id = 101, 102, 0, 100

    def tokenize(self, words):
        import tensorflow as tf

        return tf.ragged.constant(
            [[1000 + len(w) * 10 + i for i in range(0, len(w), 3)] for w in words],
            dtype=tf.int64, row_splits_dtype=tf.int64)


def test_first_sub_token_labels_and_splitting(tmp_path):
    (tmp_path / "eng.train").write_text(SMALL_CONLL)
    task = make_task("conll2003", data_dir=str(tmp_path), tokenizer=PieceTokenizer(),
                     max_seq_length=8)
    examples = task.get_examples("train")
    features = task.convert_examples(examples, "train")
    # room for 6 pieces: EU(1) rejects(3) German(2) | call(2) .(1);
    # Peter(2) Blackburn(3) | Smith(2); BRUSSELS(3) | 1996-08-22(4)
    assert features["example_index"].tolist() == [0, 0, 1, 1, 2, 2]
    label = {t: i for i, t in enumerate(CONLL2003_LABELS)}
    assert features["label_ids"][0].tolist() == [
        IGNORE, label["B-ORG"], label["O"], IGNORE, IGNORE, label["B-MISC"], IGNORE, IGNORE]
    assert features["input_word_ids"][0].tolist()[0] == 101
    assert features["input_word_ids"][0].tolist()[-1] == 102  # 6 pieces + [CLS] [SEP]
    assert features["word_index"][0].tolist() == [-1, 0, 1, -1, -1, 2, -1, -1]
    assert features["word_index"][1].tolist()[:4] == [-1, 3, -1, 4]
    assert features["input_mask"][1].tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    # every word of a split sentence is labelled exactly once
    words = features["word_index"][features["example_index"] == 1].ravel().tolist()
    assert sorted(w for w in words if w >= 0) == [0, 1, 2]
    assert (features["label_ids"] >= 0).sum() == sum(len(e.words) for e in examples)

    # outputs that put the gold tag on each first sub-token give back the gold tags
    logits = np.zeros(features["label_ids"].shape + (len(CONLL2003_LABELS),), np.float32)
    rows, cols = np.nonzero(features["label_ids"] >= 0)
    logits[rows, cols, features["label_ids"][rows, cols]] = 5.0
    predictions = task.postprocess({"logits": logits}, features, examples)
    assert predictions == [e.tags for e in examples]
    assert task.evaluate(predictions, examples)["f1"] == 1.0
    [path] = task.write_predictions(predictions, examples, str(tmp_path))
    assert open(path).read().split("\n")[:2] == ["EU B-ORG B-ORG", "rejects O O"]


def test_token_head_and_masked_loss():
    task = make_task("conll2003", max_seq_length=6)
    cfg = tiny_config(vocab_size=200, max_position_embeddings=512)
    model = task.build_model(BertEncoder(cfg))
    ids = np.array([[101, 7, 8, 9, 102, 0]], np.int32)
    labels = np.array([[IGNORE, 1, IGNORE, 0, IGNORE, IGNORE]], np.int32)
    batch = {"input_word_ids": ids, "input_mask": (ids > 0).astype(np.int32),
             "input_type_ids": np.zeros_like(ids), "label_ids": labels}
    outputs = model(batch)
    logits = np.asarray(outputs["logits"])
    assert logits.shape == (1, 6, len(CONLL2003_LABELS))
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(log_probs[0, 1, 1] + log_probs[0, 3, 0]) / 2  # ignored positions do not count
    assert float(task.loss(batch, outputs)) == pytest.approx(expected, rel=1e-5)


def test_real_tokenizer_on_real_dev_sentences(shared_data):
    from bert_tf.text.tokenization import BertTokenizer

    tokenizer = BertTokenizer(shared_data / "vocab" / "bert-base-uncased-vocab.txt",
                              do_lower_case=True)
    task = make_task("conll2003", data_dir=str(shared_data / "conll2003"),
                     tokenizer=tokenizer, max_seq_length=32)
    examples = task.get_examples("dev")[:40]
    features = task.convert_examples(examples, "dev")
    pieces = tokenizer.tokenize([w for e in examples for w in e.words]).to_list()
    first_piece = iter(p[0] for p in pieces)
    # row by row, the labelled positions hold each word's first WordPiece, in order
    for n, example in enumerate(examples):
        rows = np.nonzero(features["example_index"] == n)[0]
        ids = np.concatenate([features["input_word_ids"][r][features["word_index"][r] >= 0]
                              for r in rows])
        assert ids.tolist() == [next(first_piece) for _ in example.words]
        labels = np.concatenate([features["label_ids"][r][features["label_ids"][r] >= 0]
                                 for r in rows])
        assert [CONLL2003_LABELS[i] for i in labels] == example.tags
    assert features["input_word_ids"][0, 0] == tokenizer.cls_id
    lengths = features["input_mask"].sum(1)
    assert (features["input_word_ids"][np.arange(len(lengths)), lengths - 1]
            == tokenizer.sep_id).all()
    assert len(features["example_index"]) > len(examples)  # some sentences were split


def test_serving_tags_equal_host_postprocess(shared_data):
    """The raw-text signature's windows and first-sub-token tags equal convert_examples +
    postprocess on the same sentences (real CoNLL dev, windows of 14 pieces: many split)."""
    import tensorflow as tf

    from bert_tf.text.tokenization import BertTokenizer
    from tests.helpers.tasks import tiny_task_model

    tokenizer = BertTokenizer(shared_data / "vocab" / "bert-base-uncased-vocab.txt",
                              do_lower_case=True)
    task = make_task("conll2003", data_dir=str(shared_data / "conll2003"),
                     tokenizer=tokenizer, max_seq_length=16)
    examples = task.get_examples("dev")[:60]
    model = tiny_task_model(task, tokenizer.vocab_size)
    features = task.convert_examples(examples, "dev")
    assert len(features["example_index"]) > len(examples)  # some sentences were split
    logits = model({k: features[k] for k in task.model_input_names})["logits"]
    want = task.postprocess({"logits": logits}, features, examples)

    module = task.serving_module(model, tokenizer, 16)
    got = module.serve_text(tf.constant([" ".join(e.words) for e in examples]))
    for row, example in enumerate(examples):
        n = int(got["num_words"][row])
        assert [w.decode() for w in got["words"][row, :n].numpy()] == example.words
        assert [t.decode() for t in got["tags"][row, :n].numpy()] == want[row], row
    # The ids signature gives the model's own logits.
    ids = {k: features[k][:4] for k in task.model_input_names}
    np.testing.assert_allclose(module.serve_ids(**ids)["logits"], logits[:4], atol=1e-5)
