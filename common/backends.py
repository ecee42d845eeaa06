"""Framework backends, found through the `sciperf.backends` entry-point group.

No if/else on framework or workload names: installing `sciperf_pytorch` or
`sciperf_tensorflow` registers its workload registry (the package's ``workloads`` module,
whose ``BACKENDS`` maps a workload name to ``"module:Class"``, imported only when used);
`sciperf` itself never imports a framework.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sciperf.distributed import RankInfo
from sciperf.errors import SciperfError

if TYPE_CHECKING:  # importing sciperf.workloads loads $SCIPERF_PLUGINS, which import this
    from sciperf.workloads.base import Workload

GROUP = "sciperf.backends"


@dataclass
class RunContext:
    """What the framework-neutral driver hands a backend: the resolved plan for this rank."""

    cfg: Any
    workload: Workload
    train_files: list[Path]
    eval_files: list[Path]
    local_batch: int
    info: RankInfo = field(default_factory=RankInfo)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        """Global rank of this process."""
        return self.info.rank

    @property
    def world(self) -> int:
        """Number of data-parallel ranks."""
        return self.info.world


@dataclass
class EpochProgress:
    """How far an interrupted epoch got, summed over ranks: optimizer-step-aligned batches
    each rank took, samples each rank took, the loss summed over steps and ranks, seconds.
    A checkpoint keeps it; the resumed epoch skips those batches and adds to these sums."""

    steps: int = 0
    samples: int = 0
    loss_sum: float = 0.0
    seconds: float = 0.0


@dataclass
class EpochResult:
    """Training statistics of one epoch on this rank; `stopped` when `stop` asked for an
    early end (the epoch is then unfinished, its progress given)."""

    samples: int
    loss: float
    seconds: float
    stopped: EpochProgress | None = None


class Backend(ABC):
    """The four things the driver needs from a framework; models never log (rule 8)."""

    name: str = "?"

    @abstractmethod
    def setup(self, ctx: RunContext) -> None:
        """Build model, optimizer and loaders (counted in init time)."""

    @abstractmethod
    def parameter_count(self) -> int:
        """Trainable parameters of the built model."""

    @abstractmethod
    def train_epoch(self, epoch: int, lr: float,
                    on_step: Callable[[int, float], None] | None = None,
                    resume: EpochProgress | None = None,
                    stop: Callable[[], bool] | None = None) -> EpochResult:
        """One pass over this rank's training shard at learning rate `lr`; from `resume`'s
        step when given; ending early at an optimizer-step boundary where `stop()` is true
        on any rank (every rank ends at the same step)."""

    @abstractmethod
    def evaluate(self) -> float:
        """The quality metric over the whole validation set (reduced over ranks)."""

    def export_weights(self) -> dict[str, Any]:
        """Canonical ``{"<layer>/kernel|bias": ndarray}`` of the model (see sciperf.weights)."""
        raise SciperfError(f"framework {self.name} cannot export canonical weights")

    def save_state(self, folder: Path) -> None:
        """Write what resuming needs (model, optimizer, step counters, RNG) into `folder`,
        framework-native (sciperf.checkpoint documents the files)."""
        raise SciperfError(f"framework {self.name} cannot write checkpoints")

    def load_state(self, folder: Path) -> None:
        """Restore what :meth:`save_state` wrote; one line naming the file if it does not fit
        this model."""
        raise SciperfError(f"framework {self.name} cannot resume from checkpoints")

    def peer_lost(self, exc: BaseException) -> str | None:
        """One line when `exc` means another rank died or hung (the driver then ends the
        run with that line instead of a traceback); None otherwise."""
        return None

    def barrier(self) -> None:
        """Wait for every rank; single-process backends need nothing."""
        return None

    def all_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over the ranks (float64); one rank: the values."""
        return values

    def close(self) -> None:
        """Release distributed resources at the end of a run."""
        return None

    def peak_flops(self, precision: str) -> float | None:
        """Measured dense-matmul FLOP/s of this device in `precision` (bench context)."""
        return None

    def device_memory_peak_mb(self) -> float | None:
        """Peak accelerator memory of this process so far (MiB); None without one."""
        return None

    def info(self) -> dict[str, str]:
        """Versions and devices, recorded in the summary so results say what ran."""
        return {}


