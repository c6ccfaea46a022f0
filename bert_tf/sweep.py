r"""The paper's fine-tuning grid: one finetune run per point, the best dev score wins.

BERT's paper picks, per task, the best of learning rate {5e-5, 3e-5, 2e-5} x epochs
{2, 3, 4} x batch {16, 32} on dev, because small datasets are sensitive to them:

    python -m bert_tf.sweep --task_name=MRPC --data_dir=glue/MRPC \
        --init_checkpoint=converted_base/ --output_dir=out/mrpc_sweep \
        --learning_rates=5e-5,3e-5,2e-5 --epochs=2,3,4 --batch_sizes=16,32 \
        --finetune_flags="--max_seq_length=128"

Each point runs `python -m bert_tf.finetune --do_train --do_eval` in its own process and
output dir (OUTPUT_DIR/lr2e-05_ep3_bs32/); a point whose eval_results.json exists is not
run again, so an interrupted sweep continues where it stopped. The summary goes to
OUTPUT_DIR/sweep_results.json (every point + the best) and sweep_results.tsv, ranked by
the task's primary metric (MRPC f1, CoLA matthews_corr, STS-B pearson, SQuAD f1, ...)
unless --metric names another.

SIGTERM and SIGINT sent to the sweep are passed on to the running point (which runs in
its own process group, so a terminal's Ctrl-C reaches it once, through the sweep): the
point saves its checkpoint and exits 143/130, and the sweep stops with the same code;
the same command resumes that point from its checkpoint.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from typing import Dict, List, Optional, Sequence

from absl import app, flags, logging

from bert_tf.app import cli  # first: quiets TensorFlow before anything loads it
from bert_tf import tasks
from bert_tf.app import setting_fields, settings
from bert_tf.app.setting_fields import setting
from bert_tf.core import output_guard
from bert_tf.core.errors import BertTfError, Preempted

PAPER_LEARNING_RATES = (5e-5, 3e-5, 2e-5)
PAPER_EPOCHS = (2, 3, 4)
PAPER_BATCH_SIZES = (16, 32)


def grid(learning_rates: Sequence[float] = PAPER_LEARNING_RATES,
         epochs: Sequence[float] = PAPER_EPOCHS,
         batch_sizes: Sequence[int] = PAPER_BATCH_SIZES) -> List[Dict]:
    """Every combination, in a fixed order (learning rate, then epochs, then batch).

    >>> len(grid()), grid()[0]
    (18, {'learning_rate': 5e-05, 'num_train_epochs': 2, 'train_batch_size': 16})
    """
    return [{"learning_rate": lr, "num_train_epochs": ep, "train_batch_size": bs}
            for lr, ep, bs in itertools.product(learning_rates, epochs, batch_sizes)]


def point_name(point: Dict) -> str:
    """The point's output subdirectory name.

    >>> point_name({"learning_rate": 2e-5, "num_train_epochs": 3, "train_batch_size": 32})
    'lr2e-05_ep3_bs32'
    """
    return (f"lr{point['learning_rate']:g}_ep{point['num_train_epochs']:g}"
            f"_bs{point['train_batch_size']}")


def finetune_command(point: Dict, output_dir: str, common: Sequence[str],
                     python: str = sys.executable) -> List[str]:
    return ([python, "-m", "bert_tf.finetune", "--do_train", "--do_eval",
             f"--output_dir={output_dir}"] + list(common)
            + [f"--{k}={v}" for k, v in point.items()])


POINTS_FILE = "sweep_points.json"  # point name -> the finetune flags its dir was made with


class SweepError(BertTfError, ValueError):
    """A sweep that cannot go on as asked; says which directory or flag."""


def _read_points(path: str) -> Dict[str, List[str]]:
    try:
        with open(path) as f:
            value = json.load(f)
    except FileNotFoundError:
        return {}
    except ValueError:
        raise SweepError(f"{path}: not valid JSON; move it away to start the sweep over")
    return value if isinstance(value, dict) else {}


def pick_best(results: Sequence[Dict], metric: str) -> Optional[Dict]:
    """The result with the highest `metric` (the first of equals); None if none has it."""
    scored = [r for r in results if isinstance(r.get("metrics", {}).get(metric), (int, float))]
    return max(scored, key=lambda r: r["metrics"][metric]) if scored else None


def run_forwarding_signals(command: Sequence[str]) -> subprocess.CompletedProcess:
    """Runs `command` in its own process group and waits for it, passing SIGTERM and
    SIGINT on to it (it then saves its checkpoint and exits 143 / 130)."""
    child = subprocess.Popen(list(command), start_new_session=True)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        def forward(number, _frame):
            logging.warning("%s: passing it on to the running point (pid %d)",
                            signal.Signals(number).name, child.pid)
            child.send_signal(number)
        previous = {number: signal.signal(number, forward)
                    for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = child.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return subprocess.CompletedProcess(list(command), code)


def run_sweep(points: Sequence[Dict], output_dir: str, common: Sequence[str], metric: str,
              runner=run_forwarding_signals) -> Dict:
    """Runs (or reuses) every point and writes the summary; returns it.

    A point is reused only when its eval_results.json exists (finetune writes it whole)
    and `POINTS_FILE` records the same finetune flags for it (checkpoint, data and every flag
    passed through); a point dir made with other flags is refused (one line), never
    silently reused or retrained over. A point stopped by SIGTERM/SIGINT (exit 143/130)
    stops the sweep with errors.Preempted (same code). --output_dir is locked for the
    whole sweep (one writer)."""
    with output_guard.locked(output_dir, flag="--output_dir"):
        return _run_sweep(points, output_dir, common, metric, runner)


def _run_sweep(points: Sequence[Dict], output_dir: str, common: Sequence[str], metric: str,
               runner) -> Dict:
    """`run_sweep` inside the lock."""
    results = []
    output_guard.claim_output_dir(output_dir, "sweep", flag="--output_dir")
    record_file = os.path.join(output_dir, POINTS_FILE)
    records = _read_points(record_file)
    for point in points:
        directory = os.path.join(output_dir, point_name(point))
        results_file = os.path.join(directory, "eval_results.json")
        flags_used = list(common) + [f"--{k}={v}" for k, v in point.items()]
        recorded = records.get(point_name(point))
        if recorded is not None and recorded != flags_used:
            raise SweepError(
                f"{directory} was made with other finetune flags ({shlex.join(recorded)}); "
                f"choose another --output_dir for this sweep")
        if recorded is None and os.path.exists(directory):
            raise SweepError(f"{directory} exists but records no sweep point; choose another "
                             f"--output_dir for this sweep")
        if recorded is None or not os.path.exists(results_file):
            records[point_name(point)] = flags_used
            output_guard.write_json(record_file, records)
            command = finetune_command(point, directory, common)
            logging.info("sweep point %s: %s", point_name(point), shlex.join(command))
            completed = runner(command)
            if completed.returncode in (128 + signal.SIGTERM, 128 + signal.SIGINT):
                raise Preempted(f"sweep stopped during point {point_name(point)} (exit "
                                f"{completed.returncode}): its checkpoint is written and the "
                                f"same command resumes it", exit_code=completed.returncode)
            if completed.returncode != 0:
                logging.error("point %s failed (exit %d)", point_name(point),
                              completed.returncode)
                results.append({"point": point, "name": point_name(point),
                                "error": f"exit {completed.returncode}"})
                continue
        with open(results_file) as f:
            results.append({"point": point, "name": point_name(point),
                            "metrics": json.load(f)})
    best = pick_best(results, metric)
    summary = {"metric": metric, "best": best, "results": results}
    output_guard.write_json(os.path.join(output_dir, "sweep_results.json"), summary,
                            sort_keys=False)
    lines = [f"point\tlearning_rate\tnum_train_epochs\ttrain_batch_size\t{metric}\n"]
    ranked = sorted(results, key=lambda r: -r.get("metrics", {}).get(metric, float("-inf")))
    for r in ranked:
        value = r.get("metrics", {}).get(metric, r.get("error", ""))
        p = r["point"]
        lines.append(f"{r['name']}\t{p['learning_rate']:g}\t{p['num_train_epochs']:g}\t"
                     f"{p['train_batch_size']}\t{value}\n")
    output_guard.write_text(os.path.join(output_dir, "sweep_results.tsv"), "".join(lines))
    if best:
        logging.info("best %s = %.4f at %s", metric, best["metrics"][metric], best["name"])
    return summary


FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepConfig(setting_fields.Settings):
    """One sweep (what the flags say): the grid, and what every point passes to finetune."""
    task_name: Optional[str] = setting_fields.override(settings.TaskSettings, "task_name",
                                                 help="The task (as bert_tf.finetune).")
    output_dir: Optional[str] = setting(None, "One subdirectory per point, plus the summary.")
    learning_rates: List[str] = setting([str(v) for v in PAPER_LEARNING_RATES],
                                        "Learning rates.")
    epochs: List[str] = setting([str(v) for v in PAPER_EPOCHS], "Numbers of epochs.")
    batch_sizes: List[str] = setting([str(v) for v in PAPER_BATCH_SIZES], "Train batch sizes.")
    metric: Optional[str] = setting(None, "Metric to rank by; default the task's primary "
                                    "metric.")
    data_dir: Optional[str] = setting_fields.override(settings.TaskSettings, "data_dir",
                                                help="Passed to finetune.")
    init_checkpoint: Optional[str] = setting_fields.override(
        settings.ModelDirSettings, "init_checkpoint", help="Passed to finetune.")
    finetune_flags: str = setting("", "More finetune flags, e.g. \"--max_seq_length=128 "
                                  "--vocab_file=...\".")


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defined when the command runs (not on import: no collision with other CLIs)."""
    SweepConfig.define_flags(flag_values)


