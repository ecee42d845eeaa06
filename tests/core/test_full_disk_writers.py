"""Every writer besides package, report and characterize (tests/results/test_full_disk.py)
ends a full disk in one line naming its file, in atomic.why's words, and leaves no
temporary and no half-written file (issue 37, item 1: the same class of fault elsewhere):
bench records, the launch script, the dataset manifest, prepare's per-rank parts, OC20's
force_stats.json, OpenFold's generator mark and starting checkpoint, the scratch folders
of `check`, `score` and the bench's staging row.

The disk is filled for real, in this process: a lowered soft RLIMIT_FSIZE fails a write
past it with EFBIG, as a full disk fails it with ENOSPC (:class:`FileSizeLimit`). Folders
and links take no bytes a file-size limit counts: where a test needs them refused, a tmpfs
with no inode left gives ENOSPC itself (skipped where this process may not mount).
"""

from __future__ import annotations

import contextlib
import io
import json
import resource
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sciperf.errors import SciperfError
from testkit import cli, cosmoflow_log, one_error_line

TOO_LARGE = "cannot be written (File too large; is the disk full?)"
NO_SPACE = "cannot be written (No space left on device; is the disk full?)"


class FileSizeLimit:
    """This process's writes to regular files end at a number of bytes, from :meth:`start`
    to :meth:`stop` (the fixture stops it whatever the test did). The soft limit goes back
    to what it was; the hard one is never lowered, so it can. SIGXFSZ is ignored for the
    window: a write past the limit fails with EFBIG instead of killing the process.

    Nothing else of this process writes a regular file in the window: pytest-xdist's
    channel to its worker is a pipe, which the limit does not bind; sys.stdout and
    sys.stderr, whose fds pytest captures into temporary files, go to memory until
    :meth:`stop`. Child processes started in the window inherit the limit, as a child of a
    process on a full disk writes to the same disk."""

    def __init__(self) -> None:
        self._soft, self._hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        self._handler = signal.getsignal(signal.SIGXFSZ)
        self._quiet: contextlib.ExitStack | None = None

    def start(self, limit: int, *, quiet: bool = True) -> None:
        """Writes past `limit` bytes fail from now on (`quiet=False`: sys.stdout and
        sys.stderr are in memory already, testkit.cli's, and are theirs to restore)."""
        if quiet:
            self._quiet = contextlib.ExitStack()
            self._quiet.enter_context(contextlib.redirect_stdout(io.StringIO()))
            self._quiet.enter_context(contextlib.redirect_stderr(io.StringIO()))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, self._hard))

    def stop(self) -> None:
        """Files grow as before (a second call does nothing)."""
        resource.setrlimit(resource.RLIMIT_FSIZE, (self._soft, self._hard))
        signal.signal(signal.SIGXFSZ, self._handler)
        if self._quiet is not None:
            self._quiet.close()
            self._quiet = None

    @contextlib.contextmanager
    def at(self, limit: int) -> Iterator[None]:
        """The body's writes end at `limit` bytes."""
        self.start(limit)
        try:
            yield
        finally:
            self.stop()


@pytest.fixture
def disk() -> Iterator[FileSizeLimit]:
    """A file-size limit for this test, lifted at its end whatever happened."""
    limit = FileSizeLimit()
    try:
        yield limit
    finally:
        limit.stop()


