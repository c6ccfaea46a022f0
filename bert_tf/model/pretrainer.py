"""Models built on the encoder: the pretrainer (masked LM + next sentence)."""

from typing import Any, Dict

import keras

from bert_tf.core.constants import ENCODER, MASKED_LM, NEXT_SENTENCE
from bert_tf.layers import ClassificationHead, MaskedLMHead
from bert_tf.model.config import BertConfig
from bert_tf.model.encoder import BertEncoder


@keras.saving.register_keras_serializable(package="bert_tf")
class BertPretrainer(keras.Model):
    """Encoder + masked-LM head (tied to the word embeddings) + next-sentence head.

    Inputs: the encoder's three inputs plus `masked_lm_positions` [batch, P].
    Outputs: `mlm_logits` [batch, P, vocab] and `nsp_logits` [batch, 2], float32.
    The head attributes are named as the checkpoint children (`masked_lm`,
    `next_sentence`) that convert_checkpoint writes, so original heads load too.

    Example:

    >>> import numpy as np
    >>> cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
    ...                  num_attention_heads=2, intermediate_size=32)
    >>> model = BertPretrainer(cfg)
    >>> ids = np.array([[2, 7, 4, 3]])
    >>> out = model({"input_word_ids": ids, "input_mask": np.ones_like(ids),
    ...              "input_type_ids": np.zeros_like(ids),
    ...              "masked_lm_positions": np.array([[1, 2]])})
    >>> out["mlm_logits"].shape, out["nsp_logits"].shape
    (TensorShape([1, 2, 50]), TensorShape([1, 2]))
    """

    def __init__(self, config=None, encoder=None, **kwargs):
        super().__init__(**kwargs)
        if encoder is None:
            if isinstance(config, dict):
                config = BertConfig.from_dict(config)
            encoder = BertEncoder(config, dtype=self.dtype_policy, name="encoder")
        self.encoder = encoder
        config = encoder.config
        self.masked_lm = MaskedLMHead(
            vocab_size=config.vocab_size, hidden_size=config.hidden_size,
            hidden_act=config.hidden_act, initializer_range=config.initializer_range,
            layer_norm_eps=config.layer_norm_eps, embedding_weights=encoder.word_embeddings,
            dtype=self.dtype_policy, name="masked_lm")
        self.next_sentence = ClassificationHead(
            num_classes=2, hidden_size=config.hidden_size, dropout_rate=0.0,
            initializer_range=config.initializer_range, dtype=self.dtype_policy,
            name="next_sentence")
        self.masked_lm.build()
        self.next_sentence.build()
        self.built = True

    def call(self, inputs, training=None):
        outputs = self.encoder(inputs, training=training)
        return {
            "mlm_logits": self.masked_lm(outputs["sequence_output"],
                                         inputs["masked_lm_positions"]),
            "nsp_logits": self.next_sentence(outputs["pooled_output"], training=training),
        }

    def checkpoint_items(self) -> Dict[str, Any]:
        """The root children of a pretraining checkpoint (what pretrain saves and a
        start point restores; `bert_tf.model.model_dir` documents the layout).

        >>> cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
        ...                  num_attention_heads=2, intermediate_size=32)
        >>> list(BertPretrainer(cfg).checkpoint_items())
        ['encoder', 'masked_lm', 'next_sentence']
        """
        return {ENCODER: self.encoder, MASKED_LM: self.masked_lm,
                NEXT_SENTENCE: self.next_sentence}

    def get_config(self):
        return {"config": self.encoder.config.to_dict(), "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(BertConfig.from_dict(config.pop("config")), **config)
