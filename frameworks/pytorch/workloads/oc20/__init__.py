"""OC20: DimeNet++ (energies and forces of catalyst structures) — model and backend."""
