"""Learnable synthetic climate for DeepCAM (the spec's generator, not test fakes).

Each sample is 16 CAM5-like channels (``spec.CHANNELS``) on an H×W latitude-longitude
grid: smooth backgrounds with realistic ranges and a latitude dependence (moist warm
tropics, cold poles, jets), built from a few shared low-pass random fields so channels
correlate as real ones do. Into that the generator injects

* tropical cyclones (label 1): compact vortices in the tropics — a sea-level-pressure
  low, a rotating wind ring (cyclonic per hemisphere), heavy water vapour and rain;
* atmospheric rivers (label 2): long, narrow, wavy filaments of high integrated water
  vapour reaching from the tropics poleward, with moisture and along-filament wind.

The label is the object's mask, and the injected anomalies rise steeply at the mask's
edge, so the segmentation is learnable from the fields. Object sizes scale with the grid
(TC radius 1.3 % of H, AR width 3 % of H; floors of 4 px keep small crops learnable);
at the reference's 768×1152 the expected class frequencies are close to the reference's
≈ [0.9863, 0.00046, 0.0133]. Everything is deterministic in (seed, split, index).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sciperf.data import manifest
from sciperf.workloads.deepcam import data as fmt_dc
from sciperf.workloads.deepcam import spec as spec

SPLIT_IDS = {"train": 0, "validation": 1}
TC_RATE, AR_RATE = 1.3, 1.15  # mean objects per sample (Poisson)
TC_RADIUS, AR_WIDTH, MIN_PX = 0.013, 0.03, 4.0  # fractions of H, floor in pixels
LATENT = 4  # shared smooth fields the 16 channels are mixed from

# channel → (base, tropical bump, polar term, noise amplitude, latent index, floor)
# base + bump·exp(−(lat/30°)²) + polar·(|lat|/90°)² + noise·latent
BACKGROUND = {
    "TMQ": (8.0, 38.0, -4.0, 5.0, 0, 0.0),          # kg m⁻²
    "U850": (2.0, -6.0, 4.0, 6.0, 1, None),          # m s⁻¹
    "V850": (0.0, 0.0, 0.0, 5.0, 2, None),
    "UBOT": (1.5, -4.0, 3.0, 4.0, 1, None),
    "VBOT": (0.0, 0.0, 0.0, 4.0, 2, None),
    "QREFHT": (0.002, 0.015, -0.001, 0.002, 0, 0.0),  # kg kg⁻¹
    "PS": (98_500.0, 300.0, -500.0, 1_200.0, 3, None),  # Pa
    "PSL": (101_300.0, -300.0, 200.0, 700.0, 3, None),
    "T200": (220.0, -6.0, -4.0, 3.0, 1, None),       # K
    "T500": (245.0, 20.0, -8.0, 3.0, 0, None),
    "PRECT": (1e-8, 6e-8, 0.0, 2e-8, 0, 0.0),        # m s⁻¹
    "TS": (255.0, 45.0, -25.0, 4.0, 0, None),
    "TREFHT": (254.0, 44.0, -24.0, 3.5, 0, None),
    "Z1000": (110.0, -20.0, 10.0, 60.0, 3, None),    # m
    "Z200": (11_200.0, 1_200.0, -300.0, 90.0, 1, None),
    "ZBOT": (62.0, 2.0, -2.0, 3.0, 3, None),
}
IDX = {name: i for i, name in enumerate(spec.CHANNELS)}


def smooth_fields(rng: np.random.Generator, h: int, w: int, n: int) -> np.ndarray:
    """`n` unit-variance low-pass Gaussian random fields (H, W), periodic in longitude."""
    noise = rng.standard_normal((n, h, w), dtype=np.float32)
    ky = np.fft.fftfreq(h).astype(np.float32)[:, None]
    kx = np.fft.rfftfreq(w).astype(np.float32)[None, :]
    filt = np.exp(-(ky**2 + kx**2) / (2.0 * 0.02**2)).astype(np.float32)
    fields = np.fft.irfft2(np.fft.rfft2(noise) * filt, s=(h, w)).astype(np.float32)
    fields -= fields.mean(axis=(1, 2), keepdims=True)
    return fields / np.maximum(fields.std(axis=(1, 2), keepdims=True), 1e-12)


def background(rng: np.random.Generator, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """(H, W, 16) float32 background and the latitude (degrees) of each row."""
    lat = np.linspace(-89.0, 89.0, h, dtype=np.float32)[:, None]
    tropics = np.exp(-(lat / 30.0) ** 2)
    polar = (np.abs(lat) / 90.0) ** 2
    latent = smooth_fields(rng, h, w, LATENT)
    x = np.empty((h, w, len(spec.CHANNELS)), np.float32)
    for name, (base, bump, pole, amp, k, floor) in BACKGROUND.items():
        field = base + bump * tropics + pole * polar + amp * latent[k]
        x[..., IDX[name]] = field if floor is None else np.maximum(field, floor)
    return x, lat[:, 0]


def _edge(distance: np.ndarray, softness: float) -> np.ndarray:
    """1 inside (distance < 0), 0 outside, a steep logistic step of `softness` px."""
    return 1.0 / (1.0 + np.exp(np.clip(distance / softness, -30.0, 30.0)))


def add_cyclone(x: np.ndarray, y: np.ndarray, lat: np.ndarray, rng: np.random.Generator,
                radius: float) -> None:
    """A tropical cyclone centred at 8–30° latitude; label 1 inside `radius`."""
    h, w, _ = x.shape
    south = rng.random() < 0.5
    band = np.flatnonzero((np.abs(lat) > 8) & (np.abs(lat) < 30) & ((lat < 0) == south))
    cy, cx = float(rng.choice(band)), float(rng.uniform(0, w))
    r_max = int(np.ceil(radius * 3))
    y0, y1 = max(int(cy) - r_max, 0), min(int(cy) + r_max + 1, h)
    cols = np.arange(int(cx) - r_max, int(cx) + r_max + 1) % w  # periodic longitude
    dy = np.arange(y0, y1, dtype=np.float32)[:, None] - cy
    dx = np.arange(int(cx) - r_max, int(cx) + r_max + 1, dtype=np.float32)[None, :] - cx
    r = np.sqrt(dy**2 + dx**2) + 1e-6
    inside = _edge(r - radius, max(radius / 8.0, 0.5))
    core = np.exp(-((r / radius) ** 2))
    spin = -1.0 if south else 1.0
    v_t = rng.uniform(30, 55) * (r / radius) * np.exp(1.0 - r / radius)  # wind ring
    patch = x[y0:y1][:, cols]
    patch[..., IDX["PSL"]] -= rng.uniform(2_500, 5_000) * core
    patch[..., IDX["PS"]] -= 0.95 * rng.uniform(2_500, 5_000) * core
    patch[..., IDX["TMQ"]] += rng.uniform(22, 32) * inside
    patch[..., IDX["QREFHT"]] += 0.004 * inside
    patch[..., IDX["PRECT"]] += rng.uniform(1e-6, 3e-6) * inside
    patch[..., IDX["T500"]] += 4.0 * core
    patch[..., IDX["Z1000"]] -= 300.0 * core
    for u_name, v_name, scale in (("U850", "V850", 1.0), ("UBOT", "VBOT", 0.8)):
        patch[..., IDX[u_name]] += scale * spin * -v_t * dy / r
        patch[..., IDX[v_name]] += scale * spin * v_t * dx / r
    x[y0:y1, cols] = patch
    labels = y[y0:y1][:, cols]
    labels[r <= radius] = 1
    y[y0:y1, cols] = labels


def add_river(x: np.ndarray, y: np.ndarray, lat: np.ndarray, rng: np.random.Generator,
              width: float) -> None:
    """A wavy filament from the subtropics poleward and eastward; label 2 inside."""
    h, w, _ = x.shape
    north = rng.random() < 0.5
    band = np.flatnonzero((np.abs(lat) > 10) & (np.abs(lat) < 35) & ((lat > 0) == north))
    y_start, x_start = float(rng.choice(band)), float(rng.uniform(0, w))
    length = rng.uniform(0.35, 0.75) * w
    angle = np.deg2rad(rng.uniform(15, 45)) * (1.0 if north else -1.0)
    amp, wavelength, phase = rng.uniform(0.02, 0.06) * length, rng.uniform(0.5, 1.0) * length, \
        rng.uniform(0, 2 * np.pi)
    rows = np.arange(h, dtype=np.float32)[:, None] - y_start
    cols = (np.arange(w, dtype=np.float32)[None, :] - x_start + w / 2) % w - w / 2
    along = cols * np.cos(angle) + rows * np.sin(angle)  # s along the axis
    across = -cols * np.sin(angle) + rows * np.cos(angle)
    centre = amp * np.sin(2 * np.pi * along / wavelength + phase)
    taper = np.clip(np.minimum(along, length - along) / (0.15 * length), 0.0, 1.0)
    half = 0.5 * width * np.sqrt(taper)  # thins out toward both ends
    dist = np.abs(across - centre) - half
    inside = _edge(dist, 0.6) * (along > 0) * (along < length)
    if not inside.any():
        return
    x[..., IDX["TMQ"]] += rng.uniform(16, 24) * inside
    x[..., IDX["QREFHT"]] += 0.005 * inside
    x[..., IDX["PRECT"]] += rng.uniform(2e-7, 5e-7) * inside
    speed = rng.uniform(8, 15) * inside
    x[..., IDX["U850"]] += speed * np.cos(angle)
    x[..., IDX["V850"]] += speed * np.sin(angle)
    y[(dist <= 0) & (along > 0) & (along < length) & (half > 0)] = 2


def object_sizes(h: int) -> tuple[float, float]:
    """(TC radius, AR width) in pixels for a grid of height h."""
    return max(TC_RADIUS * h, MIN_PX), max(AR_WIDTH * h, MIN_PX)


def make_sample(seed: int, split: str, index: int, h: int,
                w: int) -> tuple[np.ndarray, np.ndarray]:
    """One sample (float32 (H, W, 16), uint8 (H, W)), deterministic in its arguments."""
    rng = np.random.default_rng([seed, SPLIT_IDS[split], index, 0xDC])
    x, lat = background(rng, h, w)
    y = np.zeros((h, w), np.uint8)
    radius, width = object_sizes(h)
    for _ in range(min(int(rng.poisson(AR_RATE)), 4)):
        add_river(x, y, lat, rng, width * rng.uniform(0.8, 1.25))
    for _ in range(min(int(rng.poisson(TC_RATE)), 4)):  # cyclones painted over rivers
        add_cyclone(x, y, lat, rng, radius * rng.uniform(0.8, 1.25))
    return x, y


@dataclass
class GenerateRequest:
    """What `sciperf prepare workload=deepcam data.source=synthetic` writes."""

    root: str
    fmt: str
    train_samples: int
    eval_samples: int
    height: int
    width: int
    seed: int


def dataset_complete(req: GenerateRequest) -> bool:
    """True when `root` holds a finished dataset made with exactly these settings."""
    counts = {"train": req.train_samples, "validation": req.eval_samples}
    return fmt_dc.stats_path(req.root).is_file() and manifest.complete(
        req.root, req.fmt, asdict(req), fmt_dc.LAYOUT, counts)


def _forget_other_formats(req: GenerateRequest) -> None:
    """The other format's set, when made from other settings, is no longer complete: the
    stats.h5 written now replaces its statistics (npy samples of seed 0 were "ready" and
    normalised with the statistics of an hdf5 set of seed 7)."""
    mine = {k: v for k, v in manifest.content(asdict(req)).items() if k != "fmt"}
    for fmt in fmt_dc.SUFFIX:
        entry = manifest.entry(req.root, fmt)
        if fmt != req.fmt and isinstance(entry, dict) and \
                {k: v for k, v in entry.items() if k != "fmt"} != mine:
            manifest.forget(req.root, fmt, fmt_dc.LAYOUT)


def generate(req: GenerateRequest, show_progress: bool = True) -> dict[str, float]:
    """Write samples, then stats.h5 over the train split, then the manifest (last: an
    interrupted generation is redone). Returns the class frequencies of the train split."""
    root = Path(req.root)
    counts = {"train": req.train_samples, "validation": req.eval_samples}
    acc, classes = fmt_dc.StatsAccumulator(), np.zeros(spec.NUM_CLASSES, np.int64)
    for folder, split, i in manifest.rewrite(root, req.fmt, fmt_dc.LAYOUT, counts, "climate",
                                             show_progress):
        x, y = make_sample(req.seed, split, i, req.height, req.width)
        fmt_dc.write_sample(folder, f"data-synth-{i:07d}", req.fmt, x, y)
        if split == "train":
            acc.add(x)
            classes += np.bincount(y.ravel(), minlength=spec.NUM_CLASSES)
    _forget_other_formats(req)  # stats.h5 is one file for both formats
    fmt_dc.write_stats(fmt_dc.stats_path(root), acc.result())
    manifest.record(root, req.fmt, asdict(req))
    freq = classes / max(classes.sum(), 1)
    return dict(zip(spec.CLASS_NAMES, (float(f) for f in freq), strict=True))

