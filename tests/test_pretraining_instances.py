"""data_prep.pretraining_instances: each step on hand-made input, then against an oracle
(tests/helpers/pretraining_oracle.py). The id-based functions must give exactly its
instances for the same seed.
"""

import random
import re

import pytest

from data_prep import corpus
from data_prep import pretraining_instances as pi
from tests.helpers.pretraining_oracle import oracle_create_training_instances

CLS, SEP, MASK = 101, 102, 103
VOCAB = pi.VocabIds(cls_id=CLS, sep_id=SEP, mask_id=MASK, vocab_size=30522)


class ScriptedRng:
    """Answers random()/randint() from scripts; shuffle is the identity. Records every call."""

    def __init__(self, randoms=(), randints=()):
        self.randoms, self.randints, self.calls = list(randoms), list(randints), []

    def random(self):
        self.calls.append("random")
        return self.randoms.pop(0)

    def randint(self, a, b):
        v = self.randints.pop(0)
        assert a <= v <= b, (a, v, b)
        self.calls.append(("randint", a, b))
        return v

    def shuffle(self, x):
        self.calls.append(("shuffle", len(x)))


# ----------------------------------------------------------------------------- truncate_seq_pair


def test_truncate_cuts_longer_side_from_front_or_back():
    a, b = [1, 2, 3, 4, 5], [6, 7]
    rng = ScriptedRng(randoms=[0.1, 0.9])  # 0.1 < 0.5: front; 0.9: back
    pi.truncate_seq_pair(a, b, 5, rng)
    assert a == [2, 3, 4] and b == [6, 7]
    assert rng.calls == ["random", "random"]


def test_truncate_equal_lengths_cuts_b_and_leaves_short_pairs_alone():
    a, b = [1, 2], [3, 4]
    rng = ScriptedRng(randoms=[0.7])
    pi.truncate_seq_pair(a, b, 3, rng)
    assert (a, b) == ([1, 2], [3])
    rng = ScriptedRng()
    pi.truncate_seq_pair(a, b, 3, rng)  # fits: no generator call
    assert rng.calls == []


# ------------------------------------------------------------------ create_masked_lm_predictions


@pytest.mark.parametrize("length,prob,max_pred,expected", [
    (10, 0.25, 20, 2),    # round(2.5) == 2: Python 3 rounds half to even, as the original ran
    (30, 0.15, 20, 4),    # round(4.5) == 4
    (128, 0.15, 20, 19),
    (128, 0.15, 10, 10),  # capped by max_predictions_per_seq
    (5, 0.01, 20, 1),     # at least one
])
def test_number_of_predictions(length, prob, max_pred, expected):
    tokens = [CLS] + list(range(1000, 1000 + length - 2)) + [SEP]
    _, positions, _ = pi.create_masked_lm_predictions(tokens, prob, max_pred, VOCAB,
                                                      random.Random(0))
    assert len(positions) == expected


def test_80_10_10_branches_in_choice_order():
    tokens = [CLS, 11, 12, SEP, 13, SEP]
    # Identity shuffle: candidates 1, 2, 4. Draws: MASK; (0.9, 0.3) keep; (0.9, 0.7) random.
    rng = ScriptedRng(randoms=[0.5, 0.9, 0.3, 0.9, 0.7], randints=[42])
    out, positions, labels = pi.create_masked_lm_predictions(tokens, 0.5, 20, VOCAB, rng)
    assert out == [CLS, MASK, 12, SEP, 42, SEP]
    assert positions == [1, 2, 4] and labels == [11, 12, 13]
    assert rng.calls == [("shuffle", 3)] + ["random"] * 5 + [("randint", 0, 30521)]


def test_never_masks_cls_sep_and_labels_are_originals():
    rng = random.Random(7)
    for trial in range(200):
        tokens = [CLS] + [rng.randint(1000, 2000) for _ in range(rng.randint(1, 30))] + [SEP] + \
                 [rng.randint(1000, 2000) for _ in range(rng.randint(1, 30))] + [SEP]
        out, positions, labels = pi.create_masked_lm_predictions(tokens, 0.15, 20, VOCAB, rng)
        assert positions == sorted(set(positions))
        assert all(tokens[p] not in (CLS, SEP) for p in positions)
        assert labels == [tokens[p] for p in positions]
        unmasked = set(range(len(tokens))) - set(positions)
        assert all(out[i] == tokens[i] for i in unmasked)


def _wwm_vocab():
    # ids 200.. are "##" pieces
    table = bytearray(30522)
    for i in range(200, 300):
        table[i] = 1
    return VOCAB._replace(is_continuation=bytes(table))


