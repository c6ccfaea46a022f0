"""data_prep.build_vocab: layout, size, determinism, scripts, bad input, the CLI."""

import gzip
import itertools
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

import pytest

from data_prep import build_vocab as bv
from data_prep import corpus
from data_prep.corpus import CorpusError
from tests.helpers import REPO_ROOT

# ---------------------------------------------------------------------------------------
# A mixed Korean / Chinese / English corpus, generated from small word lists so that
# held-out lines reuse the characters but mostly in new combinations.

KO_SUBJECTS = ["학생이", "선생님이", "우리 가족이", "친구가", "할머니께서", "아이들이",
               "회사원이", "의사가", "요리사가", "강아지가", "동생이", "이웃 사람이"]
KO_PLACES = ["도서관에서", "공원에서", "시장에서", "학교에서", "부엌에서", "바닷가에서",
             "병원에서", "카페에서", "버스 안에서", "산 위에서", "집 앞에서", "서울에서"]
KO_OBJECTS = ["책을", "김치찌개를", "사과를", "편지를", "음악을", "영화를", "커피를",
              "신문을", "꽃을", "사진을", "숙제를", "자전거를"]
KO_VERBS = ["읽었습니다", "만들었어요", "샀습니다", "썼어요", "들었습니다", "봤어요",
            "마셨습니다", "찍었어요", "좋아합니다", "기다렸어요", "빌렸습니다", "팔았어요"]
ZH_SUBJECTS = ["我", "我们", "老师", "学生们", "他的妈妈", "这个孩子", "医生", "我的朋友",
               "邻居", "公司的经理", "小猫", "爷爷"]
ZH_TIMES = ["今天", "昨天晚上", "每个星期天", "早上", "下午三点", "去年夏天", "周末",
            "明天", "春节的时候", "最近"]
ZH_ACTIONS = ["在图书馆看书", "去公园散步", "在厨房做饭", "买了很多水果", "给家里写信",
              "喝了一杯茶", "听音乐", "坐火车去北京", "学习中文", "打扫房间", "种花",
              "看电影"]
EN_SUBJECTS = ["The teacher", "My neighbour", "A young doctor", "Our family", "The children",
               "His brother", "The old fisherman", "A friendly baker", "The new student",
               "Her grandmother"]
EN_VERBS = ["visited", "painted", "cleaned", "discovered", "photographed", "described",
            "repaired", "remembered", "crossed", "explored"]
EN_OBJECTS = ["the quiet harbour", "a small garden", "the crowded market",
              "an ancient bridge", "the railway station", "a wooden boat",
              "the city library", "a mountain village", "the river bank", "a bright kitchen"]
EN_TAILS = ["yesterday.", "before breakfast.", "with great care.", "in the rain.",
            "after the long winter.", "for the first time.", "on Sunday morning.",
            "without saying a word."]


def mixed_lines(seed, n):
    """n sentences, a third each Korean, Chinese and English, from a seeded shuffle."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            out.append(" ".join(rng.choice(w) for w in
                                (KO_SUBJECTS, KO_PLACES, KO_OBJECTS, KO_VERBS)) + ".")
        elif kind == 1:
            out.append("".join(rng.choice(w) for w in (ZH_SUBJECTS, ZH_TIMES, ZH_ACTIONS)) + "。")
        else:
            out.append(" ".join(rng.choice(w) for w in
                                (EN_SUBJECTS, EN_VERBS, EN_OBJECTS, EN_TAILS)))
    return out


def write_corpus(path, lines, doc_len=5):
    """Pretraining format: a blank line after every `doc_len` sentences."""
    with open(path, "w", encoding="utf-8") as f:
        for i, line in enumerate(lines):
            f.write(line + "\n")
            if i % doc_len == doc_len - 1:
                f.write("\n")
    return str(path)


# ---------------------------------------------------------------------------------------
# Tokenizer access: the real in-graph BertTokenizer, built once per casing.

@pytest.fixture(scope="module")
def pretokenizers():
    return {True: bv.bert_pretokenizer(True), False: bv.bert_pretokenizer(False)}


def unk_rate(vocab_file, lines, do_lower_case):
    """Fraction of WordPiece tokens that are [UNK], with bert_tf's tokenizer."""
    from bert_tf.text.tokenization import BertTokenizer

    tok = BertTokenizer(vocab_file, do_lower_case=do_lower_case)
    ids = [i for row in tok.tokenize(lines).to_list() for i in row]
    assert ids, "no tokens at all"
    return sum(i == tok.unk_id for i in ids) / len(ids)


