"""Training where BERT is trained, checked on this CPU-only machine:

* the TPU strategy from our flags and the original ones (`--tpu=local`, `--use_tpu
  --tpu_name=...`), with the resolver / initializer / strategy injected (no TPU here);
* dropout masks differ per replica under MirroredStrategy (conftest gives 2 CPUs);
* mixed float16 + gradient accumulation on 2 replicas: a step the loss scaler skips
  does not make the learning-rate schedule lag the step counter;
* evaluation where one replica's data ends first (empty batches count with weight 0);
* two workers on 127.0.0.1 (TF_CONFIG, subprocesses): SIGTERM to one mid-block makes both
  save the same step, a restart resumes it, and evaluation + prediction of the fine-tuned
  GLUE model gather all workers' rows: the same metrics and predictions as one device,
  written once.
"""

import json
import os
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from absl.testing import flagsaver

from bert_tf.app import settings
from bert_tf.model.config import BertConfig
from bert_tf.model.encoder import BertEncoder
from bert_tf.model.pretrainer import BertPretrainer
from bert_tf.training import losses, optimization
from bert_tf.training.loop import Trainer
from tests.helpers import (SPECIAL_TOKENS, command_env, loop_options, make_model_dir,
                           tiny_config, wait_all, write_sst2_dir, write_vocab)
from tests.helpers.training import (PRED, SEQ, FakeTpu, LinearModel, free_ports, wait_for,
                                    write_records)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 300


def _mirrored():
    assert len(tf.config.list_logical_devices("CPU")) >= 2, "conftest should give 2 CPUs"
    return tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())


# ------------------------------------------------------------------ TPU flags
def _strategy_for(argv):
    """TrainingSettings.make_strategy (what pretrain and finetune call) on the real shared
    flags."""
    settings.TrainingSettings.define_flags()
    fake = FakeTpu()
    flag_values = flags.FLAGS
    flag_values.unparse_flags()
    flag_values(["prog", *argv])
    strategy = settings.TrainingSettings.from_flags(flag_values).make_strategy(
        **fake.factories())
    return strategy, fake.calls, flag_values


@flagsaver.flagsaver
def test_tpu_local_builds_the_tpu_vm_resolver():
    for argv in (["--distribution_strategy=tpu", "--tpu=local"],
                 ["--distribution_strategy=tpu"]):
        strategy, calls, _ = _strategy_for(argv)
        assert calls[0] == ("resolver", {"tpu": "local", "zone": None, "project": None})
        assert calls[1] == ("initialize", False)  # the VM's own TPU: no remote connect
        assert calls[2] == ("strategy", None)
        assert strategy.resolver.tpu == "local"


@flagsaver.flagsaver
def test_original_tpu_flags_build_the_named_resolver():
    strategy, calls, fv = _strategy_for([
        "--use_tpu", "--tpu_name=my-tpu", "--tpu_zone=us-central1-f",
        "--gcp_project=my-project", "--iterations_per_loop=1000"])
    assert calls[0] == ("resolver", {"tpu": "my-tpu", "zone": "us-central1-f",
                                     "project": "my-project"})
    assert calls[1] == ("initialize", True)  # a named TPU: connect to its workers
    assert fv.distribution_strategy == "tpu" and fv.tpu == "my-tpu"
    assert fv.steps_per_loop == 1000
    # --master (a grpc address) when there is no --tpu_name, as the original's RunConfig.
    _, calls, _ = _strategy_for(["--use_tpu", "--master=grpc://10.0.0.2:8470"])
    assert calls[0][1]["tpu"] == "grpc://10.0.0.2:8470"
    # Without --use_tpu the original flags leave the strategy alone (as the original).
    strategy, calls, fv = _strategy_for(["--tpu_name=my-tpu", "--num_tpu_cores=8"])
    assert calls == [] and fv.distribution_strategy == "one_device"
    assert isinstance(strategy, tf.distribute.OneDeviceStrategy)


@flagsaver.flagsaver
def test_contradicting_tpu_flags_are_refused():
    with pytest.raises(flags.ValidationError, match="--use_tpu contradicts "
                                                     "--distribution_strategy=mirrored"):
        _strategy_for(["--use_tpu", "--distribution_strategy=mirrored"])
    with pytest.raises(flags.ValidationError, match="--iterations_per_loop=10 contradicts "
                                                     "--steps_per_loop=20"):
        _strategy_for(["--use_tpu", "--iterations_per_loop=10", "--steps_per_loop=20"])
    with pytest.raises(flags.ValidationError, match="--tpu=a contradicts --tpu_name=b"):
        _strategy_for(["--use_tpu", "--tpu=a", "--tpu_name=b"])
    with pytest.raises(ValueError, match="--num_tpu_cores=16: the TPU local has 8 cores"):
        _strategy_for(["--use_tpu", "--num_tpu_cores=16"])


