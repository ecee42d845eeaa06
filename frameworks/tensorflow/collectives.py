"""Data parallelism from outside the model: Horovod for TensorFlow (mirror of PyTorch's).

TensorFlow's native multi-worker strategy does not fit a custom loop that must mirror
the PyTorch step op for op, so multi-rank TensorFlow runs use Horovod (MPI or gloo);
one process needs nothing. Rank facts come from ``sciperf.distributed.discover``.
"""

from __future__ import annotations

import tensorflow as tf

from sciperf.distributed import RankInfo, init_horovod
from sciperf.errors import SciperfError

# what a lost peer looks like in Horovod's errors
DIED_SIGNS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
TIMEOUT_SIGNS = ("Timed out", "timed out", "stall")
# Horovod shuts down at once when a peer dies, and after its stall check when one hangs
SHUTDOWN_SIGNS = ("Horovod has been shut down",)
PEER_SIGNS = DIED_SIGNS + TIMEOUT_SIGNS + SHUTDOWN_SIGNS


class Comm:
    """Collectives of one data-parallel group (a no-op group for one process)."""

    def __init__(self, info: RankInfo, backend: str, device: object, timeout_s: int):
        self.info, self.kind, self.device = info, backend, device
        self.timeout_s = timeout_s
        self.hvd = None
        if backend == "native":
            if info.world > 1:
                raise SciperfError(
                    f"framework=tensorflow with {info.world} ranks needs "
                    "distributed.backend=horovod (native TF multi-worker is not supported)")
            return
        self.hvd = _horovod()
        init_horovod(self.hvd, info, timeout_s)
        if (self.hvd.rank(), self.hvd.size()) != (info.rank, info.world):
            raise SciperfError(
                f"Horovod sees rank {self.hvd.rank()}/{self.hvd.size()} but the launcher "
                f"environment ({info.source}) says {info.rank}/{info.world}")

    @property
    def active(self) -> bool:
        """True when there is more than one rank to talk to."""
        return self.info.world > 1

    def broadcast_variables(self, variables: list) -> None:
        """Start every replica from rank 0's weights (Keras 3: pass the backing values)."""
        if self.hvd is not None:
            self.hvd.broadcast_variables([getattr(v, "value", v) for v in variables],
                                         root_rank=0)

    def wrap_tape(self, tape: tf.GradientTape) -> tf.GradientTape:
        """Horovod averages gradients in `tape.gradient`; one process keeps the tape."""
        return self.hvd.DistributedGradientTape(tape) if self.hvd is not None else tape

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks (float64)."""
        if not self.active:
            return values
        total = self.hvd.allreduce(tf.constant(values, tf.float64), op=self.hvd.Sum,
                                   name="sciperf.sum")
        return [float(v) for v in total.numpy()]

    def average(self, variables: list) -> None:
        """In-place mean over ranks of each variable (e.g. BN moving statistics)."""
        if not self.active:
            return
        for i, var in enumerate(variables):
            var.assign(self.hvd.allreduce(tf.convert_to_tensor(var), op=self.hvd.Average,
                                          name=f"sciperf.avg.{i}"))

    def barrier(self) -> None:
        """Wait for every rank (run_start / run_stop are taken after one)."""
        if self.active:
            self.hvd.allreduce(tf.zeros(1), name="sciperf.barrier")

    def close(self) -> None:
        """Nothing to release: Horovod shuts down at process exit."""
        return None

    def peer_lost(self, exc: BaseException) -> str | None:
        """One line when `exc` says a peer rank died or stopped answering (Horovod's
        shutdown, its stall check, a broken connection); None for anything else. The
        timeout is named only when one ran out: a death is seen at once."""
        text = str(exc)
        if not self.active or not any(sign in text for sign in PEER_SIGNS):
            return None
        first = text.strip().splitlines()[0][:200]
        rank = self.info.rank
        if any(sign in text for sign in DIED_SIGNS):
            return f"a peer rank died (it closed its connection); rank {rank} stopped too ({first})"
        if any(sign in text for sign in SHUTDOWN_SIGNS):
            return (f"Horovod shut down: a peer rank died or stalled; rank {rank} stopped too "
                    f"({first})")
        return (f"a peer rank stopped responding (hung, or its node went down); rank {rank} "
                f"gave up after distributed.timeout_s={self.timeout_s} ({first})")


def _horovod():
    """horovod.tensorflow, or a clear line on how to get it."""
    try:
        import horovod.tensorflow as hvd
    except ImportError as exc:
        raise SciperfError(
            "distributed.backend=horovod needs Horovod (containers/install.sh --horovod)"
        ) from exc
    return hvd
