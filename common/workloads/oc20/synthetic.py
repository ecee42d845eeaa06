"""Learnable OC20-like structures offline: catalyst slabs whose energies and forces come
from a real physical calculator (ASE's EMT), written in both formats.

Each structure (spec/oc20.md §7): an fcc(111) slab of one metal (Cu, Ag, Au, Ni, Pd, Pt),
``data.slab`` = (a, b, layers) unit cells, 8 Å of vacuum, an O adsorbate at a random
fcc/hcp/ontop site with probability ``data.adsorbate_probability`` (at EMT's equilibrium height
for that metal and site: a fixed height puts O too close on some sites, with 40 eV/Å
spikes that drown the signal), the bottom two layers
fixed (FixAtoms → ``fixed`` = 1), every position rattled by N(0, ``data.rattle`` Å), periodic
in x and y (the cell's z spans the vacuum, so z images lie beyond any cutoff). Energies and
forces are EMT's (``apply_constraint=False``, as the reference's preprocessing), OC20 tags
0 subsurface / 1 surface / 2 adsorbate, edges by :mod:`graph` with the model's cutoff and
``data.max_neighbours`` per centre. Structure k of a split depends only on (seed, split, k),
so any worker count writes the same bytes.
"""

from __future__ import annotations

import functools
import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciperf import jsondata
from sciperf.data import atomic, manifest
from sciperf.errors import SciperfError
from sciperf.progress import Progress
from sciperf.workloads.oc20 import data, graph, spec

METALS = spec.SYNTHETIC_METALS  # EMT's realistic fcc metals
SITES = ("fcc", "hcp", "ontop")
FIXED_LAYERS = spec.FIXED_LAYERS
VACUUM = 8.0  # Å
HEIGHT_RANGE = (0.8, 2.6)  # Å above the top layer, searched for the EMT minimum
SPLIT_STREAMS = {"train": 0, "validation": 1}


@dataclass(frozen=True)
class GenerateRequest:
    """Everything that determines the bytes written (the manifest entry)."""

    root: str
    train_samples: int
    eval_samples: int
    seed: int
    cutoff: float
    max_neighbours: int
    slab: tuple[int, int, int]
    metals: tuple[str, ...]
    rattle: float
    adsorbate_probability: float
    per_container: int

    def check(self) -> None:
        """The request's values, one line naming the key (the config check runs the same
        rules at compose time; this covers requests made in code)."""
        try:
            spec.check_generator(metals=list(self.metals), slab=list(self.slab),
                                 rattle=self.rattle,
                                 adsorbate_probability=self.adsorbate_probability,
                                 max_neighbours=self.max_neighbours,
                                 structures_per_container=self.per_container)
        except ValueError as exc:
            raise SciperfError(str(exc)) from None
        if self.train_samples < 1 or self.eval_samples < 1:
            raise SciperfError(f"data.train_samples={self.train_samples}, data.eval_samples="
                               f"{self.eval_samples}: synthetic data needs at least one "
                               "structure per split (0 means 'all' only for existing data)")
        if not self.cutoff > 0:
            raise SciperfError(f"model.cutoff={self.cutoff} must be > 0 (Å)")


def structure(req: GenerateRequest, split: str, index: int) -> dict[str, Any]:
    """Structure `index` of `split`: slab (+ adsorbate), rattled, EMT energy and forces,
    edges. Deterministic from (seed, split, index)."""
    from ase.build import add_adsorbate, fcc111
    from ase.calculators.emt import EMT
    from ase.constraints import FixAtoms

    rng = np.random.default_rng([req.seed, SPLIT_STREAMS[split], index, 0x0C20])
    metal = req.metals[int(rng.integers(len(req.metals)))]
    layers = req.slab[2]
    atoms = fcc111(metal, size=tuple(req.slab), vacuum=VACUUM)
    ase_tags = atoms.get_tags().copy()  # 1 = top layer … layers = bottom
    adsorbed = bool(rng.random() < req.adsorbate_probability)
    if adsorbed:
        site = SITES[int(rng.integers(len(SITES)))]
        add_adsorbate(atoms, "O", adsorbate_height(metal, site, req.slab), site)
    fixed = np.zeros(len(atoms), np.uint8)
    fixed[: len(ase_tags)] = ase_tags > layers - FIXED_LAYERS
    atoms.set_constraint(FixAtoms(mask=fixed.astype(bool)))
    atoms.positions += rng.normal(0.0, req.rattle, atoms.positions.shape)
    atoms.calc = EMT()
    energy = float(atoms.get_potential_energy())
    forces = atoms.get_forces(apply_constraint=False)
    tags = np.zeros(len(atoms), np.int8)
    tags[: len(ase_tags)][ase_tags == 1] = 1
    tags[len(ase_tags):] = 2
    g = graph.neighbour_graph(atoms.positions, atoms.cell.array, req.cutoff, req.max_neighbours,
                              pbc=(True, True, True))
    return {"pos": atoms.positions.astype(np.float32), "cell": atoms.cell.array.astype(np.float32),
            "atomic_numbers": atoms.numbers.astype(np.int64), "force": forces.astype(np.float32),
            "fixed": fixed, "tags": tags, "energy": energy,
            "sid": SPLIT_STREAMS[split] * 10**9 + index, "fid": 0,
            "edge_index": g.edge_index, "cell_offsets": g.cell_offsets}


