"""The tensorflow workload backends' shared base: the common one, bound to this runtime."""

from __future__ import annotations

from sciperf.backends import FrameworkBackend
from sciperf_tensorflow import runtime as _runtime


class TFBackendBase(FrameworkBackend):
    """Every tensorflow workload backend (CosmoFlow, DeepCAM) derives from this."""

    runtime = _runtime
