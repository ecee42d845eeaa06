"""A framework-free prefetching batch loader: threads read samples while the model computes.

Frameworks wrap it thinly (tensor conversion, device copy, a workload's transform on the
device). Reading
runs in a small thread pool (numpy file reads and zlib release the GIL), batches are
assembled into fresh arrays and queued `prefetch` deep, so input overlaps compute.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ReadFn = Callable[[Path], tuple[np.ndarray, np.ndarray]]
Sample = tuple[np.ndarray, np.ndarray]
CollateFn = Callable[[list[Sample]], Sample]


def stack(samples: list[Sample]) -> Sample:
    """Fixed-size samples: a batch is the stacked arrays (the default collate)."""
    return np.stack([s[0] for s in samples]), np.stack([s[1] for s in samples])
_DONE = object()


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """Sample order of one epoch: a permutation fixed by (seed, epoch), or identity."""
    if not shuffle:
        return np.arange(n)
    return np.random.default_rng([seed, epoch, 0x5C1]).permutation(n)


def shuffle_seed(seed: int, rank: int) -> int:
    """A rank's training-shuffle seed: its own permutation of its own shard, reproducible
    from the run seed (the one place this rule is written)."""
    return int(seed) + 1000 * int(rank)


REMAINDERS = ("error", "drop", "keep")


def batch_sizes(n: int, batch_size: int, remainder: str) -> list[int]:
    """Sizes of the batches `n` samples make. remainder: `error` — n must divide (the strict
    rule: every rank the same full batches), `drop` — the last partial batch is left out
    (uneven training, the reference's drop_last), `keep` — it is a smaller last batch
    (uneven validation: every sample evaluated exactly once)."""
    if remainder not in REMAINDERS:
        raise ValueError(f"remainder={remainder!r} is not one of {', '.join(REMAINDERS)}")
    full, rest = divmod(n, batch_size)
    if rest and remainder == "error":
        raise ValueError(f"{n} files do not divide into batches of {batch_size}")
    return [batch_size] * full + ([rest] if rest and remainder == "keep" else [])


class BatchLoader:
    """Yields (x, y) numpy batches of one shard, `batch_size` each (see `batch_sizes` for
    what happens to a remainder). `collate` turns the samples of a batch into the batch:
    stacked by default; variable-size samples (graphs, feature dicts) bring their own."""

    def __init__(self, files: Sequence[Path], read: ReadFn, batch_size: int, seed: int = 0,
                 shuffle: bool = True, prefetch: int = 4, workers: int = 2,
                 remainder: str = "error", collate: CollateFn = stack,
                 draw: Callable[[int], Sequence[Any]] | None = None, draws: int = 0):
        # `draw(epoch)`: the epoch's `draws` items instead of the shuffled files (training
        # that samples with replacement: the workload's DataPlan.draws)
        self.draw = draw
        self.sizes = batch_sizes(draws if draw is not None else len(files), batch_size,
                                 remainder)
        self.collate = collate
        self.files, self.read, self.batch_size = list(files), read, batch_size
        self.seed, self.shuffle = seed, shuffle
        self.prefetch, self.workers = max(prefetch, 1), max(workers, 1)

    def __len__(self) -> int:
        return len(self.sizes)

    def epoch(self, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Batches of `epoch` in its shuffled order; stops the reader if abandoned early."""
        if self.draw is not None:
            items = list(self.draw(epoch))
            if len(items) != sum(self.sizes):
                raise ValueError(f"draw({epoch}) gave {len(items)} items, not {sum(self.sizes)}")
        else:
            order = epoch_order(len(self.files), self.seed, epoch, self.shuffle)
            items = [self.files[i] for i in order]
        out: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()
        thread = threading.Thread(target=self._produce, args=(items, out, stop), daemon=True)
        thread.start()
        try:
            while True:
                item = out.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            while thread.is_alive():
                try:
                    out.get_nowait()
                except queue.Empty:
                    thread.join(timeout=0.05)

    def _produce(self, items: list[Any], out: queue.Queue, stop: threading.Event) -> None:
        """Reader thread: keep a bounded window of reads in flight, stack batches, queue them."""
        try:
            window = self.batch_size * (self.prefetch + 1)
            paths = iter(items)
            pool = ThreadPoolExecutor(self.workers, thread_name_prefix="sciperf-read")
            try:
                pending: deque[Future] = deque(
                    pool.submit(self.read, p) for p in itertools.islice(paths, window))
                for size in self.sizes:
                    batch = []
                    for _ in range(size):
                        if stop.is_set():
                            return
                        batch.append(pending.popleft().result())
                        nxt = next(paths, None)
                        if nxt is not None:
                            pending.append(pool.submit(self.read, nxt))
                    self._put(out, self.collate(batch), stop)
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
            self._put(out, _DONE, stop)
        except BaseException as exc:  # handed to the consumer, re-raised there
            self._put(out, exc, stop)

    @staticmethod
    def _put(out: queue.Queue, item: object, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
