"""tinyreg's model in TensorFlow: one dense layer, named as its canonical layer."""

from __future__ import annotations

import keras
from sciperf_tinyreg.workload.spec import LAYER, ModelSpec


class TinyReg(keras.Model):
    """x (N, inputs) → (N, 1)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.dense = keras.layers.Dense(1, name=LAYER)
        self.dense.build((None, int(spec.inputs)))

    def call(self, x, training: bool = False):  # noqa: ANN001, ANN201 - Keras API
        return self.dense(x)
