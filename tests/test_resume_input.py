"""Resuming continues the input stream (docs/contracts.md §6): a run stopped at step N and
started again reads, from step N on, what the uninterrupted run would have read.

* the three training pipelines (pretraining records, task records, in-memory features;
  with and without length buckets; one and two input pipelines) positioned at step K
  give the batches K, K+1, ... of the stream started at 0;
* the Trainer, stopped after K steps and resumed to 2K (one device and MirroredStrategy
  on 2 logical CPUs), sees the same examples, in the same steps, and ends with the
  same weights as a run of 2K steps; a run without a seed keeps the one it drew;
* with dropout: the resumed run draws the uninterrupted run's masks, step by step (a
  new mask every step, micro-batch, replica and layer), and a tiny BERT with hidden and
  attention dropout 0.1 ends with the same weights (one device, with gradient
  accumulation, under XLA, and MirroredStrategy with accumulation);
* a checkpoint of an earlier bert_tf, without the run seed, resumes with a warning;
* `pretrain` and `finetune` end to end, with dropout 0.1 (finetune with gradient
  accumulation): a run resumed from its step-K checkpoint ends with the weights of the
  uninterrupted run.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
import yaml

from bert_tf.data import finetuning as ft_data
from bert_tf.model.encoder import BertEncoder
from bert_tf.layers import ClassificationHead, ReplicaDropout
from bert_tf.data.position import InputPosition
from bert_tf.data.pretraining import pretraining_dataset
from bert_tf.data.records import RecordFiles
from bert_tf.training import optimization
from bert_tf.training.loop import Trainer
from tests.helpers import (SPECIAL_TOKENS, command_env, loop_options, make_model_dir,
                           tiny_config, write_sst2_dir, write_vocab)
from tests.helpers.training import PRED, SEQ, write_records

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Context:
    """What a tf.distribute.InputContext tells a dataset_fn."""

    def __init__(self, pipelines=1, pipeline_id=0, replicas=1):
        self.num_input_pipelines = pipelines
        self.input_pipeline_id = pipeline_id
        self.num_replicas_in_sync = replicas


def _batches(dataset, n, key="input_word_ids"):
    return [x[key].numpy() for x, _ in dataset.take(n)]


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def _features(n=37, seq=12, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, seq + 1, n)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, 50, (n, seq)).astype(np.int32) * mask
    ids[:, 0] = np.arange(n)  # the example's number, to see which rows a batch holds
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids),
            "label_ids": rng.integers(0, 2, n).astype(np.int32),
            "example_id": np.arange(n, dtype=np.int32)}


@pytest.mark.parametrize("buckets", [None, (4, 8, 12)])
@pytest.mark.parametrize("pipelines,replicas", [(1, 1), (1, 2), (2, 2)])
def test_array_dataset_positioned_at_step_k_continues_the_stream(buckets, pipelines,
                                                                  replicas):
    features = _features()
    for pipeline in range(pipelines):
        ctx = _Context(pipelines, pipeline, replicas)
        make = lambda step: ft_data.array_dataset(
            features, ["label_ids"], 4, True, ctx, length_buckets=buckets,
            position=InputPosition(seed=3, step=step))
        per_step = replicas // pipelines
        whole = _batches(make(0), 30 * per_step)
        # 7 steps: inside the 1st epoch; 13 steps: past it (37 rows, 4 per batch).
        for k in (7, 13):
            _assert_same(_batches(make(k), (30 - k) * per_step), whole[k * per_step:])
        # Every epoch holds every row of the pipeline once (nothing replayed).
        if buckets is None and pipelines == 1 and replicas == 1:
            rows = np.concatenate([b[:, 0] for b in whole])
            assert sorted(rows[:36].tolist()) == sorted(set(rows[:36].tolist()))
            assert len(set(rows[:37].tolist()) | set(rows[37:74].tolist())) == 37


def test_another_seed_is_another_order_and_epochs_differ():
    features = _features()
    first = lambda seed: np.concatenate(_batches(ft_data.array_dataset(
        features, ["label_ids"], 1, True, position=InputPosition(seed)), 74))[:, 0]
    a, b = first(1), first(2)
    assert a[:37].tolist() != b[:37].tolist()
    assert a[:37].tolist() != a[37:].tolist()  # each epoch has its own order
    assert sorted(a[:37].tolist()) == sorted(a[37:].tolist()) == list(range(37))


@pytest.fixture(scope="module")
def record_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume_records")
    # 3 files of 13, 20 and 7 records: epochs of 40 records.
    return [write_records(root / f"part-{i}.tfrecord", n, seed=i)
            for i, n in enumerate((13, 20, 7))]


@pytest.mark.parametrize("pipelines", [1, 2, 4])
def test_pretraining_records_positioned_at_step_k_continue_the_stream(record_files,
                                                                      pipelines):
    counts = RecordFiles(record_files).record_counts()
    assert counts == [13, 20, 7]
    for pipeline in range(pipelines):
        ctx = _Context(pipelines, pipeline, pipelines)
        make = lambda step, **kw: pretraining_dataset(
            record_files, SEQ, PRED, 3, True, ctx, shuffle_buffer_size=8,
            position=InputPosition(seed=5, step=step), **kw)
        whole = _batches(make(0), 40)
        for k in (5, 17):  # within the first epoch, and in the 2nd/3rd
            _assert_same(_batches(make(k, records_per_file=counts), 40 - k), whole[k:])
        _assert_same(_batches(make(11), 40 - 11), whole[11:])  # counted here


@pytest.mark.parametrize("buckets", [None, (8, 16)])
def test_task_records_positioned_at_step_k_continue_the_stream(tmp_path, buckets):
    features = _features(n=30, seq=16)
    spec = {"input_word_ids": ([16], "int64"), "input_mask": ([16], "int64"),
            "input_type_ids": ([16], "int64"), "label_ids": ([], "int64")}
    files = []
    for i, rows in enumerate((slice(0, 18), slice(18, 30))):
        files.append(str(tmp_path / f"train-{i}.tf_record"))
        ft_data.write_records(files[-1], {k: v[rows] for k, v in features.items()}, spec)
    for pipelines in (1, 2, 3):  # 3 > 2 files: sharded by record
        for pipeline in range(pipelines):
            ctx = _Context(pipelines, pipeline, pipelines)
            make = lambda step: ft_data.record_dataset(
                files, spec, 2, True, ctx, shuffle_buffer=5, length_buckets=buckets,
                position=InputPosition(seed=9, step=step), records_per_file=[18, 12])
            whole = _batches(make(0), 30)
            _assert_same(_batches(make(12), 18), whole[12:])


# ------------------------------------------------------------- the Trainer
class _BagOfWords(keras.Model):
    """Mean of the token embeddings -> 2 logits; tiny and deterministic."""

    def __init__(self):
        super().__init__(name="bag")
        self.embed = keras.layers.Embedding(64, 8, name="embed")
        self.out = keras.layers.Dense(2, name="out")
        self.embed.build((None, None))
        self.out.build((None, 8))

    def call(self, features, training=None):
        mask = tf.cast(features["input_mask"], tf.float32)[..., None]
        ids = features["input_word_ids"] % 64
        pooled = tf.reduce_sum(self.embed(ids) * mask, 1) / tf.reduce_sum(mask, 1)
        return {"logits": self.out(pooled)}


class _TinyBert(keras.Model):
    """A one-layer BERT encoder -> dropout -> 2 logits, hidden and attention dropout 0.1."""

    def __init__(self):
        super().__init__(name="tiny_bert")
        self.encoder = BertEncoder(tiny_config(vocab_size=64, max_position_embeddings=12,
                                               hidden_dropout_prob=0.1,
                                               attention_probs_dropout_prob=0.1))
        self.head = ClassificationHead(2, 16, dropout_rate=0.1)
        self.head.build()

    def call(self, features, training=None):
        inputs = {k: features[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
        inputs["input_word_ids"] = inputs["input_word_ids"] % 64
        pooled = self.encoder(inputs, training=training)["pooled_output"]
        return {"logits": self.head(pooled, training=training)}


class _MaskProbe(keras.Model):
    """Two dropout layers (rate 0.5) on ones: `masks` gets, at every call of the training
    step, each layer's mask as bits, tagged with the replica that drew it."""

    def __init__(self, masks):
        super().__init__(name="probe")
        self.record = masks.append  # (a list attribute would be Keras's tracked copy)
        self.drops = [ReplicaDropout(0.5, name=f"drop_{i}") for i in range(2)]
        self.out = keras.layers.Dense(2, name="out")
        self.out.build((None, 1))

    def call(self, features, training=None):
        row = tf.cast(features["input_mask"][:, :1], tf.float32)
        if not training:
            return {"logits": self.out(row)}
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        for drop in self.drops:
            mask = tf.cast(drop(tf.ones([64]), training=training) > 0, tf.int32)
            mask = tf.py_function(lambda r, m: self.record(
                (int(r), m.numpy().tobytes())) or m, [replica, mask], tf.int32)
            row += 0.0 * tf.cast(tf.reduce_sum(mask), tf.float32)
        return {"logits": self.out(row)}


