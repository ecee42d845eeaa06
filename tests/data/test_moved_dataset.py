"""A complete dataset is the same dataset wherever it lies: moved, copied, or bound
read-only at another path (``apptainer exec --bind DATA:/data:ro``), `sciperf prepare` says
"dataset ready" and writes nothing — no file, folder or temporary touched (inode, mtime and
size of everything compared) — and `sciperf train` trains on it. The manifest an earlier
sciperf wrote, which named the absolute data.dir, still counts.

Read-only is a read-only bind mount where this process may mount (root with mount
rights); else permission bits (they stop a user, not root); else — root without mount
rights — the bits plus ``os.access`` refusing writes below the view, the check sciperf
asks, with the snapshot still proving that nothing was written."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sciperf.data.manifest import MANIFEST
from testkit import cli, summary

COSMOFLOW = ("experiment=mini", "data.train_samples=8", "data.eval_samples=4")
# the MAE of any model meets 100: one epoch, then `success` (exit 0)
COSMOFLOW_TRAIN = ("train.max_epochs=1", "train.global_batch_size=4", "train.target=100",
                   "framework.threads=1")
DEEPCAM = ("workload=deepcam", "experiment=mini", "data.train_samples=4",
           "data.eval_samples=2")
DEEPCAM_TRAIN = ("train.max_epochs=1", "train.global_batch_size=2", "train.target=0",
                 "framework.threads=1")
# the mini with its pre-trained starting checkpoint (train.init_checkpoint is
# ${data.dir}/pretrained.pt), as small as tests/workloads/openfold/test_pretrain.py makes it
OPENFOLD = ("workload=openfold", "experiment=mini", "data.train_samples=16",
            "data.eval_samples=2", "train.global_batch_size=2", "train.val_every_iters=2",
            "framework.threads=1", "data.pretrain_epochs=1", "train.max_epochs=1")


def _state(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every file and folder under `root`, `root` and hidden ones included: relative path →
    (inode, mtime, size). A file rewritten in place changes its mtime, one replaced its
    inode, a temporary made and removed its folder's mtime."""
    return {str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_mtime_ns,
                                       p.stat().st_size)
            for p in [root, *sorted(root.rglob("*"))]}


def _prepared(args: tuple[str, ...], data: Path) -> None:
    made = cli("prepare", *args, f"data.dir={data}")
    assert made.returncode == 0, made.stderr[-2000:]
    assert "wrote " in made.stdout, made.stdout


def _ready(args: tuple[str, ...], data: Path) -> str:
    """`sciperf prepare` on the complete set at `data`: exit 0, "dataset ready", and not a
    byte, file or folder under `data` written. Returns what it printed."""
    before = _state(data)
    again = cli("prepare", *args, f"data.dir={data}")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "dataset ready: " in again.stdout and "wrote " not in again.stdout, again.stdout
    assert _state(data) == before
    return again.stdout


def _trained(args: tuple[str, ...], data: Path, out: Path) -> None:
    """`sciperf train` on the set at `data` ends as its target says, data untouched."""
    before = _state(data)
    run = cli("train", *args, f"data.dir={data}", f"output_dir={out}")
    assert run.returncode == 0, run.stderr[-3000:]
    assert summary(out)["status"] == "success"
    assert _state(data) == before


def _as_older_sciperf_wrote(data: Path, where: Path) -> None:
    """The manifest as sciperf wrote it before it described a set by content alone: each
    entry also named the absolute data.dir, `where`."""
    path = data / MANIFEST
    entries = json.loads(path.read_text())
    path.write_text(json.dumps({fmt: {"root": str(where.resolve()), **entry}
                                for fmt, entry in entries.items()}, indent=2))


def _chmod_tree(root: Path, writable: bool) -> None:
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode | 0o200 if writable else mode & ~0o222)


def _bind_read_only(source: Path, view: Path) -> bool:
    """`source` mounted read-only at `view` (False: this process may not mount)."""
    if shutil.which("mount") is None:
        return False
    try:
        subprocess.run(["mount", "--bind", str(source), str(view)], check=True,
                       capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], check=True,
                       capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        _unmount(view)
        return False
    return True


def _unmount(view: Path) -> None:
    if subprocess.run(["umount", str(view)], capture_output=True, timeout=30).returncode:
        subprocess.run(["umount", "-l", str(view)], capture_output=True, timeout=30)


@contextlib.contextmanager
def read_only_view(source: Path, view: Path) -> Iterator[Path]:
    """`source` seen read-only at another path, `view` (see the module's docstring). With
    no mount rights the set is moved to `view` and back afterwards."""
    view.mkdir()
    if _bind_read_only(source, view):
        try:
            with pytest.raises(OSError):  # the mount refuses writes, root's included
                (view / ".write-probe").write_text("x")
            yield view
        finally:
            _unmount(view)
        return
    view.rmdir()
    source.rename(view)
    _chmod_tree(view, writable=False)
    try:
        with pytest.MonkeyPatch.context() as patch:
            if os.geteuid() == 0:  # root writes through the bits: sciperf's check is told
                patch.setattr(os, "access", _refusing_writes_below(view, os.access))
            yield view
    finally:
        _chmod_tree(view, writable=True)
        view.rename(source)


