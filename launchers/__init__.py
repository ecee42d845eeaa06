"""sciperf's launcher layer: `sciperf launch` renders, writes and submits or starts a job.

Pieces (docs/architecture.md, rule 7): a launcher (`launcher.py`) turns the allocation into words, a
container (`container.py`) wraps the program, the system config supplies site facts, and
`compose.command` puts them together in the order launcher → container → program.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sciperf import checkpoint
from sciperf.data import atomic
from sciperf.data.layout import unmade_on_failure
from sciperf.distributed import DEFAULT_PORT, LOCAL_RUN_ID
from sciperf.errors import SciperfError
from sciperf.output import run_records, usable
from sciperf.results.summary import SUMMARY_FILE
from sciperf.results.throughput import throughput

from .compose import Plan, Program, command, default_program, plan
from .container import CONTAINERS, make_container
from .launcher import LAUNCHERS, MPI_FLAVOURS, Allocation, LocalLauncher, make_launcher
from .local import free_port, port_is_free, run_local, run_script
from .ports import reserved_port

__all__ = ["CONTAINERS", "LAUNCHERS", "MPI_FLAVOURS", "Allocation", "Plan", "Program",
           "command", "default_program", "free_port", "job_env", "launch", "make_container",
           "make_launcher", "plan", "port_is_free", "reserved_port", "run_local", "submit",
           "write_script"]


def job_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment jobs inherit: this interpreter's bin/ first, so `sciperf` resolves."""
    env = dict(os.environ if base is None else base)
    bindir = str(Path(sys.executable).parent)
    parts = [p for p in env.get("PATH", "").split(os.pathsep) if p]
    if bindir not in parts:
        env["PATH"] = os.pathsep.join([bindir, *parts])
    return env


def write_script(path: Path, text: str) -> Path:
    """The job script, executable, written aside and renamed (never half a script that
    sbatch would queue); a write the disk refuses is one line naming `path`, with no
    temporary and no folder made for it left behind (sciperf.data.atomic)."""
    with atomic.folder_for(path.parent), atomic.replacing(path) as tmp:
        tmp.write_text(text)
        tmp.chmod(0o755)
    return path


def submit(path: Path, env: Mapping[str, str], *extra: str, timeout: float | None = None) -> str:
    """`sbatch --parsable [EXTRA…] SCRIPT`; returns the job id (`--wait`: once it ended well)."""
    exe = shutil.which("sbatch", path=env.get("PATH"))
    if exe is None:
        raise SciperfError(f"sbatch not found: submit {path} from a Slurm login node, "
                           f"or use dry_run=true to only render it")
    proc = subprocess.run([exe, "--parsable", *extra, str(path)], capture_output=True,
                          text=True, env=dict(env), check=False, timeout=timeout)
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise SciperfError(f"sbatch {path} failed: {reason}")
    return proc.stdout.strip().split(";")[0]


def _report_throughput(output_dir: str, instances: int) -> None:
    """After a local throughput run: the instances' combined score (or why there is none)."""
    files = [Path(output_dir) / f"result_{i}.txt" for i in range(instances)]
    try:
        print(throughput(files).line(), flush=True)
    except SciperfError as exc:
        print(f"sciperf launch: no throughput score: {exc}", file=sys.stderr)


def _check_output(cfg: Any, out: Path, dry: bool) -> None:
    """output_dir takes the job script, and (for a real submission) holds no earlier run the
    job would refuse after its wait in the queue — unless it overwrites it, or resumes
    (train.resume=auto, launcher.requeue) from a checkpoint that is there: without one the
    job would refuse the records all the same."""
    usable(out)
    resumes = cfg.train.resume == "auto" or OmegaConf.select(cfg, "launcher.requeue",
                                                             default=False) is True
    if dry or cfg.train.overwrite or (resumes and checkpoint.latest(out) is not None):
        return
    found = run_records(out)
    if found:
        names = ", ".join(p.name for p in found[:4])
        raise SciperfError(f"output_dir={out} already holds a run ({names}) and no checkpoint "
                           "to resume: the job would refuse it after its wait in the queue; "
                           "use a new directory or train.overwrite=true")