def _train(strategy, output_dir, features, num_steps, seen=None, input_seed=7, buckets=None,
           model_fn=_BagOfWords, accumulation=1, jit_compile=False):
    """Builds a fresh model + Trainer on `output_dir` (resuming what is there) and
    trains to `num_steps`; `seen` (unless None) gets the example ids of every training
    batch."""
    keras.utils.set_random_seed(1)  # the same initial weights in every run
    with strategy.scope():
        model = model_fn()
        if not model.built:  # build it: the Trainer needs its variables
            model({k: v[:1] for k, v in features.items()})
        optimizer = optimization.create_optimizer(0.05, num_train_steps=24,
                                                  num_warmup_steps=2)

    def record(ids):
        seen.append(ids.numpy().tolist())
        return ids

    def loss(labels, outputs):
        ce = keras.losses.sparse_categorical_crossentropy(labels["label_ids"],
                                                          outputs["logits"], from_logits=True)
        if seen is None:
            return tf.reduce_mean(ce)
        ids = tf.py_function(record, [labels["example_id"]], tf.int32)
        return tf.reduce_mean(ce) + 0.0 * tf.cast(tf.reduce_sum(ids), tf.float32)

    trainer = Trainer(model, loss, optimizer, strategy, output_dir=str(output_dir),
                      options=loop_options(strategy, steps_per_loop=3, save_checkpoints_steps=100,
                                           write_summaries=False,
                                           gradient_accumulation_steps=accumulation,
                                           jit_compile=jit_compile))
    trainer.resume()

    def dataset_fn(ctx, position):
        return ft_data.array_dataset(features, ["label_ids", "example_id"],
                                     ctx.get_per_replica_batch_size(4), True, ctx,
                                     length_buckets=buckets, position=position)

    trainer.train(dataset_fn, 4, num_steps, input_seed=input_seed)
    return model.get_weights(), int(trainer.input_seed.numpy())


