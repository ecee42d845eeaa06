"""Compose launcher → container → program (docs/architecture.md, rule 7) and render the job.

`command` is the one place the three meet. `plan` checks the request against the system,
builds the program's command line from the run's overrides, and renders one of:

* ``sbatch``: a batch script (Slurm systems; launchers srun, mpirun, torchrun),
* ``script``: a shell script run on this host (mpirun/torchrun on a system without Slurm),
* ``local``:  N rank command lines that `sciperf launch` starts and supervises itself.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from string import Template
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sciperf.config import config_dir
from sciperf.config_checks import check_time_limit, time_limit_seconds
from sciperf.config_keys import keys_with
from sciperf.distributed import DEFAULT_PORT, LOCAL_RUN_ID
from sciperf.errors import SciperfError
from sciperf.workloads import get

from . import options as typed
from . import shell
from .container import Container, make_container
from .launcher import Allocation, Launcher, LocalLauncher, make_launcher, mpi_flavour

SCHEDULERS = ("none", "slurm")
# overrides that configure the launch, not the training program
LAUNCH_KEYS = ("launcher", "container", "dry_run", "nodes", "time_limit", "system.scheduler",
               "system.mpi", "system.account", "system.partition", "system.qos",
               "system.constraint", "system.setup")
# keys the program gets from the composed config (choices) or rewritten (paths)
PROGRAM_KEYS = ("workload", "framework", "experiment", "system", "data.dir", "output_dir")
# host paths a container sees at the same place (bound there); a relative one given on the
# command line is made absolute, the container's working directory being another. The
# system's scratch (its parallel file system) is bound too: datasets there are often links
# into it. The files a run reads (the keys whose role is `reads`, sciperf.roles: starting
# weights, a reference checkpoint) are bound the same way, read-only.
SAME_PLACE_KEYS = ("data.stage_dir", "system.scratch_dir")


@dataclass(frozen=True)
class Program:
    """What runs in each rank: argv, plus the host paths the container must mount (at
    the same place: `binds`).

    With `path_args` the program is told `data.dir=` / `output_dir=` as the container
    sees them (for `sciperf train`); a custom program gets the mounts only.
    """

    argv: tuple[str, ...]
    data_dir: str | None = None
    output_dir: str | None = None
    binds: tuple[str, ...] = ()
    path_args: bool = True
    read_only: tuple[str, ...] = ()  # host files bound at the same place, read-only

    def words(self, container: Container) -> list[str]:
        words = list(self.argv)
        if self.path_args and self.data_dir:
            words.append(f"data.dir={hydra_value(container.data_path(self.data_dir))}")
        if self.path_args and self.output_dir:
            words.append(f"output_dir={hydra_value(container.output_path(self.output_dir))}")
        return words


# what Hydra's override grammar reads as a plain value; anything else is quoted
HYDRA_PLAIN = re.compile(r"[\w/.+@%~:$-]+( [\w/.+@%~:$-]+)*")


def hydra_value(text: str) -> str:
    """`text` as one Hydra override value: a path holding a quote or a comma reached the
    ranks raw and every rank failed to parse it ("token recognition error", "Ambiguous
    value"). Quoted, a backslash needs escaping only before a quote or at the end."""
    if HYDRA_PLAIN.fullmatch(text):
        return text
    if "${" in text:
        raise SciperfError(f"{text}: a path holding '${{' reads as a config interpolation")
    escaped = re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""),
                     text)
    return f"'{escaped}'"


def command(launcher: Launcher, container: Container, program: Program,
            alloc: Allocation, slurm: bool) -> list[list[str]]:
    """launcher → container → program, as three word groups (the only composition)."""
    return [
        launcher.words(alloc, slurm),
        container.words(program.data_dir, program.output_dir, launcher.env_names,
                        program.binds, program.read_only),
        program.words(container),
    ]


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0].strip()


def _is_launch_key(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in LAUNCH_KEYS)


def default_program(cfg: DictConfig, overrides: Sequence[str] | None = None,
                    verb: str = "train") -> Program:
    """`sciperf VERB` with the run's choices and the user's overrides (launch keys dropped).

    Without `overrides` (API use) the program gets the choices and paths only.
    """
    given = {_key(o): o for o in overrides or ()}
    choices = {"workload": cfg.workload, "framework": cfg.framework.name,
               "experiment": cfg.experiment}
    if (config_dir() / "system" / f"{cfg.system.name}.yaml").is_file():
        choices["system"] = cfg.system.name
    argv = ["sciperf", verb]
    for key in ("workload", "framework", "experiment", "system"):
        if key in given:
            argv.append(given[key])
        elif key in choices:
            argv.append(f"{key}={choices[key]}")
    reads = tuple(keys_with("reads", get(cfg.workload)))
    for override in overrides or ():
        key = _key(override)
        if not _is_launch_key(key) and key not in PROGRAM_KEYS + SAME_PLACE_KEYS + reads:
            argv.append(override)
    binds: dict[str, list[str]] = {"rw": [], "ro": []}
    for key in SAME_PLACE_KEYS + reads:  # absolute, and mounted where the host has them
        if value := OmegaConf.select(cfg, key, default=None):
            path = os.path.abspath(str(value))
            binds["ro" if key in reads else "rw"].append(path)
            if key in given:
                argv.append(f"{key}={hydra_value(path)}")
        elif key in given:  # set empty (no starting checkpoint, no staging): as given
            argv.append(given[key])
    return Program(tuple(argv), os.path.abspath(cfg.data.dir), os.path.abspath(cfg.output_dir),
                   tuple(binds["rw"]), read_only=tuple(binds["ro"]))


