"""sciperf_tensorflow: the TensorFlow implementation of the sciperf workloads.

Mirrors ``sciperf_pytorch`` file by file, class by class and layer by layer
(DESIGN.md rule 3); registered as the `tensorflow` entry point of `sciperf.backends`.
"""
