"""OC20 in TensorFlow: the hooks of the one backend template (``sciperf_tensorflow.backend``).

The PyTorch backend's mirror (spec/oc20.md §3): DimeNet++ whose output is the forces
F = −∂E/∂pos from an inner tape on the positions, so the outer tape of the training step
differentiates the force loss through it (double backward); AdamW written out as torch's
(``optim.AdamFamily``: betas, eps 1e-8, decay on every variable); the reference's DDP loss
— Σ|F̂ − F/σ| over this rank's free atoms' components × ``spec.loss_scale`` (force
coefficient × world ÷ the free atoms of the global batch), that factor computed from the
count all-reduced before each step (outside the compiled step) and fed in with the labels;
the force MAE in eV/Å over free atoms as the metric. One compiled step serves every batch
size (open input signature).
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from sciperf.workloads.oc20 import spec
from sciperf_tensorflow.backend import WorkloadBackend
from sciperf_tensorflow.optim import AdamFamily
from sciperf_tensorflow.workloads.oc20.model import DimeNetPP, batch_signature, energy_and_forces

Batch = dict[str, tf.Tensor]
LOSS_SCALE = "loss_scale"  # the label entry holding spec.loss_scale of the global batch


def force_l1_sum(forces: tf.Tensor, target: tf.Tensor, fixed: tf.Tensor,
                 scale: float = 1.0) -> tuple[tf.Tensor, tf.Tensor]:
    """(Σ|forces·scale − target| over free atoms' components, free-atom count)."""
    free = tf.cast(tf.equal(fixed, 0.0), tf.float32)[:, None]
    diff = tf.abs(tf.cast(forces, tf.float32) * scale - target) * free
    return tf.reduce_sum(diff), tf.reduce_sum(free)


class OC20Backend(WorkloadBackend):
    """OC20's hooks: DimeNet++ forces, AdamW, the reference's force loss and MAE."""

    def build_model(self, model_spec: spec.ModelSpec) -> keras.Model:
        """DimeNet++ of `model_spec` (the reference's initialisation), variables built."""
        return DimeNetPP(model_spec)

    def build_optimizer(self, variables: list) -> AdamFamily:
        """torch's AdamW, written out; the LR is set before every step."""
        o = self.cfg.opt
        return AdamFamily(variables, "AdamW", float(o.lr), spec.ADAMW_BETAS, spec.ADAMW_EPS,
                          float(o.weight_decay))

    def input_signature(self) -> list:
        """Open sizes: one trace for every graph batch."""
        labels = {"force": tf.TensorSpec([None, 3], tf.float32),
                  "fixed": tf.TensorSpec([None], tf.float32),
                  "energy": tf.TensorSpec([None], tf.float32),
                  LOSS_SCALE: tf.TensorSpec([], tf.float32)}
        return [batch_signature(), labels]

    def forward(self, x: Batch, training: bool) -> tf.Tensor:
        """Normalised forces [N, 3]."""
        _, forces = energy_and_forces(self.model, x, training=training)
        return forces

    def batch_size(self, x: Batch) -> int:
        """Structures in the batch."""
        return int(x["cell"].shape[0])

    def batches(self, loader: Any, epoch: int):  # noqa: ANN201 - iterator of (x, y)
        """Graph batches, each with the loss factor of its global batch (`spec.loss_scale`
        of the free-atom count all-reduced here, eagerly; validation batches carry the
        factor of their own count, unused)."""
        world = self.ctx.info.world
        for x, y in super().batches(loader, epoch):
            local = float(tf.reduce_sum(tf.cast(tf.equal(y["fixed"], 0.0), tf.float32)))
            (total,) = self.comm.sum([local]) if loader is self.train_loader else (local,)
            scale = spec.loss_scale(world, int(total))
            yield x, {**y, LOSS_SCALE: tf.constant(scale, tf.float32)}

    def loss_fn(self, out: tf.Tensor, y: Batch) -> tf.Tensor:
        """The reference's DDP force loss (see the module docstring); fp32."""
        l1, _ = force_l1_sum(out, y["force"] / float(self.cfg.data.force_std), y["fixed"])
        return l1 * y[LOSS_SCALE]

    def metric_sums(self, out: tf.Tensor, y: Batch) -> tuple[tf.Tensor, tf.Tensor]:
        """(Σ|ΔF| in eV/Å over free atoms' components, their count)."""
        l1, free = force_l1_sum(out, y["force"], y["fixed"], float(self.cfg.data.force_std))
        return l1, 3.0 * free
