"""The shared training loop (bert_tf/training/loop.py) in-process.

conftest.py gives two logical CPU devices, so MirroredStrategy has two replicas here.
"""

import logging as py_logging
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.core import constants, output_guard
from bert_tf.model import model_dir
from bert_tf.model.config import BertConfig
from bert_tf.data.pretraining import pretraining_dataset
from bert_tf.model import model_dir
from bert_tf.model.config import BertConfig
from bert_tf.model.encoder import BertEncoder
from bert_tf.model.pretrainer import BertPretrainer
from bert_tf.training import losses, optimization
from bert_tf.training.loop import NonFiniteLossError, Trainer
from bert_tf.training.run import OutputDirRun
from tests.helpers import loop_options
from tests.helpers.training import PRED, SEQ, LinearModel, write_records

CFG = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=SEQ,
                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return write_records(tmp_path_factory.mktemp("records") / "train.tfrecord", 96)


def _pretrainer_trainer(strategy, output_dir, weights=None, num_steps=20, **kwargs):
    with strategy.scope():
        model = BertPretrainer(CFG)
        if weights is not None:
            model.set_weights(weights)
        optimizer = optimization.create_optimizer(1e-3, num_steps, 3)
    trainer = Trainer(model, losses.pretraining_loss_and_metrics, optimizer, strategy,
                      output_dir=str(output_dir),
                      metrics_finalizer=losses.finalize_pretraining_metrics,
                      label_fn=losses.add_global_mlm_weight,
                      checkpoint_items=model.checkpoint_items(),
                      options=loop_options(strategy, **kwargs))
    return model, trainer


def _dataset_fn(records, global_batch):
    def make(ctx):
        # Eval mode = fixed order, so every run sees the same batches; repeat for training.
        return pretraining_dataset(records, SEQ, PRED, ctx.get_per_replica_batch_size(global_batch),
                                   is_training=False, input_context=ctx).repeat()
    return make


def test_mirrored_two_replicas_equal_one_device_for_20_steps(records, tmp_path):
    assert len(tf.config.list_logical_devices("CPU")) >= 2, "conftest should give 2 CPUs"
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    mirrored = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())
    with one.scope():
        weights = BertPretrainer(CFG).get_weights()
    results = []
    for name, strategy in (("one", one), ("mirrored", mirrored)):
        model, trainer = _pretrainer_trainer(strategy, tmp_path / name, weights,
                                             steps_per_loop=1, save_checkpoints_steps=100)
        trainer.train(_dataset_fn(records, 8), global_batch_size=8, num_steps=20)
        results.append(([h["loss"] for h in trainer.history], model.get_weights(),
                        [h["masked_lm_accuracy"] for h in trainer.history]))
    (loss_a, w_a, acc_a), (loss_b, w_b, acc_b) = results
    assert len(loss_a) == len(loss_b) == 20
    np.testing.assert_allclose(loss_b, loss_a, rtol=1e-5)
    np.testing.assert_allclose(acc_b, acc_a, rtol=1e-5)
    assert loss_a[-1] < loss_a[0]  # it learns
    for a, b in zip(w_a, w_b):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def test_gradient_accumulation_equals_the_full_batch_update(records, tmp_path):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        weights = BertPretrainer(CFG).get_weights()
    finals = []
    for accumulation in (1, 2):
        model, trainer = _pretrainer_trainer(strategy, tmp_path / str(accumulation), weights,
                                             gradient_accumulation_steps=accumulation,
                                             steps_per_loop=3)
        trainer.train(_dataset_fn(records, 8), global_batch_size=8, num_steps=3)
        finals.append((trainer.history[-1]["loss"], model.get_weights()))
    assert finals[1][0] == pytest.approx(finals[0][0], rel=1e-5)
    for a, b in zip(finals[0][1], finals[1][1]):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def test_step_function_traces_once_with_static_shapes_and_checkpoints_on_boundaries(
        records, tmp_path):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    _, trainer = _pretrainer_trainer(strategy, tmp_path, steps_per_loop=3,
                                     save_checkpoints_steps=4, keep_checkpoint_max=2)
    result = trainer.train(_dataset_fn(records, 4), global_batch_size=4, num_steps=9)
    assert result["status"] == "finished" and result["step"] == 9
    assert trainer.train_loop_traces == 1  # loops of 3, 1 (to the save at 4), 3, 1, 1
    assert [h["step"] for h in trainer.history] == [3, 4, 7, 8, 9]
    names = sorted(p for p in os.listdir(tmp_path) if p.endswith(".index"))
    assert names == ["ckpt-8.index", "ckpt-9.index"]  # kept the last 2
    for key in ("loss", "masked_lm_accuracy", "next_sentence_accuracy", "learning_rate",
                "examples_per_second", "tokens_per_second", "perplexity"):
        assert key in result
    assert os.listdir(tmp_path / "train")  # TensorBoard event file


