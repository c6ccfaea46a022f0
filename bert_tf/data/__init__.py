"""tf.data readers: pretraining records (`pretraining.py`), task records (`finetuning.py`);
`records.py` lists record files and handles damaged records for both."""
