"""A model directory written in a serving format (`python -m bert_tf.export_model`):

    saved_model.py       TF Serving SavedModel: versioned atomic layout, warmup requests,
                         the bfloat16 copy of --mixed_precision
    export_converted.py  what the converted formats share (scratch SavedModel, layout,
                         model_info.json)
    export_litert.py     LiteRT (TFLite), export_onnx.py ONNX, export_openvino.py OpenVINO IR
"""
