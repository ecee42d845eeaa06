"""OpenFold's counted layers: parameters add up to the reference's count, one Evoformer
block equals the supplement's algorithms counted by hand, and PyTorch's FlopCounterMode
measures the same multiply-adds module by module — for one forward pass, for a training
step (recycling without gradients, backward, checkpoint recomputation) and for an
evaluation sample's four passes.

The model runs on a batch of the reference's layout whose values do not matter (zeros,
full masks): matrix-product sizes depend on shapes only. Sizes are small — the mini at
its own training sample, the full model once at a 9-residue crop.
"""

from __future__ import annotations

import math

import pytest

from sciperf.workloads.openfold import flops
from sciperf.workloads.openfold.sizes import (
    FULL_PARAMETER_COUNT,
    MINI_PARAMETER_COUNT,
    ModelSpec,
    mini_spec,
)

FULL = ModelSpec()
MINI = mini_spec()
# every size distinct (and S = n_clust + n_templ unlike n_extra), so a row count taken
# from the wrong size shows
TINY_CROP = flops.SampleSizes(n_res=9, n_clust=3, n_extra=6, n_templ=2)
FULL_FORWARD_FLOPS = 11_803_820_097_536  # one pass at crop 256, 128 MSA rows, 1024 extra


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(threads)


def counted_by_torch(found):
    """`found` without the products torch cannot see (computed by broadcasting)."""
    return [layer for layer in found
            if not flops.untagged(layer.name).endswith(flops.ELEMENTWISE_PRODUCTS)]


@pytest.mark.parametrize(("spec", "count"), [(FULL, FULL_PARAMETER_COUNT),
                                             (MINI, MINI_PARAMETER_COUNT)],
                         ids=["full", "mini"])
def test_parameters_add_up_to_the_spec(spec: ModelSpec, count: int) -> None:
    found = flops.layers(spec)
    assert sum(layer.params for layer in found) == spec.parameter_count() == count
    # each module of the weight table is carried by one layer, whatever runs it 8 times
    carriers = [flops.untagged(layer.name) for layer in found if layer.params]
    modules = {name.rpartition(".")[0] for name in spec.reference_shapes()}
    assert len(carriers) == len(set(carriers)) == len(modules)
    shared = [layer for layer in found if layer.name.startswith("structure_module.ipa.linear_q#")]
    assert [layer.params > 0 for layer in shared] == [True] + [False] * (spec.sm_blocks - 1)
    assert len({layer.macs for layer in shared}) == 1


def test_training_sample_follows_the_spec() -> None:
    assert flops.sample_sizes(FULL) == flops.SampleSizes(256, 124, 1024, 4)
    assert flops.sample_sizes(FULL).msa_rows == 128  # spec §2: 124 + 4 template rows
    assert flops.sample_sizes(MINI) == flops.SampleSizes(32, 16, 64, 1)  # spec §11
    with pytest.raises(ValueError, match="n_templ=0"):
        flops.layers_for(FULL, 256, 124, 1024, 0)


def evoformer_block_macs(spec: ModelSpec, n: int, s: int) -> int:
    """One Evoformer block counted from the AF2 supplement's algorithms (7–15)."""
    c_m, c_z = spec.c_m, spec.c_z
    hc = spec.num_heads_msa * spec.c_hidden_msa_att
    projections = 5 * s * n * c_m * hc  # q, k, v, gate and output
    row = projections + n * n * c_z * spec.num_heads_msa + 2 * s * n * n * hc
    column = projections + 2 * n * s * s * hc
    msa_transition = 2 * s * n * c_m * spec.transition_n * c_m
    c = spec.c_hidden_opm
    opm = 2 * s * n * c_m * c + n * n * c * c * s + n * n * c * c * c_z + n * n * s
    h = spec.c_hidden_tri_mul
    tri_mul = 4 * n * n * c_z * h + n ** 3 * h + n * n * h * c_z + n * n * c_z * c_z
    ht = spec.num_heads_tri * spec.c_hidden_tri_att
    tri_att = n * n * c_z * spec.num_heads_tri + 5 * n * n * c_z * ht + 2 * n ** 3 * ht
    pair_transition = 2 * n * n * c_z * spec.transition_n * c_z
    return row + column + msa_transition + opm + 2 * tri_mul + 2 * tri_att + pair_transition