def read_vocab(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


# ---------------------------------------------------------------------------------------
# Pure functions


def test_reserved_layout_matches_google_ids():
    tokens = bv.reserved_tokens()
    assert tokens[0] == "[PAD]"
    assert tokens[1:100] == [f"[unused{i}]" for i in range(99)]
    assert tokens[100:] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 100-103 as Google's
    assert bv.reserved_tokens(0) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    with pytest.raises(ValueError):
        bv.reserved_tokens(-1)


def test_learn_merges_most_frequent_pair_first_and_stops_at_min_frequency():
    counts = {"abab": 10, "abc": 3, "xyz": 1}
    alphabet = ["a", "x", "##b", "##a", "##c", "##y", "##z"]
    learned = bv.learn_wordpieces(counts, 10, alphabet=alphabet, min_frequency=2)
    assert learned[0] == "ab"  # (a, ##b): 13 occurrences, the most frequent pair
    assert "abab" in learned and "abc" in learned
    assert not any("x" in p or "y" in p for p in learned)  # "xyz" occurs once
    assert bv.learn_wordpieces(counts, 1, alphabet=alphabet) == ["ab"]
    # A word with a character outside the alphabet is not learned from.
    assert bv.learn_wordpieces({"qq": 50}, 5, alphabet=["q"]) == []


def test_learned_pieces_are_prefixes_or_suffix_pieces_of_words():
    counts = {w: len(w) * 3 for w in ["running", "runner", "sunning", "sunny", "funny"]}
    chars = bv.character_tokens(counts)
    learned = bv.learn_wordpieces(counts, 50, alphabet=chars)
    for piece in learned:
        body = piece[2:] if piece.startswith("##") else piece
        assert any((w.find(body, 1) >= 1) if piece.startswith("##") else w.startswith(body)
                   for w in counts), piece


def test_character_tokens_skip_hash_form_of_isolated_chars():
    counts = {"中": 5, "국": 1, "한국어": 4, ",": 9}
    tokens = bv.character_tokens(counts, isolated_chars=["中", ","])
    assert {"中", ",", "국", "한", "##국", "##어", "##한"} <= set(tokens)
    assert "##中" not in tokens and "##," not in tokens


def test_too_many_characters_keeps_most_frequent():
    counts = {"a": 100, "b": 50, "c": 1}
    vocab = bv.build_vocab_from_counts(counts, 5 + 3, num_unused=0, isolated_chars="abc")
    assert vocab[5:] == ["a", "b", "c"]
    vocab = bv.build_vocab_from_counts(counts, 5 + 2, num_unused=0, isolated_chars="abc")
    assert vocab[5:] == ["a", "b"]
    with pytest.raises(ValueError, match="no room"):
        bv.build_vocab_from_counts(counts, 5, num_unused=0)


def test_count_words_prunes_deterministically():
    lines = [f"common w{i}" for i in range(50)]
    stats = bv.CorpusStats()
    counts = bv.count_words(lines, lambda xs: [x.split() for x in xs], stats,
                            batch_size=4, max_distinct_words=5)
    assert len(counts) == 5 and counts["common"] == 50 and stats.pruned >= 1
    again = bv.count_words(lines, lambda xs: [x.split() for x in xs], bv.CorpusStats(),
                           batch_size=4, max_distinct_words=5)
    assert list(counts.items()) == list(again.items())


# ---------------------------------------------------------------------------------------
# End to end with the real tokenizer


@pytest.mark.parametrize("do_lower_case", [False, True])
def test_mixed_korean_chinese_english(tmp_path, pretokenizers, do_lower_case):
    corpus = write_corpus(tmp_path / "mixed.txt", mixed_lines(seed=1, n=600))
    held_out = mixed_lines(seed=2, n=90)
    out = str(tmp_path / "vocab.txt")
    vocab, stats = bv.build_vocab(corpus, out, 700, do_lower_case=do_lower_case,
                                  num_unused=10, pretokenize=pretokenizers[do_lower_case])
    assert stats.lines == 600
    assert read_vocab(out) == vocab and len(vocab) == 700
    assert vocab[:16] == (["[PAD]"] + [f"[unused{i}]" for i in range(10)]
                          + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] + vocab[15:16])
    assert len(set(vocab)) == len(vocab)
    # Every script's characters are kept; Hangul also as "##" (it continues words), CJK
    # ideographs only bare (the tokenizer always splits them off).
    # Uncased means NFD, which splits Hangul syllables into jamo (as the original does).
    hangul = unicodedata.normalize("NFD", "학생읽습니다") if do_lower_case else "학생읽습니다"
    for ch in hangul:
        assert ch in vocab and "##" + ch in vocab
    for ch in "我们图书馆看":
        assert ch in vocab and "##" + ch not in vocab
    assert ("T" in vocab) != do_lower_case
    rate = unk_rate(out, held_out, do_lower_case=do_lower_case)
    assert rate < 0.01, rate
    # Korean words get learned multi-character pieces, not only characters.
    assert any(len(t) > 1 and unicodedata.name(t[0], "").startswith("HANGUL") for t in vocab)