# -------------------------------------------------------------------- dropout
DROPOUT_CFG = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=64,
                         max_position_embeddings=16, hidden_dropout_prob=0.1,
                         attention_probs_dropout_prob=0.1)


def _per_replica(strategy, fn):
    return [np.asarray(t) for t in
            strategy.experimental_local_results(tf.function(lambda: strategy.run(fn))())]


def test_replicas_draw_different_dropout_masks():
    strategy = _mirrored()
    keras.utils.set_random_seed(3)
    inputs = {"input_word_ids": tf.constant(np.arange(32).reshape(2, 16) % 100, tf.int32),
              "input_mask": tf.ones([2, 16], tf.int32),
              "input_type_ids": tf.zeros([2, 16], tf.int32)}
    with strategy.scope():
        encoder = BertEncoder(DROPOUT_CFG)
        encoder(inputs)
        plain = keras.layers.Dropout(0.5)
    # The same input on both replicas: with training=False the outputs agree ...
    same = _per_replica(strategy, lambda: encoder(inputs, training=False)["sequence_output"])
    np.testing.assert_allclose(same[0], same[1], rtol=1e-6)
    # ... with dropout on they differ (each replica its own masks), call after call.
    for _ in range(2):
        a, b = _per_replica(strategy, lambda: encoder(inputs, training=True)["sequence_output"])
        assert not np.allclose(a, b)
    masks = _per_replica(strategy, lambda: encoder.embeddings.dropout(
        tf.ones([64, 32]), training=True))
    assert not np.array_equal(masks[0] == 0, masks[1] == 0)
    for mask in masks:
        assert 0.05 < np.mean(mask == 0) < 0.15  # the configured rate, 0.1
    # Why the layer exists: Keras's own Dropout draws the same mask on every replica.
    keras_masks = _per_replica(strategy, lambda: plain(tf.ones([64, 32]), training=True))
    np.testing.assert_array_equal(keras_masks[0], keras_masks[1])


# ------------------------------------------------------------ float16 schedule
def test_mirrored_float16_accumulation_skipped_step_keeps_the_schedule(tmp_path):
    records = write_records(tmp_path / "train.tfrecord", 64)
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=SEQ)
    strategy = _mirrored()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        with strategy.scope():
            model = BertPretrainer(cfg)
            optimizer = optimization.create_optimizer(
                1e-3, num_train_steps=20, num_warmup_steps=10, mixed_precision="mixed_float16")
        trainer = Trainer(model, losses.pretraining_loss_and_metrics, optimizer, strategy,
                          output_dir=str(tmp_path / "run"),
                          label_fn=losses.add_global_mlm_weight,
                          options=loop_options(strategy, steps_per_loop=3,
                                               gradient_accumulation_steps=2),
                          checkpoint_items=model.checkpoint_items())
        # A loss scale float16 gradients overflow at: the first steps are skipped.
        optimizer.dynamic_scale.assign(2.0 ** 22)
        from bert_tf.data.pretraining import pretraining_dataset

        result = trainer.train(
            lambda ctx: pretraining_dataset(records, SEQ, PRED,
                                            ctx.get_per_replica_batch_size(8), False, ctx
                                            ).repeat(),
            global_batch_size=8, num_steps=6)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    skipped = round(np.log2(2.0 ** 22 / float(optimizer.dynamic_scale.numpy())))
    assert 1 <= skipped < 6, skipped  # some steps were skipped, some applied
    assert int(trainer.step.numpy()) == 6
    assert int(optimizer.iterations.numpy()) == 6  # the schedule's step is the step
    schedule = optimizer.learning_rate_schedule
    assert result["learning_rate"] == pytest.approx(float(schedule(6)))
    assert np.isfinite(result["loss"])
    # The skipped steps left the weights alone, the others moved them (not all skipped).
    assert any(np.any(np.asarray(v) != 0) for v in optimizer.inner_optimizer._m)


