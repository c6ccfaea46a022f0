"""keras-hub presets both ways (`convert_checkpoint --source_format=keras_hub` /
`--target_format=keras_hub`), on presets keras-hub itself saves from a small config:

* a BertBackbone preset (with its tokenizer) converts to a model dir whose encoder gives
  keras-hub's outputs, with the vocabulary and casing carried over;
* a BertTextClassifier preset keeps its head (a fine-tuned model dir, the task named by
  --task_name) and gives keras-hub's logits, on ids and on raw text (tokenizer included);
* our encoder and our fine-tuned classifier written as presets load with keras-hub's
  `from_preset` and give our outputs; the classifier comes back with its task and labels.
"""

import json
import logging

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

from bert_tf.checkpoints.weights import CheckpointFormatError  # noqa: E402
from bert_tf.convert_checkpoint import convert  # noqa: E402
from bert_tf.core.errors import UsageError  # noqa: E402
from bert_tf.model import model_dir  # noqa: E402
from bert_tf.model.encoder import BertEncoder  # noqa: E402
from bert_tf.text.tokenization import BertTokenizer  # noqa: E402
from tests.helpers import tiny_config  # noqa: E402

VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
         + "the a cat dog sat on mat ran fast slow good bad film movie was is , . !".split()
         + ["##s", "##ed", "##ly"])
TEXTS = ["The cat sat on the mat.", "A dog ran fast!", "The film was good, the movie bad."]
PAIRS = ["a cat", "the dogs ran slowly"]


def _ids():
    ids = np.array([[2, 5, 7, 8, 3, 9, 10, 3], [2, 6, 11, 3, 0, 0, 0, 0]], np.int32)
    mask = (ids > 0).astype(np.int32)
    types = np.array([[0, 0, 0, 0, 0, 1, 1, 1], [0] * 8], np.int32)
    return ids, mask, types