def _strategy(name):
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    return tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())


@pytest.mark.parametrize("strategy_name,buckets,accumulation", [
    ("one_device", None, 1), ("one_device", (4, 8, 12), 1), ("mirrored", None, 1),
    ("one_device", (4, 8, 12), 2)])  # micro-batches of a bucket's length
def test_stopped_and_resumed_trainer_sees_what_the_uninterrupted_one_saw(
        tmp_path, strategy_name, buckets, accumulation):
    strategy = _strategy(strategy_name)
    features = _features()
    whole_seen, parts_seen = [], []
    train = lambda name, steps, seen: _train(strategy, tmp_path / name, features, steps,
                                             seen, buckets=buckets,
                                             accumulation=accumulation)[0]
    whole = train("whole", 24, whole_seen)
    train("parts", 12, parts_seen)
    assert len(parts_seen) == 12 * strategy.num_replicas_in_sync * accumulation
    resumed = train("parts", 24, parts_seen)
    # 2 x 12 steps with a stop between = 24 steps: the same examples in the same steps.
    calls = strategy.num_replicas_in_sync * accumulation  # loss calls a step
    per_step = lambda seen: [sorted(sum(seen[i:i + calls], []))
                             for i in range(0, len(seen), calls)]
    assert per_step(parts_seen) == per_step(whole_seen)
    if buckets is None:  # 96 rows of 37 examples: each seen 2 or 3 times, none skipped
        counts = np.bincount(sum(whole_seen, []), minlength=37)
        assert counts.min() == 2 and counts.max() == 3
    for a, b in zip(whole, resumed):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_drawn_seed_is_kept_in_the_checkpoint(tmp_path):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    features = _features()
    first, rest = [], []
    _, seed = _train(strategy, tmp_path / "run", features, 6, first, input_seed=None)
    _, kept = _train(strategy, tmp_path / "run", features, 12, rest, input_seed=None)
    assert kept == seed >= 0
    again = []
    _train(strategy, tmp_path / "again", features, 12, again, input_seed=seed)
    assert first + rest == again


