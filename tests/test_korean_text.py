"""Korean (and accent-keeping) text handling on real Korean text: strip_accents separate
from do_lower_case (HF's meaning), the in-graph tokenizer == the host-side rules ==
Hugging Face's tokenizers, the model directory records the choice and the SavedModel
tokenizes as training did; the kiwi pre-tokenizer.

Korean text: tests/data/korean/kolaw_kobill.txt (see tests/data/korean/README.md).
"""

import json
import os
import unicodedata

import numpy as np
import pytest

from bert_tf.model import model_dir
from bert_tf.text.text_rules import (BasicTokenizer, TextMode, WordPieceTokenizer,
                                infer_strip_accents, text_mode)
from bert_tf.text.tokenization import BertTokenizer
from data_prep.build_vocab import build_vocab_from_counts, isolated_characters
from tests.helpers import first_lines, piece_spans
from tests.helpers.text import all_code_point_texts, korean_lines

def english_lines(shared_data, n=600):
    return first_lines(shared_data / "pretrain" / "enwiki_2015_bert_format.txt", n)


def accented_lines(shared_data, n=300):
    """Real enwiki sentences holding accented Latin (names, places)."""
    return first_lines(
        shared_data / "pretrain" / "enwiki_2015_bert_format.txt", n,
        keep=lambda line: any(unicodedata.decomposition(c).split()[1:2] and c.isalpha()
                              and not c.isascii() for c in line))


def learn_vocab(path, lines, do_lower_case, strip_accents, size=4000):
    basic = BasicTokenizer(do_lower_case, strip_accents=strip_accents)
    counts = {}
    for line in lines:
        for w in basic.tokenize(line):
            counts[w] = counts.get(w, 0) + 1
    chars = {c for w in counts for c in w}
    vocab = build_vocab_from_counts(counts, size, num_unused=5,
                                    isolated_chars=isolated_characters(chars,
                                                                       basic.tokenize_batch))
    path.write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def texts(shared_data):
    return korean_lines() + english_lines(shared_data) + accented_lines(shared_data)


@pytest.fixture(scope="module")
def keep_vocab(tmp_path_factory, texts):
    """Uncased, accents kept: learned from the Korean + English + accented lines."""
    return learn_vocab(tmp_path_factory.mktemp("keep") / "vocab.txt", texts, True, False)


@pytest.fixture(scope="module")
def keep_tok(keep_vocab):
    return BertTokenizer(keep_vocab, do_lower_case=True, strip_accents=False)


def test_text_mode_follows_hugging_face():
    assert text_mode(True) == TextMode(True, True, False)        # the original uncased
    assert text_mode(False) == TextMode(False, False, False)     # the original cased
    assert text_mode(True, False) == TextMode(True, False, True)
    assert text_mode(False, True) == TextMode(False, True, False)
    words = BasicTokenizer(True, strip_accents=False).tokenize("대한민국은 ÉCOLE Ångström")
    assert words == ["대한민국은", "école", "ångström"]
    # Stripping breaks every syllable into jamo, which is what --nostrip_accents avoids.
    assert BasicTokenizer(True).tokenize("대한민국은")[0] == unicodedata.normalize(
        "NFD", "대한민국은")


def test_vocab_keeps_syllables_and_records_infer(keep_vocab):
    tokens = open(keep_vocab, encoding="utf-8").read().split("\n")
    assert "대한민국" in tokens or "##민국" in tokens
    assert not any("\u1100" <= c <= "\u11ff" for t in tokens for c in t)  # no jamo
    assert infer_strip_accents(keep_vocab) is False


def test_korean_ids_graph_equals_host(keep_vocab, keep_tok):
    """The in-graph tokenizer and the offline jobs' host-side one, on real Korean."""
    lines = korean_lines()
    host = WordPieceTokenizer.from_vocab_file(keep_vocab, True, strip_accents=False)
    graph = keep_tok.tokenize(lines).to_list()
    assert graph == [host.tokenize_line(t) for t in lines]
    # Hangul stays in syllables: no [UNK] on the text the vocab was learned from, and
    # far fewer pieces than the jamo the stripping mode makes.
    flat = [i for row in graph for i in row]
    assert keep_tok.unk_id not in flat
    stripped = BasicTokenizer(True).tokenize_batch(lines[:200])
    kept = BasicTokenizer(True, strip_accents=False).tokenize_batch(lines[:200])
    assert sum(len(w) for r in kept for w in r) * 2 < sum(len(w) for r in stripped for w in r)