def test_non_static_dataset_is_refused(records, tmp_path):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    _, trainer = _pretrainer_trainer(strategy, tmp_path)

    def partial_batches(ctx):
        return pretraining_dataset(records, SEQ, PRED, 4, False, ctx).unbatch().batch(5)

    with pytest.raises(ValueError, match="drop_remainder=True"):
        trainer.train(partial_batches, global_batch_size=4, num_steps=2)


def test_resume_restores_model_optimizer_and_step(records, tmp_path, caplog):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    model, trainer = _pretrainer_trainer(strategy, tmp_path, steps_per_loop=2,
                                         save_checkpoints_steps=2)
    assert trainer.resume() is None
    trainer.train(_dataset_fn(records, 4), global_batch_size=4, num_steps=4)
    saved = model.get_weights()
    iterations = int(trainer.optimizer.iterations.numpy())
    model2, trainer2 = _pretrainer_trainer(strategy, tmp_path)
    caplog.set_level(py_logging.INFO, logger="absl")  # parsed absl flags may have set WARNING
    assert trainer2.resume() == 4
    assert "resumed from step 4" in caplog.text
    assert int(trainer2.optimizer.iterations.numpy()) == iterations == 4
    for a, b in zip(saved, model2.get_weights()):
        np.testing.assert_array_equal(a, b)
    m_slot = trainer2.optimizer._m[0].numpy()
    assert np.any(m_slot != 0)


def _start(trainer, initialize) -> int:
    """The step a run in the trainer's output_dir starts at (`OutputDirRun.start`, no
    --overwrite): resumed, else from `initialize()`'s start point."""
    return OutputDirRun("pretrain", trainer.output_dir, overwrite=False).start(
        lambda: trainer, initialize)[1]


def test_init_checkpoint_with_wrong_shapes_is_refused_naming_variable_and_shapes(tmp_path):
    other = CFG.replace(intermediate_size=48)
    source = str(tmp_path / "source")
    model_dir.write_model_dir(source, other, {"encoder": BertEncoder(other)})
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    model, trainer = _pretrainer_trainer(strategy, tmp_path / "run")
    with pytest.raises(model_dir.CheckpointMismatchError, match=r"intermediate.*48.*64|64.*48"):
        _start(trainer, lambda: model_dir.restore_start_point(
            model_dir.resolve(source), {"encoder": model.encoder}))


def test_init_checkpoint_loads_encoder_and_logs_fresh_start(tmp_path, caplog):
    source = str(tmp_path / "source")
    encoder = BertEncoder(CFG)
    model_dir.write_model_dir(source, CFG, {"encoder": encoder})
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    model, trainer = _pretrainer_trainer(strategy, tmp_path / "run")
    caplog.set_level(py_logging.INFO, logger="absl")  # parsed absl flags may have set WARNING
    assert _start(trainer, lambda: model_dir.restore_start_point(
        model_dir.resolve(source), model.checkpoint_items(),
        optional=constants.PRETRAINING_HEADS)) == 0
    assert "started fresh at step 0 from init_checkpoint" in caplog.text
    assert "(encoder)" in caplog.text  # the source has no heads: none restored
    np.testing.assert_array_equal(model.encoder.word_embeddings.numpy(),
                                  encoder.word_embeddings.numpy())


