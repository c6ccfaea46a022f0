"""official_configs/finetuning/*.yaml: every key is a finetune flag, every task known,
and --config_file values yield to flags given on the command line."""

import pathlib
import re

import pytest
import yaml

from bert_tf import tasks

REPO = pathlib.Path(__file__).resolve().parent.parent
CONFIGS = sorted((REPO / "official_configs" / "finetuning").glob("*.yaml"))
FLAG_NAMES = set(re.findall(r'flags\.DEFINE_\w+\(\s*"(\w+)"',
                            (REPO / "bert_tf" / "finetune.py").read_text()))


def test_there_is_a_config_per_task():
    names = {tasks.canonical_task_name(yaml.safe_load(p.read_text())["task_name"])
             for p in CONFIGS}
    assert names >= {"cola", "sst-2", "mrpc", "sts-b", "qqp", "mnli", "qnli", "rte", "wnli",
                     "conll2003", "swag", "squad"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_keys_are_finetune_flags(path):
    values = yaml.safe_load(path.read_text())
    assert set(values) <= FLAG_NAMES, set(values) - FLAG_NAMES
    assert isinstance(values["learning_rate"], float)  # "2e-5" without a dot is a YAML string
    assert values["learning_rate"] in (5e-5, 4e-5, 3e-5, 2e-5)
    assert values["train_batch_size"] in (16, 32, 48)


def test_command_line_flags_override_the_config_file(tmp_path):
    import subprocess
    import sys

    config = tmp_path / "c.yaml"
    config.write_text("task_name: MRPC\nlearning_rate: 3.0e-5\nnum_train_epochs: 2\n")
    code = ("import sys; from absl import flags; from bert_tf import finetune; "
            "flags.FLAGS(sys.argv); finetune.apply_config_file(flags.FLAGS.config_file); "
            "F = flags.FLAGS; print(F.task_name, F.learning_rate, F.num_train_epochs)")
    out = subprocess.run([sys.executable, "-c", code, f"--config_file={config}",
                          "--learning_rate=2e-5"], cwd=REPO, capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["MRPC", "2e-05", "2.0"]
