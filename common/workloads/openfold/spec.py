"""OpenFold (AlphaFold2 partial "initial training"): every benchmark-defining number, once.

docs/architecture.md, rule 1. Facts from the MLPerf HPC reference (mlcommons/hpc openfold:
train.py, config.py, lr_scheduler.py, samplers.py, swa.py), the hpc 3.0.0 compliance rules
(closed_openfold.yaml) and the RCP file rcps_openfold.json — collected with their sources
in shared/spec/openfold.md. The network's sizes and its parameter table are in ``sizes``
(the reference's 5,044 tensors, computed, not asserted).

The benchmark has no epochs: it trains for iterations, drawing chains with replacement,
and evaluates every ``val_every_iters`` (40) iterations. sciperf's epoch is that
train/validation cycle, and MLLOG's ``epoch_num`` counts samples as the reference logs it:
cycle × global batch × 40 (:func:`mllog_epoch`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sciperf.errors import SciperfError
from sciperf.roles import role
from sciperf.workloads.openfold.sizes import FULL_PARAMETER_COUNT, ModelSpec

__all__ = ["FULL_PARAMETER_COUNT", "ModelSpec"]

NAME = "openfold"
METRIC_KEY = "eval_accuracy"  # the mean lDDT-Cα over the validation chains
METRIC_NAME = "validation mean lDDT-Cα"
HIGHER_IS_BETTER = True
TARGET = 0.8  # target_avg_lddt_ca_value
RUNS_FOR_SCORE = 10

TRAIN_SAMPLES = 594_595  # PDB chains passing the training filter (closed_openfold.yaml)
EVAL_SAMPLES = 180  # CAMEO chains, length <= 700, deduplicated
SPLITS = ("train", "validation")

# Benchmark definition (closed_openfold.yaml, each logged once).
TRAIN_MAX_PDB_RELEASE_DATE = "2021-09-16"
VAL_MIN_CAMEO_SUBMISSION_DATE = "2021-09-17"
VAL_MAX_CAMEO_SUBMISSION_DATE = "2021-12-11"
VAL_MAX_SEQUENCE_LENGTH = 700
VAL_EVERY_ITERS = 40
EPOCH_KEY = "train.val_every_iters"  # the config key of an epoch's optimizer steps
NUM_TRAIN_ITERS = 2000  # the reference's upper bound (--num_train_iters)

# A sample's sizes (REF config.py): the full model's, written once in sizes.ModelSpec —
# crop 256, 124 MSA clusters (128 rows enter the Evoformer with the 4 template torsion
# rows), 1,024 extra sequences, 4 templates, 3 recycling iterations (up to 4 passes; a
# step's count is drawn from 0..3)
_FULL = ModelSpec()
TRAIN_SEQUENCE_CROP_SIZE = _FULL.crop_size
MAX_MSA_CLUSTERS = _FULL.max_msa_clusters
MAX_EXTRA_MSA = _FULL.max_extra_msa
MAX_TEMPLATES = _FULL.max_templates
NUM_RECYCLING_ITERS = _FULL.num_recycling_iters

# Loss weights (REF config.py; FAPE is half backbone, half side chain).
LOSS_WEIGHTS = {
    "fape": 1.0, "fape_backbone": 0.5, "fape_sidechain": 0.5, "supervised_chi": 1.0,
    "distogram": 0.3, "masked_msa": 2.0, "plddt": 0.01, "experimentally_resolved": 0.0,
    "violation": 0.0,
}

# Optimizer (REF train.py): Adam, global-norm clipping, an EMA of the weights ("SWA")
# that validation uses.
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-6
WEIGHT_DECAY = 0.0
AMSGRAD = False
GRADIENT_CLIP_NORM = 0.1
SWA_DECAY = 0.9
BASE_LR = 1e-3
WARMUP_LR_INIT = 1e-5
WARMUP_LR_ITERS = 0
DATALOADER_TYPES = ("InitialTrainingDataloaderPT", "InitialTrainingDataloaderPQ")
SYNTHETIC_SEQUENCES = ("mixed", "one_class")  # synthetic chains: every residue type or one class

# The starting point every closed run loads (its SHA-256 is logged and checked).
INIT_CHECKPOINT_NAME = "mlperf_hpc_openfold_resumable_checkpoint.pt"
INIT_CHECKPOINT_SHA256 = "b518be4677048f2c0f94889c91e2da73655a73b825a8aa7f8b6f5e580d8ffbed"

# RCPs (rcps_openfold.json): samples to converge of 20 reference runs per global batch.
RCP_SAMPLES = {
    128: (97280, 87040, 81920, 92160, 92160, 87040, 92160, 81920, 81920, 81920, 71680, 92160,
          107520, 81920, 92160, 81920, 87040, 81920, 97280, 107520),
    256: (153600, 153600, 122880, 143360, 133120, 143360, 122880, 122880, 112640, 112640,
          133120, 153600, 122880, 133120, 122880, 153600, 143360, 133120, 133120, 112640),
}


def olympic_samples(gbs: int) -> float:
    """RCP mean of a recipe: the mean without the lowest and the highest run (samples)."""
    runs = sorted(RCP_SAMPLES[gbs])
    return sum(runs[1:-1]) / (len(runs) - 2)


RCP_EPOCHS = {gbs: olympic_samples(gbs) for gbs in RCP_SAMPLES}  # in MLLOG epoch_num units


@dataclass
class OptimizerSpec:
    """Adam with a linear warm-up from ``warmup_lr_init`` to ``lr`` over ``warmup_steps``
    iterations, then constant; global-norm clipping; the weights' EMA for validation."""

    name: str = "Adam"
    lr: float = BASE_LR
    warmup_lr_init: float = WARMUP_LR_INIT
    warmup_steps: int = WARMUP_LR_ITERS
    beta_1: float = ADAM_BETAS[0]
    beta_2: float = ADAM_BETAS[1]
    eps: float = ADAM_EPS
    weight_decay: float = WEIGHT_DECAY
    clip_norm: float = GRADIENT_CLIP_NORM
    swa_decay: float = SWA_DECAY