def graph_pretokenizer(do_lower_case):
    """Basic tokenization by the in-graph BertTokenizer (what bert_pretokenizer used to be)."""
    from bert_tf.text.tokenization import BertTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "vocab.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]) + "\n")
        tok = BertTokenizer(path, do_lower_case=do_lower_case)

    def pretokenize(texts):
        return [[w.decode("utf-8") for w in row]
                for row in tok.basic_tokenize(list(texts)).to_list()]

    return pretokenize


@pytest.mark.parametrize("do_lower_case", [False, True])
def test_python_pretokenizer_learns_what_bert_tokenizer_words_learn(tmp_path, pretokenizers,
                                                                     do_lower_case):
    # bert_pretokenizer is the pure-Python BasicTokenizer (faster); it must split exactly as
    # BertTokenizer does, so the same vocab is learned and every piece is reachable.
    lines = mixed_lines(seed=5, n=300) + ["Ünïcödé ΣΑΣ İstanbul \x00x\u200by ﬁ 😀 e\u0301"]
    graph = graph_pretokenizer(do_lower_case)
    assert pretokenizers[do_lower_case](lines) == graph(lines)
    corpus = write_corpus(tmp_path / "m.txt", lines)
    a, _ = bv.build_vocab(corpus, str(tmp_path / "a.txt"), 500, do_lower_case=do_lower_case,
                          pretokenize=pretokenizers[do_lower_case])
    b, _ = bv.build_vocab(corpus, str(tmp_path / "b.txt"), 500, do_lower_case=do_lower_case,
                          pretokenize=graph)
    assert a == b


def test_uncased_vs_cased(tmp_path, pretokenizers):
    lines = ["The Café in Zürich serves Éclairs.", "ANNA met Bob at the Café.",
             "Zürich is CALM in the evening."] * 20
    corpus = write_corpus(tmp_path / "c.txt", lines)
    uncased, _ = bv.build_vocab(corpus, str(tmp_path / "u.txt"), 120, do_lower_case=True,
                                num_unused=2, pretokenize=pretokenizers[True])
    cased, _ = bv.build_vocab(corpus, str(tmp_path / "k.txt"), 120, do_lower_case=False,
                              num_unused=2, pretokenize=pretokenizers[False])
    learned_u = [t for t in uncased if not t.startswith("[")]
    learned_k = [t for t in cased if not t.startswith("[")]
    assert not any(c.isupper() or c in "éüÉ" for t in learned_u for c in t)
    assert "cafe" in learned_u and "zurich" in learned_u
    assert "Café" in learned_k and "Z" in learned_k and "##ü" in learned_k
    assert unk_rate(str(tmp_path / "u.txt"), ["Zürich CAFÉ anna"], True) == 0
    assert unk_rate(str(tmp_path / "k.txt"), ["Zürich Café Anna"], False) == 0


