"""The workload registry: name → the module whose ``WORKLOAD`` is its contract.

Imported lazily, so naming a workload loads only that workload. Adding a workload to
sciperf is one line here (docs/architecture.md, "Adding a workload"); a workload of a
site's own, kept outside the tree, is a plugin: a module named in ``$SCIPERF_PLUGINS``
(comma-separated, importable from ``PYTHONPATH``) that calls :func:`register` for its
contract and ``sciperf.backends.register`` for its framework backends when imported. The
plugins load with this registry, in every process of a run.
"""

from __future__ import annotations

import importlib
import os

from sciperf.errors import SciperfError
from sciperf.workloads.base import Workload

REGISTRY = {
    "cosmoflow": "sciperf.workloads.cosmoflow",
    "deepcam": "sciperf.workloads.deepcam",
    "oc20": "sciperf.workloads.oc20",
    "openfold": "sciperf.workloads.openfold",
    "gpt2": "sciperf.workloads.gpt2",
}
BUILT_IN = tuple(REGISTRY)
DEFAULT = "cosmoflow"  # what `sciperf run` trains when no workload is named
PLUGINS_ENV = "SCIPERF_PLUGINS"


def register(name: str, module: str) -> None:
    """Add workload `name`, whose contract is ``<module>.WORKLOAD`` (a plugin's); a name
    sciperf has already is refused."""
    if REGISTRY.get(name, module) != module:
        raise SciperfError(f"workload '{name}' is registered already ({REGISTRY[name]})")
    REGISTRY[name] = module


def names() -> tuple[str, ...]:
    """Every workload this process knows: sciperf's, then the plugins'."""
    return tuple(REGISTRY)


def get(name: str) -> Workload:
    """The contract of workload `name`, or one line listing the valid names."""
    if name not in REGISTRY:
        raise SciperfError(f"unknown workload '{name}'; valid choices: {', '.join(REGISTRY)}")
    workload = importlib.import_module(REGISTRY[name]).WORKLOAD
    if not isinstance(workload, Workload) or workload.name != name:
        raise SciperfError(f"{REGISTRY[name]}.WORKLOAD is not the Workload '{name}'")
    return workload


def _load_plugins() -> None:
    """Import every module ``$SCIPERF_PLUGINS`` names (each registers what it adds)."""
    for module in (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",")):
        if not module:
            continue
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise SciperfError(f"{PLUGINS_ENV}: cannot import {module} ({exc}); is its "
                               "folder on PYTHONPATH?") from None


_load_plugins()
WORKLOADS = names()  # as this process started (built-in ones, then the plugins')
