"""A full disk ends `package`, `report` and `characterize` in one line naming the file, and
nothing half-written is left (issue 37, item 1: `OSError: [Errno 28]` tracebacks while
copying a result file, writing report.html or saving a PNG with matplotlib).

The disk is filled for real. A kernel file-size limit (RLIMIT_FSIZE, set in the child
before it starts: it would bind pytest too) fails a write as a full disk does, EFBIG for
ENOSPC, for any user; where this process may mount, a 4 KiB tmpfs gives ENOSPC itself.
`package` and `report` build their folder aside and rename it when whole, so a failure
leaves the destination as it was (an earlier report included); `characterize` renames
its pair only when both files are whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sciperf.results import tree
from testkit import SCIPERF, cli, one_error_line

pytest.importorskip("torch")  # the run_zoo's runs
# the font cache exists before a child under a size limit would try to write it
pytest.importorskip("matplotlib.font_manager")

SMALL = ("experiment=mini", "data.train_samples=64", "data.eval_samples=32",
         "train.max_epochs=2", "framework.threads=1", "seed=0")  # test_package's seed 0
CHARACTERIZE = ("characterize", "workload=cosmoflow", "experiment=mini")
TOO_LARGE = "cannot be written (File too large; is the disk full?)"


@pytest.fixture(scope="module")
def run(run_zoo) -> Path:
    """A finished 2-epoch mini run (read only)."""
    return run_zoo.run("train", *SMALL).out


def _limit_writes(limit: int) -> Callable[[], None]:
    """For preexec_fn: no file of the child grows past `limit` bytes; with SIGXFSZ
    ignored, a write beyond it fails with EFBIG."""
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def _limited(*args: str, limit: int) -> subprocess.CompletedProcess:
    """`sciperf ARGS` in a process whose files end at `limit` bytes."""
    env = {k: v for k, v in os.environ.items() if k != "SCIPERF_DEBUG"}
    return subprocess.run([str(SCIPERF), *args], capture_output=True, text=True, timeout=300,
                          check=False, env=env, preexec_fn=_limit_writes(limit))


def _files(folder: Path) -> dict[str, bytes | None]:
    """Everything under `folder`: path → bytes (None: a folder)."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
            for p in sorted(folder.rglob("*"))}


@contextlib.contextmanager
def _small_disk(folder: Path) -> Iterator[Path]:
    """`folder` as a 4 KiB tmpfs (skipped where this process may not mount)."""
    folder.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command; the file-size limit tests cover the same writes")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(folder)],
                          capture_output=True, text=True, timeout=30, check=False)
    if made.returncode != 0:
        pytest.skip(f"no tmpfs here ({made.stderr.strip()}); the file-size limit tests "
                    "cover the same writes")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True, timeout=30, check=False)


def test_package_on_a_full_disk_is_one_line_and_leaves_no_tree(run, tmp_path):
    """The copy of a result file fails: no submission folder, no aside folder, no parent
    made for it."""
    dest = tmp_path / "org" / "sciperf"
    assert (run / "result_0.txt").stat().st_size > 1000
    proc = _limited("package", str(run), "--system", "cpu2_pytorch", "--out", str(dest),
                    limit=1000)
    copied = tree.result_dir(dest, "cpu2_pytorch", tree.STRONG, "cosmoflow") / \
        tree.result_name(0)
    assert one_error_line(proc, "package") == f"sciperf package: error: {copied}: {TOO_LARGE}"
    assert _files(tmp_path) == {}


@pytest.fixture(scope="module")
def old_report(run, tmp_path_factory) -> Path:
    """A whole report of the run, made before the disk fills."""
    out = tmp_path_factory.mktemp("full-disk") / "report"
    proc = cli("report", str(run), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("failing", ["time_to_train.png", "report.html"])
def test_report_on_a_full_disk_is_one_line_and_keeps_the_old_report(
        run, old_report, tmp_path, failing):
    """The first PNG (matplotlib's savefig) or, the plots written, the page that inlines
    them: the earlier report at --out stays whole, and nothing else is left beside it."""
    out = tmp_path / "report"
    shutil.copytree(old_report, out)
    before = _files(tmp_path)
    sizes = {name: len(data) for name, data in _files(out).items() if data is not None}
    # the page inlines every PNG: a limit above each other file stops it alone
    limit = 1000 if failing.endswith(".png") else max(
        size for name, size in sizes.items() if name != "report.html") + 1024
    assert sizes[failing] > limit
    proc = _limited("report", str(run), "--out", str(out), limit=limit)
    assert one_error_line(proc, "report") == f"sciperf report: error: {out / failing}: " \
                                             f"{TOO_LARGE}"
    assert _files(tmp_path) == before


def test_report_on_a_full_tmpfs_names_the_plot_and_leaves_nothing(run, tmp_path):
    """A real ENOSPC (Errno 28 of the issue), in this process: the first plot is over 4 KiB."""
    with _small_disk(tmp_path / "disk") as disk:
        out = disk / "reports" / "report"
        proc = cli("report", str(run), "--out", str(out))
        assert one_error_line(proc, "report") == \
            f"sciperf report: error: {out / 'time_to_train.png'}: cannot be written " \
            "(No space left on device; is the disk full?)"
        assert _files(disk) == {}


def test_characterize_on_a_full_disk_leaves_no_folder(tmp_path):
    """characterize.json fails in a new --out folder: the folder and its parent go."""
    out = tmp_path / "new" / "characterize"
    proc = _limited(*CHARACTERIZE, "--out", str(out), limit=200)
    assert one_error_line(proc, "characterize") == \
        f"sciperf characterize: error: {out / 'characterize.json'}: {TOO_LARGE}"
    assert _files(tmp_path) == {}


def test_characterize_on_a_full_disk_keeps_the_old_pair(tmp_path):
    """characterize.json written, roofline.png refused: neither replaces the earlier pair
    (a new JSON beside an old plot would describe another run)."""
    out = tmp_path / "characterize"
    proc = cli(*CHARACTERIZE, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    made = _files(out)
    limit = len(made["characterize.json"]) + 1024
    assert len(made["roofline.png"]) > limit
    (out / "characterize.json").write_text(json.dumps({"old": True}))  # told apart from new
    (out / "roofline.png").write_bytes(b"old plot")
    before = _files(tmp_path)
    proc = _limited(*CHARACTERIZE, "--out", str(out), limit=limit)
    assert one_error_line(proc, "characterize") == \
        f"sciperf characterize: error: {out / 'roofline.png'}: {TOO_LARGE}"
    assert _files(tmp_path) == before
