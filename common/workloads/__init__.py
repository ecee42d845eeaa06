"""Registry of workload specs: name → module with the benchmark's numbers."""

from __future__ import annotations

import importlib
from types import ModuleType

from sciperf.errors import SciperfError

WORKLOADS = ("cosmoflow", "deepcam")


def get_spec(name: str) -> ModuleType:
    """Return the spec module of workload `name`, or a clear error listing the valid ones."""
    if name not in WORKLOADS:
        raise SciperfError(f"unknown workload '{name}'; valid choices: {', '.join(WORKLOADS)}")
    return importlib.import_module(f"sciperf.workloads.{name}")
