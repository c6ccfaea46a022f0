"""The model and its directory (the Keras layers are bert_tf.layers):

    config.py      BertConfig (YAML / bert_config.json / Hugging Face config.json)
    encoder.py     BertEncoder: ids -> sequence and pooled outputs
    pretrainer.py  BertPretrainer: encoder + masked-LM and next-sentence heads
    model_dir.py   the model directory's files; resolve(): THE reading of --init_checkpoint
                   and its override flags; restore() with shape checks; load_encoder
    run_record.py  the training run a directory holds: compared before a run writes,
                   recorded once its start point is restored
"""
