"""A model pretrained on kiwi-pre-split text (`"pre_tokenizer": "kiwi"` in its model dir):
finetune and extract_features split the user's text the same way (`tasks.pre_split`),
the model sees exactly the split text, token-classification offsets index the text as
given, and the export keeps raw-text signatures that take split text (and says so)."""

import json
import logging
import unicodedata

import numpy as np
import pytest

from bert_tf import export_model, extract_features, finetune
from bert_tf.app import setting_fields
from bert_tf.model import model_dir
from bert_tf.tasks import make_task
from bert_tf.tasks.pre_split import (PreSplitTokenizer, host_tokenizer, insert_spaces,
                                     space_positions)
from bert_tf.text.tokenization import BertTokenizer
from tests.helpers import make_model_dir, write_vocab

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# (sentence, its entities as (text, type)); the classification label is 1 without any.
SENTENCES = [("김철수는 서울에 갔다", [("김철수", "PS"), ("서울", "LC")]),
             ("이영희가 부산에서 왔다", [("이영희", "PS"), ("부산", "LC")]),
             ("대한민국은 민주공화국이다", [("대한민국", "LC")]),
             ("정말 재미있게 봤습니다", []),
             ("너무 지루한 영화였다", []),
             ("박민수는 어제 대구에 갔다", [("박민수", "PS"), ("대구", "LC")])]
TEXTS = [s for s, _ in SENTENCES]


def char_vocab(path, texts):
    chars = sorted({c for t in texts for c in t if not c.isspace()})
    return write_vocab(path, SPECIAL + chars + ["##" + c for c in chars])


def char_level_file(path, sentences):
    """KLUE-NER's layout: `## id`, then a character and its BIO tag a line."""
    lines = []
    for n, (text, entities) in enumerate(sentences):
        tags = ["O"] * len(text)
        for entity, kind in entities:
            start = text.index(entity)
            tags[start:start + len(entity)] = [f"B-{kind}"] + [f"I-{kind}"] * (len(entity) - 1)
        lines += [f"## s{n}"] + [f"{c}\t{t}" for c, t in zip(text, tags)] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return str(path)


# ------------------------------------------------------------------ offsets (no analyser)
def space_before_particles(lines):
    """A stand-in pre-tokenizer: NFC, then a space before 는 / 에 (after a syllable)."""
    out = []
    for line in lines:
        line = unicodedata.normalize("NFC", line)
        for particle in "는에":
            line = line.replace(particle, " " + particle).replace("  ", " ")
        out.append(line.lstrip(" "))
    return out


def test_offsets_index_the_text_as_given(tmp_path):
    vocab = char_vocab(tmp_path / "vocab.txt", TEXTS)
    inner = BertTokenizer(vocab, do_lower_case=True, strip_accents=False)
    tokenizer = PreSplitTokenizer(inner, "kiwi", splitter=space_before_particles)
    decomposed = unicodedata.normalize("NFD", "철수는 서울에")  # jamo: normalized to split
    texts = ["김철수는 서울에 갔다", decomposed]
    split = tokenizer.split(texts)
    assert split == ["김철수 는 서울 에 갔다", "철수 는 서울 에"]
    assert tokenizer.tokenize(texts).to_list() == inner.tokenize(split).to_list()
    ids, starts, ends = tokenizer.tokenize_with_offsets(texts)
    assert ids.to_list() == inner.tokenize(split).to_list()
    for text, row, row_starts, row_ends in zip(texts, ids.to_list(), starts.to_list(),
                                               ends.to_list()):
        raw = text.encode("utf-8")
        spans = [unicodedata.normalize("NFC", raw[s:e].decode("utf-8"))
                 for s, e in zip(row_starts, row_ends)]
        pieces = [inner.id_to_token(i).lstrip("#") for i in row]
        assert spans == pieces, text  # each piece is the original characters it came from
    # "김철수는": pieces 김 ##철 ##수 | 는, the particle at byte 9 of the original
    assert ends.to_list()[0][2] == starts.to_list()[0][3] == 9
    # In the decomposed text the spaces go before the jamo of 는 and 에.
    nfd = [len(unicodedata.normalize("NFD", t)) for t in ("철수", "철수는 서울")]
    assert space_positions(decomposed, split[1]) == nfd
    assert insert_spaces("ab", [1, 1]) == ("a b", [0, 1, 1, 2])


