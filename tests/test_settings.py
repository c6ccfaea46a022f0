"""bert_tf.app.settings: one dataclass field is the flag (type, default, range, help) and the
YAML key; the command line beats the YAML; "given" is one test."""

import dataclasses
from typing import List, Optional

import pytest
from absl import flags

from bert_tf.app import setting_fields
from bert_tf.app.setting_fields import setting
from bert_tf.core import errors


@dataclasses.dataclass(frozen=True, kw_only=True)
class Toy(setting_fields.Settings):
    config_file: Optional[str] = setting(None, "YAML.")
    steps: int = setting(10, "Steps.", lower=1)
    share: float = setting(0.1, "A share.", lower=0.0, upper=1.0)
    mode: str = setting("a", "Mode.", choices=("a", "b"))
    names: List[str] = setting(["x"], "Names.")
    casing: Optional[bool] = setting(None, "Casing.", flag_default=True)
    derived: int = 0  # not a flag


@dataclasses.dataclass(frozen=True, kw_only=True)
class LongerToy(Toy):
    steps: int = setting_fields.override(Toy, "steps", 99)


def parse(*argv, cls=Toy):
    return setting_fields.parse_args(cls.define_flags, list(argv))


def test_fields_become_absl_flags_with_their_type_default_and_range():
    fv = parse()
    assert fv["steps"].flag_type() == "int" and fv["steps"].default == 10
    assert fv["steps"].parser.lower_bound == 1
    assert fv["share"].parser.upper_bound == 1.0
    assert fv["mode"].parser.enum_values == ["a", "b"]
    assert fv["names"].default == ["x"] and fv["casing"].default is True
    assert "derived" not in fv and fv["steps"].help == "Steps."


def test_a_value_out_of_range_is_one_line_naming_the_flag_and_range():
    with pytest.raises(flags.IllegalFlagValueError) as e:
        parse("--steps=0")
    assert str(e.value).startswith("flag --steps=0: ") and "positive integer" in str(e.value)
    assert "\n" not in str(e.value)


def test_yaml_keys_set_the_fields_and_the_command_line_wins(tmp_path):
    yaml = tmp_path / "run.yaml"
    yaml.write_text("steps: 7\nmode: b\nshare: 0.5\nnames: [p, q]\n")
    config = Toy.from_flags(parse(f"--config_file={yaml}", "--steps=3"))
    assert (config.steps, config.mode, config.share, config.names) == (3, "b", 0.5, ["p", "q"])
    yaml.write_text("share: 2.0\n")
    with pytest.raises(errors.UsageError, match=r"run\.yaml: `share: 2\.0`.*range"):
        parse(f"--config_file={yaml}")


def test_a_field_with_a_flag_default_holds_none_unless_given(tmp_path):
    assert Toy.from_flags(parse()).casing is None
    assert Toy.from_flags(parse("--casing")).casing is True
    yaml = tmp_path / "run.yaml"
    yaml.write_text("casing: false\n")
    assert Toy.from_flags(parse(f"--config_file={yaml}")).casing is False


@dataclasses.dataclass(frozen=True, kw_only=True)
class SourcedToy(Toy):
    source: str = setting(setting_fields.REQUIRED, "From where.")


def test_a_required_field_is_a_flag_without_default_refused_when_not_given():
    fv = parse(cls=SourcedToy)
    assert fv["source"].default is None and fv["source"].help == "From where."
    with pytest.raises(errors.UsageError, match=r"^--source is required \(on the command "
                       r"line or in --config_file\)$"):
        SourcedToy.from_flags(fv)
    assert SourcedToy.from_flags(parse("--source=a", cls=SourcedToy)).source == "a"
    with pytest.raises(TypeError):
        SourcedToy()  # no default in the library either


def test_an_override_changes_the_default_and_keeps_help_and_range():
    fv = parse(cls=LongerToy)
    assert fv["steps"].default == 99 and fv["steps"].help == "Steps."
    assert fv["steps"].parser.lower_bound == 1
    assert LongerToy.from_flags(fv).steps == 99


def test_finetune_declares_its_own_step_defaults_and_the_tasks_length():
    from bert_tf import finetune, pretrain

    tuned = parse("--task_name=squad", "--output_dir=o", cls=finetune.FinetuneConfig)
    trained = parse(cls=pretrain.PretrainConfig)
    assert tuned["num_train_steps"].default is None and trained["num_train_steps"].default == 100000
    config = finetune.FinetuneConfig.from_flags(tuned)
    assert config.max_seq_length is None and config.do_lower_case is None  # the task's:
    assert config.task.task_arguments(config.max_seq_length)["max_seq_length"] == 384
    assert config.task.options["doc_stride"] == 128


def test_setting_fields_names_are_imported_from_setting_fields_only():
    """One import path per name: `bert_tf.app.settings` uses the generator and the text
    groups but no caller reaches them through it."""
    import ast
    import subprocess

    from tests.helpers import REPO_ROOT

    own = {n for n in vars(setting_fields) if not n.startswith("_")}
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO_ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    wrong = []
    for path in files:
        tree = ast.parse(open(f"{REPO_ROOT}/{path}", encoding="utf-8").read(), path)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "settings" and node.attr in own
                    and path != "bert_tf/app/settings.py"):
                wrong.append(f"{path}:{node.lineno}: settings.{node.attr}")
            if (isinstance(node, ast.ImportFrom) and node.module == "bert_tf.app.settings"
                    and any(a.name in own for a in node.names)):
                wrong.append(f"{path}:{node.lineno}: from bert_tf.app.settings import ...")
    assert not wrong, "import these from bert_tf.app.setting_fields:\n" + "\n".join(wrong)
