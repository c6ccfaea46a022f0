"""bert_tf.extend_vocab on real Korean text: [unusedN] slots first then appended, rows
initialised from the old pieces that spell each new one, every other weight copied, a
model dir that pretrain continues from; data_prep with --nostrip_accents/--pre_tokenizer."""

import json
import os
import subprocess
import sys
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import extend_vocab as ev
from bert_tf.model import model_dir
from bert_tf.model.pretrainer import BertPretrainer
from bert_tf.text.text_rules import BasicTokenizer, WordPieceTokenizer, load_vocab
from data_prep import pretraining_job, pretraining_passes
from data_prep.build_vocab import build_vocab_from_counts, isolated_characters
from tests.helpers import command_env, tiny_config
from tests.helpers.text import KOREAN, korean_lines

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_CORPUS = os.path.join(REPO, "demo", "data", "corpus.txt")
NUM_NEW = 1200  # every character of the Korean text, then merged pieces


@pytest.fixture(scope="module")
def old_dir(tmp_path_factory):
    """A tiny uncased (stripping) model whose vocab knows English and Korean jamo only."""
    root = tmp_path_factory.mktemp("extend")
    english = [ln for ln in open(DEMO_CORPUS, encoding="utf-8") if ln.strip()][:300]
    lines = english + korean_lines()[:100]
    basic = BasicTokenizer(True)
    counts = {}
    for line in lines:
        for w in basic.tokenize(line):
            counts[w] = counts.get(w, 0) + 1
    chars = {c for w in counts for c in w}
    vocab = build_vocab_from_counts(counts, 600, num_unused=3,
                                    isolated_chars=isolated_characters(chars,
                                                                       basic.tokenize_batch))
    vocab_file = root / "old_vocab.txt"
    vocab_file.write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    cfg = tiny_config(vocab_size=len(vocab), max_position_embeddings=64)
    model = BertPretrainer(cfg, name="pretrainer")
    # Distinct bias values, so that the test sees rows move to the right places.
    model.masked_lm.output_bias.assign(np.arange(len(vocab), dtype=np.float32) / 100)
    d = str(root / "old")
    model_dir.write_model_dir(d, cfg, {"encoder": model.encoder, "masked_lm": model.masked_lm,
                                "next_sentence": model.next_sentence},
                       vocab_file=str(vocab_file), do_lower_case=True)
    return d, model


@pytest.fixture(scope="module")
def extended(old_dir, tmp_path_factory):
    d, _ = old_dir
    out = str(tmp_path_factory.mktemp("extended") / "ko")
    summary = ev.extend_model_dir(d, str(KOREAN), out, num_new_tokens=NUM_NEW,
                                  strip_accents=False)
    return out, summary


def test_slots_first_then_appended(old_dir, extended):
    d, _ = old_dir
    out, summary = extended
    old = load_vocab(os.path.join(d, "vocab.txt"))
    new = load_vocab(os.path.join(out, "vocab.txt"))
    assert summary["filled_unused_slots"] == 3 and summary["appended"] == NUM_NEW - 3
    assert len(new) == len(old) + NUM_NEW - 3
    assert not any(t.startswith("[unused") for t in new)
    assert [new[i] for i in range(len(old)) if old[i] != new[i]] == new[1:4]  # the slots
    assert new[:len(old)][4:] == old[4:]
    assert model_dir.find_config(out).vocab_size == len(new)
    assert json.load(open(os.path.join(out, "tokenizer_config.json"))) == {
        "do_lower_case": True, "strip_accents": False}
    assert set(summary["restored_heads"]) == {"masked_lm", "next_sentence"}


