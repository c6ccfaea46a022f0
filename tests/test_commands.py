"""Every command the same way: flags -> its config dataclass in one place (`from_flags`)
-> a library `run(config)` that reads no FLAGS; one model-directory precedence in each
(flag > model-dir record > inferred from the vocab > default). Runs in process: the
subprocess tests of each command (test_*_cli.py) check flags and exit codes."""

import json
import os
import subprocess
import sys

import keras
import pytest
from absl import flags

from bert_tf import export_model, extract_features, finetune
from bert_tf import pretrain
from bert_tf.app import cli, setting_fields, settings
from bert_tf.core import errors
from bert_tf.model import model_dir
from bert_tf.model.config import BertConfig
from data_prep import create_finetuning_data

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "Hello", "world", "good", "bad", "."]
CFG = BertConfig(vocab_size=len(CASED), hidden_size=16, num_hidden_layers=1,
                 num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)


@pytest.fixture(scope="module")
def cased_dir(tmp_path_factory):
    """A model dir of a cased vocab that records no casing (as an old or hand-made one)."""
    from bert_tf.model.encoder import BertEncoder

    root = tmp_path_factory.mktemp("commands")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(CASED) + "\n")
    keras.utils.set_random_seed(0)
    model_dir.write_model_dir(str(root / "init"), CFG, {"encoder": BertEncoder(CFG)},
                              vocab_file=str(vocab))
    assert not (root / "init" / model_dir.TOKENIZER_CONFIG_FILE).exists()
    data = root / "sst2"
    data.mkdir()
    rows = ["Hello world .\t1", "good world\t1", "bad world\t0", "Hello bad\t0"]
    (data / "train.tsv").write_text("sentence\tlabel\n" + "\n".join(rows * 2) + "\n")
    (data / "dev.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    return root


def test_every_command_settles_casing_the_same_way(cased_dir, tmp_path):
    """Unknown casing is inferred from the vocab by every command (export used to fall
    back to lower case, pretrain to its flag's default); a given flag wins, also from a
    --config_file."""
    init = str(cased_dir / "init")
    finetune_args = ["--task_name=SST-2", f"--init_checkpoint={init}",
                     f"--output_dir={tmp_path / 'ft'}", "--do_train", "--max_seq_length=16"]
    pretrain_args = ["--input_file=x", f"--output_dir={tmp_path / 'pt'}", "--do_train",
                     f"--init_checkpoint={init}", "--max_seq_length=16"]

    def finetune_text(*extra):
        config = finetune.FinetuneConfig.from_flags(
            setting_fields.parse_args(finetune.define_flags, finetune_args + list(extra)))
        return finetune._resolve_model_dir(config).text

    def pretrain_text(*extra):
        config = pretrain.PretrainConfig.from_flags(
            setting_fields.parse_args(pretrain.define_flags, pretrain_args + list(extra)))
        return pretrain._resolve_model_dir(config).text

    assert finetune_text().do_lower_case is False
    assert pretrain_text().do_lower_case is False
    assert finetune_text("--do_lower_case").do_lower_case is True
    assert pretrain_text("--do_lower_case").do_lower_case is True
    yaml_file = tmp_path / "exp.yaml"
    yaml_file.write_text("do_lower_case: true\n")  # = the flag's default, but given
    assert finetune_text(f"--config_file={yaml_file}").do_lower_case is True

    # extract_features: cased pieces come out whole ("hello" would be [UNK]).
    (tmp_path / "in.txt").write_text("Hello world\n")
    out = tmp_path / "features.jsonl"
    extract_features.run(extract_features.ExtractConfig.from_flags(setting_fields.parse_args(
        extract_features.define_flags, [f"--input_file={tmp_path / 'in.txt'}",
                                        f"--output_file={out}", f"--init_checkpoint={init}",
                                        "--layers=-1", "--max_seq_length=8"])))
    tokens = [t["token"] for t in json.loads(out.read_text())["features"]]
    assert tokens == ["[CLS]", "Hello", "world", "[SEP]"]

    # create_finetuning_data records the tokenizer it used.
    records = tmp_path / "records"
    (meta,) = create_finetuning_data.run(
        create_finetuning_data.FinetuningDataConfig.from_flags(setting_fields.parse_args(
            create_finetuning_data.define_flags,
            ["--task_name=SST-2", f"--data_dir={cased_dir / 'sst2'}",
             f"--init_checkpoint={init}", "--max_seq_length=8",
             f"--output_dir={records}"])))
    assert meta["task_config"]["do_lower_case"] is False and meta["num_examples"] == 8

    # export_model: the SavedModel records the settings its raw-text signature uses.
    path = export_model.run(export_model.ExportConfig.from_flags(setting_fields.parse_args(
        export_model.define_flags, [f"--init_checkpoint={init}", "--max_seq_length=16",
                                    f"--export_dir={tmp_path / 'export'}"])))
    with open(os.path.join(path, "assets.extra", model_dir.TOKENIZER_CONFIG_FILE)) as f:
        assert json.load(f)["do_lower_case"] is False


def test_finetune_run_in_process(cased_dir, tmp_path, monkeypatch):
    """run(config) trains, evaluates and leaves a model dir recording what it resolved;
    it reads --init_checkpoint once (the Trainer's start point, before feature conversion),
    and a rerun that resumes never."""
    import tensorflow as tf

    reads = []
    read = tf.train.Checkpoint.read
    monkeypatch.setattr(tf.train.Checkpoint, "read",
                        lambda self, path, **kw: reads.append(str(path)) or read(self, path, **kw))
    out = tmp_path / "out"
    config = finetune.FinetuneConfig.from_flags(setting_fields.parse_args(
        finetune.define_flags,
        ["--task_name=SST-2", f"--data_dir={cased_dir / 'sst2'}",
         f"--init_checkpoint={cased_dir / 'init'}", f"--output_dir={out}", "--do_train",
         "--do_eval", "--max_seq_length=8", "--train_batch_size=4", "--eval_batch_size=4",
         "--num_train_epochs=1", "--steps_per_loop=1", "--learning_rate=1e-3"]))
    assert config.max_seq_length == 8 and config.task.task_name == "SST-2"
    results = finetune.run(config)
    assert results["global_step"] == 2 and 0 <= results["accuracy"] <= 1
    assert [path for path in reads if str(cased_dir / "init") in path] == [
        model_dir.resolve_checkpoint(str(cased_dir / "init"))]
    assert json.loads((out / "eval_results.json").read_text())["eval_examples"] == 4
    recorded = model_dir.resolve(str(out))
    assert recorded.text.do_lower_case is False and recorded.task_config["task_name"] == "SST-2"
    assert recorded.heads == ("task_head",)
    # A rerun resumes --output_dir's checkpoint (nothing left to train) and never reads
    # the start point again.
    reads.clear()
    assert finetune.run(config)["global_step"] == 2
    assert reads and not [path for path in reads if str(cased_dir / "init") in path]


def test_finetune_on_an_amx_cpu_trains_in_bfloat16_unless_told(cased_dir, tmp_path,
                                                                monkeypatch, caplog):
    """--mixed_precision unset: mixed_bfloat16 on a CPU with AMX (logged), float32 on one
    without, and a given --mixed_precision=float32 (flag or YAML) always wins. The policy
    is the run's own: after a bfloat16 run the process is float32 again, and a second
    run in the same process builds its model as a fresh process would."""
    import logging

    from bert_tf.model import encoder as encoder_lib
    from bert_tf.training import strategy as strategy_lib

    built = []  # the dtype policy each run's encoder is built in
    original_init = encoder_lib.BertEncoder.__init__

    def recording_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        built.append(self.dtype_policy.name)

    monkeypatch.setattr(encoder_lib.BertEncoder, "__init__", recording_init)
    monkeypatch.setattr(strategy_lib, "cpu_has_amx_bf16", lambda: True)
    base = ["--task_name=SST-2", f"--data_dir={cased_dir / 'sst2'}",
            f"--init_checkpoint={cased_dir / 'init'}", "--max_seq_length=8",
            "--do_train", "--do_eval", "--train_batch_size=4", "--eval_batch_size=4",
            "--num_train_epochs=1", "--steps_per_loop=1"]
    parse = lambda *extra: finetune.FinetuneConfig.from_flags(  # noqa: E731
        setting_fields.parse_args(finetune.define_flags, base + list(extra)))
    out = lambda name: f"--output_dir={tmp_path / name}"  # noqa: E731
    assert parse(out("a")).mixed_precision is None
    assert parse(out("a"), "--mixed_precision=float32").mixed_precision == "float32"
    yaml_file = tmp_path / "exp.yaml"
    yaml_file.write_text("mixed_precision: float32\n")
    assert parse(out("a"), f"--config_file={yaml_file}").mixed_precision == "float32"
    assert keras.config.dtype_policy().name == "float32"
    with caplog.at_level(logging.INFO):
        results = finetune.run(parse(out("amx")))
    assert built[-1] == "mixed_bfloat16"
    assert "--mixed_precision=mixed_bfloat16: this CPU has AMX" in caplog.text
    assert results["global_step"] == 2 and 0 <= results["accuracy"] <= 1
    assert keras.config.dtype_policy().name == "float32"  # nothing leaks out of the run
    # The same process, a CPU without AMX: float32, as in a fresh process.
    monkeypatch.setattr(strategy_lib, "cpu_has_amx_bf16", lambda: False)
    assert finetune.run(parse(out("no_amx")))["global_step"] == 2
    assert built[-1] == "float32"
    # On the AMX CPU again, --mixed_precision=float32 wins.
    monkeypatch.setattr(strategy_lib, "cpu_has_amx_bf16", lambda: True)
    finetune.run(parse(out("told"), "--mixed_precision=float32"))
    assert built[-1] == "float32" and keras.config.dtype_policy().name == "float32"


def test_a_run_restores_the_process_state_it_sets():
    """restoring_process_state puts the dtype policy and every global seed back, even
    when the run fails."""
    import random

    import numpy as np
    from tensorflow.python.eager import context

    from bert_tf.training import strategy as strategy_lib

    tf_seed = context.global_seed()
    random.seed(7)
    np.random.seed(7)
    expected = (random.random(), np.random.rand())
    random.seed(7)
    np.random.seed(7)
    with pytest.raises(RuntimeError):
        with strategy_lib.restoring_process_state():
            strategy_lib.set_precision_and_seed("mixed_bfloat16", 123)
            assert keras.config.dtype_policy().name == "mixed_bfloat16"
            raise RuntimeError("the run failed")
    assert keras.config.dtype_policy().name == "float32"
    assert (random.random(), np.random.rand()) == expected
    assert context.global_seed() == tf_seed


def test_bad_flags_are_usage_errors_before_any_work(cased_dir, tmp_path):
    parse = setting_fields.parse_args
    with pytest.raises(errors.UsageError, match="unknown task 'glue'"):
        finetune.FinetuneConfig.from_flags(parse(finetune.define_flags, [
            "--task_name=glue", f"--output_dir={tmp_path}"]))
    with pytest.raises(errors.UsageError, match="--task_name is required"):
        create_finetuning_data.FinetuningDataConfig.from_flags(parse(
            create_finetuning_data.define_flags, [f"--output_dir={tmp_path}"]))
    # SQuAD's own default length unless given (its task decides); the task flags are
    # finetune's too.
    squad = finetune.FinetuneConfig.from_flags(parse(finetune.define_flags, [
        "--task_name=squad", f"--output_dir={tmp_path}", "--doc_stride=64"]))
    assert squad.max_seq_length is None and squad.task.options["doc_stride"] == 64
    assert squad.task.task_arguments(squad.max_seq_length)["max_seq_length"] == 384
    data_flags = parse(create_finetuning_data.define_flags, ["--task_name=squad"])
    assert set(settings.TASK_OPTION_FLAGS) <= set(data_flags)
    config = finetune.FinetuneConfig.from_flags(parse(finetune.define_flags, [
        "--task_name=SST-2", f"--output_dir={tmp_path}", "--do_eval"]))
    with pytest.raises(model_dir.ModelDirError, match="needs bert_config.json and vocab.txt"):
        finetune.run(config)


def test_preempted_exits_143_and_user_errors_1(capsys):
    def preempted():
        raise errors.Preempted("preempted at step 7: checkpoint written")

    with pytest.raises(SystemExit) as exit_:
        cli.run_errors_as_messages(preempted)
    assert exit_.value.code == 143

    def bad_dir():
        model_dir.resolve(None).require()

    with pytest.raises(SystemExit) as exit_:
        cli.run_errors_as_messages(bad_dir)
    assert exit_.value.code == 1
    assert "needs bert_config.json" in capsys.readouterr().err


COMMANDS = ["bert_tf.pretrain", "bert_tf.finetune", "bert_tf.extract_features",
            "bert_tf.export_model", "bert_tf.convert_checkpoint", "bert_tf.extend_vocab",
            "bert_tf.sweep", "data_prep.create_finetuning_data", "data_prep.build_vocab",
            "data_prep.create_pretraining_data"]


def test_commands_define_flags_only_when_they_run():
    """Importing every command module defines no flag (they can share one process); each
    defines its flags on the FlagValues it is given, and its __main__ hands them to
    cli.run_main."""
    # TensorFlow defines absl flags of its own when it loads (finetune and pretrain import
    # it at their top): loaded first, so that only the commands' own flags would show.
    probe = ("import importlib\nfrom absl import app, flags, logging\nimport tensorflow\n"
             "before = set(flags.FLAGS)\n"
             f"for m in {COMMANDS!r}: importlib.import_module(m)\n"
             "print(sorted(set(flags.FLAGS) - before))")
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"
    import importlib

    for name in COMMANDS:
        module = importlib.import_module(name)
        fresh = flags.FlagValues()
        module.define_flags(fresh)
        assert len(list(fresh)) > 3, name
        with open(module.__file__, encoding="utf-8") as f:
            assert "cli.run_main(main, define_flags)" in f.read(), name


def test_jit_compile_defaults_to_xla_on_cpus_without_avx512(monkeypatch, tmp_path):
    """--jit_compile unset: the training step is XLA-compiled on CPUs without AVX-512
    (faster there, benchmarks/README.md), here emulated by capping oneDNN's ISA; given,
    the flag wins; with AVX-512 it follows /proc/cpuinfo."""
    from bert_tf.training.strategy import cpu_has_avx512, get_strategy

    strategy = get_strategy("one_device")

    def jit(*extra):
        config = finetune.FinetuneConfig.from_flags(setting_fields.parse_args(
            finetune.define_flags, ["--task_name=SST-2", f"--output_dir={tmp_path}",
                                    "--do_train", *extra]))
        return config.loop_options(strategy).jit_compile

    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert jit() is True
    assert jit("--nojit_compile") is False
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")
    assert jit() is (cpu_has_avx512() is False)
    assert jit("--jit_compile") is True
