"""Rank discovery: ONE function maps a launcher's environment to this process's place.

torchrun, horovodrun (gloo), OpenMPI's mpirun, PMI/MPICH (Hydra, Cray PALS) and Slurm's
srun each describe the job with their own variables. The innermost launcher wins: under
`sbatch` → `mpirun` the OMPI variables describe the process, under `srun` → `torchrun` the
torchrun ones do. Inconsistent variables are an error, never a silent single-rank run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sciperf.errors import SciperfError

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits in the job."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_size: int = 1
    node: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_PORT
    source: str = "single"

    @property
    def nodes(self) -> int:
        """Node count, assuming the same number of ranks on every node."""
        return max(1, self.world // max(self.local_size, 1))


def cpu_count() -> int:
    """Cores of this process's allocation (affinity mask, as Slurm/cgroups set it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def first_host(nodelist: str) -> str:
    """First host of a Slurm nodelist: 'nid[001-004,007],login1' → 'nid001'."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        raise SciperfError(f"cannot parse SLURM_JOB_NODELIST={nodelist!r}")
    prefix, ranges = match.group(1), match.group(2)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def slurm_tasks_on_node(tasks_per_node: str, node: int) -> int:
    """Tasks on node `node` from SLURM_TASKS_PER_NODE, e.g. '4(x2),3' → [4, 4, 3]."""
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise SciperfError(f"cannot parse SLURM_TASKS_PER_NODE={tasks_per_node!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts[min(node, len(counts) - 1)]


def _int(env: Mapping[str, str], key: str, default: int | None = None) -> int:
    value = env.get(key)
    if value is None:
        if default is None:
            raise SciperfError(f"launcher environment lacks {key}")
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise SciperfError(f"{key}={value!r} is not an integer") from exc


def _port(env: Mapping[str, str]) -> int:
    """MASTER_PORT, else one derived from the Slurm job id (jobs on a node differ)."""
    if "MASTER_PORT" in env:
        return _int(env, "MASTER_PORT")
    if "SLURM_JOB_ID" in env:
        return DEFAULT_PORT + _int(env, "SLURM_JOB_ID") % 1000
    return DEFAULT_PORT


def _addr(env: Mapping[str, str]) -> str:
    if "MASTER_ADDR" in env:
        return env["MASTER_ADDR"]
    if "SLURM_JOB_NODELIST" in env:
        return first_host(env["SLURM_JOB_NODELIST"])
    return "127.0.0.1"


def _torchrun(env: Mapping[str, str]) -> RankInfo:
    local_size = _int(env, "LOCAL_WORLD_SIZE", 1)
    return RankInfo(_int(env, "RANK"), _int(env, "WORLD_SIZE"), _int(env, "LOCAL_RANK", 0),
                    local_size, _int(env, "GROUP_RANK", _int(env, "RANK") // local_size),
                    _addr(env), _port(env), "torchrun")


def _horovod(env: Mapping[str, str]) -> RankInfo:
    return RankInfo(_int(env, "HOROVOD_RANK"), _int(env, "HOROVOD_SIZE"),
                    _int(env, "HOROVOD_LOCAL_RANK", 0), _int(env, "HOROVOD_LOCAL_SIZE", 1),
                    _int(env, "HOROVOD_CROSS_RANK", 0), _addr(env), _port(env), "horovodrun")


def _openmpi(env: Mapping[str, str]) -> RankInfo:
    local_size = _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1)
    rank = _int(env, "OMPI_COMM_WORLD_RANK")
    return RankInfo(rank, _int(env, "OMPI_COMM_WORLD_SIZE"),
                    _int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0), local_size,
                    rank // max(local_size, 1),
                    _addr(env), _port(env), "openmpi")


def _pmi(env: Mapping[str, str]) -> RankInfo:
    local_size = _int(env, "MPI_LOCALNRANKS", _int(env, "PALS_LOCAL_SIZE", 1))
    rank = _int(env, "PMI_RANK")
    return RankInfo(rank, _int(env, "PMI_SIZE"),
                    _int(env, "MPI_LOCALRANKID", _int(env, "PALS_LOCAL_RANKID", 0)),
                    local_size, rank // max(local_size, 1), _addr(env), _port(env), "pmi")


def _slurm(env: Mapping[str, str]) -> RankInfo:
    node = _int(env, "SLURM_NODEID", 0)
    local_size = slurm_tasks_on_node(env["SLURM_TASKS_PER_NODE"], node) \
        if "SLURM_TASKS_PER_NODE" in env else 1
    return RankInfo(_int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS"),
                    _int(env, "SLURM_LOCALID", 0), local_size, node, _addr(env), _port(env),
                    "slurm")


SOURCES = (  # innermost launcher first
    ("TORCHELASTIC_RUN_ID", _torchrun),
    ("HOROVOD_RANK", _horovod),
    ("OMPI_COMM_WORLD_RANK", _openmpi),
    ("PMI_RANK", _pmi),
    ("SLURM_STEP_ID", _slurm),  # only inside an srun step; a batch script is one process
)


def discover(env: Mapping[str, str] | None = None) -> RankInfo:
    """This process's RankInfo from the environment (single process when none is set)."""
    env = os.environ if env is None else env
    info = RankInfo()
    for marker, parse in SOURCES:
        if marker in env:
            info = parse(env)
            break
    validate(info)
    return info


def validate(info: RankInfo) -> None:
    """Reject environments that cannot describe one consistent job."""
    problems = []
    if info.world < 1:
        problems.append(f"world size {info.world} < 1")
    if not 0 <= info.rank < info.world:
        problems.append(f"rank {info.rank} outside world size {info.world}")
    if not 0 <= info.local_rank < info.local_size:
        problems.append(f"local rank {info.local_rank} outside local size {info.local_size}")
    if info.local_size > info.world:
        problems.append(f"local size {info.local_size} > world size {info.world}")
    if problems:
        raise SciperfError(f"inconsistent {info.source} rank environment: {'; '.join(problems)}")
