"""tinyreg: a test-only workload added through sciperf's public contract alone.

A few-parameter linear regression on generated data, in PyTorch and in TensorFlow, laid
out as a workload of the tree is (``workload/`` = ``common/workloads/<name>/``,
``pytorch/`` and ``tensorflow/`` = ``frameworks/<fw>/workloads/<name>/``) and registered
as a plugin: ``SCIPERF_PLUGINS=sciperf_tinyreg`` with this folder's parent on
``PYTHONPATH``. Importing it registers the contract and both backends; nothing in sciperf
names it (docs/architecture.md, "Adding a workload"). tests/core/test_contract_workload.py
runs it from prepare to the checker in both frameworks.
"""

from __future__ import annotations

from sciperf.backends import register as register_backend
from sciperf.workloads import register

NAME = "tinyreg"

register(NAME, "sciperf_tinyreg.workload")
register_backend("pytorch", NAME, "sciperf_tinyreg.pytorch.backend:TinyRegBackend")
register_backend("tensorflow", NAME, "sciperf_tinyreg.tensorflow.backend:TinyRegBackend")
