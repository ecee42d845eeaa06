"""Every writer besides package, report and characterize (tests/results/test_full_disk.py)
ends a full disk in one line naming its file, in atomic.why's words, and leaves no
temporary and no half-written file (issue 37, item 1: the same class of fault elsewhere):
bench records, the launch script, the dataset manifest, prepare's per-rank parts, OC20's
force_stats.json, OpenFold's generator mark and starting checkpoint, the scratch folders
of `check`, `score` and the bench's staging row; CosmoFlow's TFRecord samples, OpenFold's
alignment shards and kalign's scratch folder; the hang sentinel's summary.json and the
precision cache (which say it, or skip it, without a temporary left); a run's weights,
summary.json, resumed MLLOG, checkpoints and staged copies. OC20's force_stats.json read
back damaged is one line too.

The disk is filled for real, in this process: a lowered soft RLIMIT_FSIZE fails a write
past it with EFBIG, as a full disk fails it with ENOSPC (:class:`FileSizeLimit`). Folders
and links take no bytes a file-size limit counts: where a test needs them refused, a tmpfs
with no inode left gives ENOSPC itself (skipped where this process may not mount).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
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


# --- dataset samples and shards -------------------------------------------------------------

def test_a_cosmoflow_tfrecord_on_a_full_disk_is_one_line_and_leaves_no_sample(disk, tmp_path):
    """`prepare data.format=tfrecord`: the manifest's claim fits, the first sample does not.
    The line names the sample; no temporary, no sample file, no complete set."""
    from sciperf.data import manifest

    data = tmp_path / "data"
    with disk.at(4096):
        proc = cli("prepare", "workload=cosmoflow", "experiment=mini", "data.format=tfrecord",
                   "data.train_samples=2", "data.eval_samples=1", f"data.dir={data}")
    line = _last_line(proc, "prepare")
    assert line.startswith(f"sciperf prepare: error: {data / 'train'}/"), line
    assert line.endswith(f".tfrecord: {TOO_LARGE}"), line
    assert not _temporaries(data) and not list(data.rglob("*.tfrecord"))
    assert manifest.entry(data, "tfrecord") is None


def test_openfold_alignment_shards_on_a_full_disk_are_one_line(disk, tmp_path):
    """A chain's alignments refused in its shard's temporary: one line naming the shard,
    and every shard's temporary goes (no shard, no super.index)."""
    from sciperf.workloads.openfold import layout

    root = tmp_path / "data"
    with disk.at(4096), pytest.raises(SciperfError) as err, \
            layout.AlignmentWriter(root) as writer:
        writer.add("1abc_A", [("a3m/uniref90_hits.a3m", b">q\n" + b"A" * (64 << 10))])
    shard = layout.shard_of("1abc_A")
    assert str(err.value) == f"{root / layout.ALIGNMENTS_DIR / f'{shard}.db'}: {TOO_LARGE}"
    assert _files(root / layout.ALIGNMENTS_DIR) == {}


def test_openfold_alignment_shards_without_an_inode_are_one_line(tmp_path):
    """The disk has inodes for a few of the ten shards' temporaries: one line naming the
    first it refuses, and those made go again."""
    from sciperf.workloads.openfold import layout

    # inodes: the mount's root, the three folders, four temporaries
    with _tmpfs(tmp_path / "disk", "size=64k,nr_inodes=8") as small:
        with pytest.raises(SciperfError) as err:
            layout.AlignmentWriter(small)
        folder = small / layout.ALIGNMENTS_DIR
        assert str(err.value) == f"{folder / '4.db'}: {NO_SPACE}"
        assert _files(folder) == {}


# --- OpenFold's kalign scratch folder ----------------------------------------------------------

@pytest.fixture
def kalign() -> str:
    """The real kalign program (skipped where it is not installed)."""
    from sciperf.workloads.openfold import templates

    if shutil.which("kalign") is None:
        pytest.skip(f"no kalign ({templates.KALIGN_INSTALL_HINT})")
    return "kalign"


