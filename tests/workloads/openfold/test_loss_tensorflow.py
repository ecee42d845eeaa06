"""The OpenFold training loss in TensorFlow (sciperf_tensorflow.workloads.openfold.loss)
against the PyTorch module, which test_loss_pytorch.py checks against brute force and values
recorded from the reference: every term, the renaming, the clamp blend, the NaN/inf drop
(value and gradient), the √crop scaling, the gradients of the total, lDDT-Cα, and the loss
inside ``tf.function`` in float32 with a dynamic residue count.

The inputs are test_loss_pytorch's :func:`make_case` (two chains with ambiguous residues
predicted in the swapped naming, π-periodic chis predicted half a turn off, an iteration far
beyond the FAPE clamp, missing atoms, padding, a chain break, one sample outside the
resolution window), in float64, so the frameworks must agree to rounding.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf
import torch
from workloads.openfold.test_loss_pytorch import N_RES, PAD, _pair_batch, make_case

from sciperf.workloads.openfold import residue_constants as rc
from sciperf_pytorch.workloads.openfold import loss as ptl
from sciperf_tensorflow.workloads.openfold import loss as tfl

CFG = tfl.LossConfig()
RTOL = 1e-11  # float64, relative: the frameworks differ only in summation order (~1e-15)
GRAD_ATOL = 1e-13  # float64, absolute, on gradients of magnitude up to ~0.3
PREDICTED = ("sm_frames", "sm_sidechain_frames", "sm_positions", "sm_angles",
             "sm_unnormalized_angles", "distogram_logits", "masked_msa_logits", "lddt_logits",
             "experimentally_resolved_logits", "final_atom_positions")


def _tf(tensors: dict[str, torch.Tensor], dtype: tf.DType | None = None) -> dict[str, tf.Tensor]:
    """Torch tensors as TF constants (floating ones in ``dtype`` when given)."""
    out = {}
    for k, v in tensors.items():
        t = tf.constant(v.detach().numpy())
        out[k] = tf.cast(t, dtype) if dtype is not None and t.dtype.is_floating else t
    return out


def _close(got: tf.Tensor, expected: torch.Tensor, rtol: float = RTOL, atol: float = 0.0,
           msg: str = "") -> None:
    np.testing.assert_allclose(np.asarray(got), expected.detach().numpy(), rtol=rtol,
                               atol=atol, err_msg=msg)


@pytest.fixture(scope="module")
def case():
    """(torch outputs, torch batch, TF outputs, TF batch), float64."""
    torch.set_num_threads(1)
    outputs, batch = make_case()
    return outputs, batch, _tf(outputs), _tf(batch)


@pytest.fixture(scope="module")
def terms(case):
    """per_sample_terms of both frameworks on the case."""
    outputs, batch, t_out, t_batch = case
    return ptl.per_sample_terms(outputs, batch, ptl.LossConfig()), tfl.per_sample_terms(
        t_out, t_batch, CFG)


# ---------------------------------------------------------------------------- FAPE


@pytest.mark.parametrize("clamped", ["as_given", "all", "none", "absent"])
def test_backbone_fape_matches_pytorch_with_the_clamp_blend(case, clamped):
    outputs, batch, t_out, t_batch = case
    flags = {"as_given": batch["use_clamped_fape"], "all": torch.ones(2, dtype=torch.float64),
             "none": torch.zeros(2, dtype=torch.float64)}
    if clamped == "absent":
        batch = {k: v for k, v in batch.items() if k != "use_clamped_fape"}
        t_batch = {k: v for k, v in t_batch.items() if k != "use_clamped_fape"}
    else:
        batch = {**batch, "use_clamped_fape": flags[clamped]}
        t_batch = {**t_batch, "use_clamped_fape": tf.constant(flags[clamped].numpy())}
    expected = ptl.backbone_fape(outputs["sm_frames"], batch, ptl.LossConfig())
    _close(tfl.backbone_fape(t_out["sm_frames"], t_batch, CFG), expected)
    # the case makes the blend matter: one iteration lies far beyond the 10 Å clamp
    unclamped = ptl.backbone_fape(outputs["sm_frames"],
                                  {**batch, "use_clamped_fape": torch.zeros(2)}, ptl.LossConfig())
    assert bool((unclamped > ptl.backbone_fape(outputs["sm_frames"], {
        **batch, "use_clamped_fape": torch.ones(2)}, ptl.LossConfig()) + 0.1).all())


def test_renaming_and_sidechain_fape_match_pytorch(case):
    outputs, batch, t_out, t_batch = case
    pred, t_pred = outputs["sm_positions"][:, -1], t_out["sm_positions"][:, -1]
    renamed = ptl.renamed_ground_truth(pred, batch)
    t_renamed = tfl.renamed_ground_truth(t_pred, t_batch)
    for k in renamed:
        _close(t_renamed[k], renamed[k], rtol=0, msg=k)
    assert int(np.sum(t_renamed["alt_naming_is_better"])) == 3  # the alt naming wins thrice
    frames, t_frames = outputs["sm_sidechain_frames"][:, -1], t_out["sm_sidechain_frames"][:, -1]
    expected = ptl.sidechain_fape(frames, pred, batch, renamed, ptl.LossConfig())
    _close(tfl.sidechain_fape(t_frames, t_pred, t_batch, t_renamed, CFG), expected)
    # the renaming matters: the ground truth as named (atoms and frames) gives another value
    as_named = {"alt_naming_is_better": torch.zeros_like(renamed["alt_naming_is_better"]),
                "renamed_atom14_gt_positions": batch["atom14_gt_positions"],
                "renamed_atom14_gt_exists": batch["atom14_gt_exists"]}
    unrenamed = ptl.sidechain_fape(frames, pred, batch, as_named, ptl.LossConfig())
    assert float((unrenamed - expected).abs().min()) > 1e-3


# ---------------------------------------------------------------------------- terms


def _term(name: str, mod, outputs: dict, batch: dict, cfg):
    """One term through its public function (the signature both modules share)."""
    last = outputs["sm_positions"][:, -1]
    calls = {
        "supervised_chi": lambda: mod.chi_loss(outputs["sm_angles"],
                                               outputs["sm_unnormalized_angles"], batch, cfg),
        "distogram": lambda: mod.distogram_loss(outputs["distogram_logits"], batch, cfg),
        "masked_msa": lambda: mod.masked_msa_loss(outputs["masked_msa_logits"], batch, cfg),
        "plddt_loss": lambda: mod.plddt_loss(outputs["lddt_logits"],
                                             outputs["final_atom_positions"], batch, cfg),
        "experimentally_resolved": lambda: mod.experimentally_resolved_loss(
            outputs["experimentally_resolved_logits"], batch, cfg),
        "violation": lambda: mod.violation_loss(last, batch, cfg),
    }
    return calls[name]()


@pytest.mark.parametrize("name", ["supervised_chi", "distogram", "masked_msa", "plddt_loss",
                                  "experimentally_resolved", "violation"])
def test_each_term_matches_pytorch(case, name):
    outputs, batch, t_out, t_batch = case
    expected = _term(name, ptl, outputs, batch, ptl.LossConfig())
    got = _term(name, tfl, t_out, t_batch, CFG)
    assert got.dtype == tf.float64
    _close(got, expected, atol=1e-300)
    if name in ("plddt_loss", "experimentally_resolved"):  # 3.4 Å: outside the window
        assert float(got[1]) == 0.0 < float(got[0])


def test_per_sample_terms_match_pytorch(terms):
    expected, got = terms
    assert set(got) == set(tfl.TERMS) == set(ptl.TERMS)
    assert tfl.TERMS == ptl.TERMS and CFG.weights() == ptl.LossConfig().weights()
    for k in tfl.TERMS:
        _close(got[k], expected[k], atol=1e-300, msg=k)


def test_violation_keeps_the_float32_peptide_bond_target_of_the_reference():
    """Three C–N bonds stretched beyond tolerance (one before a proline): REF's float32
    targets and tolerances move the value by ~1e-8 from float64 ones."""
    aatype = torch.tensor([[rc.RESTYPE_ORDER[c] for c in "GPGG"]])
    exists = torch.zeros(1, 4, 14, dtype=torch.float64)
    exists[..., :3] = 1.0  # N, CA, C
    x = torch.zeros(1, 4, 14, 3, dtype=torch.float64)
    for i, cn in enumerate((1.341 + 0.3, 1.329 + 0.25, 1.329 + 0.5, None)):  # C(i)–N(i+1)
        x[0, i, 1] = x[0, i, 0] + torch.tensor([0.5, 1.4, 0.0], dtype=torch.float64)  # CA
        x[0, i, 2] = x[0, i, 1] + torch.tensor([1.0, -1.1, 0.0], dtype=torch.float64)  # C
        if cn is not None:
            x[0, i + 1, 0] = x[0, i, 2] + torch.tensor([cn, 0.0, 0.0], dtype=torch.float64)
    batch = {"aatype": aatype, "residue_index": torch.arange(4)[None],
             "atom14_atom_exists": exists,
             "residx_atom14_to_atom37": torch.tensor(
                 np.array(rc.RESTYPE_ATOM14_TO_ATOM37))[aatype]}
    expected = ptl.violation_loss(x, batch, ptl.LossConfig())
    got = tfl.violation_loss(tf.constant(x.numpy()), _tf(batch), CFG)
    _close(got, expected, rtol=1e-14)


@pytest.mark.parametrize(("residues", "slots", "index", "clash"), [
    ("AA", (4, 4), (0, 5), True),  # CB–CB: a clash
    ("CC", (5, 5), (0, 5), False),  # SG–SG: a disulfide bridge, never a clash
    ("SS", (5, 5), (0, 5), False),  # OG–OG: REF quirk, atom slot 5 of ANY pair is excluded
    ("AA", (2, 0), (0, 1), False),  # C(i)–N(i+1): the peptide bond
    ("AA", (2, 0), (0, 2), True),  # C–N across a gap: a clash
])
def test_clash_exclusions_match_pytorch(residues, slots, index, clash):
    """Two atoms 1.2 Å apart, one in each residue."""
    batch = _pair_batch(residues, slots, index)
    pos = torch.zeros(1, 2, 14, 3, dtype=torch.float64)
    pos[0, 1, slots[1]] = torch.tensor([1.2, 0.0, 0.0], dtype=torch.float64)
    expected = ptl.violation_loss(pos, batch, ptl.LossConfig())
    got = tfl.violation_loss(tf.constant(pos.numpy()), _tf(batch), CFG)
    _close(got, expected, rtol=1e-14)
    assert (float(got[0]) > 0.1) == clash


# ---------------------------------------------------------------------------- total


def test_total_and_breakdown_match_pytorch_with_the_sqrt_crop_scale(case):
    outputs, batch, t_out, t_batch = case
    total, breakdown = ptl.loss(outputs, batch, ptl.LossConfig())
    t_total, t_breakdown = tfl.loss(t_out, t_batch, CFG)
    _close(t_total, total)
    assert set(t_breakdown) == set(breakdown)
    for k in breakdown:
        _close(t_breakdown[k], breakdown[k], msg=k)
    # min(seq_length, N_res): sample 1's seq_length 300 is capped at the 10 residues
    assert batch["seq_length"].tolist() == [N_RES - PAD, 300]
    weighted = breakdown["weighted_total_loss"].item()
    assert abs(total.item() - weighted * math.sqrt(300)) > 1.0
    nested = {k: v for k, v in t_out.items() if not k.startswith("sm_")}
    nested["sm"] = {k[3:]: v for k, v in t_out.items() if k.startswith("sm_")}
    assert float(tfl.loss(nested, t_batch, CFG)[0]) == float(t_total)


def _torch_grads(outputs: dict, batch: dict) -> tuple[torch.Tensor, dict]:
    leaves = {k: v.clone().requires_grad_() for k, v in outputs.items()}
    total, _ = ptl.loss(leaves, batch, ptl.LossConfig())
    total.backward()
    return total, {k: v.grad for k, v in leaves.items()}


def _tf_grads(outputs: dict, batch: dict) -> tuple[tf.Tensor, dict]:
    with tf.GradientTape() as tape:
        tape.watch(outputs)
        total, _ = tfl.loss(outputs, batch, CFG)
    return total, tape.gradient(total, outputs)


def test_gradients_of_the_total_match_pytorch(case):
    outputs, batch, t_out, t_batch = case
    _, grads = _torch_grads(outputs, batch)
    _, t_grads = _tf_grads(t_out, t_batch)
    for k in PREDICTED:
        if k == "final_atom_positions":  # the pLDDT target is detached in both
            assert grads[k] is None and t_grads[k] is None
            continue
        expected = grads[k].numpy()
        assert np.abs(expected).max() > 0 or k == "experimentally_resolved_logits", k
        np.testing.assert_allclose(np.asarray(t_grads[k]), expected, rtol=1e-8,
                                   atol=GRAD_ATOL, err_msg=k)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_term_is_dropped_with_its_gradient(case, bad):
    outputs, batch, t_out, t_batch = case
    logits = outputs["distogram_logits"].clone()
    logits[1, 2, 3, 4] = bad  # only sample 1's pair (2, 3)
    outputs = {**outputs, "distogram_logits": logits}
    t_out = {**t_out, "distogram_logits": tf.constant(logits.numpy())}
    total, grads = _torch_grads(outputs, batch)
    t_total, t_grads = _tf_grads(t_out, t_batch)
    _close(t_total, total)
    # the term alone is non-finite; the total is the others' (a deleted drop makes it NaN)
    value = tfl.per_sample_terms(t_out, t_batch, CFG)["distogram"].numpy()
    assert np.isfinite(value[0]) and not np.isfinite(value[1]) and np.isfinite(float(t_total))
    assert not np.isfinite(float(tfl.loss(t_out, t_batch, CFG)[1]["distogram"]))
    # no gradient through the dropped term (PyTorch: none at all); the rest as PyTorch's
    assert grads["distogram_logits"] is None
    assert not np.any(t_grads["distogram_logits"])
    for k in PREDICTED:
        if k not in ("distogram_logits", "final_atom_positions"):
            np.testing.assert_allclose(np.asarray(t_grads[k]), grads[k].numpy(), rtol=1e-8,
                                       atol=GRAD_ATOL, err_msg=k)


# ---------------------------------------------------------------------------- lDDT


@pytest.mark.parametrize("per_residue", [False, True])
@pytest.mark.parametrize("eps", [1e-8, 1e-10])
def test_lddt_ca_matches_pytorch(per_residue, eps):
    rng = np.random.default_rng(7)
    steps = rng.normal(size=(3, 30, 3))
    true_ca = np.cumsum(3.8 * steps / np.linalg.norm(steps, axis=-1, keepdims=True), axis=1)
    true_ca[0, 5] += 100.0  # a lone residue: no scored pair, per-residue score eps/eps = 1
    true = rng.normal(size=(3, 30, 37, 3)) + true_ca[:, :, None]
    pred = true + rng.normal(size=true.shape) * np.array([0.3, 1.5, 4.0])[:, None, None, None]
    mask = (rng.random((3, 30, 37)) > 0.15).astype(np.float64)
    mask[0, 5] = 1.0
    expected = ptl.lddt_ca(torch.tensor(pred), torch.tensor(true), torch.tensor(mask),
                           eps=eps, per_residue=per_residue)
    got = tfl.lddt_ca(tf.constant(pred), tf.constant(true), tf.constant(mask), eps=eps,
                      per_residue=per_residue)
    _close(got, expected, rtol=1e-13)
    if per_residue:
        assert float(got[0, 5]) == 1.0
    else:
        assert float(got[0]) > float(got[1]) > float(got[2])  # more noise, lower score


# ---------------------------------------------------------------------------- tf.function


def _dynamic_spec(t: tf.Tensor) -> tf.TensorSpec:
    """The tensor's spec with every residue dimension (N_RES) unknown."""
    return tf.TensorSpec([None if d == N_RES else d for d in t.shape], t.dtype)


