"""sciperf_tensorflow: the TensorFlow implementation of the sciperf workloads.

Mirrors ``sciperf_pytorch`` file by file, class by class and layer by layer
(docs/architecture.md, rule 3). Its workload registry, ``sciperf_tensorflow.workloads``, is the
`tensorflow` entry point of `sciperf.backends`; the shared template is ``backend.WorkloadBackend``.
"""

import os

# TensorFlow's C++ runtime prints INFO lines at import (CPU-feature advice, the absl preamble) on
# stderr of every process and rank — noise between a run's progress lines. Level 1 drops INFO
# only: warnings and errors still print. Must be set before the first `import tensorflow`, which
# every module of this package does after this file; a value the user exported wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