# ------------------------------------------------ evaluation with uneven data
def test_evaluate_counts_the_empty_batch_of_a_replica_whose_data_ended(tmp_path):
    x = np.arange(18, dtype=np.float32).reshape(9, 2) / 10
    y = np.ones((9, 1), np.float32)
    loss_fn = lambda labels, outputs: tf.reduce_mean((outputs["y"] - labels["y"]) ** 2)
    metrics_fn = lambda labels, outputs: {
        "close": (tf.reduce_sum(tf.cast(tf.abs(outputs["y"] - labels["y"]) < 0.5, tf.float32)),
                  tf.cast(tf.shape(labels["y"])[0], tf.float32))}
    results = []
    for name, strategy in (("one", tf.distribute.OneDeviceStrategy("/cpu:0")),
                           ("two", _mirrored())):
        with strategy.scope():
            model = LinearModel()
            model.dense.kernel.assign([[0.5], [0.5]])
            optimizer = optimization.create_optimizer(0.1, 10)
        trainer = Trainer(model, loss_fn, optimizer, strategy, output_dir=str(tmp_path / name),
                          metrics_fn=metrics_fn, options=loop_options(strategy))
        # 9 rows in per-replica batches of 2: the last step has 1 row for replica 0 and
        # none for replica 1.
        results.append(trainer.evaluate(lambda ctx: tf.data.Dataset.from_tensor_slices(
            ({"x": x}, {"y": y})).batch(ctx.get_per_replica_batch_size(
                2 * strategy.num_replicas_in_sync))))
    one, two = results
    expected = np.mean((x.sum(axis=1) * 0.5 - 1.0) ** 2)
    assert one["loss"] == pytest.approx(expected, rel=1e-5)
    assert two["loss"] == pytest.approx(expected, rel=1e-5)
    assert two["close"] == pytest.approx(one["close"])
    assert two["eval_steps"] == 3


# ------------------------------------------------ fewer record files than workers
def test_task_records_are_sharded_by_record_when_files_are_fewer_than_workers(tmp_path):
    from bert_tf.data.finetuning import record_dataset, write_records as write_task_records

    spec = {"input_word_ids": ([4], "int64"), "input_mask": ([4], "int64"),
            "input_type_ids": ([4], "int64"), "label_ids": ([], "int64")}
    rows = np.arange(10)
    features = {"input_word_ids": np.stack([rows] * 4, axis=1), "input_mask": np.ones((10, 4)),
                "input_type_ids": np.zeros((10, 4)), "label_ids": rows}
    one_file = str(tmp_path / "train.tf_record")
    write_task_records(one_file, features, spec)
    seen = []
    for worker in range(3):
        context = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=worker)
        labels = [int(v) for _, y in record_dataset(one_file, spec, 1, False, context)
                  for v in y["label_ids"].numpy()]
        assert labels, f"worker {worker} got no data"
        seen += labels
    assert sorted(seen) == list(range(10))  # every record once, over all workers


# ---------------------------------------- two workers: preemption, eval, predict
WORDS = ["good", "great", "fun", "wonderful", "movie", "film", "acting", "truly", "bad",
         "awful", "terrible", "and", "a", "an"]


@pytest.fixture(scope="module")
def glue_workspace(tmp_path_factory):
    """A tiny random encoder dir with its own vocab, SST-2-format data, ONE record file."""
    from bert_tf.data.finetuning import write_records as write_task_records
    from bert_tf.tasks.glue import Sst2Task
    from bert_tf.text.tokenization import BertTokenizer

    root = tmp_path_factory.mktemp("distributed_glue")
    vocab = root / "vocab.txt"
    write_vocab(vocab, SPECIAL_TOKENS + WORDS)
    make_model_dir(root / "init", vocab, tiny_config(
        vocab_size=5 + len(WORDS), hidden_size=32, intermediate_size=64,
        max_position_embeddings=16))
    data = write_sst2_dir(root / "sst2", train_repeats=4)
    task = Sst2Task(tokenizer=BertTokenizer(str(vocab), do_lower_case=True),
                    max_seq_length=16, data_dir=data)
    features = task.convert_examples(task.get_examples("train"), "train")
    # One record file for two workers: they must shard it by record.
    assert write_task_records(str(root / "train.tf_record"), features, task.feature_spec()) == 48
    return root


def _finetune(root, output_dir, *extra):
    return [sys.executable, "-m", "bert_tf.finetune", "--task_name=SST-2",
            f"--data_dir={root / 'sst2'}", f"--output_dir={output_dir}",
            "--max_seq_length=16", "--eval_batch_size=5", "--predict_batch_size=4",
            "--train_batch_size=8", "--num_warmup_steps=0", *extra]


