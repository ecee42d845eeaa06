"""OpenCatalyst OC20 (DimeNet++ on S2EF): every benchmark-defining number, once.

docs/architecture.md, rule 1. Facts from the MLPerf HPC rules, the reference
implementation (mlcommons/hpc open_catalyst, a fork of OCP 0.0.3 whose DimeNet++ blocks
come from PyG 1.7.2), the hpc 3.0.0 compliance rules (closed_oc20.yaml) and the RCP file
rcps_oc20.json. The network is described as a flat table of named weight entries
(:meth:`ModelSpec.weight_shapes`, the canonical ``.npz`` names, Keras layout, the names of
the original TensorFlow DimeNet++) so that both frameworks build the same layers and the
parameter count is computed here, not asserted.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any

NAME = "oc20"
METRIC_KEY = "eval_error"  # validation force MAE, eV/Å
METRIC_NAME = "validation force MAE"
HIGHER_IS_BETTER = False
TARGET = 0.036  # the checker wants some eval_error with 0 < value <= 0.036
# The mini's target (configs/workload_experiment/oc20_mini.yaml, train.target) was
# calibrated with real runs on its synthetic EMT slabs, whose free-atom force MAE of the
# zero predictor is 0.326 eV/Å: seed 0, PyTorch 0.097 → 0.067 → 0.053 → 0.039 and
# TensorFlow 0.090 → 0.080 → 0.058 → 0.043 → 0.030 in the first epochs. It is 0.035, just
# under the closed target, because the official checker applies the 0.036 bound to open
# oc20 logs as well (a 0.05 mini target was refused); ~5–6 epochs, ~11 % of the zero
# predictor's error, met only by a model that learnt the forces.
RUNS_FOR_SCORE = 5

TRAIN_SAMPLES = 2_000_000  # S2EF "2M"
EVAL_SAMPLES = 999_866  # val_id
SPLITS = ("train", "validation")
NUM_ELEMENTS = 95  # atomic-number embedding rows (Z = 0..94)
MAX_NEIGHBOURS = 50  # per centre atom, nearest first (preprocessing)
SYNTHETIC_METALS = ("Cu", "Ag", "Au", "Ni", "Pd", "Pt")  # EMT's realistic fcc metals
FIXED_LAYERS = 2  # bottom slab layers held fixed by the synthetic generator

# Target normalisation of the reference (the energy std is reused for the forces).
ENERGY_MEAN = -0.7554450631141663
ENERGY_STD = 2.887317180633545
FORCE_MEAN = 0.0
FORCE_STD = 2.887317180633545

ENERGY_COEFFICIENT = 0.0
FORCE_COEFFICIENT = 50.0  # L1 over the xyz components of free atoms (see loss_scale)

ADAMW_BETAS = (0.9, 0.999)  # torch defaults, as the reference
ADAMW_EPS = 1e-8
WEIGHT_DECAY = 0.01  # on every parameter (biases, embedding, frequencies included)
MIN_MILESTONE = 100  # the reference refuses an LR milestone below 100 steps

# The three sanctioned recipes (rcps_oc20.json): GBS → (lr, warmup steps, milestones,
# epochs to converge of the 10 reference runs). Warmup factor 0.2, decay factor 0.1.
RCP = {
    256: (4e-4, 31252, (125008, 187512, 250016), (20, 18, 20, 20, 22, 18, 19, 19, 21, 21)),
    1024: (1.2e-3, 7816, (31264, 46896), (23, 25, 22, 25, 25, 25, 25, 24, 23, 25)),
    2048: (1.6e-3, 3908, (23448, 31264), (33, 32, 33, 33, 33, 34, 33, 33, 30, 33)),
}

# FLOPs of a training / evaluation structure as multiples of the energy forward: the forces
# −∂E/∂pos are one more forward-sized pass (every dense layer's input gradient), and
# training differentiates both passes for weights and inputs (2 × 2 forwards): 1+1+4, 1+1
FLOPS_PASSES = (6.0, 2.0)
FULL_PARAMETER_COUNT = 1_810_182  # the reference layout: lin_up of the output blocks has a bias
TF_ORIGINAL_PARAMETER_COUNT = 1_809_414  # gasteigerjo/dimenet: that projection has none


def olympic_epochs(gbs: int) -> float:
    """RCP mean of a recipe: the mean without the lowest and the highest run."""
    runs = sorted(RCP[gbs][3])
    return sum(runs[1:-1]) / (len(runs) - 2)


def steps_per_epoch_at(gbs: int, samples: int = TRAIN_SAMPLES) -> int:
    """Optimizer steps of one epoch: ⌈samples / GBS⌉ (the sampler pads the last batch)."""
    return -(-samples // gbs)


@dataclass
class ModelSpec:
    """DimeNet++ knobs; defaults are the reference model (1,810,182 parameters)."""

    hidden_channels: int = 192
    out_emb_channels: int = 192
    int_emb_size: int = 64
    basis_emb_size: int = 8
    num_blocks: int = 3
    num_spherical: int = 7
    num_radial: int = 6
    cutoff: float = 6.0  # Å
    envelope_exponent: int = 5
    num_before_skip: int = 1
    num_after_skip: int = 2
    num_output_layers: int = 3
    num_targets: int = 1
    output_up_bias: bool = True  # the reference's lin_up bias (False: the TF original)

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every canonical ``.npz`` entry and its shape, in the reference's module order."""
        h, r = self.hidden_channels, self.num_radial
        shapes: dict[str, tuple[int, ...]] = {"rbf_layer/frequencies": (r,)}
        shapes.update({"emb_block/embeddings": (NUM_ELEMENTS, h)})
        shapes.update(_dense("emb_block/dense_rbf", r, h))
        shapes.update(_dense("emb_block/dense", 3 * h, h))
        for b in range(self.num_blocks + 1):
            shapes.update(self._output_block(f"output_blocks/{b}"))
        for b in range(self.num_blocks):
            shapes.update(self._interaction_block(f"int_blocks/{b}"))
        return shapes

    def _output_block(self, name: str) -> dict[str, tuple[int, ...]]:
        h, o, r = self.hidden_channels, self.out_emb_channels, self.num_radial
        out = _dense(f"{name}/dense_rbf", r, h, bias=False)
        out.update(_dense(f"{name}/up_projection", h, o, bias=self.output_up_bias))
        for j in range(self.num_output_layers):
            out.update(_dense(f"{name}/dense_layers/{j}", o, o))
        out.update(_dense(f"{name}/dense_final", o, self.num_targets, bias=False))
        return out

    def _interaction_block(self, name: str) -> dict[str, tuple[int, ...]]:
        h, r, b = self.hidden_channels, self.num_radial, self.basis_emb_size
        i, s = self.int_emb_size, self.num_spherical * self.num_radial
        out = _dense(f"{name}/dense_rbf1", r, b, bias=False)
        out.update(_dense(f"{name}/dense_rbf2", b, h, bias=False))
        out.update(_dense(f"{name}/dense_sbf1", s, b, bias=False))
        out.update(_dense(f"{name}/dense_sbf2", b, i, bias=False))
        out.update(_dense(f"{name}/dense_kj", h, h))
        out.update(_dense(f"{name}/dense_ji", h, h))
        out.update(_dense(f"{name}/down_projection", h, i, bias=False))
        out.update(_dense(f"{name}/up_projection", i, h, bias=False))
        for j in range(self.num_before_skip):
            out.update(_residual(f"{name}/layers_before_skip/{j}", h))
        out.update(_dense(f"{name}/final_before_skip", h, h))
        for j in range(self.num_after_skip):
            out.update(_residual(f"{name}/layers_after_skip/{j}", h))
        return out

    def parameter_count(self) -> int:
        """Trainable parameters, summed over the entry table (must equal the frameworks')."""
        return sum(math.prod(s) for s in self.weight_shapes().values())