def test_same_corpus_gives_identical_file(tmp_path, pretokenizers):
    corpus = write_corpus(tmp_path / "m.txt", mixed_lines(seed=3, n=300))
    a, b = str(tmp_path / "a.txt"), str(tmp_path / "b.txt")
    bv.build_vocab(corpus, a, 400, do_lower_case=True, pretokenize=pretokenizers[True])
    bv.build_vocab(corpus, b, 400, do_lower_case=True, pretokenize=pretokenizers[True])
    with open(a, "rb") as fa, open(b, "rb") as fb:
        assert fa.read() == fb.read()


def test_small_corpus_writes_what_it_allows(tmp_path, pretokenizers):
    corpus = write_corpus(tmp_path / "s.txt", ["tiny corpus here."])
    messages = []
    vocab, _ = bv.build_vocab(corpus, str(tmp_path / "v.txt"), 1000, do_lower_case=True,
                              pretokenize=pretokenizers[True], log=messages.append)
    assert 104 < len(vocab) < 1000
    assert any("allows only" in m for m in messages)


def test_wikitext_vocab_on_held_out_enwiki(tmp_path, shared_data, pretokenizers):
    corpus = str(shared_data / "pretrain" / "wikitext2_bert_format.txt")
    out = str(tmp_path / "wiki_vocab.txt")
    vocab, stats = bv.build_vocab(corpus, out, 8000, do_lower_case=True,
                                  max_input_lines=6000, pretokenize=pretokenizers[True])
    assert stats.lines == 6000 and len(vocab) == 8000
    with open(shared_data / "pretrain" / "enwiki_2015_bert_format.txt", encoding="utf-8") as f:
        held_out = [line.strip() for line in itertools.islice(f, 20000, 20400) if line.strip()]
    assert unk_rate(out, held_out, do_lower_case=True) < 0.005


# ---------------------------------------------------------------------------------------
# Bad input: clear errors naming the file, and never a half-written or clobbered vocab.


def split_words(texts):
    return [t.split() for t in texts]


def test_no_glob_match_names_the_glob(tmp_path):
    (tmp_path / "a.txt").write_text("Some text.\n")
    with pytest.raises(CorpusError, match="no file matches .*nothing_here"):
        bv.build_vocab(f"{tmp_path}/a.txt,{tmp_path}/nothing_here*.txt",
                       str(tmp_path / "v.txt"), 100, do_lower_case=True,
                       pretokenize=split_words)
    with pytest.raises(CorpusError, match="no file matches .*no_such_dir"):
        corpus.expand_input_globs(str(tmp_path / "no_such_dir" / "*.txt"))
    with pytest.raises(CorpusError, match="is a directory"):
        corpus.expand_input_globs(str(tmp_path))
    assert not (tmp_path / "v.txt").exists()


@pytest.mark.parametrize("kind", ["gzip", "bzip2", "xz", "binary", "latin1", "empty",
                                  "blank"])
def test_unusable_corpus_refused_naming_file(tmp_path, kind):
    path = tmp_path / f"corpus_{kind}.txt"
    if kind == "gzip":
        path.write_bytes(gzip.compress(b"A sentence.\n" * 50))
    elif kind == "bzip2":
        import bz2
        path.write_bytes(bz2.compress(b"A sentence.\n" * 50))
    elif kind == "xz":
        import lzma
        path.write_bytes(lzma.compress(b"A sentence.\n" * 50))
    elif kind == "binary":
        path.write_bytes(bytes(random.Random(0).randrange(256) for _ in range(4000)))
    elif kind == "latin1":
        path.write_bytes("Café à la crème.\n".encode("latin-1") * 40)
    elif kind == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(b"\n\n   \n\n")
    out = tmp_path / "vocab.txt"
    bv.write_vocab(["old", "vocab"], str(out), "build_vocab")  # an earlier run's, replaceable
    with pytest.raises(CorpusError, match=str(path)):
        bv.build_vocab(str(path), str(out), 100, do_lower_case=True, pretokenize=split_words)
    assert out.read_text() == "old\nvocab\n"
    assert sorted(os.listdir(tmp_path)) == sorted([path.name, "vocab.txt",
                                                   ".vocab.txt.bert_tf_output.json"])


