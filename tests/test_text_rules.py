"""bert_tf.text.text_rules: the original's character rules, vocab reading, and the pure-Python
tokenizer, checked against the original (tests/reference_tokenizer.py) and the in-graph
BertTokenizer, which takes its rules from the same module."""

import os
import random
import re
import subprocess
import sys

import pytest

from bert_tf.core import constants
from bert_tf.text import text_rules as tr
from bert_tf.text import tokenization
from tests import reference_tokenizer as ref
from tests.helpers import REPO_ROOT, SHARED_DATA
from tests.helpers.text import HARD_TEXTS

UNCASED_VOCAB = SHARED_DATA / "vocab" / "bert-base-uncased-vocab.txt"

# ------------------------------------------------------------------ character classes


@pytest.mark.parametrize("char,whitespace,control,punctuation", [
    ("\t", True, False, False),         # whitespace, never control
    ("\n", True, False, False),
    ("\r", True, False, False),
    (" ", True, False, False),
    ("\u3000", True, False, False),     # ideographic space: Zs
    ("\xa0", True, False, False),       # no-break space: Zs
    ("\u2028", False, False, False),    # line separator: Zl, not the original's whitespace
    ("\x0b", False, True, False),       # vertical tab: Cc (str.isspace() says True)
    ("\x00", False, True, False),
    ("\x85", False, True, False),       # NEL: Cc
    ("\u200b", False, True, False),     # zero-width space: Cf
    ("\u200d", False, True, False),     # ZWJ: Cf
    ("\ufeff", False, True, False),     # BOM: Cf
    ("\ue000", False, False, False),    # private use (Co): kept
    ("\U000F0000", False, False, False),
    ("\u0378", False, False, False),    # unassigned (Cn): kept
    ("\ud800", False, False, False),    # lone surrogate (Cs): kept
    ("$", False, False, True),          # Sc, but non-alphanumeric ASCII
    ("^", False, False, True),          # Sk
    ("`", False, False, True),          # Sk
    ("+", False, False, True),          # Sm
    ("~", False, False, True),
    ("_", False, False, True),
    ("\u00bf", False, False, True),     # ¿ Po
    ("\u3002", False, False, True),     # 。Po
    ("\u300c", False, False, True),     # 「 Ps
    ("\u20ac", False, False, False),    # € Sc outside ASCII: not punctuation
    ("\u00b0", False, False, False),    # ° So
    ("a", False, False, False),
    ("7", False, False, False),
])
def test_character_classes_on_tricky_characters(char, whitespace, control, punctuation):
    assert tr.is_whitespace(char) is whitespace
    assert tr.is_control(char) is control
    assert tr.is_punctuation(char) is punctuation


@pytest.mark.parametrize("cp,cjk", [
    (0x4E00, True), (0x9FFF, True), (0x4DFF, False), (0x3400, True), (0x4DBF, True),
    (0x20000, True), (0x2A6DF, True), (0x2A6E0, False),     # extension B and past it
    (0x2A700, True), (0x2B73F, True), (0x2B740, True), (0x2B81F, True),  # C, D
    (0x2B820, True), (0x2CEAF, True), (0x2CEB0, False),     # E; F is not in the original
    (0xF900, True), (0xFAFF, True), (0x2F800, True), (0x2FA1F, True),  # compatibility
    (0x30000, False),                                        # extension G: not included
    (0x3042, False), (0x30A2, False), (0xAC00, False),       # kana, Hangul
    (0x3000, False), (0x3002, False),                        # CJK space and full stop
])
def test_cjk_ranges(cp, cjk):
    assert tr.is_chinese_char(cp) is cjk


def test_character_classes_equal_the_original_on_every_code_point():
    for cp in range(0x110000):
        c = chr(cp)
        if (tr.is_whitespace(c) != ref._is_whitespace(c) or tr.is_control(c) != ref._is_control(c)
                or tr.is_punctuation(c) != ref._is_punctuation(c)
                or tr.is_chinese_char(cp) != ref._is_chinese_char(cp)):
            pytest.fail(f"U+{cp:04X} differs from the original")