def _refusing_writes_below(view: Path, access: Callable[..., bool]) -> Callable[..., bool]:
    def refusing(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
        if mode & os.W_OK and Path(os.path.abspath(path)).is_relative_to(view):
            return False
        return access(path, mode, *args, **kwargs)
    return refusing


def test_a_moved_set_is_ready_and_left_as_it_is(tmp_path: Path) -> None:
    """CosmoFlow: moved (a rename) and copied elsewhere, the set is ready where it lies —
    it was regenerated in full, the manifest naming the old data.dir."""
    first, moved, copied = tmp_path / "first", tmp_path / "moved", tmp_path / "copied"
    _prepared(COSMOFLOW, first)
    first.rename(moved)
    _ready(COSMOFLOW, moved)
    shutil.copytree(moved, copied)
    _ready(COSMOFLOW, copied)
    # still a request of another size is no match: made anew, not "ready"
    other = cli("prepare", *COSMOFLOW, f"data.dir={copied}", "data.train_samples=6")
    assert other.returncode == 0 and "wrote 6+4" in other.stdout, other.stdout


def test_a_read_only_set_at_another_path_prepares_and_trains(
        tmp_path: Path) -> None:
    """CosmoFlow bound read-only at another path: prepare refused it as "not writable"."""
    pytest.importorskip("torch")
    data = tmp_path / "data"
    _prepared(COSMOFLOW, data)
    with read_only_view(data, tmp_path / "ro") as view:
        _ready(COSMOFLOW, view)
        _trained((*COSMOFLOW, *COSMOFLOW_TRAIN), view, tmp_path / "out")


def test_a_manifest_naming_the_old_path_still_counts(tmp_path: Path) -> None:
    """A set prepared by an earlier sciperf (its manifest names data.dir) and moved is
    ready: nobody is made to regenerate, and the old manifest is not rewritten."""
    first, moved = tmp_path / "first", tmp_path / "moved"
    _prepared(COSMOFLOW, first)
    _as_older_sciperf_wrote(first, first)
    _ready(COSMOFLOW, first)  # where it was made
    first.rename(moved)
    _ready(COSMOFLOW, moved)


def test_a_moved_read_only_deepcam_set_prepares_and_trains(
        tmp_path: Path) -> None:
    """DeepCAM (its stats.h5 beside the samples), with an older manifest, bound read-only
    at another path."""
    pytest.importorskip("torch")
    data = tmp_path / "data"
    _prepared(DEEPCAM, data)
    _as_older_sciperf_wrote(data, data)
    with read_only_view(data, tmp_path / "ro") as view:
        _ready(DEEPCAM, view)
        _trained((*DEEPCAM, *DEEPCAM_TRAIN), view, tmp_path / "out")


def test_both_deepcam_formats_of_one_request_survive_a_move(tmp_path: Path) -> None:
    """The second format made at a new path keeps the first (one request but its format:
    its stats.h5 is theirs alike); the manifest names neither path."""
    first, moved = tmp_path / "first", tmp_path / "moved"
    _prepared((*DEEPCAM, "data.format=hdf5"), first)
    first.rename(moved)
    _prepared((*DEEPCAM, "data.format=npy"), moved)
    _ready((*DEEPCAM, "data.format=hdf5"), moved)
    entries = json.loads((moved / MANIFEST).read_text())
    assert sorted(entries) == ["hdf5", "npy"]
    assert all("root" not in entry for entry in entries.values()), entries


def test_a_moved_read_only_openfold_set_keeps_its_starting_checkpoint(
        tmp_path: Path) -> None:
    """OpenFold's chains and the starting checkpoint pre-trained beside them, recorded by an
    earlier sciperf (the manifest and pretrained.json named data.dir), bound read-only at
    another path: both ready, and the timed run starts from the checkpoint there."""
    pytest.importorskip("torch")
    data = tmp_path / "data"
    _prepared(OPENFOLD, data)
    _as_older_sciperf_wrote(data, data)
    recipe = json.loads((data / "pretrained.json").read_text())
    recipe["data"] = {"root": str(data.resolve()), **recipe["data"]}
    (data / "pretrained.json").write_text(json.dumps(recipe, indent=2))
    with read_only_view(data, tmp_path / "ro") as view:
        said = _ready(OPENFOLD, view)
        assert f"starting checkpoint ready: {view / 'pretrained.pt'}" in said, said
        _trained((*OPENFOLD, "train.target=0"), view, tmp_path / "out")
