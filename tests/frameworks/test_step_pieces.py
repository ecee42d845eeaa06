"""The step pieces of both templates (``sciperf_pytorch.pieces``, ``sciperf_tensorflow.pieces``):
the same classes give the same numbers, and a checkpoint keeps and restores their state.

The templates' use of them (called at every optimizer step, saved in state.pt/state.npz) is
asserted through the contract's test workload (tests/core/test_contract_workload.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("tensorflow")

from sciperf_pytorch import pieces as pt_pieces  # noqa: E402
from sciperf_tensorflow import pieces as tf_pieces  # noqa: E402
from sciperf_tensorflow import state as tf_state  # noqa: E402

RNG = np.random.default_rng(7)
SHAPES = [(3, 4), (4,), (2, 2, 3)]


def test_both_frameworks_offer_the_same_pieces() -> None:
    names = {n for n in dir(pt_pieces) if isinstance(getattr(pt_pieces, n), type)
             and issubclass(getattr(pt_pieces, n), pt_pieces.StepPiece)}
    mirror = {n for n in dir(tf_pieces) if isinstance(getattr(tf_pieces, n), type)
              and issubclass(getattr(tf_pieces, n), tf_pieces.StepPiece)}
    assert names == mirror == {"StepPiece", "ClipGradNorm", "WeightEMA", "StepCallback"}


def _torch_params(grads: list[np.ndarray]) -> SimpleNamespace:
    """A model whose parameters carry `grads` (what ClipGradNorm reads in PyTorch)."""
    model = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(g.shape)) for g in grads])
    for p, g in zip(model, grads, strict=True):
        p.grad = torch.from_numpy(g.copy())
    return SimpleNamespace(model=model)


@pytest.mark.parametrize("scale", [0.01, 1.0, 50.0])
def test_gradient_clipping_gives_the_same_gradients_in_both(scale: float) -> None:
    grads = [RNG.standard_normal(s).astype(np.float32) * scale for s in SHAPES]
    bound = 0.5
    backend = _torch_params(grads)
    pt_pieces.ClipGradNorm(bound).on_gradients(backend)
    clipped_pt = [p.grad.numpy() for p in backend.model]
    clipped_tf = [g.numpy() for g in tf_pieces.ClipGradNorm(bound).on_gradients(
        [tf.constant(g) for g in grads])]
    norm = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads))
    factor = min(bound / (norm + 1e-6), 1.0)
    for pt, tfg, g in zip(clipped_pt, clipped_tf, grads, strict=True):
        np.testing.assert_allclose(pt, tfg, rtol=1e-6, atol=0)
        np.testing.assert_allclose(pt, g * factor, rtol=1e-5)
    if factor == 1.0:  # under the bound: untouched
        assert all(np.array_equal(pt, g) for pt, g in zip(clipped_pt, grads, strict=True))
    assert np.sqrt(sum(float((c.astype(np.float64) ** 2).sum()) for c in clipped_tf)) \
        <= bound * (1 + 1e-5) or factor == 1.0


def test_clipping_refuses_a_bound_that_clips_nothing() -> None:
    for module in (pt_pieces, tf_pieces):
        with pytest.raises(ValueError, match="must be > 0"):
            module.ClipGradNorm(0.0)


class _KerasTwin:
    """A TF 'backend' for WeightEMA: a Keras model of the given weights and its builder."""

    def __init__(self, weights: list[np.ndarray]) -> None:
        self.weights = weights
        self.model_spec = None
        self.model = self.build_model(None)

    def build_model(self, _spec: object) -> object:
        import keras
        inputs = keras.Input((self.weights[0].shape[0],))
        layer = keras.layers.Dense(self.weights[0].shape[1])
        model = keras.Model(inputs, layer(inputs))
        model.set_weights(self.weights)
        return model


def test_weight_ema_follows_the_same_average_in_both() -> None:
    decay = 0.9
    start = [RNG.standard_normal((3, 2)).astype(np.float32),
             RNG.standard_normal((2,)).astype(np.float32)]
    linear = torch.nn.Linear(3, 2)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(start[0].T))
        linear.bias.copy_(torch.from_numpy(start[1]))
    pt_ema = pt_pieces.WeightEMA(decay)
    pt_ema.attach(SimpleNamespace(model=linear))
    twin = _KerasTwin(start)
    tf_ema = tf_pieces.WeightEMA(decay)
    tf_ema.attach(twin)
    expected = [w.astype(np.float64) for w in start]
    for step in range(4):
        new = [w + RNG.standard_normal(w.shape).astype(np.float32) for w in start]
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(new[0].T))
            linear.bias.copy_(torch.from_numpy(new[1]))
        twin.model.set_weights(new)
        pt_ema.after_step()
        tf_ema.after_step()
        # the first update copies; then avg += (p − avg)·(1 − decay)
        expected = [n.astype(np.float64) if step == 0 else e + (n - e) * (1 - decay)
                    for e, n in zip(expected, new, strict=True)]
        got_pt = [pt_ema.model.weight.numpy().T, pt_ema.model.bias.numpy()]
        got_tf = [v.numpy() for v in tf_ema.model.trainable_variables]
        for a, b, e in zip(got_pt, got_tf, expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
            if step == 0:
                assert np.array_equal(a, e.astype(np.float32))  # a copy, not a sum


def test_weight_ema_state_round_trips_and_refuses_nan(tmp_path) -> None:  # noqa: ANN001
    linear = torch.nn.Linear(3, 2)
    ema = pt_pieces.WeightEMA(0.5)
    ema.attach(SimpleNamespace(model=linear))
    ema.after_step()
    saved = ema.state()
    assert set(saved) == {"ema", "ema_started"}
    other = pt_pieces.WeightEMA(0.5)
    other.attach(SimpleNamespace(model=torch.nn.Linear(3, 2)))
    other.load_state(saved)
    assert other.started and torch.equal(other.model.weight, ema.model.weight)
    bad = {"ema": {**saved["ema"], "weight": torch.full((2, 3), float("nan"))},
           "ema_started": saved["ema_started"]}
    with pytest.raises(ValueError, match="ema parameter weight holds NaN/Inf"):
        other.load_state(bad)

    twin = _KerasTwin([np.ones((3, 2), np.float32), np.zeros(2, np.float32)])
    tf_ema = tf_pieces.WeightEMA(0.5)
    tf_ema.attach(twin)
    tf_ema.after_step()
    tf_state.save(tmp_path / "state.npz", {"extra": tf_ema.variables()}, (3, 1))
    fresh = tf_pieces.WeightEMA(0.5)
    fresh.attach(_KerasTwin([np.zeros((3, 2), np.float32), np.zeros(2, np.float32)]))
    assert not bool(fresh.started.numpy())
    assert tf_state.load(tmp_path / "state.npz", {"extra": fresh.variables()}) == (3, 1)
    assert bool(fresh.started.numpy())
    np.testing.assert_array_equal(fresh.model.trainable_variables[0].numpy(), np.ones((3, 2)))


def test_pieces_claiming_one_checkpoint_key_are_refused() -> None:
    a, b = pt_pieces.WeightEMA(0.9), pt_pieces.WeightEMA(0.9)
    for piece in (a, b):
        piece.attach(SimpleNamespace(model=torch.nn.Linear(2, 2)))
    with pytest.raises(ValueError, match="share the checkpoint key"):
        pt_pieces.merged_state([a, b])
    slow = pt_pieces.WeightEMA(0.9, name="slow")
    slow.attach(SimpleNamespace(model=torch.nn.Linear(2, 2)))
    assert set(pt_pieces.merged_state([a, slow])) == {"ema", "ema_started", "slow",
                                                        "slow_started"}


def test_step_callback_runs_its_function() -> None:
    for module in (pt_pieces, tf_pieces):
        calls = []
        module.StepCallback(lambda calls=calls: calls.append(1)).after_step()
        assert calls == [1]