def test_rows_start_as_mean_of_old_spelling(old_dir, extended):
    d, old_model = old_dir
    out, _ = extended
    old_vocab = load_vocab(os.path.join(d, "vocab.txt"))
    new_vocab = load_vocab(os.path.join(out, "vocab.txt"))
    new_model = BertPretrainer(model_dir.find_config(out), name="pretrainer")
    model_dir.restore(out, {"encoder": new_model.encoder, "masked_lm": new_model.masked_lm,
                     "next_sentence": new_model.next_sentence})
    old_emb = old_model.encoder.word_embeddings.numpy()
    new_emb = new_model.encoder.word_embeddings.numpy()
    old_bias = old_model.masked_lm.output_bias.numpy()
    new_bias = new_model.masked_lm.output_bias.numpy()
    old_tok = WordPieceTokenizer(old_vocab, do_lower_case=True)
    spelled = 0
    for i, token in enumerate(new_vocab):
        if i < len(old_vocab) and token == old_vocab[i]:
            np.testing.assert_array_equal(new_emb[i], old_emb[i])
            assert new_bias[i] == old_bias[i]
            continue
        ids = ev.spelling_ids(token, old_tok)
        rows = ids if ids else list(range(len(old_vocab)))
        np.testing.assert_allclose(new_emb[i], old_emb[rows].mean(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(new_bias[i], old_bias[rows].mean(0), rtol=1e-5, atol=1e-6)
        spelled += bool(ids)
    assert spelled > 40  # Hangul syllables spelled by the old vocab's jamo
    # Everything else is copied.
    for a, b in zip(old_model.weights, new_model.weights):
        if a is not old_model.encoder.word_embeddings and a is not \
                old_model.masked_lm.output_bias:
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_spelling_of_a_syllable_is_its_jamo(old_dir):
    d, _ = old_dir
    tok = WordPieceTokenizer(load_vocab(os.path.join(d, "vocab.txt")), do_lower_case=True)
    for piece in ("##국", "대한민국", "헌법"):
        tokens = [tok_token(tok, i) for i in ev.spelling_ids(piece, tok)]
        # The old (stripping) vocab spells syllables with jamo pieces ("##국" looks
        # like "##국" but is three jamo), continuation pieces after the first.
        assert "".join(t.replace("##", "") for t in tokens) == \
            unicodedata.normalize("NFD", piece.replace("##", ""))
        assert all(t.startswith("##") for t in tokens[1:])
        assert tokens[0].startswith("##") == piece.startswith("##")


def tok_token(tok, i):
    return {v: k for k, v in tok.vocab.items()}[i]


def test_fewer_unknowns_after(old_dir, extended):
    d, _ = old_dir
    out, _ = extended
    lines = korean_lines()[-300:]
    before = WordPieceTokenizer(load_vocab(os.path.join(d, "vocab.txt")), True,
                                strip_accents=False)
    after = WordPieceTokenizer(load_vocab(os.path.join(out, "vocab.txt")), True,
                               strip_accents=False)

    def unk_rate(tok):
        ids = [i for t in lines for i in tok.tokenize_line(t)]
        return ids.count(tok.unk_id) / len(ids)

    assert unk_rate(after) < 0.2 * unk_rate(before)


def test_pretrain_continues_from_extended_dir(extended, tmp_path):
    out, _ = extended
    records = str(tmp_path / "ko.tfrecord")
    pretraining_job.run(pretraining_passes.JobConfig(input_file=str(KOREAN), output_file=records,
                          vocab_file=os.path.join(out, "vocab.txt"), do_lower_case=True,
                          strip_accents=False, max_seq_length=32, max_predictions_per_seq=5,
                          dupe_factor=1, num_workers=0, progress=False))
    run_dir = str(tmp_path / "run")
    proc = subprocess.run(
        [sys.executable, "-m", "bert_tf.pretrain", f"--init_checkpoint={out}",
         f"--input_file={records}", f"--output_dir={run_dir}", "--max_seq_length=32",
         "--max_predictions_per_seq=5", "--do_train", "--train_batch_size=4",
         "--num_train_steps=2", "--num_warmup_steps=1", "--steps_per_loop=1",
         "--save_checkpoints_steps=2"],
        env=command_env(), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert tf.train.latest_checkpoint(run_dir).endswith("ckpt-2")
    # The run records the extended vocab and settings for finetune/export.
    assert json.load(open(os.path.join(run_dir, "tokenizer_config.json"))) == {
        "do_lower_case": True, "strip_accents": False}
    assert load_vocab(os.path.join(run_dir, "vocab.txt")) == load_vocab(
        os.path.join(out, "vocab.txt"))


def test_cli_errors_name_the_problem(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bert_tf.extend_vocab", f"--init_checkpoint={tmp_path}/none",
         f"--input_file={KOREAN}", f"--output_dir={tmp_path}/out"],
        env=command_env(), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "needs bert_config.json and vocab.txt" in proc.stderr
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------ data_prep flags


def test_create_pretraining_data_with_kiwi_and_kept_accents(extended, tmp_path):
    pytest.importorskip("kiwipiepy", reason="pip install -r requirements-korean.txt")
    from bert_tf.text.pre_tokenizers import get_pre_tokenizer

    out, _ = extended
    vocab = os.path.join(out, "vocab.txt")
    small = tmp_path / "ko.txt"  # the first 300 lines: kiwi takes ~5 ms a line
    small.write_text("\n".join(korean_lines()[:300]) + "\n", encoding="utf-8")
    cfg = pretraining_passes.JobConfig(input_file=str(small),
                                       output_file=str(tmp_path / "r.tfrecord"),
                        vocab_file=vocab, do_lower_case=True, strip_accents=False,
                        pre_tokenizer="kiwi", num_workers=0, progress=False)
    unit_lines = korean_lines()[:50]
    proc = pretraining_passes.UnitProcessor(cfg)
    host = WordPieceTokenizer(load_vocab(vocab), True, strip_accents=False)
    split = get_pre_tokenizer("kiwi")(unit_lines)
    assert [list(a) for a in proc.tokenizer.tokenize_lines(proc.pre_split(unit_lines))] == \
        [host.tokenize_line(t) for t in split]
    summary = pretraining_job.run(cfg)
    assert summary["instances"] > 0


def test_build_vocab_cli_without_kiwi_says_what_to_install(tmp_path):
    fake = tmp_path / "site" / "kiwipiepy"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no kiwipiepy here')\n")
    env = command_env()
    env["PYTHONPATH"] = f"{tmp_path / 'site'}{os.pathsep}{REPO}"
    proc = subprocess.run(
        [sys.executable, "-m", "data_prep.build_vocab", f"--input_file={KOREAN}",
         f"--vocab_file={tmp_path}/v.txt", "--vocab_size=500", "--nostrip_accents",
         "--pre_tokenizer=kiwi", "--noprogress"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "pip install -r requirements-korean.txt" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "v.txt").exists()