@dataclass
class Plan:
    """A rendered job and the pieces it was made of."""

    kind: str  # sbatch | script | local
    text: str
    output_dir: str
    launcher: Launcher
    container: Container
    program: Program
    alloc: Allocation
    groups: list[list[str]] = field(default_factory=list)

    @property
    def filename(self) -> str | None:
        return {"sbatch": "launch.sbatch", "script": "launch.sh"}.get(self.kind)

    def rank_commands(self, port: int, run_id: str,
                      base_env: Mapping[str, str]) -> list[tuple[list[str], dict[str, str]]]:
        """(argv, env) of every rank (local launcher only)."""
        assert isinstance(self.launcher, LocalLauncher)
        argv = shell.flat(self.groups)
        return [(argv, {**base_env, **env})
                for env in self.launcher.rank_env(self.alloc, port, run_id)]


def _plain(node: Any) -> dict[str, Any]:
    if node is None:
        return {}
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]
    return dict(node)


def _check(cfg: DictConfig, launcher: Launcher, system: Mapping[str, Any]) -> tuple[int, bool]:
    """(nodes, under Slurm) after checking the request against the system's facts."""
    name = system.get("name", "?")
    scheduler = system.get("scheduler") or "none"
    if scheduler not in SCHEDULERS:
        raise SciperfError(f"system.scheduler={scheduler} is not one of {', '.join(SCHEDULERS)} "
                           f"(configs/system/{name}.yaml)")
    mpi_flavour(system)
    nodes = int(cfg.nodes)
    available = int(system.get("nodes") or 1)
    if nodes < 1:
        raise SciperfError(f"nodes={nodes} must be at least 1")
    if nodes > available:
        raise SciperfError(f"nodes={nodes} exceeds the {available} node(s) of system={name} "
                           f"(configs/system/{name}.yaml: nodes)")
    if not launcher.multi_node and nodes > 1:
        raise SciperfError(f"launcher={launcher.name} runs on this host only; nodes={nodes} "
                           f"needs launcher=srun, mpirun or torchrun on a Slurm system")
    slurm = scheduler == "slurm" and launcher.name != "local"
    if launcher.needs_slurm and not slurm:
        raise SciperfError(f"launcher={launcher.name} needs a Slurm system; system={name} has "
                           f"scheduler={scheduler} (e.g. system=slurm-gpu-node)")
    if nodes > 1 and not slurm:
        raise SciperfError(f"launcher={launcher.name} with nodes={nodes} needs a Slurm system; "
                           f"system={name} has scheduler={scheduler}")
    return nodes, slurm


def _check_ranks(cfg: DictConfig, launcher: Launcher, alloc: Allocation) -> None:
    """What every rank of the training program would refuse after its start (a framework
    import and the job's queue wait later), checked against the ranks the launch starts."""
    instances = int(cfg.get("instances", 1))
    if alloc.tasks % instances:
        raise SciperfError(f"instances={instances} does not divide the {alloc.tasks} ranks "
                           f"launcher={launcher.name} starts")
    world = alloc.tasks // instances
    backend = OmegaConf.select(cfg, "distributed.backend", default="native")
    if cfg.framework.name == "tensorflow" and backend == "native" and world > 1:
        raise SciperfError(f"framework=tensorflow with {world} ranks needs "
                           "distributed.backend=horovod (native TF multi-worker is not "
                           f"supported; launcher={launcher.name} starts {alloc.tasks})")
    if backend == "horovod" and world > 1 and launcher.name in ("local", "torchrun"):
        raise SciperfError(f"distributed.backend=horovod needs MPI ranks: launcher=mpirun or "
                           f"srun, not launcher={launcher.name}")
    if instances > 1 and (int(cfg.train.checkpoint_every) or cfg.train.resume):
        raise SciperfError("train.checkpoint_every / train.resume: not available in "
                           f"throughput mode (instances={instances})")