@dataclass
class TrainSpec:
    """Run-level defaults of the reference: 128 chains per step, evaluation every 40 steps,
    at most 2,000 steps (50 cycles), from the reference checkpoint."""

    global_batch_size: int = 128
    max_epochs: int = NUM_TRAIN_ITERS // VAL_EVERY_ITERS
    target: float = TARGET
    # optimizer steps per train/validation cycle (the bench times an epoch of its samples)
    val_every_iters: int = field(default=VAL_EVERY_ITERS, metadata=role(
        bench="bench.samples= and bench.batch= (an epoch is samples/batch steps)"))
    # the reference-format checkpoint to start from ("": none)
    init_checkpoint: str = field(default="", metadata=role(reads=True, hint=(
        " (a mini's starting checkpoint is made by `sciperf prepare workload={workload} "
        "experiment={experiment}`; train.init_checkpoint= starts from scratch)")))
    checkpointing: bool = True  # recompute each block in backward (the reference does)


@dataclass
class DataSpec:
    """Dataset defaults: the reference's processed layout and the synthetic generator's
    knobs (``sciperf prepare``). A sample's sizes (crop, MSA rows, templates) are model
    keys, as in the reference's AlphaFoldConfig (``sizes.ModelSpec``)."""

    format: str = "processed"
    train_samples: int = TRAIN_SAMPLES
    eval_samples: int = EVAL_SAMPLES
    max_eval_length: int = VAL_MAX_SEQUENCE_LENGTH
    dataloader_type: str = DATALOADER_TYPES[0]
    min_length: int = 24  # synthetic chains: residues
    max_length: int = 48
    msa_depth: int = 32  # synthetic MSA rows per chain (the query included)
    templates: bool = False  # synthetic template hits (hhr + kalign realignment)
    sequences: str = "mixed"  # synthetic.SEQUENCE_KINDS: every residue type, or one class
    # cycles `sciperf prepare` pre-trains the starting checkpoint for (0: none; the mini's
    # train.init_checkpoint is that file, <data.dir>/pretrained.pt)
    pretrain_epochs: int = 0


def lr_for_step(o: Any, step: int) -> float:
    """LR of 0-indexed optimizer step `step` (the reference's iteration step + 1):
    linspace(warmup_lr_init, lr, warmup_steps)[step] rounded to 10 decimals during the
    warm-up, then lr."""
    warm = int(o.warmup_steps)
    if step < warm:
        lo, hi = float(o.warmup_lr_init), float(o.lr)
        frac = step / (warm - 1) if warm > 1 else 0.0
        return round(lo + (hi - lo) * frac, 10)
    return float(o.lr)


