"""BertTokenizer == the original algorithm (tests/reference_tokenizer.py), broadly:
every code point, fuzzed context rules (final sigma, NFD reordering), random vocabs for
WordPiece, and real corpora (Wikipedia, GLUE, CoNLL-2003) cased and uncased."""

import csv

import numpy as np
import pytest

from bert_tf.text.tokenization import BertTokenizer
from tests import reference_tokenizer as ref
from tests.helpers import SHARED_DATA, first_lines, piece_spans, write_vocab
from tests.helpers.text import HARD_TEXTS, all_code_point_texts, cased_vocab_tokens

UNCASED_VOCAB = SHARED_DATA / "vocab" / "bert-base-uncased-vocab.txt"
ENWIKI = SHARED_DATA / "pretrain" / "enwiki_2015_bert_format.txt"


def _need(path):
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


@pytest.fixture(scope="module")
def uncased():
    return BertTokenizer(str(_need(UNCASED_VOCAB)), do_lower_case=True)


@pytest.fixture(scope="module")
def ref_uncased():
    return ref.FullTokenizer(str(_need(UNCASED_VOCAB)), do_lower_case=True)


def _glue_sentences(limit_per_file=400):
    out = []
    for task, cols in [("SST-2", ["sentence"]), ("MRPC", ["#1 String", "#2 String"]),
                       ("QNLI", ["question", "sentence"]), ("RTE", ["sentence1", "sentence2"]),
                       ("STS-B", ["sentence1", "sentence2"]), ("CoLA", None)]:
        path = SHARED_DATA / "glue" / task / "dev.tsv"
        if not path.exists():
            continue
        with open(path, encoding="utf-8") as f:
            rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[:limit_per_file]
        if cols is None:  # CoLA dev has no header: sentence in column 3
            out += [r[3] for r in rows if len(r) > 3]
            continue
        header, body = rows[0], rows[1:]
        for col in cols:
            if col in header:
                i = header.index(col)
                out += [r[i] for r in body if len(r) > i]
    return out


@pytest.fixture(scope="module")
def corpus():
    lines = first_lines(_need(ENWIKI), 2000)
    lines += _glue_sentences()
    conll = SHARED_DATA / "conll2003" / "eng.testa"
    if conll.exists():
        words = [ln.split(" ")[0] for ln in first_lines(conll, 3000) if " " in ln]
        lines += [" ".join(words[i:i + 20]) for i in range(0, len(words), 20)]
    return lines


@pytest.fixture(scope="module")
def cased_vocab_file(tmp_path_factory, corpus):
    return write_vocab(tmp_path_factory.mktemp("cased_exact") / "vocab.txt",
                       cased_vocab_tokens(corpus[:3000] + HARD_TEXTS))


def _compare_basic(tok, texts, lower):
    basic = ref.BasicTokenizer(do_lower_case=lower)
    got = tok.basic_tokenize(texts).to_list()
    bad = [(t, [w.decode("utf-8") for w in g], basic.tokenize(t))
           for t, g in zip(texts, got)
           if [w.decode("utf-8") for w in g] != basic.tokenize(t)]
    assert not bad, f"{len(bad)} mismatches, first: {bad[:3]}"


def _compare_ids(tok, oracle, texts, batch=512):
    bad = []
    for i in range(0, len(texts), batch):
        chunk = texts[i:i + batch]
        for t, g in zip(chunk, tok.tokenize(chunk).to_list()):
            if g != oracle.tokenize_to_ids(t):
                bad.append(t)
    assert not bad, f"{len(bad)} of {len(texts)} lines differ, first: {bad[:3]!r}"


# ------------------------------------------------------------------ every code point


@pytest.mark.parametrize("lower", [True, False])
def test_every_code_point_basic(uncased, cased_vocab_file, lower):
    tok = uncased if lower else BertTokenizer(cased_vocab_file, do_lower_case=False)
    _compare_basic(tok, all_code_point_texts(), lower)


# ------------------------------------------------------------------ context rules (fuzz)

SIGMA_ALPHABET = ["Σ", "Σ", "Σ", "A", "a", "ά", ".", "'", "\u0301", "\u0345", "\x00", " ",
                  "΄", "中", "1", "\u2028", "\x07", "\u200d", "-", "ǅ", "Ⓐ", "ʰ", "İ", "σ"]
