"""`make demo`: the whole bert_tf pipeline end to end on small built-in data.

Each step runs the same command a user would run (printed before it runs), on the data
in demo/data (written for this project), and writes under demo_output/:

  1. build_vocab                learn a WordPiece vocab from demo/data/corpus.txt
  2. create_pretraining_data    masked-LM + next-sentence TFRecords (2 workers, 2 shards)
  3. pretrain                   bert_tiny (with the learned vocab) for a few hundred steps
  4. finetune --task_name=sst-2 a sentiment classifier on demo/data/sentiment_*.tsv
  5. export_model               a TF Serving SavedModel with a raw-text signature
  6. a fresh Python process that imports only tensorflow (+ tensorflow_text for its ops)
     loads the SavedModel and classifies raw sentences.

Run it with `make demo` (or `python -m demo.run_demo [--output_dir=DIR] [--fast]`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO_ROOT, "demo", "data")

# Seen by the demo's last step, never by training: does the classifier generalise?
RAW_SENTENCES = [
    "The food was wonderful and the staff were friendly.",
    "A dull, slow film that I would not recommend to anyone.",
    "Absolutely loved it, I will come back again!",
    "The battery died after two days and support never answered.",
]

CLASSIFY_IN_FRESH_PROCESS = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # registers the tokenizer's ops; bert_tf is never imported
    assert "bert_tf" not in sys.modules
    model = tf.saved_model.load(sys.argv[1])
    print("signatures:", sorted(model.signatures))
    serve = model.signatures["serving_default"]
    sentences = json.loads(sys.argv[2])
    out = serve(text=tf.constant(sentences))
    names = {0: "negative", 1: "positive"}  # the SST-2 format's labels 0 / 1
    probs = out["probabilities"].numpy()
    for i, s in enumerate(sentences):
        label = int(out["label_id"].numpy()[i])
        print(f"  {names[label]:>8}  p={probs[i].max():.3f}  {s}")
""")


class Step:
    """Prints a numbered step with its command, runs it, and times it."""

    def __init__(self, total: int):
        self.total = total
        self.number = 0
        self.timings = []

    def run(self, title: str, args, env=None):
        self.number += 1
        print(f"\n=== [{self.number}/{self.total}] {title}", flush=True)
        printable = " ".join(a if " " not in a else repr(a) for a in args)
        print(f"$ {printable.replace(sys.executable, 'python')}", flush=True)
        start = time.time()
        result = subprocess.run(args, cwd=REPO_ROOT, env=env)
        seconds = time.time() - start
        self.timings.append((title, seconds))
        if result.returncode:
            sys.exit(f"demo step {self.number} ({title}) failed with exit code "
                     f"{result.returncode}; its output is above")
        print(f"--- done in {seconds:.1f}s", flush=True)