def lr_at_step(cfg: Any, step: int, steps_per_epoch: int = 0) -> float:
    """The contract's per-step LR."""
    return lr_for_step(cfg.opt, step)


def steps_per_epoch(cfg: Any) -> int:
    """Optimizer steps of one train/validation cycle."""
    return int(cfg.train.val_every_iters)


def mllog_epoch(cfg: Any, epoch: int) -> int:
    """MLLOG's ``epoch_num`` of 1-based cycle `epoch`: the samples trained at its end, as the
    reference counts them (cycle × global batch × val_every_iters)."""
    return int(epoch) * int(cfg.train.global_batch_size) * int(cfg.train.val_every_iters)


def check_optimizer(o: Any) -> None:
    """Choices the schema cannot restrict (ValueError naming the key)."""
    if o.name != "Adam":
        raise ValueError(f"opt.name={o.name}: the OpenFold benchmark trains with Adam")
    if not 0 < float(o.lr) < math.inf:  # 0 trains nothing; NaN passed a `< 0` test
        raise ValueError(f"opt.lr={o.lr} must be a finite number > 0")
    for key in ("warmup_lr_init", "weight_decay", "clip_norm"):
        if not 0 <= float(getattr(o, key)) < math.inf:
            raise ValueError(f"opt.{key}={getattr(o, key)} must be a finite number >= 0")
    if int(o.warmup_steps) < 0:
        raise ValueError(f"opt.warmup_steps={o.warmup_steps} must be >= 0")
    for key in ("beta_1", "beta_2", "swa_decay"):
        if not 0 <= float(getattr(o, key)) < 1:
            raise ValueError(f"opt.{key}={getattr(o, key)} must be in [0, 1)")
    if float(o.eps) <= 0:
        raise ValueError(f"opt.eps={o.eps} must be > 0")


def check_model(m: ModelSpec) -> None:
    """Sizes that must be positive (a zero width or block count is a typo, not a model)."""
    for key, value in vars(m).items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if key.endswith("dropout"):
            if not 0 <= float(value) < 1:
                raise ValueError(f"model.{key}={value} must be in [0, 1)")
        elif key == "max_templates" and int(value) < 0:  # 0: no templates
            raise ValueError(f"model.{key}={value} must be >= 0")
        elif key != "max_templates" and float(value) <= 0 and not key.endswith("_min_bin"):
            raise ValueError(f"model.{key}={value} must be > 0")


def check_config(cfg: Any) -> None:
    """Values the schema cannot restrict (ValueError naming the key)."""
    check_model(ModelSpec(**dict(cfg.model)))
    check_optimizer(cfg.opt)
    d, t = cfg.data, cfg.train
    if int(d.pretrain_epochs) < 0:
        raise ValueError(f"data.pretrain_epochs={d.pretrain_epochs} must be >= 0")
    for key in ("max_eval_length", "min_length", "msa_depth"):
        if int(getattr(d, key)) < 1:
            raise ValueError(f"data.{key}={getattr(d, key)} must be >= 1")
    if int(d.max_length) < int(d.min_length):
        raise ValueError(f"data.max_length={d.max_length} must be >= data.min_length="
                         f"{d.min_length}")
    if d.sequences not in SYNTHETIC_SEQUENCES:
        raise ValueError(f"data.sequences={d.sequences} is not one of "
                         f"{', '.join(SYNTHETIC_SEQUENCES)}")
    if d.dataloader_type not in DATALOADER_TYPES:
        raise ValueError(f"data.dataloader_type={d.dataloader_type} is not one of "
                         f"{', '.join(DATALOADER_TYPES)}")
    if int(t.val_every_iters) < 1:
        raise ValueError(f"train.val_every_iters={t.val_every_iters} must be >= 1")


