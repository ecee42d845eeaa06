"""The launcher layer: rendered scripts (snapshots), composition rules, errors, real local runs.

Snapshots: every launcher × container on the perlmutter-like system, rendered with fixed
absolute paths and as a non-root user, compared exactly with tests/launch/snapshots/launch/.
Regenerate after an intended change with
`SCIPERF_UPDATE_SNAPSHOTS=1 pytest tests/launch/test_launch.py` and review the diff.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sciperf.config import compose, config_dir
from sciperf.errors import SciperfError

launchers = pytest.importorskip("sciperf_launchers")
from sciperf_launchers import Program, command, job_env, launch, plan, submit  # noqa: E402
from sciperf_launchers.compose import hydra_value  # noqa: E402
from sciperf_launchers.local import free_port  # noqa: E402

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots" / "launch"
UPDATE = os.environ.get("SCIPERF_UPDATE_SNAPSHOTS") == "1"
DATA = "/scratch/sciperf/data/cosmoflow"  # fixed paths: snapshots never depend on the checkout
OUT = "/scratch/sciperf/results/cosmoflow-pytorch-mini"
IMAGES = {"none": [], "apptainer": ["container.image=/images/sciperf-pytorch.sif"],
          "docker": ["container.image=sciperf:pytorch"]}


def _group(name: str) -> list[str]:
    return sorted(p.stem for p in (config_dir() / name).glob("*.yaml"))


LAUNCHERS = _group("launcher")
CONTAINERS = _group("container")


def _overrides(launcher: str, container: str, *extra: str) -> list[str]:
    return ["workload=cosmoflow", "framework=pytorch", "experiment=mini",
            "system=perlmutter-like", f"launcher={launcher}", f"container={container}",
            f"nodes={1 if launcher == 'local' else 2}", f"data.dir={DATA}", f"output_dir={OUT}",
            "train.max_epochs=3", *IMAGES.get(container, []), *extra]


def _plan(launcher: str, container: str, *extra: str, as_root: bool = False):
    overrides = _overrides(launcher, container, *extra)
    return plan(compose(overrides), overrides=overrides, as_root=as_root)


# --- snapshots ---------------------------------------------------------------------------

@pytest.mark.parametrize("container", CONTAINERS)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_rendered_script_matches_snapshot(launcher: str, container: str) -> None:
    text = _plan(launcher, container).text
    path = SNAPSHOTS / f"perlmutter-like_{launcher}_{container}.txt"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"no snapshot {path}: run with SCIPERF_UPDATE_SNAPSHOTS=1"
    assert text == path.read_text(), (
        f"{path.name} differs from the rendering; if intended, regenerate with "
        f"SCIPERF_UPDATE_SNAPSHOTS=1 and review the diff")


def test_no_stale_snapshots() -> None:
    expected = {f"perlmutter-like_{lc}_{c}.txt" for lc in LAUNCHERS for c in CONTAINERS}
    assert {p.name for p in SNAPSHOTS.glob("*.txt")} == expected


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_rendered_scripts_are_shellcheck_clean(tmp_path: Path) -> None:
    paths = []
    for launcher in ("srun", "mpirun", "torchrun"):
        for container in CONTAINERS:
            path = tmp_path / f"{launcher}_{container}.sh"
            path.write_text(_plan(launcher, container).text)
            paths.append(str(path))
    for launcher in ("srun", "mpirun"):  # the requeue-friendly batch script too
        path = tmp_path / f"{launcher}_requeue.sh"
        path.write_text(_plan(launcher, "apptainer", "launcher.requeue=true").text)
        paths.append(str(path))
    proc = subprocess.run(["shellcheck", *paths], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("launcher", ["srun", "mpirun", "torchrun"])
def test_requeue_renders_signal_checkpoint_and_resume(launcher: str) -> None:
    """USR1 signal_s before the limit reaches the batch shell, which passes it to the job
    step; the program checkpoints and resumes; exit 75 requeues the job."""
    text = _plan(launcher, "none", "launcher.requeue=true", "launcher.signal_s=120").text
    for line in ("#SBATCH --signal=B:USR1@120", "#SBATCH --requeue",
                 "#SBATCH --open-mode=append", "trap 'kill -USR1 \"$step\"",
                 "grep -qs '\"status\": \"checkpointed\"' ", "rc=75",
                 'if [ "$rc" -eq 75 ]; then\n  scontrol requeue "$SLURM_JOB_ID"'):
        assert line in text, line
    program = text[text.index("sciperf train"):text.index(" &\n")]
    assert "train.checkpoint_every=1" in program and "train.resume=auto" in program
    kept = _plan(launcher, "none", "launcher.requeue=true", "train.checkpoint_every=3").text
    assert "train.checkpoint_every=3" in kept and "train.checkpoint_every=1" not in kept
    assert "--signal" not in _plan(launcher, "none").text  # off by default


def test_requeue_needs_slurm_and_a_sane_signal_time() -> None:
    with pytest.raises(SciperfError, match="launcher.requeue"):  # no such key for local
        _plan("local", "none", "launcher.requeue=true")
    with pytest.raises(SciperfError, match="launcher.requeue=true needs a Slurm system"):
        overrides = [o.replace("perlmutter-like", "local")
                     for o in _overrides("mpirun", "none", "launcher.requeue=true")]
        plan(compose([*overrides, "nodes=1"]), overrides=overrides)
    with pytest.raises(SciperfError, match="launcher.signal_s=0 must be 1..65535"):
        _plan("srun", "none", "launcher.requeue=true", "launcher.signal_s=0")


# --- composition -------------------------------------------------------------------------

def _words(job) -> list[str]:
    return [str(w) for group in job.groups for w in group]


@pytest.mark.parametrize("launcher", ["srun", "mpirun", "torchrun"])
@pytest.mark.parametrize("container", ["apptainer", "docker"])
def test_order_is_launcher_container_program_once(launcher: str, container: str) -> None:
    job = _plan(launcher, container)
    words = _words(job)
    first = {"srun": "srun", "mpirun": "mpirun", "torchrun": "srun"}[launcher]
    i_launch, i_cont = words.index(first), words.index(container)
    i_prog = words.index("sciperf")
    assert i_launch == 0 and i_launch < i_cont < i_prog
    assert words[i_prog + 1] == "train"
    for word in (first, container, "sciperf", "train", "sciperf:pytorch"):
        assert words.count(word) <= 1, word
    # the script holds exactly that one command
    verb = {"apptainer": "exec", "docker": "run"}[container]
    assert job.text.count(f"{container} {verb} ") == 1 and job.text.count("sciperf train") == 1


def test_command_is_three_groups() -> None:
    job = _plan("srun", "apptainer")
    groups = command(job.launcher, job.container, job.program, job.alloc, slurm=True)
    assert [g[0] for g in groups] == ["srun", "apptainer", "sciperf"]


def test_container_binds_and_rewrites_paths() -> None:
    words = _words(_plan("srun", "apptainer"))
    # perlmutter-like stages to /tmp: the node-local stage dir is bound at the same path
    assert words[words.index("--bind") + 1] == f"{DATA}:/data:ro,{OUT}:/results,/tmp:/tmp"
    words = _words(_plan("srun", "apptainer", "data.stage_dir=null"))
    assert words[words.index("--bind") + 1] == f"{DATA}:/data:ro,{OUT}:/results"
    program = words[words.index("sciperf"):]
    assert "data.dir=/data" in program and "output_dir=/results" in program
    assert not any(DATA in w or OUT in w for w in program)

    job = _plan("mpirun", "docker", "container.data_mount=/in", "container.output_mount=/out",
                "container.binds=[/ssd:/ssd]")
    words = job.groups[1] + job.groups[2]
    volumes = [words[i + 1] for i, w in enumerate(words) if w == "-v"]
    assert volumes == [f"{DATA}:/in:ro", f"{OUT}:/out", "/tmp:/tmp", "/ssd:/ssd"]
    assert "data.dir=/in" in words and "output_dir=/out" in words
    for name in ("OMPI_COMM_WORLD_RANK", "MASTER_ADDR", "MASTER_PORT"):
        assert words[words.index(name) - 1] == "-e"  # rank variables cross into the container

    words = _words(_plan("srun", "none"))
    assert f"data.dir={DATA}" in words and f"output_dir={OUT}" in words


def test_gpu_flags_follow_the_system() -> None:
    for container, flag in (("apptainer", "--nv"), ("docker", "--gpus")):
        assert flag in _words(_plan("srun", container))
        assert flag not in _words(_plan("srun", container, "system.accelerators_per_node=0"))
        assert flag in _words(_plan("srun", container, "system.accelerators_per_node=0",
                                    "container.gpus=true"))


@pytest.mark.parametrize(("system", "extra", "flavour"), [
    ("perlmutter-like", [], "pmi2"),
    ("slurm-gpu-node", [], "pmix"),
    ("perlmutter-like", ["system.mpi=pmix"], "pmix"),
    ("local-slurm", [], "pmix"),
])
def test_srun_uses_the_system_mpi_flavour(system: str, extra: list[str], flavour: str) -> None:
    overrides = ["launcher=srun", f"system={system}", f"output_dir={OUT}", *extra]
    text = plan(compose(overrides), overrides=overrides).text
    assert f" --mpi={flavour} " in text and text.count("--mpi=") == 1


def test_resource_request_per_launcher() -> None:
    srun = _plan("srun", "none").text
    for line in ("--nodes=2", "--ntasks-per-node=4", "--gpus-per-node=4", "--cpus-per-task=32",
                 "--time=", "--qos=regular", "--constraint=gpu", f"--output={OUT}/slurm-%j.out"):
        assert f"#SBATCH {line}" in srun, line
    torchrun = _plan("torchrun", "none").text
    assert "#SBATCH --ntasks-per-node=1\n" in torchrun and "--cpus-per-task=128\n" in torchrun
    assert "--nnodes=2 --nproc_per_node=4 --rdzv_backend=c10d" in torchrun
    assert '"--rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT"' in torchrun
    mpirun = _plan("mpirun", "none", "launcher.tasks_per_node=2").text
    assert "mpirun -np 4 --map-by ppr:2:node --bind-to none" in mpirun
    assert "#SBATCH --cpus-per-task=64\n" in mpirun


def test_account_and_partition_only_when_set() -> None:
    text = _plan("srun", "none").text
    assert "--account" not in text and "--partition" not in text
    text = _plan("srun", "none", "system.account=myproject", "system.partition=gpu").text
    assert "#SBATCH --account=myproject\n" in text and "#SBATCH --partition=gpu\n" in text


def test_mpirun_allows_root_only_as_root() -> None:
    assert "--allow-run-as-root" not in _plan("mpirun", "none", as_root=False).text
    assert "--allow-run-as-root" in _plan("mpirun", "none", as_root=True).text


def test_program_gets_user_overrides_but_not_launch_keys() -> None:
    program = _plan("srun", "apptainer", "dry_run=true", "launcher.tasks_per_node=2",
                    "seed=7", "system.account=x", "system.submission_org=lab",
                    "time_limit=00:10:00").program.argv
    assert "train.max_epochs=3" in program and "seed=7" in program
    assert "system=perlmutter-like" in program and "workload=cosmoflow" in program
    assert "system.submission_org=lab" in program  # MLLOG keys reach the program
    launch_only = ("launcher", "container", "nodes", "dry_run", "time_limit", "system.account")
    assert not any(w.split("=")[0] in launch_only
                   or w.startswith(("launcher.", "container.")) for w in program)


def test_setup_lines_run_before_the_command() -> None:
    text = _plan("srun", "apptainer", "system.setup=[module load apptainer]").text
    assert text.index("\nmodule load apptainer\n") < text.index("\nsrun ")


def test_host_script_without_slurm() -> None:
    overrides = ["launcher=torchrun", "launcher.tasks_per_node=2", f"output_dir={OUT}"]
    job = plan(compose(overrides), overrides=overrides)
    assert job.kind == "script" and job.filename == "launch.sh"
    assert "#SBATCH" not in job.text and "srun" not in job.text
    assert "export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}" in job.text


# --- errors ------------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "needle"), [
    (["launcher=srun", "system=perlmutter-like", "nodes=5000"], "nodes=5000 exceeds the 1536"),
    (["launcher=srun", "system=perlmutter-like", "nodes=0"], "nodes=0 must be at least 1"),
    (["launcher=local", "system=perlmutter-like", "nodes=2"], "launcher=local runs on this host"),
    (["launcher=srun", "system=local"], "launcher=srun needs a Slurm system"),
    (["launcher=mpirun", "system=local", "system.nodes=4", "nodes=2"],
     "launcher=mpirun with nodes=2 needs a Slurm system"),
    (["launcher=srun", "container=apptainer", "system=slurm-gpu-node"],
     "container=apptainer needs an image"),
    (["launcher=mpirun", "container=docker", "system=slurm-gpu-node"],
     "container=docker needs an image"),
    (["launcher=srun", "system=slurm-gpu-node", "system.mpi=mvapich"],
     "system.mpi=mvapich is not a known MPI flavour"),
    (["launcher=srun", "system=slurm-gpu-node", "system.scheduler=pbs"],
     "system.scheduler=pbs is not one of"),
    (["launcher=srun", "system=slurm-gpu-node", "launcher.tasks_per_node=0"],
     "launcher.tasks_per_node=0 must be at least 1"),
    (["launcher=local", "launcher.nprocs=0"], "launcher.nprocs=0 must be at least 1"),
    # launcher/container options of the wrong type (they were a traceback, rounded, split
    # into characters or taken as true)
    (["launcher=local", "launcher.nprocs=abc"], "launcher.nprocs=abc must be a whole number"),
    (["launcher=mpirun", "launcher.tasks_per_node=2.7"],
     "launcher.tasks_per_node=2.7 must be a whole number"),
    (["launcher=mpirun", "launcher.extra_args=--oversubscribe"],
     "launcher.extra_args=--oversubscribe must be a list of words, e.g. "
     "launcher.extra_args=[--oversubscribe]"),
    (["launcher=mpirun", "launcher.env=FOO"], "launcher.env=FOO must be a list of words"),
    (["launcher=srun", "system=slurm-gpu-node", "container=apptainer", "container.image=x.sif",
      "container.binds=/a:/b"], "container.binds=/a:/b must be a list of words"),
    (["launcher=srun", "system=slurm-gpu-node", "launcher.requeue=maybe"],
     "launcher.requeue=maybe must be true or false"),
    (["launcher=srun", "system=slurm-gpu-node", "container=docker", "container.image=x",
      "container.gpus=maybe"], "container.gpus=maybe must be true, false or auto"),
    # requests the job (every rank, after the queue wait) refused
    (["launcher=local", "launcher.nprocs=2", "instances=3"],
     "instances=3 does not divide the 2 ranks launcher=local starts"),
    (["launcher=local", "launcher.nprocs=2", "distributed.backend=horovod"],
     "distributed.backend=horovod needs MPI ranks: launcher=mpirun or srun, not "
     "launcher=local"),
    (["launcher=local", "launcher.nprocs=2", "instances=2", "train.resume=auto"],
     "train.checkpoint_every / train.resume: not available in throughput mode"),
    (["launcher=srun", "system=slurm-gpu-node", "launcher.tasks_per_node=2", "instances=2",
      "launcher.requeue=true"], "launcher.requeue=true needs checkpoints, which throughput"),
    (["launcher=srun", "system=slurm-gpu-node", "launcher.requeue=true", "time_limit=2"],
     "launcher.signal_s=300 must be less than time_limit=2 (120 s)"),
    (["launcher=srun", "system=slurm-gpu-node", "launcher.requeue=true", "time_limit=60",
      "launcher.signal_s=3600"], "launcher.signal_s=3600 must be less than time_limit=60 "
                                 "(3600 s)"),
    # paths the bind syntax would cut: apptainer splits its list at ',' and ':'
    (["launcher=srun", "system=slurm-gpu-node", "container=apptainer", "container.image=x.sif",
      "output_dir='/tmp/o,1'"], "container=apptainer cannot mount output_dir=/tmp/o,1: its "
                                "bind syntax splits at ','"),
    (["launcher=srun", "system=slurm-gpu-node", "container=docker", "container.image=x",
      "data.dir=/tmp/d:1"], "container=docker cannot mount data.dir=/tmp/d:1"),
    (["launcher=srun", "system=slurm-gpu-node", "output_dir=/tmp/a\\b"],
     "an #SBATCH line cannot hold a backslash"),
    # every rank refused it after its start (and the job's queue wait), once per rank
    (["framework=tensorflow", "launcher=local", "launcher.nprocs=2"],
     "framework=tensorflow with 2 ranks needs distributed.backend=horovod"),
    (["framework=tensorflow", "launcher=srun", "system=slurm-gpu-node",
      "launcher.tasks_per_node=4", "instances=2"],
     "framework=tensorflow with 2 ranks needs distributed.backend=horovod"),
])
def test_impossible_requests_are_one_line_errors(extra: list[str], needle: str) -> None:
    with pytest.raises(SciperfError) as err:
        overrides = [f"output_dir={OUT}", *extra]
        plan(compose(overrides), overrides=overrides)
    message = str(err.value)
    assert needle in message and "\n" not in message, message


@pytest.mark.parametrize("extra", [
    ["launcher=mpirun", "launcher.tasks_per_node=2", "distributed.backend=horovod"],
    ["launcher=local", "launcher.nprocs=1"],
    ["launcher=local", "launcher.nprocs=2", "instances=2"],  # two one-rank instances
])
def test_tensorflow_ranks_that_need_no_native_collectives_are_planned(extra: list[str]) -> None:
    overrides = [f"output_dir={OUT}", "framework=tensorflow", *extra]
    job = plan(compose(overrides), overrides=overrides)
    assert job.alloc.tasks == int(extra[1].split("=")[1])


@pytest.mark.parametrize("name", ["o'q", "o,1", "a b$c", "t\\", "x=y", "[a]", 'q"q'])
def test_program_paths_reach_the_ranks_as_hydra_reads_them(tmp_path: Path, name: str) -> None:
    """A path holding a quote or a comma reached the ranks raw: each rank failed to parse
    it ("token recognition error", "Ambiguous value")."""
    out = tmp_path / name
    overrides = [f"output_dir={hydra_value(str(out))}", "launcher=local"]
    cfg = compose(overrides)
    assert cfg.output_dir == str(out)
    program = next(w for w in plan(cfg, overrides=overrides).groups[2]
                   if w.startswith("output_dir="))
    assert compose([program]).output_dir == str(out)


def test_relative_stage_dir_and_init_checkpoint_are_bound_where_the_host_has_them(
        tmp_path: Path, monkeypatch) -> None:
    """The program was told `data.stage_dir=stage` — relative to the container's working
    directory — and an init checkpoint file was passed on but never mounted. The files a
    run reads (the keys whose role is `reads`: the workload's train.init_checkpoint and
    the generic train.init_weights, which was not bound at all) are bound read-only."""
    monkeypatch.chdir(tmp_path)
    overrides = ["workload=openfold", "launcher=srun", "system=slurm-gpu-node",
                 "container=apptainer", "container.image=x.sif", "data.stage_dir=stage",
                 "train.init_checkpoint=ckpt/init.pt", f"output_dir={OUT}", f"data.dir={DATA}",
                 "system.scratch_dir=/scratch/proj", "train.init_weights=w/start.npz"]
    words = plan(compose(overrides), overrides=overrides).groups
    binds = words[1][words[1].index("--bind") + 1].split(",")
    assert binds[2:] == [f"{tmp_path}/stage:{tmp_path}/stage",
                         "/scratch/proj:/scratch/proj",  # the schema said "bound": it was not
                         f"{tmp_path}/w/start.npz:{tmp_path}/w/start.npz:ro",
                         f"{tmp_path}/ckpt/init.pt:{tmp_path}/ckpt/init.pt:ro"]
    assert f"data.stage_dir={tmp_path}/stage" in words[2]
    assert f"train.init_checkpoint={tmp_path}/ckpt/init.pt" in words[2]
    assert f"train.init_weights={tmp_path}/w/start.npz" in words[2]
    assert not any(w.endswith("=stage") or w.endswith("=ckpt/init.pt") for w in words[2])
    # set empty (no starting checkpoint): passed on as given, not dropped (the ranks then
    # composed the default <data.dir>/pretrained.pt and found no such file)
    empty = [*overrides, "train.init_checkpoint=", "data.stage_dir=null"]
    words = plan(compose(empty), overrides=empty).groups
    assert "train.init_checkpoint=" in words[2] and "data.stage_dir=null" in words[2]
    assert "--bind" not in words[1] or "init.pt" not in words[1][words[1].index("--bind") + 1]


def test_submit_without_sbatch_is_a_clear_error(tmp_path: Path) -> None:
    script = tmp_path / "launch.sbatch"
    script.write_text("#!/bin/bash\n")
    with pytest.raises(SciperfError, match="sbatch not found"):
        submit(script, {"PATH": str(tmp_path)})


def test_dry_run_writes_and_prints_but_submits_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    overrides = ["launcher=srun", "system=slurm-gpu-node", "nodes=2", "dry_run=true",
                 f"output_dir={out}", f"data.dir={tmp_path / 'missing'}"]
    assert launch(compose(overrides), overrides=overrides) == 0
    script = (out / "launch.sbatch").read_text()
    assert capsys.readouterr().out == script
    assert script.startswith("#!/bin/bash\n#SBATCH") and os.access(out / "launch.sbatch", os.X_OK)
    assert not list(out.glob("slurm-*.out"))


def test_missing_data_is_caught_before_submission(tmp_path: Path) -> None:
    overrides = ["launcher=srun", "system=slurm-gpu-node", f"output_dir={tmp_path}",
                 f"data.dir={tmp_path / 'missing'}"]
    with pytest.raises(SciperfError, match="missing does not exist"):
        launch(compose(overrides), overrides=overrides)
    assert not (tmp_path / "launch.sbatch").exists()


# --- real processes ----------------------------------------------------------------------

RANK_PROGRAM = """\
import dataclasses, json, os, sys, time
from sciperf.distributed import discover
info = discover()
out = sys.argv[1]
tmp = os.path.join(out, f".rank{info.rank}.json")
with open(tmp, "w") as f:
    json.dump({**dataclasses.asdict(info), "pid": os.getpid()}, f)
