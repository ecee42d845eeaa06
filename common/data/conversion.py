"""A dataset converted from its reference format to sciperf's, file by file, over ranks.

A workload describes its conversion once, as a :class:`Conversion` (the contract's
``Dataset.conversion``): the jobs of a dataset directory — one source file or container
each, with the outputs it writes —, how one job is converted and whether one is done. Both
``sciperf prepare data.source=convert`` and ``sciperf data convert`` run it through
:func:`run`, which spreads the jobs over the ranks of a launched job.

Under an MPI launcher (mpirun, srun, a PMI/PMIx job) the ranks are coordinated through
mpi4py: rank 0 runs the conversion's ``before`` step and lists the jobs for everyone, each
rank converts its strided share, the counts meet on rank 0, which runs ``after`` and prints
the summary. A job that fails ends the whole MPI job at once (``MPI_Abort``) after one line
naming its file, so no rank waits forever for one that is gone. Outputs are written aside
and renamed (:mod:`sciperf.data.atomic`), so an output that exists is whole, and a rerun
skips every job whose outputs exist and are not older than the source.

In one process every job runs here and a failure is the exception it raised (the CLI's one
line). A launch with ranks but no MPI (a torchrun environment) converts this rank's share
without coordination, as ``sciperf prepare`` always has.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sciperf.console import say
from sciperf.data.layout import NPY_SUFFIX, SampleLayout, label_path
from sciperf.distributed import discover
from sciperf.errors import SciperfError
from sciperf.progress import Progress, fmt_duration

PROGRAM = "sciperf data convert"  # what the line of a failed MPI job starts with
# Variables only an MPI launcher sets: mpirun (Open MPI), Hydra/PALS (PMI), PMIx launchers.
MPI_MARKERS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


@dataclass(frozen=True)
class Job:
    """One unit of conversion: a source file or container and the outputs it writes."""

    source: Path
    outputs: tuple[Path, ...]


def outputs_current(job: Job) -> bool:
    """Every output exists and none is older than the source: what a finished job leaves
    (each output is renamed into place whole). A source replaced later is converted again."""
    try:
        since = job.source.stat().st_mtime_ns
        return all(out.stat().st_mtime_ns >= since for out in job.outputs)
    except OSError:
        return False


def source_name(job: Job) -> str:
    """The file progress and errors name: the job's source."""
    return str(job.source)


def npy_pair_jobs(layout: SampleLayout, root: Path, fmt: str) -> list[Job]:
    """One job per `fmt` sample of every split: the npy pair beside it (label, data), for
    workloads with one file per sample (:class:`~sciperf.data.layout.SampleLayout`)."""
    suffix = layout.suffix[fmt]
    jobs = []
    for split in layout.splits:
        for src in layout.list_samples(root, split, fmt):
            data = src.with_name(src.name[: -len(suffix)] + NPY_SUFFIX)
            jobs.append(Job(src, (label_path(data), data)))
    return jobs


def remove_orphan_pairs(layout: SampleLayout, root: Path, fmt: str) -> None:
    """The npy pairs (data + label) whose `fmt` sample is gone from its split: a run would
    train on them beside the converted ones."""
    suffix = layout.suffix[fmt]
    for split in layout.splits:
        folder = layout.split_dir(root, split)
        if not folder.is_dir():
            continue
        stems = {p.name[: -len(suffix)] for p in folder.iterdir() if p.name.endswith(suffix)}
        for path in sorted(folder.glob(f"*{NPY_SUFFIX}")):
            if path.name[: -len(NPY_SUFFIX)] not in stems:
                path.unlink(missing_ok=True)
                label_path(path).unlink(missing_ok=True)


@dataclass(frozen=True)
class Conversion:
    """How a workload's reference format becomes its fast one (the contract a workload
    fills, ``Dataset.conversion``).

    ``jobs(root)``: every job of a dataset directory, sorted (the shares are strided over
    this list, so it is listed once and handed to every rank); ``convert(job)``: writes the
    job's outputs atomically and returns the samples they hold; ``done(job)``: its outputs
    are finished (skipped on a rerun); ``name(job)``: the file progress and errors name;
    ``before(root)``/``after(root)``: steps over the whole directory on rank 0 alone, while
    the other ranks wait (outputs whose source is gone removed; an index written);
    ``configure(cfg)``: the conversion a composed config asks for, where a model key
    decides what a valid record is (OC20's cutoff); None: the same for every config.
    """

    source: str  # the format read ("hdf5")
    target: str  # the format written ("npy")
    jobs: Callable[[Path], list[Job]]
    convert: Callable[[Job], int]
    done: Callable[[Job], bool] = outputs_current
    name: Callable[[Job], str] = source_name
    before: Callable[[Path], None] | None = None
    after: Callable[[Path], None] | None = None
    configure: Callable[[Any], Conversion] | None = None
    unit: str = "samples"  # what convert's count counts

    def for_config(self, cfg: Any) -> Conversion:
        """The conversion `cfg` asks for (this one when nothing in a config changes it)."""
        return self if self.configure is None else self.configure(cfg)