def _dense(name: str, fin: int, fout: int, bias: bool = True) -> dict[str, tuple[int, ...]]:
    """A Linear layer's entries: kernel (in, out) and, with a bias, (out,)."""
    out: dict[str, tuple[int, ...]] = {f"{name}/kernel": (fin, fout)}
    if bias:
        out[f"{name}/bias"] = (fout,)
    return out


def _residual(name: str, width: int) -> dict[str, tuple[int, ...]]:
    """ResidualLayer: x + act(W2·act(W1·x)), both with bias."""
    return {**_dense(f"{name}/dense_1", width, width), **_dense(f"{name}/dense_2", width, width)}


@dataclass
class OptimizerSpec:
    """AdamW (torch defaults, weight decay on everything) and the per-step schedule:
    warmup factor f(s) = w·(1 − s/W) + s/W for s ≤ W, then decay^(milestones passed)."""

    name: str = "AdamW"
    lr: float = RCP[256][0]
    warmup_steps: int = RCP[256][1]
    warmup_factor: float = 0.2
    milestones: list[int] = field(default_factory=lambda: list(RCP[256][2]))
    decay_factor: float = 0.1
    weight_decay: float = WEIGHT_DECAY


def check_optimizer(o: Any) -> None:
    """Choices the schema cannot restrict (ValueError naming the key)."""
    if o.name != "AdamW":
        raise ValueError(f"opt.name={o.name}: the OC20 reference trains with AdamW")
    low = [int(m) for m in o.milestones if int(m) < MIN_MILESTONE]
    if low:
        raise ValueError(f"opt.milestones={list(o.milestones)}: every milestone counts optimizer "
                         f"steps and must be >= {MIN_MILESTONE} (the reference refuses {low[0]})")
    if not 0 < float(o.lr) < math.inf:  # 0 trains nothing; NaN passed a `< 0` test
        raise ValueError(f"opt.lr={o.lr} must be a finite number > 0")
    if int(o.warmup_steps) < 0:
        raise ValueError(f"opt.warmup_steps={o.warmup_steps} must be >= 0")
    if not 0 <= float(o.warmup_factor) <= 1:
        raise ValueError(f"opt.warmup_factor={o.warmup_factor} must be in [0, 1] (the warmup "
                         "rises from factor·lr to lr)")
    if not 0 < float(o.decay_factor) <= 1:
        raise ValueError(f"opt.decay_factor={o.decay_factor} must be in (0, 1]")
    if float(o.weight_decay) < 0:
        raise ValueError(f"opt.weight_decay={o.weight_decay} must be >= 0")


