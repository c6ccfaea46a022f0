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


def float32_layer_norm(epsilon: float, name: str = None) -> keras.layers.LayerNormalization:
    """A LayerNormalization with BERT's epsilon whose policy is plain float32."""
    return keras.layers.LayerNormalization(axis=-1, epsilon=epsilon, dtype="float32", name=name)
