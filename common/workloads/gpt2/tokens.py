"""GPT-2's token files, defined once (docs/architecture.md, rule 5) with numpy only.

A split is one flat file of little-endian ``uint16`` token ids — ``train.bin`` and
``val.bin`` under the dataset directory, the layout GPT-2 reproductions write (nanoGPT's
data/openwebtext/prepare.py) — documents one after the other, each followed by the
end-of-text token. Files are memory-mapped, never read whole.

A sample is a window of ``context + 1`` consecutive tokens: the model reads the first
``context`` and predicts the last ``context`` (the targets are the inputs shifted by one).
Training draws window starts uniformly and with replacement, seeded per draw
(:func:`train_starts`); validation reads the fixed non-overlapping windows that tile the
split from its start (:func:`eval_starts`) — every token but the last ``(n − 1) mod
context`` is a target exactly once.

Every opened file is checked (:func:`open_tokens`): whole uint16s, at least one window,
and — in chunks, one vectorised max each — no id at or beyond the vocabulary, which an
embedding lookup would otherwise read out of bounds or fail on without naming the file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sciperf.data import atomic
from sciperf.errors import SciperfError
from sciperf.progress import Progress

DTYPE = np.dtype("<u2")
WINDOW_DTYPE = np.dtype(np.int64)  # what a window's inputs and targets come back as
FILES = {"train": "train.bin", "validation": "val.bin"}
CHUNK = 1 << 24  # tokens per step of the id check (32 MiB)


def split_path(root: str | Path, split: str) -> Path:
    """The token file of `split` under the dataset directory `root`."""
    if split not in FILES:
        raise SciperfError(f"split {split} is not one of {', '.join(FILES)}")
    return Path(root) / FILES[split]


def token_count(path: Path) -> int:
    """Tokens in a token file, from its size alone (one line for a missing file or one
    that is not whole uint16s)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise SciperfError(f"{path}: no such token file") from None
    except OSError as exc:
        raise SciperfError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not path.is_file():
        raise SciperfError(f"{path}: not a file")
    if size % DTYPE.itemsize:
        raise SciperfError(f"{path}: {size} bytes is not a whole number of uint16 tokens")
    return size // DTYPE.itemsize


def open_tokens(path: str | Path, vocab_size: int, context: int, *, check_ids: bool = True,
                show_progress: bool = False) -> np.memmap:
    """The token file at `path`, memory-mapped read-only, after the checks of the module
    docstring (`check_ids`: the chunked scan of every id)."""
    path = Path(path)
    n = token_count(path)
    if n < context + 1:
        raise SciperfError(f"{path}: {n} tokens, fewer than one window of {context} + 1 "
                           "(the targets are the inputs shifted by one)")
    try:
        tokens = np.memmap(path, dtype=DTYPE, mode="r", shape=(n,))
    except (OSError, ValueError) as exc:
        raise SciperfError(f"{path}: cannot be mapped ({exc})") from None
    if check_ids:
        scan_ids(tokens, vocab_size, path, show_progress=show_progress)
    return tokens


def scan_ids(tokens: np.ndarray, vocab_size: int, path: Path | str,
             show_progress: bool = False) -> None:
    """One line naming `path` and the first position of an id ≥ `vocab_size`, found by a
    max over each chunk of :data:`CHUNK` tokens (only a failing chunk is searched)."""
    n = len(tokens)
    bar = Progress(n, f"checking {path}", unit="tokens", enabled=show_progress)
    for begin in range(0, n, CHUNK):
        chunk = np.asarray(tokens[begin:begin + CHUNK])
        if chunk.size and int(chunk.max()) >= vocab_size:
            at = begin + int(np.argmax(chunk >= vocab_size))
            raise SciperfError(f"{path}: token id {int(tokens[at])} at position {at:,} is "
                               f"beyond the vocabulary of {vocab_size:,} (ids 0…"
                               f"{vocab_size - 1})")
        bar.update(chunk.size)


def check_ids(ids: np.ndarray, vocab_size: int, path: Path | str) -> np.ndarray:
    """`ids` as the file's dtype, or one line naming `path` for an id outside
    [0, vocab_size) — checked before the cast, which would wrap a negative or large id."""
    ids = np.asarray(ids)
    if ids.size and (ids.dtype.kind not in "iu" or int(ids.min()) < 0
                     or int(ids.max()) >= vocab_size):
        raise SciperfError(f"{path}: token ids must be integers in [0, {vocab_size}) "
                           f"(got {ids.dtype}, {ids.min()}…{ids.max()})")
    return ids.astype(DTYPE, copy=False)


