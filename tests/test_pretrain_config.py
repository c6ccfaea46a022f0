"""--config_file: experiment YAMLs set flags, the command line overrides them."""

import glob
import os

import pytest
from absl import flags

from bert_tf import pretrain
from bert_tf.app import setting_fields
from bert_tf.model.config import BertConfig

FLAGS = flags.FlagValues()
pretrain.define_flags(FLAGS)  # pretrain's flags, on a FlagValues of this test's own
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(REPO, "official_configs", "pretraining", "*.yaml")))


@pytest.fixture
def parsed():
    """Parses argv into the global FLAGS and restores the defaults afterwards."""
    def parse(*argv):
        FLAGS.unparse_flags()
        FLAGS(["pretrain", *argv])
        return FLAGS
    yield parse
    FLAGS.unparse_flags()


def test_yaml_values_apply_and_command_line_wins(tmp_path, parsed):
    path = tmp_path / "exp.yaml"
    path.write_text("learning_rate: 2.0e-4\nnum_train_steps: 77\nmax_seq_length: 64\n"
                    "do_train: true\noptimizer: lamb\n")
    values = parsed(f"--config_file={path}", "--num_train_steps=5")
    applied = setting_fields.apply_config_file(values)
    assert values.learning_rate == pytest.approx(2e-4)
    assert values.num_train_steps == 5  # the flag wins
    assert values.max_seq_length == 64 and values.do_train and values.optimizer == "lamb"
    assert "num_train_steps" not in applied


def test_unknown_key_and_bad_value_name_the_file_and_key(tmp_path, parsed):
    path = tmp_path / "bad.yaml"
    path.write_text("learning_rat: 1.0\n")
    with pytest.raises(ValueError, match=r"bad\.yaml: `learning_rat` is not a flag"):
        setting_fields.apply_config_file(parsed(f"--config_file={path}"))
    path.write_text("optimizer: sgd\n")
    with pytest.raises(ValueError, match=r"bad\.yaml: `optimizer: 'sgd'`"):
        setting_fields.apply_config_file(parsed(f"--config_file={path}"))


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_official_pretraining_configs_are_valid(path, parsed):
    values = parsed(f"--config_file={path}")
    setting_fields.apply_config_file(values)
    assert values.max_seq_length in (128, 512)
    if "phase1" in path or "tiny" in path:
        config = BertConfig.from_file(values.bert_config_file)  # resolved beside the YAML
        assert config.max_position_embeddings >= values.max_seq_length
    if "phase1" in path:
        assert values.num_train_steps == 900000 and values.train_batch_size == 256
        assert values.learning_rate == pytest.approx(1e-4)
        assert values.num_warmup_steps == 10000
    if "phase2" in path:
        assert values.max_seq_length == 512 and values.num_train_steps == 100000
        assert values.max_predictions_per_seq == 80


def test_the_paper_schedule_is_90_10():
    import yaml
    for size in ("base", "large"):
        steps = [yaml.safe_load(open(os.path.join(REPO, "official_configs", "pretraining",
                                                  f"bert_{size}_phase{i}.yaml")))["num_train_steps"]
                 for i in (1, 2)]
        assert steps[0] / sum(steps) == pytest.approx(0.9)