@dataclass(frozen=True)
class Result:
    """What a conversion did: the whole job's counts on rank 0 of a coordinated job
    (`whole`), else this rank's share; `reports`: whether this rank tells what was done
    (rank 0 of a coordinated job speaks for all, uncoordinated ranks each for their own)."""

    converted: int  # jobs converted now
    skipped: int  # jobs already done
    samples: int  # what the converted jobs hold (Conversion.unit)
    bytes_read: int  # sources of the converted jobs
    bytes_written: int  # their outputs
    seconds: float  # the slowest rank's wall time
    rank: int = 0
    world: int = 1
    whole: bool = True
    coordinated: bool = False

    @property
    def reports(self) -> bool:
        """Whether this rank prints what was converted."""
        return self.rank == 0 or not self.coordinated

    @property
    def share(self) -> str:
        """`` (rank R's share of N)`` where the counts are one rank's, else nothing."""
        return "" if self.whole else f" (rank {self.rank}'s share of {self.world})"

    def summary(self, conversion: Conversion, root: Path) -> str:
        """One line: what was converted where, how fast (files/s, MB/s read)."""
        seconds = max(self.seconds, 1e-9)
        held = f" ({self.samples} {conversion.unit})" if self.samples != self.converted else ""
        ranks = f"{self.world} rank{'s' if self.world > 1 else ''}"
        skipped = f"; {self.skipped} already converted" if self.skipped else ""
        return (f"converted {self.converted} {conversion.source} → {conversion.target} files"
                f"{held} under {root}{self.share} on {ranks} in {fmt_duration(self.seconds)}: "
                f"{self.converted / seconds:.1f} files/s, "
                f"{self.bytes_read / seconds / 1e6:.1f} MB/s read "
                f"({self.bytes_read / 1e6:.1f} MB read, {self.bytes_written / 1e6:.1f} MB "
                f"written){skipped}")


class _Team(Protocol):
    """The ranks converting together, as the runner needs them."""

    rank: int
    world: int
    coordinated: bool

    def guard(self, name: str) -> contextlib.AbstractContextManager[None]: ...
    def bcast(self, value: Any) -> Any: ...
    def gather(self, value: Any) -> list[Any] | None: ...
    def barrier(self) -> None: ...


@dataclass
class _Alone:
    """No communicator: one process, or a launch whose ranks cannot wait for each other
    (each converts its share; a failure is this rank's exception)."""

    rank: int = 0
    world: int = 1
    coordinated: bool = False

    @contextlib.contextmanager
    def guard(self, name: str) -> Iterator[None]:
        yield

    def bcast(self, value: Any) -> Any:
        return value

    def gather(self, value: Any) -> list[Any] | None:
        return [value]

    def barrier(self) -> None:
        pass


@dataclass
class _Mpi:
    """MPI_COMM_WORLD through mpi4py; a failure in any guarded step is one line on
    stderr and MPI_Abort, which ends every rank (a collective would wait forever for a
    rank that left)."""

    comm: Any
    program: str
    rank: int = 0
    world: int = 1
    coordinated: bool = True

    @contextlib.contextmanager
    def guard(self, name: str) -> Iterator[None]:
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - every failure ends the job in one line
            say(error_line(self.program, name, exc, self.rank, self.world))
            sys.stdout.flush()
            self.comm.Abort(1)

    def bcast(self, value: Any) -> Any:
        return self.comm.bcast(value, root=0)  # pickled between this job's own ranks

    def gather(self, value: Any) -> list[Any] | None:
        return self.comm.gather(value, root=0)

    def barrier(self) -> None:
        self.comm.Barrier()


def error_line(program: str, name: str, exc: BaseException, rank: int, world: int) -> str:
    """``PROGRAM: error: FILE: REASON (rank R of N)`` — the file once, even where the
    reason already names it."""
    text = str(exc).strip().splitlines()
    reason = text[0] if text else ""
    if not isinstance(exc, SciperfError):
        reason = f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__
    where = reason if name in reason else f"{name}: {reason}"
    return f"{program}: error: {where} (rank {rank} of {world})"


