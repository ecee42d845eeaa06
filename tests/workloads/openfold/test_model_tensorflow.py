"""TensorFlow AlphaFold2 (OpenFold) against the PyTorch model it mirrors: the reference's
parameter table at full size, and — with the same weights, moved through the canonical
mappers of both frameworks — the same outputs, loss terms and weight gradients on a real
training batch of the common feature pipeline, in float64; the canonical ``.npz`` both
ways; one compiled step for every recycling count.

The batch is one synthetic chain cropped by the real reader (``sciperf.workloads.openfold
.data``), the mini sizes (spec §11), two recycling passes (the first without gradients).
Tolerances (float64; measured differences are ~1e-14 on outputs, ~1e-12 on gradients):
outputs and loss terms 1e-9, gradients 1e-8 relative to the largest gradient.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
torch = pytest.importorskip("torch")

from workloads.openfold.test_model_pytorch import seeded_weights  # noqa: E402
from workloads.openfold.tf_parity import keras_float64, numpy  # noqa: E402

from sciperf import weights  # noqa: E402
from sciperf.workloads.openfold import data, synthetic  # noqa: E402
from sciperf.workloads.openfold.sizes import ModelSpec, mini_spec  # noqa: E402
from sciperf_pytorch import weights as torch_weights  # noqa: E402
from sciperf_pytorch.workloads.openfold import loss as torch_loss  # noqa: E402
from sciperf_pytorch.workloads.openfold.model import AlphaFold as TorchAlphaFold  # noqa: E402
from sciperf_tensorflow import weights as keras_weights  # noqa: E402
from sciperf_tensorflow.workloads.openfold import loss as keras_loss  # noqa: E402
from sciperf_tensorflow.workloads.openfold import primitives  # noqa: E402
from sciperf_tensorflow.workloads.openfold.model import AlphaFold  # noqa: E402

PASS = 1  # the last pass of two: pass 0 runs without gradients and feeds the recycling
OUTPUTS = ("msa", "pair", "single", "final_atom_positions", "final_affine_tensor",
           "sm_frames", "sm_sidechain_frames", "sm_positions", "sm_angles",
           "sm_unnormalized_angles", "sm_single", "lddt_logits", "plddt", "distogram_logits",
           "masked_msa_logits", "experimentally_resolved_logits")


def test_full_model_weights_are_the_reference_table(monkeypatch) -> None:
    """5,044 tensors, 93,229,082 parameters, the reference's order, canonical names."""
    spec = ModelSpec()
    # shapes are the question here, not values: zeros fill 93 M weights in a fraction of
    # the time a truncated normal takes
    monkeypatch.setattr(primitives, "_kernel_init",
                        lambda init, fan_in: keras.initializers.Zeros())
    model = AlphaFold(spec)
    entries = keras_weights.expected_entries(model)
    assert list(entries.items()) == list(spec.weight_shapes().items())
    assert len(model.trainable_variables) == 5044
    assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == 93_229_082


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """One training item of a synthetic chain through the real reader and collate."""
    root = tmp_path_factory.mktemp("openfold-tf")
    synthetic.generate(root, 2, 1, seed=3, msa_depth=20, templates=True, max_hits=2)
    reader = data.model_reader(root, data.FORMATS[0], mini_spec())
    sample = data.list_samples(root, "train", data.FORMATS[0])[0]
    feats, label = reader(data.Draw(sample, 7))
    collated, _ = data.collate([(feats, label)])
    return collated


def _f64(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float64) if array.dtype.kind == "f" else array


@pytest.fixture(scope="module")
def models() -> tuple[torch.nn.Module, AlphaFold]:
    """The PyTorch model with seeded weights and its Keras mirror given the same, float64."""
    spec = mini_spec()
    pt = TorchAlphaFold(spec, checkpointing=False).double().eval()
    pt.load_state_dict(seeded_weights(spec))
    with keras_float64():
        keras_model = AlphaFold(spec, checkpointing=False)
    mapped = torch_weights._mapped(pt)  # noqa: SLF001 - float64 arrays, not export's float32
    keras_weights.import_weights(keras_model, {
        name: weights.to_canonical(name, t.detach().numpy(), kind, "torch")
        for name, (t, kind) in mapped.items()})
    return pt, keras_model


