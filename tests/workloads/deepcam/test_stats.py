"""stats.h5 over the train split in parallel over ranks, and hdf5 → npy conversion by share.

`sciperf prepare workload=deepcam data.source=stats` computes the normalisation statistics
of an existing dataset; launched as N ranks (torchrun/srun/mpirun environments) each rank
reads its strided share and rank 0 merges the parts through the data directory. The result
must equal the single-process statistics the synthetic generator wrote.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sciperf.data.partials import gather, write_part
from sciperf.errors import SciperfError
from sciperf.workloads.deepcam import data as dc

BIN = Path(sys.executable).parent
SMALL = ["workload=deepcam", "experiment=mini", "model.height=32", "model.width=48",
         "data.train_samples=9", "data.eval_samples=3"]


def _prepare(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "sciperf"), "prepare", *SMALL, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def _ranks(world: int, *args: str) -> list[tuple[int, str, str]]:
    """`sciperf prepare` as `world` real processes, torchrun's environment each."""
    procs = [_prepare(*args, env={"RANK": str(r), "WORLD_SIZE": str(world),
                                  "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(world),
                                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29571",
                                  "TORCHELASTIC_RUN_ID": "stats"})
             for r in range(world)]
    return [(p.wait(timeout=300), *p.communicate()) for p in procs]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    """A mini npy set (9 train samples) and the stats.h5 its generator wrote (one process)."""
    root = tmp_path_factory.mktemp("stats")
    proc = _prepare(f"data.dir={root}")
    assert proc.wait(timeout=300) == 0, proc.communicate()
    return root, dc.read_stats(dc.stats_path(root))


def _assert_same(stats: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> None:
    for key in ("minval", "maxval", "count"):
        np.testing.assert_array_equal(stats[key], ref[key])
    for key in ("mean", "sqmean"):  # float64 sums in another order
        np.testing.assert_allclose(stats[key], ref[key], rtol=1e-12)


def test_three_ranks_merge_to_the_single_process_statistics(data, tmp_path):
    root, ref = data
    copy = shutil.copytree(root, tmp_path / "d")
    dc.stats_path(copy).unlink()
    for rank in (2, 1):  # the others deliver first; rank 0 merges
        assert dc.parallel_stats(copy, "npy", 0, rank, 3, show_progress=False) is None
    assert not dc.stats_path(copy).exists()
    path = dc.parallel_stats(copy, "npy", 0, 0, 3, show_progress=False)
    _assert_same(dc.read_stats(path), ref)
    assert not (copy / ".stats-parts").exists()  # parts cleaned up


def test_real_ranks_under_a_launcher_environment(data, tmp_path):
    root, ref = data
    copy = shutil.copytree(root, tmp_path / "d")
    dc.stats_path(copy).unlink()
    results = _ranks(2, f"data.dir={copy}", "data.source=stats", "data.train_samples=0")
    assert [rc for rc, _, _ in results] == [0, 0], results
    assert "with 2 rank(s)" in results[0][1] and results[1][1] == ""
    _assert_same(dc.read_stats(dc.stats_path(copy)), ref)


def test_a_stale_or_missing_part_is_never_merged(data, tmp_path):
    root, _ = data
    copy = shutil.copytree(root, tmp_path / "d")
    assert dc.parallel_stats(copy, "npy", 0, 1, 2, show_progress=False) is None
    victim = dc.list_samples(copy, "train", "npy")[1]  # rank 1's share changes afterwards
    os.utime(victim, ns=(victim.stat().st_atime_ns, victim.stat().st_mtime_ns + 10**9))
    with pytest.raises(SciperfError, match=r"rank\(s\) 1 of 2 delivered no part"):
        dc.parallel_stats(copy, "npy", 0, 0, 2, timeout_s=0.5, show_progress=False)


def test_gather_returns_parts_in_rank_order(tmp_path):
    for rank in (1, 0):
        write_part(tmp_path / "p", rank, 2, {"v": np.array([rank])}, f"d{rank}")
    parts = gather(tmp_path / "p", 2, lambda r: f"d{r}", 5.0, "test")
    assert [int(p["v"][0]) for p in parts] == [0, 1]


def test_two_ranks_convert_disjoint_halves(tmp_path):
    root = tmp_path / "h"
    proc = _prepare(f"data.dir={root}", "data.format=hdf5")
    assert proc.wait(timeout=300) == 0, proc.communicate()
    results = _ranks(2, f"data.dir={root}", "data.source=convert", "data.format=hdf5")
    assert [rc for rc, _, _ in results] == [0, 0], results
    assert "converted 6 hdf5 samples" in results[0][1]  # 12 samples, 6 each
    assert "rank 0's share of 2" in results[0][1]
    h5 = dc.list_samples(root, "train", "hdf5") + dc.list_samples(root, "validation", "hdf5")
    npy = dc.list_samples(root, "train", "npy") + dc.list_samples(root, "validation", "npy")
    assert len(npy) == len(h5) == 12
    for src, dst in zip(h5, npy, strict=True):
        x, y = dc.read_raw(src, "hdf5")
        x2, y2 = dc.read_raw(dst, "npy")
        assert np.array_equal(x, x2) and np.array_equal(y, y2)


def test_stats_without_train_files_is_one_line(tmp_path):
    (tmp_path / "e" / "train").mkdir(parents=True)
    proc = _prepare(f"data.dir={tmp_path / 'e'}", "data.source=stats")
    rc, (_, err) = proc.wait(timeout=120), proc.communicate()
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "train" in err
    assert not dc.stats_path(tmp_path / "e").exists()


def test_accumulate_keeps_a_bounded_window_of_samples_in_memory(monkeypatch):
    started, folded, peak = [0], [0], [0]

    def read(path, fmt):
        started[0] += 1
        peak[0] = max(peak[0], started[0] - folded[0])
        return np.full((2, 2, 3), float(path), np.float32), None

    original = dc.StatsAccumulator.add

    def add(self, x):
        folded[0] += 1
        original(self, x)

    monkeypatch.setattr(dc, "read_raw", read)
    monkeypatch.setattr(dc.StatsAccumulator, "add", add)
    acc = dc.accumulate([str(i) for i in range(50)], "npy", workers=2)
    assert acc.count == 50 * 4 and folded[0] == 50
    assert acc.maxval.tolist() == [49.0] * 3 and 0 < peak[0] <= 4  # 2 × workers
