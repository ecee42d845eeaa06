"""`sciperf data convert` over real MPI ranks (mpirun, mpi4py): DeepCAM hdf5, CosmoFlow
TFRecord and OC20 LMDB → npy on 2 ranks give the 1-rank result byte for byte; a file that
fails on one rank ends the whole job at once in one line naming it; a rerun after the fix
converts only what is left.

Tiny sets from the workloads' own generators (a few files each, made once per module); the
ranks run `sciperf.tools.data_convert.run` from a short script — three mpirun launches in
all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sciperf.data.conversion import launched_by_mpi
from sciperf.tools import data_convert
from sciperf.workloads.cosmoflow import data as cf_data
from sciperf.workloads.cosmoflow import synthetic as universes
from sciperf.workloads.cosmoflow import tfrecord as cf_tfrecord
from sciperf.workloads.deepcam import data as dc
from sciperf.workloads.deepcam import synthetic as climate
from sciperf.workloads.oc20 import synthetic as slabs
from testkit import cli, one_error_line

MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="no mpirun (Open MPI) on this machine")

CUTOFF = 4.0  # Å, the OC20 set's graph radius and the conversion's check
SCRIPT = f"""
import sys
from types import SimpleNamespace as ns
from sciperf.tools import data_convert
for workload, root in zip(sys.argv[1::2], sys.argv[2::2]):
    data_convert.run(ns(workload=workload, data=ns(dir=root), model=ns(cutoff={CUTOFF!r})), False)
"""
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def _cfg(workload: str, root: Path) -> SimpleNamespace:
    return SimpleNamespace(workload=workload, data=SimpleNamespace(dir=str(root)),
                           model=SimpleNamespace(cutoff=CUTOFF))


def _mpirun(*pairs: Path | str, timeout: float = 30) -> tuple[subprocess.CompletedProcess,
                                                               float]:
    """The script on 2 real ranks over (workload, root) pairs; the process and its seconds
    (a rank left waiting for one that failed would hang here until `timeout`)."""
    env = {k: v for k, v in os.environ.items() if k != "SCIPERF_DEBUG"} | ROOT_OK
    start = time.monotonic()
    proc = subprocess.run([MPIRUN, "-n", "2", "--oversubscribe", sys.executable, "-c", SCRIPT,
                           *map(str, pairs)], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)
    return proc, time.monotonic() - start


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each workload's reference format, written by its generator: 8 DeepCAM hdf5
    samples, 6 CosmoFlow TFRecords, 3 OC20 LMDB containers (their npy shards removed)."""
    base = tmp_path_factory.mktemp("convert")
    climate.generate(climate.GenerateRequest(
        root=str(base / "deepcam"), fmt="hdf5", train_samples=6, eval_samples=2, height=32,
        width=48, seed=0), show_progress=False)
    universes.generate(universes.GenerateRequest(
        root=str(base / "cosmoflow"), fmt="tfrecord", train_samples=4, eval_samples=2,
        size=8, seed=0), show_progress=False)
    slabs.generate(slabs.GenerateRequest(
        root=str(base / "oc20"), train_samples=6, eval_samples=3, seed=3, cutoff=CUTOFF,
        max_neighbours=12, slab=(2, 2, 3), metals=("Cu", "Pt"), rattle=0.05,
        adsorbate_probability=0.5, per_container=3), show_progress=False)
    for shard in (base / "oc20").glob("*/shard.*"):
        shutil.rmtree(shard)
    return {name: base / name for name in ("deepcam", "cosmoflow", "oc20")}