def test_strip_accents():
    assert tr.strip_accents("Café naïve Ångström") == "Cafe naive Angstrom"
    assert tr.strip_accents("e\u0301\u0316") == "e"           # combining marks (Mn) go
    assert tr.strip_accents("ﬁ ᾼ") == "ﬁ Α"                   # NFD, not NFKD; ypogegrammeni is Mn
    assert tr.strip_accents("한") == "\u1112\u1161\u11ab"       # Hangul decomposes to jamo
    assert tr.strip_accents("\U0001D15E") == "\U0001D157\U0001D165"  # Mc kept
    for text in ("naïve", "ΆΣ", "Æsir œuvre", "ǅ"):
        assert tr.strip_accents(text) == ref.BasicTokenizer._run_strip_accents(text)


# ------------------------------------------------------------------ vocab files


def write(path, data: bytes):
    path.write_bytes(data)
    return str(path)


def test_load_vocab_reads_as_the_original(tmp_path):
    data = b"[PAD]\r\n  hello \n\nworld\n\xe4\xb8\xad\nhello\n"
    path = write(tmp_path / "v.txt", data)
    tokens = tr.load_vocab(path)
    assert tokens == ["[PAD]", "hello", "", "world", "中", "hello"]
    assert tr.vocab_index(tokens) == {t: i for t, i in ref.load_vocab(path).items()}
    assert tr.load_vocab(write(tmp_path / "n.txt", b"a\nb")) == ["a", "b"]
    assert tr.load_vocab(write(tmp_path / "e.txt", b"")) == []


def test_vocab_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        tr.load_vocab(str(tmp_path / "nope.txt"))
    with pytest.raises(tr.VocabError, match=r"l1\.txt is not UTF-8") as e:
        tr.load_vocab(write(tmp_path / "l1.txt", "café\n".encode("latin-1")))
    assert isinstance(e.value, ValueError)
    with pytest.raises(tr.VocabError, match=r"v\.txt lacks the special token\(s\) \[CLS\], "
                                            r"\[MASK\]; a BERT vocab needs all of"):
        tr.check_special_tokens({"[PAD]": 0, "[UNK]": 1, "[SEP]": 2}, "v.txt")
    tr.check_special_tokens(dict.fromkeys(constants.SPECIAL_TOKENS, 0), "v.txt")
    with pytest.raises(tr.VocabError, match=r"lacks \[UNK\]"):
        tr.WordPieceTokenizer(["[PAD]", "a"])


def test_infer_do_lower_case(tmp_path):
    assert tr.infer_do_lower_case(write(tmp_path / "u.txt", b"[PAD]\n[UNK]\n<s>\nhello\n"))
    assert not tr.infer_do_lower_case(write(tmp_path / "c.txt", b"[PAD]\nHello\n"))


# ------------------------------------------------------------------ the Python tokenizer

VARIED_TEXTS = HARD_TEXTS + [
    "서울특별시 강남구에서 친구를 만났습니다. 한국어 문장입니다!",
    "我们今天在图书馆看书，然后去公园散步。𠀀𪛖 丽",
    "emoji 😀 👍🏽 👨‍👩‍👧‍👦 🇰🇷🇺🇸 ❤️ 1️⃣ ☃ text😀text",
    "ctrl\x01\x02a\x1fb\x7fc\u200ed\u2066e\u2069f\U000E0001g\x00h\ufffdi",
    "long " + "abcdefghij" * 20 + " " + "abcdefghij" * 20 + "k " + "한" * 201 + " end",
    "uneasily UNAFFABLE Straße İstanbul ΣΑΣ ΟΔΟΣ σς",
    "\u3000ideographic\u3000space\u00a0nbsp\u2003em\u205fmath\u1680ogham",
    "tab\tsep\x0bvt\x0cff\x1cfs\x85nel\u2028ls\u2029ps",
    "a$b^c`d_e~f|g\\h@i#j&k*l+m=n<o>p ¿q¡ «r» —s– …t‘u’v“w”",
    "ab\ud800cd \udfff e x\udc80 Σ\ud800",  # lone surrogates in a str
]