def test_whole_word_mask_takes_words_whole_and_draws_per_piece():
    vocab = _wwm_vocab()
    #         0    1   2    3    4   5    6
    tokens = [CLS, 11, 201, 202, 12, SEP, 13, SEP]
    # len 8 * 0.5 = 4 predictions. Candidates [1,2,3], [4], [6]; identity shuffle takes
    # [1,2,3] (3 of 4), then [4] fills it; one 0.1 draw (MASK) per piece: 4 draws.
    rng = ScriptedRng(randoms=[0.1] * 4)
    out, positions, labels = pi.create_masked_lm_predictions(tokens, 0.5, 20, vocab, rng, True)
    assert positions == [1, 2, 3, 4]
    assert rng.calls == [("shuffle", 3)] + ["random"] * 4
    assert out == [CLS, MASK, MASK, MASK, MASK, SEP, 13, SEP]


def test_whole_word_mask_skips_a_word_that_does_not_fit():
    vocab = _wwm_vocab()
    tokens = [CLS, 11, 201, 202, 203, SEP, 13, SEP]  # len 8 * 0.25 = 2 predictions
    rng = ScriptedRng(randoms=[0.1])
    _, positions, _ = pi.create_masked_lm_predictions(tokens, 0.25, 20, vocab, rng, True)
    assert positions == [6]  # the 4-piece word is skipped, the next word fits


def test_whole_word_mask_piece_after_sep_joins_previous_word_like_the_original():
    vocab = _wwm_vocab()
    tokens = [CLS, 11, SEP, 201, SEP]
    rng = ScriptedRng(randoms=[0.1, 0.1])
    _, positions, _ = pi.create_masked_lm_predictions(tokens, 0.4, 20, vocab, rng, True)
    assert positions == [1, 3]
    assert rng.calls[0] == ("shuffle", 1)


def test_whole_word_mask_needs_the_continuation_table():
    with pytest.raises(ValueError, match="is_continuation"):
        pi.create_masked_lm_predictions([CLS, 5, SEP], 0.15, 20, VOCAB, random.Random(0), True)


# ---------------------------------------------------------------- create_instances_from_document


def _unmask(inst):
    ids = list(inst.input_ids)
    for p, orig in zip(inst.masked_lm_positions, inst.masked_lm_ids):
        ids[p] = orig
    return ids


def _split(inst):
    ids = _unmask(inst)
    n_a = inst.segment_ids.count(0) - 2
    return ids[1:1 + n_a], ids[2 + n_a:-1]


def test_instance_layout_and_actual_next_is_the_following_text():
    doc = [list(range(100 * k + 1000, 100 * k + 1000 + 5)) for k in range(12)]
    other = [[7000 + j for j in range(6)] for _ in range(3)]
    docs = [doc, other]
    flat_doc = [t for seg in doc for t in seg]
    seen_actual = 0
    for seed in range(30):
        insts = pi.create_instances_from_document(docs, 0, 32, 0.1, 0.15, 5, VOCAB,
                                                  random.Random(seed))
        for inst in insts:
            ids = inst.input_ids
            assert len(ids) <= 32 and ids[0] == CLS and ids[-1] == SEP
            assert inst.segment_ids == sorted(inst.segment_ids)
            n_a = inst.segment_ids.count(0) - 2
            assert ids[n_a + 1] == SEP and len(inst.segment_ids) == len(ids)
            a, b = _split(inst)
            assert a and b
            if not inst.is_random_next:
                seen_actual += 1
                # A and B are each contiguous text of the document (truncation may trim
                # either end of each), B after A.
                at = {t: k for k, t in enumerate(flat_doc)}
                pa, pb = [at[t] for t in a], [at[t] for t in b]
                assert pa == list(range(pa[0], pa[0] + len(pa)))
                assert pb == list(range(pb[0], pb[0] + len(pb)))
                assert pb[0] > pa[-1]
            else:
                assert all(7000 <= t < 7006 for t in b) or all(1000 <= t < 3000 for t in b)
    assert seen_actual > 0