@pytest.mark.parametrize("lower,strip", [(True, False), (False, True)])
def test_every_code_point_graph_equals_host(tmp_path, lower, strip):
    """Every code point (the exactness suite's texts): in-graph words == text_rules words;
    this also checks TF Text's ICU NFC against Python's unicodedata NFC."""
    vocab = tmp_path / "v.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n", encoding="utf-8")
    tok = BertTokenizer(str(vocab), do_lower_case=lower, strip_accents=strip)
    host = BasicTokenizer(lower, strip_accents=strip)
    texts = all_code_point_texts()
    got = tok.basic_tokenize(texts).to_list()
    bad = [(t, g) for t, g in zip(texts, got)
           if [w.decode("utf-8") for w in g] != host.tokenize(t)]
    assert not bad, f"{len(bad)} of {len(texts)} texts differ"


def _hf(vocab_file, lower, strip):
    from transformers import BertTokenizer as HFBertTokenizer

    return HFBertTokenizer(vocab_file, do_lower_case=lower, strip_accents=strip)


def test_matches_hugging_face_on_real_text(keep_vocab, keep_tok, texts):
    """transformers' BertTokenizer(do_lower_case=True, strip_accents=False) on Korean +
    English + accented Latin + the hanja of the Korean text: the same ids."""
    hf = _hf(keep_vocab, True, False)
    expected = hf(texts, add_special_tokens=False)["input_ids"]
    got = keep_tok.tokenize(texts).to_list()
    bad = [t for t, g, e in zip(texts, got, expected) if g != e]
    assert not bad, f"{len(bad)} of {len(texts)} lines differ, first: {bad[:2]}"
    assert any("\u4e00" <= c <= "\u9fff" for t in texts for c in t)  # hanja present


def test_cased_strip_accents_matches_hugging_face(tmp_path, texts):
    vocab = learn_vocab(tmp_path / "vocab.txt", texts, False, True, size=3000)
    ours = BertTokenizer(vocab, do_lower_case=False, strip_accents=True)
    expected = _hf(vocab, False, True)(texts, add_special_tokens=False)["input_ids"]
    assert ours.tokenize(texts).to_list() == expected
    host = WordPieceTokenizer.from_vocab_file(vocab, False, strip_accents=True)
    assert [host.tokenize_line(t) for t in texts] == expected


def test_decomposed_hangul_is_composed_first(keep_vocab, keep_tok):
    """Jamo input (NFD, e.g. from macOS file names) gives the ids of composed text. HF's
    `tokenizers` BertNormalizer keeps the jamo (a vocab of syllables then cannot match);
    its Python BasicTokenizer NFC-normalizes as we do."""
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    lines = korean_lines()[:300]
    decomposed = [unicodedata.normalize("NFD", t) for t in lines]
    assert decomposed != lines
    composed_ids = keep_tok.tokenize(lines).to_list()
    assert keep_tok.tokenize(decomposed).to_list() == composed_ids
    host = WordPieceTokenizer.from_vocab_file(keep_vocab, True, strip_accents=False)
    assert [host.tokenize_line(t) for t in decomposed] == composed_ids
    legacy = BertTokenizerLegacy(keep_vocab, do_lower_case=True, strip_accents=False)
    assert [legacy.convert_tokens_to_ids(legacy.tokenize(t)) for t in decomposed[:50]] \
        == composed_ids[:50]
    fast = _hf(keep_vocab, True, False)(decomposed[:50], add_special_tokens=False)
    assert fast["input_ids"] != composed_ids[:50]  # what the NFC step is for


