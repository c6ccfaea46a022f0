"""official_configs/finetuning/*.yaml: every key is a finetune flag, every task known,
and --config_file values yield to flags given on the command line."""

import os
import pathlib
import subprocess
import sys

import pytest
import yaml

from bert_tf import tasks

REPO = pathlib.Path(__file__).resolve().parent.parent
CONFIGS = sorted((REPO / "official_configs" / "finetuning").glob("*.yaml"))

# Defines finetune's flags (they are defined only when the command runs), applies a
# --config_file and prints what the flags hold.
PROBE = """
import json, sys
from absl import flags
from bert_tf import finetune
from bert_tf.app import setting_fields
finetune.define_flags()
flags.FLAGS(sys.argv)
setting_fields.apply_config_file(flags.FLAGS)
F = flags.FLAGS
print(json.dumps({"names": sorted(F), "task_name": F.task_name,
                  "learning_rate": F.learning_rate, "num_train_epochs": F.num_train_epochs,
                  "num_train_steps": F.num_train_steps}))
"""


def probe(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def overridden(tmp_path_factory):
    config = tmp_path_factory.mktemp("cfg") / "c.yaml"
    config.write_text("task_name: MRPC\nlearning_rate: 3.0e-5\nnum_train_epochs: 2\n")
    return probe(f"--config_file={config}", "--learning_rate=2e-5")


def test_there_is_a_config_per_task():
    names = {tasks.canonical_task_name(yaml.safe_load(p.read_text())["task_name"])
             for p in CONFIGS}
    assert names >= {"cola", "sst-2", "mrpc", "sts-b", "qqp", "mnli", "qnli", "rte", "wnli",
                     "conll2003", "swag", "squad"}


def test_config_keys_are_finetune_flags(overridden):
    for path in CONFIGS:
        values = yaml.safe_load(path.read_text())
        assert set(values) <= set(overridden["names"]), (path.name, set(values))
        # "2e-5" without a dot would be a YAML string
        assert values["learning_rate"] in (5e-5, 4e-5, 3e-5, 2e-5), path.name
        assert values["train_batch_size"] in (16, 32, 48), path.name


def test_command_line_flags_override_the_config_file(overridden):
    assert overridden["task_name"] == "MRPC"
    assert overridden["learning_rate"] == 2e-5      # the command line wins
    assert overridden["num_train_epochs"] == 2.0    # from the file
    assert overridden["num_train_steps"] is None    # fine-tuning: epochs decide
