"""Activation functions by their config name.

`gelu` is the exact erf form and `gelu_approximate`/`gelu_new` the tanh form
(docs/contracts.md §1); Keras' own defaults differ between `keras.activations.gelu` and
`keras.ops.gelu`, so the form is always passed explicitly here.

Example:

>>> import numpy as np
>>> f = get_activation("gelu_approximate")
>>> round(float(f(np.float32(1.0))), 4)
0.8412
"""

import functools

import keras


def _gelu_exact(x):
    return keras.ops.gelu(x, approximate=False)


def _gelu_tanh(x):
    return keras.ops.gelu(x, approximate=True)


_ACTIVATIONS = {
    "gelu": _gelu_exact,
    "gelu_approximate": _gelu_tanh,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "relu": keras.ops.relu,
    "tanh": keras.ops.tanh,
    "swish": keras.ops.silu,
    "silu": keras.ops.silu,
}


@functools.cache
def get_activation(name: str):
    """Returns the activation function for a `hidden_act` config value."""
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; expected one of "
                         f"{', '.join(sorted(_ACTIVATIONS))}") from None