def test_tf_function_float32_with_dynamic_residues_matches_eager(case):
    outputs, batch, _, _ = case
    t_out, t_batch = _tf(outputs, tf.float32), _tf(batch, tf.float32)
    logits = t_out["distogram_logits"].numpy()
    logits[1, 2, 3, 4] = np.nan  # the drop inside the graph, with its gradient cut
    t_out["distogram_logits"] = tf.constant(logits)

    def step(o: dict, b: dict):
        with tf.GradientTape() as tape:
            tape.watch(o)
            total, breakdown = tfl.loss(o, b, CFG)
        grads = tape.gradient(total, {k: o[k] for k in PREDICTED if k != "final_atom_positions"})
        return total, breakdown, grads

    graph = tf.function(step, input_signature=[
        {k: _dynamic_spec(v) for k, v in t_out.items()},
        {k: _dynamic_spec(v) for k, v in t_batch.items()}])
    total, breakdown, grads = graph(t_out, t_batch)
    e_total, e_breakdown, e_grads = step(t_out, t_batch)
    assert total.dtype == tf.float32
    np.testing.assert_allclose(float(total), float(e_total), rtol=1e-6)
    for k in tfl.TERMS:
        if k != "distogram":
            np.testing.assert_allclose(float(breakdown[k]), float(e_breakdown[k]), rtol=1e-6,
                                       err_msg=k)
    for k, g in grads.items():
        assert np.all(np.isfinite(g)), k
        np.testing.assert_allclose(np.asarray(g), np.asarray(e_grads[k]), rtol=1e-4,
                                   atol=1e-6 * float(tf.reduce_max(tf.abs(e_grads[k]))) + 1e-12,
                                   err_msg=k)
    assert not np.any(grads["distogram_logits"])
    # float32 against PyTorch in float64, the other terms (the NaN one dropped in both)
    expected = ptl.loss({**outputs, "distogram_logits": torch.tensor(logits, dtype=torch.float64)},
                        batch, ptl.LossConfig())[0]
    np.testing.assert_allclose(float(total), expected.item(), rtol=1e-5)


def test_half_precision_heads_and_float64_features_give_a_float32_loss(case):
    """TensorFlow does not promote: bf16 heads are read in float32 and the features are
    cast to the outputs' dtype, so mixed inputs work and the loss is float32."""
    outputs, batch, _, t_batch = case
    t_out = _tf(outputs, tf.float32)
    heads = {k: tf.cast(v, tf.bfloat16) for k, v in t_out.items() if k.endswith("_logits")}
    total, breakdown = tfl.loss({**t_out, **heads}, t_batch, CFG)  # the features in float64
    assert total.dtype == tf.float32 and breakdown["distogram"].dtype == tf.float32
    expected = ptl.loss({k: v.float() for k, v in outputs.items()}, batch, ptl.LossConfig())[0]
    np.testing.assert_allclose(float(total), expected.item(), rtol=1e-2)  # bf16 logits


def test_a_head_with_the_wrong_number_of_classes_is_named(case):
    _, _, t_out, t_batch = case
    wrong = {**t_out, "masked_msa_logits": t_out["masked_msa_logits"][..., :22]}
    with pytest.raises(ValueError, match="masked_msa_logits has 22 classes, expected 23"):
        tfl.loss(wrong, t_batch, CFG)