@functools.lru_cache(maxsize=64)
def adsorbate_height(metal: str, site: str, slab: tuple[int, int, int]) -> float:
    """EMT's equilibrium height of O on `site` of the unrattled slab (bounded 1-D search,
    rounded to 0.01 Å so every process agrees)."""
    from ase.build import add_adsorbate, fcc111
    from ase.calculators.emt import EMT
    from scipy.optimize import minimize_scalar

    def energy(height: float) -> float:
        atoms = fcc111(metal, size=slab, vacuum=VACUUM)
        add_adsorbate(atoms, "O", height, site)
        atoms.calc = EMT()
        return float(atoms.get_potential_energy())

    best = minimize_scalar(energy, bounds=HEIGHT_RANGE, method="bounded",
                           options={"xatol": 1e-3})
    return round(float(best.x), 2)


def _container_job(args: tuple[GenerateRequest, str, int, int]) -> tuple[list[dict], float]:
    """Structures [first, first + count) of a split (a worker's unit of work)."""
    req, split, first, count = args
    t0 = time.perf_counter()
    return [structure(req, split, first + k) for k in range(count)], time.perf_counter() - t0


def generate(req: GenerateRequest, workers: int = 1, show_progress: bool = True) -> dict:
    """Write both formats of both splits (containers atomically, the manifest last) and
    return the training split's force statistics over free atoms."""
    req.check()
    root = Path(req.root)
    for fmt in data.FORMATS:  # the reference's own LMDB files are refused, not replaced
        manifest.forget(root, fmt, None, data.format_containers(root, fmt))
    for fmt in data.FORMATS:
        data.remove_format(root, fmt)
    counts = {"train": req.train_samples, "validation": req.eval_samples}
    jobs = [(req, split, first, min(req.per_container, n - first))
            for split, n in counts.items() for first in range(0, n, req.per_container)]
    stats = _ForceStats()
    bar = Progress(sum(counts.values()), "EMT slabs", unit="structures",
                   enabled=show_progress)
    with ProcessPoolExecutor(max(workers, 1)) if workers > 1 else _Inline() as pool:
        for (_, split, first, _n), (structures, _s) in zip(jobs, pool.map(_container_job, jobs),
                                                          strict=True):
            number = first // req.per_container
            folder = root / split
            with atomic.failing_as(folder):
                folder.mkdir(parents=True, exist_ok=True)
            data.write_lmdb(folder / data.CONTAINER["lmdb"].format(number), structures)
            data.write_shard(folder / data.CONTAINER["npy"].format(number), structures)
            if split == "train":
                stats.add(structures)
            bar.update(len(structures))
    summary = stats.summary()
    atomic.write_text(root / "force_stats.json", json.dumps(summary, indent=2))
    for fmt in data.FORMATS:
        manifest.record(root, fmt, request_record(req))
    return summary


def request_record(req: GenerateRequest) -> dict[str, Any]:
    """The manifest entry of a request (JSON types)."""
    out = asdict(req)
    out.update(slab=list(req.slab), metals=list(req.metals))
    return out


def dataset_complete(req: GenerateRequest) -> bool:
    """Both formats of exactly this request are on disk."""
    return all(manifest.complete(req.root, fmt, request_record(req)) for fmt in data.FORMATS)


class _Inline:
    """A stand-in executor that maps in this process (one worker, no pickling)."""

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    @staticmethod
    def map(fn: Any, items: list) -> Any:
        return map(fn, items)


class _ForceStats:
    """Mean |F| and the std of force components over free training atoms (the mini's
    normaliser and the zero-predictor's MAE, which a learnt model must beat)."""

    def __init__(self) -> None:
        self.n, self.abs_sum, self.sq_sum, self.sum = 0, 0.0, 0.0, 0.0
        self.energies: list[float] = []

    def add(self, structures: list[dict]) -> None:
        for s in structures:
            f = s["force"][s["fixed"] == 0].astype(np.float64)
            self.n += f.size
            self.abs_sum += float(np.abs(f).sum())
            self.sq_sum += float((f * f).sum())
            self.sum += float(f.sum())
            self.energies.append(float(s["energy"]))

    def summary(self) -> dict[str, float]:
        mean = self.sum / max(self.n, 1)
        energies = np.asarray(self.energies or [0.0])
        return {"free_force_components": self.n,
                "force_mae_of_zero": self.abs_sum / max(self.n, 1),
                "force_std": float(np.sqrt(max(self.sq_sum / max(self.n, 1) - mean**2, 0.0))),
                "energy_mean": float(energies.mean()), "energy_std": float(energies.std())}


def request_from_config(cfg: Any) -> GenerateRequest:
    """The request a run config describes (model.cutoff; the data.* generator keys)."""
    d = cfg.data
    return GenerateRequest(
        root=str(Path(d.dir).resolve()), train_samples=int(d.train_samples),
        eval_samples=int(d.eval_samples), seed=int(cfg.seed), cutoff=float(cfg.model.cutoff),
        max_neighbours=int(d.max_neighbours), slab=tuple(int(v) for v in d.slab),
        metals=tuple(str(m) for m in d.metals), rattle=float(d.rattle),
        adsorbate_probability=float(d.adsorbate_probability),
        per_container=int(d.structures_per_container))


def force_stats(root: str | Path) -> dict[str, float] | None:
    """The generator's training-force statistics, if this directory was generated (None:
    no force_stats.json). One that cannot be read, or is not the generator's object of
    numbers (cut short, garbled, nested past the recursion limit), is one line naming it:
    a damaged file is no sign of a directory the generator did not write."""
    path = Path(root) / "force_stats.json"
    if not path.is_file():
        return None
    try:
        stats = jsondata.loads(path.read_text())
    except OSError as exc:
        raise SciperfError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:  # (UnicodeDecodeError too)
        raise SciperfError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(stats, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in stats.values()):
        raise SciperfError(f"{path}: not an object of numbers (the generator's statistics)")
    return stats

