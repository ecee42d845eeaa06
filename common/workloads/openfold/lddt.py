"""lDDT-Cα, the benchmark's quality metric (and, per residue, the pLDDT training target).

The reference scores a prediction by the local distance difference test on CA atoms only,
without superposition and without stereochemistry checks (REF ``loss.py`` ``lddt`` /
``lddt_ca``, the same as DeepMind's ``alphafold/model/lddt.py``; spec §6):

- a pair (i, j) is scored when i ≠ j, both residues have a resolved true CA, and the TRUE
  distance is < ``cutoff`` (15 Å) — a pair close only in the prediction never counts;
- its score is the fraction of the thresholds 0.5, 1, 2, 4 Å that |d_true − d_pred| is
  strictly below;
- the global score is (eps + Σ scores)/(eps + number of scored ordered pairs) over the whole
  chain (each unordered pair counted twice in both sums) — NOT the mean of per-residue
  scores; the per-residue score normalises over j for each i.

Distances are √(ε + ‖x_i − x_j‖²). The reference uses ONE ``eps`` for that ε and for the
ratio: the function default is 1e-10, and both of its callers in the benchmark pass 1e-8
(validation's ``compute_validation_metrics`` and the pLDDT loss config). ``sqrt_eps`` may
separate the two; ``None`` keeps the reference's single eps. A residue with nothing to score
gets eps/eps = 1 in the per-residue variant, as in the reference.
"""

from __future__ import annotations

import numpy as np

from sciperf.workloads.openfold.residue_constants import ATOM_ORDER

LDDT_CUTOFF = 15.0  # Å, the inclusion radius on the true structure
LDDT_THRESHOLDS = (0.5, 1.0, 2.0, 4.0)  # Å
VALIDATION_EPS = 1e-8  # what the reference's validation and pLDDT loss pass as eps


def lddt_ca(pred_ca: np.ndarray, true_ca: np.ndarray, mask: np.ndarray,
            cutoff: float = LDDT_CUTOFF, eps: float = 1e-10, per_residue: bool = False,
            sqrt_eps: float | None = None) -> np.ndarray:
    """lDDT of predicted vs true CA coordinates ``[..., N, 3]`` with the true-CA mask
    ``[..., N]``: ``[...]`` global scores, or ``[..., N]`` with ``per_residue``.

    Computed in the inputs' float precision (float32 stays float32, as the reference's
    metric is), at least float32.
    """
    pred_ca, true_ca = np.asarray(pred_ca), np.asarray(true_ca)
    dtype = np.result_type(pred_ca, true_ca, np.float32)
    pred_ca, true_ca = pred_ca.astype(dtype, copy=False), true_ca.astype(dtype, copy=False)
    mask = np.asarray(mask).astype(dtype, copy=False)
    if pred_ca.shape != true_ca.shape or pred_ca.shape[-1:] != (3,) \
            or mask.shape != pred_ca.shape[:-1]:
        raise ValueError(f"lddt_ca wants pred/true [..., N, 3] and mask [..., N]; got "
                         f"{pred_ca.shape}, {true_ca.shape}, {mask.shape}")
    inner = eps if sqrt_eps is None else sqrt_eps
    d_true = _distances(true_ca, inner)
    d_pred = _distances(pred_ca, inner)
    n = mask.shape[-1]
    scored = ((d_true < cutoff) * mask[..., :, None] * mask[..., None, :]
              * (1.0 - np.eye(n, dtype=dtype))).astype(dtype)
    error = np.abs(d_true - d_pred)
    score = sum((error < t).astype(dtype) for t in LDDT_THRESHOLDS) * dtype.type(0.25)
    axes = (-1,) if per_residue else (-2, -1)
    norm = 1.0 / (eps + np.sum(scored, axis=axes))
    return (norm * (eps + np.sum(scored * score, axis=axes))).astype(dtype, copy=False)


def _distances(points: np.ndarray, eps: float) -> np.ndarray:
    """[..., N, N] √(eps + squared distance); eps keeps the gradient of the torch twin finite
    on the diagonal and is part of the reference's numbers."""
    diff = points[..., :, None, :] - points[..., None, :, :]
    return np.sqrt(eps + np.sum(diff * diff, axis=-1))


def ca_atoms(atom37_positions: np.ndarray, atom37_mask: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """CA coordinates ``[..., N, 3]`` and mask ``[..., N]`` from atom37 ``[..., N, 37, 3]``
    positions and ``[..., N, 37]`` mask (the reference's ``lddt_ca`` selects atom type 1)."""
    ca = ATOM_ORDER["CA"]
    return np.asarray(atom37_positions)[..., ca, :], np.asarray(atom37_mask)[..., ca]