def test_korean_offsets_point_at_the_pieces(keep_tok):
    lines = korean_lines()[:300]
    lines += [unicodedata.normalize("NFD", t) for t in lines[:50]]
    checked = 0
    for t, _, piece, span in piece_spans(keep_tok, lines):
        span = unicodedata.normalize("NFC", span).lower()
        assert span == piece, (t, span, piece)
        checked += 1
    assert checked > 5000


def test_model_dir_records_and_resolves(tmp_path, keep_vocab):
    from bert_tf.model.config import BertConfig

    cfg = BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=16)
    d = str(tmp_path / "m")
    model_dir.write_metadata(d, cfg, vocab_file=keep_vocab, do_lower_case=True, strip_accents=False,
                      pre_tokenizer="kiwi")
    assert json.load(open(os.path.join(d, "tokenizer_config.json"))) == {
        "do_lower_case": True, "strip_accents": False, "pre_tokenizer": "kiwi"}
    got = model_dir.resolve(d).text
    assert got == model_dir.TokenizerConfig(True, False, "kiwi")
    # A flag wins over the record; an old dir (no strip_accents key) infers from the vocab.
    assert model_dir.resolve(d, strip_accents=True).text.strip_accents is True
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True}, f)
    assert model_dir.resolve(d).text.strip_accents is False
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        f.write("{not json")
    with pytest.raises(ValueError, match="tokenizer_config.json: not valid JSON"):
        model_dir.resolve(d)


def tiny_model_dir(path, vocab_file):
    """A one-layer encoder model dir over `vocab_file` recording strip_accents=False."""
    from tests.helpers import make_model_dir

    return make_model_dir(path, vocab_file, strip_accents=False)


def test_export_tokenizes_as_training_did(tmp_path, keep_vocab, keep_tok):
    """A model dir recording --nostrip_accents exports a raw-text signature whose ids are
    BertTokenizer(strip_accents=False)'s (and not the stripping ones)."""
    import tensorflow as tf

    from bert_tf.export.saved_model import export_model_dir

    d = tiny_model_dir(tmp_path / "model", keep_vocab)
    path = export_model_dir(model_dir.resolve(d), str(tmp_path / "export"), max_seq_length=64)
    assert json.load(open(os.path.join(path, "assets.extra", "tokenizer_config.json"))) == {
        "do_lower_case": True, "strip_accents": False}
    loaded = tf.saved_model.load(path)
    lines = korean_lines()[:40] + [unicodedata.normalize("NFD", korean_lines()[0])]
    out = loaded.signatures["serving_text"](text=tf.constant(lines))
    expected = keep_tok.encode(lines, max_seq_length=64)["input_word_ids"].numpy()
    got = out["input_word_ids"].numpy()
    np.testing.assert_array_equal(got, expected[:, :got.shape[1]])
    stripping = BertTokenizer(keep_vocab, do_lower_case=True)
    assert not np.array_equal(stripping.encode(lines, max_seq_length=64)["input_word_ids"]
                              .numpy()[:, :got.shape[1]], got)


# ------------------------------------------------------------------ pre-tokenizer (kiwi)


def test_split_at_boundaries_inserts_spaces_only():
    from bert_tf.text.pre_tokenizers import split_at_boundaries

    text = "KTX를 타고 abc123에"
    out = split_at_boundaries(text, [(0, 3), (3, 4), (5, 6), (6, 7), (8, 11), (11, 14),
                                     (14, 15)])
    assert out == "KTX 를 타 고 abc123 에"
    assert out.replace(" ", "") == text.replace(" ", "")


def test_pre_tokenizer_missing_dependency_says_what_to_install(monkeypatch):
    import importlib.util

    from bert_tf.text import pre_tokenizers

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "kiwipiepy" else real(name, *a))
    with pytest.raises(pre_tokenizers.PreTokenizerError,
                       match="pip install -r requirements-korean.txt"):
        pre_tokenizers.check_available("kiwi")