def _check_dataset(cfg: Any, alloc: Allocation) -> None:
    """The dataset's listing and batch rules for one instance's ranks, as every rank checks
    them first: a folder without the dataset (or too few samples for the batch) is one
    line now, not a job that fails after its wait in the queue."""
    from sciperf.distributed import RankInfo
    from sciperf.run import resolve_files
    from sciperf.workloads import get
    data = Path(cfg.data.dir)
    if not data.is_dir():
        raise SciperfError(f"data.dir={data} does not exist (run `sciperf prepare` first)")
    instances = int(cfg.get("instances", 1))
    resolve_files(cfg, RankInfo(world=max(alloc.tasks // instances, 1),
                                local_size=alloc.tasks_per_node), get(cfg.workload))


def launch(cfg: DictConfig, overrides: Sequence[str] | None = None,
           program: Program | None = None, *, as_root: bool | None = None) -> int:
    """Render the job for `cfg`; unless `cfg.dry_run`, submit it (Slurm) or start it.

    `overrides` are the user's `key=value` words: all but the launch keys are passed to the
    program. Slurm systems get `OUT/launch.sbatch` (job id printed), other systems
    `OUT/launch.sh` run here, the local launcher N supervised processes.
    """
    job = plan(cfg, overrides, program, as_root=as_root)
    dry = bool(cfg.get("dry_run", False))
    with unmade_on_failure(Path(job.output_dir).absolute()):  # no output_dir left by a refusal
        if job.kind != "local":  # the script goes there: a bad path is one line, now
            _check_output(cfg, Path(job.output_dir), dry or program is not None)
        elif not dry and program is None:  # what rank 0 would refuse while the others wait
            _check_output(cfg, Path(job.output_dir), False)
        if not dry and program is None:
            _check_dataset(cfg, job.alloc)
        if job.kind != "local":
            path = write_script(Path(job.output_dir) / str(job.filename), job.text)
    if job.kind == "local":
        print(job.text, end="", file=sys.stdout if dry else sys.stderr, flush=True)
        if dry:
            return 0
        assert isinstance(job.launcher, LocalLauncher)  # kind "local" is its launcher's
        run_id = f"{LOCAL_RUN_ID}-{os.getpid()}"
        # held until the ranks have ended: no other launch hands out the same port
        with reserved_port(job.launcher.master_port(), _ports(cfg)) as port:
            code = run_local(job.rank_commands(port, run_id, job_env()),
                             signal_grace_s=_signal_grace(cfg))
        if int(cfg.get("instances", 1)) > 1 and program is None:
            _report_throughput(job.output_dir, int(cfg.instances))
        return code
    if dry:
        print(job.text, end="", flush=True)
        print(f"sciperf launch: wrote {path} (dry run: not submitted)", file=sys.stderr)
        return 0
    env = job_env()
    if job.kind == "sbatch":
        job_id = submit(path, env)
        print(f"sciperf launch: submitted {path} as job {job_id}; log "
              f"{Path(job.output_dir) / f'slurm-{job_id}.out'}", file=sys.stderr)
        print(job_id, flush=True)
        return 0
    print(f"sciperf launch: running {path}", file=sys.stderr, flush=True)
    with contextlib.ExitStack() as held:
        if "MASTER_PORT" not in env:  # the script's default port may be another job's
            env["MASTER_PORT"] = str(held.enter_context(reserved_port(DEFAULT_PORT,
                                                                      _ports(cfg))))
        return run_script(str(path), env, max(30.0, _signal_grace(cfg)),
                          launcher=job.launcher.name,
                          summary=Path(job.output_dir) / SUMMARY_FILE)


def _ports(cfg: Any) -> int:
    """Rendezvous ports a job uses from MASTER_PORT on: one, or in throughput mode the
    instances' own after it (sciperf.distributed.split_instances)."""
    instances = int(cfg.get("instances", 1))
    return 1 + instances if instances > 1 else 1


def _signal_grace(cfg: Any) -> float:
    """How long ranks sent SIGTERM by `sciperf launch` get before SIGKILL: their
    train.term_grace_s to checkpoint (or write their records), and 10 s for the write."""
    grace = OmegaConf.select(cfg, "train.term_grace_s", default=None)
    return float(grace if isinstance(grace, int | float) else 20) + 10.0
