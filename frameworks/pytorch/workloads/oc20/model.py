"""DimeNet++ exactly as the MLPerf-HPC OC20 reference runs it (OCP DimeNet++ over the
PyG 1.7.2 blocks), built from ``sciperf.workloads.oc20.spec.ModelSpec``.

What the reference fixes and this module reproduces (docs: shared/spec/oc20.md):

* §1.2 layers and initialisation: an embedding block (order ``cat[x_i, x_j,
  act(lin_rbf(rbf))]``), ``num_blocks`` interaction-PP blocks and ``num_blocks + 1``
  output-PP blocks (``lin_up`` with a bias when ``spec.output_up_bias``, no activation after
  it), swish; glorot-orthogonal (scale 2) weights, zero biases, a zero final output layer
  (so a fresh model predicts exactly 0), embedding U(−√3, √3), torch-default init for the
  embedding block's linears and the output ``lin_up`` bias. Energy = per-graph sum of the
  per-atom outputs.
* §1.3 geometry: ``vec_ji = pos[j] − pos[i] + S·cell`` with ``edge_index = (j, i)``;
  triplets k→j→i dropping only the back-tracking one (k == i in the same image); the angle
  atan2(|a×b|, a·b) of a = vec_ji, b = vec_kj is **detached**, so forces get no gradient
  through angles (the reference's, and MLPerf's, force definition). The reference's drop
  of zero-length edges is not repeated: the graphs never contain one (``graph.py``).
* §1.4 basis: the envelope is **not** masked at d ≥ cutoff (PyG 1.7.2); rbf_n =
  u(x)·sin(f_n·x) with trainable f_n (init nπ); sbf l-major, u(x_kj)·N_ln·j_l(z_ln·x_kj)·
  Y_l^0(θ), with z_ln, N_ln taken from ``sciperf.workloads.oc20.basis`` (the numpy
  reference). The reference evaluates sympy closed forms of j_l in float32, which cancel
  catastrophically at small arguments; here j_l is a power series below
  :data:`SERIES_BELOW` and the upward recurrence above it (accurate to ~1e-13 in float64
  everywhere — the same functions, without the cancellation).

Every weight layer is a direct child named by the spec's canonical layer name with "/"
written "__" (``int_blocks__0__dense_rbf1``), so ``sciperf_pytorch.weights`` maps them by
type alone; the trainable frequencies live in the child ``rbf_layer`` (kind ``basis``,
declared in :attr:`DimeNetPP.WEIGHT_KINDS`). Geometry and basis always run in the
positions' dtype (autocast off); dense layers follow a caller's ``torch.autocast``;
scatter sums accumulate in the basis dtype.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from sciperf.workloads.oc20 import basis
from sciperf.workloads.oc20.spec import ModelSpec
from sciperf_pytorch.weights import export_weights, import_weights

__all__ = ["BesselBasis", "DimeNetPP", "Geometry", "SphericalBasis", "energy_and_forces",
           "export_weights", "geometry", "glorot_orthogonal", "import_weights",
           "spherical_jn", "triplets"]

SERIES_BELOW = 4.0  # j_l argument below which the power series replaces the recurrence
SERIES_TERMS = 16  # enough for |x| < 4 and l ≤ 6 to float64 round-off (checked vs mpmath)
GLOROT_SCALE = 2.0  # PyG's glorot_orthogonal(·, scale=2.0)
Batch = dict[str, torch.Tensor]


def gather(src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows `index` of `src` (``src[index]``) by index_select: on CPU its forward is ~1.4×
    and its backward (index_add_, not the accumulating index_put_ of advanced indexing)
    ~1.3× faster on the [T, C] per-triplet gathers, which the double backward of the
    force loss runs several times per block. Same values, same gradients."""
    return src.index_select(0, index)


# ---------------------------------------------------------------------------- graph


