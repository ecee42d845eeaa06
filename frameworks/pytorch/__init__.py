"""sciperf_pytorch: the PyTorch implementation of the sciperf workloads.

Mirrors ``sciperf_tensorflow`` file by file, class by class and layer by layer
(docs/architecture.md, rule 3). Its workload registry, ``sciperf_pytorch.workloads``, is the
`pytorch` entry point of `sciperf.backends`; the shared template is ``backend.WorkloadBackend``.
"""
