"""Weight import from original TF1 / Hugging Face / keras-hub BERT checkpoints, and export
to each.

One module per concept:

    names.py        the name mappings (ours <-> TF1 <-> Hugging Face), plain data, TF-free
    weights.py      BertWeights (a model in memory, any format's reader returns one and
                    any writer takes one), the shared reader checks, read_model_dir and
                    build_model (the checkpoint children `model_dir.write_model_dir` saves)
    tf1.py          read_tf1_checkpoint / write_tf1_checkpoint (google-research/bert)
    huggingface.py  read_huggingface / write_huggingface (transformers' BertModel / BertFor*,
                    task heads both ways)
    keras_hub.py    read_keras_hub / write_keras_hub (keras-hub presets: BertBackbone,
                    BertTextClassifier)

`python -m bert_tf.convert_checkpoint` runs a reader and a writer.
"""