def _randomize(model, seed=0):
    """keras-hub starts LayerNorms at 1/0 and biases at 0: randomize so swaps show."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(rng.normal(0, 0.3, v.shape).astype("float32"))


def _backbone(**overrides):
    values = dict(vocabulary_size=len(VOCAB), num_layers=2, num_heads=2, hidden_dim=16,
                  intermediate_dim=32, max_sequence_length=32)
    values.update(overrides)
    backbone = keras_hub.models.BertBackbone(**values)
    _randomize(backbone)
    return backbone


def _encoder_outputs(directory):
    encoder = model_dir.load_encoder(str(directory))
    ids, mask, types = _ids()
    out = encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types})
    return out["sequence_output"].numpy(), out["pooled_output"].numpy()


def _keras_hub_outputs(backbone):
    ids, mask, types = _ids()
    out = backbone({"token_ids": ids, "segment_ids": types, "padding_mask": mask})
    return np.asarray(out["sequence_output"]), np.asarray(out["pooled_output"])


def _assert_close(got, want):
    mask = _ids()[1].astype(bool)  # padded positions' vectors are no one's output
    np.testing.assert_allclose(got[0][mask], want[0][mask], atol=1e-5)
    np.testing.assert_allclose(got[1], want[1], atol=1e-5)


def test_backbone_preset_converts_with_outputs_vocab_and_casing(tmp_path):
    backbone = _backbone()
    preset = tmp_path / "preset"
    backbone.save_to_preset(str(preset))
    keras_hub.models.BertTokenizer(vocabulary=VOCAB, lowercase=True).save_to_preset(str(preset))
    ours = tmp_path / "ours"
    convert("keras_hub", str(preset), str(ours))

    config = model_dir.find_config(str(ours))
    assert (config.hidden_act, config.num_hidden_layers, config.max_position_embeddings) == (
        "gelu_approximate", 2, 32)
    _assert_close(_encoder_outputs(ours), _keras_hub_outputs(backbone))
    assert (ours / "vocab.txt").read_text().split("\n")[:-1] == VOCAB
    # keras-hub lower-cases without stripping accents: recorded as such
    assert json.loads((ours / "tokenizer_config.json").read_text()) == {
        "do_lower_case": True, "strip_accents": False}


def test_classifier_preset_keeps_its_head_and_tokenizes_as_keras_hub(tmp_path):
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=VOCAB, lowercase=True)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=16)
    classifier = keras_hub.models.BertTextClassifier(_backbone(), num_classes=3,
                                                     preprocessor=preprocessor)
    _randomize(classifier, seed=1)
    preset = tmp_path / "preset"
    classifier.save_to_preset(str(preset))
    with pytest.raises(UsageError, match="pass --task_name"):  # one text or a pair?
        convert("keras_hub", str(preset), str(tmp_path / "refused"))
    ours = tmp_path / "ours"
    convert("keras_hub", str(preset), str(ours), task_name="mnli")
    task_config = model_dir.read_task_config(str(ours))
    assert task_config["task_name"] == "MNLI" and task_config["max_seq_length"] == 16
    assert task_config["label_list"] == ["contradiction", "entailment", "neutral"]

    from bert_tf.tasks import task_from_config

    resolved = model_dir.resolve(str(ours))
    ours_tokenizer = resolved.tokenizer()
    task = task_from_config(task_config, ours_tokenizer)
    model = task.build_model(BertEncoder(resolved.config, name="encoder"))
    model_dir.restore(resolved, model.checkpoint_items())
    inputs = ours_tokenizer.encode(TEXTS[:2], PAIRS, max_seq_length=16)
    got = model(inputs)["logits"].numpy()
    want = classifier.predict((np.array(TEXTS[:2]), np.array(PAIRS)), verbose=0)
    np.testing.assert_allclose(got, want, atol=1e-5)
    # keras-hub tokenized and packed the raw pairs itself: the same ids as ours
    assert [list(map(int, r)) for r in tokenizer(PAIRS)] == ours_tokenizer.tokenize(
        PAIRS).to_list()


def test_encoder_and_classifier_written_as_presets_load_in_keras_hub(tmp_path):
    from bert_tf.tasks import make_task

    config = tiny_config(vocab_size=len(VOCAB), num_hidden_layers=2, max_position_embeddings=32,
                         hidden_act="gelu_approximate")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    # a fine-tuned SST-2 model dir, as finetune writes it (labels renamed, as an import does)
    task = make_task("sst-2", max_seq_length=16, label_list=["negative", "positive"])
    model = task.build_model(BertEncoder(config, name="encoder"))
    _randomize(model, seed=2)
    source = tmp_path / "finetuned"
    model_dir.write_model_dir(str(source), config, model.checkpoint_items(),
                              vocab_file=str(vocab), do_lower_case=True,
                              task_config=task.task_config())
    preset = tmp_path / "preset"
    convert("bert_tf", str(source), str(preset), target_format="keras_hub")

    backbone = keras_hub.models.BertBackbone.from_preset(str(preset))
    _assert_close(_encoder_outputs(source), _keras_hub_outputs(backbone))
    tokenizer = keras_hub.models.BertTokenizer.from_preset(str(preset))
    ours_tokenizer = BertTokenizer(str(vocab), do_lower_case=True)
    got = tokenizer(TEXTS)
    assert [list(map(int, row)) for row in (got.to_list() if hasattr(got, "to_list") else got)
            ] == ours_tokenizer.tokenize(TEXTS).to_list()

    classifier = keras_hub.models.BertTextClassifier.from_preset(str(preset))
    want = model(ours_tokenizer.encode(TEXTS, max_seq_length=16))["logits"].numpy()
    np.testing.assert_allclose(classifier.predict(np.array(TEXTS), verbose=0), want,
                               atol=1e-5)
    # and back: the task and its labels come with it, no --task_name needed
    back = tmp_path / "back"
    convert("keras_hub", str(preset), str(back))
    assert model_dir.read_task_config(str(back)) == model_dir.read_task_config(str(source))
    _assert_close(_encoder_outputs(back), _encoder_outputs(source))


def test_activations_keras_hub_cannot_compute(tmp_path, caplog):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    for act in ("gelu", "relu"):
        config = tiny_config(vocab_size=len(VOCAB), hidden_act=act)
        source = tmp_path / act
        model_dir.write_model_dir(str(source), config, {"encoder": BertEncoder(config)},
                                  vocab_file=str(vocab), do_lower_case=True)
        if act == "relu":
            with pytest.raises(CheckpointFormatError, match="hidden_act='relu'"):
                convert("bert_tf", str(source), str(tmp_path / "out_relu"),
                        target_format="keras_hub")
            continue
        with caplog.at_level(logging.WARNING):
            convert("bert_tf", str(source), str(tmp_path / "out_gelu"),
                    target_format="keras_hub")
        assert "computes the tanh form" in caplog.text
