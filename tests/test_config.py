"""BertConfig: the three source formats, parameter counts and bad configs."""

import json

import pytest

from bert_tf.model.config import BertConfig, ConfigError
from tests.helpers import REPO_ROOT

MODELS = REPO_ROOT / "official_configs" / "models"


@pytest.mark.parametrize("name,layers,hidden,heads", [
    ("tiny", 2, 128, 2), ("mini", 4, 256, 4), ("small", 4, 512, 8),
    ("medium", 8, 512, 8), ("base", 12, 768, 12), ("large", 24, 1024, 16)])
def test_official_sizes(name, layers, hidden, heads):
    cfg = BertConfig.from_file(str(MODELS / f"bert_{name}.yaml"))
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (layers, hidden, heads)
    assert cfg.intermediate_size == 4 * hidden
    assert (cfg.vocab_size, cfg.max_position_embeddings, cfg.type_vocab_size) == (30522, 512, 2)
    assert cfg.hidden_dropout_prob == cfg.attention_probs_dropout_prob == 0.1
    assert cfg.initializer_range == 0.02 and cfg.layer_norm_eps == 1e-12


def test_original_bert_config_json_loads_as_is(tmp_path):
    original = {"attention_probs_dropout_prob": 0.1, "directionality": "bidi",
                "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768,
                "initializer_range": 0.02, "intermediate_size": 3072,
                "max_position_embeddings": 512, "num_attention_heads": 12,
                "num_hidden_layers": 12, "pooler_fc_size": 768, "pooler_num_attention_heads": 12,
                "pooler_num_fc_layers": 3, "pooler_size_per_head": 128,
                "pooler_type": "first_token_transform", "type_vocab_size": 2,
                "vocab_size": 119547}
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(original))
    cfg = BertConfig.from_file(str(path))
    assert cfg.vocab_size == 119547 and cfg.hidden_act == "gelu"


def test_hugging_face_config_json(tmp_path):
    hf = {"architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu_new",
          "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
          "intermediate_size": 1536, "layer_norm_eps": 1e-12, "vocab_size": 30522,
          "position_embedding_type": "absolute", "torch_dtype": "float32"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf))
    cfg = BertConfig.from_file(str(tmp_path))  # a directory works too
    assert cfg.hidden_act == "gelu_approximate" and cfg.hidden_size == 384


def test_json_round_trip(tmp_path):
    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256, hidden_act="gelu_approximate")
    cfg.to_json_file(str(tmp_path / "bert_config.json"))
    assert BertConfig.from_file(str(tmp_path / "bert_config.json")) == cfg


@pytest.mark.parametrize("change,message", [
    ({"hidden_size": 100, "num_attention_heads": 12}, "multiple of `num_attention_heads`"),
    ({"num_hidden_layers": 0}, "`num_hidden_layers` must be a positive integer"),
    ({"hidden_size": "768"}, "`hidden_size` must be a positive integer"),
    ({"hidden_dropout_prob": 1.5}, "`hidden_dropout_prob` must be in [0, 1)"),
    ({"hidden_act": "gelu_fast"}, "`hidden_act` 'gelu_fast'"),
])
def test_bad_values_name_the_field(tmp_path, change, message):
    values = BertConfig().to_dict()
    values.update(change)
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError) as e:
        BertConfig.from_file(str(path))
    assert message in str(e.value) and str(path) in str(e.value)


def test_not_a_config_and_missing_and_unparsable(tmp_path):
    (tmp_path / "x.json").write_text('{"foo": 1}')
    with pytest.raises(ConfigError, match="missing hidden_size"):
        BertConfig.from_file(str(tmp_path / "x.json"))
    with pytest.raises(ConfigError, match="not found"):
        BertConfig.from_file(str(tmp_path / "nope.json"))
    (tmp_path / "y.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot parse"):
        BertConfig.from_file(str(tmp_path / "y.json"))
    with pytest.raises(ConfigError, match="no bert_config.json"):
        BertConfig.from_file(str(tmp_path))


def test_yaml_exponent_without_dot_is_a_number(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("hidden_size: 64\nnum_hidden_layers: 1\nnum_attention_heads: 2\n"
                    "layer_norm_eps: 1e-12\n")
    cfg = BertConfig.from_file(str(path))
    assert cfg.layer_norm_eps == 1e-12 and cfg.intermediate_size == 256


def test_misspelled_field_is_refused_with_the_likely_name(tmp_path):
    values = BertConfig().to_dict()
    values["vocab_szie"] = values.pop("vocab_size")
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError, match="unknown field `vocab_szie`: did you mean `vocab_size`"):
        BertConfig.from_file(str(path))


def test_relative_position_embeddings_are_refused(tmp_path):
    values = dict(BertConfig().to_dict(), position_embedding_type="relative_key")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ConfigError, match="position_embedding_type='relative_key'"):
        BertConfig.from_file(str(path))
