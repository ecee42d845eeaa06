"""The framework-free prefetching BatchLoader, over real synthetic CosmoFlow files."""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from sciperf.data.loader import BatchLoader, epoch_order
from sciperf.errors import SciperfError
from sciperf.workloads.cosmoflow import data as cf
from sciperf.workloads.cosmoflow import synthetic

SIZE, N, BATCH = 8, 24, 4
SHAPE = (SIZE, SIZE, SIZE, 4)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("loader_data")
    synthetic.generate(synthetic.GenerateRequest(str(root), "npy", N, BATCH, SIZE, 2),
                       show_progress=False)
    return cf.list_samples(root, "train", "npy", N)


read = functools.partial(cf.read_sample, fmt="npy", shape=SHAPE)


@pytest.fixture(scope="module")
def by_label(files) -> dict[bytes, int]:
    """Each synthetic sample has its own random targets: label bytes → file index."""
    table = {read(p)[1].tobytes(): i for i, p in enumerate(files)}
    assert len(table) == len(files)
    return table


def _order(loader: BatchLoader, epoch: int, by_label: dict[bytes, int]) -> list[int]:
    return [by_label[y.tobytes()] for _, ys in loader.epoch(epoch) for y in ys]


def _reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("sciperf-read")]


def _settled_new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads started since `before` that are still alive after a short join."""
    new = [t for t in threading.enumerate() if t not in before]
    for t in new:
        t.join(timeout=1.0)
    return [t for t in new if t.is_alive()]


def test_len_and_divisibility(files) -> None:
    assert len(BatchLoader(files, read, BATCH)) == N // BATCH
    assert len(BatchLoader(files, read, N)) == 1
    with pytest.raises(ValueError, match="do not divide"):
        BatchLoader(files[:10], read, BATCH)


def test_batches_shapes_dtypes_and_contents(files, by_label) -> None:
    loader = BatchLoader(files, read, BATCH, seed=1)
    batches = list(loader.epoch(0))
    assert len(batches) == len(loader)
    for xs, ys in batches:
        assert xs.shape == (BATCH, *SHAPE) and xs.dtype == np.int16
        assert ys.shape == (BATCH, 4) and ys.dtype == np.float32
        for x, y in zip(xs, ys, strict=True):
            x_ref, y_ref = read(files[by_label[y.tobytes()]])
            np.testing.assert_array_equal(x, x_ref)  # x and y stay paired


@pytest.mark.parametrize("epoch", [0, 1, 5])
def test_every_sample_exactly_once_per_epoch(files, by_label, epoch: int) -> None:
    order = _order(BatchLoader(files, read, BATCH, seed=3), epoch, by_label)
    assert sorted(order) == list(range(N))


def test_order_fixed_by_seed_and_epoch(files, by_label) -> None:
    a = BatchLoader(files, read, BATCH, seed=3, workers=1)
    b = BatchLoader(files, read, BATCH, seed=3, workers=4, prefetch=1)
    e0 = _order(a, 0, by_label)
    assert e0 == _order(b, 0, by_label)  # thread count / prefetch depth do not change it
    assert e0 == list(epoch_order(N, 3, 0, True))
    e1 = _order(a, 1, by_label)
    assert e1 != e0
    assert e1 == _order(b, 1, by_label)
    assert _order(BatchLoader(files, read, BATCH, seed=4), 0, by_label) != e0
    assert e0 != list(range(N))


def test_shuffle_false_keeps_file_order(files, by_label) -> None:
    loader = BatchLoader(files, read, BATCH, seed=3, shuffle=False)
    assert _order(loader, 0, by_label) == list(range(N))
    assert _order(loader, 7, by_label) == list(range(N))


def test_epoch_order() -> None:
    assert list(epoch_order(5, 0, 0, False)) == [0, 1, 2, 3, 4]
    p = epoch_order(100, 9, 2, True)
    assert sorted(p) == list(range(100))
    assert np.array_equal(p, epoch_order(100, 9, 2, True))
    assert not np.array_equal(p, epoch_order(100, 9, 3, True))
    assert not np.array_equal(p, epoch_order(100, 10, 2, True))


def test_break_early_returns_promptly_and_stops_threads(files) -> None:
    before = set(threading.enumerate())
    loader = BatchLoader(files, read, 2, prefetch=2, workers=2)
    start = time.perf_counter()
    for xs, _ in loader.epoch(0):
        assert xs.shape[0] == 2
        break
    assert time.perf_counter() - start < 5.0
    assert _settled_new_threads(before) == []
    assert _reader_threads() == []


def test_abandoned_generator_close_stops_threads(files) -> None:
    before = set(threading.enumerate())
    it = BatchLoader(files, read, BATCH, prefetch=1).epoch(0)
    next(it)
    time.sleep(0.05)  # let the reader fill its queue and block
    it.close()
    assert _settled_new_threads(before) == []


def test_read_error_surfaces_in_the_consumer(files) -> None:
    bad = files[N // 2]

    def failing_read(path: Path):
        if path == bad:
            raise SciperfError(f"cannot read {path}: injected")
        return read(path)

    before = set(threading.enumerate())
    loader = BatchLoader(files, failing_read, BATCH, shuffle=False)
    seen = 0
    with pytest.raises(SciperfError, match="injected") as info:
        for _ in loader.epoch(0):
            seen += 1
    assert str(bad) in str(info.value)
    assert seen == (N // 2) // BATCH  # the batches before the bad file arrived
    assert _settled_new_threads(before) == []


def test_consecutive_epochs_reuse_nothing_stale(files, by_label) -> None:
    loader = BatchLoader(files, read, BATCH, seed=8)
    for epoch in range(3):
        assert sorted(_order(loader, epoch, by_label)) == list(range(N))
    assert _reader_threads() == []


def test_break_early_does_not_drain_the_read_window(files) -> None:
    started: list[Path] = []

    def slow_read(path: Path):
        started.append(path)
        time.sleep(0.02)
        return read(path)

    batch, prefetch, workers = 4, 4, 2
    loader = BatchLoader(files, slow_read, batch, prefetch=prefetch, workers=workers)
    for _ in loader.epoch(0):
        break
    # Needed: one batch. Acceptable: a little read-ahead (the next batches being assembled
    # plus the reads in flight) — not the whole window of batch × (prefetch + 1) = 20 reads.
    assert len(started) <= 3 * batch + workers


@pytest.mark.parametrize("workers", [1, 3])
def test_the_loader_reads_with_the_threads_asked(files, workers: int) -> None:
    loader = BatchLoader(files, read, BATCH, workers=workers)
    seen: set[str] = set()
    for _ in loader.epoch(0):
        seen |= {t.name for t in _reader_threads()}
    assert len(seen) == workers
