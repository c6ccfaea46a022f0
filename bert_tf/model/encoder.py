"""BertEncoder: the BERT transformer stack as a Keras 3 model."""

import keras

from bert_tf.layers import BertEmbeddings, Pooler, TransformerBlock, attention_bias_from_mask
from bert_tf.model.config import BertConfig


@keras.saving.register_keras_serializable(package="bert_tf")
class BertEncoder(keras.Model):
    """Embeddings, `num_hidden_layers` transformer blocks and the pooler (docs/contracts.md §4).

    Inputs: a dict with `input_word_ids`, `input_mask` (1 = real token) and
    `input_type_ids`, each [batch, seq] integers; any seq up to
    `max_position_embeddings`. Outputs: a dict with `sequence_output` [batch, seq, H],
    `pooled_output` [batch, H], `encoder_outputs` (a list, one [batch, seq, H] tensor per
    layer, the last equal to `sequence_output`) and, when called with
    `output_attentions=True`, `attention_probs` (one [batch, heads, seq, seq] per layer).

    Example:

    >>> import numpy as np
    >>> cfg = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2,
    ...                  num_attention_heads=2, intermediate_size=32)
    >>> enc = BertEncoder(cfg)
    >>> ids = np.array([[2, 7, 3, 0]])
    >>> out = enc({"input_word_ids": ids, "input_mask": ids > 0,
    ...            "input_type_ids": np.zeros_like(ids)})
    >>> out["sequence_output"].shape, out["pooled_output"].shape, len(out["encoder_outputs"])
    (TensorShape([1, 4, 16]), TensorShape([1, 16]), 2)
    """

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = BertConfig.from_dict(config)
        self.config = config
        self.embeddings = BertEmbeddings(
            vocab_size=config.vocab_size, hidden_size=config.hidden_size,
            max_position_embeddings=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size, initializer_range=config.initializer_range,
            layer_norm_eps=config.layer_norm_eps, dropout_rate=config.hidden_dropout_prob,
            # float32 under any policy: the tables are gathered and summed, never
            # multiplied, so 16 bits would only lose precision; under a mixed policy Keras
            # would also cast each whole table to 16 bits before the gather, on every
            # call. The first block casts the (float32, LayerNormed) sum to its dtype.
            dtype="float32", name="embeddings")
        # Each block is its own attribute (not a list) so that tf.train.Checkpoint,
        # which does not follow Keras 3's tracked lists, saves it as `layer_<i>`.
        for i in range(config.num_hidden_layers):
            setattr(self, f"layer_{i}", TransformerBlock(
                hidden_size=config.hidden_size, num_heads=config.num_attention_heads,
                intermediate_size=config.intermediate_size, hidden_act=config.hidden_act,
                hidden_dropout_rate=config.hidden_dropout_prob,
                attention_dropout_rate=config.attention_probs_dropout_prob,
                initializer_range=config.initializer_range,
                layer_norm_eps=config.layer_norm_eps, dtype=self.dtype_policy,
                name=f"transformer_layer_{i}"))
        self.pooler = Pooler(config.hidden_size, initializer_range=config.initializer_range,
                             dtype=self.dtype_policy, name="pooler")
        self.build_all()

    def build_all(self):
        """Creates every variable now, so checkpoints restore without a first call."""
        self.embeddings.build()
        for block in self.transformer_layers:
            block.build((None, None, self.config.hidden_size))
        self.pooler.build((None, None, self.config.hidden_size))
        self.built = True

    @property
    def transformer_layers(self):
        """The transformer blocks, first to last."""
        return [getattr(self, f"layer_{i}") for i in range(self.config.num_hidden_layers)]

    @property
    def word_embeddings(self):
        """The [vocab, H] embedding variable (the masked-LM head's tied output matrix)."""
        return self.embeddings.word_embeddings

    def embed(self, inputs, training=None):
        """Inputs dict -> (the embeddings, the attention bias of its mask): what the blocks
        take (the serving graph's encoder starts here too)."""
        word_ids = inputs["input_word_ids"]
        mask = inputs.get("input_mask")
        if mask is None:
            mask = keras.ops.ones_like(word_ids)
        x = self.embeddings(word_ids, inputs.get("input_type_ids"), training=training)
        return x, attention_bias_from_mask(mask)

    def call(self, inputs, training=None, output_attentions=False):
        x, bias = self.embed(inputs, training=training)
        encoder_outputs, attention_probs = [], []
        for block in self.transformer_layers:
            x = block(x, bias, training=training, return_probs=output_attentions)
            if output_attentions:
                x, probs = x
                attention_probs.append(probs)
            encoder_outputs.append(x)
        outputs = {"sequence_output": x, "pooled_output": self.pooler(x),
                   "encoder_outputs": encoder_outputs}
        if output_attentions:
            outputs["attention_probs"] = attention_probs
        return outputs

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name,
                "dtype": keras.saving.serialize_keras_object(self.dtype_policy)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        dtype = config.pop("dtype", None)
        if isinstance(dtype, dict):
            dtype = keras.saving.deserialize_keras_object(dtype)
        return cls(BertConfig.from_dict(config.pop("config")), dtype=dtype, **config)
