"""The workloads sciperf_tensorflow implements: name → ``"module:Class"`` of its backend.

The `tensorflow` entry point of the `sciperf.backends` group; classes are imported only when
a run asks for them (``sciperf.backends.backend_class``). Adding a workload is one line
here (docs/architecture.md, "Adding a workload").
"""

from __future__ import annotations

BACKENDS = {
    "cosmoflow": "sciperf_tensorflow.workloads.cosmoflow.backend:CosmoFlowBackend",
    "deepcam": "sciperf_tensorflow.workloads.deepcam.backend:DeepCamBackend",
    "oc20": "sciperf_tensorflow.workloads.oc20.backend:OC20Backend",
    "openfold": "sciperf_tensorflow.workloads.openfold.backend:OpenFoldBackend",
    "gpt2": "sciperf_tensorflow.workloads.gpt2.backend:GPT2Backend",
}


def versions() -> dict[str, str]:
    """Framework versions and device (what `sciperf info` reports for this framework)."""
    from sciperf_tensorflow import runtime

    return runtime.versions()