def test_full_model_counts() -> None:
    """One pass of the benchmark's sample: 11.8 TFLOP, 88 % of it in the Evoformer, whose
    48 blocks each equal the hand count; training and evaluation multiples (flops.passes)."""
    found = flops.layers(FULL)
    forward = sum(2 * layer.macs for layer in found)
    assert forward == FULL_FORWARD_FLOPS
    size = flops.sample_sizes(FULL)
    want = evoformer_block_macs(FULL, size.n_res, size.msa_rows)
    for i in (0, FULL.evoformer_blocks - 1):
        block = f"evoformer_stack.blocks.{i}."
        assert sum(layer.macs for layer in found if layer.name.startswith(block)) == want
    parts = flops.by_part(found)
    assert list(parts) == ["embedders", "templates", "extra MSA", "Evoformer",
                           "structure module", "heads"]
    assert 2 * sum(parts.values()) == forward
    assert 0.87 < parts["Evoformer"] * 2 / forward < 0.89
    training, evaluation = flops.passes(FULL)
    # 1.5 recycled passes + forward + backward + checkpoint recomputation, all but exact
    assert training == pytest.approx(1.5 + 1 + 2 + 1, abs=0.01)
    assert 5.49 < training < 5.5
    assert evaluation == pytest.approx(4, abs=1e-3) and evaluation < 4  # heads run once
    assert (training, evaluation) == flops.FLOPS_PASSES


def shape_batch(torch, size: flops.SampleSizes, passes: int) -> dict:
    """A batch of the reference's layout (B = 1, trailing recycling dim): zeros and full
    masks — matrix-product sizes depend on the shapes only."""
    n, c, e, t = size.n_res, size.n_clust, size.n_extra, size.n_templ
    zeros, ones, long = torch.zeros, torch.ones, torch.long
    feats = {
        "aatype": zeros(1, n, dtype=long), "seq_mask": ones(1, n),
        "target_feat": zeros(1, n, 22), "residue_index": torch.arange(n)[None],
        "msa_feat": zeros(1, c, n, 49), "msa_mask": ones(1, c, n),
        "extra_msa": zeros(1, e, n, dtype=long), "extra_msa_mask": ones(1, e, n),
        "extra_has_deletion": zeros(1, e, n), "extra_deletion_value": zeros(1, e, n),
        "template_aatype": zeros(1, t, n, dtype=long),
        "template_all_atom_positions": zeros(1, t, n, 37, 3),
        "template_all_atom_mask": ones(1, t, n, 37), "template_pseudo_beta": zeros(1, t, n, 3),
        "template_pseudo_beta_mask": ones(1, t, n),
        "template_torsion_angles_sin_cos": zeros(1, t, n, 7, 2),
        "template_alt_torsion_angles_sin_cos": zeros(1, t, n, 7, 2),
        "template_torsion_angles_mask": ones(1, t, n, 7), "template_mask": ones(1, t),
        "residx_atom37_to_atom14": zeros(1, n, 37, dtype=long),
        "atom37_atom_exists": ones(1, n, 37),
    }
    return {k: v.unsqueeze(-1).expand(*v.shape, passes).contiguous() for k, v in feats.items()}


