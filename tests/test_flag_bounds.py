"""Every bad flag value is refused with one line naming the flag and the allowed range,
before any work: the ranges are declared where the flags are defined (`lower_bound=` /
`upper_bound=` on the absl definitions), so the command line and --config_file YAMLs are
checked the same way; cross-flag rules (SQuAD's window) where the values meet."""

import pytest
from absl import flags

from bert_tf import convert_checkpoint, export_model, extend_vocab, extract_features, finetune, pretrain
from bert_tf.app import setting_fields
from bert_tf.core import errors
from data_prep import build_vocab, create_finetuning_data, create_pretraining_data
from tests.helpers import run_command

# (module, flag, bad value, what the message says about the range)
BAD = [
    (pretrain, "max_seq_length", 2, "integer >= 3"),
    (pretrain, "train_batch_size", 0, "positive integer"),
    (pretrain, "eval_batch_size", -1, "positive integer"),
    (pretrain, "keep_checkpoint_max", -1, "non-negative"),
    (pretrain, "save_checkpoints_steps", 0, "positive integer"),
    (pretrain, "steps_per_loop", 0, "positive integer"),
    (pretrain, "gradient_accumulation_steps", 0, "positive integer"),
    (pretrain, "num_train_steps", -5, "non-negative"),
    (pretrain, "max_predictions_per_seq", 0, "positive integer"),
    (pretrain, "learning_rate", -1e-4, "non-negative number"),
    (finetune, "max_train_examples", -3, "positive integer"),
    (finetune, "max_eval_examples", -1, "positive integer"),
    (finetune, "predict_batch_size", 0, "positive integer"),
    (finetune, "warmup_proportion", 1.5, "range [0.0, 1.0]"),
    (finetune, "doc_stride", 0, "positive integer"),
    (extract_features, "batch_size", -1, "positive integer"),
    (extract_features, "max_seq_length", 0, "integer >= 3"),
    (export_model, "max_seq_length", 1, "integer >= 3"),
    (extend_vocab, "num_new_tokens", 0, "positive integer"),
    (build_vocab, "min_frequency", 0, "positive integer"),
    (create_finetuning_data, "num_output_shards", 0, "positive integer"),
    (create_finetuning_data, "max_examples", -2, "positive integer"),
    (create_pretraining_data, "num_output_shards", 0, "positive integer"),
    (create_pretraining_data, "max_seq_length", 4, "integer >= 5"),
    (create_pretraining_data, "masked_lm_prob", 1.5, "range [0.0, 1.0]"),
    (create_pretraining_data, "dupe_factor", 0, "positive integer"),
]


def _flag_values(module):
    fv = flags.FlagValues()
    module.define_flags(fv)
    return fv


@pytest.mark.parametrize("module,name,value,range_text", BAD,
                         ids=[f"{m.__name__.split('.')[-1]}-{n}" for m, n, _, _ in BAD])
def test_out_of_range_values_name_the_flag_and_range(module, name, value, range_text):
    with pytest.raises(flags.IllegalFlagValueError) as e:
        _flag_values(module)(["prog", f"--{name}={value}"])
    message = str(e.value)
    assert message.startswith(f"flag --{name}={value}: ") and range_text in message, message
    assert "\n" not in message


def test_config_file_values_are_checked_against_the_same_ranges(tmp_path):
    yaml = tmp_path / "run.yaml"
    yaml.write_text("train_batch_size: 0\n")
    with pytest.raises(errors.UsageError, match=r"train_batch_size: 0.*positive integer"):
        setting_fields.parse_args(pretrain.define_flags, [f"--config_file={yaml}",
                                                        "--output_dir=x", "--input_file=y"])


def test_keep_checkpoint_max_0_keeps_every_checkpoint_as_the_original(tmp_path):
    from bert_tf.training.strategy import get_strategy

    def keep(*extra):
        config = pretrain.PretrainConfig.from_flags(setting_fields.parse_args(
            pretrain.define_flags, [f"--output_dir={tmp_path}", "--input_file=x", "--do_train", *extra]))
        options = config.loop_options(get_strategy("one_device"))
        return options.max_to_keep

    assert keep() == 5
    assert keep("--keep_checkpoint_max=0") is None  # tf.train.CheckpointManager: keep all


def test_squad_window_must_hold_more_than_the_question():
    from bert_tf.tasks import TaskSpec, make_task

    def make(max_seq_length, **options):
        spec = TaskSpec("squad", options=options)
        return make_task("squad", **spec.task_arguments(max_seq_length))

    with pytest.raises(errors.UsageError, match=r"--max_seq_length=67: SQuAD needs more than "
                                                r"--max_query_length \+ 3 = 67"):
        make(67)
    with pytest.raises(errors.UsageError, match=r"--max_seq_length=20: .* = 23"):
        make(20, max_query_length=20)
    assert make(68).max_seq_length == 68


def test_convert_checkpoint_refuses_a_remote_output_dir_instead_of_a_local_gs_dir(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(errors.UsageError, match="gs://bucket/m: convert_checkpoint writes a "
                                                "local directory"):
        convert_checkpoint.convert("tf1", str(tmp_path / "ckpt"), "gs://bucket/m")
    assert not (tmp_path / "gs:").exists()


@pytest.mark.parametrize("module,args,flag", [
    ("bert_tf.pretrain", ["--train_batch_size=0", "--output_dir=o", "--input_file=i"],
     "--train_batch_size=0"),
    ("bert_tf.extract_features", ["--batch_size=-1"], "--batch_size=-1"),
    ("data_prep.create_pretraining_data", ["--num_output_shards=0", "--input_file=a",
                                           "--output_file=b", "--vocab_file=c"],
     "--num_output_shards=0"),
])
def test_the_command_line_says_it_in_one_line_and_exit_1(module, args, flag, tmp_path):
    result = run_command(module, *args, cwd=tmp_path, timeout=120)
    assert result.returncode == 1, result.stderr[-2000:]
    first = result.stderr.splitlines()[0]
    assert flag in first and "positive integer" in first, result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written