@contextlib.contextmanager
def _tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """`folder` as a tmpfs mounted with `options` (skipped where this process may not
    mount)."""
    folder.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                          capture_output=True, text=True, timeout=30, check=False)
    if made.returncode != 0:
        pytest.skip(f"no tmpfs here ({made.stderr.strip()})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True, timeout=30, check=False)


def _files(folder: Path) -> dict[str, bytes | None]:
    """Everything under `folder`: path → bytes (None: a folder)."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
            for p in sorted(folder.rglob("*"))}


def _temporaries(folder: Path) -> list[Path]:
    """Hidden files or folders a write aside leaves when it is not cleaned up."""
    return [p for p in folder.rglob(".*") if p.name.endswith(".tmp")]


def _last_line(proc: subprocess.CompletedProcess, verb: str) -> str:
    """Rule 10's line after a verb's progress lines (prepare's bars): exit status 2, no
    traceback, the error the last line on stderr."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith(f"sciperf {verb}: ")]
    assert len(errors) == 1 and proc.stderr.rstrip().endswith(errors[0]), proc.stderr
    return errors[0]


# --- bench records --------------------------------------------------------------------------

def _bench_result(rows: int) -> dict:
    return {"workload": "cosmoflow", "complete": False, "input": [],
            "train": [{"framework": "pytorch", "samples_per_s": float(i)}
                      for i in range(rows)]}


def test_bench_rows_on_a_full_disk_are_one_line_and_leave_no_folder(disk, tmp_path):
    """The partial file of a bench whose --out is new: no temporary, no folder made."""
    from sciperf.tools.bench.records import Outputs

    files = Outputs(tmp_path / "new" / "bench", "cosmoflow")
    with disk.at(200), pytest.raises(SciperfError) as err:
        files.save(_bench_result(20))
    assert str(err.value) == f"{files.partial}: {TOO_LARGE}"
    assert _files(tmp_path) == {}


def test_a_complete_bench_on_a_full_disk_keeps_the_old_record_and_the_rows(disk, tmp_path):
    """`<workload>.json` refused: the earlier record stays whole, the rows stay in the
    partial file, and the line names the file and where the rows are."""
    from sciperf.tools.bench.records import Outputs

    files = Outputs(tmp_path, "cosmoflow")
    files.path.write_text(json.dumps(_bench_result(1)))
    files.save(_bench_result(20))
    before = _files(tmp_path)
    with disk.at(len(files.path.read_bytes()) + 10), pytest.raises(SciperfError) as err:
        files.finish(_bench_result(20) | {"complete": True})
    assert str(err.value) == f"{files.path}: {TOO_LARGE}"
    assert files.left() == f"the rows done are in {files.partial}; {files.path} is as it was"
    assert _files(tmp_path) == before


# --- launch ---------------------------------------------------------------------------------

def test_launch_on_a_full_disk_names_the_script_and_leaves_no_folder(disk, tmp_path):
    """The job script in a new output_dir: one line, no temporary, no folder made."""
    out = tmp_path / "new" / "job"
    with disk.at(100):
        proc = cli("launch", "system=slurm-gpu-node", "launcher=srun", "nodes=2",
                   "dry_run=true", f"output_dir={out}")
    assert one_error_line(proc, "launch") == \
        f"sciperf launch: error: {out / 'launch.sbatch'}: {TOO_LARGE}"
    assert _files(tmp_path) == {}


def test_launch_on_a_full_disk_keeps_the_old_script(disk, tmp_path):
    """An earlier script in output_dir stays as it was (sbatch never queues half a new
    one)."""
    (tmp_path / "launch.sbatch").write_text("#!/bin/bash\n# old\n")
    before = _files(tmp_path)
    with disk.at(100):
        proc = cli("launch", "system=slurm-gpu-node", "launcher=srun", "nodes=2",
                   "dry_run=true", f"output_dir={tmp_path}")
    assert one_error_line(proc, "launch") == \
        f"sciperf launch: error: {tmp_path / 'launch.sbatch'}: {TOO_LARGE}"
    assert _files(tmp_path) == before


# --- the dataset manifest and prepare's parts -----------------------------------------------

def test_prepare_on_a_full_disk_names_the_manifest_and_leaves_no_folder(disk, tmp_path):
    """The generator's mark is the first write of a prepare into a new data.dir."""
    data = tmp_path / "new" / "data"
    with disk.at(0):
        proc = cli("prepare", "workload=cosmoflow", "experiment=mini",
                   "data.train_samples=2", "data.eval_samples=1", f"data.dir={data}")
    assert one_error_line(proc, "prepare") == \
        f"sciperf prepare: error: {data / 'sciperf_dataset.json'}: {TOO_LARGE}"
    assert _files(tmp_path) == {}


def test_a_manifest_entry_on_a_full_disk_keeps_the_old_manifest(disk, tmp_path):
    """A set whose entry cannot be recorded stays incomplete; the manifest stays whole."""
    from sciperf.data import manifest

    manifest.record(tmp_path, "npy", {"seed": 1})
    before = _files(tmp_path)
    with disk.at(len(before["sciperf_dataset.json"])), pytest.raises(SciperfError) as err:
        manifest.record(tmp_path, "tfrecord", {"seed": 2, "size": 32})
    assert str(err.value) == f"{tmp_path / 'sciperf_dataset.json'}: {TOO_LARGE}"
    assert _files(tmp_path) == before


def test_a_rank_part_on_a_full_disk_is_one_line_and_leaves_no_temporary(disk, tmp_path):
    """prepare's per-rank part (DeepCAM's statistics): rank 0 never reads half of one."""
    from sciperf.data.partials import part_path, write_part

    folder = tmp_path / "parts"
    with disk.at(1000), pytest.raises(SciperfError) as err:
        write_part(folder, 1, 2, {"sums": np.zeros(4096)}, "digest")
    assert str(err.value) == f"{part_path(folder, 1, 2)}: {TOO_LARGE}"
    assert _files(folder) == {}


# --- the workloads' own records -------------------------------------------------------------

def test_oc20_force_stats_on_a_full_disk_is_one_line_and_the_set_incomplete(
        disk, tmp_path, monkeypatch):
    """The disk fills once the containers are written: force_stats.json is refused, no
    temporary is left, and no manifest entry calls the set complete."""
    from sciperf.data import manifest
    from sciperf.workloads.oc20 import data as oc20_data
    from sciperf.workloads.oc20 import synthetic

    summary = synthetic._ForceStats.summary

    def full_then(stats: synthetic._ForceStats) -> dict:
        disk.start(10, quiet=False)  # in testkit.cli's window
        return summary(stats)
    monkeypatch.setattr(synthetic._ForceStats, "summary", full_then)
    root = tmp_path / "data"
    proc = cli("prepare", "workload=oc20", "experiment=mini", "data.train_samples=2",
               "data.eval_samples=1", "data.prepare_workers=1", f"data.dir={root}")
    disk.stop()
    assert _last_line(proc, "prepare") == \
        f"sciperf prepare: error: {root / 'force_stats.json'}: {TOO_LARGE}"
    assert not (root / "force_stats.json").exists() and not _temporaries(root)
    assert all(manifest.entry(root, fmt) is None for fmt in oc20_data.FORMATS)


def test_openfold_generator_mark_on_a_full_disk_is_one_line(disk, tmp_path):
    """The mark written before an earlier set is replaced: refused, nothing half-written
    (the manifest's empty claim, two bytes, is the only file)."""
    from sciperf.workloads.openfold import synthetic

    root = tmp_path / "data"
    with disk.at(10), pytest.raises(SciperfError) as err:
        synthetic.generate(root, 2, 1, 0)
    assert str(err.value) == f"{root / synthetic.GENERATOR_MARK}: {TOO_LARGE}"
    assert _files(root) == {"sciperf_dataset.json": b"{}"}


def test_openfold_starting_checkpoint_on_a_full_disk_keeps_the_old_pair(
        disk, tmp_path, monkeypatch):
    """prepare's pre-training done, its checkpoint refused by the disk: the earlier
    pretrained.pt stays beside its own pretrained.json, and nothing else is left. (The
    pre-training itself is stood in for: what is tested is what prepare writes after.)"""
    from sciperf import checkpoint
    from sciperf.config import compose
    from sciperf.workloads.openfold import pretrain

    root = tmp_path / "data"
    root.mkdir()
    cfg = compose(["workload=openfold", "experiment=mini", "data.pretrain_epochs=1",
                   f"data.dir={root}"])
    saved = tmp_path / "pretrain-checkpoint"
    saved.mkdir()
    (saved / "state.pt").write_bytes(b"\1" * (1 << 20))
    monkeypatch.setattr("sciperf.run.train",
                        lambda run: {"status": "aborted", "epochs": 1, "final_metric": 0.5})
    monkeypatch.setattr(checkpoint, "latest", lambda out: SimpleNamespace(epoch=1, path=saved))
    (root / pretrain.PRETRAINED).write_bytes(b"old checkpoint")
    (root / pretrain.RECORD).write_text(json.dumps({"old": True}))
    before = _files(root)
    recipe = len(json.dumps(pretrain._recipe(cfg), indent=2))
    with disk.at(recipe + 1024), pytest.raises(SciperfError) as err:
        pretrain.pretrain(cfg, force=True)
    assert str(err.value) == f"{root / pretrain.PRETRAINED}: {TOO_LARGE}"
    assert _files(root) == before


# --- the checkers' scratch folders ----------------------------------------------------------
# (each checks a CosmoFlow log that stops after run_start: the checker fails it)

def test_check_on_a_full_disk_gives_the_checker_s_own_finding(disk, tmp_path):
    """The checker writes no file: a full disk does not turn its finding into logging's
    tracebacks, read as its crash."""
    from sciperf.results.check import check_log

    log = cosmoflow_log(tmp_path / "result_0.txt", evals=(), stopped=False)
    with disk.at(0):
        verdict = check_log(log)
    assert not verdict.ok
    assert "Required EXACTLY_ONE occurrence of 'run_stop' but found 0" in verdict.problems
    assert not any("crashed" in problem for problem in verdict.problems), verdict.problems


def test_own_rules_on_a_full_disk_are_one_line(disk, tmp_path):
    """The ruleset copy for a workload of sciperf's own names the file refused."""
    from sciperf.results import own_rules
    from sciperf.workloads import get

    with disk.at(100), pytest.raises(SciperfError) as err:
        own_rules.write_rules(get("cosmoflow"), "3.0.0", tmp_path)
    first = sorted(own_rules.ruleset_folder("3.0.0").glob("*.yaml"))[0].name
    assert str(err.value) == f"{tmp_path / 'hpc_3.0.0' / first}: {TOO_LARGE}"


def test_check_with_a_full_temporary_disk_is_one_line(tmp_path, monkeypatch):
    """No inode left for the checker's scratch folder: one line naming the disk."""
    log = cosmoflow_log(tmp_path / "result_0.txt", evals=(), stopped=False)
    with _tmpfs(tmp_path / "tmp", "size=64k,nr_inodes=1") as full:
        monkeypatch.setattr(tempfile, "tempdir", str(full))
        proc = cli("check", str(log))
        assert one_error_line(proc, "check") == f"sciperf check: error: {full}: {NO_SPACE}"
        assert _files(full) == {}


def test_score_s_rcp_links_on_a_full_temporary_disk_are_one_line(tmp_path, monkeypatch):
    """The RCP review links a group's logs into a scratch folder: the link refused is one
    line, and the folder goes."""
    from sciperf.results.score import rcp_review

    log = cosmoflow_log(tmp_path / "result_0.txt", evals=(), stopped=False)
    runs = [SimpleNamespace(log=SimpleNamespace(division="closed"), path=log)] * 3
    with _tmpfs(tmp_path / "tmp", "size=64k,nr_inodes=2") as full:
        monkeypatch.setattr(tempfile, "tempdir", str(full))
        with pytest.raises(SciperfError) as err:
            rcp_review(SimpleNamespace(runs=runs))
        message = str(err.value)
        assert message.startswith(f"{full}/sciperf-rcp-"), message
        assert message.endswith(f"/result_0.txt: {NO_SPACE}"), message
        assert _files(full) == {}


def test_bench_staging_row_on_a_full_disk_is_one_line_and_leaves_no_scratch(tmp_path):
    """`cp -r`, the staging row's baseline, refused (ENOSPC: the disk holds the dataset
    and not its copy): one line in atomic.why's words naming the copy, and the scratch
    folder beside the dataset goes."""
    from sciperf.tools.bench.system_rows import staging_case

    with _tmpfs(tmp_path / "disk", "size=64k") as small:
        folder = small / "set"
        (folder / "train").mkdir(parents=True)
        (folder / "train" / "a.npy").write_bytes(b"\1" * (40 << 10))
        before = _files(small)
        with pytest.raises(SciperfError) as err:
            staging_case(folder)
        message = str(err.value)
        assert message.startswith(f"{small}/.stage-bench-"), message
        assert "/cp_-r: cannot be written (cp: " in message, message
        assert message.endswith("No space left on device; is the disk full?)"), message
        assert _files(small) == before