# ------------------------------------------------------------------ kiwi, end to end
@pytest.fixture(scope="module")
def kiwi_model(tmp_path_factory):
    """kiwi (loaded once for the module), and a tiny model dir that records it."""
    pytest.importorskip("kiwipiepy", reason="pip install -r requirements-korean.txt")
    from bert_tf.text.pre_tokenizers import get_pre_tokenizer

    splitter = get_pre_tokenizer("kiwi")
    root = tmp_path_factory.mktemp("kiwi_model")
    vocab = char_vocab(root / "vocab.txt", TEXTS)
    init = make_model_dir(root / "init", vocab, strip_accents=False, pre_tokenizer="kiwi")
    return root, init, splitter


def run_finetune(args, monkeypatch):
    """finetune.run in process; returns the model inputs of every prediction call."""
    from bert_tf.training.loop import Trainer

    seen = []
    predict = Trainer.predict
    monkeypatch.setattr(Trainer, "predict", lambda self, features, *a, **k: seen.append(
        features) or predict(self, features, *a, **k))
    finetune.run(finetune.FinetuneConfig.from_flags(setting_fields.parse_args(
        finetune.define_flags, args + ["--max_seq_length=32", "--train_batch_size=4",
                                       "--eval_batch_size=4", "--predict_batch_size=4",
                                       "--num_train_epochs=1", "--learning_rate=1e-3",
                                       "--mixed_precision=float32", "--steps_per_loop=1"])))
    return seen


def plain_inputs(init, split_texts, length=32):
    """The ids the plain tokenizer gives the already split texts (what pretraining saw)."""
    tokenizer = model_dir.resolve(init).tokenizer()
    return np.asarray(tokenizer.encode(split_texts, max_seq_length=length)["input_word_ids"])


def test_finetune_classification_sees_the_split_text_and_export_serves_it(
        kiwi_model, tmp_path, monkeypatch, caplog):
    root, init, splitter = kiwi_model
    rows = "".join(f"{n}\t{s}\t{int(not e)}\n" for n, (s, e) in enumerate(SENTENCES))
    data = tmp_path / "ratings.txt"
    data.write_text("id\tdocument\tlabel\n" + rows, encoding="utf-8")
    out = tmp_path / "nsmc_like"
    [dev] = run_finetune(["--task_name=classification", f"--train_file={data}",
                          f"--validation_file={data}", "--text_column=document",
                          f"--init_checkpoint={init}", f"--output_dir={out}",
                          "--do_train", "--do_eval"], monkeypatch)
    split = splitter(TEXTS)
    assert split[0] == "김철수 는 서울 에 갔 다" and split != TEXTS
    want = plain_inputs(init, split)
    assert np.array_equal(dev["input_word_ids"], want[:, :dev["input_word_ids"].shape[1]])
    assert not np.array_equal(want, plain_inputs(init, TEXTS))  # the split matters here
    # The fine-tuned dir still records the split, so predict and export know it.
    assert model_dir.resolve(str(out)).text.pre_tokenizer == "kiwi"

    # The export keeps the raw-text signature, says it takes split text and records it.
    import tensorflow as tf

    caplog.set_level(logging.WARNING)
    path = export_model.run(export_model.ExportConfig.from_flags(setting_fields.parse_args(
        export_model.define_flags, [f"--init_checkpoint={out}",
                                    f"--export_dir={tmp_path / 'export'}"])))
    assert any("raw-text signatures take text split the same way (python -m "
               "bert_tf.pre_tokenizers" in r.getMessage() for r in caplog.records)
    with open(f"{path}/assets.extra/{model_dir.TOKENIZER_CONFIG_FILE}") as f:
        assert json.load(f)["pre_tokenizer"] == "kiwi"
    loaded = tf.saved_model.load(path)
    served = loaded.signatures["serving_default"](text=tf.constant(split))
    length = int(dev["input_mask"].sum(axis=1).max())
    by_ids = loaded.signatures["serving_ids"](**{
        k: tf.constant(dev[k][:, :length], tf.int32)
        for k in ("input_word_ids", "input_mask", "input_type_ids")})
    np.testing.assert_allclose(served["logits"].numpy(), by_ids["logits"].numpy(), atol=1e-5)


