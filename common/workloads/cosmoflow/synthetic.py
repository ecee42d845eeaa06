"""Learnable synthetic universes for CosmoFlow (the spec's generator, not test fakes).

Each sample is a log-normal density field built from a Gaussian random field; the four
targets y ∈ [-1, 1]⁴ each control one statistic the CNN can see:

1. y0 → mean particle count per voxel (overall density),
2. y1 → log-normal fluctuation amplitude σ,
3. y2 → correlation length, through the cut-off of the power spectrum,
4. y3 → growth of the amplitude across the 4 channels (the redshift axis).

The field is normalised to unit variance *before* σ is applied, so no target is divided
out. Counts are Poisson draws, stored as int16 like the real particle counts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sciperf.data import manifest
from sciperf.workloads.cosmoflow import data as fmt_cf

SPLIT_IDS = {"train": 0, "validation": 1}


@dataclass(frozen=True)
class UniverseParams:
    """Physical knobs derived from the 4 targets."""

    mean_count: float
    sigma: float
    k_cut: float
    growth: float

    @classmethod
    def from_targets(cls, y: np.ndarray) -> UniverseParams:
        """Map y ∈ [-1, 1]⁴ to generator parameters (monotone, well separated ranges)."""
        return cls(
            mean_count=float(8.0 * np.exp(0.7 * y[0])),
            sigma=float(0.55 + 0.3 * y[1]),
            k_cut=float(0.14 * np.exp(0.45 * y[2])),
            growth=float(0.5 + 0.4 * y[3]),
        )


def gaussian_field(rng: np.random.Generator, size: int, k_cut: float) -> np.ndarray:
    """Unit-variance periodic Gaussian random field with a Gaussian spectral cut-off."""
    noise = rng.standard_normal((size, size, size), dtype=np.float32)
    k = np.fft.fftfreq(size).astype(np.float32)
    kr = np.fft.rfftfreq(size).astype(np.float32)
    k2 = k[:, None, None] ** 2 + k[None, :, None] ** 2 + kr[None, None, :] ** 2
    filt = np.exp(-k2 / (2.0 * k_cut**2)).astype(np.float32)
    field = np.fft.irfftn(np.fft.rfftn(noise) * filt, s=noise.shape, axes=(0, 1, 2))
    field = field.astype(np.float32)
    field -= field.mean()
    return field / max(float(field.std()), 1e-12)


def make_universe(seed: int, split: str, index: int, size: int,
                  channels: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """One sample (int16 size³×channels, float32 targets), deterministic in its arguments."""
    rng = np.random.default_rng([seed, SPLIT_IDS[split], index])
    y = rng.uniform(-1.0, 1.0, size=4).astype(np.float32)
    p = UniverseParams.from_targets(y)
    delta = gaussian_field(rng, size, p.k_cut)
    x = np.empty((size, size, size, channels), dtype=np.int16)
    for c in range(channels):
        sigma_c = p.sigma * (1.0 + p.growth * c / max(channels - 1, 1))
        density = p.mean_count * np.exp(sigma_c * delta - 0.5 * sigma_c**2)
        x[..., c] = np.minimum(rng.poisson(density), np.iinfo(np.int16).max)
    return x, y


@dataclass
class GenerateRequest:
    """What `sciperf prepare data.source=synthetic` writes."""

    root: str
    fmt: str
    train_samples: int
    eval_samples: int
    size: int
    seed: int


def dataset_complete(req: GenerateRequest) -> bool:
    """True when `root` holds a finished dataset made with exactly these settings."""
    return manifest.complete(req.root, req.fmt, asdict(req), fmt_cf.LAYOUT,
                             {"train": req.train_samples, "validation": req.eval_samples})


def generate(req: GenerateRequest, show_progress: bool = True) -> None:
    """Write the synthetic dataset; the manifest is written last, marking it complete."""
    root = Path(req.root)
    counts = {"train": req.train_samples, "validation": req.eval_samples}
    for folder, split, i in manifest.rewrite(root, req.fmt, fmt_cf.LAYOUT, counts,
                                             "universes", show_progress):
        x, y = make_universe(req.seed, split, i, req.size)
        fmt_cf.write_sample(folder, f"univ_synth_{i:07d}", req.fmt, x, y)
    manifest.record(root, req.fmt, asdict(req))