def test_random_next_puts_unused_segments_back():
    doc = [[11] * 4, [12] * 4, [13] * 4]
    other = [[21] * 4, [22] * 4]
    # max_seq_length 14 -> target 11 (short_seq_prob 0). Chunk [s0, s1, s2] closes at i=2;
    # a_end = randint(1, 2) -> 1; random() 0.2 -> random next from document 1, start 0;
    # B = 8 tokens, pair 12 > 11: B loses its last token (random() 0.7); one prediction
    # (random() 0.1). Two unused segments go back, so the next chunk is [s1, s2]:
    # a_end = randint(1, 1); random() 0.9 -> actual next; one prediction.
    rng = ScriptedRng(randoms=[0.5, 0.2, 0.7, 0.1, 0.9, 0.1], randints=[1, 1, 0, 1])
    insts = pi.create_instances_from_document([doc, other], 0, 14, 0.0, 0.01, 1, VOCAB, rng)
    assert [i.is_random_next for i in insts] == [True, False]
    a0, b0 = _split(insts[0])
    assert a0 == [11] * 4 and b0 == [21] * 4 + [22] * 3
    a1, b1 = _split(insts[1])
    assert a1 == [12] * 4 and b1 == [13] * 4
    assert not rng.randoms and not rng.randints


def test_one_segment_document_gives_random_next_only():
    docs = [[[5, 6, 7]], [[8, 9]], [[10, 11]]]
    for seed in range(20):
        insts = pi.create_instances_from_document(docs, 0, 16, 0.0, 0.15, 2, VOCAB,
                                                  random.Random(seed))
        assert len(insts) == 1 and insts[0].is_random_next


def test_short_seq_prob_makes_shorter_sequences():
    doc = [list(range(1000 + 10 * k, 1010 + 10 * k)) for k in range(60)]
    docs = [doc, [[9000, 9001]]]
    full = [len(i.input_ids) for s in range(5) for i in pi.create_instances_from_document(
        docs, 0, 64, 0.0, 0.15, 10, VOCAB, random.Random(s))]
    short = [len(i.input_ids) for s in range(5) for i in pi.create_instances_from_document(
        docs, 0, 64, 1.0, 0.15, 10, VOCAB, random.Random(s))]
    assert sum(short) / len(short) < sum(full) / len(full)
    assert len(short) > len(full)


def _instances_as_lists(instances):
    return [(list(x.input_ids), x.segment_ids, x.is_random_next, x.masked_lm_positions,
             x.masked_lm_ids) for x in instances]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_layout_candidates_equal_searched_candidates(seed):
    # The fast path (candidates from the A/B layout, pools without [CLS]/[SEP] ids in the
    # text) gives the same instances and leaves the generator in the same state.
    from array import array

    rng = random.Random(seed)
    docs = [[array("i", [rng.randint(200, 30000) for _ in range(rng.randint(1, 40))])
             for _ in range(rng.randint(1, 6))] for _ in range(12)]
    assert pi.pool_has_no_special_ids(docs, VOCAB)
    out = {}
    for fast in (True, False):
        r = random.Random(seed)
        insts = []
        for d in range(len(docs)):
            insts += pi.create_instances_from_document(docs, d, 48, 0.2, 0.15, 5, VOCAB, r,
                                                       no_special_ids=fast)
        out[fast] = (_instances_as_lists(insts), r.random())
    assert out[True] == out[False]


def test_pool_with_special_ids_in_the_text_searches_for_them():
    from array import array

    docs = [[array("i", [5, SEP, 6, 7, 8]), array("i", [9, 10])], [array("i", [CLS, 11, 12])]]
    assert not pi.pool_has_no_special_ids(docs, VOCAB)
    assert not pi.pool_has_no_special_ids([[list(s) for s in d] for d in docs], VOCAB)
    # The bytes of [CLS] straddling two ids (0x6500 then 0x100) are not a [CLS].
    assert bytes(array("i", [CLS])) in bytes(array("i", [0x6500, 0x100]))
    assert pi.pool_has_no_special_ids([[array("i", [0x6500, 0x100])]], VOCAB)
    assert not pi.pool_has_no_special_ids([[array("i", [0x6500, 0x100, 7, SEP])]], VOCAB)
    got = list(pi.iter_pool_instances([list(d) for d in docs], 3, 12, 0.0, 0.5, 4, VOCAB,
                                      random.Random(5)))
    expect_rng = random.Random(5)
    pool = [list(d) for d in docs]
    pi.shuffle(pool, expect_rng)
    expect = []
    for _ in range(3):
        for d in range(len(pool)):
            expect += pi.create_instances_from_document(pool, d, 12, 0.0, 0.5, 4, VOCAB,
                                                        expect_rng)
    assert _instances_as_lists(got) == _instances_as_lists(expect)
    for inst in got:  # the [SEP] / [CLS] inside the text are never chosen
        assert all(inst.input_ids[p] not in (CLS, SEP) or
                   inst.masked_lm_ids[i] not in (CLS, SEP)
                   for i, p in enumerate(inst.masked_lm_positions))
        assert all(lab not in (CLS, SEP) for lab in inst.masked_lm_ids)


