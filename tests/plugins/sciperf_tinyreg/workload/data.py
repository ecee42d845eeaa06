"""tinyreg's one format: a sample is ``<split>/sample_<i>.npy``, float32 (inputs + 1,): x
then y. Generated from a fixed true layer; ``prepare`` sources: synthetic, existing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sciperf.data.layout import check_writable
from sciperf.errors import SciperfError

from . import spec

FORMATS = ("npy",)
SPLITS = ("train", "validation")


class Reader:
    """One sample file → (x (inputs,), y (1,)), float32; a wrong shape is one line."""

    def __init__(self, inputs: int) -> None:
        self.x_shape, self.y_shape = (inputs,), (1,)
        self.x_dtype = self.y_dtype = np.dtype(np.float32)

    def __call__(self, path: Path) -> tuple[np.ndarray, np.ndarray]:
        try:
            row = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise SciperfError(f"{path}: not a tinyreg sample ({exc})") from None
        if row.shape != (self.x_shape[0] + 1,) or row.dtype != np.float32:
            raise SciperfError(f"{path}: holds {row.dtype} {row.shape}, a tinyreg sample is "
                               f"float32 ({self.x_shape[0] + 1},)")
        return row[:-1], row[-1:]


def list_samples(root: str | Path, split: str, fmt: str, n: int = 0) -> list[Path]:
    """The sorted sample files of a split (the first n if n > 0)."""
    if fmt not in FORMATS:
        raise SciperfError(f"data.format={fmt}: tinyreg has {', '.join(FORMATS)}")
    files = sorted((Path(root) / split).glob("sample_*.npy"))
    if n and len(files) < n:
        raise SciperfError(f"{Path(root) / split}: {len(files)} samples, {n} asked for "
                           f"(run `sciperf prepare workload={spec.NAME}`)")
    return files[:n] if n else files


def sample_files(path: Path, fmt: str) -> list[Path]:
    return [path]


def reader(root: str | Path, fmt: str, model: Any) -> Reader:
    return Reader(int(model.inputs))


def payload_bytes(model: Any) -> int:
    return 4 * (int(model.inputs) + 1)


def true_layer(inputs: int) -> tuple[np.ndarray, float]:
    """The layer the data is made from (fixed: every set of a size is the same problem)."""
    rng = np.random.default_rng(1234)
    return rng.standard_normal(inputs).astype(np.float32), 0.5


def generate(cfg: Any, force: bool = False) -> None:
    """Both splits of learnable samples, written aside and renamed (re-used if complete)."""
    root, inputs = Path(str(cfg.data.dir)), int(cfg.model.inputs)
    w, b = true_layer(inputs)
    rng = np.random.default_rng(int(cfg.seed))
    for split, n in (("train", int(cfg.data.train_samples)),
                     ("validation", int(cfg.data.eval_samples))):
        folder = root / split
        if not force and len(list(folder.glob("sample_*.npy"))) >= n:
            continue
        check_writable(root)
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(n):
            x = rng.standard_normal(inputs).astype(np.float32)
            y = np.float32(x @ w + b + spec.NOISE * rng.standard_normal())
            tmp = folder / f".sample_{i:05d}.npy"
            np.save(tmp, np.append(x, y).astype(np.float32))
            tmp.replace(folder / f"sample_{i:05d}.npy")
    print(f"tinyreg data in {root}")



def check_existing(cfg: Any, force: bool = False) -> None:
    """Every sample of both splits reads with its shape."""
    read = reader(cfg.data.dir, "npy", cfg.model)
    for split, n in (("train", int(cfg.data.train_samples)),
                     ("validation", int(cfg.data.eval_samples))):
        for path in list_samples(cfg.data.dir, split, "npy", n):
            read(path)


SOURCES = {"synthetic": generate, "existing": check_existing}
