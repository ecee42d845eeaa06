"""sciperf_tensorflow: the TensorFlow implementation of the sciperf workloads.

Mirrors ``sciperf_pytorch`` file by file, class by class and layer by layer
(docs/architecture.md, rule 3). Its workload registry, ``sciperf_tensorflow.workloads``, is the
`tensorflow` entry point of `sciperf.backends`; the shared template is ``backend.WorkloadBackend``.
"""

import os

# TensorFlow's C++ runtime prints INFO lines (CPU-feature advice) on stderr of every process and
# rank — noise between a run's progress lines. Level 1 drops INFO only: warnings and errors
# still print (its oneDNN notice is written as its libraries load, before any level applies).
# Set before the first `import tensorflow`, which every module of this package does after this
# file; a value the user exported wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
# TensorFlow turns its oneDNN kernels on by default only on CPUs with AVX-512-class features; on
# the rest (AVX2 CPUs such as AMD EPYC Zen 3) it runs Eigen's, whose Conv2DBackpropFilter refuses
# dilation rates above 1, so DeepCAM's ASPP could not train at all. oneDNN runs everywhere the
# models are measured; a value the user exported wins (`runtime.onednn` then says which is on).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
