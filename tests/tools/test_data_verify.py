"""`sciperf data verify`: a complete set passes; each kind of damage — a missing sample file,
a truncated sample, a recorded file whose bytes changed, a file that differs from its
published checksum, a split short of its counts — is one line naming the file, exit 1.

On a tiny synthetic DeepCAM set (stats.h5 is what every sample shares), made once per
session by the real `sciperf prepare` in this process and copied before each tampering."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from runzoo import made_once
from sciperf.data import filemanifest, manifest
from sciperf.data.sources import DataPart, DataSources, RemoteFile
from sciperf.tools import data_subset, data_verify
from sciperf.workloads import get
from testkit import cli, one_error_line

DC = ("workload=deepcam", "model.height=32", "model.width=48")
DC_SET = ("experiment=mini", "data.train_samples=6", "data.eval_samples=3")


def _made(shared_tmp: Path, name: str, *args: str) -> Path:
    def make(folder: Path) -> None:
        proc = cli("prepare", *args, f"data.dir={folder}")
        assert proc.returncode == 0, proc.stderr[-2000:]
    return made_once(shared_tmp, name, make)


@pytest.fixture(scope="module")
def dc_set(shared_tmp: Path) -> Path:
    return _made(shared_tmp, "data-tool-deepcam", *DC, *DC_SET)


@pytest.fixture
def data(dc_set: Path, tmp_path: Path) -> Path:
    """A copy of the set to damage."""
    return Path(shutil.copytree(dc_set, tmp_path / "data"))


def _verify(data: Path, *words: str) -> tuple[int, list[str]]:
    """Exit status and stdout lines of `sciperf data verify` on `data`."""
    proc = cli("data", "verify", *DC, f"data.dir={data}", *words)
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return proc.returncode, proc.stdout.splitlines()


def _one_problem(data: Path, *words: str) -> str:
    """Exit 1 and exactly one problem line before the summary."""
    code, lines = _verify(data, *words)
    assert code == 1, lines
    assert len(lines) == 2 and "1 problem;" in lines[1], lines
    return lines[0]


def test_a_complete_set_passes_and_says_which_counts_it_holds(data: Path) -> None:
    code, lines = _verify(data)
    assert code == 0, lines
    assert len(lines) == 1
    assert "complete and sound" in lines[0] and "train 6/6, validation 3/3" in lines[0]
    assert f"held to {manifest.MANIFEST}" in lines[0] and "files/s" in lines[0]
    proc = cli("data", "verify", *DC, f"data.dir={data}", "--full", "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["ok"] and doc["problems"] == []
    assert doc["counts"]["train"] == {"found": 6, "expected": 6}
    assert doc["read"]["samples"] == 9 and doc["gb_per_s"] > 0


def test_a_missing_sample_file_is_one_line_naming_it(data: Path) -> None:
    label = sorted((data / "validation").glob("*.label.npy"))[1]
    label.unlink()
    line = _one_problem(data)
    assert line.startswith(f"{label}: missing")


def test_a_truncated_sample_is_one_line_naming_it(data: Path) -> None:
    sample = sorted((data / "train").glob("*.data.npy"))[3]
    sample.write_bytes(sample.read_bytes()[:1000])
    assert str(sample) in _one_problem(data)


def test_a_split_short_of_its_counts_is_one_line(data: Path) -> None:
    sample = sorted((data / "train").glob("*.data.npy"))[0]
    for path in get("deepcam").dataset.sample_files(sample, "npy"):
        path.unlink()
    assert _one_problem(data) == f"{data / 'train'}: 5 npy samples, expected 6 " \
                                 f"({manifest.MANIFEST})"
    # without the generator's record the set is held to the reference counts
    (data / manifest.MANIFEST).unlink()
    ds = dataclasses.replace(get("deepcam").dataset,
                             sources=DataSources(counts={"train": 5, "validation": 4}))
    report = _direct(ds, data)
    assert report.counts_from == "the reference counts"
    assert report.problems == [f"{data / 'validation'}: 3 npy samples, expected 4 "
                               "(the reference counts)"]


def _direct(ds, data: Path, full: bool = False) -> data_verify.Report:
    model = get("deepcam").model(height=32, width=48)
    return data_verify.verify(ds, model, data, "npy", full, echo=False, show_progress=False)


def test_a_recorded_file_whose_bytes_changed_is_one_line(data: Path, tmp_path: Path,
                                                         monkeypatch) -> None:
    small = tmp_path / "small"
    data_subset.carve(get("deepcam").dataset, get("deepcam").model(height=32, width=48),
                      data, small, "npy", {"train": 3, "validation": 2}, 0,
                      show_progress=False)
    assert _verify(small, "--full")[0] == 0
    # without --full: what every sample shares (stats.h5) and HASHED files of samples read
    monkeypatch.setattr(data_verify, "HASHED", 2)
    ds = get("deepcam").dataset
    assert _direct(ds, small).hashed_files == 1 + 2
    assert _direct(ds, small, full=True).hashed_files == 1 + 2 * (3 + 2)
    sample = sorted((small / "train").glob("*.data.npy"))[0]
    sample.unlink()  # a hard link: the change is the subset's only
    body = bytearray((data / "train" / sample.name).read_bytes())
    body[-1] ^= 0x01  # same size, one bit of one value
    sample.write_bytes(body)
    line = _one_problem(small, "--full")
    assert line.startswith(f"{sample}: sha256 ") and filemanifest.MANIFEST in line


def test_a_published_checksum_is_always_compared(data: Path) -> None:
    stats = data / "stats.h5"
    right = hashlib.md5(stats.read_bytes()).hexdigest()
    ok = DataPart("stats", "normalisation", "checkpoint", https=(
        RemoteFile("https://127.0.0.1/stats.h5", "stats.h5", stats.stat().st_size, md5=right),))
    ds = dataclasses.replace(get("deepcam").dataset, sources=DataSources(parts=(ok,)))
    report = _direct(ds, data)
    assert report.problems == [] and report.hashed_files == 1
    wrong = dataclasses.replace(ok, https=(dataclasses.replace(ok.https[0], sha256="0" * 64),))
    ds = dataclasses.replace(ds, sources=DataSources(parts=(wrong,)))
    problems = _direct(ds, data).problems
    assert len(problems) == 1 and problems[0].startswith(f"{stats}: sha256 ")
    assert "the published stats checksum " + "0" * 64 in problems[0]


def test_a_missing_data_dir_is_a_refusal(tmp_path: Path) -> None:
    proc = cli("data", "verify", *DC, f"data.dir={tmp_path / 'nowhere'}")
    assert "nowhere" in one_error_line(proc, "data")


def test_an_unpacked_archive_may_be_removed_but_no_other_recorded_file(data: Path) -> None:
    """Download records an archive before unpacking it; once unpacked (its marker beside
    it) the archive may go to save the space, and verify does not call it missing."""
    from sciperf.data import filemanifest, unpack
    for name in ("set.tar", "notes.txt"):
        (data / name).write_bytes(b"x" * 10)
        filemanifest.record_file(data, data / name, f"https://example.org/{name}")
        (data / name).unlink()
    unpack.unpacked_marker(data / "set.tar").write_text("{}")
    line = _one_problem(data)
    assert line == f"{data / 'notes.txt'}: missing (recorded in {filemanifest.MANIFEST})"