def triplets(edge_index: torch.Tensor, cell_offsets: torch.Tensor,
             num_atoms: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(idx_kj, idx_ji) of every triplet k→j→i, vectorised, in the order of the numpy
    reference ``sciperf.workloads.oc20.graph.triplets`` (edges j→i in id order, each
    followed by the in-edges k→j of j in id order). Only the back-tracking triplet (k == i
    with offsets summing to zero) is dropped: with PBC another image of i is a real k."""
    src, dst = edge_index[0], edge_index[1]
    order = torch.argsort(dst, stable=True)  # in-edges of each atom, contiguous
    counts = torch.bincount(dst, minlength=num_atoms)
    starts = torch.cumsum(counts, 0) - counts
    per_edge = counts[src]  # how many k→j edges feed edge j→i
    total = int(per_edge.sum())
    idx_ji = torch.repeat_interleave(torch.arange(src.numel(), device=src.device), per_edge,
                                     output_size=total)
    first = torch.cumsum(per_edge, 0) - per_edge  # position of each edge's first triplet
    within = torch.arange(total, device=src.device) - first[idx_ji]
    idx_kj = order[starts[src][idx_ji] + within]
    back = (src[idx_kj] == dst[idx_ji]) & (cell_offsets[idx_kj] + cell_offsets[idx_ji]
                                           == 0).all(dim=1)
    keep = ~back
    return idx_kj[keep], idx_ji[keep]


@dataclass(frozen=True)
class Geometry:
    """What the network sees of a batch's geometry: edge lengths (differentiable in pos),
    triplet angles (detached, as the reference) and the triplets' edge ids."""

    dist: torch.Tensor  # [E]
    angle: torch.Tensor  # [T]
    idx_kj: torch.Tensor  # [T]
    idx_ji: torch.Tensor  # [T]


def edge_vectors(batch: Batch) -> torch.Tensor:
    """[E, 3] vec_ji = pos[j] − pos[i] + S·cell of the edge's graph (get_pbc_distances).

    The offset is an elementwise product-sum, not a bmm, so autocast never touches it."""
    pos, (j, i) = batch["pos"], batch["edge_index"]
    cell = batch["cell"].to(pos.dtype).index_select(0, batch["batch"].index_select(0, i))
    offsets = (batch["cell_offsets"].to(pos.dtype)[:, :, None] * cell).sum(dim=1)
    return gather(pos, j) - gather(pos, i) + offsets


def triplet_angle(vec_ji: torch.Tensor, vec_kj: torch.Tensor) -> torch.Tensor:
    """atan2(|a×b|, a·b): the angle between i→j and j→k (π − ∠ijk), as the reference."""
    cross = torch.linalg.cross(vec_ji, vec_kj, dim=-1).norm(dim=-1)
    return torch.atan2(cross, (vec_ji * vec_kj).sum(dim=-1))


def geometry(batch: Batch) -> Geometry:
    """Edge lengths, detached triplet angles and triplet ids of a batch (§1.3)."""
    vec = edge_vectors(batch)
    idx_kj, idx_ji = triplets(batch["edge_index"], batch["cell_offsets"],
                              batch["pos"].shape[0])
    flat = vec.detach()  # no force contribution through the angles (reference)
    angle = triplet_angle(gather(flat, idx_ji), gather(flat, idx_kj))
    return Geometry(vec.norm(dim=-1), angle, idx_kj, idx_ji)


# ---------------------------------------------------------------------------- basis


def envelope(x: torch.Tensor, exponent: int) -> torch.Tensor:
    """u(x) = 1/x + a·x^(p−1) + b·x^p + c·x^(p+1), unmasked (PyG 1.7.2)."""
    p, a, b, c = basis.envelope_coefficients(exponent)
    x_p0 = x.pow(p - 1)
    x_p1 = x_p0 * x
    return 1.0 / x + a * x_p0 + b * x_p1 + c * x_p1 * x


@functools.lru_cache(maxsize=4)
def _series_table(orders: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(l [L,1], 1/(2l+1)!! [L,1], c_k = 1/(k(2l+2k+1)) [K,L,1]) of the j_l power series."""
    ell = np.arange(orders, dtype=np.float64)[:, None]
    dfact = np.array([[math.prod(range(1, 2 * o + 2, 2))] for o in range(orders)], np.float64)
    k = np.arange(1, SERIES_TERMS + 1, dtype=np.float64)[:, None, None]
    return ell, 1.0 / dfact, 1.0 / (k * (2 * ell[None] + 2 * k + 1))


def _jl_series(x: torch.Tensor) -> torch.Tensor:
    """j_l(x) = x^l/(2l+1)!!·Σ_k (−x²/2)^k/(k!·(2l+3)…(2l+2k+1)), row l of [..., L, C]
    (Horner form); free of cancellation for small x."""
    ell, inv_dfact, coef = (torch.as_tensor(a, dtype=x.dtype, device=x.device)
                            for a in _series_table(x.shape[-2]))
    half_sq = -0.5 * x * x
    acc = torch.ones_like(x)
    for k in range(SERIES_TERMS - 1, -1, -1):
        acc = 1.0 + half_sq * coef[k] * acc
    return x.pow(ell) * inv_dfact * acc


def _jl_upward(x: torch.Tensor) -> torch.Tensor:
    """j_l(x) by j_{l+1} = (2l+1)/x·j_l − j_{l−1} from j_0 = sin x/x, row l of [..., L, C];
    stable once x is not small against l."""
    inv = 1.0 / x
    sin, cos = torch.sin(x), torch.cos(x)
    prev = sin * inv
    rows = [prev[..., :1, :]]
    cur = (prev - cos) * inv
    for order in range(1, x.shape[-2]):
        rows.append(cur[..., order:order + 1, :])
        prev, cur = cur, (2 * order + 1) * inv * cur - prev
    return torch.cat(rows, dim=-2)


def spherical_jn(x: torch.Tensor) -> torch.Tensor:
    """Spherical Bessel j_l(x) for x > 0 of shape [..., L, C]: row l gets order l.

    Series below :data:`SERIES_BELOW`, upward recurrence above; each branch sees a safe
    argument in the other's region, so neither produces inf/NaN in the gradients."""
    small = x < SERIES_BELOW
    series = _jl_series(torch.where(small, x, torch.ones_like(x)))
    upward = _jl_upward(torch.where(small, torch.full_like(x, SERIES_BELOW), x))
    return torch.where(small, series, upward)


def zonal_harmonics(angle: torch.Tensor, orders: int) -> torch.Tensor:
    """[T, L] Y_l^0(θ) = √((2l+1)/4π)·P_l(cos θ), Legendre recurrence
    (l+1)·P_{l+1} = (2l+1)·c·P_l − l·P_{l−1}."""
    cos = torch.cos(angle)
    legendre = [torch.ones_like(cos), cos]
    for order in range(1, orders - 1):
        legendre.append(((2 * order + 1) * cos * legendre[order]
                         - order * legendre[order - 1]) / (order + 1))
    norms = [math.sqrt((2 * o + 1) / (4 * math.pi)) for o in range(orders)]
    return torch.stack([n * p for n, p in zip(norms, legendre[:orders], strict=True)], dim=-1)


class BesselBasis(nn.Module):
    """Radial basis u(x)·sin(f_n·x), x = d/cutoff, with trainable frequencies f_n = nπ at
    init (PyG BesselBasisLayer; canonical entry ``rbf_layer/frequencies``)."""

    def __init__(self, num_radial: int, cutoff: float, exponent: int):
        super().__init__()
        self.cutoff, self.exponent = float(cutoff), int(exponent)
        self.frequencies = nn.Parameter(torch.empty(num_radial))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """f_n = nπ."""
        self.frequencies.copy_(torch.from_numpy(basis.initial_frequencies(
            self.frequencies.numel())))

    def forward(self, dist: torch.Tensor) -> torch.Tensor:
        """[E] lengths → [E, R]."""
        x = (dist / self.cutoff)[:, None]
        return envelope(x, self.exponent) * torch.sin(self.frequencies.to(x.dtype) * x)


class SphericalBasis(nn.Module):
    """Spherical basis of triplets, l-major [T, L·R] (PyG SphericalBasisLayer).

    The radial part depends on the k→j edge only, so it is evaluated per edge and
    gathered; roots and normalisers are constants from the numpy reference."""

    def __init__(self, num_spherical: int, num_radial: int, cutoff: float, exponent: int):
        super().__init__()
        self.cutoff, self.exponent = float(cutoff), int(exponent)
        self.num_spherical, self.num_radial = num_spherical, num_radial
        roots = basis.bessel_roots(num_spherical, num_radial)
        norms = basis.bessel_normalisers(num_spherical, num_radial)
        self.register_buffer("roots", torch.from_numpy(roots.copy()), persistent=False)
        self.register_buffer("norms", torch.from_numpy(norms.copy()), persistent=False)

    def radial(self, dist: torch.Tensor) -> torch.Tensor:
        """[E] → [E, L, R] u(x)·N_ln·j_l(z_ln·x)."""
        x = dist / self.cutoff
        roots, norms = self.roots.to(x.dtype), self.norms.to(x.dtype)
        jl = spherical_jn(roots * x[:, None, None])
        return envelope(x, self.exponent)[:, None, None] * norms * jl

    def forward(self, dist: torch.Tensor, angle: torch.Tensor,
                idx_kj: torch.Tensor) -> torch.Tensor:
        """Edge lengths [E], angles [T], k→j edge of each triplet [T] → [T, L·R]."""
        cbf = zonal_harmonics(angle.to(dist.dtype), self.num_spherical)
        out = gather(self.radial(dist), idx_kj) * cbf[:, :, None]
        return out.reshape(-1, self.num_spherical * self.num_radial)


# ---------------------------------------------------------------------------- network


@torch.no_grad()
def glorot_orthogonal(weight: torch.Tensor, scale: float = GLOROT_SCALE) -> None:
    """Orthogonal init rescaled so that the *sampled* variance is scale/(fan_in+fan_out)
    (PyG inits.glorot_orthogonal, unbiased variance as torch.var)."""
    nn.init.orthogonal_(weight)
    weight.mul_(math.sqrt(scale / ((weight.shape[-2] + weight.shape[-1]) * weight.var())))


def scatter_sum(src: torch.Tensor, index: torch.Tensor, size: int,
                dtype: torch.dtype) -> torch.Tensor:
    """Σ of rows of `src` into `size` rows by `index`, accumulated in `dtype`."""
    out = torch.zeros(size, *src.shape[1:], dtype=dtype, device=src.device)
    return out.index_add_(0, index, src.to(dtype))


def _is_default_init(layer: str) -> bool:
    """The embedding block's linears keep torch's default init (reference)."""
    return layer.startswith("emb_block/")


class DimeNetPP(nn.Module):
    """DimeNet++ energy model; ``forward(batch)`` → per-graph energy [B] (§1.2)."""

    WEIGHT_KINDS = ((BesselBasis, "basis"),)  # sciperf_pytorch.weights.layer_kind

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        shapes = spec.weight_shapes()
        self.dense_layers: list[str] = []  # canonical names of the nn.Linear children
        for name, shape in shapes.items():
            layer, _, param = name.rpartition("/")
            if param == "frequencies":
                self.add_module(_child(layer), BesselBasis(
                    spec.num_radial, spec.cutoff, spec.envelope_exponent))
            elif param == "embeddings":
                self.add_module(_child(layer), nn.Embedding(*shape))
            elif param == "kernel":
                self.add_module(_child(layer), nn.Linear(
                    *shape, bias=f"{layer}/bias" in shapes))
                self.dense_layers.append(layer)
        self.sbf_layer = SphericalBasis(spec.num_spherical, spec.num_radial, spec.cutoff,
                                        spec.envelope_exponent)
        self.reset_parameters()

    def dense(self, layer: str) -> nn.Linear:
        """The nn.Linear child of canonical layer name `layer`."""
        return getattr(self, _child(layer))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """§1.2: embedding U(±√3); embedding-block linears torch default; dense_final 0;
        every other weight glorot-orthogonal(2) with zero bias, except the output
        up-projection's bias (torch default)."""
        self.rbf_layer.reset_parameters()
        nn.init.uniform_(self.emb_block.weight, -math.sqrt(3.0), math.sqrt(3.0))
        for layer in self.dense_layers:
            lin = self.dense(layer)
            lin.reset_parameters()  # torch default: kaiming_uniform(√5), bias U(±1/√fan_in)
            if _is_default_init(layer):
                continue
            if layer.endswith("/dense_final"):
                nn.init.zeros_(lin.weight)
                continue
            glorot_orthogonal(lin.weight)
            keep_bias = layer.startswith("output_blocks/") and layer.endswith("/up_projection")
            if lin.bias is not None and not keep_bias:
                nn.init.zeros_(lin.bias)

    def forward(self, batch: Batch) -> torch.Tensor:
        """Batch dict (module docstring of the data loader) → energy [B]."""
        with torch.autocast(batch["pos"].device.type, enabled=False):
            geo = geometry(batch)
        return self.energy(batch, geo)

    def energy(self, batch: Batch, geo: Geometry) -> torch.Tensor:
        """Energy [B] from precomputed geometry (the seam tests use to freeze angles)."""
        with torch.autocast(batch["pos"].device.type, enabled=False):
            rbf = self.rbf_layer(geo.dist)
            sbf = self.sbf_layer(geo.dist, geo.angle, geo.idx_kj)
        j, i = batch["edge_index"]
        atoms = batch["pos"].shape[0]
        m = self._embedding(batch["atomic_numbers"], rbf, i, j)
        per_atom = self._output(0, m, rbf, i, atoms)
        for b in range(self.spec.num_blocks):
            m = self._interaction(b, m, rbf, sbf, geo.idx_kj, geo.idx_ji)
            per_atom = per_atom + self._output(b + 1, m, rbf, i, atoms)
        energy = scatter_sum(per_atom, batch["batch"], batch["cell"].shape[0], rbf.dtype)
        return energy.squeeze(-1) if energy.shape[-1] == 1 else energy

    def _embedding(self, z: torch.Tensor, rbf: torch.Tensor, i: torch.Tensor,
                   j: torch.Tensor) -> torch.Tensor:
        """m_ji = act(W·cat[x_i, x_j, act(W_rbf·rbf)]), x = emb(Z): target first."""
        x = self.emb_block(z)
        r = F.silu(self.dense("emb_block/dense_rbf")(rbf))
        cat = torch.cat([gather(x, i), gather(x, j), r.to(x.dtype)], dim=-1)
        return F.silu(self.dense("emb_block/dense")(cat))

    def _residual(self, prefix: str, h: torch.Tensor) -> torch.Tensor:
        """h + act(W2·act(W1·h))."""
        inner = F.silu(self.dense(f"{prefix}/dense_1")(h))
        return h + F.silu(self.dense(f"{prefix}/dense_2")(inner))

    def _interaction(self, b: int, m: torch.Tensor, rbf: torch.Tensor, sbf: torch.Tensor,
                     idx_kj: torch.Tensor, idx_ji: torch.Tensor) -> torch.Tensor:
        """Interaction-PP block: directional messages through the k→j→i triplets."""
        name, spec = f"int_blocks/{b}", self.spec
        x_ji = F.silu(self.dense(f"{name}/dense_ji")(m))
        x_kj = F.silu(self.dense(f"{name}/dense_kj")(m))
        x_kj = x_kj * self.dense(f"{name}/dense_rbf2")(self.dense(f"{name}/dense_rbf1")(rbf))
        x_kj = F.silu(self.dense(f"{name}/down_projection")(x_kj))
        s = self.dense(f"{name}/dense_sbf2")(self.dense(f"{name}/dense_sbf1")(sbf))
        x_kj = scatter_sum(gather(x_kj, idx_kj) * s, idx_ji, m.shape[0], rbf.dtype)
        h = x_ji + F.silu(self.dense(f"{name}/up_projection")(x_kj))
        for k in range(spec.num_before_skip):
            h = self._residual(f"{name}/layers_before_skip/{k}", h)
        h = F.silu(self.dense(f"{name}/final_before_skip")(h)) + m
        for k in range(spec.num_after_skip):
            h = self._residual(f"{name}/layers_after_skip/{k}", h)
        return h

    def _output(self, b: int, m: torch.Tensor, rbf: torch.Tensor, i: torch.Tensor,
                atoms: int) -> torch.Tensor:
        """Output-PP block: per-atom [N, targets] from the messages into each atom."""
        name = f"output_blocks/{b}"
        x = self.dense(f"{name}/dense_rbf")(rbf) * m
        x = self.dense(f"{name}/up_projection")(scatter_sum(x, i, atoms, rbf.dtype))
        for k in range(self.spec.num_output_layers):
            x = F.silu(self.dense(f"{name}/dense_layers/{k}")(x))
        return self.dense(f"{name}/dense_final")(x)


def _child(layer: str) -> str:
    """Canonical layer name → child name (Keras-style "__" for "/")."""
    return layer.replace("/", "__")


def energy_and_forces(model: nn.Module, batch: Batch,
                      create_graph: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(energy [B], forces −∂E/∂pos [N, 3]); gradients are enabled even under
    ``torch.no_grad()`` (evaluation), as the reference's ``conditional_grad``.

    Training passes create_graph=True: the force loss then backpropagates into the weights
    (double backward). Without it both outputs are detached (the graph is freed)."""
    with torch.enable_grad():
        pos = batch["pos"]
        if not pos.requires_grad:
            pos = pos.detach().requires_grad_(True)
        energy = model({**batch, "pos": pos})
        (grad,) = torch.autograd.grad(energy, pos, grad_outputs=torch.ones_like(energy),
                                      create_graph=create_graph)
    if not create_graph:
        return energy.detach(), -grad.detach()
    return energy, -grad
