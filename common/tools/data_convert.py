"""`sciperf data convert`: a workload's reference format → its fast one, over MPI ranks.

What a workload converts is its contract's ``Dataset.conversion``; the runner
(:func:`sciperf.data.conversion.run`) spreads the jobs over the ranks of an MPI launch
(`mpirun -n N sciperf data convert …`, `srun`), skips what an earlier run finished, ends
the whole job in one line when a file fails, and prints the rate on rank 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sciperf.data import conversion
from sciperf.data.layout import check_writable
from sciperf.distributed import discover
from sciperf.workloads import get


def run(cfg: Any, force: bool) -> int:
    """Convert the dataset under ``data.dir`` (every file again with `force`); 0 when done."""
    workload = get(cfg.workload)
    if workload.dataset.conversion is None:
        if discover().rank == 0:  # one line for the job, not one per rank
            print(f"{workload.name} has nothing to convert")
        return 0
    root = Path(cfg.data.dir)
    check_writable(root)
    conversion.run(workload.dataset.conversion.for_config(cfg), root, force=force,
                   program=conversion.PROGRAM)
    return 0
