"""Data parallelism from outside the model: torch DDP (gloo/NCCL) or Horovod.

The backend asks this module to wrap its single-device model and optimizer and for the
few collectives the driver needs (sum, barrier). Rank facts come from the ONE discovery
function in ``sciperf.distributed``; a lost peer raises after `distributed.timeout_s`
instead of hanging, so the job ends with `run_stop aborted`.
"""

from __future__ import annotations

import datetime
import re
import time

import torch
import torch.distributed as dist

from sciperf.distributed import RankInfo, init_horovod
from sciperf.errors import PeerLostError, SciperfError

# what a lost peer looks like in the collectives' errors (gloo, NCCL, Horovod): a peer that
# died closed its sockets (its kernel did), one that hung (or whose node went down) is only
# seen when the wait runs out
DIED_SIGNS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
TIMEOUT_SIGNS = ("Timed out", "timed out", "stall", "NCCL communicator was aborted")
# Horovod shuts down at once when a peer dies, and after its stall check when one hangs
SHUTDOWN_SIGNS = ("Horovod has been shut down",)
PEER_SIGNS = DIED_SIGNS + TIMEOUT_SIGNS + SHUTDOWN_SIGNS
# rank 0's TCPStore when not every rank connected in time: "… 1/2 clients joined."
# long enough for a gloo worker to be scheduled and finish destroying its last collective
# (microseconds of work once it holds the GIL) on a loaded machine, short beside a
# process's exit
WORKERS_IDLE_S = 0.2
JOINED = re.compile(r"(\d+)/(\d+) clients joined")