def test_resumed_dropout_draws_the_uninterrupted_masks(tmp_path):
    """MirroredStrategy, 2 micro-batches a step: each (step, micro-batch, replica, layer)
    its own mask; a run stopped at step 2 and resumed draws, from step 2 on, the masks
    the uninterrupted run drew; another seed, other masks."""
    strategy = _strategy("mirrored")
    features = _features()

    def masks(output_dir, steps, input_seed=7):
        drawn = []
        _train(strategy, output_dir, features, steps, input_seed=input_seed,
               model_fn=lambda: _MaskProbe(drawn), accumulation=2)
        # Each replica's masks, 2 micro-batches x 2 layers a step (as a multiset: the
        # order in which independent ops report is not fixed).
        return {r: sorted(m for rr, m in drawn if rr == r) for r in (0, 1)}

    whole = masks(tmp_path / "whole", 4)
    everything = whole[0] + whole[1]
    assert len(everything) == 2 * 4 * 2 * 2
    assert len(set(everything)) == len(everything)  # a new mask every time
    first, rest = masks(tmp_path / "parts", 2), masks(tmp_path / "parts", 4)
    for replica in (0, 1):
        # Steps 2 and 3 of the resumed run drew the uninterrupted run's masks of steps 2
        # and 3 (all masks differ: none of steps 0 and 1).
        assert sorted(first[replica] + rest[replica]) == whole[replica]
    other = masks(tmp_path / "other", 1, input_seed=8)
    assert not set(other[0]) & set(everything)


@pytest.mark.parametrize("strategy_name,accumulation,jit_compile", [
    ("one_device", 1, False), ("one_device", 2, True), ("mirrored", 2, False)])
def test_stopped_and_resumed_trainer_with_dropout_ends_with_the_uninterrupted_weights(
        tmp_path, strategy_name, accumulation, jit_compile):
    strategy = _strategy(strategy_name)
    features = _features()
    run = lambda name, steps: _train(strategy, tmp_path / name, features, steps,
                                     model_fn=_TinyBert, accumulation=accumulation,
                                     jit_compile=jit_compile)[0]
    whole = run("whole", 8)
    run("parts", 4)
    resumed = run("parts", 8)
    for a, b in zip(whole, resumed):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_a_checkpoint_without_the_run_seed_resumes_with_a_warning(tmp_path, caplog):
    """A checkpoint of an earlier bert_tf (no `input_seed`) resumes at its step, with a
    new seed and a line that says so."""
    strategy = _strategy("one_device")
    features = _features()
    _train(strategy, tmp_path / "run", features, 3)
    keras.utils.set_random_seed(2)
    with strategy.scope():  # the same run, saved without the seed
        model = _BagOfWords()
        optimizer = optimization.create_optimizer(0.05, num_train_steps=24,
                                                  num_warmup_steps=2)
        optimizer.build(model.trainable_variables)
        step = tf.Variable(3, dtype=tf.int64)
    old = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    old.read(str(tmp_path / "run" / "ckpt-3")).expect_partial()
    old.write(str(tmp_path / "old" / "ckpt-3"))
    (tmp_path / "old" / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n')
    assert not any(n.startswith("input_seed/") for n, _ in
                   tf.train.list_variables(str(tmp_path / "old" / "ckpt-3")))
    with caplog.at_level("WARNING"):
        weights, seed = _train(strategy, tmp_path / "old", features, 6, input_seed=11)
    assert "holds no input_seed (an earlier bert_tf wrote it)" in caplog.text
    assert seed == 11
    saved = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path / "old")))
    assert saved.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") == 6
    assert saved.get_tensor("input_seed/.ATTRIBUTES/VARIABLE_VALUE") == 11
    assert not np.allclose(weights[0], model.get_weights()[0])  # trained from step 3 on


