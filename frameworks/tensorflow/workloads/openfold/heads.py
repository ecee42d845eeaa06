"""The four output heads of ``initial_training`` in Keras 3 (AF2 supplement §1.9; no
TM-score head): pLDDT on the structure module's final single, distogram on the pair
(symmetrised by adding the transpose), masked MSA on the clustered MSA rows,
experimentally resolved on the Evoformer's single representation — the mirror of
``sciperf_pytorch.workloads.openfold.heads``.

Under a mixed bf16 policy the logits are in the compute dtype; the pLDDT expectation
(softmax and bin centres) is taken in at least float32, where torch's CUDA autocast
also runs the reference's softmax.
"""

from __future__ import annotations

import tensorflow as tf

from sciperf.workloads.openfold.sizes import ModelSpec
from sciperf_tensorflow.workloads.openfold.primitives import (
    Block,
    Dense,
    at_least_fp32,
    child,
    layer_norm,
)

__all__ = ["AuxiliaryHeads", "expected_plddt"]


class PerResidueLDDTCaPredictor(Block):
    def __init__(self, spec: ModelSpec, path: str) -> None:
        super().__init__(name=path)
        self.layer_norm = layer_norm(spec.c_s, child(path, "layer_norm"), spec.layer_norm_eps)
        self.linear_1 = Dense(spec.c_s, spec.plddt_c_hidden, child(path, "linear_1"),
                              init="relu")
        self.linear_2 = Dense(spec.plddt_c_hidden, spec.plddt_c_hidden,
                              child(path, "linear_2"), init="relu")
        self.linear_3 = Dense(spec.plddt_c_hidden, spec.plddt_num_bins,
                              child(path, "linear_3"), init="final")

    def call(self, s: tf.Tensor) -> tf.Tensor:
        s = tf.nn.relu(self.linear_1(self.layer_norm(s)))
        return self.linear_3(tf.nn.relu(self.linear_2(s)))


class DistogramHead(Block):
    def __init__(self, spec: ModelSpec, path: str) -> None:
        super().__init__(name=path)
        self.linear = Dense(spec.c_z, spec.distogram_num_bins, child(path, "linear"),
                            init="final")

    def call(self, z: tf.Tensor) -> tf.Tensor:
        logits = self.linear(z)
        return logits + _swap_pair_axes(logits)


class _LinearHead(Block):
    def __init__(self, fin: int, fout: int, path: str) -> None:
        super().__init__(name=path)
        self.linear = Dense(fin, fout, child(path, "linear"), init="final")

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return self.linear(x)


def expected_plddt(logits: tf.Tensor) -> tf.Tensor:
    """pLDDT in [0, 100]: the expectation over bin centres (b + ½)/num_bins, in at least
    float32."""
    wide = at_least_fp32(logits.dtype)
    bins = logits.shape[-1]  # static: the head's output width
    centres = (tf.range(bins, dtype=wide) + 0.5) / bins
    probs = tf.nn.softmax(tf.cast(logits, wide), axis=-1)
    return tf.reduce_sum(probs * centres, axis=-1) * 100


class AuxiliaryHeads(Block):
    def __init__(self, spec: ModelSpec, path: str) -> None:
        super().__init__(name=path)
        self.plddt = PerResidueLDDTCaPredictor(spec, child(path, "plddt"))
        self.distogram = DistogramHead(spec, child(path, "distogram"))
        self.masked_msa = _LinearHead(spec.c_m, spec.msa_classes, child(path, "masked_msa"))
        self.experimentally_resolved = _LinearHead(spec.c_s, spec.num_atom_types,
                                                   child(path, "experimentally_resolved"))

    def call(self, sm_single: tf.Tensor, pair: tf.Tensor, msa: tf.Tensor,
             single: tf.Tensor) -> dict[str, tf.Tensor]:
        lddt_logits = self.plddt(sm_single)
        return {"lddt_logits": lddt_logits,
                "plddt": expected_plddt(lddt_logits),
                "distogram_logits": self.distogram(pair),
                "masked_msa_logits": self.masked_msa(msa),
                "experimentally_resolved_logits": self.experimentally_resolved(single)}


def _swap_pair_axes(x: tf.Tensor) -> tf.Tensor:
    """[*, N_i, N_j, C] → [*, N_j, N_i, C] (the rank is static, the sizes need not be)."""
    rank = x.shape.rank
    perm = [*range(rank - 3), rank - 2, rank - 3, rank - 1]
    return tf.transpose(x, perm)
