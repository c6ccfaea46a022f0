"""The convert_checkpoint command line: as a user runs it (subprocess) and its flags."""

import numpy as np
import pytest
from absl import flags

from bert_tf import convert_checkpoint
from bert_tf.checkpoints import tf1, weights as weights_lib
from bert_tf.core.errors import BertTfError, UsageError
from bert_tf.model import model_dir
from bert_tf.model.pretrainer import BertPretrainer
from tests.helpers import run_command, tiny_config



def run_cli(*args):
    return run_command("bert_tf.convert_checkpoint", *args, timeout=300)


def test_bad_flag_values_fail_with_a_message(tmp_path):
    result = run_cli("--source_format=onnx", "--input=x", f"--output_dir={tmp_path}/o")
    assert result.returncode != 0
    assert "source_format" in result.stderr and "tf1" in result.stderr
    result = run_cli("--source_format=tf1", f"--output_dir={tmp_path}/o")
    assert result.returncode != 0 and "--input" in result.stderr
    result = run_cli("--source_format=tf1", "--target_format=tf1", "--input=x",
                     f"--output_dir={tmp_path}/o")
    assert result.returncode != 0 and "nothing to convert" in result.stderr
    assert not (tmp_path / "o").exists()


def test_tf1_to_bert_tf_and_back_through_the_cli(tmp_path):
    model = BertPretrainer(tiny_config(hidden_act="gelu_approximate"))
    rng = np.random.default_rng(0)
    for v in model.weights:
        v.assign(rng.normal(0, 0.3, v.shape).astype(np.float32))
    weights = weights_lib.weights_from_model(model)
    prefix = tf1.write_tf1_checkpoint(weights, str(tmp_path / "uncased_tiny"))

    out = tmp_path / "converted"
    result = run_cli("--source_format=tf1", f"--input={prefix}", f"--output_dir={out}")
    assert result.returncode == 0, result.stderr
    encoder = model_dir.load_encoder(str(out))
    for name, variable in weights_lib.model_variables(encoder).items():
        np.testing.assert_array_equal(variable.numpy(), weights.arrays[name], err_msg=name)
    assert model_dir.read_tokenizer_config(str(out))["do_lower_case"] is True

    # The same conversion again (a rerun after a kill once the output was in place): done.
    result = run_cli("--source_format=tf1", f"--input={prefix}", f"--output_dir={out}")
    assert result.returncode == 0 and "already holds this conversion" in result.stderr
    # Another conversion into it: refused, the dir kept.
    result = run_cli("--source_format=tf1", f"--input={prefix}", f"--output_dir={out}",
                     "--nodo_lower_case")
    assert result.returncode != 0 and "not empty" in result.stderr
    model_dir.load_encoder(str(out))



def _parse(*args):
    """Flags parsed as the program parses them, on a private FlagValues."""
    fv = flags.FlagValues()
    convert_checkpoint.define_flags(fv)
    fv(["convert_checkpoint", *args])
    return fv


def test_flag_validation_in_process(tmp_path):
    with pytest.raises(flags.IllegalFlagValueError, match="target_format"):
        _parse("--source_format=tf1", "--target_format=onnx", "--input=x", "--output_dir=o")
    with pytest.raises(flags.IllegalFlagValueError, match="output_dir"):
        _parse("--source_format=tf1", "--input=x")
    fv = _parse("--source_format=bert_tf", "--input=x", f"--output_dir={tmp_path}/o")
    with pytest.raises(UsageError, match="nothing to convert"):
        # target_format defaults to bert_tf
        convert_checkpoint.run(convert_checkpoint.ConvertConfig.from_flags(fv))


def test_source_errors_exit_without_traceback(tmp_path):
    """A bad source is a BertTfError (cli.run_main prints it as one line, exit status 1)."""
    (tmp_path / "model.onnx").write_text("x")
    fv = _parse("--source_format=huggingface", f"--input={tmp_path}/model.onnx",
                f"--output_dir={tmp_path}/out")
    with pytest.raises(BertTfError, match="model.onnx: unknown weights format"):
        convert_checkpoint.run(convert_checkpoint.ConvertConfig.from_flags(fv))
    assert not (tmp_path / "out").exists()
    result = run_cli("--source_format=huggingface", f"--input={tmp_path}/model.onnx",
                     f"--output_dir={tmp_path}/out")
    assert result.returncode == 1
    assert result.stderr.startswith("convert_checkpoint: error: ") and \
        "model.onnx: unknown weights format" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
