"""`python -m bert_tf.pretrain` end to end: config files, kill -9 + resume, SIGTERM,
two workers on loopback. The CLI runs in subprocesses (tiny model, tiny records)."""

import json
import os
import signal
import subprocess

import tensorflow as tf

from tests.helpers import REPO, command_env, wait_all
from tests.helpers.training import (SEQ, TIMEOUT, free_ports, latest_step, logged_start,
                                    pretrain_command, wait_for, write_records)


def test_kill_9_then_the_same_command_resumes_from_the_last_checkpoint(pretrain_inputs,
                                                                       tmp_path):
    out = tmp_path / "run"
    command = pretrain_command(pretrain_inputs, out, "--num_train_steps=30",
                               "--save_checkpoints_steps=2")
    first = logged_start(command, tmp_path / "first.log")
    wait_for(lambda: latest_step(out) >= 4, first, "checkpoint 4")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    killed_at = latest_step(out)
    assert killed_at < 30, "the run finished before it could be killed"
    second = subprocess.run(command, env=command_env(), cwd=REPO, capture_output=True,
                            text=True, timeout=TIMEOUT)
    log = second.stdout + second.stderr
    assert second.returncode == 0, log[-3000:]
    assert f"resumed from step {killed_at} " in log
    assert latest_step(out) == 30
    # The output dir is a model dir: config + checkpoint with the named children.
    assert (out / "bert_config.json").exists()
    names = {n.split("/")[0] for n, _ in tf.train.list_variables(str(out / "ckpt-30"))}
    assert {"encoder", "masked_lm", "next_sentence", "optimizer", "step"} <= names


def test_sigterm_saves_a_checkpoint_and_exits_143(pretrain_inputs, tmp_path):
    out = tmp_path / "run"
    log_path = tmp_path / "run.log"
    process = logged_start(pretrain_command(pretrain_inputs, out, "--num_train_steps=100000",
                                            "--save_checkpoints_steps=100000"), log_path)
    wait_for(lambda: "step 3:" in log_path.read_text(), process, "step 3")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=TIMEOUT) == 143
    log = log_path.read_text()
    assert "SIGTERM: saved checkpoint" in log
    assert latest_step(out) >= 3


def test_two_workers_on_loopback_train_and_write_one_checkpoint(pretrain_inputs, tmp_path):
    out = tmp_path / "run"
    workers = [f"127.0.0.1:{p}" for p in free_ports(2)]
    # Eval files of different sizes, one per worker: worker 0 has 6 batches of 4, worker 1
    # has 2; worker 1 takes part with empty batches until worker 0's data ends (no hang).
    eval_files = [write_records(tmp_path / "eval_a.tfrecord", 24),
                  write_records(tmp_path / "eval_b.tfrecord", 8)]
    command = pretrain_command(pretrain_inputs, out,
                               "--distribution_strategy=multi_worker_mirrored",
                               "--train_batch_size=8", "--num_train_steps=4",
                               "--save_checkpoints_steps=4", "--steps_per_loop=2", "--do_eval",
                               f"--eval_input_file={','.join(map(str, eval_files))}",
                               "--eval_batch_size=8")
    processes = []
    for index in range(2):
        tf_config = json.dumps({"cluster": {"worker": workers},
                                "task": {"type": "worker", "index": index}})
        processes.append(logged_start(command, tmp_path / f"worker{index}.log",
                                      TF_CONFIG=tf_config))
    codes = wait_all(processes, TIMEOUT)
    logs = [(tmp_path / f"worker{i}.log").read_text() for i in range(2)]
    assert codes == [0, 0], "\n".join(log[-2000:] for log in logs)
    assert "step 4:" in logs[0]
    assert sorted(p for p in os.listdir(out) if p.endswith(".index")) == ["ckpt-4.index"]
    assert latest_step(out) == 4
    results = json.loads((out / "eval_results.json").read_text())
    assert results["eval_steps"] == 6 and results["global_step"] == 4


def test_a_dir_of_another_run_is_refused_and_phase_2_says_what_it_does(pretrain_inputs,
                                                                        tmp_path):
    """docs/contracts.md §6: an --output_dir holding another run is refused before anything there is
    written (one line naming the setting); the paper's phase 2 in phase 1's dir continues
    its step count at the new length, and says so."""
    import hashlib

    out = tmp_path / "phase1"
    first = subprocess.run(pretrain_command(pretrain_inputs, out, "--num_train_steps=2"),
                           env=command_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert first.returncode == 0, first.stderr[-3000:]

    def digests():
        return {name: hashlib.sha256((out / name).read_bytes()).hexdigest()
                for name in os.listdir(out) if (out / name).is_file()}

    before = digests()
    # The schedule is the optimizer's too: a resume at another learning rate is refused.
    for flag, message in (("--optimizer=lamb", "optimizer adamw; this run has lamb"),
                          ("--learning_rate=2e-3", "learning_rate 0.001; this run has 0.002")):
        refused = subprocess.run(pretrain_command(pretrain_inputs, out, "--num_train_steps=4",
                                                  flag),
                                 env=command_env(), capture_output=True, text=True,
                                 timeout=TIMEOUT)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert message in refused.stderr
        assert digests() == before
    done = subprocess.run(pretrain_command(pretrain_inputs, out, "--num_train_steps=2",
                                           f"--max_seq_length={SEQ // 2}"),
                          env=command_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 1 and "nothing to train at the new" in done.stderr
    assert digests() == before