# ------------------------------------------------------------ end to end
def _rewind(output_dir, step):
    """The model dir as a run stopped after checkpoint `step` left it."""
    for name in os.listdir(output_dir):
        if name.startswith("ckpt-") and int(name.split("-")[1].split(".")[0]) > step:
            os.remove(os.path.join(output_dir, name))
    with open(os.path.join(output_dir, "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "ckpt-{step}"\n'
                f'all_model_checkpoint_paths: "ckpt-{step}"\n')


def _weights(output_dir):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(output_dir)))
    # Weights and optimizer slots (Keras tracks most weights under the optimizer).
    names = sorted(n for n in reader.get_variable_to_shape_map()
                   if not n.startswith(("save_counter/", "_CHECKPOINT")))
    return {n: reader.get_tensor(n) for n in names}


def _run(command):
    result = subprocess.run(command, cwd=REPO, env=command_env(), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result.stdout + result.stderr


def _assert_resumed_equals_whole(command, out, stop, final):
    _run(command)
    whole = _weights(out)
    _rewind(out, stop)
    log = _run(command)
    assert f"resumed from step {stop} " in log
    assert tf.train.latest_checkpoint(str(out)).endswith(f"ckpt-{final}")
    resumed = _weights(out)
    assert whole.keys() == resumed.keys() and len(whole) > 20
    for name in whole:
        np.testing.assert_allclose(resumed[name], whole[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)


def test_pretrain_resumed_from_step_k_ends_with_the_uninterrupted_weights(tmp_path,
                                                                          record_files):
    config = tmp_path / "bert_config.yaml"
    config.write_text(yaml.safe_dump(dict(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=SEQ, hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1)))
    out = tmp_path / "run"
    # 40 records in 3 files, batch 4: 10 steps an epoch; stop at 6, end at 16.
    command = [sys.executable, "-m", "bert_tf.pretrain", f"--bert_config_file={config}",
               f"--input_file={','.join(record_files)}", f"--output_dir={out}",
               f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PRED}",
               "--do_train", "--train_batch_size=4", "--learning_rate=1e-3",
               "--num_warmup_steps=2", "--num_train_steps=16", "--steps_per_loop=2",
               "--save_checkpoints_steps=6"]
    _assert_resumed_equals_whole(command, out, 6, 16)


def test_finetune_resumed_from_step_k_ends_with_the_uninterrupted_weights(tmp_path):
    words = ["good", "great", "fun", "wonderful", "movie", "film", "acting", "truly", "bad",
             "awful", "terrible", "and", "a", "an"]
    vocab = tmp_path / "vocab.txt"
    write_vocab(vocab, SPECIAL_TOKENS + words)
    make_model_dir(tmp_path / "init", vocab, tiny_config(
        vocab_size=len(SPECIAL_TOKENS) + len(words), hidden_size=32, intermediate_size=64,
        max_position_embeddings=16, hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1))
    data = write_sst2_dir(tmp_path / "sst2", train_repeats=2)
    out = tmp_path / "run"
    command = [sys.executable, "-m", "bert_tf.finetune", "--task_name=SST-2",
               f"--data_dir={data}", f"--init_checkpoint={tmp_path / 'init'}",
               f"--output_dir={out}", "--do_train", "--max_seq_length=16",
               "--train_batch_size=4", "--num_train_steps=14", "--num_warmup_steps=1",
               "--steps_per_loop=2", "--save_checkpoints_steps=5", "--learning_rate=1e-3",
               "--gradient_accumulation_steps=2"]
    _assert_resumed_equals_whole(command, out, 5, 14)