def plan(cfg: DictConfig, overrides: Sequence[str] | None = None,
         program: Program | None = None, as_root: bool | None = None) -> Plan:
    """Check the request and render it (nothing is written or started)."""
    system = _plain(cfg.system)
    launcher = make_launcher(_plain(cfg.launcher) or {"name": "local"}, system, as_root)
    container = make_container(_plain(cfg.container) or {"name": "none"},
                               int(system.get("accelerators_per_node") or 0))
    nodes, slurm = _check(cfg, launcher, system)
    alloc = launcher.allocation(nodes)
    if program is None:
        _check_ranks(cfg, launcher, alloc)
    program = program or default_program(cfg, overrides)
    requeue = _requeue(cfg, slurm)
    if requeue is not None:
        program = _resumable(cfg, program)
    groups = command(launcher, container, program, alloc, slurm)
    output_dir = os.path.abspath(cfg.output_dir)
    header = {"launcher": launcher.name, "container": container.name,
              "system": system.get("name", "?")}
    if isinstance(launcher, LocalLauncher):
        port = launcher.master_port() or DEFAULT_PORT
        lines = [shell.render([[f"{k}={v}" for k, v in env.items()], *groups[1:]])
                 for env in launcher.rank_env(alloc, port, LOCAL_RUN_ID)]
        text = LOCAL.substitute(header, n=alloc.tasks, lines="\n".join(lines))
        return Plan("local", text, output_dir, launcher, container, program, alloc, groups)
    setup = "".join(f"{line}\n" for line in system.get("setup") or [])
    body = {**header, "setup": setup, "command": shell.render(groups)}
    if slurm:
        directives = _directives(cfg, launcher, alloc, system, output_dir, requeue)
        template = BATCH if requeue is None else BATCH_REQUEUE
        verdict = VERDICT.substitute(summary=shell.quote(str(Path(output_dir) /
                                                             "summary.json")))
        text = template.substitute(body, directives=directives, rendezvous=SLURM_RENDEZVOUS,
                                   signal_s=requeue or 0, verdict=verdict)
        return Plan("sbatch", text, output_dir, launcher, container, program, alloc, groups)
    text = SCRIPT.substitute(body, rendezvous=HOST_RENDEZVOUS)
    return Plan("script", text, output_dir, launcher, container, program, alloc, groups)


def _requeue(cfg: DictConfig, slurm: bool) -> int | None:
    """`launcher.requeue=true`: seconds before the time limit at which Slurm sends USR1
    (`launcher.signal_s`, default 300); None when off. Slurm systems only."""
    options = _plain(OmegaConf.select(cfg, "launcher", default=None))
    if not typed.switch(options, "requeue", "launcher"):
        return None
    if not slurm:
        raise SciperfError("launcher.requeue=true needs a Slurm system (it renders sbatch's "
                           "--signal and --requeue)")
    seconds = OmegaConf.select(cfg, "launcher.signal_s", default=300)
    if not isinstance(seconds, int) or not 1 <= seconds <= 65535:
        raise SciperfError(f"launcher.signal_s={seconds} must be 1..65535 seconds before the "
                           "time limit")
    limit = str(OmegaConf.select(cfg, "time_limit", default="01:00:00"))
    total = time_limit_seconds(check_time_limit(limit))
    if total is not None and seconds >= total:  # USR1 would come at once: requeue forever
        raise SciperfError(f"launcher.signal_s={seconds} must be less than time_limit={limit} "
                           f"({total} s): Slurm would signal the checkpoint before training "
                           "starts")
    if int(cfg.get("instances", 1)) > 1:  # every rank refused it after the queue wait
        raise SciperfError("launcher.requeue=true needs checkpoints, which throughput mode "
                           f"(instances={cfg.instances}) does not write")
    return seconds


def _resumable(cfg: DictConfig, program: Program) -> Program:
    """A requeued job must checkpoint and resume: train.checkpoint_every (1 unless set)
    and train.resume=auto join the program's arguments."""
    argv = [a for a in program.argv if not a.startswith("train.resume=")]
    if not int(cfg.train.checkpoint_every):
        argv.append("train.checkpoint_every=1")
    argv.append("train.resume=auto")
    return replace(program, argv=tuple(argv))


def _directives(cfg: DictConfig, launcher: Launcher, alloc: Allocation,
                system: Mapping[str, Any], output_dir: str,
                requeue: int | None = None) -> str:
    tasks_per_node, cpus_per_task = launcher.request(alloc)
    lines = [f"--job-name=sciperf-{cfg.workload}-{cfg.framework.name}",
             f"--nodes={alloc.nodes}", f"--ntasks-per-node={tasks_per_node}"]
    if alloc.gpus_per_node:
        lines.append(f"--gpus-per-node={alloc.gpus_per_node}")
    if cpus_per_task:
        lines.append(f"--cpus-per-task={cpus_per_task}")
    # checked at composition too; again here for configs built in code
    limit = check_time_limit(OmegaConf.select(cfg, "time_limit", default="01:00:00"))
    lines.append(f"--time={limit}")
    for key in ("account", "partition", "qos", "constraint"):
        if system.get(key):
            lines.append(_directive(f"--{key}", system[key], f"system.{key}"))
    # Slurm expands %u, %x … in the log's path: a literal % is %%
    log = str(Path(output_dir)).replace("%", "%%") + "/slurm-%j.out"
    lines.append(_directive("--output", log, "output_dir"))
    if requeue is not None:  # USR1 to the batch shell, back to the queue, one output file
        lines += [f"--signal=B:USR1@{requeue}", "--requeue", "--open-mode=append"]
    return "\n".join(f"#SBATCH {line}" for line in lines)


