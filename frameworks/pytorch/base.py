"""The pytorch workload backends' shared base: the common one, bound to this runtime."""

from __future__ import annotations

from sciperf.backends import FrameworkBackend
from sciperf_pytorch import runtime as _runtime


class TorchBackendBase(FrameworkBackend):
    """Every pytorch workload backend (CosmoFlow, DeepCAM) derives from this."""

    runtime = _runtime
