"""Hugging Face export (`convert_checkpoint --target_format=huggingface`): transformers
loads what we write and computes what we compute.

* the real MiniLM, HF -> bert_tf -> HF: the same outputs in transformers as the original
  (and the same weights, bit for bit), its tokenizer loads with AutoTokenizer;
* a model pretrained here by `python -m bert_tf.pretrain`: the same masked-LM and NSP
  logits in BertForPreTraining; the run's TensorBoard event files hold the train and
  held-out scalars (`--eval_every_steps`);
* a classifier fine-tuned by `python -m bert_tf.finetune`: the same logits in
  BertForSequenceClassification, with its labels; token classification and question
  answering heads in their classes too.
"""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
import yaml

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from bert_tf.checkpoints import huggingface, weights as weights_lib  # noqa: E402
from bert_tf.convert_checkpoint import convert  # noqa: E402
from bert_tf.core import constants  # noqa: E402
from bert_tf.model import model_dir
from bert_tf.model.config import BertConfig  # noqa: E402
from bert_tf.model.pretrainer import BertPretrainer  # noqa: E402
from tests.helpers import make_model_dir, run_command, tiny_config  # noqa: E402
from tests.helpers.training import PRED, SEQ, write_records  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _tensors(path):
    from safetensors.numpy import load_file

    return load_file(str(path))


# --------------------------------------------------------------------------- MiniLM
def test_minilm_round_trip_through_bert_tf_gives_the_original_outputs(minilm_dir, tmp_path):
    ours = tmp_path / "ours"
    convert("huggingface", str(minilm_dir), str(ours))
    exported = tmp_path / "hf"
    convert("bert_tf", str(ours), str(exported), target_format="huggingface")

    original, back = _tensors(minilm_dir / "model.safetensors"), _tensors(
        exported / "model.safetensors")
    assert set(back) == {k for k in original if not k.endswith("position_ids")}
    for name, value in back.items():
        np.testing.assert_array_equal(value, original[name], err_msg=name)
    config = json.loads((exported / "config.json").read_text())
    assert config["architectures"] == ["BertModel"] and config["hidden_act"] == "gelu"

    pairs = [("The cat sat on the mat.", "It was warm there."), ("What is BERT?", None),
             ("Héllo wörld — naïve café, 3.14 and 2026!", "Seoul (서울).")]
    reference_tok = transformers.BertTokenizer(str(minilm_dir / "vocab.txt"),
                                               do_lower_case=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(exported))
    encoded = [tokenizer(a, b) for a, b in pairs]
    assert [e["input_ids"] for e in encoded] == [reference_tok(a, b)["input_ids"]
                                                for a, b in pairs]
    batch = tokenizer([a for a, _ in pairs], padding=True, return_tensors="pt")
    outputs = []
    for directory in (minilm_dir, exported):
        model = transformers.BertModel.from_pretrained(
            str(directory), attn_implementation="eager", dtype=torch.float32).eval()
        with torch.no_grad():
            outputs.append(model(**batch))
    for field in ("last_hidden_state", "pooler_output"):
        diff = np.abs(getattr(outputs[0], field).numpy() - getattr(outputs[1], field).numpy())
        assert diff.max() < 1e-5, (field, diff.max())