def matmul_outputs(torch):
    """A dispatch mode summing the output elements of every matrix product."""
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    products = {aten.mm, aten.addmm, aten.bmm, aten.baddbmm}

    class Outputs(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket in products:
                Outputs.total += out.numel()
            return out

    return Outputs()


@pytest.mark.parametrize(("spec", "size"), [(MINI, flops.sample_sizes(MINI)),
                                            (FULL, TINY_CROP)], ids=["mini", "full-tiny-crop"])
def test_forward_equals_torch_flop_counter(torch, spec: ModelSpec,
                                           size: flops.SampleSizes) -> None:
    """FlopCounterMode counts matrix products (mm, addmm, bmm: the linears, attention,
    einsums), 2 FLOPs per multiply-add. One pass without gradients must match in total
    and for EVERY module of the network (a module's count includes its children's, so
    each is compared with the sum of the layers named under it), and the products'
    output elements must be the layers' ``outputs``."""
    from torch.utils.flop_counter import FlopCounterMode

    from sciperf_pytorch.workloads.openfold.model import AlphaFold

    found = counted_by_torch(flops.layers_for(spec, size.n_res, size.n_clust, size.n_extra,
                                              size.n_templ))
    net = AlphaFold(spec).eval()
    counter, outputs = FlopCounterMode(display=False), matmul_outputs(torch)
    with torch.no_grad(), counter, outputs:
        net(shape_batch(torch, size, 1), num_recycling=0)
    assert counter.get_total_flops() == sum(2 * layer.macs for layer in found)
    assert outputs.total == sum(layer.outputs for layer in found)
    under: dict[str, int] = {}  # module path → FLOPs of the layers named under it
    for layer in found:
        parts = flops.untagged(layer.name).split(".")
        for k in range(1, len(parts) + 1):
            path = ".".join(parts[:k])
            under[path] = under.get(path, 0) + 2 * layer.macs
    measured = {m.removeprefix("AlphaFold."): sum(counts.values())
                for m, counts in counter.get_flop_counts().items() if m.startswith("AlphaFold.")}
    assert len(measured) > 200
    assert measured == {path: under.get(path, 0) for path in measured}


def early_stop_tail(found, size: flops.SampleSizes) -> int:
    """Multiply-adds a non-reentrant checkpoint does not recompute: it stops after the
    last tensor saved for backward, so each block's final linear (its output is only
    added to the residual) is skipped — for the template block, the last template's."""
    tail = 0
    for layer in found:
        if layer.name.startswith(flops.CHECKPOINTED) and \
                layer.name.endswith(".pair_transition.linear_2"):
            tail += layer.macs // size.n_templ if layer.name.startswith("template") \
                else layer.macs
    return tail


def training_step_flops(torch, net, size: flops.SampleSizes, early_stop: bool) -> int:
    """FLOPs of a step with one recycled pass, its backward reaching every parameter."""
    from torch.utils.checkpoint import set_checkpoint_early_stop
    from torch.utils.flop_counter import FlopCounterMode

    net.zero_grad(set_to_none=True)
    counter = FlopCounterMode(display=False)
    with counter, set_checkpoint_early_stop(early_stop):
        out = net(shape_batch(torch, size, 2), num_recycling=1)
        tensors = [v for k, v in out.items() if k != "sm" and not k.startswith("sm_")]
        loss = sum(v.sum() for v in [*tensors, *out["sm"].values()] if v.requires_grad)
        loss.backward()
    assert all(p.grad is not None for p in net.parameters())  # every layer's backward ran
    return counter.get_total_flops()


def test_training_step_and_evaluation_equal_torch_flop_counter(torch) -> None:
    """The multiples of flops.passes, measured: a training step with one recycled pass
    (no gradients, no heads), the last pass's forward, its backward and the recomputed
    checkpointed blocks — whole blocks, as the reference's reentrant checkpoint; ours
    (non-reentrant) skips exactly each block's last linear — and an evaluation sample's
    four passes without gradients."""
    from torch.utils.flop_counter import FlopCounterMode

    from sciperf_pytorch.workloads.openfold.model import AlphaFold

    size = flops.SampleSizes(n_res=10, n_clust=3, n_extra=5, n_templ=2)
    found = counted_by_torch(flops.layers_for(MINI, size.n_res, size.n_clust, size.n_extra,
                                              size.n_templ))
    net = AlphaFold(MINI, checkpointing=True).train()
    step = 2 * flops.step_macs(found, 1, training=True)
    assert training_step_flops(torch, net, size, early_stop=False) == step
    tail = early_stop_tail(found, size)
    assert tail > 0
    assert training_step_flops(torch, net, size, early_stop=True) == step - 2 * tail

    net.eval()
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        net(shape_batch(torch, size, 4), num_recycling=3)
    assert counter.get_total_flops() == 2 * flops.step_macs(found, 3, training=False)


def test_outputs_kept_by_a_checkpointed_step() -> None:
    """Summing every layer's output is no lower bound of a step's memory when each block
    is recomputed in backward (155 GiB fp32 at crop 256, where the reference trains on
    40 GB GPUs): flops.layers counts the saved block inputs, the one block being
    recomputed and what is still saved around it; MACs and parameters are unchanged."""
    size = flops.sample_sizes(FULL)
    every = flops.layers_for(FULL, size.n_res, size.n_clust, size.n_extra, size.n_templ)
    kept = flops.layers(FULL)
    inputs = [layer for layer in kept if layer.kind == "checkpoint"]
    assert [(layer.macs, layer.params) for layer in kept if layer.kind != "checkpoint"] == \
        [(layer.macs, layer.params) for layer in every]
    assert len(inputs) == FULL.template_blocks + FULL.extra_blocks + FULL.evoformer_blocks
    n = size.n_res
    assert inputs[-1].name == "evoformer_stack.blocks.47.input"
    assert inputs[-1].outputs == size.msa_rows * n * FULL.c_m + n * n * FULL.c_z  # m and z
    last = "evoformer_stack.blocks.47."
    for layer, was in zip((x for x in kept if x.kind != "checkpoint"), every, strict=True):
        in_blocks = layer.name.startswith(flops.CHECKPOINTED)
        later = layer.name.startswith(("evoformer_stack.linear", "structure_module.",
                                       "auxiliary_heads."))
        assert layer.outputs == (0 if (in_blocks and not layer.name.startswith(last))
                                 or later else was.outputs), layer.name
    gib = 4 / 2**30
    assert sum(layer.outputs for layer in every) * gib > 150
    assert 6 < sum(layer.outputs for layer in kept) * gib < 7
    assert math.isclose(sum(layer.outputs for layer in inputs) * gib, 3.5, rel_tol=0.01)