def _env():
    env = dict(os.environ)
    env.setdefault("KERAS_BACKEND", "tensorflow")
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"  # hide C++ start-up noise (no GPU here)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _show(path: str, what: str):
    print(f"    {what}: {os.path.relpath(path, REPO_ROOT)}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default=os.path.join(REPO_ROOT, "demo_output"))
    parser.add_argument("--fast", action="store_true",
                        help="fewer steps (used by the test suite's smoke run)")
    args = parser.parse_args(argv)
    out = os.path.abspath(args.output_dir)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    py = sys.executable
    env = _env()
    steps = Step(total=6)
    started = time.time()
    pretrain_steps = 60 if args.fast else 600
    finetune_epochs = "2" if args.fast else "6"

    vocab = os.path.join(out, "vocab.txt")
    steps.run("Learn a WordPiece vocabulary from the built-in corpus", [
        py, "-m", "data_prep.build_vocab", f"--input_file={DATA}/corpus.txt",
        f"--vocab_file={vocab}", "--vocab_size=2000", "--do_lower_case", "--num_unused=10",
        "--noprogress"], env)
    with open(vocab, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    _show(vocab, f"vocab ({vocab_size} tokens)")

    records = os.path.join(out, "pretraining", "corpus.tfrecord")
    os.makedirs(os.path.dirname(records))
    steps.run("Create masked-LM / next-sentence pretraining records", [
        py, "-m", "data_prep.create_pretraining_data", f"--input_file={DATA}/corpus.txt",
        f"--output_file={records}", f"--vocab_file={vocab}", "--do_lower_case",
        "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=5",
        "--num_workers=2", "--num_output_shards=2", "--random_seed=12345"], env)
    summary_files = [f for f in os.listdir(os.path.dirname(records)) if f.endswith(".json")]
    for name in summary_files:
        with open(os.path.join(os.path.dirname(records), name)) as f:
            summary = json.load(f)
        print("    summary:", {k: summary[k] for k in ("instances", "tokens", "masked_tokens",
                                                      "random_next_fraction") if k in summary})

    # bert_tiny's shape with the learned vocabulary's size.
    config_path = os.path.join(out, "bert_tiny_demo.json")
    sys.path.insert(0, REPO_ROOT)
    from bert_tf.config import BertConfig  # light: no TensorFlow graph work

    tiny = BertConfig.from_file(os.path.join(REPO_ROOT, "official_configs", "models",
                                             "bert_tiny.yaml"))
    tiny.replace(vocab_size=vocab_size, max_position_embeddings=64).to_json_file(config_path)
    pretrained = os.path.join(out, "pretrained")
    steps.run("Pretrain bert_tiny (masked LM + next sentence)", [
        py, "-m", "bert_tf.pretrain", f"--bert_config_file={config_path}",
        f"--input_file={records}-*", f"--output_dir={pretrained}", f"--vocab_file={vocab}",
        "--do_lower_case", "--do_train", "--do_eval", "--max_seq_length=64",
        "--max_predictions_per_seq=10", "--train_batch_size=32", "--eval_batch_size=32",
        "--learning_rate=1e-3", f"--num_train_steps={pretrain_steps}",
        f"--num_warmup_steps={pretrain_steps // 10}", "--steps_per_loop=50",
        f"--save_checkpoints_steps={pretrain_steps}", "--max_eval_steps=10"], env)
    with open(os.path.join(pretrained, "eval_results.json")) as f:
        print("    held-out:", {k: round(v, 3) for k, v in json.load(f).items()
                                if isinstance(v, (int, float))})

    sentiment = os.path.join(out, "sentiment_data")
    os.makedirs(sentiment)
    for split in ("train", "dev", "test"):
        shutil.copy(os.path.join(DATA, f"sentiment_{split}.tsv"),
                    os.path.join(sentiment, f"{split}.tsv"))
    classifier = os.path.join(out, "classifier")
    steps.run("Fine-tune a sentiment classifier (SST-2 format) from the pretrained model", [
        py, "-m", "bert_tf.finetune", "--task_name=sst-2", f"--data_dir={sentiment}",
        f"--init_checkpoint={pretrained}", f"--output_dir={classifier}", "--do_train",
        "--do_eval", "--do_predict", "--max_seq_length=64", "--train_batch_size=32",
        "--eval_batch_size=32", "--learning_rate=5e-4", f"--num_train_epochs={finetune_epochs}",
        "--steps_per_loop=10"], env)
    with open(os.path.join(classifier, "eval_results.json")) as f:
        print("    dev:", json.load(f))
    _show(os.path.join(classifier, "SST-2.tsv"), "test predictions")

    export_dir = os.path.join(out, "export")
    steps.run("Export a TF Serving SavedModel with a raw-text signature", [
        py, "-m", "bert_tf.export_model", f"--init_checkpoint={classifier}",
        f"--export_dir={export_dir}"], env)
    versions = sorted(int(v) for v in os.listdir(export_dir) if v.isdigit())
    saved_model = os.path.join(export_dir, str(versions[-1]))
    _show(saved_model, "SavedModel")

    # Written out so that the user can read and rerun exactly what a client does.
    client = os.path.join(out, "classify.py")
    with open(client, "w") as f:
        f.write(CLASSIFY_IN_FRESH_PROCESS.lstrip())
    steps.run("Classify raw sentences in a fresh process (tensorflow only, no bert_tf)", [
        py, client, saved_model, json.dumps(RAW_SENTENCES)],
        {k: v for k, v in env.items() if k != "PYTHONPATH"})

    print(f"\nDemo finished in {time.time() - started:.0f}s; everything is under "
          f"{os.path.relpath(out, REPO_ROOT)}/:")
    for title, seconds in steps.timings:
        print(f"  {seconds:6.1f}s  {title}")


if __name__ == "__main__":
    main()
