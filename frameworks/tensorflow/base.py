"""What every tensorflow workload backend shares: the collectives' wrappers and the reports."""

from __future__ import annotations

from typing import Any

from sciperf.backends import Backend
from sciperf_tensorflow import runtime


class TFBackendBase(Backend):
    """Barrier, teardown, peak FLOP/s and versions, the same for every workload.

    Subclasses set ``self.comm`` and ``self.device`` in ``setup``.
    """

    comm: Any
    device: Any

    def barrier(self) -> None:
        """All ranks reach this point (before run_start and run_stop)."""
        self.comm.barrier()

    def close(self) -> None:
        """Release the process group."""
        self.comm.close()

    def peak_flops(self, precision: str) -> float:
        """Measured matmul FLOP/s on this device (the roofline ceiling for the bench)."""
        return runtime.matmul_flops(self.device, precision)

    def info(self) -> dict[str, str]:
        """TensorFlow/Keras versions and device."""
        return runtime.versions()
