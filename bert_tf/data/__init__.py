"""tf.data readers: pretraining records (`pretraining.py`); task records live beside it."""
