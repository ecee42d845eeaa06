"""sciperf: the MLPerf-HPC benchmarks over one framework-free spec.

This package must never import an ML framework (docs/architecture.md, rule 2); the
framework backends live in ``sciperf_pytorch`` / ``sciperf_tensorflow`` and are
found through the ``sciperf.backends`` entry-point group.
"""

__version__ = "0.1.0"
