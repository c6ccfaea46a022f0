"""Pretraining throughput: bert_tf's Trainer vs keras-hub's BertBackbone + MaskedLMHead.

Question: how many training examples/s does one pretraining step (masked LM with 20
predictions + next sentence, forward + backward + AdamW update with global-norm
clipping) reach on this machine, against keras-hub doing the same step in the same
process, and what fraction of the measured float32 matmul peak is that (model-FLOPs
utilisation, MFU)?

    PYTHONPATH=. KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/pretraining_throughput.py \
        [--models=bert_mini,bert_small] [--batch_size=32] [--seq_length=128] \
        [--steps=10] [--repeats=3] [--skip_peer]

Both sides get the same synthetic batch (random ids, full-length sequences, 20 masked
positions), so no input pipeline is measured. Ours runs through `Trainer.train` (the
loop the CLI uses) with `steps_per_loop=--steps`, with and without XLA (`jit_compile`).
keras-hub runs a `tf.function` step of BertBackbone + MaskedLMHead (tied embeddings) +
a Dense NSP head on the pooled output with `keras.optimizers.AdamW(global_clipnorm=1)`,
with and without `jit_compile`. Each number is the best of --repeats timed runs of
--steps steps after a warm-up run (the machine is shared: the best run is the least
disturbed). Model FLOPs count the matmuls of a training step (3x forward): per layer
QKV/output projections, attention scores and context, feed-forward; pooler; the masked-LM
transform and vocabulary projection at the 20 positions.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bert_tf.config import BertConfig  # noqa: E402
from bert_tf.models import BertPretrainer  # noqa: E402
from bert_tf.training import losses, optimization  # noqa: E402
from bert_tf.training.loop import Trainer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREDICTIONS = 20


def matmul_peak(size=1024, repeats=20):
    """Measured float32 matmul GFLOP/s (best of several timed bursts)."""
    a = tf.random.normal([size, size])
    b = tf.random.normal([size, size])

    @tf.function
    def burst(a, b):
        x = a
        for _ in range(repeats):
            x = tf.matmul(x, b) * 1e-3
        return x

    burst(a, b).numpy()
    best = 0.0
    for _ in range(5):
        start = time.perf_counter()
        burst(a, b).numpy()
        best = max(best, 2 * size ** 3 * repeats / (time.perf_counter() - start) / 1e9)
    return best


def train_flops_per_example(cfg: BertConfig, seq: int, predictions: int) -> float:
    """Matmul FLOPs of one training example (forward x 3)."""
    h, i, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    per_layer = 2 * seq * h * h * 4 + 2 * seq * seq * h * 2 + 2 * seq * h * i * 2
    forward = cfg.num_hidden_layers * per_layer + 2 * h * h + predictions * (2 * h * h + 2 * h * v)
    return 3.0 * forward


def synthetic_batch(cfg: BertConfig, batch: int, seq: int, seed=0):
    rng = np.random.default_rng(seed)
    features = {
        "input_word_ids": rng.integers(1000, cfg.vocab_size, (batch, seq)).astype(np.int32),
        "input_mask": np.ones((batch, seq), np.int32),
        "input_type_ids": (np.arange(seq)[None, :] >= seq // 2).repeat(batch, 0).astype(np.int32),
        "masked_lm_positions": np.sort(np.stack([rng.choice(np.arange(1, seq), PREDICTIONS, False)
                                                 for _ in range(batch)])).astype(np.int32),
    }
    labels = {
        "masked_lm_ids": rng.integers(1000, cfg.vocab_size, (batch, PREDICTIONS)).astype(np.int32),
        "masked_lm_weights": np.ones((batch, PREDICTIONS), np.float32),
        "next_sentence_labels": rng.integers(0, 2, batch).astype(np.int32),
    }
    return features, labels


def time_best(run, repeats):
    run()  # warm-up (tracing, XLA compilation)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def bench_ours(cfg, batch, seq, steps, repeats, jit):
    features, labels = synthetic_batch(cfg, batch, seq)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = BertPretrainer(cfg)
        optimizer = optimization.create_optimizer(1e-4, 10 ** 6, 10 ** 4)
    trainer = Trainer(model, losses.pretraining_loss, optimizer, strategy,
                      output_dir=tempfile.mkdtemp(prefix="bench_"),
                      metrics_fn=losses.pretraining_metrics, label_fn=losses.add_global_mlm_weight,
                      steps_per_loop=steps, save_checkpoints_steps=10 ** 9, jit_compile=jit,
                      handle_sigterm=False, write_summaries=False)
    dataset_fn = lambda ctx: tf.data.Dataset.from_tensors((features, labels)).repeat()
    # One train() call of (repeats + 1) loops; the Trainer times each loop itself (the
    # tf.function call only, not the checkpoint written at the end). Loop 1 traces.
    trainer.train(dataset_fn, batch, (repeats + 1) * steps)
    return max(h["examples_per_second"] for h in trainer.history[1:])


def bench_keras_hub(cfg, batch, seq, steps, repeats, jit):
    import keras_hub

    features, labels = synthetic_batch(cfg, batch, seq)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=cfg.vocab_size, num_layers=cfg.num_hidden_layers,
        num_heads=cfg.num_attention_heads, hidden_dim=cfg.hidden_size,
        intermediate_dim=cfg.intermediate_size, dropout=cfg.hidden_dropout_prob,
        max_sequence_length=cfg.max_position_embeddings)
    mlm_head = keras_hub.layers.MaskedLMHead(token_embedding=backbone.token_embedding,
                                             intermediate_activation="gelu")
    nsp_head = keras.layers.Dense(2)
    inputs = {"token_ids": features["input_word_ids"], "padding_mask": features["input_mask"],
              "segment_ids": features["input_type_ids"]}
    out = backbone(inputs)
    mlm_head(out["sequence_output"], mask_positions=features["masked_lm_positions"])
    nsp_head(out["pooled_output"])
    variables = (backbone.trainable_variables + mlm_head.trainable_variables
                 + nsp_head.trainable_variables)
    optimizer = keras.optimizers.AdamW(1e-4, weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0)
    optimizer.build(variables)
    data = {k: tf.constant(v) for k, v in {**inputs, **labels,
                                           "mask_positions": features["masked_lm_positions"]}.items()}

    @tf.function(jit_compile=jit)
    def step(data):
        with tf.GradientTape() as tape:
            out = backbone({k: data[k] for k in ("token_ids", "padding_mask", "segment_ids")},
                           training=True)
            logits = mlm_head(out["sequence_output"], mask_positions=data["mask_positions"])
            nll = tf.nn.sparse_softmax_cross_entropy_with_logits(data["masked_lm_ids"], logits)
            w = data["masked_lm_weights"]
            loss = tf.reduce_sum(w * nll) / (tf.reduce_sum(w) + 1e-5)
            nsp = nsp_head(out["pooled_output"])
            loss += tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                data["next_sentence_labels"], nsp))
        grads = tape.gradient(loss, variables)
        optimizer.apply(grads, variables)
        return loss

    def run():
        for _ in range(steps):
            loss = step(data)
        loss.numpy()

    return steps * batch / time_best(run, repeats)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert_mini,bert_small")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip_peer", action="store_true")
    args = parser.parse_args()

    peak = matmul_peak()
    print(f"float32 matmul peak (1024^3, best burst): {peak:.1f} GFLOP/s; model FLOPs "
          f"per example: " + ", ".join(
              f"{n} {train_flops_per_example(BertConfig.from_file(os.path.join(REPO, 'official_configs', 'models', n + '.yaml')), args.seq_length, PREDICTIONS) / 1e9:.2f} GFLOP"
              for n in args.models.split(",")), flush=True)
    print(f"load average at start: {os.getloadavg()[0]:.2f} (cores: {os.cpu_count()})",
          flush=True)
    rows = []
    for name in args.models.split(","):
        cfg = BertConfig.from_file(os.path.join(REPO, "official_configs", "models", f"{name}.yaml"))
        flops = train_flops_per_example(cfg, args.seq_length, PREDICTIONS)
        results = {}
        for jit in (False, True):
            runs = [("bert_tf", bench_ours)] + ([] if args.skip_peer else
                                                [("keras-hub", bench_keras_hub)])
            for label, bench in runs:
                label = f"{label}{' +XLA' if jit else ''}"
                eps = bench(cfg, args.batch_size, args.seq_length, args.steps, args.repeats, jit)
                results[label] = eps
                mfu = eps * flops / 1e9 / peak
                rows.append((name, label, eps, mfu))
                print(f"{name:11s} {label:16s} {eps:7.1f} examples/s  MFU {mfu:6.1%} "
                      f"(load {os.getloadavg()[0]:.1f})", flush=True)
        if not args.skip_peer:
            best_ours = max(results["bert_tf"], results["bert_tf +XLA"])
            best_peer = max(results["keras-hub"], results["keras-hub +XLA"])
            print(f"{name}: bert_tf best / keras-hub best = {best_ours / best_peer:.2f}x; "
                  f"same settings without XLA: {results['bert_tf'] / results['keras-hub']:.2f}x",
                  flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
