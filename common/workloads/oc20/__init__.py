"""OpenCatalyst OC20: DimeNet++ predicts energies and forces of catalyst structures (S2EF).

Being built (issue 12): ``spec`` holds every number and the model's entry table, ``basis``
the numpy reference of the basis functions. The contract (``WORKLOAD``) and the registry
line land with the data formats and the framework backends.
"""