def _start_workers(command, logs):
    hosts = [f"127.0.0.1:{p}" for p in free_ports(2)]
    processes = []
    for index, log in enumerate(logs):
        tf_config = json.dumps({"cluster": {"worker": hosts},
                                "task": {"type": "worker", "index": index}})
        processes.append(subprocess.Popen(command, stdout=open(log, "w"),
                                          stderr=subprocess.STDOUT, cwd=REPO,
                                          env=command_env(TF_CONFIG=tf_config)))
    return processes


def _wait_all(processes, logs):
    return wait_all(processes, TIMEOUT), [log.read_text() for log in logs]


def test_two_workers_preempted_resume_and_evaluate_like_one_device(glue_workspace, tmp_path):
    root = glue_workspace
    out = tmp_path / "two_workers"
    strategy_flag = "--distribution_strategy=multi_worker_mirrored"
    # 1. Train in 1000-step blocks; SIGTERM to worker 1 once training has started
    # ("training from step" is logged inside Trainer.train, where the preemption watcher
    # holds the signal; the command's earlier "training SST-2" line comes before it).
    logs = [tmp_path / f"train{i}.log" for i in range(2)]
    processes = _start_workers(_finetune(
        root, out, strategy_flag, f"--init_checkpoint={root / 'init'}", "--do_train",
        f"--input_file={root / 'train.tf_record'}", "--num_train_steps=100000",
        "--steps_per_loop=1000", "--save_checkpoints_steps=100000", "--learning_rate=1e-3",
        "--optimizer=adamw"),
        logs)
    wait_for(lambda: "training from step" in logs[1].read_text(), processes[1], "training")
    processes[1].send_signal(signal.SIGTERM)
    codes, texts = _wait_all(processes, logs)
    assert codes == [143, 143], "\n".join(t[-3000:] for t in texts)
    saved = [int(t.split("SIGTERM: saved checkpoint")[1].split(" at step ")[1].split(";")[0])
             for t in texts]
    step = saved[0]
    assert saved == [step, step], saved  # both workers stopped after the same step
    assert 0 < step < 1000  # inside the block, not at its end
    assert tf.train.latest_checkpoint(str(out)).endswith(f"ckpt-{step}")

    # 2. The same command (a few more steps: a resume may change how long to train, not
    # the learning rate) resumes both, then evaluates and predicts.
    # (60 steps at 1e-3: the resumed run continues the data instead of replaying its first
    # batches, and 30 steps at 5e-3 from step 1 left the tiny model at chance. The original
    # uncorrected optimizer: its larger first updates get the tiny model off one class in
    # these few steps, which the bias-corrected default does not.)
    logs = [tmp_path / f"resume{i}.log" for i in range(2)]
    processes = _start_workers(_finetune(
        root, out, strategy_flag, f"--init_checkpoint={root / 'init'}", "--do_train",
        "--do_eval", "--do_predict", f"--input_file={root / 'train.tf_record'}",
        f"--num_train_steps={step + 60}", "--steps_per_loop=10", "--learning_rate=1e-3",
        "--optimizer=adamw"),
        logs)
    codes, texts = _wait_all(processes, logs)
    assert codes == [0, 0], "\n".join(t[-3000:] for t in texts)
    for text in texts:
        assert f"resumed from step {step} " in text
    # Written once: by the chief only.
    assert "wrote " in texts[0] and "wrote " not in texts[1]
    two_results = json.loads((out / "eval_results.json").read_text())
    assert two_results["global_step"] == step + 60 and two_results["eval_examples"] == 12

    # 3. One device evaluates and predicts with the same weights.
    one = tmp_path / "one_device"
    result = subprocess.run(_finetune(root, one, f"--init_checkpoint={out}", "--do_eval",
                                      "--do_predict"),
                            cwd=REPO, env=command_env(), capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    one_results = json.loads((one / "eval_results.json").read_text())
    assert two_results["accuracy"] == one_results["accuracy"]
    assert two_results["eval_loss"] == pytest.approx(one_results["eval_loss"], rel=1e-5)
    assert (out / "SST-2.tsv").read_text() == (one / "SST-2.tsv").read_text()
    assert len((out / "SST-2.tsv").read_text().splitlines()) == 6  # header + 5 rows
    two_eval = (out / "eval_predictions" / "SST-2.tsv").read_text()
    assert two_eval == (one / "eval_predictions" / "SST-2.tsv").read_text()
    assert len(set(line.split("\t")[1] for line in two_eval.splitlines()[1:])) == 2, (
        "a model predicting one class would not show the rows' order")
