"""TensorFlow adapter: ONE ``tf.data`` pipeline over any workload's SampleReader.

The formats are defined once, in the workload's ``data`` module (its ``SampleReader``,
``sciperf.workloads.base``); this module only runs that reader inside
``tf.numpy_function``, in the per-epoch order of the common loader
(``sciperf.data.loader.epoch_order``) and under its last-batch rule (``batch_sizes``), so
a (files, seed, epoch) triple gives the same batches as the PyTorch loader. Shapes and
dtypes come from the reader (fixed-size samples; variable-size ones — graphs — come
from the common threaded loader through :func:`collated_batches`). Integer labels
(class maps) leave as int32 indices for the loss, float targets
as stored. A workload transform that belongs in the graph (e.g. a cheap elementwise op
on the stored dtype) is a `transform` of :func:`batches`, mapped inside the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from sciperf.data.loader import BatchLoader, batch_sizes, epoch_order
from sciperf.errors import SciperfError
from sciperf.workloads.base import SampleReader

Sample = tuple[np.ndarray, np.ndarray]
Transform = Callable[[tf.Tensor], tf.Tensor]


@dataclass
class DatasetLoader:
    """Builds the ``tf.data.Dataset`` of one epoch of one shard.

    `remainder` is what becomes of a last partial batch (the common loader's
    ``batch_sizes``: `error`, `drop` or `keep`). Samples are stacked, so batches have
    static shapes.
    """

    files: list[Path]
    reader: SampleReader
    batch_size: int
    seed: int = 0
    shuffle: bool = True
    prefetch: int = 4
    remainder: str = "error"
    workers: int = 2
    errors: list[str] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self.files = list(self.files)
        self.sizes = batch_sizes(len(self.files), self.batch_size, self.remainder)
        self.x_shape = tuple(int(s) for s in self.reader.x_shape)
        self.y_shape = tuple(int(s) for s in self.reader.y_shape)
        self.x_dtype = tf.as_dtype(np.dtype(self.reader.x_dtype))
        self.y_dtype = tf.as_dtype(np.dtype(self.reader.y_dtype))

    def __len__(self) -> int:
        return len(self.sizes)

    def _read_batch(self, paths: np.ndarray) -> Sample:
        """The samples of one batch, in order, into fresh arrays.

        One call per batch (not per sample) keeps the Python/numpy_function overhead off
        the input path (≈1.6× the throughput); batches are read in parallel. A bad file is
        recorded (and raised by `batches`) instead of raising inside TensorFlow, which
        would log a traceback per reader thread; a zero sample stands in for it.
        """
        samples = []
        for path in paths:
            try:
                samples.append(self.reader(Path(path.decode())))
            except SciperfError as exc:
                self.errors.append(str(exc))
                samples.append((np.zeros(self.x_shape, self.reader.x_dtype),
                                np.zeros(self.y_shape, self.reader.y_dtype)))
        x = np.empty((len(samples), *self.x_shape), self.reader.x_dtype)
        y = np.empty((len(samples), *self.y_shape), self.reader.y_dtype)
        for i, (xi, yi) in enumerate(samples):
            x[i], y[i] = xi, yi
        return x, y

    def _load(self, paths: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        x, y = tf.numpy_function(self._read_batch, [paths], (self.x_dtype, self.y_dtype),
                                 stateful=False)
        n = self.batch_size if self.remainder != "keep" else None  # a smaller last batch
        x.set_shape((n, *self.x_shape))
        y.set_shape((n, *self.y_shape))
        return x, labels(y)

    def epoch(self, epoch: int, transform: Transform | None = None) -> tf.data.Dataset:
        """(x, y) batches of `epoch` in the common loader's order, `transform` applied to
        x inside the pipeline.

        `workers` batches are read at once and `prefetch` kept ready, as the PyTorch
        loader does, with tf.data's autotuning off. Autotuning runs a model thread that
        wakes 10, 30, 70, … 2,550, 5,110 ms after an iterator starts (its period doubles);
        an epoch's end-of-sequence then now and then waited for the next wake-up: on full
        CosmoFlow (4 steps, 4.2 s) 1 to 4 epochs in 8 ended at 5.12 s, the
        "two speeds" of TensorFlow epochs (bench/cpu-2026-11-26-epyc-zen5.md).
        """
        self.errors.clear()
        order = epoch_order(len(self.files), self.seed, epoch, self.shuffle)
        paths = [str(self.files[i]) for i in order]
        calls = max(self.workers, 1)
        data = (tf.data.Dataset.from_tensor_slices(tf.constant(paths, tf.string))
                .batch(self.batch_size, drop_remainder=self.remainder != "keep")
                .map(self._load, num_parallel_calls=calls, deterministic=True))
        if transform is not None:
            data = data.map(lambda x, y: (transform(x), y), num_parallel_calls=calls,
                            deterministic=True)
        options = tf.data.Options()
        options.autotune.enabled = False
        return data.prefetch(max(self.prefetch, 1)).with_options(options)


def labels(y: tf.Tensor) -> tf.Tensor:
    """Integer labels (class maps) become int32 indices for the loss; float targets stay."""
    return y if y.dtype.is_floating else tf.cast(y, tf.int32)


def make_loader(files: Sequence[Path], reader: SampleReader, batch: int, seed: int,
                shuffle: bool, prefetch: int, remainder: str = "error",
                workers: int = 2) -> DatasetLoader:
    """The tf.data loader of one shard, reading through the workload's single format
    definition (`reader`), `workers` batches at once (``data.workers``)."""
    return DatasetLoader(list(files), reader, batch, seed=seed, shuffle=shuffle,
                         prefetch=prefetch, remainder=remainder, workers=workers)


def batches(loader: DatasetLoader, epoch: int,
            transform: Transform | None = None) -> Iterator[tuple[tf.Tensor, tf.Tensor]]:
    """Batches of one epoch; a bad sample file ends in a SciperfError naming it.

    A batch is yielded only after its samples were read, so checking the loader's error
    list before each yield never lets a placeholder sample through.
    """
    try:
        for x, y in loader.epoch(epoch, transform):
            if loader.errors:
                raise SciperfError(loader.errors[0])
            yield x, y
    except tf.errors.OpError as exc:
        raise SciperfError(_reader_message(exc)) from None


def _reader_message(exc: tf.errors.OpError) -> str:
    """The SciperfError text that tf.numpy_function wrapped, else TF's first line."""
    text = exc.message or str(exc)
    marker = "SciperfError: "
    if marker in text:
        return text.split(marker, 1)[1].splitlines()[0].strip()
    return text.strip().splitlines()[0]


def collated_batches(loader: BatchLoader, epoch: int,
                     transform: Transform | None = None) -> Iterator[tuple[Any, Any]]:
    """Batches of one epoch of the common threaded loader (variable-size samples collated
    into dicts of arrays by the workload), as tensors."""
    for x, y in loader.epoch(epoch):
        yield tf.nest.map_structure(tf.convert_to_tensor, (x, y))