def main(argv):
    del argv  # cli.run_main refuses positional arguments

    config = SweepConfig.from_flags(FLAGS)
    if not config.task_name or not config.output_dir:
        raise app.UsageError("pass --task_name and --output_dir")
    metric = config.metric or tasks.make_task(config.task_name).primary_metric
    common = [f"--task_name={config.task_name}"]
    common += [f"--{k}={getattr(config, k)}" for k in ("data_dir", "init_checkpoint")
               if getattr(config, k)]
    extra = shlex.split(config.finetune_flags)
    for flag in extra:  # the sweep owns where each point goes and what it does
        name = flag.lstrip("-").split("=", 1)[0]
        if name in ("output_dir", "overwrite", "nooverwrite"):
            raise SweepError(f"--finetune_flags sets --{name}: the sweep writes each point "
                             f"to --output_dir/<point>; pass --output_dir to the sweep itself")
    common += extra
    points = grid([float(v) for v in config.learning_rates],
                  [float(v) for v in config.epochs], [int(v) for v in config.batch_sizes])
    summary = run_sweep(points, config.output_dir, common, metric)
    if summary["best"] is None:
        raise SystemExit("sweep: no point finished; see the logs above")
    print(json.dumps({"best": summary["best"]["name"],
                      metric: summary["best"]["metrics"][metric]}))


if __name__ == "__main__":
    cli.run_main(main, define_flags)