def lr_for_step(o: Any, step: int) -> float:
    """LR of 0-indexed optimizer step `step` (the reference's LambdaLR, stepped every
    iteration): lr·(w·(1 − s/W) + s/W) while s ≤ W, then lr·γ^bisect_right(milestones, s).
    Step 0 runs at w·lr, as the reference's LR at construction."""
    lr, warm = float(o.lr), int(o.warmup_steps)
    if warm > 0 and step <= warm:
        frac = step / warm
        return lr * (float(o.warmup_factor) * (1.0 - frac) + frac)
    passed = bisect.bisect_right(sorted(int(m) for m in o.milestones), step)
    return lr * float(o.decay_factor) ** passed


def loss_scale(world: int, global_free_atoms: int) -> float:
    """Factor of Σ|ΔF/σ| (this rank's free-atom xyz components) in the reference's DDP
    loss: force coefficient × world / the free atoms of the whole global batch — so that
    DDP's gradient average equals the gradient of 50·Σ|ΔF/σ| / N_free over the global batch
    (3× a per-component mean). A global batch without a free atom contributes a force loss
    of 0 (every rank's Σ is empty): the divisor is max(N_free, 1), so the factor is finite
    there too. Both frameworks take the factor from here."""
    if global_free_atoms < 0:
        raise ValueError(f"global_free_atoms={global_free_atoms}: a count is >= 0")
    return FORCE_COEFFICIENT * world / max(global_free_atoms, 1)


@dataclass
class TrainSpec:
    """Run-level defaults of the reference (GBS 256, 30 epochs at most)."""

    global_batch_size: int = 256
    max_epochs: int = 30
    target: float = TARGET


@dataclass
class DataSpec:
    """Dataset defaults: the full reference splits in the reference LMDB format, the
    reference's normaliser, and the synthetic generator's knobs (``sciperf prepare``)."""

    format: str = "lmdb"
    train_samples: int = TRAIN_SAMPLES
    eval_samples: int = EVAL_SAMPLES
    energy_mean: float = ENERGY_MEAN
    energy_std: float = ENERGY_STD
    force_std: float = FORCE_STD  # the model learns F / force_std (mean 0)
    max_neighbours: int = MAX_NEIGHBOURS
    slab: list[int] = field(default_factory=lambda: [3, 3, 4])  # fcc(111) cells a, b, layers
    metals: list[str] = field(default_factory=lambda: ["Cu", "Ag", "Au", "Ni", "Pd", "Pt"])
    rattle: float = 0.05  # Å, Gaussian displacement of every atom
    adsorbate_probability: float = 0.5
    structures_per_container: int = 1024  # records per LMDB file / npy shard


RCP_EPOCHS = {gbs: olympic_epochs(gbs) for gbs in RCP}