def test_kiwi_pre_tokenizer_on_real_korean(tmp_path):
    pytest.importorskip("kiwipiepy", reason="pip install -r requirements-korean.txt")
    from bert_tf.text.pre_tokenizers import get_pre_tokenizer, split_lines

    lines = korean_lines()[:200] + [""]
    split = get_pre_tokenizer("kiwi")(lines)
    assert [s.replace(" ", "") for s in split] == [t.replace(" ", "") for t in lines]
    assert split[-1] == ""
    assert "대한민국 은" in " ".join(split) or "대한민국 의" in " ".join(split)
    more_words = sum(len(s.split()) for s in split) / sum(len(t.split()) for t in lines)
    assert more_words > 1.5  # particles and endings come off the words
    assert split_lines(lines[:3], None) == lines[:3]
    assert split_lines(lines[:3], "kiwi") == split[:3]


def test_hugging_face_import_keeps_strip_accents(tmp_path):
    from bert_tf.checkpoints import huggingface

    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": True, "strip_accents": False}))
    assert huggingface._huggingface_text_settings(str(tmp_path))[1] is False
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    (tmp_path / "tokenizer.json").write_text(json.dumps(
        {"normalizer": {"type": "BertNormalizer", "lowercase": True, "strip_accents": False}}))
    assert huggingface._huggingface_text_settings(str(tmp_path))[1] is False
    (tmp_path / "tokenizer.json").unlink()
    assert huggingface._huggingface_text_settings(str(tmp_path))[1] is None


def test_beam_pipeline_takes_the_text_flags():
    from data_prep import beam_pipeline

    base = ["--input_file=a.txt", "--output_file=o.tfrecord", "--vocab_file=v.txt"]
    cfg, _ = beam_pipeline.parse_args(base)
    assert (cfg.strip_accents, cfg.pre_tokenizer) == (None, None)
    cfg, rest = beam_pipeline.parse_args(base + ["--nostrip_accents", "--pre_tokenizer=kiwi",
                                                 "--runner=DirectRunner"])
    assert (cfg.do_lower_case, cfg.strip_accents, cfg.pre_tokenizer) == (True, False, "kiwi")
    assert rest == ["--runner=DirectRunner"]
    cfg, _ = beam_pipeline.parse_args(base + ["--strip_accents", "--nodo_lower_case"])
    assert (cfg.do_lower_case, cfg.strip_accents) == (False, True)


def test_pre_tokenizers_command_splits_stdin(monkeypatch, capsys):
    pytest.importorskip("kiwipiepy", reason="pip install -r requirements-korean.txt")
    import io

    from bert_tf import pre_tokenizers

    monkeypatch.setattr("sys.stdin", io.StringIO("대한민국은 민주공화국이다.\n\nabc123\n"))
    assert pre_tokenizers.main(["--pre_tokenizer=kiwi"]) == 0
    assert capsys.readouterr().out == "대한민국 은 민주 공화국 이 다 .\n\nabc123\n"


def test_extract_features_reads_the_recorded_setting(tmp_path, keep_vocab):
    """The model dir's strip_accents=False reaches extract_features (syllable tokens);
    --strip_accents on the command line wins (jamo tokens)."""
    from bert_tf import extract_features as ef
    from bert_tf.app import setting_fields

    d = tiny_model_dir(tmp_path / "model", keep_vocab)
    (tmp_path / "in.txt").write_text("대한민국은 민주공화국이다.\n", encoding="utf-8")

    def tokens(*extra):
        out = tmp_path / "out.jsonl"
        fv = setting_fields.parse_args(ef.define_flags, [
            f"--input_file={tmp_path / 'in.txt'}", f"--output_file={out}",
            f"--init_checkpoint={d}", "--layers=-1", *extra])
        ef.run(ef.ExtractConfig.from_flags(fv))
        return [t["token"] for t in json.loads(out.read_text())["features"]]

    kept = tokens()
    assert "".join(t.replace("##", "") for t in kept[1:-2]) == "대한민국은민주공화국이다"
    # Stripped to jamo, which this syllable vocab does not hold: whole words are [UNK].
    assert tokens("--strip_accents") == ["[CLS]", "[UNK]", "[UNK]", ".", "[SEP]"]
