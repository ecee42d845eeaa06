"""Claiming output_dir never mixes two runs, and never claims it for a run that cannot start
(issue 37): `train.overwrite=true` empties a `checkpoints/` linked to other storage (the link
stays) or refuses in one line a record it cannot remove; a linked `checkpoints/` whose
target is gone is refused before a checkpointing run writes anything; a file every sample
needs (DeepCAM's stats.h5) is checked before the claim, so the corrected run may reuse the
folder."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from sciperf import checkpoint, output
from sciperf.errors import SciperfError
from testkit import cli, one_error_line, sciperf, summary

# the session's checkpointed 2-epoch CosmoFlow run (tests/core/test_checkpoint.py's words)
ZOO = ("train", "experiment=mini", "data.train_samples=64", "data.eval_samples=32",
       "train.global_batch_size=32", "train.target=0.0001", "train.save_weights=true",
       "train.checkpoint_every=1", "framework=pytorch", "train.max_epochs=2")
ONE_EPOCH = (*ZOO[:-1], "train.max_epochs=1", "precision=fp32")


def test_overwrite_empties_a_linked_checkpoints_folder_and_keeps_the_link(
        run_zoo, tiny_mini_data: Path, tmp_path: Path) -> None:
    """shutil.rmtree refuses a link and the overwrite ignored that: the old run's epochs 1
    and 2 stayed, the new run's epoch 1 replaced the old one beside the old epoch 2, and a
    later resume would have continued the old run. Nothing else the link's target holds is
    touched."""
    out = run_zoo.copy(tmp_path / "run", *ZOO).out
    scratch = tmp_path / "scratch" / "ckpt"
    scratch.parent.mkdir()
    shutil.move(checkpoint.folder(out), scratch)
    checkpoint.folder(out).symlink_to(scratch, target_is_directory=True)
    (scratch / "notes.txt").write_text("the user's")
    assert sorted(os.listdir(scratch)) == ["epoch_0001", "epoch_0002", "notes.txt"]
    proc = sciperf(*ONE_EPOCH, "train.overwrite=true", f"data.dir={tiny_mini_data}",
                   f"output_dir={out}")
    assert proc.returncode == 1, proc.stderr[-2000:]  # the target is out of reach
    assert checkpoint.folder(out).is_symlink()
    assert checkpoint.folder(out).resolve() == scratch.resolve()
    assert sorted(os.listdir(scratch)) == ["epoch_0001", "notes.txt"]
    found = checkpoint.latest(out)
    assert found is not None and found.epoch == 1
    assert found.driver["run_start"] == summary(out)["run_start_unix"]  # the new run's


def test_a_linked_checkpoints_folder_whose_target_is_gone_is_refused_before_any_record(
        tiny_mini_data: Path, tmp_path: Path) -> None:
    """Scratch not mounted on this node: the run trained an epoch and failed at its first
    checkpoint ("File exists"); a requeued resume would have started anew beside its
    checkpoints."""
    out = tmp_path / "run"
    out.mkdir()
    target = tmp_path / "unmounted" / "ckpt"
    checkpoint.folder(out).symlink_to(target, target_is_directory=True)
    proc = sciperf(*ONE_EPOCH, f"data.dir={tiny_mini_data}", f"output_dir={out}")
    line = one_error_line(proc, "train")
    assert f"{checkpoint.folder(out)} is a link to {target}, which is not a folder" in line
    assert sorted(os.listdir(out)) == ["checkpoints"]


def test_an_empty_linked_checkpoints_folder_is_no_run(tmp_path: Path) -> None:
    """A link made for the first run is not an earlier run's record (it was refused as
    one); once it holds a checkpoint, the folder is one."""
    out = tmp_path / "run"
    out.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "notes.txt").write_text("the user's")
    checkpoint.folder(out).symlink_to(scratch, target_is_directory=True)
    assert output.run_records(out) == []
    output.claim(out, overwrite=False, writer=True)
    (scratch / ".epoch_0003.tmp").mkdir()  # a write that died
    assert output.run_records(out) == [checkpoint.folder(out)]


def test_a_record_the_overwrite_cannot_remove_is_one_line(tmp_path: Path,
                                                          monkeypatch) -> None:
    """rmtree's errors were ignored: a checkpoint the user may not delete (another owner's
    scratch folder) outlived the overwrite in silence. The checkpoints go first, so the
    refusal leaves the earlier run whole."""
    out = tmp_path / "run"
    (out / "checkpoints" / "epoch_0002").mkdir(parents=True)
    (out / "checkpoints" / "epoch_0002" / "driver.json").write_text("{}")
    (out / "result_0.txt").write_text("old")
    rmdir = os.rmdir

    def refusing(path, *args, **kwargs):  # EACCES, as a folder of another owner gives
        if os.fspath(path).endswith("epoch_0002"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return rmdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "rmdir", refusing)
    with pytest.raises(SciperfError) as refused:
        output.claim(out, overwrite=True, writer=True)
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"output_dir={out}: train.overwrite=true "
                                                "cannot remove ")
    assert f"{out / 'checkpoints'} (Permission denied: " in line and "epoch_0002" in line
    assert (out / "result_0.txt").read_text() == "old"


def test_a_missing_deepcam_stats_file_is_refused_before_output_dir_is_claimed(
        tmp_path: Path) -> None:
    """stats.h5 was read by the backend's setup, after result_0.txt and summary.json were
    written: the run after `prepare data.source=stats` was refused as "already holds a
    run". The reader is built before the claim now (the contract's Dataset.reader)."""
    pytest.importorskip("h5py")
    data, out = tmp_path / "data", tmp_path / "run"
    small = ("workload=deepcam", "experiment=mini", "data.train_samples=8",
             "data.eval_samples=8", "model.height=32", "model.width=48", f"data.dir={data}")
    prepared = cli("prepare", *small)
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    stats = data / "stats.h5"
    stats.unlink()
    proc = cli("train", *small, "framework=pytorch", "precision=fp32", f"output_dir={out}")
    line = one_error_line(proc, "train")
    assert f"normalisation statistics {stats} do not exist" in line
    assert "data.source=stats" in line
    assert not out.exists()
