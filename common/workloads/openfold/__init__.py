"""OpenFold: partial AlphaFold2 "initial training" from a fixed checkpoint; the metric is the
mean lDDT-Cα over the validation chains (higher is better, target 0.8).

Framework-free parts live here (residue constants, the lDDT-Cα metric, the reference's
processed data layout, a3m/hhr/mmCIF parsing, kalign, learnable synthetic proteins); the
network is in each framework's ``workloads/openfold``. Facts: ../shared/spec/openfold.md.
Not registered in ``sciperf.workloads.REGISTRY`` until its ``WORKLOAD`` contract is complete.
"""
