"""Keras layers that make up BERT: one layer per file."""

from bert_tf.layers.activations import get_activation
from bert_tf.layers.attention import BertSelfAttention, attention_bias_from_mask
from bert_tf.layers.dropout import ReplicaDropout
from bert_tf.layers.embeddings import BertEmbeddings
from bert_tf.layers.heads import ClassificationHead, MaskedLMHead, gather_positions
from bert_tf.layers.normalization import float32_layer_norm
from bert_tf.layers.pooler import Pooler
from bert_tf.layers.transformer import TransformerBlock

__all__ = ["BertEmbeddings", "BertSelfAttention", "ClassificationHead", "MaskedLMHead",
           "Pooler", "ReplicaDropout", "TransformerBlock", "attention_bias_from_mask",
           "float32_layer_norm", "gather_positions", "get_activation"]
