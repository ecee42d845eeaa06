"""Refuse, before training, a batch that cannot fit in this node's memory (CPU runs).

The kernel's OOM killer ends such a run with SIGKILL: no traceback, no run_stop, no
summary. What is checked is a LOWER bound of a training step's memory, so a run is never
refused that could fit:

* weights, their gradients and one optimizer slot: 12 bytes per parameter (SGD with
  momentum keeps one slot, Adam two: more);
* the output of every counted layer (``Layer.outputs``, from the workload's
  ``flops.py``), kept for the backward pass, for each sample of the local batch, at 2
  bytes per element in bf16 and 4 in fp32 (activations, norms' and pools' outputs and the
  framework's workspace come on top).

Against: MemAvailable of /proc/meminfo (plus free swap) shared by the node's ranks. A batch
between this bound and the real need can still be killed; the run then leaves
summary.json's ``running`` record (sciperf.run.driver) and `sciperf launch` names the cause.
GPU runs are not checked here: the frameworks raise a catchable out-of-memory error there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sciperf.errors import SciperfError

BYTES_PER_PARAMETER = 12  # weight + gradient + one optimizer slot, fp32
BYTES_PER_OUTPUT = {"fp32": 4, "tf32": 4, "bf16": 2}
MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class Estimate:
    """Lower bounds in bytes: the model's (parameters) and one sample's (layer outputs)."""

    model: int
    per_sample: int

    def step(self, local_batch: int) -> int:
        """A training step of `local_batch` samples on one rank."""
        return self.model + local_batch * self.per_sample


def estimate(layers: list[Any], precision: str) -> Estimate:
    """The lower bounds of a model's counted layers (see the module docstring)."""
    params = sum(int(layer.params) for layer in layers)
    outputs = sum(int(getattr(layer, "outputs", 0)) for layer in layers)
    per_output = BYTES_PER_OUTPUT.get(precision, 2)
    return Estimate(params * BYTES_PER_PARAMETER, outputs * per_output)


def available(meminfo: Path = MEMINFO) -> int | None:
    """Bytes a new allocation can still get on this node (MemAvailable + SwapFree); None
    where the kernel does not say."""
    try:
        fields = dict(line.split(":", 1) for line in meminfo.read_text().splitlines()
                      if ":" in line)
        kib = int(fields["MemAvailable"].split()[0]) + int(fields.get("SwapFree", "0 kB")
                                                            .split()[0])
    except (OSError, KeyError, ValueError, IndexError):
        return None
    return kib * 1024


def check(layers: list[Any], precision: str, local_batch: int, ranks_on_node: int,
          what: str, free: int | None = None) -> None:
    """One line when `local_batch` samples per rank cannot fit: the bound, the memory
    each of the node's ranks has, and the largest batch the bound allows."""
    free = available() if free is None else free
    if free is None or not layers:
        return
    est = estimate(layers, precision)
    share = free // max(ranks_on_node, 1)
    need = est.step(local_batch)
    if need <= share:
        return
    fits = max((share - est.model) // est.per_sample, 0) if est.per_sample else 0
    raise SciperfError(
        f"{what}: a local batch of {local_batch} needs at least {need / 2**30:.1f} GiB per "
        f"rank ({est.per_sample / 2**20:.0f} MiB of layer outputs per sample in {precision}, "
        f"{est.model / 2**20:.0f} MiB for weights, gradients and optimizer), but each of "
        f"the {ranks_on_node} rank(s) on this node has {share / 2**30:.1f} GiB; at most "
        f"{fits} samples per rank fit — lower train.global_batch_size or use more ranks")