def test_shuffled_order_matches_rng_shuffle():
    items = list("abcdefghij")
    a, b = random.Random(3), random.Random(3)
    expected = list(items)
    a.shuffle(expected)
    assert [items[k] for k in pi.shuffled_order(len(items), b)] == expected


class TinyTokenizer:
    def __init__(self, vocab_path):
        self.vocab = [line.rstrip("\n") for line in open(vocab_path, encoding="utf-8")]
        self.ids = {t: i for i, t in enumerate(self.vocab)}

    def pieces(self, word):
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.ids:
                    break
                end -= 1
            if end == start:
                return ["[UNK]"]
            out.append(piece)
            start = end
        return out

    def tokenize(self, line):
        return [p for w in re.findall(r"\w+|[^\w\s]", line.lower()) for p in self.pieces(w)]


@pytest.fixture(scope="module")
def enwiki_docs(shared_data):
    """Token-string documents of the first ~40 enwiki documents, via the original reader."""
    tok = TinyTokenizer(shared_data / "vocab" / "bert-base-uncased-vocab.txt")
    docs, lines = [[]], []
    with open(shared_data / "pretrain" / "enwiki_2015_bert_format.txt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            lines.append(line)
            if not line:
                docs.append([])
                if len(docs) > 40:
                    break
            tokens = tok.tokenize(line)
            if tokens:
                docs[-1].append(tokens)
    return tok, [d for d in docs if d], lines


def test_split_documents_matches_the_original_reader(enwiki_docs):
    tok, docs, lines = enwiki_docs
    segments = [tok.tokenize(t) if t else None for t in lines]
    assert corpus.split_documents(segments) == docs


def _to_ids(tok, docs):
    return [[[tok.ids[t] for t in seg] for seg in d] for d in docs]


def _vocab_ids(tok):
    return pi.VocabIds(tok.ids["[CLS]"], tok.ids["[SEP]"], tok.ids["[MASK]"], len(tok.vocab),
                       pi.continuation_table(tok.vocab))


@pytest.mark.parametrize("seed,wwm,max_len", [(12345, False, 128), (7, True, 128),
                                               (3, False, 48)])
def test_identical_to_the_oracle_on_real_text(enwiki_docs, seed, wwm, max_len):
    tok, docs, _ = enwiki_docs
    expected = oracle_create_training_instances(
        [list(d) for d in docs], tok.vocab, random.Random(seed), max_len, 2, 0.1, 0.15, 20, wwm)
    got = pi.create_training_instances(_to_ids(tok, docs), max_len, 2, 0.1, 0.15, 20,
                                       _vocab_ids(tok), random.Random(seed), wwm)
    assert len(got) == len(expected) > 500
    for g, (tokens, seg, rnext, positions, labels) in zip(got, expected):
        assert [tok.vocab[i] for i in g.input_ids] == tokens
        assert g.segment_ids == seg and g.is_random_next == rnext
        assert g.masked_lm_positions == positions
        assert [tok.vocab[i] for i in g.masked_lm_ids] == labels


def instance_statistics(instances, mask_id):
    """Fractions the issue asks to compare: masked share, 80/10/10, random-next."""
    tokens = sum(len(i.input_ids) for i in instances)
    masked = as_mask = kept = 0
    for inst in instances:
        for p, orig in zip(inst.masked_lm_positions, inst.masked_lm_ids):
            masked += 1
            as_mask += inst.input_ids[p] == mask_id
            kept += inst.input_ids[p] == orig
    return dict(instances=len(instances), masked_fraction=masked / tokens,
                mask=as_mask / masked, kept=kept / masked,
                random=(masked - as_mask - kept) / masked,
                random_next=sum(i.is_random_next for i in instances) / len(instances))


def test_statistics_on_real_text(enwiki_docs):
    tok, docs, _ = enwiki_docs
    vocab = _vocab_ids(tok)
    insts = pi.create_training_instances(_to_ids(tok, docs), 128, 2, 0.1, 0.15, 20, vocab,
                                         random.Random(1))
    st = instance_statistics(insts, vocab.mask_id)
    assert abs(st["masked_fraction"] - 0.15) < 0.006
    assert abs(st["mask"] - 0.8) < 0.02
    assert abs(st["kept"] - 0.1) < 0.015 and abs(st["random"] - 0.1) < 0.015
    # More than half random-next: single-segment chunks always take a random next.
    assert 0.5 < st["random_next"] < 0.6