def launched_by_mpi(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a rank of an MPI launch (mpirun, an srun step of several
    tasks, a PMI/PMIx job). Under torchrun the workers are no MPI processes, whatever the
    outer launcher set (the innermost launcher decides, as in sciperf.distributed)."""
    env = os.environ if env is None else env
    if "TORCHELASTIC_RUN_ID" in env:
        return False
    if any(marker in env for marker in MPI_MARKERS):
        return True
    tasks = env.get("SLURM_NTASKS", "1")
    return "SLURM_STEP_ID" in env and tasks.isdigit() and int(tasks) > 1


def _team(program: str) -> _Team:
    """The ranks of this launch: MPI's when an MPI launcher started it (mpi4py imported
    only then: its import initialises MPI), else the launcher's place without a
    communicator."""
    info = discover()
    if not launched_by_mpi():
        return _Alone(info.rank, info.world)
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise SciperfError(f"this process is a rank of an MPI launch but mpi4py cannot be "
                           f"imported ({exc}); install mpi4py built for the launcher's MPI"
                           ) from None
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    if info.source != "single" and world != info.world:
        raise SciperfError(f"MPI sees {world} rank(s) where the {info.source} launcher "
                           f"started {info.world}: mpi4py's MPI does not speak this "
                           "launcher's process management (e.g. srun --mpi=pmix)")
    return _Mpi(comm, program, rank, world) if world > 1 else _Alone()


def _size(path: Path) -> int:
    """Bytes of a file, or of the files directly in a folder (a shard)."""
    try:
        if path.is_dir():
            return sum(p.stat().st_size for p in path.iterdir() if p.is_file())
        return path.stat().st_size
    except OSError:
        return 0


def _listed(conversion: Conversion, root: Path, team: _Team) -> list[Job]:
    """The jobs, after rank 0's ``before`` step: listed once, on rank 0, and handed to
    every rank (the listing a coordinated job shares; the others list their own)."""
    jobs: list[Job] | None = None
    with team.guard(str(root)):
        if team.rank == 0 and conversion.before is not None:
            conversion.before(root)
        if team.rank == 0 or not team.coordinated:
            jobs = conversion.jobs(root)
    return team.bcast(jobs)


def _convert_share(conversion: Conversion, jobs: Sequence[Job], team: _Team, force: bool,
                   show_progress: bool) -> list[int]:
    """This rank's strided share converted, done jobs skipped (all redone with `force`):
    [converted, skipped, samples, bytes read, bytes written]."""
    mine = jobs[team.rank::team.world]
    share = f" (rank {team.rank}'s share of {team.world})" if team.world > 1 else ""
    bar = Progress(len(mine), f"converting {conversion.source} → {conversion.target}{share}",
                   unit="files", enabled=show_progress and team.rank == 0)
    counts = [0] * 5
    for job in mine:
        with team.guard(conversion.name(job)):
            if not force and conversion.done(job):
                counts[1] += 1
            else:
                counts[2] += conversion.convert(job)
                counts[0] += 1
                counts[3] += _size(job.source)
                counts[4] += sum(_size(out) for out in job.outputs)
        bar.update()
    return counts


def run(conversion: Conversion, root: str | Path, *, force: bool = False,
        program: str = PROGRAM, show_progress: bool = True, summary: bool = True) -> Result:
    """Convert the dataset under `root`: every job of this launch's share not done yet
    (all, with `force`). Rank 0 shows progress on stderr and, with `summary`, prints the
    summary line on stdout. `program` leads the error line of a failed MPI job."""
    root = Path(root)
    team = _team(program)
    start = time.perf_counter()  # MPI's start-up is the launch's, not the conversion's
    if team.world > 1 and not team.coordinated and conversion.after is not None:
        raise SciperfError(f"converting {conversion.source} → {conversion.target} ends with a "
                           "step over every rank's outputs, which needs the ranks to wait for "
                           "each other: run it under an MPI launcher (mpirun, srun) or as one "
                           "process")
    jobs = _listed(conversion, root, team)
    counts = _convert_share(conversion, jobs, team, force, show_progress)
    parts: list[list[int]] | None = team.gather(counts)
    if team.rank == 0 and conversion.after is not None:  # every share is done (see above)
        with team.guard(str(root)):
            conversion.after(root)
    team.barrier()
    numbers = counts if parts is None else [sum(p[i] for p in parts) for i in range(5)]
    seconds = time.perf_counter() - start  # rank 0: the slowest rank's, `after` included
    whole = team.world == 1 or (team.coordinated and team.rank == 0)
    result = Result(*numbers, seconds, rank=team.rank, world=team.world, whole=whole,
                    coordinated=team.coordinated)
    if summary and result.reports:
        print(result.summary(conversion, root), flush=True)
    return result