def check_run(cfg: Any) -> None:
    """Closed-division rules of closed_openfold.yaml that depend on the user's choices."""
    if cfg.system.submission_division != "closed":
        return
    m = cfg.model
    fixed = {"train.val_every_iters": (int(cfg.train.val_every_iters), VAL_EVERY_ITERS),
             "model.crop_size": (int(m.crop_size), TRAIN_SEQUENCE_CROP_SIZE),
             "model.max_msa_clusters": (int(m.max_msa_clusters), MAX_MSA_CLUSTERS),
             "model.max_extra_msa": (int(m.max_extra_msa), MAX_EXTRA_MSA),
             "model.max_templates": (int(m.max_templates), MAX_TEMPLATES),
             "model.num_recycling_iters": (int(m.num_recycling_iters), NUM_RECYCLING_ITERS)}
    for key, (value, required) in fixed.items():
        if value != required:
            raise ValueError(f"{key}={value}: closed OpenFold requires {required}; run in "
                             "division open")
    if not cfg.train.init_checkpoint:
        raise ValueError("closed OpenFold starts from the reference checkpoint "
                         f"({INIT_CHECKPOINT_NAME}): set train.init_checkpoint=FILE, or run "
                         "in division open")


def file_sha256(path: str | Path, key: str = "train.init_checkpoint") -> str:
    """SHA-256 of a file, read in 16 MiB blocks (the 1.1 GiB checkpoint in ~1 s); an
    unreadable file is one line naming `key`."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(16 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        raise SciperfError(f"{key}={path}: no such file (a mini's starting checkpoint is made "
                           "by `sciperf prepare workload=openfold experiment=mini`; a closed "
                           f"run's is the reference's {INIT_CHECKPOINT_NAME})") from None
    except OSError as exc:
        raise SciperfError(f"{key}={path}: cannot be read ({exc.strerror or exc})") from None
    return digest.hexdigest()


def mllog_hyperparameters(cfg: Any, train_samples: int, eval_samples: int) -> dict[str, Any]:
    """closed_openfold.yaml's keys, in the reference's order (`seed` is the driver's)."""
    o, t, d, m = cfg.opt, cfg.train, cfg.data, cfg.model
    w = LOSS_WEIGHTS
    init = str(t.init_checkpoint)
    return {
        "global_batch_size": int(t.global_batch_size),
        "target_avg_lddt_ca_value": float(t.target),
        "train_max_pdb_release_date": TRAIN_MAX_PDB_RELEASE_DATE,
        "val_min_cameo_submission_date": VAL_MIN_CAMEO_SUBMISSION_DATE,
        "val_max_cameo_submission_date": VAL_MAX_CAMEO_SUBMISSION_DATE,
        "val_max_sequence_length": int(d.max_eval_length),
        "val_every_iters": int(t.val_every_iters),
        "train_sequence_crop_size": int(m.crop_size),
        "num_recycling_iters": int(m.num_recycling_iters),
        "max_msa_clusters": int(m.max_msa_clusters),
        "max_extra_msa": int(m.max_extra_msa),
        "templates_enabled": int(m.max_templates) > 0,
        "max_templates": int(m.max_templates),
        "fape_loss_weight": w["fape"],
        "fape_loss_backbone_weight": w["fape_backbone"],
        "fape_loss_sidechain_weight": w["fape_sidechain"],
        "supervised_chi_loss_weight": w["supervised_chi"],
        "distogram_loss_weight": w["distogram"],
        "masked_msa_loss_weight": w["masked_msa"],
        "plddt_loss_weight": w["plddt"],
        "opt_name": str(o.name),
        "opt_base_learning_rate": float(o.lr),
        "opt_adam_beta_1": float(o.beta_1),
        "opt_adam_beta_2": float(o.beta_2),
        "opt_adam_epsilon": float(o.eps),
        "opt_weight_decay": float(o.weight_decay),
        "opt_amsgrad": AMSGRAD,
        "opt_gradient_clipping": float(o.clip_norm) > 0,
        "opt_gradient_clip_norm": float(o.clip_norm),
        "opt_learning_rate_warmup_init": float(o.warmup_lr_init),
        "opt_learning_rate_warmup_steps": int(o.warmup_steps),
        "model_parameters_count": ModelSpec(**dict(m)).parameter_count(),
        "gradient_accumulation_steps": 1,
        "init_checkpoint_sha256sum": file_sha256(init) if init else "none",
        "swa_enabled": True,
        "swa_decay_rate": float(o.swa_decay),
        "train_samples": int(train_samples),
        "eval_samples": int(eval_samples),
        "initial_training_dataloader_type": str(d.dataloader_type),
    }


def sqrt_crop_scale(seq_length: int, crop: int) -> float:
    """The per-sample loss factor √min(seq_length, crop) (the reference's loss)."""
    return math.sqrt(min(int(seq_length), int(crop)))