REORDER_ALPHABET = ["a", "\u0301", "\u0316", "\U0001D165", "\U0001D16D", "\U0001D16E",
                    "\u302e", "\u302f", "가", "\u0941", "\u1b44", "\u0345", " ", ".", "\x00",
                    "\U0001D15F", "\U0001D1BB", "\u0f73", "Σ", "\u0300"]


def _fuzz(alphabet, n, max_len, seed):
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(alphabet, size=rng.integers(0, max_len))) for _ in range(n)]


def test_final_sigma_fuzz(uncased):
    _compare_basic(uncased, _fuzz(SIGMA_ALPHABET, 3000, 9, 0), True)


def test_nfd_reordering_fuzz(uncased):
    texts = _fuzz(REORDER_ALPHABET, 3000, 8, 1)
    _compare_basic(uncased, texts, True)
    ids, starts, ends = uncased.tokenize_with_offsets(texts)
    for t, rs, re_ in zip(texts, starts.to_list(), ends.to_list()):
        n = len(t.encode("utf-8"))
        assert all(0 <= s < e <= n for s, e in zip(rs, re_)), t


def test_mixed_korean_english_cjk(uncased, ref_uncased, cased_vocab_file):
    alphabet = (list("한국어텍스트서울대학교의가나다라마바사") + list("中文日本語漢字、。「」『』・")
                + list("ＡＢＣａｂｃ１２３！？") + ["𝐀", "𝐁", "①", "ﬁ", "\x00", "\x1f", "\u200b",
                                                "\ufffd", "\u3000", " ", " ", " ", ",", "."]
                + list("Hello World unaffable ÀÉÎõü") + ["ΟΔΟΣ", "Σ"])
    texts = _fuzz(alphabet, 1500, 40, 2)
    _compare_ids(uncased, ref_uncased, texts)
    cased = BertTokenizer(cased_vocab_file, do_lower_case=False)
    _compare_ids(cased, ref.FullTokenizer(cased_vocab_file, do_lower_case=False), texts)


# ------------------------------------------------------------------ WordPiece (random vocabs)


@pytest.mark.parametrize("seed", range(4))
def test_wordpiece_random_vocab(tmp_path, seed):
    rng = np.random.default_rng(seed)
    alphabet = list("abcé한")
    pieces = set()
    for _ in range(60):
        p = "".join(rng.choice(alphabet, size=rng.integers(1, 5)))
        pieces.add(("##" + p) if rng.random() < 0.5 else p)
    tokens = ["[PAD]", "[CLS]", "[SEP]", "[MASK]"] + sorted(pieces)
    tokens.insert(int(rng.integers(0, len(tokens))), "[UNK]")
    path = write_vocab(tmp_path / "v.txt", tokens)
    words = [" ".join("".join(rng.choice(alphabet, size=rng.integers(1, 12)))
                      for _ in range(rng.integers(0, 6))) for _ in range(400)]
    for lower in (True, False):
        tok = BertTokenizer(path, do_lower_case=lower)
        _compare_ids(tok, ref.FullTokenizer(path, do_lower_case=lower), words)


# ------------------------------------------------------------------ real corpora


def test_real_corpus_uncased(uncased, ref_uncased, corpus):
    _compare_ids(uncased, ref_uncased, corpus)
    # Words-level agrees as well (NER and whole-word masking use it).
    got = uncased.tokenize_words(corpus[:300]).to_list()
    for t, g in zip(corpus[:300], got):
        assert g == ref_uncased.tokenize_words_to_ids(t), t


def test_real_corpus_cased(cased_vocab_file, corpus):
    tok = BertTokenizer(cased_vocab_file, do_lower_case=False)
    oracle = ref.FullTokenizer(cased_vocab_file, do_lower_case=False)
    _compare_ids(tok, oracle, corpus)
    # The crude cased vocab really splits words into pieces and has [UNK]s.
    flat = [i for row in tok.tokenize(corpus[:200]).to_list() for i in row]
    assert any(tok.id_to_token(i).startswith("##") for i in flat)


def test_real_corpus_offsets(uncased, corpus):
    """Offsets of matched pieces point at text that lower-cases/strips to the piece."""
    texts = corpus[:500]
    checked = 0
    for t, i, piece, span in piece_spans(uncased, texts):
        if i != uncased.unk_id and span.isascii():
            assert span.lower() == piece, (t, span, piece)
            checked += 1
    assert checked > 10000
