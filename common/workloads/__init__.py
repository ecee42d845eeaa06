"""The workload registry: name → the module whose ``WORKLOAD`` is its contract.

Imported lazily, so naming a workload loads only that workload. Adding a workload is one
line here (docs/architecture.md, "Adding a workload").
"""

from __future__ import annotations

import importlib

from sciperf.errors import SciperfError
from sciperf.workloads.base import Workload

REGISTRY = {
    "cosmoflow": "sciperf.workloads.cosmoflow",
    "deepcam": "sciperf.workloads.deepcam",
    "oc20": "sciperf.workloads.oc20",
    "openfold": "sciperf.workloads.openfold",
}
WORKLOADS = tuple(REGISTRY)
DEFAULT = "cosmoflow"  # what `sciperf run` trains when no workload is named


def get(name: str) -> Workload:
    """The contract of workload `name`, or one line listing the valid names."""
    if name not in REGISTRY:
        raise SciperfError(f"unknown workload '{name}'; valid choices: {', '.join(WORKLOADS)}")
    workload = importlib.import_module(REGISTRY[name]).WORKLOAD
    if not isinstance(workload, Workload) or workload.name != name:
        raise SciperfError(f"{REGISTRY[name]}.WORKLOAD is not the Workload '{name}'")
    return workload
