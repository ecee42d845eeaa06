"""Rank discovery: ONE function maps a launcher's environment to this process's place.

torchrun, horovodrun (gloo), OpenMPI's mpirun, PMI/MPICH (Hydra, Cray PALS) and Slurm's
srun each describe the job with their own variables. The innermost launcher wins: under
`sbatch` → `mpirun` the OMPI variables describe the process, under `srun` → `torchrun` the
torchrun ones do. Inconsistent variables are an error, never a silent single-rank run.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

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
    instance: int = 0  # throughput mode: which training instance this rank belongs to
    instances: int = 1
    global_rank: int | None = None  # rank in the whole job when split into instances
    device_slot: int | None = None  # accelerator index on the node (default: local_rank)

    @property
    def device(self) -> int:
        """Which of the node's accelerators this rank drives (launcher's local rank)."""
        return self.local_rank if self.device_slot is None else self.device_slot

    @property
    def job_rank(self) -> int:
        """Rank in the whole job (equals `rank` unless split into instances)."""
        return self.rank if self.global_rank is None else self.global_rank

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
    return expand_nodelist(nodelist)[0]


def expand_nodelist(nodelist: str) -> list[str]:
    """All hosts of a Slurm nodelist, in order: 'nid[001-002,007],login1' → 4 names."""
    hosts: list[str] = []
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?(?:,|$)", nodelist.strip()):
        prefix, ranges = match.group(1), match.group(2)
        if not ranges:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise SciperfError(f"cannot parse SLURM_JOB_NODELIST={nodelist!r}")
            hosts += [f"{prefix}{i:0{len(lo)}d}" for i in range(int(lo), int(hi or lo) + 1)]
    if not hosts:
        raise SciperfError(f"cannot parse SLURM_JOB_NODELIST={nodelist!r}")
    return hosts


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


def split_instances(info: RankInfo, instances: int,
                    env: Mapping[str, str] | None = None) -> RankInfo:
    """This rank's place inside its training instance (throughput mode).

    The job's ranks are cut into `instances` contiguous blocks — the same split as an MPI
    ``Comm.Split(color=rank // per_instance)`` — so an instance's ranks share nodes. Each
    instance talks on its own port; its leader is the block's first rank, whose host is
    this node when the instance fits in a node, else taken from SLURM_JOB_NODELIST.
    """
    if instances == 1:
        return info
    env = os.environ if env is None else env
    if info.world % instances:
        raise SciperfError(f"instances={instances} does not divide the {info.world} ranks "
                           "of the job (every instance gets the same number of ranks)")
    per = info.world // instances
    instance, rank = divmod(info.rank, per)
    if per <= info.local_size:
        if info.local_size % per:
            raise SciperfError(f"{per} ranks per instance do not tile the {info.local_size} "
                               "ranks per node (instances=… must split nodes evenly)")
        local_rank, local_size, node, addr = info.local_rank % per, per, 0, "127.0.0.1"
    else:
        if per % info.local_size:
            raise SciperfError(f"{per} ranks per instance are not whole nodes of "
                               f"{info.local_size} ranks (instances=…)")
        span = per // info.local_size
        leader_node = instance * span
        local_rank, local_size, node = info.local_rank, info.local_size, info.node - leader_node
        addr = _instance_leader(info, leader_node, env)
    sub = RankInfo(rank, per, local_rank, local_size, node, addr,
                   info.master_port + 1 + instance, info.source, instance, instances,
                   info.rank, info.device)
    validate(sub)
    return sub


def _instance_leader(info: RankInfo, leader_node: int, env: Mapping[str, str]) -> str:
    """Host of an instance's first node (multi-node instances)."""
    if leader_node == 0:
        return info.master_addr
    if "SLURM_JOB_NODELIST" in env:
        hosts = expand_nodelist(env["SLURM_JOB_NODELIST"])
        if leader_node < len(hosts):
            return hosts[leader_node]
    raise SciperfError("instances spanning several nodes need SLURM_JOB_NODELIST to find "
                       f"the host of node {leader_node} (run under Slurm)")


def init_horovod(hvd: object, info: RankInfo, timeout_s: int | None = None) -> None:
    """hvd.init for the whole job, or for this rank's instance (an MPI sub-communicator
    given as the instance's job ranks, which needs Horovod built with MPI).

    With `timeout_s`, Horovod shuts down when a rank has not joined a collective for that
    long (its stall shutdown, off by default: a stopped rank would hang the job forever),
    unless the environment sets it already."""
    if timeout_s:
        os.environ.setdefault("HOROVOD_STALL_CHECK_TIME_SECONDS", str(max(timeout_s // 2, 1)))
        os.environ.setdefault("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", str(timeout_s))
    if info.instances == 1:
        hvd.init()  # type: ignore[attr-defined]
        return
    if not hvd.mpi_built():  # type: ignore[attr-defined]
        raise SciperfError("instances>1 with distributed.backend=horovod needs Horovod built "
                           "with MPI (it splits MPI_COMM_WORLD into one communicator per "
                           "instance)")
    first = info.job_rank - info.rank
    hvd.init(comm=list(range(first, first + info.world)))  # type: ignore[attr-defined]


LOCAL_RUN_ID = "sciperf-local"  # the run id `sciperf launch launcher=local` gives its ranks


SIBLING_GRACE_S = 5.0  # a continued sibling's time to write its records before SIGKILL


def end_stopped_siblings(env: Mapping[str, str] | None = None,
                         grace_s: float = SIBLING_GRACE_S) -> list[int]:
    """After a peer was lost under torchrun: end this node's stopped workers (a hung
    node's stand-in, state T), returning their pids.

    torchrun ends the other workers of a failed job with SIGTERM and waits 30 s before
    SIGKILL (its failure path ignores --shutdown-timeout); a stopped process never
    handles SIGTERM, so a hang would end 30 s after the collective timeout — past the
    60 s a job should take to die. Each stopped sibling gets SIGTERM and SIGCONT, as Slurm
    ends a step, so it handles the SIGTERM and closes its records (a stopped rank 0 left
    summary.json "running" when it got SIGKILL at once); what still lives after `grace_s`
    gets SIGKILL. Only stopped siblings (children of the same torchrun agent) are touched;
    running ones get torchrun's SIGTERM and write their records.
    Under `sciperf launch launcher=local` nothing is done: its supervisor stops every rank
    itself (SIGTERM and SIGCONT, SIGKILL after 5 s) and names the rank that failed first —
    a signal from here would reach it first and read as the cause.
    """
    env = os.environ if env is None else env
    run_id = env.get("TORCHELASTIC_RUN_ID")
    if run_id is None or run_id.startswith(LOCAL_RUN_ID):
        return []
    agent = os.getppid()
    stopped = [pid for pid, state in _children_states(agent).items()
               if state in ("T", "t") and pid != os.getpid()]
    if not stopped:
        return []
    for pid in stopped:
        for sig in (signal.SIGTERM, signal.SIGCONT):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
    with terms_ignored():
        deadline = time.monotonic() + grace_s
        while (alive := _alive_children(agent, stopped)) and time.monotonic() < deadline:
            time.sleep(0.1)
    for pid in alive:  # still the agent's live child: the pid was not reused meanwhile
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return stopped


def ignore_terminations() -> None:
    """SIGTERM/SIGHUP ignored for the rest of the process, once it has nothing left to stop:
    a rank that lost its peer has written its records and ends with the line naming the
    cause, a verb that returned has printed its last line. A launcher's SIGTERM (sent when
    it sees a sibling end) would otherwise land anywhere on the way out — as "terminated
    by SIGTERM" in place of that line, or a traceback inside the interpreter's exit.
    SIGKILL still can; signals are only ours to set in the main thread."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)


@contextlib.contextmanager
def terms_ignored() -> Iterator[None]:
    """SIGTERM/SIGHUP ignored while a rank finishes what it must: an aborting run's last
    records (the launcher's follow-up SIGTERM after a peer died must not cut run_stop or
    summary.json short), a survivor waiting for its stopped siblings (torchrun, seeing a
    sibling end, SIGTERMs it — and "terminated by SIGTERM" replaced the line naming the
    lost peer). SIGKILL still can; signals are only ours to set in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _children_states(parent: int) -> dict[int, str]:
    """pid → state letter of `parent`'s children, from /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:  # "pid (comm) state ppid …": comm may hold spaces, so split after ')'
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == parent:
            found[int(entry.name)] = fields[0]
    return found


def _alive_children(parent: int, pids: list[int]) -> list[int]:
    """Those of `pids` still running as `parent`'s children (a zombie has ended: its
    records are written, only the agent's reaping is left)."""
    states = _children_states(parent)
    return [pid for pid in pids if states.get(pid, "Z") != "Z"]
