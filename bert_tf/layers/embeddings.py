"""BERT input embeddings: word + position + token type, then LayerNorm and dropout."""

import keras

from bert_tf.layers.dropout import ReplicaDropout
from bert_tf.layers.normalization import float32_layer_norm


@keras.saving.register_keras_serializable(package="bert_tf")
class BertEmbeddings(keras.layers.Layer):
    """Sums word, absolute-position and token-type embeddings (the original's layout).

    The word-embedding matrix is exposed as `word_embeddings` so that the masked-LM
    head can tie its output projection to it.

    Example:

    >>> import numpy as np
    >>> layer = BertEmbeddings(vocab_size=100, hidden_size=16, max_position_embeddings=32)
    >>> layer(np.array([[2, 5, 7]]), np.array([[0, 0, 1]])).shape
    TensorShape([1, 3, 16])
    """

    def __init__(self, vocab_size, hidden_size, max_position_embeddings=512,
                 type_vocab_size=2, initializer_range=0.02, layer_norm_eps=1e-12,
                 dropout_rate=0.1, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.dropout_rate = dropout_rate
        self.layer_norm = float32_layer_norm(layer_norm_eps, name="layer_norm")
        self.dropout = ReplicaDropout(dropout_rate)

    def build(self, input_shape=None):
        init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        self.word_embeddings = self.add_weight(
            name="word_embeddings", shape=(self.vocab_size, self.hidden_size), initializer=init)
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_position_embeddings, self.hidden_size),
            initializer=init)
        self.token_type_embeddings = self.add_weight(
            name="token_type_embeddings", shape=(self.type_vocab_size, self.hidden_size),
            initializer=init)
        self.layer_norm.build((None, None, self.hidden_size))
        self.built = True

    def call(self, input_word_ids, input_type_ids=None, training=None):
        if not self.built:
            self.build()
        seq_length = keras.ops.shape(input_word_ids)[1]
        if isinstance(seq_length, int) and seq_length > self.max_position_embeddings:
            raise ValueError(f"input_word_ids has {seq_length} positions, more than "
                             f"max_position_embeddings={self.max_position_embeddings}: "
                             f"truncate the inputs (--max_seq_length <= "
                             f"{self.max_position_embeddings})")
        words = keras.ops.take(self.word_embeddings, input_word_ids, axis=0)
        positions = self.position_embeddings[:seq_length]
        x = words + keras.ops.expand_dims(positions, 0)
        if input_type_ids is None:
            x = x + self.token_type_embeddings[0]
        else:
            x = x + keras.ops.take(self.token_type_embeddings, input_type_ids, axis=0)
        x = keras.ops.cast(self.layer_norm(x), self.compute_dtype)
        return self.dropout(x, training=training)

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                      max_position_embeddings=self.max_position_embeddings,
                      type_vocab_size=self.type_vocab_size,
                      initializer_range=self.initializer_range,
                      layer_norm_eps=self.layer_norm_eps, dropout_rate=self.dropout_rate)
        return config