def steps_per_epoch(cfg: Any) -> int:
    """Optimizer steps of one epoch of the configured training set: every rank takes
    ⌊n / GBS⌋ full batches (sciperf drops the remainder, see docs/architecture.md)."""
    n = int(cfg.data.train_samples) or TRAIN_SAMPLES
    return max(n // int(cfg.train.global_batch_size), 1)


def lr_at_step(cfg: Any, step: int, steps_per_epoch: int = 0) -> float:
    """The contract's per-step LR (the schedule counts optimizer steps)."""
    return lr_for_step(cfg.opt, step)


def check_config(cfg: Any) -> None:
    """Values the schema cannot restrict (ValueError naming the key)."""
    m = ModelSpec(**dict(cfg.model))
    positive = {"hidden_channels": m.hidden_channels, "out_emb_channels": m.out_emb_channels,
                "int_emb_size": m.int_emb_size, "basis_emb_size": m.basis_emb_size,
                "num_blocks": m.num_blocks, "num_spherical": m.num_spherical,
                "num_radial": m.num_radial, "envelope_exponent": m.envelope_exponent,
                "num_output_layers": m.num_output_layers, "num_targets": m.num_targets}
    for key, value in positive.items():
        if int(value) < 1:
            raise ValueError(f"model.{key}={value} must be >= 1")
    if float(m.cutoff) <= 0:
        raise ValueError(f"model.cutoff={m.cutoff} must be > 0 (Å)")
    for key in ("num_before_skip", "num_after_skip"):
        if int(getattr(m, key)) < 0:
            raise ValueError(f"model.{key}={getattr(m, key)} must be >= 0")
    check_optimizer(cfg.opt)
    d = cfg.data
    if float(d.force_std) <= 0 or float(d.energy_std) <= 0:
        raise ValueError("data.force_std and data.energy_std must be > 0")
    check_generator(metals=list(d.metals), slab=list(d.slab), rattle=float(d.rattle),
                    adsorbate_probability=float(d.adsorbate_probability),
                    max_neighbours=int(d.max_neighbours),
                    structures_per_container=int(d.structures_per_container))


def check_generator(*, metals: list[str], slab: list[int], rattle: float,
                    adsorbate_probability: float, max_neighbours: int,
                    structures_per_container: int) -> None:
    """The synthetic generator's ``data.*`` keys, one key and value per message
    (ValueError). Checked when the config is composed (`sciperf show` and `train` refuse
    them too) and again by the generator, before `sciperf prepare` creates data.dir."""
    bad = [m for m in metals if m not in SYNTHETIC_METALS]
    if bad or not metals:
        raise ValueError(f"data.metals=[{', '.join(map(str, metals))}]: EMT slabs support "
                         f"{', '.join(SYNTHETIC_METALS)}")
    if len(slab) != 3 or min(slab) < 1 or slab[2] <= FIXED_LAYERS:
        raise ValueError(f"data.slab={slab}: three positive sizes (cells a, b, layers) with "
                         f"more than {FIXED_LAYERS} layers (the bottom {FIXED_LAYERS} are fixed)")
    if not 0 <= adsorbate_probability <= 1:
        raise ValueError(f"data.adsorbate_probability={adsorbate_probability} must be in "
                         "[0, 1]")
    if not rattle >= 0:  # NaN too
        raise ValueError(f"data.rattle={rattle} must be >= 0 (Å)")
    if max_neighbours < 1:
        raise ValueError(f"data.max_neighbours={max_neighbours} must be >= 1")
    if structures_per_container < 1:
        raise ValueError(f"data.structures_per_container={structures_per_container} must "
                         "be >= 1")


def check_run(cfg: Any) -> None:
    """Closed-division rules of closed_oc20.yaml that depend on the user's choices."""
    if cfg.system.submission_division != "closed":
        return
    gbs = int(cfg.train.global_batch_size)
    if gbs not in RCP:
        raise ValueError(f"train.global_batch_size={gbs}: closed OC20 has reference "
                         f"convergence points only for {sorted(RCP)}; run in division open")


def mllog_hyperparameters(cfg: Any, train_samples: int, eval_samples: int) -> dict[str, Any]:
    """closed_oc20.yaml's keys, as the reference logs them (`seed` is the driver's)."""
    o = cfg.opt
    return {
        "global_batch_size": int(cfg.train.global_batch_size),
        "train_samples": int(train_samples),
        "eval_samples": int(eval_samples),
        "opt_name": str(o.name),
        "opt_base_learning_rate": float(o.lr),
        "opt_learning_rate_warmup_steps": int(o.warmup_steps),
        "opt_learning_rate_warmup_factor": float(o.warmup_factor),
        "opt_learning_rate_decay_boundary_steps": [int(m) for m in o.milestones],
        "opt_learning_rate_decay_factor": float(o.decay_factor),
    }
