"""Launchers: each turns an allocation into the words that start the ranks.

A launcher knows nothing about containers or the program; `compose.command` puts the
three together (launcher → container → program). Every launcher starts the ranks in an
environment `sciperf.distributed.discover` understands:

=========  ==========================================  ===============================
launcher   starts                                      rank environment (discover source)
=========  ==========================================  ===============================
local      N processes on this host (supervised here)  RANK/WORLD_SIZE/… (torchrun)
mpirun     OpenMPI ``mpirun -np``                      OMPI_COMM_WORLD_* (openmpi)
torchrun   ``torchrun`` (one per node under srun)      RANK/WORLD_SIZE/… (torchrun)
srun       ``srun`` job step                           SLURM_PROCID/… (slurm)
=========  ==========================================  ===============================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from sciperf.config_checks import check_port
from sciperf.errors import SciperfError

from . import options as typed
from .shell import Expand

MPI_FLAVOURS = ("pmix", "pmi2", "cray_shasta", "none")  # srun --mpi values sciperf accepts

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
OPENMPI_ENV = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
               "OMPI_COMM_WORLD_LOCAL_SIZE", "MASTER_ADDR", "MASTER_PORT")
SLURM_ENV = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID",
             "SLURM_TASKS_PER_NODE", "SLURM_STEP_ID", "SLURM_JOB_ID", "SLURM_JOB_NODELIST",
             "MASTER_ADDR", "MASTER_PORT")
DEVICE_ENV = ("CUDA_VISIBLE_DEVICES",)  # narrowed by some launchers; passed on when set


@dataclass(frozen=True)
class Allocation:
    """What the job gets: nodes × tasks (ranks) per node, and each node's GPUs and CPUs."""

    nodes: int
    tasks_per_node: int
    gpus_per_node: int = 0
    cpus_per_node: int = 0  # 0: unknown (no --cpus-per-task is requested)

    @property
    def tasks(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def cpus_per_task(self) -> int:
        return self.cpus_per_node // self.tasks_per_node if self.cpus_per_node else 0


class Launcher:
    """Base: options come from `launcher.*`, site facts from `system.*`."""

    name: ClassVar[str] = ""
    env_names: ClassVar[tuple[str, ...]] = ()  # what the program must see (docker -e …)
    needs_slurm: ClassVar[bool] = False  # always inside a Slurm allocation
    multi_node: ClassVar[bool] = True  # can span nodes (under a scheduler)

    def __init__(self, options: Mapping[str, Any], system: Mapping[str, Any],
                 as_root: bool | None = None) -> None:
        self.options = dict(options)
        self.system = dict(system)
        self.as_root = (os.geteuid() == 0) if as_root is None else as_root

    def tasks_per_node(self) -> int:
        """Ranks per node: `launcher.tasks_per_node`, else one per GPU, else one."""
        value = typed.count(self.options, "tasks_per_node", "launcher")
        return value or int(self.system.get("accelerators_per_node") or 0) or 1

    def allocation(self, nodes: int) -> Allocation:
        return Allocation(nodes, self.tasks_per_node(),
                          int(self.system.get("accelerators_per_node") or 0),
                          int(self.system.get("cpus_per_node") or 0))

    def request(self, alloc: Allocation) -> tuple[int, int]:
        """(tasks per node, CPUs per task) for the sbatch header."""
        return alloc.tasks_per_node, alloc.cpus_per_task

    def words(self, alloc: Allocation, slurm: bool) -> list[str]:
        """The launcher's part of the command line (before container and program)."""
        raise NotImplementedError

    def extra(self) -> list[str]:
        return typed.words(self.options, "extra_args", "launcher")


class LocalLauncher(Launcher):
    """N processes on this host, started and supervised by `sciperf launch` itself."""

    name = "local"
    env_names = TORCHRUN_ENV + DEVICE_ENV
    multi_node = False

    def tasks_per_node(self) -> int:
        """`launcher.nprocs`, else one per GPU, else one."""
        value = typed.count(self.options, "nprocs", "launcher")
        return value or int(self.system.get("accelerators_per_node") or 0) or 1

    def words(self, alloc: Allocation, slurm: bool) -> list[str]:
        return []

    def master_port(self) -> int | None:
        """`launcher.master_port` (1..65535), or None for a free port; checked here too for
        configs built in code, which skip the composition's check."""
        return check_port("launcher.master_port", self.options.get("master_port"))

    def rank_env(self, alloc: Allocation, port: int, run_id: str) -> list[dict[str, str]]:
        """The torchrun-style variables of each rank (what `discover` reads)."""
        n = alloc.tasks
        return [{"RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(r),
                 "LOCAL_WORLD_SIZE": str(n), "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": run_id} for r in range(n)]


class MpirunLauncher(Launcher):
    """OpenMPI's mpirun: inside an sbatch allocation it reads the nodes from Slurm."""

    name = "mpirun"
    env_names = OPENMPI_ENV + DEVICE_ENV
    exported = ("MASTER_ADDR", "MASTER_PORT", "PATH")  # -x: what remote ranks inherit

    def words(self, alloc: Allocation, slurm: bool) -> list[str]:
        words = ["mpirun", "-np", str(alloc.tasks), "--map-by", f"ppr:{alloc.tasks_per_node}:node",
                 "--bind-to", "none"]
        if self.as_root:
            words.append("--allow-run-as-root")
        if not alloc.gpus_per_node:
            # CPU ranks share their cores with the compute threads: a rank waiting in an
            # all-reduce must yield, not spin (measured: 2 Horovod ranks on 2 cores went
            # from ~90 to ~125 samples/s on mini CosmoFlow).
            words += ["--mca", "mpi_yield_when_idle", "1"]
        for name in (*self.exported, *typed.words(self.options, "env", "launcher")):
            words += ["-x", str(name)]
        return words + self.extra()


class TorchrunLauncher(Launcher):
    """torchrun with c10d rendezvous; under Slurm one torchrun per node through srun."""

    name = "torchrun"
    env_names = TORCHRUN_ENV + DEVICE_ENV

    def request(self, alloc: Allocation) -> tuple[int, int]:
        return 1, alloc.cpus_per_node  # one agent per node owns the node's CPUs

    def words(self, alloc: Allocation, slurm: bool) -> list[str]:
        words: list[str] = []
        if slurm:
            words += ["srun", f"--nodes={alloc.nodes}", "--ntasks-per-node=1"]
            if alloc.cpus_per_node:
                words.append(f"--cpus-per-task={alloc.cpus_per_node}")
            if alloc.gpus_per_node:
                words.append(f"--gpus-per-node={alloc.gpus_per_node}")
            words.append("--kill-on-bad-exit=1")
        words += ["torchrun", f"--nnodes={alloc.nodes}", f"--nproc_per_node={alloc.tasks_per_node}",
                  f"--rdzv_backend={self.options.get('rdzv_backend') or 'c10d'}",
                  Expand("--rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT")]
        if slurm:
            words.append(Expand("--rdzv_id=$SLURM_JOB_ID"))
        return words + self.extra() + ["--no_python"]


class SrunLauncher(Launcher):
    """A Slurm job step: one task per rank, PMI from the system's MPI flavour."""

    name = "srun"
    env_names = SLURM_ENV + DEVICE_ENV
    needs_slurm = True

    def words(self, alloc: Allocation, slurm: bool) -> list[str]:
        words = ["srun", f"--nodes={alloc.nodes}", f"--ntasks-per-node={alloc.tasks_per_node}"]
        if alloc.cpus_per_task:
            words.append(f"--cpus-per-task={alloc.cpus_per_task}")
        if alloc.gpus_per_node:
            words.append(f"--gpus-per-node={alloc.gpus_per_node}")
        words += [f"--mpi={mpi_flavour(self.system)}", "--kill-on-bad-exit=1"]
        return words + self.extra()


LAUNCHERS: dict[str, type[Launcher]] = {
    cls.name: cls for cls in (LocalLauncher, MpirunLauncher, TorchrunLauncher, SrunLauncher)
}


def mpi_flavour(system: Mapping[str, Any]) -> str:
    """The system's `srun --mpi=` value, checked."""
    value = system.get("mpi") or "pmix"
    if value not in MPI_FLAVOURS:
        raise SciperfError(f"system.mpi={value} is not a known MPI flavour "
                           f"({', '.join(MPI_FLAVOURS)}); fix configs/system/"
                           f"{system.get('name', '…')}.yaml or override system.mpi=…")
    return str(value)


def make_launcher(options: Mapping[str, Any], system: Mapping[str, Any],
                  as_root: bool | None = None) -> Launcher:
    name = options.get("name")
    if name not in LAUNCHERS:
        raise SciperfError(f"launcher.name={name} is not one of {', '.join(LAUNCHERS)}")
    return LAUNCHERS[name](options, system, as_root)
