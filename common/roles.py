"""What a config key is to a run, declared once on its dataclass field.

A key's role decides how generic code treats it, so that no generic module names a
workload's key (docs/architecture.md, "Config field roles"). Declared as field metadata —
``field(default="", metadata=role(reads=True))`` — on the shared config dataclasses
(``sciperf.config_schema``) and on a workload's own (its TrainSpec, DataSpec, …), and read
by ``sciperf.config_keys.key_roles``:

* ``reads`` — a file the run reads: the driver checks it before anything is written (one
  line naming the key), and ``sciperf launch`` binds it read-only into containers at the
  same place; ``hint`` says how a missing one is made, ``check`` reads it deeper; the
  experiment's hash holds the file's content, not its path;
* ``place`` — where the run keeps or finds things (a path): not part of what it trains,
  so never in the experiment's hash;
* ``local`` — how the run is kept or run (threads, epochs allowed, checkpointing): may
  differ between ranks and on a resume; every other key must agree across ranks and with
  the checkpoint a run resumes;
* ``bench`` — ``sciperf bench`` sets it for each row itself: the text names the bench
  option that says it, and an override of the key is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import Field, dataclass
from pathlib import Path
from typing import Any

METADATA_KEY = "sciperf_role"


@dataclass(frozen=True)
class Role:
    """One key's role (every flag off: a key the run trains with, agreed by every rank)."""

    reads: bool = False
    place: bool = False
    local: bool = False
    bench: str = ""
    hint: str = ""  # reads: how a missing file is made ({workload}, {experiment} filled in)
    # reads: a deeper check of the file (path, run config, workload) → SciperfError
    check: Callable[[Path, Any, Any], None] | None = None


NONE = Role()


def role(**flags: Any) -> dict[str, Role]:
    """Field metadata declaring a role: ``field(default=…, metadata=role(local=True))``."""
    return {METADATA_KEY: Role(**flags)}


def of(f: Field) -> Role:
    """The role a dataclass field declares (none: :data:`NONE`)."""
    return f.metadata.get(METADATA_KEY, NONE)