@dataclass
class TokenWriter:
    """Appends token ids to a file written aside (:mod:`sciperf.data.atomic`): the file
    appears whole at `path` when the ``with`` block ends, or not at all."""

    path: Path
    vocab_size: int
    written: int = 0
    _fh: object = field(default=None, repr=False)

    def write(self, ids: np.ndarray | Iterable[int]) -> None:
        """Append `ids` (checked against the vocabulary)."""
        arr = check_ids(np.asarray(ids if isinstance(ids, np.ndarray) else list(ids)),
                        self.vocab_size, self.path)
        with atomic.failing_as(self.path):
            self._fh.write(arr.tobytes())  # type: ignore[attr-defined]
        self.written += arr.size

    @contextlib.contextmanager
    def open(self) -> Iterator[TokenWriter]:
        with atomic.folder_for(self.path.parent), atomic.replacing(self.path) as tmp, \
                open(tmp, "wb") as fh:
            self._fh = fh
            try:
                yield self
            finally:
                self._fh = None


def write_tokens(path: str | Path, ids: np.ndarray, vocab_size: int) -> Path:
    """A whole token file at once, written aside and renamed."""
    path = Path(path)
    writer = TokenWriter(path, vocab_size)
    with writer.open():
        writer.write(ids)
    return path


def train_starts(n_tokens: int, context: int, count: int, seed: int, draw: int) -> np.ndarray:
    """`count` training window starts, uniform over every start a whole window fits
    (0 … n − context − 1), with replacement; the same for the same (seed, draw) — a draw is
    an epoch or a step, as the data plan numbers them."""
    if n_tokens < context + 1:
        raise ValueError(f"{n_tokens} tokens hold no window of {context} + 1")
    rng = np.random.default_rng([int(seed), int(draw)])
    return rng.integers(0, n_tokens - context, size=int(count), dtype=np.int64)


def eval_starts(n_tokens: int, context: int) -> np.ndarray:
    """The validation windows' starts: 0, context, 2·context, … while a whole window
    (context + 1 tokens, the last overlapping the next window's first) fits."""
    return np.arange((n_tokens - 1) // context, dtype=np.int64) * context


def windows(tokens: np.ndarray, starts: np.ndarray, context: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets (each len(starts) × context, :data:`WINDOW_DTYPE`) of the
    windows at `starts`: targets are the inputs shifted by one token."""
    index = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(context + 1)
    block = np.asarray(tokens[index], dtype=WINDOW_DTYPE)
    return block[:, :-1], block[:, 1:]


def sample_name(path: Path, start: int) -> Path:
    """A window as the data plans name a record inside a container: ``val.bin/1024``."""
    return Path(path) / str(int(start))


@dataclass
class WindowReader:
    """Reads the window a sample name (:func:`sample_name`) points at — the contract's
    ``SampleReader``. Picklable: the mapping is opened lazily in each process (its files
    were checked when the dataset was opened, :func:`open_tokens`)."""

    context: int
    x_shape: tuple[int, ...] = ()
    x_dtype: np.dtype = WINDOW_DTYPE
    y_shape: tuple[int, ...] = ()
    y_dtype: np.dtype = WINDOW_DTYPE
    _maps: dict[Path, np.memmap] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.x_shape = self.y_shape = (int(self.context),)

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_maps": {}}

    def __call__(self, sample: Path) -> tuple[np.ndarray, np.ndarray]:
        sample = Path(sample)
        file, start = sample.parent, sample.name
        if not start.isdigit():
            raise SciperfError(f"{sample}: not a window name <token file>/<start>")
        tokens = self._maps.get(file)
        if tokens is None:
            tokens = self._maps[file] = np.memmap(file, dtype=DTYPE, mode="r",
                                                  shape=(token_count(file),))
        if int(start) + self.context + 1 > len(tokens):
            raise SciperfError(f"{sample}: the window ends past the file's {len(tokens)} "
                               "tokens")
        x, y = windows(tokens, np.array([int(start)]), self.context)
        return x[0], y[0]
