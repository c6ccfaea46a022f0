"""BertTokenizer: exact ids on hard inputs, the API, offsets, packing, SavedModel."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.text import packing
from bert_tf.text.text_rules import VocabError, infer_do_lower_case, load_vocab
from bert_tf.text.tokenization import BertTokenizer
from tests import reference_tokenizer as ref
from tests.helpers import REPO_ROOT, SHARED_DATA, piece_spans, write_vocab
from tests.helpers.text import HARD_TEXTS, cased_vocab_tokens

UNCASED_VOCAB = SHARED_DATA / "vocab" / "bert-base-uncased-vocab.txt"


@pytest.fixture(scope="module")
def uncased():
    return BertTokenizer(str(UNCASED_VOCAB), do_lower_case=True)


@pytest.fixture(scope="module")
def ref_uncased():
    return ref.FullTokenizer(str(UNCASED_VOCAB), do_lower_case=True)




@pytest.fixture(scope="module")
def cased_vocab_file(tmp_path_factory):
    path = SHARED_DATA / "pretrain" / "enwiki_2015_bert_format.txt"
    if not path.exists():
        pytest.skip(f"{path} not present")
    with open(path, encoding="utf-8") as f:
        lines = [next(f) for _ in range(3000)]
    lines += HARD_TEXTS
    return write_vocab(tmp_path_factory.mktemp("cased") / "vocab.txt", cased_vocab_tokens(lines))


# ------------------------------------------------------------------ exactness, hard inputs


def test_hard_inputs_uncased(uncased, ref_uncased):
    got = uncased.tokenize(HARD_TEXTS).to_list()
    for text, ids in zip(HARD_TEXTS, got):
        assert ids == ref_uncased.tokenize_to_ids(text), repr(text)


def test_hard_inputs_cased(cased_vocab_file):
    tok = BertTokenizer(cased_vocab_file, do_lower_case=False)
    oracle = ref.FullTokenizer(cased_vocab_file, do_lower_case=False)
    got = tok.tokenize(HARD_TEXTS).to_list()
    for text, ids in zip(HARD_TEXTS, got):
        assert ids == oracle.tokenize_to_ids(text), repr(text)


@pytest.mark.parametrize("lower", [True, False])
def test_basic_tokenize_hard(uncased, cased_vocab_file, lower):
    tok = uncased if lower else BertTokenizer(cased_vocab_file, do_lower_case=False)
    basic = ref.BasicTokenizer(do_lower_case=lower)
    got = tok.basic_tokenize(HARD_TEXTS).to_list()
    for text, words in zip(HARD_TEXTS, got):
        assert [w.decode("utf-8") for w in words] == basic.tokenize(text), repr(text)


def test_tokenize_words_hard(uncased, ref_uncased):
    got = uncased.tokenize_words(HARD_TEXTS)
    assert got.ragged_rank == 2 and got.dtype == tf.int64
    for text, words in zip(HARD_TEXTS, got.to_list()):
        assert words == ref_uncased.tokenize_words_to_ids(text), repr(text)


def test_specific_cases(uncased, ref_uncased):
    b = lambda s: [w.decode() for w in uncased.basic_tokenize([s]).to_list()[0]]  # noqa: E731
    assert b("ΟΔΟΣ") == ["οδος"]
    assert b("ΟΔΟΣ.Α") == ["οδοσ", ".", "α"]      # '.' is case-ignorable: Σ not final
    assert b("ΣΣ") == ["σς"]
    assert b("İ") == ["i"]
    assert b("Ĺ naïve") == ["l", "naive"]
    assert b("ＡＢＣ１２３！") == ["ａｂｃ１２３", "！"]   # no NFKC
    assert b("中文、") == ["中", "文", "、"]
    assert b("a\u2028b") == ["a", "b"]
    assert b("a\x00b\u200dc") == ["abc"]
    assert len(b("한")[0]) == 3                     # Hangul decomposes to Jamo under NFD
    # Words over 200 characters (counted after NFD) become [UNK]
    assert uncased.tokenize(["x" * 201, "한" * 67]).to_list() == [[uncased.unk_id]] * 2
    assert uncased.tokenize(["x" * 200]).to_list()[0] != [uncased.unk_id]


def test_invalid_utf8_bytes(uncased, ref_uncased):
    cases = [b"abc\xffdef", b"\xe4\xb8", b"\xe4\xb8A", b"\xc0\x80x", b"\xed\xa0\x80y",
             b"\xf4\x90\x80\x80z", b"\xf0\x9f\x98", b"caf\xc3", b"\x80\x80hello\xc3\xa9",
             "naïve".encode("utf-8")[:-2] + b"ve", b"\xef\xbf\xbd!"]
    got = uncased.tokenize(cases).to_list()
    for raw, ids in zip(cases, got):
        assert ids == ref_uncased.tokenize_to_ids(raw), raw


def test_random_bytes(uncased, ref_uncased):
    rng = np.random.default_rng(0)
    alphabet = np.frombuffer("aZ é한中Σ.\x00".encode("utf-8") + bytes(range(0x80, 0x100)),
                             np.uint8)
    cases = [bytes(rng.choice(alphabet, size=rng.integers(0, 30))) for _ in range(500)]
    got = uncased.tokenize(cases).to_list()
    for raw, ids in zip(cases, got):
        assert ids == ref_uncased.tokenize_to_ids(raw), raw


# ------------------------------------------------------------------ vocab handling and API


def test_properties(uncased):
    assert uncased.vocab_size == 30522 == len(uncased.vocab)
    assert (uncased.pad_id, uncased.unk_id, uncased.cls_id, uncased.sep_id,
            uncased.mask_id) == (0, 100, 101, 102, 103)
    assert uncased.do_lower_case is True
    assert uncased.vocab_file == str(UNCASED_VOCAB)
    assert uncased.token_to_id("hello") == 7592
    assert uncased.id_to_token(7592) == "hello"
    with pytest.raises(KeyError, match="not in vocab"):
        uncased.token_to_id("not-a-token")
    with pytest.raises(IndexError):
        uncased.id_to_token(30522)


def test_input_types(uncased):
    expected = uncased.tokenize(["hello world", "a"]).to_list()
    assert uncased.tokenize([b"hello world", "a"]).to_list() == expected
    assert uncased.tokenize(np.array(["hello world", "a"])).to_list() == expected
    assert uncased.tokenize(np.array([b"hello world", b"a"], dtype=object)).to_list() == expected
    assert uncased.tokenize(tf.constant(["hello world", "a"])).to_list() == expected
    assert uncased.tokenize("hello world").to_list() == expected[:1]
    assert uncased.tokenize([]).to_list() == []
    with pytest.raises(ValueError, match="batch"):
        uncased.tokenize([["a"], ["b"]])


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        BertTokenizer(str(missing))
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        load_vocab(str(missing))


def test_missing_special_tokens(tmp_path):
    path = write_vocab(tmp_path / "v.txt", ["[PAD]", "[UNK]", "hello", "[SEP]"])
    with pytest.raises(VocabError, match=r"v\.txt.*\[CLS\], \[MASK\]") as e:
        BertTokenizer(path)
    assert isinstance(e.value, ValueError)


SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
ODD_TEXTS = ["hello world", "Hello there, worlds!", "unknownword xyz", "the ## #",
             "a b c", "[UNK] unk", "hellohello", "  ", "##s"]


@pytest.mark.parametrize("name,tokens,kwargs", [
    ("unk_first", ["[UNK]", "[PAD]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s"], {}),
    ("unk_last", ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", "[UNK]"], {}),
    ("duplicates", SPECIALS + ["hello", "world", "hello", "##s", "[UNK]", "world", "##s"], {}),
    ("odd_lines", SPECIALS + ["", "  hello  ", "wor ld", "world\t", "##", "###", "#", "##",
                              "\u00a0a\u00a0", "b", "##c", "##b", "the", ",", "!"], {}),
    ("no_final_newline", SPECIALS + ["hello", "world"], {"trailing_newline": False}),
    ("crlf", SPECIALS + ["hello", "world", "##s"], {"newline": "\r\n"}),
])
def test_odd_vocabs(tmp_path, name, tokens, kwargs):
    path = write_vocab(tmp_path / f"{name}.txt", tokens, **kwargs)
    tok = BertTokenizer(path)
    oracle = ref.FullTokenizer(path)
    assert tok.vocab == [t.strip() for t in tokens]
    for text, ids in zip(ODD_TEXTS, tok.tokenize(ODD_TEXTS).to_list()):
        assert ids == oracle.tokenize_to_ids(text), (name, text)
    assert tok.unk_id == oracle.vocab["[UNK]"]
    _, starts, _ = tok.tokenize_with_offsets(ODD_TEXTS)  # runs with odd vocabs too
    assert starts.shape[0] == len(ODD_TEXTS)


def test_vocab_token_too_long_for_the_graph_is_left_out_with_a_warning(tmp_path, caplog):
    import logging as py_logging

    long_token = "\uc11c" * 90  # 270 UTF-8 bytes: over tensorflow_text's 256
    path = write_vocab(tmp_path / "v.txt", SPECIALS + ["hello", long_token, "\uc11c", "##\uc11c"])
    caplog.set_level(py_logging.WARNING, logger="absl")
    tok = BertTokenizer(path, do_lower_case=False)  # cased: NFD would split Hangul
    assert "v.txt line 7" in caplog.text and "270" in caplog.text
    assert tok.vocab[6] == long_token  # ids keep their places
    assert tok.tokenize(["hello \uc11c\uc11c"]).to_list() == [[5, 7, 8]]


def test_infer_do_lower_case(tmp_path, cased_vocab_file):
    assert infer_do_lower_case(str(UNCASED_VOCAB)) is True      # has ℝ, which has no lower
    assert infer_do_lower_case(cased_vocab_file) is False
    assert infer_do_lower_case(write_vocab(tmp_path / "v.txt", SPECIALS + ["a", "b"])) is True


# ------------------------------------------------------------------ offsets


def test_offsets_ascii(uncased):
    texts = ["Hello, World!  unaffable xyzzyq", "  The U.S.A. (e-mail)", "", "x" * 250 + " end"]
    for text, i, piece, span in piece_spans(uncased, texts):
        span = span.lower()
        if i == uncased.unk_id:
            assert " " not in span and span, (text, span)
        else:
            assert span == piece, (text, span)
    # Long word -> [UNK] spanning the whole word.
    _, starts, ends = uncased.tokenize_with_offsets(texts)
    assert (starts.to_list()[3][0], ends.to_list()[3][0]) == (0, 250)


def test_offsets_unicode(uncased):
    texts = ["naïve Ĺ", "한국어", "a\x00b", "日本、中", b"\xffab\xc3\xa9c".decode("latin-1")]
    raw = [t.encode("utf-8") for t in texts]
    raw[-1] = b"\xffab\xc3\xa9c"  # invalid byte first: offsets are into the raw bytes
    ids, starts, ends = uncased.tokenize_with_offsets(raw)
    spans = [[r[s:e] for s, e in zip(rs, re_)]
             for r, rs, re_ in zip(raw, starts.to_list(), ends.to_list())]
    assert spans[0] == ["naïve".encode(), "Ĺ".encode()]
    # Korean: Jamo pieces map back to (possibly overlapping) whole syllables.
    assert all(s.decode("utf-8") and set(s.decode("utf-8")) <= set("한국어") for s in spans[1])
    assert spans[1][0].startswith("한".encode()) and spans[1][-1].endswith("어".encode())
    assert spans[2] == [b"a\x00b"]                 # removed NUL inside the word's span
    assert spans[3] == [x.encode() for x in ["日", "本", "、", "中"]]
    assert b"".join(spans[4]) == b"ab\xc3\xa9c"           # pieces tile the word
    assert ids.to_list()[4] == uncased.tokenize([raw[4]]).to_list()[0]


def test_offsets_match_ids_on_hard_texts(uncased):
    ids, starts, ends = uncased.tokenize_with_offsets(HARD_TEXTS)
    assert ids.to_list() == uncased.tokenize(HARD_TEXTS).to_list()
    for text, rs, re_ in zip(HARD_TEXTS, starts.to_list(), ends.to_list()):
        n = len(text.encode("utf-8"))
        assert all(0 <= s < e <= n for s, e in zip(rs, re_)), text
        assert rs == sorted(rs), text


# ------------------------------------------------------------------ encode / decode


def test_encode_matches_original_packing(uncased, ref_uncased):
    rng = np.random.default_rng(1)
    words = "the quick brown fox jumps over a lazy dog , 한국어 unaffable".split()
    texts = [" ".join(rng.choice(words, size=rng.integers(0, 12))) for _ in range(60)]
    a, b = texts[:30], texts[30:]
    for max_len in (3, 5, 8, 16, 64):
        got = uncased.encode(a, b, max_seq_length=max_len)
        for key in got:
            assert got[key].dtype == tf.int32 and got[key].shape == (30, max_len)
        for i in range(30):
            ids, mask, types = ref.encode(ref_uncased, a[i], b[i], max_len)
            assert got["input_word_ids"][i].numpy().tolist() == ids, (max_len, a[i], b[i])
            assert got["input_mask"][i].numpy().tolist() == mask
            assert got["input_type_ids"][i].numpy().tolist() == types
    for max_len in (2, 4, 16):
        got = uncased.encode(a, max_seq_length=max_len)
        for i in range(30):
            ids, mask, types = ref.encode(ref_uncased, a[i], None, max_len)
            assert got["input_word_ids"][i].numpy().tolist() == ids
            assert got["input_mask"][i].numpy().tolist() == mask
            assert got["input_type_ids"][i].numpy().tolist() == types


def test_truncated_pair_lengths_exhaustive():
    la, lb = np.meshgrid(np.arange(25), np.arange(25))
    la, lb = la.ravel(), lb.ravel()
    for budget in range(0, 30):
        ga, gb = packing.truncated_pair_lengths(la, lb, budget)
        for x, y, gx, gy in zip(la, lb, ga.numpy(), gb.numpy()):
            a, b = list(range(x)), list(range(y))
            ref.truncate_seq_pair(a, b, budget)
            assert (gx, gy) == (len(a), len(b)), (x, y, budget)


def test_encode_in_graph(uncased):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string),
                                  tf.TensorSpec([None], tf.string)])
    def f(a, b):
        return uncased.encode(a, b, max_seq_length=12)

    a, b = ["Hello world!", "한국어"], ["How are you?", ""]
    got = f(tf.constant(a), tf.constant(b))
    eager = uncased.encode(a, b, max_seq_length=12)
    for k in eager:
        np.testing.assert_array_equal(got[k].numpy(), eager[k].numpy())


def test_encode_rejects_tiny_length(uncased):
    with pytest.raises(ValueError, match="max_seq_length"):
        uncased.encode(["a"], ["b"], max_seq_length=2)


def test_decode(uncased):
    enc = uncased.encode(["Hello, unaffable world!"], ["yes"], max_seq_length=16)
    assert uncased.decode(enc["input_word_ids"]) == ["hello , unaffable world ! yes"]
    assert uncased.decode(uncased.tokenize(["un aff ##able"])) == ["un aff # # able"]
    assert uncased.decode([7592, 2088]) == ["hello world"]
    assert uncased.decode(np.array([[101, 7592, 102, 0]])) == ["hello"]


# ------------------------------------------------------------------ in-graph use


def test_tf_function_and_dataset(uncased):
    texts = HARD_TEXTS[:6]
    expected = uncased.tokenize(texts).to_list()

    @tf.function
    def f(x):
        return uncased.tokenize(x)

    assert f(tf.constant(texts)).to_list() == expected
    ds = tf.data.Dataset.from_tensor_slices(texts).batch(3).map(uncased.tokenize)
    assert [r for batch in ds for r in batch.to_list()] == expected


def test_saved_model_without_bert_tf(uncased, tmp_path):
    class Exported(tf.Module):
        def __init__(self, tokenizer):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            enc = self.tokenizer.encode(text, max_seq_length=16)
            ids = self.tokenizer.tokenize(text)
            return {"input_word_ids": enc["input_word_ids"], "flat_ids": ids.flat_values,
                    "row_lengths": ids.row_lengths()}

    export_dir = str(tmp_path / "sm")
    module = Exported(uncased)
    tf.saved_model.save(module, export_dir, signatures={"serving_default": module.serve})
    assert os.path.exists(os.path.join(export_dir, "assets", "bert-base-uncased-vocab.txt"))
    texts = ["Hello, ΟΔΟΣ world! 한국어", "中文、ＡＢＣ"]
    expected = uncased.encode(texts, max_seq_length=16)["input_word_ids"].numpy().tolist()
    script = textwrap.dedent(f"""
        import json, sys
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the WordPiece ops)
        m = tf.saved_model.load({export_dir!r})
        out = m.signatures["serving_default"](text=tf.constant({texts!r}))
        assert "bert_tf" not in sys.modules
        print(json.dumps(out["input_word_ids"].numpy().tolist()))
    """)
    env = dict(os.environ, PYTHONPATH="")
    result = subprocess.run([sys.executable, "-c", script], cwd=str(tmp_path), env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    import json
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


def test_public_name():
    import bert_tf
    assert bert_tf.BertTokenizer is BertTokenizer
    assert REPO_ROOT.exists()


def test_lone_surrogates_in_str(uncased, ref_uncased):
    # A Python str can hold them; the original keeps them (its controls are only Cc/Cf),
    # so their word becomes [UNK]. (As UTF-8 bytes they are invalid and dropped.)
    texts = ["ab\ud800cd \udfff e", "x\udc80 Σ\ud800"]
    got = uncased.tokenize(texts).to_list()
    assert got == [ref_uncased.tokenize_to_ids(t) for t in texts]
    assert got[0][0] == uncased.unk_id
