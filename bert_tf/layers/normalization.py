"""LayerNorm that always computes in float32.

Under `mixed_bfloat16`/`mixed_float16` the mean and variance of a 768-wide vector lose
too much precision in 16 bits; BERT's epsilon (1e-12) is also below float16's range.
Callers cast the float32 result back to their compute dtype.

Example:

>>> import numpy as np
>>> ln = float32_layer_norm(1e-12)
>>> ln(np.ones((1, 2, 4), "float32")).dtype
tf.float32
"""

import keras
import tensorflow as tf


def float32_layer_norm(epsilon: float, name: str = None) -> keras.layers.LayerNormalization:
    """A LayerNormalization with BERT's epsilon whose policy is plain float32."""
    return keras.layers.LayerNormalization(axis=-1, epsilon=epsilon, dtype="float32", name=name)


def layer_norm_as_one_kernel(layer: keras.layers.LayerNormalization, x):
    """`layer(x)` (a built LayerNormalization over the last axis, centred and scaled) in
    the form TensorFlow's oneDNN graph rewrite (grappler's remapper) runs as one
    `_MklLayerNorm` kernel: Keras 2's, a training-mode FusedBatchNormV3 over
    [1, rows, hidden, 1] then gamma and beta. Keras 3's form is 13 element-wise ops and
    reductions, each a pass over the tensor (MiniLM, 32 x 128: 13 LayerNorms 70 ms of
    kernel time against 9 ms). The raw op keeps BERT's epsilon (the Python wrapper would
    raise it to 1e-5). Its variance is computed differently from Keras 3's: up to ~1e-5
    apart in float32 (tested), so the serving graph uses it where bfloat16's rounding
    dwarfs that (`bert_tf.serving.graph.InferenceBlock`); float32 exports, which the
    converted formats are made from, keep the layer's own form. bfloat16 exports are for
    CPUs (docs/serving.md): on a GPU, cuDNN's batch norm would raise epsilon to 1e-5.

    >>> import numpy as np
    >>> norm = float32_layer_norm(1e-12)
    >>> norm.build((None, 4))
    >>> x = np.float32([[[1, 2, 3, 4], [0, 0, 1, 9]]])
    >>> fn = tf.function(lambda x: layer_norm_as_one_kernel(norm, x))
    >>> bool(np.abs(fn(x) - norm(x)).max() < 1e-5)
    True
    """
    x = tf.convert_to_tensor(x, tf.float32)
    shape = tf.shape(x)
    rows = tf.reshape(tf.reduce_prod(shape[:-1]), [1])
    normalized = tf.raw_ops.FusedBatchNormV3(
        x=tf.reshape(x, tf.concat([[1], rows, [x.shape[-1]], [1]], 0)),
        scale=tf.fill(rows, 1.0), offset=tf.fill(rows, 0.0),
        mean=tf.constant([], tf.float32), variance=tf.constant([], tf.float32),
        epsilon=layer.epsilon, data_format="NCHW", is_training=True)[0]
    return tf.reshape(normalized, shape) * layer.gamma + layer.beta