# --------------------------------------------------------------------------- pretrained
@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny model pretrained for 4 steps by `python -m bert_tf.pretrain` (tanh GELU,
    so the export must say gelu_new), evaluated on held-out records every 2 steps."""
    root = tmp_path_factory.mktemp("pretrained")
    train = write_records(root / "train.tfrecord", 32, seed=0)
    held = write_records(root / "held.tfrecord", 12, seed=1)
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(SPECIAL + [f"w{i}" for i in range(95)]) + "\n")
    config = root / "bert_config.yaml"
    config.write_text(yaml.safe_dump(dict(
        vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=SEQ, hidden_act="gelu_approximate")))
    out = root / "model"
    run_command("bert_tf.pretrain", f"--bert_config_file={config}", f"--vocab_file={vocab}",
                f"--input_file={train}", f"--eval_input_file={held}", f"--output_dir={out}",
                f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PRED}", "--do_train",
                "--do_eval", "--train_batch_size=4", "--eval_batch_size=4",
                "--learning_rate=5e-3", "--num_train_steps=4", "--num_warmup_steps=1",
                "--steps_per_loop=2", "--eval_every_steps=2", "--seed=3", check=True)
    return out, held


def test_pretrained_model_gives_the_same_logits_in_bert_for_pretraining(pretrained, tmp_path):
    out, held = pretrained
    exported = tmp_path / "hf"
    convert("bert_tf", str(out), str(exported), target_format="huggingface")
    config = json.loads((exported / "config.json").read_text())
    assert config["architectures"] == ["BertForPreTraining"]
    assert config["hidden_act"] == "gelu_new"
    assert json.loads((exported / "tokenizer_config.json").read_text())["do_lower_case"]
    assert (exported / "vocab.txt").read_text() == (out / "vocab.txt").read_text()

    ours = BertPretrainer(model_dir.find_config(str(out)))
    model_dir.restore(str(out), {"encoder": ours.encoder, "masked_lm": ours.masked_lm,
                                 "next_sentence": ours.next_sentence})
    reference = transformers.BertForPreTraining.from_pretrained(
        str(exported), attn_implementation="eager", dtype=torch.float32).eval()
    features = {k: [] for k in ("input_ids", "input_mask", "segment_ids",
                                "masked_lm_positions")}
    for raw in tf.data.TFRecordDataset(held):
        f = tf.train.Example.FromString(raw.numpy()).features.feature
        for k in features:
            features[k].append(list(f[k].int64_list.value))
    ids, mask, types, positions = (np.array(features[k]) for k in features)
    got = ours({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types,
                "masked_lm_positions": positions})
    with torch.no_grad():
        want = reference(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                         token_type_ids=torch.tensor(types))
    want_mlm = np.take_along_axis(want.prediction_logits.numpy(), positions[:, :, None], 1)
    np.testing.assert_allclose(got["mlm_logits"].numpy(), want_mlm, atol=1e-5)
    np.testing.assert_allclose(got["nsp_logits"].numpy(),
                               want.seq_relationship_logits.numpy(), atol=1e-5)
    # Both ways: reading the export back gives our arrays unchanged.
    source, back = weights_lib.read_model_dir(str(out)), huggingface.read_huggingface(
        str(exported))
    assert back.heads == source.heads == constants.PRETRAINING_HEADS
    assert back.config == source.config
    for name, value in source.arrays.items():
        np.testing.assert_array_equal(back.arrays[name], value, err_msg=name)


def _scalars(event_dir):
    values = {}
    for path in tf.io.gfile.glob(os.path.join(event_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for v in event.summary.value:
                values.setdefault(v.tag, {})[event.step] = float(tf.make_ndarray(v.tensor))
    return values


def test_pretrain_writes_train_and_held_out_scalars_to_tensorboard(pretrained):
    out, _ = pretrained
    curve = ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy", "loss")
    train = _scalars(out / "train")
    assert set(curve) | {"learning_rate", "examples_per_second"} <= set(train)
    assert sorted(train["masked_lm_loss"]) == [2, 4]
    held = _scalars(out / "eval")
    assert set(curve) <= set(held)
    assert sorted(held["masked_lm_accuracy"]) == [0, 2, 4]  # --eval_every_steps=2 + the end
    final = json.loads((out / "eval_results.json").read_text())
    for name in curve:
        assert held[name][4] == pytest.approx(final[name], rel=1e-5)
        assert 0 <= held[name][4] <= (1 if "accuracy" in name else 100)


# --------------------------------------------------------------------------- fine-tuned
def test_finetuned_classifier_gives_the_same_logits_in_bert_for_sequence_classification(
        tmp_path):
    from bert_tf.model.encoder import BertEncoder

    cfg = tiny_config(vocab_size=14, max_position_embeddings=16)
    make_model_dir(tmp_path / "init", SPECIAL + ["good", "bad", "movie", "a", "fun", "awful",
                                                 "great", "film", "."], cfg)
    data = tmp_path / "sst2"
    data.mkdir()
    rows = ["a good movie \t1", "a bad film \t0", "great fun . \t1", "awful movie \t0"] * 4
    (data / "train.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    (data / "dev.tsv").write_text("sentence\tlabel\n" + "\n".join(rows[:4]) + "\n")
    out = tmp_path / "finetuned"
    # finetune in process (the same run as `python -m bert_tf.finetune`, without a start-up)
    from bert_tf import finetune
    from bert_tf.app.setting_fields import parse_args

    finetune.run(finetune.FinetuneConfig.from_flags(parse_args(finetune.define_flags, [
        "--task_name=SST-2", f"--data_dir={data}", f"--init_checkpoint={tmp_path / 'init'}",
        f"--output_dir={out}", "--do_train", "--max_seq_length=8", "--train_batch_size=4",
        "--learning_rate=1e-2", "--num_train_epochs=1", "--steps_per_loop=2"])))
    exported = tmp_path / "hf"
    convert("bert_tf", str(out), str(exported), target_format="huggingface")
    config = json.loads((exported / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "0", "1": "1"}
    assert config["problem_type"] == "single_label_classification"

    from bert_tf import tasks

    task = tasks.task_from_config(model_dir.read_task_config(str(out)))
    ours = task.build_model(BertEncoder(cfg, name="encoder"))
    model_dir.restore(str(out), ours.checkpoint_items())
    ids = np.array([[2, 8, 5, 7, 3, 0], [2, 9, 10, 13, 3, 0], [2, 11, 3, 0, 0, 0]])
    mask = (ids > 0).astype(np.int64)
    got = ours({"input_word_ids": ids, "input_mask": mask,
                "input_type_ids": np.zeros_like(ids)})["logits"].numpy()
    reference = transformers.BertForSequenceClassification.from_pretrained(
        str(exported), attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        want = reference(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)
    assert np.abs(got).max() > 1e-3  # a trained head, not zeros


@pytest.mark.parametrize("task_name,hf_class", [
    ("conll2003", "BertForTokenClassification"), ("squad", "BertForQuestionAnswering")])
def test_token_and_span_heads_load_into_their_transformers_class(tmp_path, task_name,
                                                                 hf_class):
    from bert_tf import tasks
    from bert_tf.model.encoder import BertEncoder

    cfg = BertConfig(vocab_size=20, hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)
    keras.utils.set_random_seed(1)
    task = tasks.make_task(task_name, max_seq_length=16)
    model = task.build_model(BertEncoder(cfg, name="encoder"))
    dense = model.task_head.dense
    dense.bias.assign(np.random.default_rng(0).normal(size=dense.bias.shape))
    # What finetune writes: the model dir, task_config.json, a checkpoint of both children.
    model_dir.write_model_dir(str(tmp_path / "ft"), cfg, model.checkpoint_items(),
                              do_lower_case=True)
    (tmp_path / "ft" / model_dir.TASK_CONFIG_FILE).write_text(json.dumps(task.task_config()))
    exported = tmp_path / "hf"
    convert("bert_tf", str(tmp_path / "ft"), str(exported), target_format="huggingface")
    config = json.loads((exported / "config.json").read_text())
    assert config["architectures"] == [hf_class]
    reference = getattr(transformers, hf_class).from_pretrained(
        str(exported), attn_implementation="eager", dtype=torch.float32).eval()
    ids = np.array([[2, 7, 8, 9, 3, 10, 3, 0], [2, 11, 3, 12, 13, 3, 0, 0]])
    mask, types = (ids > 0).astype(np.int64), np.zeros_like(ids)
    got = model({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types})
    with torch.no_grad():
        want = reference(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask))
    if hf_class == "BertForTokenClassification":
        assert config["id2label"]["1"] == task.label_list[1]
        np.testing.assert_allclose(got["logits"].numpy(), want.logits.numpy(), atol=1e-5)
    else:
        for key in ("start_logits", "end_logits"):
            np.testing.assert_allclose(got[key].numpy(), getattr(want, key).numpy(), atol=1e-5)


def test_cli_exports_to_huggingface_and_refuses_a_full_output_dir(pretrained, tmp_path):
    out, _ = pretrained
    target = tmp_path / "hf"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    command = ["bert_tf.convert_checkpoint", "--source_format=bert_tf",
               "--target_format=huggingface", f"--input={out}", f"--output_dir={target}"]
    refused = run_command(*command)
    assert refused.returncode != 0 and "--overwrite" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert (target / "keep.txt").read_text() == "mine"
    # --overwrite replaces only an earlier bert_tf output: a folder of the user's is refused.
    refused = run_command(*command, "--overwrite")
    assert refused.returncode == 1 and "no bert_tf command wrote" in refused.stderr
    assert "Traceback" not in refused.stderr and os.listdir(target) == ["keep.txt"]
    target = tmp_path / "hf2"
    command[-1] = f"--output_dir={target}"
    run_command(*command, check=True)
    # The rerun over its own output, in process (--overwrite reached the guard above).
    convert("bert_tf", str(out), str(target), target_format="huggingface", overwrite=True)
    assert sorted(os.listdir(target)) == [".bert_tf_output.json", "config.json", "model.safetensors",
                                          "special_tokens_map.json", "tokenizer_config.json",
                                          "vocab.txt"]