def test_start_point_is_restored_once_and_never_by_a_resumed_run(records, tmp_path,
                                                                 monkeypatch):
    """A run's start calls the start point only when output_dir holds nothing to
    resume: a fresh run reads --init_checkpoint (encoder, then the heads it has), a
    resumed run neither calls it nor reads the checkpoint."""
    source = str(tmp_path / "source")
    model_dir.write_model_dir(source, CFG, BertPretrainer(CFG).checkpoint_items())
    prefix = model_dir.resolve_checkpoint(source)
    reads, calls = [], []
    read = tf.train.Checkpoint.read
    monkeypatch.setattr(tf.train.Checkpoint, "read",
                        lambda self, path, **kw: reads.append(str(path)) or read(self, path, **kw))

    def start_point(model):
        def initialize():
            calls.append(model)
            return model_dir.restore_start_point(model_dir.resolve(source),
                                                 model.checkpoint_items(),
                                                 optional=constants.PRETRAINING_HEADS)
        return initialize

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    model, trainer = _pretrainer_trainer(strategy, tmp_path / "run", steps_per_loop=2,
                                         save_checkpoints_steps=2)
    assert _start(trainer, start_point(model)) == 0
    assert calls == [model] and reads == [prefix, prefix]  # encoder, then both heads
    trainer.train(_dataset_fn(records, 4), global_batch_size=4, num_steps=2)
    reads.clear()
    model2, trainer2 = _pretrainer_trainer(strategy, tmp_path / "run")
    assert _start(trainer2, start_point(model2)) == 2
    assert calls == [model] and prefix not in reads


def test_an_overwrite_restores_the_start_point_before_setting_the_earlier_run_aside(
        records, tmp_path):
    """A run replacing an earlier one (--overwrite) restores its start point first: one
    that fails leaves the earlier run in place, untouched; then the earlier run is set
    aside (never resumed) and the new Trainer starts at step 0 in the emptied dir."""
    out = tmp_path / "run"
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    _, earlier = _pretrainer_trainer(strategy, out, steps_per_loop=2,
                                     save_checkpoints_steps=2)
    earlier.train(_dataset_fn(records, 4), global_batch_size=4, num_steps=2)
    output_guard.mark(str(out), "pretrain")
    before = sorted(os.listdir(out))
    replacing = OutputDirRun("pretrain", str(out), overwrite=True)
    replacing.replace = True  # what `check` decides for a mismatching earlier run

    other = CFG.replace(intermediate_size=48)
    source = str(tmp_path / "source")
    model_dir.write_model_dir(source, other, {"encoder": BertEncoder(other)})

    def unfitting_start_point():
        return model_dir.restore_start_point(model_dir.resolve(source),
                                             {"encoder": BertPretrainer(CFG).encoder})

    with pytest.raises(model_dir.CheckpointMismatchError):
        replacing.start(lambda: pytest.fail("no Trainer before the start point"),
                        unfitting_start_point)
    assert sorted(os.listdir(out)) == before
    trainer, step = replacing.start(lambda: _pretrainer_trainer(strategy, out)[1],
                                    lambda: None)
    assert step == 0 and int(trainer.step.numpy()) == 0 and os.listdir(out) == []
    replacing.close()  # failed before its record: the earlier run is put back
    assert sorted(os.listdir(out)) == before


