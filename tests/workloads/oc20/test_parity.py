"""OC20: PyTorch ↔ TensorFlow parity (docs/architecture.md, rule 4).

Same canonical ``.npz`` weights in both DimeNet++ → the same energies AND forces on
periodic EMT slabs (fp32); the backends' real training steps (forces by double backward,
the reference's loss scale, AdamW, the per-step LR) from the same weights and batches →
the same loss at every step, the same weights after, the same validation force MAE.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from sciperf.backends import RunContext  # noqa: E402
from sciperf.config import compose  # noqa: E402
from sciperf.workloads import get  # noqa: E402
from sciperf.workloads.oc20 import data, synthetic  # noqa: E402
from sciperf.workloads.oc20.spec import ModelSpec  # noqa: E402
from sciperf_pytorch import weights as pt_weights  # noqa: E402
from sciperf_pytorch.workloads.oc20 import backend as pt_oc  # noqa: E402
from sciperf_pytorch.workloads.oc20 import model as pt_model  # noqa: E402
from sciperf_tensorflow import weights as tf_weights  # noqa: E402
from sciperf_tensorflow.workloads.oc20 import backend as tf_oc  # noqa: E402
from sciperf_tensorflow.workloads.oc20 import model as tf_model  # noqa: E402

# max|a − b| / max|b|, fp32; "observed" on this 2-core CPU.
TOLERANCES = {
    "energy": 1e-5,  # sums of ~10⁴ products in different orders. Observed 3.9e-7.
    "forces": 1e-5,  # gradients through scatters in different orders. Observed 7.9e-7.
    "train_loss": 1e-5,  # 4 AdamW steps with the LR moving every step. Observed 3.7e-7.
    # Adam's m/√v: a rounding-level gradient still takes a ~lr step. Observed 2.1e-6.
    "train_weights": 1e-4,
}
CUTOFF = 4.0
MINI = dict(hidden_channels=16, out_emb_channels=16, int_emb_size=8, basis_emb_size=4,
            num_blocks=2, cutoff=CUTOFF)


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))


def assert_close(a, b, key: str, what: str = "") -> None:
    err = rel_err(a, b)
    assert err <= TOLERANCES[key], f"{what or key}: relative error {err:.3g} > {TOLERANCES[key]}"


@pytest.fixture(autouse=True)
def _fp32_policy():
    before = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy("float32")
    yield
    keras.mixed_precision.set_global_policy(before)


@pytest.fixture(scope="module")
def slabs(tmp_path_factory):
    """8 training and 4 validation EMT slabs (2×2×3, O on half), both formats."""
    root = tmp_path_factory.mktemp("oc20_parity")
    synthetic.generate(synthetic.GenerateRequest(
        root=str(root), train_samples=8, eval_samples=4, seed=3, cutoff=CUTOFF,
        max_neighbours=12, slab=(2, 2, 3), metals=synthetic.METALS, rattle=0.05,
        adsorbate_probability=0.5, per_container=8), show_progress=False)
    return root


def _batch(root) -> tuple[dict, dict]:
    reader = data.StructureReader("npy", CUTOFF)
    return data.collate([reader(p) for p in data.list_samples(root, "train", "npy", 4)])


def _randomised_pair(spec: ModelSpec):
    """A PyTorch model with every weight non-zero (the final layers start at zero) and
    the TensorFlow model holding the same canonical weights."""
    torch.manual_seed(1)
    pt = pt_model.DimeNetPP(spec)
    with torch.no_grad():
        for name, p in pt.named_parameters():
            if "dense_final" in name:
                p.normal_(0.0, 0.3)
    tfm = tf_model.DimeNetPP(spec)
    tf_weights.import_weights(tfm, pt_weights.export_weights(pt))
    return pt, tfm


def test_same_weights_same_energies_and_forces(slabs) -> None:
    """Periodic slabs, a 4-structure batch: energies and forces agree in fp32."""
    x, _ = _batch(slabs)
    pt, tfm = _randomised_pair(ModelSpec(**MINI))
    e_pt, f_pt = pt_model.energy_and_forces(
        pt, {k: torch.from_numpy(v) for k, v in x.items()}, create_graph=False)
    e_tf, f_tf = tf_model.energy_and_forces(
        tfm, {k: tf.convert_to_tensor(v) for k, v in x.items()}, training=False)
    assert float(np.abs(f_pt.numpy()).max()) > 1e-3  # real forces, not the zero model's
    assert_close(e_tf.numpy(), e_pt.numpy(), "energy")
    assert_close(f_tf.numpy(), f_pt.numpy(), "forces")


def test_full_model_same_energies_and_forces(slabs) -> None:
    """The reference-size DimeNet++ (1,810,182 parameters) on the same batch."""
    x, _ = _batch(slabs)
    pt, tfm = _randomised_pair(ModelSpec(cutoff=CUTOFF))
    e_pt, f_pt = pt_model.energy_and_forces(
        pt, {k: torch.from_numpy(v) for k, v in x.items()}, create_graph=False)
    e_tf, f_tf = tf_model.energy_and_forces(
        tfm, {k: tf.convert_to_tensor(v) for k, v in x.items()}, training=False)
    assert_close(e_tf.numpy(), e_pt.numpy(), "energy", "full model energy")
    assert_close(f_tf.numpy(), f_pt.numpy(), "forces", "full model forces")


def _backends(root):
    train = data.list_samples(root, "train", "npy")
    evals = data.list_samples(root, "validation", "npy")
    model = [f"model.{k}={v}" for k, v in MINI.items()]
    out = {}
    for name, cls in (("pytorch", pt_oc.OC20Backend), ("tensorflow", tf_oc.OC20Backend)):
        cfg = compose(["workload=oc20", "experiment=mini", f"framework={name}",
                       "precision=fp32", f"data.dir={root}", "data.train_samples=8",
                       "data.eval_samples=4", "train.global_batch_size=2", "opt.lr=0.005",
                       "opt.warmup_steps=2", "opt.milestones=[100]", "data.force_std=0.5",
                       "data.max_neighbours=12", "data.workers=3", *model])
        be = cls()
        be.setup(RunContext(cfg, get(cfg.workload), train, evals, 2))
        out[name] = be
    with torch.no_grad():  # non-zero forces from the first step on
        for name, p in out["pytorch"].model.named_parameters():
            if "dense_final" in name:
                p.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(7))
    tf_weights.import_weights(out["tensorflow"].model,
                              pt_weights.export_weights(out["pytorch"].model))
    return out["pytorch"], out["tensorflow"]


def test_training_parity_step_by_step(slabs) -> None:
    """4 optimizer steps (warmup then the plateau, LR moving every step): the same loss
    at every step, the same weights after, the same validation force MAE."""
    pt, tfb = _backends(slabs)
    assert pt.train_loader.workers == tfb.train_loader.workers == 3  # data.workers, both
    before = pt_weights.export_weights(pt.model)
    losses: dict[str, list[float]] = {"pt": [], "tf": []}
    pt.train_epoch(0, 0.0, on_step=lambda n, loss: losses["pt"].append(loss))
    tfb.train_epoch(0, 0.0, on_step=lambda n, loss: losses["tf"].append(loss))
    assert len(losses["pt"]) == 4 and pt.opt_step == tfb.opt_step == 4
    assert len(set(np.round(losses["pt"], 4))) == 4  # the steps really differ
    for step, (a, b) in enumerate(zip(losses["tf"], losses["pt"], strict=True)):
        assert_close(a, b, "train_loss", f"loss at step {step}")
    after_pt, after_tf = (pt_weights.export_weights(pt.model),
                          tf_weights.export_weights(tfb.model))
    assert rel_err(after_pt["int_blocks/0/dense_kj/kernel"],
                   before["int_blocks/0/dense_kj/kernel"]) > 1e-4  # training moved it
    for name, ref in after_pt.items():
        assert_close(after_tf[name], ref, "train_weights", name)
    assert pt.evaluate() == pytest.approx(tfb.evaluate(), rel=1e-4)