def _outputs(root: Path) -> dict[str, bytes]:
    """Every npy file the conversion wrote, by its path under `root`."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.npy"))}


def _summary(stdout: str, source: str) -> str:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("converted ") and source in ln]
    assert len(lines) == 1, stdout
    return lines[0]


@needs_mpirun
def test_two_ranks_convert_every_format_like_one_rank(sources, tmp_path, capsys) -> None:
    one = {n: Path(shutil.copytree(p, tmp_path / "one" / n)) for n, p in sources.items()}
    two = {n: Path(shutil.copytree(p, tmp_path / "two" / n)) for n, p in sources.items()}
    for name, root in one.items():
        assert data_convert.run(_cfg(name, root), False) == 0
    single = capsys.readouterr().out
    assert "on 1 rank " in _summary(single, "hdf5")

    proc, _ = _mpirun(*(x for pair in two.items() for x in pair))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the counts of both ranks met on rank 0: every file once, each share converted once
    for source, files in (("hdf5", 8), ("tfrecord", 6), ("lmdb", 3)):
        line = _summary(proc.stdout, source)
        assert f"converted {files} {source} → npy files" in line and "on 2 ranks" in line
        assert "files/s" in line and "MB/s" in line, line
    assert "(9 structures)" in _summary(proc.stdout, "lmdb")
    for name in sources:
        expected = _outputs(one[name])
        assert expected and _outputs(two[name]) == expected, name

    # what the 1-rank conversion wrote is the source's content (CosmoFlow's cube size is
    # read from the TFRecord's bytes: no config says it)
    for tfr, npy in zip(cf_data.list_samples(one["cosmoflow"], "train", "tfrecord"),
                        cf_data.list_samples(one["cosmoflow"], "train", "npy"), strict=True):
        for a, b in zip(cf_data.read_sample(tfr, "tfrecord", (8, 8, 8, 4)),
                        cf_data.read_sample(npy, "npy", (8, 8, 8, 4)), strict=True):
            np.testing.assert_array_equal(a, b)


@needs_mpirun
def test_a_failing_rank_ends_the_job_and_a_rerun_finishes_the_rest(sources, tmp_path) -> None:
    root = Path(shutil.copytree(sources["deepcam"], tmp_path / "d"))
    jobs = dc.list_samples(root, "train", "hdf5") + dc.list_samples(root, "validation", "hdf5")
    victim = jobs[7]  # the last of rank 1's share (jobs 1, 3, 5, 7): its others are done
    good = victim.read_bytes()
    victim.write_bytes(b"\x89HDF\r\n\x1a\n not an hdf5 file")

    proc, seconds = _mpirun("deepcam", root)
    assert proc.returncode != 0 and seconds < 20, (proc.returncode, seconds)
    ours = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(ours) == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = ours[0]
    assert line.startswith("sciperf data convert: error: ") and line.count(str(victim)) == 1
    assert line.endswith("(rank 1 of 2)"), line
    npy = {src: src.with_name(src.name.replace(".h5", ".data.npy")) for src in jobs}
    assert not npy[victim].exists() and not dc.label_path(npy[victim]).exists()
    finished = {p: (p.stat().st_ino, p.stat().st_mtime_ns)
                for src in jobs if npy[src].exists() for p in (npy[src], dc.label_path(npy[src]))}
    assert all(npy[jobs[i]] in finished for i in (1, 3, 5)), sorted(finished)

    victim.write_bytes(good)
    proc, _ = _mpirun("deepcam", root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done_before = len(finished) // 2
    line = _summary(proc.stdout, "hdf5")
    assert f"converted {8 - done_before} hdf5 → npy files" in line, line
    assert f"{done_before} already converted" in line, line
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in finished} == finished
    for src in jobs:  # every sample now, and the repaired one as its source holds it
        for a, b in zip(dc.read_raw(src, "hdf5"), dc.read_raw(npy[src], "npy"), strict=True):
            np.testing.assert_array_equal(a, b)


def test_prepare_converts_cosmoflow_through_the_same_conversion(sources, tmp_path) -> None:
    """`sciperf prepare data.source=convert` runs the workload's Conversion in one
    process; a TFRecord whose `x` makes no cube of 4 channels is one line naming it."""
    root = Path(shutil.copytree(sources["cosmoflow"], tmp_path / "c"))
    proc = cli("prepare", "workload=cosmoflow", f"data.dir={root}", "data.source=convert")
    assert proc.returncode == 0, proc.stderr
    assert f"converted 6 tfrecord samples to npy under {root}" in proc.stdout
    assert len(cf_data.list_samples(root, "validation", "npy")) == 2
    odd = root / "train" / "univ_odd.tfrecord"
    cf_tfrecord.write_sample(odd, np.zeros((3, 5, 7, 4), np.int16), np.zeros(4, np.float32))
    line = one_error_line(cli("prepare", "workload=cosmoflow", f"data.dir={root}",
                              "data.source=convert"), "prepare")
    assert str(odd) in line and "not a cube of 4 int16 channels" in line, line
    assert not (root / "train" / "univ_odd.data.npy").exists()


def test_what_makes_a_process_an_mpi_rank() -> None:
    """mpi4py is imported (MPI initialised) only where an MPI launcher started the
    process; a torchrun worker or a Slurm batch script is no MPI rank."""
    assert launched_by_mpi({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"})
    assert launched_by_mpi({"PMI_SIZE": "4", "PMI_RANK": "1"})
    assert launched_by_mpi({"SLURM_STEP_ID": "0", "SLURM_NTASKS": "4", "SLURM_PROCID": "2"})
    assert not launched_by_mpi({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"})  # batch script
    assert not launched_by_mpi({"SLURM_STEP_ID": "0", "SLURM_NTASKS": "1"})
    assert not launched_by_mpi({"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "2",
                                "OMPI_COMM_WORLD_SIZE": "2"})
    assert not launched_by_mpi({})


def test_a_workload_without_a_conversion_says_so(tmp_path, capsys) -> None:
    assert data_convert.run(_cfg("openfold", tmp_path), False) == 0
    assert capsys.readouterr().out.strip() == "openfold has nothing to convert"
    assert not list(tmp_path.iterdir())