def test_token_classification_offsets_map_to_the_original_text(kiwi_model, tmp_path,
                                                               monkeypatch):
    root, init, splitter = kiwi_model
    train = char_level_file(tmp_path / "train.tsv", SENTENCES)
    test = char_level_file(tmp_path / "test.tsv", SENTENCES[:3])
    out = tmp_path / "tagger"
    [predicted] = run_finetune(["--task_name=token_classification", f"--train_file={train}",
                                f"--test_file={test}", f"--init_checkpoint={init}",
                                f"--output_dir={out}", "--do_train", "--do_predict"],
                               monkeypatch)
    texts = TEXTS[:3]
    want = plain_inputs(init, splitter(texts))
    assert np.array_equal(predicted["input_word_ids"],
                          want[:, :predicted["input_word_ids"].shape[1]])
    # The predictions file: the original characters, one tag each.
    blocks = (out / "predictions.tsv").read_text(encoding="utf-8").strip().split("\n\n")
    assert ["".join(line.split("\t")[0] for line in b.split("\n")[1:]) for b in blocks] == texts
    # Each unit (piece) spans the original characters it came from, and the particles
    # kiwi split off are units of their own (김철수 | 는).
    task = make_task("token_classification", host_tokenizer(model_dir.resolve(init)),
                     files={"train": train, "test": test})
    examples = task.get_examples("test")
    units = task._units(examples)
    vocab = model_dir.resolve(init).tokenizer()
    for example, row in zip(examples, units):
        assert [example.text[s:t] for s, t, _ in row] == [
            vocab.id_to_token(i).lstrip("#") for _, _, i in row]
    assert [examples[0].text[s:t] for s, t, _ in units[0]][:4] == ["김", "철", "수", "는"]
    assert units[0][3][:2] == (3, 4)
    tags = task.postprocess({"logits": np.eye(len(task.labels))[
        np.full(predicted["input_word_ids"].shape, task.labels.index("B-PS"))]},
        predicted, examples)
    assert [len(t) for t in tags] == [len(t) for t in texts]
    entities = task.entities(tags[0], examples[0])
    assert all(e["entity_text"] == texts[0][e["start_char"]:e["end_char"]] for e in entities)
    assert entities[0]["entity_text"] == "김"


def test_extract_features_splits_the_input_file(kiwi_model, tmp_path):
    root, init, splitter = kiwi_model
    (tmp_path / "in.txt").write_text(TEXTS[0] + "\n", encoding="utf-8")
    out = tmp_path / "features.jsonl"
    extract_features.run(extract_features.ExtractConfig.from_flags(setting_fields.parse_args(
        extract_features.define_flags, [f"--input_file={tmp_path / 'in.txt'}",
                                        f"--output_file={out}", f"--init_checkpoint={init}",
                                        "--layers=-1", "--max_seq_length=32"])))
    tokens = [t["token"] for t in json.loads(out.read_text(encoding="utf-8"))["features"]]
    tokenizer = model_dir.resolve(init).tokenizer()
    assert tokens == ["[CLS]"] + [tokenizer.id_to_token(i) for i in tokenizer.tokenize(
        splitter(TEXTS[:1])).to_list()[0]] + ["[SEP]"]
    assert tokens[4] == "는"  # 김 ##철 ##수 는: the particle starts a word of its own