@pytest.fixture(scope="module")
def small_vocab_file(tmp_path_factory):
    """A cased vocab with whole words, characters and ## pieces of VARIED_TEXTS (so
    Korean, Chinese and emoji get real pieces, not just [UNK])."""
    rng = random.Random(0)
    tokens = list(constants.SPECIAL_TOKENS)
    seen = set(tokens)
    for text in VARIED_TEXTS:
        for lower in (False, True):
            for word in tr.BasicTokenizer(lower).tokenize(text):
                cands = [word, word[:1], "##" + word[-1:]]
                if len(word) > 2:
                    k = rng.randrange(1, len(word))
                    cands += [word[:k], "##" + word[k:]]
                for t in cands:
                    # (FastWordpieceTokenizer refuses vocab tokens over 256 bytes; UTF-8
                    # cannot hold lone surrogates.)
                    if (t and t not in seen and len(t) <= 50
                            and not any("\ud800" <= c <= "\udfff" for c in t)):
                        seen.add(t)
                        tokens.append(t)
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("vocab", ["uncased_base", "small"])
@pytest.mark.parametrize("lower", [True, False])
def test_python_tokenizer_ids_equal_bert_tokenizer(vocab, lower, small_vocab_file):
    if vocab == "uncased_base":
        if not UNCASED_VOCAB.exists():
            pytest.skip(f"{UNCASED_VOCAB} not present")
        vocab_file = str(UNCASED_VOCAB)
    else:
        vocab_file = small_vocab_file
    graph = tokenization.BertTokenizer(vocab_file, do_lower_case=lower)
    python = tr.WordPieceTokenizer.from_vocab_file(vocab_file, lower)
    original = ref.FullTokenizer(vocab_file, do_lower_case=lower)
    ours = [python.tokenize_line(t) for t in VARIED_TEXTS]
    assert ours == graph.tokenize(VARIED_TEXTS).to_list()
    for text, ids in zip(VARIED_TEXTS, ours):
        assert ids == original.tokenize_to_ids(text), text
    # The words before WordPiece too (BertTokenizer encodes a lone surrogate, which UTF-8
    # cannot hold, as U+FFFF: also kept, never in a vocab, so the ids above agree).
    words = [[w.decode("utf-8") for w in row]
             for row in graph.basic_tokenize(VARIED_TEXTS).to_list()]
    python_words = [[re.sub("[\ud800-\udfff]", "\uffff", w) for w in row]
                    for row in tr.BasicTokenizer(lower).tokenize_batch(VARIED_TEXTS)]
    assert python_words == words
    # Warm caches give the same, and so does a cache too small to hold a line.
    assert [python.tokenize_line(t) for t in VARIED_TEXTS] == ours
    tiny = tr.WordPieceTokenizer.from_vocab_file(vocab_file, lower, max_cache_entries=2)
    assert [tiny.tokenize_line(t) for t in VARIED_TEXTS * 2] == ours * 2


def test_long_words_become_unk():
    tok = tr.WordPieceTokenizer(["[PAD]", "[UNK]", "a", "##a", "한"], do_lower_case=False)
    assert tok.tokenize_line("a" * 200) == [2] + [3] * 199
    assert tok.tokenize_line("a" * 201 + " a") == [1, 2]
    assert tok.tokenize_line("한" * 201) == [1]
    short = tr.WordPieceTokenizer(["[UNK]", "a", "##a"], max_input_chars_per_word=3)
    assert short.tokenize_line("aaa aaaa") == [1, 2, 2, 0]


def test_tokenize_lines_layout():
    tok = tr.WordPieceTokenizer(["[PAD]", "[UNK]", "a", ","])
    out = tok.tokenize_lines(["a, b", "", "\x00"])
    assert out[0].typecode == "i" and list(out[0]) == [2, 3, 1]
    assert out[1] is None and list(out[2]) == []


def test_duplicate_vocab_token_keeps_its_last_id():
    tok = tr.WordPieceTokenizer(["[PAD]", "[UNK]", "a", "b", "a"])
    assert tok.tokenize_line("a b") == [4, 3]


def test_text_rules_and_corpus_import_no_tensorflow():
    script = ("import sys, bert_tf.text.text_rules, data_prep.corpus, data_prep.build_vocab; "
              "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'; "
              "tok = bert_tf.text.text_rules.WordPieceTokenizer(['[UNK]', 'a']); "
              "assert tok.tokenize_line('A') == [1]; "
              "assert 'tensorflow' not in sys.modules")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    result = subprocess.run([sys.executable, "-c", script], cwd=str(REPO_ROOT), env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