PAIR = ["MKVLAAGIVGLLLAWHQRSTPEDKLMNVAAGG", "MKVLAGIVGLLLAWHQRSSTPEDKLMNVAGG"]


def test_kalign_s_input_on_a_full_disk_is_one_line_and_leaves_no_folder(
        disk, kalign, tmp_path, monkeypatch):
    """The input file refused: one line naming it (not a dropped hit, not a traceback), and
    the scratch folder goes. The same pair aligns once the disk has room."""
    from sciperf.workloads.openfold import templates

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with disk.at(0), pytest.raises(SciperfError) as err:
        templates.kalign_align(PAIR, kalign)
    message = str(err.value)
    assert message.startswith(f"{scratch}/sciperf-kalign-"), message
    assert message.endswith(f"/input.fasta: {TOO_LARGE}"), message
    assert _files(scratch) == {}
    assert [row.replace("-", "") for row in templates.kalign_align(PAIR, kalign)] == PAIR


def test_kalign_s_folder_on_a_full_temporary_disk_is_one_line(kalign, tmp_path, monkeypatch):
    """No inode left for the scratch folder: one line naming the temporary directory."""
    from sciperf.workloads.openfold import templates

    with _tmpfs(tmp_path / "tmp", "size=64k,nr_inodes=1") as full:
        monkeypatch.setattr(tempfile, "tempdir", str(full))
        with pytest.raises(SciperfError) as err:
            templates.kalign_align(PAIR, kalign)
        assert str(err.value) == f"{full}: {NO_SPACE}"
        assert _files(full) == {}


def test_kalign_s_output_on_a_full_temporary_disk_is_one_line(kalign, tmp_path, monkeypatch):
    """Room for the input but not the output: kalign exits 0 with an empty output.fasta,
    which is the disk's failure, said in one line, not a hit dropped as unalignable."""
    from sciperf.workloads.openfold import templates

    with _tmpfs(tmp_path / "tmp", "size=16k") as full:
        filler = full / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as fh:
            while True:  # every block but one: the input's
                fh.write(b"\0" * 4096)
                fh.flush()
                os.fsync(fh.fileno())
                if os.statvfs(full).f_bavail <= 1:
                    break
        monkeypatch.setattr(tempfile, "tempdir", str(full))
        with pytest.raises(SciperfError) as err:
            templates.kalign_align(PAIR, kalign)
        message = str(err.value)
        assert message.startswith(f"{full}/sciperf-kalign-"), message
        assert message.endswith("/output.fasta: cannot be written (No space left on device; "
                                "is the disk full?)"), message
        assert sorted(_files(full)) == ["filler"]


# --- the hang sentinel and the precision cache ------------------------------------------------

