"""bert_tf: BERT (Devlin et al., 2018) for TensorFlow 2 / Keras 3.

The public names (docs/contracts.md §4) are imported lazily, so that `import bert_tf` stays cheap
for the offline data tools:

    import bert_tf
    cfg = bert_tf.BertConfig.from_file("official_configs/models/bert_base.yaml")
    encoder = bert_tf.BertEncoder(cfg)
    encoder = bert_tf.load_encoder(DIR)
    tok = bert_tf.BertTokenizer(vocab_file, do_lower_case=True)
"""

import importlib
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

_PUBLIC = {
    "BertConfig": "bert_tf.model.config",
    "BertEncoder": "bert_tf.model.encoder",
    "BertPretrainer": "bert_tf.model.pretrainer",
    "BertTokenizer": "bert_tf.text.tokenization",
    "load_encoder": "bert_tf.model.model_dir",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'bert_tf' has no attribute {name!r}")