@pytest.fixture(scope="module")
def results(models, batch) -> dict[str, dict]:
    """Outputs, loss breakdown and weight gradients (canonical names) of both."""
    pt, keras_model = models
    torch_batch = {k: torch.from_numpy(_f64(v)) for k, v in batch.items()}
    out_t = pt(torch_batch, num_recycling=PASS)
    total_t, parts_t = torch_loss.loss(out_t, {k: v[..., PASS] for k, v in torch_batch.items()})
    pt.zero_grad()
    total_t.backward()
    names = mini_spec().canonical_names()
    grads_t = {}
    for name, p in pt.named_parameters():
        entry, transposed = names[name]
        grads_t[entry] = p.grad.numpy().T if transposed else p.grad.numpy()

    tf_batch = {k: tf.constant(_f64(v)) for k, v in batch.items()}
    with tf.GradientTape() as tape:
        out_k = keras_model(tf_batch, num_recycling=PASS, training=False)
        total_k, parts_k = keras_loss.loss(out_k, {k: v[..., PASS] for k, v in tf_batch.items()})
    variables = keras_weights.mapped(keras_model)
    grads = tape.gradient(total_k, [var for var, _ in variables.values()])
    grads_k = {entry: numpy(g) for entry, g in zip(variables, grads, strict=True)}
    return {"torch": {"out": out_t, "parts": parts_t, "grads": grads_t, "total": total_t},
            "keras": {"out": out_k, "parts": parts_k, "grads": grads_k, "total": total_k}}


@pytest.mark.parametrize("key", OUTPUTS)
def test_outputs_equal_pytorch(results, key: str) -> None:
    want, got = numpy(results["torch"]["out"][key]), numpy(results["keras"]["out"][key])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_every_loss_term_equals_pytorch(results) -> None:
    want, got = results["torch"]["parts"], results["keras"]["parts"]
    assert set(got) == set(want)
    for term in want:
        np.testing.assert_allclose(numpy(got[term]), numpy(want[term]), rtol=1e-9, atol=1e-9,
                                   err_msg=term)
    assert float(numpy(results["torch"]["total"])) > 0.1  # a real loss, not a zeroed one
    np.testing.assert_allclose(numpy(results["keras"]["total"]),
                               numpy(results["torch"]["total"]), rtol=1e-10)


def test_every_weight_gradient_equals_pytorch(results) -> None:
    want, got = results["torch"]["grads"], results["keras"]["grads"]
    assert set(got) == set(want) and len(want) == len(mini_spec().weight_shapes())
    scale = max(float(np.abs(g).max()) for g in want.values())
    for entry, grad in want.items():
        np.testing.assert_allclose(got[entry], grad, rtol=0, atol=1e-8 * scale,
                                   err_msg=entry)
    # the same weights get no gradient in both (the zero-weight heads' own layers, the
    # last angle block's unused rows…), and the rest is most of the model
    zero = {entry for entry, grad in want.items() if not np.any(grad)}
    assert zero == {entry for entry, grad in got.items() if not np.any(grad)}
    assert len(zero) < 0.2 * len(want)


def test_canonical_weights_move_both_ways(tmp_path: Path) -> None:
    """PyTorch → .npz → TensorFlow → .npz → PyTorch gives back every weight bit for bit."""
    spec = mini_spec()
    torch.manual_seed(5)
    source = TorchAlphaFold(spec, checkpointing=False)
    first = weights.save_npz(tmp_path / "pt.npz", torch_weights.export_weights(source))
    keras_model = AlphaFold(spec, checkpointing=False)
    keras_weights.import_weights(keras_model, weights.load_npz(
        first, expected_entries=spec.weight_shapes()))
    second = weights.save_npz(tmp_path / "tf.npz", keras_weights.export_weights(keras_model))
    back = TorchAlphaFold(spec, checkpointing=False)
    torch_weights.import_weights(back, weights.load_npz(second,
                                                        expected_entries=spec.weight_shapes()))
    for (name, a), (_, b) in zip(source.state_dict().items(), back.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name


def test_one_trace_serves_every_recycling_count(batch) -> None:
    """The recycling count is a tensor: a compiled forward traced once runs 0 and 2
    recycling passes, and the counts give different structures."""
    model = AlphaFold(mini_spec(), checkpointing=False)
    tf_batch = {k: tf.constant(v) for k, v in batch.items()}
    step = tf.function(lambda b, n: model(b, num_recycling=n)["final_atom_positions"])
    zero = step(tf_batch, tf.constant(0))
    two = step(tf_batch, tf.constant(2))
    assert step.experimental_get_tracing_count() == 1
    assert not np.allclose(numpy(zero), numpy(two))