def test_invalid_line_reported_and_skipped(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"good line one.\nbad \xff\xfe line.\n\ngood line two.\n")
    messages = []
    vocab, stats = bv.build_vocab(str(path), str(tmp_path / "v.txt"), 60, do_lower_case=True,
                                  num_unused=0, pretokenize=split_words,
                                  log=messages.append)
    assert stats.invalid_lines == [f"{path}:2"] and stats.lines == 2
    assert any(m.startswith(f"{path}:2") for m in messages)
    assert "bad" not in vocab and "good" in vocab
    with pytest.raises(CorpusError, match=f"{path}:2"):
        bv.build_vocab(str(path), str(tmp_path / "w.txt"), 60, do_lower_case=True,
                       pretokenize=split_words, strict=True)
    assert not (tmp_path / "w.txt").exists()


def test_cli(tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", mixed_lines(seed=4, n=150))
    out = tmp_path / "sub" / "vocab.txt"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    cmd = [sys.executable, "-m", "data_prep.build_vocab", f"--input_file={corpus}",
           f"--vocab_file={out}", "--vocab_size=300", "--nodo_lower_case", "--num_unused=5",
           "--noprogress"]
    done = subprocess.run(cmd, env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    vocab = read_vocab(out)
    assert len(vocab) == 300 and vocab[6:10] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert "wrote" in done.stderr


def test_the_command_refuses_a_missing_vocab_file_before_reading(tmp_path):
    from bert_tf.core import errors
    from bert_tf.app.setting_fields import parse_args

    fv = parse_args(bv.define_flags, [f"--input_file={tmp_path}/missing.txt"])
    with pytest.raises(errors.UsageError, match=r"^--vocab_file is required"):
        bv.BuildVocabConfig.from_flags(fv)


# ---------------------------------------------------------------------------------------
# The built-in demo data (demo/data/, written by demo/make_demo_data.py).

DEMO_DATA = REPO_ROOT / "demo" / "data"


def test_demo_data_is_what_the_generator_writes():
    from demo import make_demo_data

    for name, text in make_demo_data.render_files().items():
        assert (DEMO_DATA / name).read_text(encoding="utf-8") == text, (
            f"demo/data/{name} is stale: run python -m demo.make_demo_data")
    total = sum(p.stat().st_size for p in DEMO_DATA.iterdir())
    assert total < 1_000_000


def test_demo_sentiment_files_have_glue_sst2_format():
    for split, low, high in (("train", 300, 600), ("dev", 80, 150)):
        rows = (DEMO_DATA / f"sentiment_{split}.tsv").read_text(encoding="utf-8").splitlines()
        assert rows[0] == "sentence\tlabel"
        labels = [r.split("\t")[1] for r in rows[1:]]
        assert all(len(r.split("\t")) == 2 for r in rows[1:])
        assert low <= len(labels) <= high and set(labels) == {"0", "1"}
        assert 0.4 < labels.count("1") / len(labels) < 0.6
    test_rows = (DEMO_DATA / "sentiment_test.tsv").read_text(encoding="utf-8").splitlines()
    assert test_rows[0] == "index\tsentence"
    assert [r.split("\t")[0] for r in test_rows[1:]] == [str(i) for i in range(len(test_rows) - 1)]
    train = {r.split("\t")[0] for r in
             (DEMO_DATA / "sentiment_train.tsv").read_text(encoding="utf-8").splitlines()}
    assert not train & {r.split("\t")[1] for r in test_rows[1:]}


def test_demo_corpus_vocab(tmp_path, pretokenizers):
    text = (DEMO_DATA / "corpus.txt").read_text(encoding="utf-8")
    docs = [d for d in text.split("\n\n") if d.strip()]
    assert len(docs) >= 40 and all(len(d.splitlines()) >= 5 for d in docs)
    out = str(tmp_path / "vocab.txt")
    vocab, _ = bv.build_vocab(str(DEMO_DATA / "corpus.txt"), out, 2000, do_lower_case=True,
                              pretokenize=pretokenizers[True])
    reviews = [r.split("\t")[0] for r in
               (DEMO_DATA / "sentiment_dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    assert unk_rate(out, reviews, do_lower_case=True) == 0
