"""Stop requests honoured outside the step loop too, `python -m bert_tf.pretrain`
in subprocesses (tiny model, tiny records):

* SIGINT (Ctrl-C) during training saves a checkpoint and exits 130;
* SIGTERM during the held-out evaluation (--eval_every_steps) ends it after the running
  batch, saves and exits 143;
* two workers on 127.0.0.1 (multi_worker_mirrored): SIGTERM to one worker during the
  held-out evaluation, then during the first trace/compile of the training loop, makes
  both save the same step and exit 143; workers that resumed from different steps
  (node-local --output_dir) both stop at once naming the worker that differs.
"""

import json
import signal
import time

import tensorflow as tf

from tests.helpers import wait_all
from tests.helpers.training import (TIMEOUT, free_ports, latest_step, logged_start,
                                    pretrain_command, wait_for, write_records)

# What docs/distributed_training.md promises once the request arrives, with room for this
# shared 2-core machine: the running eval batch or step, and a checkpoint write.
BOUND_SECONDS = 60


def _stop_and_wait(process, number):
    start = time.monotonic()
    process.send_signal(number)
    code = process.wait(timeout=TIMEOUT)
    return code, time.monotonic() - start


def test_sigint_during_training_saves_a_checkpoint_and_exits_130(pretrain_inputs, tmp_path):
    out = tmp_path / "run"
    log_path = tmp_path / "run.log"
    process = logged_start(pretrain_command(pretrain_inputs, out, "--num_train_steps=100000",
                                            "--save_checkpoints_steps=100000",
                                            "--steps_per_loop=1000"),
                           log_path)
    wait_for(lambda: "training from step 0" in log_path.read_text(), process, "training")
    time.sleep(1)  # let a few steps of the 1000-step block run (not a wait for an outcome)
    code, seconds = _stop_and_wait(process, signal.SIGINT)
    log = log_path.read_text()
    assert code == 130, log[-3000:]
    assert "SIGINT: saved checkpoint" in log and "Traceback" not in log
    assert 0 < latest_step(out) < 1000 and seconds < BOUND_SECONDS


def test_sigterm_during_the_held_out_evaluation_saves_and_exits_143(pretrain_inputs, tmp_path):
    out = tmp_path / "run"
    log_path = tmp_path / "run.log"
    held_out = write_records(tmp_path / "held_out.tfrecord", 3000)
    process = logged_start(pretrain_command(pretrain_inputs, out, "--num_train_steps=20",
                                            "--eval_every_steps=10",
                                            f"--eval_input_file={held_out}",
                                            "--eval_batch_size=1", "--max_eval_steps=3000"),
                           log_path)
    wait_for(lambda: "held-out evaluation at step 0" in log_path.read_text(), process,
             "the held-out evaluation")
    code, seconds = _stop_and_wait(process, signal.SIGTERM)
    log = log_path.read_text()
    assert code == 143, log[-3000:]
    assert "(during the held-out evaluation)" in log and "eval at step 0" not in log
    assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-0")
    assert seconds < BOUND_SECONDS


def _workers(commands, logs):
    hosts = [f"127.0.0.1:{p}" for p in free_ports(2)]
    processes = []
    for index, (command, log) in enumerate(zip(commands, logs)):
        tf_config = json.dumps({"cluster": {"worker": hosts},
                                "task": {"type": "worker", "index": index}})
        processes.append(logged_start(command, log, TF_CONFIG=tf_config))
    return processes


def _saved_steps(texts):
    return [int(t.split("SIGTERM: saved checkpoint")[1].split(" at step ")[1].split(" ")[0]
                .rstrip(";")) for t in texts]


def test_two_workers_stop_together_during_eval_and_first_compile(pretrain_inputs, tmp_path):
    out = tmp_path / "run"
    held_out = [write_records(tmp_path / f"held_out_{i}.tfrecord", 1500, seed=i)
                for i in range(2)]
    base = ["--distribution_strategy=multi_worker_mirrored", "--train_batch_size=8",
            "--num_train_steps=100000", "--save_checkpoints_steps=100000",
            "--steps_per_loop=1000"]
    # 1. SIGTERM to worker 1 during the held-out evaluation at step 0.
    logs = [tmp_path / f"eval{i}.log" for i in range(2)]
    command = pretrain_command(pretrain_inputs, out, *base, "--eval_every_steps=50000",
                               f"--eval_input_file={','.join(held_out)}", "--eval_batch_size=2",
                               "--max_eval_steps=1500")
    processes = _workers([command, command], logs)
    wait_for(lambda: "held-out evaluation at step 0" in logs[1].read_text(), processes[1],
             "the held-out evaluation")
    processes[1].send_signal(signal.SIGTERM)
    codes = wait_all(processes, TIMEOUT)
    texts = [log.read_text() for log in logs]
    assert codes == [143, 143], "\n".join(t[-3000:] for t in texts)
    assert all("(during the held-out evaluation)" in t for t in texts)
    assert _saved_steps(texts) == [0, 0]
    assert latest_step(out) == 0 and tf.train.latest_checkpoint(str(out))

    # 2. Restarted without the held-out curve: SIGTERM to worker 1 while the training
    # loop is traced; both stop after its first step.
    logs = [tmp_path / f"compile{i}.log" for i in range(2)]
    command = pretrain_command(pretrain_inputs, out, *base)
    processes = _workers([command, command], logs)
    wait_for(lambda: "training from step 0" in logs[1].read_text(), processes[1],
             "the first trace")
    processes[1].send_signal(signal.SIGTERM)
    codes = wait_all(processes, TIMEOUT)
    texts = [log.read_text() for log in logs]
    assert codes == [143, 143], "\n".join(t[-3000:] for t in texts)
    assert all("resumed from step 0 " in t for t in texts)
    steps = _saved_steps(texts)
    assert steps[0] == steps[1] and 1 <= steps[0] < 1000, steps
    assert latest_step(out) == steps[0]

    # 3. Worker 1 on a node-local dir of its own: it resumes at 0, the chief at steps[0].
    logs = [tmp_path / f"mismatch{i}.log" for i in range(2)]
    local = pretrain_command(pretrain_inputs, tmp_path / "local", *base)
    processes = _workers([command, local], logs)
    codes = wait_all(processes, TIMEOUT)
    texts = [log.read_text() for log in logs]
    assert codes == [1, 1], "\n".join(t[-3000:] for t in texts)
    for text in texts:
        assert (f"workers resumed from different steps: worker 1 at step 0, the chief "
                f"(worker 0) at step {steps[0]}") in text, text[-3000:]
        assert "Traceback" not in text