def test_nan_loss_stops_at_the_loop_end_naming_that_step_without_saving(tmp_path):
    x = np.ones((12, 2), np.float32)
    x[4] = np.nan  # global batch size 2: the 3rd step sees it
    y = np.ones((12, 1), np.float32)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = LinearModel()
        optimizer = optimization.create_optimizer(0.1, 10)
    trainer = Trainer(model, lambda l, o: tf.reduce_mean((o["y"] - l["y"]) ** 2), optimizer,
                      strategy, output_dir=str(tmp_path),
                      options=loop_options(strategy, steps_per_loop=4,
                                           save_checkpoints_steps=2))
    dataset_fn = lambda ctx: tf.data.Dataset.from_tensor_slices(
        ({"x": x}, {"y": y})).batch(2, drop_remainder=True)
    with pytest.raises(NonFiniteLossError, match=r"loss is nan at step 3; stopped without "
                                                 r"saving.*ckpt-2"):
        trainer.train(dataset_fn, global_batch_size=2, num_steps=10)
    # The check runs at the end of the 4-step loop (no host read per step); step 3 is
    # named, and nothing after step 2 was saved.
    assert int(trainer.step.numpy()) == 4
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")
    assert not any(p.startswith("ckpt-3") or p.startswith("ckpt-4") for p in os.listdir(tmp_path))


def test_mixed_float16_with_dynamic_loss_scaling_trains(records, tmp_path):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        with strategy.scope():
            model = BertPretrainer(CFG)
            optimizer = optimization.create_optimizer(1e-3, 4, mixed_precision="mixed_float16")
        assert model.encoder.compute_dtype == "float16"
        trainer = Trainer(model, losses.pretraining_loss, optimizer, strategy,
                          output_dir=str(tmp_path), label_fn=losses.add_global_mlm_weight,
                          options=loop_options(strategy, steps_per_loop=4))
        result = trainer.train(_dataset_fn(records, 4), global_batch_size=4, num_steps=4)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert np.isfinite(result["loss"])
    assert float(optimizer.dynamic_scale.numpy()) > 0
    assert int(optimizer.iterations.numpy()) >= 1


def test_evaluate_writes_eval_results_json(records, tmp_path):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    _, trainer = _pretrainer_trainer(strategy, tmp_path)
    results = trainer.evaluate(
        lambda ctx: pretraining_dataset(records, SEQ, PRED, 8, False, ctx), num_steps=3)
    import json
    stored = json.loads((tmp_path / "eval_results.json").read_text())
    assert stored["eval_steps"] == 3 and stored["global_step"] == 0
    for key in ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
                "next_sentence_loss", "perplexity", "loss"):
        assert stored[key] == pytest.approx(results[key])
    assert 0 <= stored["masked_lm_accuracy"] <= 1


def test_sigterm_handler_is_only_installed_while_training(records, tmp_path):
    import signal

    def previous(*_):
        raise AssertionError("not called")

    old = signal.signal(signal.SIGTERM, previous)
    try:
        _, trainer = _pretrainer_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), tmp_path,
                                         steps_per_loop=2)
        trainer._preemption.handle_sigterm = True
        seen = []
        original = trainer._train

        def spy(*args):
            seen.append(signal.getsignal(signal.SIGTERM))
            return original(*args)

        trainer._train = spy
        trainer.train(_dataset_fn(records, 8), global_batch_size=8, num_steps=2)
        assert seen and seen[0] is not previous  # the preemption handler while training
        assert signal.getsignal(signal.SIGTERM) is previous  # restored afterwards
    finally:
        signal.signal(signal.SIGTERM, old)


def test_input_options_fetch_to_device_only_for_accelerators():
    """CPU replicas read batches where they are; GPUs/TPUs keep TF's prefetch to device."""
    import types

    from bert_tf.training import strategy as strategy_lib

    cpus = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    for strategy in (tf.distribute.OneDeviceStrategy("/cpu:0"),
                     tf.distribute.MirroredStrategy(cpus)):
        assert not strategy_lib.input_options(strategy).experimental_fetch_to_device
    gpu = types.SimpleNamespace(extended=types.SimpleNamespace(
        worker_devices=("/job:localhost/replica:0/task:0/device:GPU:0",
                        "/job:localhost/replica:0/task:0/device:GPU:1")))
    assert strategy_lib.input_options(gpu).experimental_fetch_to_device