class Comm:
    """Collectives of one data-parallel group (a no-op group for one process)."""

    def __init__(self, info: RankInfo, backend: str, device: torch.device, timeout_s: int,
                 single_rank_group: bool = False):
        self.info, self.kind, self.device = info, backend, device
        self.timeout_s = timeout_s
        self.hvd = None
        # a group of one: DDP and the collectives run although nobody else listens
        self.grouped = single_rank_group and backend == "native"
        if info.world == 1 and backend == "native" and not self.grouped:
            return
        if backend == "horovod":
            self.hvd = _horovod()
            init_horovod(self.hvd, info, timeout_s)
            if (self.hvd.rank(), self.hvd.size()) != (info.rank, info.world):
                raise SciperfError(
                    f"Horovod sees rank {self.hvd.rank()}/{self.hvd.size()} but the launcher "
                    f"environment ({info.source}) says {info.rank}/{info.world}")
            return
        try:
            dist.init_process_group(
                "nccl" if device.type == "cuda" else "gloo",
                init_method=f"tcp://{info.master_addr}:{info.master_port}",
                rank=info.rank, world_size=info.world,
                timeout=datetime.timedelta(seconds=timeout_s))
        except dist.DistError as exc:
            # a busy port or a rank missing at the rendezvous: a 14-frame traceback before
            raise self._rendezvous_error(exc) from None

    def _rendezvous_error(self, exc: Exception) -> Exception:
        """One line for what went wrong in init_process_group's rendezvous, else `exc`."""
        info, text = self.info, str(exc)
        where = f"{info.master_addr}:{info.master_port}"
        if "EADDRINUSE" in text or "address already in use" in text:
            # another job's rendezvous holds the port
            return SciperfError(f"MASTER_PORT={info.master_port} on {info.master_addr} is in "
                                "use (another job?): give this job another port "
                                "(MASTER_PORT=…)")
        if joined := JOINED.search(text):  # rank 0, hosting the store, waited for the others
            return PeerLostError(
                f"only {joined.group(1)} of {joined.group(2)} ranks joined the rendezvous at "
                f"{where} within distributed.timeout_s={self.timeout_s} (a rank hung or "
                "never started)")
        if "timed out" in text.lower():  # another rank: rank 0's store never answered
            return PeerLostError(
                f"rank {info.rank} could not reach the rendezvous at {where} within "
                f"distributed.timeout_s={self.timeout_s} (rank 0 hung, never started, or "
                "MASTER_ADDR/MASTER_PORT point elsewhere)")
        return exc

    @property
    def active(self) -> bool:
        """True when there is more than one rank to talk to (or a group of one asked)."""
        return self.info.world > 1 or self.grouped

    def wrap_model(self, model: torch.nn.Module,
                   broadcast_buffers: bool = True) -> torch.nn.Module:
        """DDP for native multi-rank runs; Horovod and single rank keep the module.

        A workload may pass broadcast_buffers=False (as its reference does): each rank then
        keeps its own BN running statistics during an epoch and :meth:`average` merges them
        after it.
        """
        if self.kind == "native" and self.active:
            ids = [self.device.index] if self.device.type == "cuda" else None
            return torch.nn.parallel.DistributedDataParallel(
                model, device_ids=ids, broadcast_buffers=broadcast_buffers)
        if self.hvd is not None:
            # Horovod's collectives take dense tensors only: weights go back to the default
            # layout (their .grad follows it). Inputs stay channels-last, and the conv
            # kernels still pick the channels-last path when the input is channels-last.
            model.to(memory_format=torch.contiguous_format)
            self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        return model

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module,
                       backward_passes: int = 1) -> torch.optim.Optimizer:
        """Horovod averages gradients inside the optimizer; DDP already did in backward.
        Under gradient accumulation Horovod sums `backward_passes` local backward passes
        and all-reduces once per optimizer step."""
        if self.hvd is None:
            return optimizer
        wrapped = self.hvd.DistributedOptimizer(optimizer,
                                                named_parameters=model.named_parameters(),
                                                backward_passes_per_step=backward_passes)
        if wrapped.state_dict()["state"]:  # a fresh optimizer has nothing to share, and
            # Horovod would first "initialise" it with a zero-gradient step (Adam's step
            # count 1, decoupled weight decay applied once): not what one rank trains
            self.hvd.broadcast_optimizer_state(wrapped, root_rank=0)
        return wrapped

    def subgroup(self, size: int) -> dist.ProcessGroup:
        """This rank's group of `size` consecutive ranks: [0..size-1], [size..2·size-1], …

        ``new_group`` is collective over the whole world, so every rank creates every
        group, in the same order, and keeps its own. A group the size of the world is
        still a new one: its collectives (SyncBN statistics inside forward and backward)
        then never interleave with DDP's gradient all-reduces on the default group.
        Native backend only (Horovod has no process groups here).
        """
        if self.kind != "native" or not self.active:
            raise SciperfError(f"rank groups of {size} need distributed.backend=native "
                               f"and more than one rank")
        world = self.info.world
        if size < 1 or world % size:
            raise SciperfError(f"a rank group of {size} does not divide the {world} ranks")
        mine = None
        for first in range(0, world, size):
            group = dist.new_group(list(range(first, first + size)))
            if first <= self.info.rank < first + size:
                mine = group
        return mine

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks (float64 on the host)."""
        if not self.active:
            return values
        t = torch.tensor(values, dtype=torch.float64)
        if self.hvd is not None:
            t = self.hvd.allreduce(t, op=self.hvd.Sum, name="sciperf.sum")
        else:
            t = t.to(self.device) if self.device.type == "cuda" else t
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return [float(v) for v in t.cpu()]

    @torch.no_grad()
    def average(self, tensors: list[torch.Tensor]) -> None:
        """In-place mean over ranks of each tensor (e.g. BN running statistics)."""
        if not self.active or not tensors:
            return
        for i, t in enumerate(tensors):
            if self.hvd is not None:
                t.copy_(self.hvd.allreduce(t, op=self.hvd.Average, name=f"sciperf.avg.{i}"))
            else:
                dist.all_reduce(t, op=dist.ReduceOp.SUM)
                t.div_(self.info.world)

    def barrier(self) -> None:
        """Wait for every rank (run_start / run_stop are taken after one)."""
        if not self.active:
            return
        if self.hvd is not None:
            self.hvd.allreduce(torch.zeros(1), name="sciperf.barrier")
        else:
            dist.barrier()

    def peer_lost(self, exc: BaseException) -> str | None:
        """One line when `exc` says a peer rank died or stopped answering (gloo's timeout or
        closed connection, NCCL's watchdog, Horovod's shutdown); None for anything else.
        The timeout is named only when it ran out: a death is seen at once (the peer's
        kernel closes its sockets), and "gave up after 45 s" two seconds after it misled."""
        text = str(exc)
        first = text.strip().splitlines()[0][:200] if text.strip() else type(exc).__name__
        if not self.active or not isinstance(exc, RuntimeError):
            return None
        if any(sign in text for sign in DIED_SIGNS):  # seen at once, not after the timeout
            return (f"a peer rank died (it closed its connection); rank {self.info.rank} "
                    f"stopped too ({first})")
        if any(sign in text for sign in SHUTDOWN_SIGNS):
            return (f"Horovod shut down: a peer rank died or stalled; rank {self.info.rank} "
                    f"stopped too ({first})")
        if not any(sign in text for sign in TIMEOUT_SIGNS):
            return None
        return (f"a peer rank stopped responding (hung, or its node went down); rank "
                f"{self.info.rank} gave up after distributed.timeout_s={self.timeout_s} "
                f"({first})")

    def close(self) -> None:
        """Tear the group down so the process can exit promptly.

        A gloo worker thread destroys each finished collective after its wait() returned,
        dropping the Python tensors it held — which takes the GIL. The group's destructor
        (run by destroy_process_group, or later by DDP's reducer when the model is freed)
        joins those threads while holding the GIL: reached while a worker still waits for
        it, both wait forever. Sleeping first releases the GIL until the workers are idle."""
        if self.kind == "native" and dist.is_initialized():
            time.sleep(WORKERS_IDLE_S)
            dist.destroy_process_group()


def _horovod():
    """horovod.torch, or a clear line on how to get it."""
    try:
        import horovod.torch as hvd
    except ImportError as exc:
        raise SciperfError(
            "distributed.backend=horovod needs Horovod (containers/install.sh --horovod)"
        ) from exc
    return hvd