os.replace(tmp, os.path.join(out, f"rank{info.rank}.json"))
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)
"""


def _rank_program(out: Path, sleep_s: float = 0) -> Program:
    return Program((sys.executable, "-c", RANK_PROGRAM, str(out), str(sleep_s)),
                   path_args=False)


def _ranks(out: Path, n: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]


def _assert_consistent(infos: list[dict], source: str) -> None:
    assert [i["rank"] for i in infos] == [0, 1]
    assert {i["world"] for i in infos} == {2} and {i["local_size"] for i in infos} == {2}
    assert sorted(i["local_rank"] for i in infos) == [0, 1]
    assert {i["source"] for i in infos} == {source}
    assert len({(i["master_addr"], i["master_port"]) for i in infos}) == 1


def test_local_launcher_two_ranks_see_one_job(tmp_path: Path) -> None:
    overrides = ["launcher=local", "launcher.nprocs=2", f"output_dir={tmp_path}"]
    assert launch(compose(overrides), program=_rank_program(tmp_path)) == 0
    _assert_consistent(_ranks(tmp_path, 2), "torchrun")


def test_local_launcher_stops_all_when_one_rank_dies(tmp_path: Path) -> None:
    """Kill one of two ranks: the other is stopped and the launcher fails within seconds."""
    code = (
        "import sys\n"
        "from sciperf.config import compose\n"
        "from sciperf_launchers import Program, launch\n"
        f"cfg = compose(['launcher=local', 'launcher.nprocs=2', 'output_dir={tmp_path}'])\n"
        f"prog = Program({_rank_program(tmp_path, 120).argv!r}, path_args=False)\n"
        "sys.exit(launch(cfg, program=prog))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"rank{r}.json").exists() for r in (0, 1)):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "ranks did not start"
            time.sleep(0.1)
        infos = _ranks(tmp_path, 2)
        _assert_consistent(infos, "torchrun")
        killed = time.monotonic()
        os.kill(infos[1]["pid"], signal.SIGKILL)
        rc = proc.wait(timeout=30)
        elapsed = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"launcher ended {elapsed:.2f} s after rank 1 was killed, status {rc}")
    assert rc != 0 and elapsed < 10
    with pytest.raises(ProcessLookupError):
        os.kill(infos[0]["pid"], 0)
    assert "rank 1 exited with status 137" in (proc.stderr.read() if proc.stderr else "")


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="OpenMPI (mpirun) not installed")
def test_mpirun_script_runs_two_ranks(tmp_path: Path) -> None:
    overrides = ["launcher=mpirun", "launcher.tasks_per_node=2", f"output_dir={tmp_path}",
                 "launcher.extra_args=[--oversubscribe]"]
    assert launch(compose(overrides), program=_rank_program(tmp_path)) == 0
    _assert_consistent(_ranks(tmp_path, 2), "openmpi")
    assert (tmp_path / "launch.sh").is_file()


def test_torchrun_script_runs_two_ranks(tmp_path: Path, monkeypatch) -> None:
    if shutil.which("torchrun", path=job_env()["PATH"]) is None:
        pytest.skip("torchrun (torch) not installed")
    overrides = ["launcher=torchrun", "launcher.tasks_per_node=2", f"output_dir={tmp_path}"]
    monkeypatch.setenv("MASTER_PORT", str(free_port()))  # the script's rendezvous port
    assert launch(compose(overrides), program=_rank_program(tmp_path)) == 0
    _assert_consistent(_ranks(tmp_path, 2), "torchrun")


@pytest.mark.parametrize("launcher", ["mpirun", "torchrun"])
def test_sigterm_to_a_script_launch_stops_its_ranks(tmp_path: Path, launcher: str) -> None:
    """`sciperf launch` ended on SIGTERM (143) but the script it ran — mpirun or torchrun
    and both ranks — went on running."""
    if shutil.which(launcher, path=job_env()["PATH"]) is None:
        pytest.skip(f"{launcher} not installed")
    extra = "'launcher.extra_args=[--oversubscribe]', " if launcher == "mpirun" else ""
    code = (
        "import sys\n"
        "from sciperf.config import compose\n"
        "from sciperf_launchers import Program, launch\n"
        f"cfg = compose(['launcher={launcher}', 'launcher.tasks_per_node=2', {extra}"
        f"'output_dir={tmp_path}'])\n"
        f"prog = Program({_rank_program(tmp_path, 120).argv!r}, path_args=False)\n"
        "sys.exit(launch(cfg, program=prog))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True,
                            env={**job_env(), "MASTER_PORT": str(free_port())})
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"rank{r}.json").exists() for r in (0, 1)):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "ranks did not start"
            time.sleep(0.1)
        pids = [info["pid"] for info in _ranks(tmp_path, 2)]
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 143
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in pids if _alive(pid)]
        time.sleep(0.1)
    assert alive == [], f"ranks still running after the launch ended: {alive}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours counts as ended
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


# --- the console verb --------------------------------------------------------------------

def _has_launch_verb() -> bool:
    from sciperf.cli import VERBS
    return "launch" in VERBS


needs_verb = pytest.mark.skipif(not _has_launch_verb(),
                                reason="`sciperf launch` verb not registered in sciperf.cli")


@needs_verb
def test_cli_launch_dry_run_prints_the_written_script(sciperf_cmd, tmp_path: Path) -> None:
    proc = subprocess.run([*sciperf_cmd, "launch", "system=slurm-gpu-node", "launcher=srun",
                           "nodes=2", "dry_run=true", f"output_dir={tmp_path}"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (tmp_path / "launch.sbatch").read_text()
    assert "#SBATCH --nodes=2" in proc.stdout and " --mpi=pmix " in proc.stdout


@needs_verb
def test_cli_launch_impossible_request_is_one_line(sciperf_cmd, tmp_path: Path) -> None:
    proc = subprocess.run([*sciperf_cmd, "launch", "system=slurm-gpu-node", "launcher=srun",
                           "nodes=99", f"output_dir={tmp_path}"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={k: v for k, v in os.environ.items() if k != "SCIPERF_DEBUG"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        "sciperf launch: error: nodes=99 exceeds the 16 node(s) of system=slurm-gpu-node "
        "(configs/system/slurm-gpu-node.yaml: nodes)"]
    assert not (tmp_path / "launch.sbatch").exists()


def test_mpirun_ranks_yield_only_on_cpu_nodes() -> None:
    """CPU ranks share cores with compute threads: waiting ranks yield instead of spinning."""
    yield_flag = "--mca mpi_yield_when_idle 1"
    assert yield_flag not in _plan("mpirun", "none").text  # perlmutter-like: 4 GPUs a node
    assert yield_flag in _plan("mpirun", "none", "system.accelerators_per_node=0").text


def test_launch_checks_output_dir_before_rendering_or_submitting(tmp_path: Path) -> None:
    """The job script goes to output_dir: a path that cannot take it is one line; a
    submission into a folder holding a run is refused now, not after the queue wait."""
    def run(out: Path | str, *extra: str) -> None:
        overrides = [*_overrides("srun", "none"), f"output_dir={out}", *extra]
        launch(compose(overrides), overrides=overrides)

    with pytest.raises(SciperfError, match="^output_dir=/proc/sciperf-x cannot be written"):
        run("/proc/sciperf-x", "dry_run=true")
    (tmp_path / "result_0.txt").write_text("old")
    for extra in ([], ["train.resume=auto"], ["launcher.requeue=true"]):
        # resuming needs a checkpoint there: without one the job refuses the records too
        with pytest.raises(SciperfError, match="already holds a run \\(result_0.txt\\) and no "
                                               "checkpoint to resume: the job"):
            run(tmp_path, *extra)
    run(tmp_path, "dry_run=true")  # rendering alone is fine
    assert (tmp_path / "launch.sbatch").is_file()