class FrameworkBackend(Backend):
    """Barrier, teardown, peak FLOP/s and versions, the same for every workload of a
    framework: subclasses name the framework's ``runtime`` module (``matmul_flops``,
    ``versions``) and set ``self.comm`` (``barrier``, ``close``) and ``self.device`` in
    ``setup``."""

    runtime: ClassVar[Any]
    comm: Any
    device: Any

    def barrier(self) -> None:
        """All ranks reach this point (before run_start and run_stop)."""
        self.comm.barrier()

    def all_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over the ranks (the group's float64 all-reduce)."""
        return self.comm.sum(values)

    def stop_agreed(self, stop: Callable[[], bool] | None, micro_step: int,
                    accumulate: int) -> bool:
        """At an optimizer-step boundary: whether any rank's `stop()` asks to end the
        epoch (one all-reduce of the flags, so every rank ends at the same step)."""
        if stop is None or micro_step % accumulate:
            return False
        return self.comm.sum([float(stop())])[0] > 0

    def epoch_result(self, loss_total: float, steps: int, samples: int, seconds: float,
                     stopped: bool = False) -> EpochResult:
        """The epoch's loss averaged over steps and ranks; an unfinished epoch also
        carries its progress (global sums) for a checkpoint."""
        loss_sum, step_sum = self.comm.sum([float(loss_total), float(steps)])
        progress = EpochProgress(steps, samples, loss_sum, seconds) if stopped else None
        return EpochResult(samples, loss_sum / max(step_sum, 1), seconds, progress)

    def close(self) -> None:
        """Release the process group."""
        self.comm.close()

    def peer_lost(self, exc: BaseException) -> str | None:
        """The collectives' reading of `exc` (``Comm.peer_lost``)."""
        comm = getattr(self, "comm", None)
        return comm.peer_lost(exc) if comm is not None else None

    def peak_flops(self, precision: str) -> float:
        """Measured matmul FLOP/s on this device (the roofline ceiling for the bench)."""
        return self.runtime.matmul_flops(self.device, precision)

    def device_memory_peak_mb(self) -> float | None:
        """The GPU allocator's peak (the bench's memory column on a GPU)."""
        return self.runtime.device_memory_peak_mb(self.device)

    def info(self) -> dict[str, str]:
        """Framework versions and device."""
        return self.runtime.versions()


def available() -> dict[str, Any]:
    """Installed backends by name."""
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def load_registry(name: str) -> Any:
    """The workload registry module of framework `name`, or say which frameworks are
    installed and how to install the missing one."""
    eps = available()
    if name not in eps:
        have = ", ".join(sorted(eps)) or "none"
        raise SciperfError(
            f"framework '{name}' is not installed (installed backends: {have}); "
            f"install frameworks/{name} (see README)"
        )
    try:
        return eps[name].load()
    except ImportError as exc:
        raise SciperfError(f"framework '{name}' failed to import: {exc}") from exc


# framework → workload → "module:Class" of the backends plugins add (sciperf.workloads)
PLUGIN_BACKENDS: dict[str, dict[str, str]] = {}


def register(framework: str, workload: str, target: str) -> None:
    """A plugin's backend of `workload` in `framework` ("module:Class", imported only when
    a run asks for it): the framework then implements the workload, as if its registry
    had the line."""
    PLUGIN_BACKENDS.setdefault(framework, {})[workload] = target


def _registry(name: str) -> dict[str, str]:
    """Framework `name`'s registry and the plugins' backends for it."""
    return {**load_registry(name).BACKENDS, **PLUGIN_BACKENDS.get(name, {})}


def implemented(name: str) -> tuple[str, ...]:
    """The workloads framework `name` implements (its registry's keys)."""
    return tuple(_registry(name))


def require_pair(name: str, workload: str) -> str:
    """The registry entry ("module:Class") of `workload` in framework `name`; a framework
    that lacks the workload says so in one line. Cheap (the framework's registry, not its
    backend module), so a verb can refuse the pair before it writes anything."""
    registry = _registry(name)
    if workload not in registry:
        raise SciperfError(f"{name} does not implement {workload} "
                           f"(has: {', '.join(registry) or 'nothing'})")
    return registry[workload]


def backend_class(name: str, workload: str) -> type[Backend]:
    """The Backend class of `workload` in framework `name` (:func:`require_pair`)."""
    module, _, cls = require_pair(name, workload).partition(":")
    try:
        return getattr(importlib.import_module(module), cls)
    except ImportError as exc:
        raise SciperfError(f"framework '{name}' failed to import {module}: {exc}") from exc


def load_backend(name: str, workload: str) -> Backend:
    """A fresh backend of `workload` in framework `name`."""
    return backend_class(name, workload)()
