"""bert_tf.sweep: the paper's grid, one finetune command per point, reuse of finished
points, failures recorded, the best dev score picked (with a stand-in runner); SIGTERM and
SIGINT to the sweep reach the running point, and stop the sweep with its exit code."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import pytest

from bert_tf import sweep
from bert_tf.core.errors import Preempted


def test_grid_is_the_papers():
    points = sweep.grid()
    assert len(points) == 18
    assert {p["learning_rate"] for p in points} == {5e-5, 3e-5, 2e-5}
    assert {p["num_train_epochs"] for p in points} == {2, 3, 4}
    assert {p["train_batch_size"] for p in points} == {16, 32}
    assert sweep.grid([2e-5], [3], [32]) == [
        {"learning_rate": 2e-5, "num_train_epochs": 3, "train_batch_size": 32}]
    assert len({sweep.point_name(p) for p in points}) == 18


def test_run_sweep_picks_the_best_and_reuses_finished_points(tmp_path):
    calls = []
    scores = {"lr5e-05_ep2_bs16": 0.80, "lr3e-05_ep2_bs16": 0.86, "lr2e-05_ep2_bs16": None}

    def runner(command):
        calls.append(command)
        out = next(a.split("=", 1)[1] for a in command if a.startswith("--output_dir="))
        score = scores[os.path.basename(out)]
        if score is None:
            return subprocess.CompletedProcess(command, 1)
        os.makedirs(out)
        with open(os.path.join(out, "eval_results.json"), "w") as f:
            json.dump({"f1": score, "accuracy": 0.5}, f)
        return subprocess.CompletedProcess(command, 0)

    points = sweep.grid([5e-5, 3e-5, 2e-5], [2], [16])
    common = ["--task_name=MRPC", "--data_dir=/data/MRPC"]
    summary = sweep.run_sweep(points, str(tmp_path), common, "f1", runner=runner)
    assert summary["best"]["name"] == "lr3e-05_ep2_bs16"
    assert summary["best"]["metrics"]["f1"] == 0.86
    assert summary["results"][2]["error"] == "exit 1"
    first = calls[0]
    assert first[1:3] == ["-m", "bert_tf.finetune"]
    assert {"--do_train", "--do_eval", "--task_name=MRPC", "--learning_rate=5e-05",
            "--num_train_epochs=2", "--train_batch_size=16"} <= set(first)
    tsv = (tmp_path / "sweep_results.tsv").read_text().splitlines()
    assert tsv[0].split("\t")[-1] == "f1"
    assert tsv[1].startswith("lr3e-05_ep2_bs16\t3e-05\t2\t16\t0.86")
    assert json.loads((tmp_path / "sweep_results.json").read_text())["metric"] == "f1"

    # a second sweep reruns only the failed point
    calls.clear()
    scores["lr2e-05_ep2_bs16"] = 0.9
    summary = sweep.run_sweep(points, str(tmp_path), common, "f1", runner=runner)
    assert len(calls) == 1 and summary["best"]["name"] == "lr2e-05_ep2_bs16"

    # a sweep with other flags into the same dir is refused, not mixed with these points
    with pytest.raises(sweep.SweepError, match="other finetune flags"):
        sweep.run_sweep(points, str(tmp_path), common + ["--max_seq_length=64"], "f1",
                        runner=runner)
    # a finished point is reused only with its eval_results.json
    os.remove(tmp_path / "lr5e-05_ep2_bs16" / "eval_results.json")
    calls.clear()
    import shutil
    shutil.rmtree(tmp_path / "lr5e-05_ep2_bs16")
    sweep.run_sweep(points, str(tmp_path), common, "f1", runner=runner)
    assert len(calls) == 1 and "--learning_rate=5e-05" in calls[0]


def test_pick_best_ignores_missing_metrics():
    assert sweep.pick_best([{"metrics": {"f1": 0.1}}, {"error": "exit 1"}], "accuracy") is None
    assert sweep.pick_best([{"metrics": {"f1": 0.3}}, {"metrics": {"f1": 0.3}}],
                           "f1") is not None


_CHILD = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
print("ready", flush=True)
time.sleep(120)
sys.exit(0)
"""


@pytest.mark.parametrize("number,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signals_to_the_sweep_reach_the_running_point_and_stop_the_sweep(tmp_path, number,
                                                                         code):
    ready = tmp_path / "ready"
    child = [sys.executable, "-c", _CHILD.replace('print("ready", flush=True)',
                                                  f'open({str(ready)!r}, "w").close()')]

    def send_when_ready():
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # polling for the child's start, not a wait for an outcome
        os.kill(os.getpid(), number)

    runner = lambda command: sweep.run_forwarding_signals(child)
    previous = signal.getsignal(number)
    thread = threading.Thread(target=send_when_ready)
    thread.start()
    points = sweep.grid([5e-5, 3e-5], [2], [16])
    with pytest.raises(Preempted, match="during point lr5e-05_ep2_bs16") as stopped:
        sweep.run_sweep(points, str(tmp_path / "sweep"), [], "f1", runner=runner)
    thread.join()
    assert stopped.value.exit_code == code
    assert signal.getsignal(number) is previous  # the sweep's handlers are gone
