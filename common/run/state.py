"""What a run accumulates as it goes (`RunState`): the one record the driver fills phase by
phase, the checkpoints save (`resume`), and summary.json reports (`summary`).

It is a module of its own because those three read it: the closing records of an abort
write whatever it holds at that moment, so each field is set as soon as it is known.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sciperf import checkpoint
from sciperf import precision as precision_choice
from sciperf.backends import EpochProgress
from sciperf.data.staging import StageReport


@dataclass
class RunState:
    """What the loop accumulates; becomes summary.json."""

    world: int = 1
    epochs: int = 0
    train_samples_seen: int = 0
    train_seconds: float = 0.0
    history: list[dict[str, float]] = field(default_factory=list)
    metric: float | None = None
    success: bool = False
    staging: StageReport | None = None
    image: dict[str, Any] | None = None  # the container image's version record, if any
    backend: Any = None  # set once loaded (the closing records of an abort use it)
    run_start: float | None = None  # wall time of run_start, once logged
    resume_from: checkpoint.Found | None = None  # the checkpoint this run continues
    progress: EpochProgress | None = None  # the resumed epoch's part trained before
    checkpointed: bool = False  # stopped mid-epoch on request, checkpoint written
    t0: float = 0.0  # wall time the run began (init_start)
    resumed: list[dict[str, Any]] = field(default_factory=list)  # every resume so far
    precision: precision_choice.Choice | None = None  # what precision=… resolved to, and why
    malloc: str = ""  # the host allocator's mode in force (sciperf.allocator)
