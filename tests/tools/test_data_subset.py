"""`sciperf data subset`: the same full set, seed and counts carve the same subset (another
seed another one); the subset holds what the readers expect — its samples read back equal
to the full set's, what every sample shares beside them — and passes `sciperf data verify`
held to its own counts; a count larger than the split, or an --out that holds something,
is one line and writes nothing.

CosmoFlow and DeepCAM (one file per sample, hard-linked; DeepCAM's stats.h5) through the
command in this process; OC20's samples are records inside containers, carved by reading
them and writing new containers. Tiny synthetic sets made once per session by the real
`sciperf prepare`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runzoo import made_once
from sciperf.data import filemanifest
from sciperf.tools import data_subset, data_verify
from sciperf.workloads import get
from testkit import cli, one_error_line

CF = ("workload=cosmoflow", "model.input_size=16")
DC = ("workload=deepcam", "model.height=32", "model.width=48")
OC = ("workload=oc20", "model.cutoff=4.0")
SETS = {"cosmoflow": (CF, ("experiment=mini", "data.train_samples=12", "data.eval_samples=6")),
        "deepcam": (DC, ("experiment=mini", "data.train_samples=6", "data.eval_samples=3")),
        "oc20": (OC, ("data.train_samples=12", "data.eval_samples=6"))}


def _made(shared_tmp: Path, name: str, *args: str) -> Path:
    def make(folder: Path) -> None:
        proc = cli("prepare", *args, f"data.dir={folder}")
        assert proc.returncode == 0, proc.stderr[-2000:]
    return made_once(shared_tmp, name, make)


@pytest.fixture(scope="module")
def full(shared_tmp: Path) -> dict[str, Path]:
    """The full sets (read only); DeepCAM's is test_data_verify's."""
    return {w: _made(shared_tmp, f"data-tool-{w}", *args, *made)
            for w, (args, made) in SETS.items()}


def _subset(workload: str, full: Path, out: Path, *words: str) -> Any:
    return cli("data", "subset", *SETS[workload][0], f"data.dir={full}", "--out", str(out),
               *words)


def _files(root: Path) -> dict[str, str]:
    """Relative name → sha256 as the subset recorded them."""
    return {k: v["sha256"] for k, v in filemanifest.read(root).items()}


@pytest.mark.parametrize("workload", ["cosmoflow", "deepcam"])
def test_a_subset_is_deterministic_verifies_and_reads_back(workload: str, full: dict,
                                                           tmp_path: Path) -> None:
    src = full[workload]
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for out, seed in ((a, "seed=0"), (b, "seed=0"), (c, "seed=1")):
        proc = _subset(workload, src, out, "train=4", "validation=2", seed)
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert _files(a) == _files(b) and _files(a) != _files(c)
    ds, fmt = get(workload).dataset, "npy"
    chosen = ds.list_samples(a, "train", fmt)
    assert len(chosen) == 4 and len(ds.list_samples(a, "validation", fmt)) == 2
    record = json.loads((a / data_subset.RECORD).read_text())
    assert record["counts"] == {"train": 4, "validation": 2} and record["seed"] == 0
    assert record["source"] == str(src.absolute())
    shared = {"stats.h5"} if workload == "deepcam" else set()
    assert {n for n in _files(a) if "/" not in n} == shared
    # the files are the full set's (linked: same file system), read the same by the reader
    model = get(workload).model_spec(_cfg(workload))
    sub, orig = ds.reader(a, fmt, model), ds.reader(src, fmt, model)
    for path in chosen:
        twin = src / "train" / path.name
        assert path.stat().st_ino == twin.stat().st_ino
        for x, y in zip(sub(path), orig(twin), strict=True):
            np.testing.assert_array_equal(x, y)
    proc = cli("data", "verify", *SETS[workload][0], f"data.dir={a}", "--full")
    assert proc.returncode == 0, proc.stdout
    assert f"held to {data_subset.RECORD}" in proc.stdout and "train 4/4" in proc.stdout


def _cfg(workload: str) -> Any:
    from sciperf.config import compose
    return compose([*SETS[workload][0]])


@pytest.mark.parametrize("fmt", ["lmdb", "npy"])
def test_oc20_records_are_carved_into_new_containers(fmt: str, full: dict,
                                                     tmp_path: Path) -> None:
    w = get("oc20")
    ds, model, src = w.dataset, w.model(cutoff=4.0), full["oc20"]
    counts = {"train": 5, "validation": 2}
    # without a writer of records, a set of records is refused before anything is written
    line = _refused(data_subset.carve, ds, model, src, tmp_path / "no", fmt, counts, 0)
    assert "records inside files other samples share" in line
    assert not (tmp_path / "no").exists()
    outs = []
    for name, seed in (("a", 0), ("b", 0), ("c", 7)):
        outs.append(tmp_path / name)
        data_subset.carve(ds, model, src, outs[-1], fmt, counts, seed, pack=ds.pack,
                          show_progress=False)
    read = [[ds.reader(out, fmt, model)(p) for p in ds.list_samples(out, "train", fmt)]
            for out in outs]
    chosen = data_subset.choose(ds.list_samples(src, "train", fmt), 5, 0, "train")
    want = [ds.reader(src, fmt, model)(p) for p in chosen]
    for got in read[:2]:
        for g, s in zip(got, want, strict=True):
            assert g["sid"] == s["sid"]
            np.testing.assert_array_equal(g["pos"], s["pos"])
    assert [s["sid"] for s in read[2]] != [s["sid"] for s in want]
    report = data_verify.verify(ds, model, outs[0], fmt, True, echo=False,
                                show_progress=False)
    assert report.problems == [] and report.counts_from == data_subset.RECORD
    assert report.counts["train"] == {"found": 5, "expected": 5}


def _refused(call, *args, **kwargs) -> str:
    from testkit import refused
    return refused(call, *args, **kwargs, show_progress=False)


def test_a_count_larger_than_the_split_writes_nothing(full: dict, tmp_path: Path) -> None:
    out = tmp_path / "deep" / "small"
    proc = _subset("deepcam", full["deepcam"], out, "train=7", "validation=2")
    line = one_error_line(proc, "data")
    assert "train=7" in line and "holds only 6 npy samples" in line
    assert list(tmp_path.iterdir()) == []


def test_an_out_that_holds_something_is_kept_unless_forced(full: dict,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "small"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    proc = _subset("cosmoflow", full["cosmoflow"], out, "train=2", "validation=1")
    assert "--force" in one_error_line(proc, "data")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["small"]  # nothing built aside either
    proc = _subset("cosmoflow", full["cosmoflow"], out, "train=2", "validation=1", "--force")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (out / "notes.txt").exists() and (out / data_subset.RECORD).is_file()