def _directive(option: str, value: Any, key: str) -> str:
    """`option=value` as an #SBATCH line holds it: sbatch splits these lines at blanks
    (`--output=/a b` was "Invalid directive found in batch script: b") and reads an
    unquoted `#` as a comment, but takes a double-quoted value with `\\"` for a quote; a
    backslash it drops, so a value with one is refused rather than changed."""
    text = str(value)
    if "\\" in text or "\n" in text:
        raise SciperfError(f"{key}={text}: an #SBATCH line cannot hold a backslash or a line "
                           "break")
    if any(c.isspace() or c in "\"#'" for c in text):
        return f'{option}="{text.replace(chr(34), chr(92) + chr(34))}"'
    return f"{option}={text}"


# Batch and host scripts. Shell variables inside the substituted values are not templates.
BATCH = Template("""\
#!/bin/bash
$directives
# Rendered by `sciperf launch` (launcher=$launcher container=$container system=$system).
# Composition: launcher -> container -> program. Submit again with `sbatch <this file>`.
set -euo pipefail
$setup$rendezvous
started=$$(date +%s)
set +e
$command
rc=$$?
set -e
$verdict
exit "$$rc"
""")

BATCH_REQUEUE = Template("""\
#!/bin/bash
$directives
# Rendered by `sciperf launch` (launcher=$launcher container=$container system=$system).
# Composition: launcher -> container -> program. Submit again with `sbatch <this file>`.
# launcher.requeue: $signal_s s before the time limit Slurm sends USR1 to this shell, which
# passes it to the job step; the run checkpoints at its next step and exits 75; the job
# then goes back to the queue and resumes from the checkpoint (train.resume=auto).
set -euo pipefail
$setup$rendezvous
started=$$(date +%s)
$command &
step=$$!
trap 'kill -USR1 "$$step" 2>/dev/null || true' USR1
set +e
wait "$$step"
rc=$$?
while [ "$$rc" -gt 128 ] && kill -0 "$$step" 2>/dev/null; do
  wait "$$step"
  rc=$$?
done
set -e
$verdict
if [ "$$rc" -eq 75 ]; then
  scontrol requeue "$$SLURM_JOB_ID"
  exit 0
fi
exit "$$rc"
""")

# The job's status is the ranks' verdict: 75 when rank 0 stopped with a checkpoint to
# resume. srun passes a rank's 75 on, but torchrun exits 1 for any failed worker, so the
# summary.json written during this job (not an earlier run's) has the last word.
VERDICT = Template("""\
if [ "$$rc" -ne 0 ] && [ "$$(stat -c %Y $summary 2>/dev/null || echo 0)" -ge "$$started" ] \\
    && grep -qs '"status": "checkpointed"' $summary; then
  rc=75
fi""")

# `exec`: mpirun/torchrun takes the shell's place, so the parent-death signal `sciperf
# launch` sets on it (launchers/local.py) reaches the launcher of the ranks, which forwards
# it — with the shell in between, a `kill -9` of `sciperf launch` left the ranks training.
SCRIPT = Template("""\
#!/bin/bash
# Rendered by `sciperf launch` (launcher=$launcher container=$container system=$system).
# Composition: launcher -> container -> program. Run again with `bash <this file>`.
set -euo pipefail
$setup$rendezvous
exec $command
""")

LOCAL = Template("""\
# Rendered by `sciperf launch` (launcher=$launcher container=$container system=$system).
# $n rank(s) on this host, started and supervised by `sciperf launch`: when one exits
# non-zero the others are stopped. MASTER_PORT moves to a free port when busy.
$lines
""")

SLURM_RENDEZVOUS = f"""\
# Rank 0's host and a port per job (what sciperf.distributed.discover and torchrun use).
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
export MASTER_ADDR
export MASTER_PORT=$(({DEFAULT_PORT} + SLURM_JOB_ID % 1000))
"""

HOST_RENDEZVOUS = f"""\
export MASTER_ADDR=${{MASTER_ADDR:-127.0.0.1}}
export MASTER_PORT=${{MASTER_PORT:-{DEFAULT_PORT}}}
"""