def test_the_hang_sentinel_s_summary_on_a_full_disk_is_said_in_its_line(disk, tmp_path):
    """The sentinel's own summary.json refused: what it returns for the hang's line names
    the file in atomic.why's words (the sentinel still ends rank 0), the summary rank 0
    wrote stays whole, and no temporary is left."""
    from sciperf import heartbeat

    log, summary = tmp_path / "result_0.txt", tmp_path / "summary.json"
    summary.write_text(json.dumps({"status": "running", "run_start_unix": 1.0,
                                   "history": [{"epoch": i} for i in range(400)]}))
    before = summary.read_bytes()
    with disk.at(len(before) // 2):
        records = heartbeat._fallback_records(log, summary, None, 3)
    assert records == f"run_stop aborted; {summary}: {TOO_LARGE}"
    assert summary.read_bytes() == before
    assert '"run_stop"' in log.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result_0.txt", "summary.json"]


def test_the_hang_sentinel_s_log_on_a_full_disk_is_said_in_its_line(disk, tmp_path):
    """The sentinel's run_stop refused by the disk: what it returns for the hang's line
    names the log in atomic.why's words instead of a traceback that would end the
    sentinel before it ends rank 0; the log keeps its whole lines."""
    from sciperf import heartbeat

    log, summary = tmp_path / "result_0.txt", tmp_path / "summary.json"
    log.write_text(":::MLLOG {}\n" * 4)
    before = log.read_bytes()
    with disk.at(len(before) + 10):
        records = heartbeat._fallback_records(log, summary, None, 3)
    assert records == f"no records written ({log}: {TOO_LARGE})"
    assert log.read_bytes() == before and not summary.exists()


def test_the_precision_cache_on_a_full_disk_is_skipped_and_leaves_no_part(disk, tmp_path):
    """The cache is only a cache: its write refused is no error, the earlier cache stays
    whole, and no `.part` temporary is left in its folder."""
    from sciperf import precision

    path = tmp_path / "cache" / "precision.json"
    precision._write(path, {"old": {"fp32": 1.0, "bf16": 2.0}})
    before = _files(tmp_path)
    with disk.at(100):
        precision._write(path, {f"cpu {i}": {"fp32": 1.0, "bf16": 2.0} for i in range(50)})
    assert _files(tmp_path) == before


# --- a run's own files: weights, summary.json, the resumed MLLOG, checkpoints -------------------

def test_weights_on_a_full_disk_are_one_line_and_leave_no_folder(disk, tmp_path):
    """train.save_weights' .npz in a new folder: atomic.why's words, no temporary, and the
    folder made for it goes again."""
    from sciperf.weights import save_npz

    path = tmp_path / "new" / "weights.npz"
    with disk.at(4096), pytest.raises(SciperfError) as err:
        save_npz(path, {"dense/kernel": np.zeros((64, 64), np.float32)})
    assert str(err.value) == f"{path}: {TOO_LARGE}"
    assert _files(tmp_path) == {}


def test_weights_folder_without_an_inode_is_one_line(tmp_path):
    """The weights' folder itself refused (no inode left): one line naming it."""
    from sciperf.weights import save_npz

    with _tmpfs(tmp_path / "disk", "size=64k,nr_inodes=1") as full:
        with pytest.raises(SciperfError) as err:
            save_npz(full / "out" / "weights.npz", {"dense/bias": np.zeros(4, np.float32)})
        assert str(err.value) == f"{full / 'out'}: {NO_SPACE}"
        assert _files(full) == {}


def test_summary_json_on_a_full_disk_is_one_line_and_keeps_the_old_one(disk, tmp_path):
    """Rank 0's summary.json refused: atomic.why's words naming it, the earlier summary
    whole, no temporary."""
    from sciperf.config import compose
    from sciperf.distributed import RankInfo
    from sciperf.run.state import RunState
    from sciperf.run.summary import write_summary
    from sciperf.workloads import get

    cfg = compose(["workload=cosmoflow", "experiment=mini", f"output_dir={tmp_path}"])
    (tmp_path / "summary.json").write_text('{"status": "running"}')
    before = _files(tmp_path)
    with disk.at(100), pytest.raises(SciperfError) as err:
        write_summary(tmp_path, cfg, get("cosmoflow"), None, RunState(), "error", 0.0, None,
                      RankInfo())
    assert str(err.value) == f"{tmp_path / 'summary.json'}: {TOO_LARGE}"
    assert _files(tmp_path) == before


def test_a_run_s_own_write_error_is_named_in_atomic_s_words(tmp_path):
    """A write the run does not name itself (the OS's error, with its file) ends the run in
    the same words as every writer."""
    import errno

    from sciperf.run.summary import write_failure

    exc = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x.bin"))
    assert str(write_failure(exc, tmp_path, [])) == f"{tmp_path / 'x.bin'}: {NO_SPACE}"


def test_a_resumed_mllog_on_a_full_disk_keeps_the_log(disk, tmp_path):
    """The checkpoint's MLLOG copied back over result_0.txt, refused: one line naming the
    log, which stays as it was, and no temporary."""
    from sciperf import checkpoint
    from sciperf.run.resume import continue_log

    saved = tmp_path / "checkpoints" / "epoch_0001"
    saved.mkdir(parents=True)
    (saved / checkpoint.MLLOG).write_text(":::MLLOG {}\n" * 200)
    log = tmp_path / "result_0.txt"
    log.write_text(":::MLLOG {}\n")
    before = _files(tmp_path)
    found = checkpoint.Found(path=saved, epoch=1, driver={}, skipped=())
    with disk.at(100), pytest.raises(SciperfError) as err:
        continue_log(found, log)
    assert str(err.value) == f"{log}: {TOO_LARGE}"
    assert _files(tmp_path) == before


def test_a_checkpoint_on_a_full_disk_is_one_line_and_leaves_no_folder(disk, tmp_path):
    """The backend's state refused: atomic.why's words naming the checkpoint, and neither
    it nor its temporary folder is left."""
    from sciperf import checkpoint

    backend = SimpleNamespace(
        save_state=lambda folder: (folder / "state.pt").write_bytes(b"\1" * (1 << 20)))
    final = checkpoint.folder(tmp_path) / "epoch_0001"
    with disk.at(64 << 10), pytest.raises(SciperfError) as err:
        checkpoint.write(tmp_path, 1, backend, {}, None, keep=2)
    assert str(err.value) == f"{final}: {TOO_LARGE}"
    assert not any(checkpoint.folder(tmp_path).iterdir())


def test_a_checkpoint_the_framework_s_writer_fails_on_a_full_disk_is_one_line(tmp_path):
    """torch's zip writer says only "unexpected pos": on a disk with no room left the line
    says the disk, in atomic.why's words, and keeps the writer's."""
    from sciperf import checkpoint

    def save_state(folder: Path) -> None:
        raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0")

    with _tmpfs(tmp_path / "disk", "size=64k") as small:
        final = checkpoint.folder(small) / "epoch_0001"
        with pytest.raises(SciperfError) as err:
            checkpoint.write(small, 1, SimpleNamespace(save_state=save_state), {}, None, 2)
        assert str(err.value) == f"{final}: cannot be written (No space left on device " \
            "(unexpected pos 64 vs 0); is the disk full?)"
        assert not any(checkpoint.folder(small).iterdir())


def test_a_staged_copy_on_a_full_disk_is_one_line_and_leaves_no_temporary(disk, tmp_path):
    """data.stage_dir's copy refused (either verification): atomic.why's words naming the
    copy, and its temporary goes."""
    from sciperf.data.staging import copy_file

    src = tmp_path / "data" / "a.bin"
    src.parent.mkdir()
    src.write_bytes(b"\1" * (64 << 10))
    stage = tmp_path / "stage"
    stage.mkdir()
    for verify in ("size", "checksum"):
        with disk.at(4096), pytest.raises(SciperfError) as err:
            copy_file(src, stage / "a.bin", verify)
        assert str(err.value) == f"{stage / 'a.bin'}: {TOO_LARGE}", verify
        assert _files(stage) == {}, verify


# --- OC20's force statistics, read back ---------------------------------------------------------

@pytest.mark.parametrize("text", [b'{"force_std": 0.4', b"[" * 100_000, b"\xff\xfe",
                                  b"[0.46]", b'{"force_std": "0.46"}'],
                         ids=["cut", "nested", "not-utf8", "not-an-object", "not-a-number"])
def test_oc20_force_stats_that_are_not_the_generator_s_are_one_line(tmp_path, text):
    """A damaged force_stats.json is one line naming it, never a traceback or a list."""
    from sciperf.workloads.oc20 import synthetic

    (tmp_path / "force_stats.json").write_bytes(text)
    with pytest.raises(SciperfError) as err:
        synthetic.force_stats(tmp_path)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'force_stats.json'}: "), message
    assert "\n" not in message


def test_oc20_force_stats_read_back_as_written(tmp_path):
    """The generator's own file reads back; no file is no statistics."""
    from sciperf.workloads.oc20 import synthetic

    assert synthetic.force_stats(tmp_path) is None
    stats = {"free_force_components": 12, "force_std": 0.46, "energy_mean": -3.5}
    (tmp_path / "force_stats.json").write_text(json.dumps(stats, indent=2))
    assert synthetic.force_stats(tmp_path) == stats
