"""Every command's flags (names, types, defaults, ranges, enum values) are what they were
when each setting was declared once: checked against a golden file dumped from
the code before that change, so moving declarations changes no command line.

Regenerate only for an intended flag change:
`PYTHONPATH=. python -m tests.test_command_flags > tests/data/command_flags.json`.
"""

import importlib
import json
import os
import pathlib

import pytest
from absl import flags

GOLDEN = pathlib.Path(__file__).parent / "data" / "command_flags.json"
COMMANDS = ["bert_tf.pretrain", "bert_tf.finetune", "bert_tf.sweep", "bert_tf.extract_features",
            "bert_tf.export_model", "bert_tf.convert_checkpoint", "bert_tf.extend_vocab",
            "data_prep.create_pretraining_data", "data_prep.create_finetuning_data",
            "data_prep.build_vocab"]
CPU_COUNT = "<max(1, os.cpu_count())>"  # create_pretraining_data --num_workers


def _plain(value):
    if value == max(1, os.cpu_count() or 1) and not isinstance(value, bool):
        return CPU_COUNT
    return list(value) if isinstance(value, (list, tuple)) else value


def command_flags(module_name: str) -> dict:
    """{flag: {type, default, lower, upper, choices}} of one command's define_flags."""
    fv = flags.FlagValues()
    importlib.import_module(module_name).define_flags(fv)
    out = {}
    for name in sorted(fv):
        flag = fv[name]
        if name != flag.name:
            continue  # a short name
        parser = flag.parser
        entry = {"type": flag.flag_type(), "default": _plain(flag.default)}
        for key, attr in (("lower", "lower_bound"), ("upper", "upper_bound"),
                          ("choices", "enum_values")):
            if getattr(parser, attr, None) is not None:
                entry[key] = _plain(getattr(parser, attr))
        out[name] = entry
    return out


def all_command_flags() -> dict:
    return {name: command_flags(name) for name in COMMANDS}


@pytest.mark.parametrize("module_name", COMMANDS)
def test_command_flags_are_unchanged(module_name):
    golden = json.loads(GOLDEN.read_text())[module_name]
    now = command_flags(module_name)
    assert sorted(now) == sorted(golden), (
        f"added {sorted(set(now) - set(golden))}, removed {sorted(set(golden) - set(now))}")
    for name in golden:
        if name == "num_workers" and module_name.endswith("create_pretraining_data"):
            golden[name]["default"] = now[name]["default"] = CPU_COUNT
        assert now[name] == golden[name], name


if __name__ == "__main__":
    print(json.dumps(all_command_flags(), indent=1, sort_keys=True))
