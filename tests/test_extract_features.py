"""extract_features: the original's JSON lines from a tiny model dir written here."""

import dataclasses
import json

import numpy as np
import pytest

from bert_tf import extract_features as ef
from bert_tf.app import setting_fields
from tests.helpers import make_model_dir, run_command, tiny_config

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat",
         "caf", "##e", "dog", ".", "a", "b"]
H = 16


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    config = tiny_config(vocab_size=len(VOCAB), hidden_size=H, num_hidden_layers=3,
                         max_position_embeddings=32)
    return make_model_dir(tmp_path_factory.mktemp("ef") / "model", VOCAB, config, seed=3)


@pytest.fixture(scope="module")
def loaded(model_dir):
    """(encoder, tokenizer) loaded once: building and tracing a tokenizer costs seconds."""
    from bert_tf.model.model_dir import find_vocab, load_encoder
    from bert_tf.text.tokenization import BertTokenizer

    return load_encoder(model_dir), BertTokenizer(find_vocab(model_dir), do_lower_case=True)


def _extract(loaded, input_file, layers, concat=False):
    encoder, tokenizer = loaded
    return list(ef.extract(encoder, tokenizer, ef.read_examples(input_file), layers,
                           max_seq_length=8, batch_size=3, concat_layers=concat))


@pytest.fixture()
def input_file(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("The cat sat on the mat.\nCafé dog ||| a b\n\nthe the the the the the the\n",
                    encoding="utf-8")
    return str(path)


def _run(model_dir, input_file, output, *extra):
    fv = setting_fields.parse_args(ef.define_flags, [
        f"--input_file={input_file}", f"--output_file={output}",
        f"--init_checkpoint={model_dir}", "--max_seq_length=8", "--batch_size=3", *extra])
    return ef.run(ef.ExtractConfig.from_flags(fv))


def _read(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _reference_layers(model_dir, word_ids, type_ids):
    from bert_tf.model.model_dir import load_encoder

    encoder = load_encoder(model_dir)
    ids = np.array([word_ids], np.int32)
    out = encoder({"input_word_ids": ids, "input_mask": np.ones_like(ids),
                   "input_type_ids": np.array([type_ids], np.int32)})
    return [np.asarray(x)[0] for x in out["encoder_outputs"]]


def test_json_lines_as_the_original(model_dir, input_file, tmp_path):
    output = tmp_path / "out.jsonl"
    assert _run(model_dir, input_file, output, "--layers=-1,-2,0") == 4
    records = _read(output)
    assert [r["linex_index"] for r in records] == [0, 1, 2, 3]
    assert list(records[0]) == ["linex_index", "features"]
    tokens = [[t["token"] for t in r["features"]] for r in records]
    # Single text cut to max_seq_length - 2 = 6 pieces; pair packed as [CLS] a [SEP] b [SEP];
    # an empty line is [CLS] [SEP].
    assert tokens[0] == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]
    assert tokens[1] == ["[CLS]", "caf", "##e", "dog", "[SEP]", "a", "b", "[SEP]"]
    assert tokens[2] == ["[CLS]", "[SEP]"]
    assert len(tokens[3]) == 8
    first = records[1]["features"][0]
    assert list(first) == ["token", "layers"]
    assert [layer["index"] for layer in first["layers"]] == [-1, -2, 0]
    assert all(len(layer["values"]) == H for layer in first["layers"])

    # Values are the encoder's layer outputs (rounded to 6 decimals), segment ids included.
    word_ids = [2, 10, 11, 12, 3, 14, 15, 3]
    reference = _reference_layers(model_dir, word_ids, [0, 0, 0, 0, 0, 1, 1, 1])
    for position, feature in enumerate(records[1]["features"]):
        for layer in feature["layers"]:
            np.testing.assert_allclose(layer["values"], reference[layer["index"]][position],
                                       atol=2e-6)
    assert all(len(str(v).split(".")[-1]) <= 6 for v in first["layers"][0]["values"]
               if "e" not in str(v))


def test_concat_layers(loaded, input_file):
    plain = _extract(loaded, input_file, [-1, -2, -3])
    concat = _extract(loaded, input_file, [-1, -2, -3], concat=True)
    for p, c in zip(plain, concat):
        for pt, ct in zip(p["features"], c["features"]):
            assert pt["token"] == ct["token"]
            (entry,) = ct["layers"]
            assert entry["index"] == [-1, -2, -3]
            assert entry["values"] == sum((layer["values"] for layer in pt["layers"]), [])


def test_bad_layers_and_lengths(loaded, input_file):
    with pytest.raises(ValueError, match="layer -4 does not exist in a model with 3"):
        ef.parse_layers("-1,-4", 3)
    with pytest.raises(ValueError, match="comma-separated integers"):
        ef.parse_layers("last", 3)
    encoder, tokenizer = loaded
    with pytest.raises(ValueError, match="max_position_embeddings=32"):
        next(ef.extract(encoder, tokenizer, ef.read_examples(input_file), [-1],
                        max_seq_length=64))


def test_packing_truncates_longest_first_and_keeps_singles_single(loaded):
    _, tokenizer = loaded
    examples = [ef.InputExample(0, "the cat sat on the mat", "dog a"),
                ef.InputExample(1, "the cat sat on the mat")]
    inputs = ef._packed_inputs(tokenizer, examples, 7)
    word = lambda *tokens: [VOCAB.index(t) for t in tokens]
    assert inputs["input_word_ids"].tolist() == [
        word("[CLS]", "the", "cat", "[SEP]", "dog", "a", "[SEP]"),
        word("[CLS]", "the", "cat", "sat", "on", "the", "[SEP]")]
    assert inputs["input_type_ids"].tolist() == [[0, 0, 0, 0, 1, 1, 1], [0] * 7]
    assert inputs["input_mask"].tolist() == [[1] * 7, [1] * 7]


def test_command_line_refuses_a_missing_layer(model_dir, input_file, tmp_path):
    # Runs the module as a program: its flags are defined only then.
    bad = run_command("bert_tf.extract_features", f"--input_file={input_file}",
                      f"--output_file={tmp_path / 'x'}", f"--init_checkpoint={model_dir}",
                      "--layers=7", timeout=300)
    assert bad.returncode != 0 and "layer 7 does not exist" in bad.stderr
    assert not (tmp_path / "x").exists()


def test_invalid_utf8_line_is_kept_without_its_bad_bytes(tmp_path):
    from bert_tf.extract_features import read_examples

    path = tmp_path / "in.txt"
    path.write_bytes(b"good line\nbad \xff line ||| pair\n")
    examples = read_examples(str(path))
    assert [(e.unique_id, e.text_a, e.text_b) for e in examples] == [
        (0, "good line", None), (1, "bad  line", "pair")]


def test_original_tpu_flags_and_a_distributed_forward_pass(model_dir, loaded, input_file):
    """The original's --use_tpu/--master/--num_tpu_cores/--use_one_hot_embeddings parse;
    --use_tpu builds the named TPU's strategy (factories injected: no TPU here); and the
    strategy path (batches padded and split among replicas, here 2 CPU replicas) gives
    the features of the plain path."""
    import tensorflow as tf

    from bert_tf.model.model_dir import load_encoder
    from bert_tf.training.strategy import original_tpu_strategy
    from tests.helpers.training import FakeTpu

    fv = setting_fields.parse_args(ef.define_flags, [
        "--input_file=a", "--output_file=b", "--init_checkpoint=c",
        "--use_tpu", "--master=grpc://10.0.0.2:8470", "--num_tpu_cores=8",
        "--use_one_hot_embeddings"])
    fake = FakeTpu()
    config = ef.ExtractConfig.from_flags(fv)
    assert original_tpu_strategy(config, **fake.factories()).kind == "strategy"
    assert fake.calls[0] == ("resolver", {"tpu": "grpc://10.0.0.2:8470", "zone": None,
                                          "project": None})
    assert original_tpu_strategy(dataclasses.replace(config, use_tpu=False)) is None

    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
        encoder = load_encoder(model_dir)
    _, tokenizer = loaded
    distributed = list(ef.extract(encoder, tokenizer, ef.read_examples(input_file), [-1, 0],
                                  max_seq_length=8, batch_size=3, strategy=strategy))
    plain = _extract(loaded, input_file, [-1, 0])
    assert [[t["token"] for t in r["features"]] for r in distributed] == [
        [t["token"] for t in r["features"]] for r in plain]
    for a, b in zip(distributed, plain):
        for ta, tb in zip(a["features"], b["features"]):
            for la, lb in zip(ta["layers"], tb["layers"]):
                np.testing.assert_allclose(la["values"], lb["values"], atol=2e-6)
