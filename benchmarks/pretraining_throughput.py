"""Pretraining throughput: bert_tf's Trainer vs keras-hub's BertBackbone + MaskedLMHead.

Question: how many training examples/s does one pretraining step (masked LM with 20
predictions + next sentence, forward + backward + AdamW update with global-norm
clipping) reach on this machine, against keras-hub doing the same step in the same
process, and what fraction of the measured float32 matmul peak is that (model-FLOPs
utilisation, MFU)?

    PYTHONPATH=. KERAS_BACKEND=tensorflow .venv/bin/python benchmarks/pretraining_throughput.py \
        [--models=bert_mini,bert_small] [--batch_size=32] [--seq_length=128] \
        [--steps=10] [--repeats=3] [--skip_peer] [--profile_dir=DIR] \
        [--precisions=float32,mixed_bfloat16]

Both sides get the same synthetic batch (random ids, full-length sequences, 20 masked
positions), so no input pipeline is measured. Ours runs through `Trainer.train` (the
loop the CLI uses) with `steps_per_loop=--steps`, with and without XLA (`jit_compile`),
timed by the Trainer itself (the loop's tf.function call only). keras-hub runs a
`tf.function` step of BertBackbone + MaskedLMHead (tied embeddings) + a Dense NSP head on
the pooled output with `keras.optimizers.AdamW(global_clipnorm=1)`, with and without
`jit_compile`. `--precisions` adds the same four under another Keras dtype policy
(`mixed_bfloat16`: bfloat16 matmuls, float32 variables, as `pretrain
--mixed_precision=mixed_bfloat16`), passed to both sides' models; the bfloat16 lines
also print their speed against float32 (the CPU's bf16 units: AVX512-BF16, AMX).

The machine may be shared, so the four contestants of a model (ours, keras-hub, each
with and without XLA) are built first and then timed in alternation, --repeats rounds of
one --steps-step run each, after a warm-up round (tracing, XLA compilation); each number
is the best round (the least disturbed one). The matmul peak is measured the same way:
1024^3 float32 bursts at the start of every round, the best burst counting. When the
load average exceeds the core count, a warning says that the figures (and the peak) are
depressed. Model FLOPs count the matmuls of a training step (3x forward): per layer
QKV/output projections, attention scores and context, feed-forward; pooler; the masked-LM
transform and vocabulary projection at the 20 positions.

With --profile_dir, one more --steps run of ours and of keras-hub (no XLA) is traced
with the TF profiler after the timing, and the kernel time per step is printed by phase
(forward, backward, update) and op type (benchmarks/op_profile.py).
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
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import op_profile  # noqa: E402
import tensorflow as tf  # noqa: E402

from bert_tf.app.settings import TrainingSettings  # noqa: E402
from bert_tf.model.config import BertConfig  # noqa: E402
from bert_tf.model.pretrainer import BertPretrainer  # noqa: E402
from bert_tf.training import losses, optimization  # noqa: E402
from bert_tf.training.loop import Trainer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREDICTIONS = 20


class MatmulPeak:
    """Float32 matmul GFLOP/s: `measure()` times bursts, `best` is the best so far."""

    def __init__(self, size=1024, repeats=20):
        self.size, self.repeats, self.best = size, repeats, 0.0
        a = tf.random.normal([size, size])
        b = tf.random.normal([size, size]) / size ** 0.5

        @tf.function
        def burst():
            x = a
            for _ in range(repeats):
                x = tf.matmul(x, b)
            return tf.reduce_sum(x)

        self._burst = burst
        burst().numpy()  # trace

    def measure(self, tries=3):
        for _ in range(tries):
            start = time.perf_counter()
            self._burst().numpy()
            seconds = time.perf_counter() - start
            self.best = max(self.best, 2 * self.size ** 3 * self.repeats / seconds / 1e9)
        return self.best


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


def make_ours(cfg, batch, seq, steps, jit, precision="float32"):
    """A function running one more `steps`-step loop of `Trainer.train`; returns ex/s."""
    features, labels = synthetic_batch(cfg, batch, seq)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = BertPretrainer(cfg, dtype=precision)
        optimizer = optimization.create_optimizer(1e-4, 10 ** 6, 10 ** 4)
    trainer = Trainer(model, losses.pretraining_loss_and_metrics, optimizer, strategy,
                      output_dir=tempfile.mkdtemp(prefix="bench_"),
                      label_fn=losses.add_global_mlm_weight,
                      options=TrainingSettings(
                          steps_per_loop=steps, save_checkpoints_steps=10 ** 9,
                          jit_compile=jit, keep_checkpoint_max=1).loop_options(
                          strategy, handle_sigterm=False, write_summaries=False))
    dataset_fn = lambda ctx: tf.data.Dataset.from_tensors((features, labels)).repeat()

    def run():
        # Each call trains `steps` more steps as one loop; the Trainer times the loop's
        # tf.function call itself (not the checkpoint train() writes when it returns).
        trainer.train(dataset_fn, batch, int(trainer.step.numpy()) + steps)
        if trainer.train_loop_traces != 1:
            raise RuntimeError(f"the train loop was traced {trainer.train_loop_traces} times")
        return trainer.history[-1]["examples_per_second"]

    return run


def make_keras_hub(cfg, batch, seq, steps, jit, precision="float32"):
    """A function running `steps` keras-hub training steps; returns ex/s."""
    import keras_hub

    features, labels = synthetic_batch(cfg, batch, seq)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=cfg.vocab_size, num_layers=cfg.num_hidden_layers,
        num_heads=cfg.num_attention_heads, hidden_dim=cfg.hidden_size,
        intermediate_dim=cfg.intermediate_size, dropout=cfg.hidden_dropout_prob,
        max_sequence_length=cfg.max_position_embeddings, dtype=precision)
    mlm_head = keras_hub.layers.MaskedLMHead(token_embedding=backbone.token_embedding,
                                             intermediate_activation="gelu", dtype=precision)
    nsp_head = keras.layers.Dense(2, dtype=precision)
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
            nll = tf.nn.sparse_softmax_cross_entropy_with_logits(
                data["masked_lm_ids"], tf.cast(logits, tf.float32))
            w = data["masked_lm_weights"]
            loss = tf.reduce_sum(w * nll) / (tf.reduce_sum(w) + 1e-5)
            nsp = nsp_head(out["pooled_output"])
            loss += tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                data["next_sentence_labels"], tf.cast(nsp, tf.float32)))
        grads = tape.gradient(loss, variables)
        optimizer.apply(grads, variables)
        return loss

    def run():
        start = time.perf_counter()
        for _ in range(steps):
            loss = step(data)
        loss.numpy()
        return steps * batch / (time.perf_counter() - start)

    return run


def loaded(cores=os.cpu_count()):
    """(1-minute load average, whether it exceeds the core count)."""
    load = os.getloadavg()[0]
    return load, load > cores


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert_mini,bert_small")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip_peer", action="store_true")
    parser.add_argument("--precisions", default="float32",
                        help="comma-separated Keras dtype policies: float32, mixed_bfloat16")
    parser.add_argument("--profile_dir", default=None,
                        help="trace one more run of ours and keras-hub (no XLA) here and "
                             "print where the step's time goes")
    args = parser.parse_args()

    names = args.models.split(",")
    configs = {n: BertConfig.from_file(os.path.join(REPO, "official_configs", "models",
                                                    f"{n}.yaml")) for n in names}
    flops = {n: train_flops_per_example(configs[n], args.seq_length, PREDICTIONS)
             for n in names}
    print("model FLOPs per training example: " + ", ".join(
        f"{n} {flops[n] / 1e9:.2f} GFLOP" for n in names), flush=True)
    peak = MatmulPeak()
    load, busy = loaded()
    print(f"load average at start: {load:.2f} (cores: {os.cpu_count()})", flush=True)
    if busy:
        print("WARNING: the machine is busy (load average above the core count): "
              "throughput and the matmul peak are both depressed, and the ratios noisy",
              flush=True)
    for name in names:
        cfg = configs[name]
        contestants = {}
        precisions = args.precisions.split(",")
        tags = {p: "" if p == "float32" else " " + p.replace("mixed_", "") for p in precisions}
        for precision, tag in tags.items():
            for jit in (False, True):
                suffix = tag + (" +XLA" if jit else "")
                contestants["bert_tf" + suffix] = make_ours(
                    cfg, args.batch_size, args.seq_length, args.steps, jit, precision)
                if not args.skip_peer:
                    contestants["keras-hub" + suffix] = make_keras_hub(
                        cfg, args.batch_size, args.seq_length, args.steps, jit, precision)
        for run in contestants.values():
            run()  # warm-up: tracing, XLA compilation
        results = {label: 0.0 for label in contestants}
        for _ in range(args.repeats):
            peak.measure()
            for label, run in contestants.items():
                results[label] = max(results[label], run())
        peak.measure()
        load, busy = loaded()
        for label, eps in results.items():
            mfu = eps * flops[name] / 1e9 / peak.best
            print(f"{name:11s} {label:22s} {eps:7.1f} examples/s  MFU {mfu:6.1%} "
                  f"(of the float32 {peak.best:.0f} GFLOP/s; load {load:.1f})", flush=True)
        if busy:
            print(f"WARNING: load average {load:.1f} > {os.cpu_count()} cores during "
                  f"{name}: figures depressed", flush=True)

        def best(label):  # with or without XLA, whichever was faster
            return max(results[label], results[label + " +XLA"])

        for precision, tag in tags.items():
            if not args.skip_peer:
                ours, peer = "bert_tf" + tag, "keras-hub" + tag
                print(f"{name} {precision}: bert_tf best / keras-hub best = "
                      f"{best(ours) / best(peer):.2f}x; without XLA: "
                      f"{results[ours] / results[peer]:.2f}x; with XLA: "
                      f"{results[ours + ' +XLA'] / results[peer + ' +XLA']:.2f}x", flush=True)
            if tag and "float32" in tags:
                sides = ["bert_tf"] + ([] if args.skip_peer else ["keras-hub"])
                print(f"{name} {precision} / float32, best of each: " + "; ".join(
                    f"{side} {best(side + tag) / best(side):.2f}x" for side in sides),
                    flush=True)
        if args.profile_dir:
            for label in ("bert_tf", "keras-hub"):
                if label not in contestants:
                    continue
                logdir = os.path.join(args.profile_dir, name, label.replace("-", "_"))
                with op_profile.trace(logdir) as timing:
                    contestants[label]()
                print(f"--- {name} {label}: where one step's time goes ({args.steps} steps "
                      f"traced)\n" + op_profile.table(op_profile.read(logdir), args.steps,
                                                      timing["wall_s"]), flush=True)
    print(f"best float32 matmul peak (1024^3 bursts): {peak.best:.1f} GFLOP/s; "
          f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
