"""sciperf_tensorflow: the TensorFlow implementation of the sciperf workloads.

Mirrors ``sciperf_pytorch`` file by file, class by class and layer by layer
(docs/architecture.md, rule 3). Its workload registry, ``sciperf_tensorflow.workloads``, is the
`tensorflow` entry point of `sciperf.backends`; the shared template is ``backend.WorkloadBackend``.
"""
