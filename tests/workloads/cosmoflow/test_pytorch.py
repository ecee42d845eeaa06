"""PyTorch CosmoFlow: exact architecture, Keras-semantics optimizer and L2, precision."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sciperf.config import compose  # noqa: E402
from sciperf.workloads.cosmoflow.spec import FULL_PARAMETER_COUNT, ModelSpec  # noqa: E402
from sciperf_pytorch.optim import KerasSGD  # noqa: E402
from sciperf_pytorch.workloads.cosmoflow.model import CosmoFlow  # noqa: E402


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_full_model_has_reference_parameter_count():
    model = CosmoFlow(ModelSpec())
    assert n_params(model) == FULL_PARAMETER_COUNT == 8_907_556
    assert ModelSpec().parameter_count() == FULL_PARAMETER_COUNT


def test_mini_model_is_the_configured_small_variant():
    cfg = compose(["experiment=mini"])
    spec = ModelSpec(**cfg.model)
    model = CosmoFlow(spec)
    assert n_params(model) == spec.parameter_count()
    assert n_params(model) < FULL_PARAMETER_COUNT // 20
    assert spec.input_size == 32 and len(spec.conv_filters) == 4


def test_layer_names_are_the_canonical_spec_names():
    spec = ModelSpec()
    model = CosmoFlow(spec)
    names = {k.rsplit(".", 1)[0] for k in model.state_dict()}
    assert names == set(spec.layer_shapes())
    # kernel shapes agree with the canonical (Keras-layout) shapes up to the transpose
    for name, shape in spec.layer_shapes().items():
        weight = getattr(model, name).weight
        assert sorted(weight.shape) == sorted(shape)


def test_init_is_glorot_uniform_with_zero_bias():
    torch.manual_seed(0)
    model = CosmoFlow(ModelSpec())
    w = model.conv4.weight.detach()  # fan_in = 27·256, fan_out = 27·512
    limit = np.sqrt(6.0 / (27 * 256 + 27 * 512))
    assert float(w.abs().max()) <= limit * (1 + 1e-6)
    assert float(w.abs().max()) > 0.95 * limit
    assert abs(float(w.std()) - limit / np.sqrt(3)) < 0.01 * limit  # uniform, not normal
    assert all(float(getattr(model, n).bias.abs().sum()) == 0.0
               for n in model.conv_names + model.dense_names)


def test_flatten_is_channels_last_order():
    """dense0 must see features ordered (d, h, w, c) — the Keras Flatten on NDHWC."""
    spec = ModelSpec(input_size=4, conv_filters=[3], dense_sizes=[5], dropout=0.0)
    model = CosmoFlow(spec).eval()
    captured = {}

    def hook(module, inputs, output):
        captured["x"] = inputs[0]

    model.dense0.register_forward_hook(hook)
    x = torch.randn(2, 4, 4, 4, 4)
    model(x)
    conv = torch.nn.functional.max_pool3d(
        torch.nn.functional.leaky_relu(model.conv0(x), spec.leaky_slope), 2)
    expected = conv.permute(0, 2, 3, 4, 1).reshape(2, -1)  # NDHWC flatten
    assert torch.equal(captured["x"], expected)


def test_output_is_tanh_times_1_2():
    spec = ModelSpec(input_size=8, conv_filters=[2], dense_sizes=[4], dropout=0.0)
    model = CosmoFlow(spec).eval()
    with torch.no_grad():
        model.dense1.bias.fill_(100.0)  # saturate tanh
        out = model(torch.rand(1, 4, 8, 8, 8))
    assert torch.allclose(out, torch.full_like(out, 1.2))


def test_keras_sgd_matches_hand_computed_updates_with_changing_lr():
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = KerasSGD([w], lr=0.1, momentum=0.9)
    grads = [torch.tensor([0.5, 1.0]), torch.tensor([-1.0, 0.25]), torch.tensor([2.0, 0.0])]
    lrs = [0.1, 0.2, 0.05]
    v = np.zeros(2)
    ref = np.array([1.0, -2.0])
    for g, lr in zip(grads, lrs, strict=True):
        opt.set_lr(lr)
        w.grad = g.clone()
        opt.step()
        v = 0.9 * v + lr * g.numpy()
        ref = ref - v
        np.testing.assert_allclose(w.detach().numpy(), ref, rtol=1e-6)
    # torch.optim.SGD puts lr outside the velocity: it differs once lr changes
    w2 = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    sgd = torch.optim.SGD([w2], lr=0.1, momentum=0.9)
    for g, lr in zip(grads, lrs, strict=True):
        for group in sgd.param_groups:
            group["lr"] = lr
        w2.grad = g.clone()
        sgd.step()
    assert not np.allclose(w2.detach().numpy(), ref, rtol=1e-4)


def test_l2_has_keras_semantics_on_kernels_only():
    from sciperf_pytorch.workloads.cosmoflow.backend import CosmoFlowBackend

    backend = CosmoFlowBackend()
    backend.cfg = compose(["experiment=mini", "opt.weight_decay=0.01"])
    backend.model = CosmoFlow(ModelSpec(input_size=8, conv_filters=[2], dense_sizes=[3]))
    y = torch.zeros(1, 4)
    loss = backend.loss_fn(torch.zeros(1, 4), y)  # zero MSE: the loss is the L2 term alone
    expected = 0.01 * sum(float((k**2).sum()) for k in backend.model.kernels())
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    loss.backward()
    for k in backend.model.kernels():
        torch.testing.assert_close(k.grad, 2 * 0.01 * k.detach())
    bias_grad = backend.model.conv0.bias.grad
    assert bias_grad is None or float(bias_grad.abs().sum()) == 0


def test_bf16_autocast_keeps_fp32_master_weights_and_loss():
    from sciperf_pytorch import runtime

    model = CosmoFlow(ModelSpec(input_size=8, conv_filters=[4], dense_sizes=[4], dropout=0.0))
    model = model.to(memory_format=torch.channels_last_3d)
    opt = KerasSGD(model.parameters(), lr=0.01)
    x = torch.rand(2, 8, 8, 8, 4).permute(0, 4, 1, 2, 3)  # NDHWC memory, NCDHW view
    assert x.is_contiguous(memory_format=torch.channels_last_3d)
    with runtime.autocast(torch.device("cpu"), "bf16"):
        out = model(x)
    assert out.dtype == torch.bfloat16
    loss = torch.nn.functional.mse_loss(out.float(), torch.zeros(2, 4))
    assert loss.dtype == torch.float32
    loss.backward()
    opt.step()
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.parametrize("slope", [0.3, 0.0, -0.2])
def test_pool_then_leaky_equals_the_reference_order_bit_for_bit(slope):
    """conv_block computes MaxPool→LeakyReLU; values and gradients equal LeakyReLU→MaxPool."""
    from torch.nn import functional as F  # noqa: N812

    from sciperf_pytorch.workloads.cosmoflow.model import conv_block

    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8, 8)
    x[:, :, :4] = 0.5  # constant regions: ties inside pooling windows, as in empty space
    x = x.to(memory_format=torch.channels_last_3d)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    ours = conv_block(a, slope)
    ref = F.max_pool3d(F.leaky_relu(b, slope), 2)
    assert torch.equal(ours, ref)
    g = torch.randn_like(ref)
    ours.backward(g)
    ref.backward(g)
    assert torch.equal(a.grad, b.grad)


def test_bf16_block_pools_in_bf16_with_the_values_of_the_float32_cast():
    """Under bf16 autocast the block stays in the convolution's bf16 (autocast alone would
    cast max_pool3d's input to float32): same values and input gradients as pooling the
    float32 cast, with the result rounded to bf16 as the next convolution's cast does."""
    from torch.nn import functional as F  # noqa: N812

    from sciperf_pytorch.workloads.cosmoflow.model import conv_block

    torch.manual_seed(0)
    conv = torch.nn.Conv3d(3, 4, 3, padding=1)
    x = torch.randn(2, 3, 8, 8, 8).to(memory_format=torch.channels_last_3d)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = conv(x)
    b = a.detach().clone().requires_grad_()
    a.retain_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = conv_block(a, 0.3)
        ref = F.leaky_relu(F.max_pool3d(b.float(), 2), 0.3)  # the float32 path
    assert ours.dtype == torch.bfloat16 and ref.dtype == torch.float32
    assert torch.equal(ours, ref.to(torch.bfloat16))
    g = torch.randn(ref.shape).to(torch.bfloat16)
    ours.backward(g)
    ref.backward(g.float())
    assert torch.equal(a.grad, b.grad)


def _reference_forward(model: CosmoFlow, x: torch.Tensor) -> torch.Tensor:
    """The reference's order with the bias differentiated inside each convolution."""
    from torch.nn import functional as F  # noqa: N812

    slope = model.spec.leaky_slope
    for name in model.conv_names:
        conv = getattr(model, name)
        x = F.max_pool3d(F.leaky_relu(F.conv3d(x, conv.weight, conv.bias, padding="same"),
                                      slope), 2)
    x = x.permute(0, 2, 3, 4, 1).flatten(1)
    for name in model.dense_names[:-1]:
        x = F.leaky_relu(getattr(model, name)(x), slope)
    return torch.tanh(getattr(model, model.dense_names[-1])(x)) * model.spec.output_scale


def _conv_backward_nodes(out: torch.Tensor) -> list:
    """Every convolution's autograd node reachable from `out`."""
    seen, stack, found = set(), [out.grad_fn], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__.startswith("ConvolutionBackward"):
            found.append(node)
        stack.extend(fn for fn, _ in node.next_functions)
    return found


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16"])
def test_conv_bias_gradients_come_from_the_pooled_maps_with_the_reference_values(autocast):
    """Each convolution's backward is not asked for its bias (with AVX2 only, oneDNN's
    weight-gradient kernel sums the full-size output gradient for it slowly); the pooled
    gradient's sum gives it. Outputs stay bit-identical, gradients equal the reference's
    up to summation order — in bf16 the reference's bias gradient is rounded to bf16 (the
    bias's autocast copy), ours summed in float32."""
    torch.manual_seed(0)
    spec = ModelSpec(input_size=16, conv_filters=[4, 8], dense_sizes=[6], dropout=0.0)
    model = CosmoFlow(spec)
    for name in model.conv_names:  # non-zero biases, so a lost bias would show
        torch.nn.init.uniform_(getattr(model, name).bias, -0.5, 0.5)
    x = torch.randn(3, 4, 16, 16, 16).to(memory_format=torch.channels_last_3d)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        ours = model(x)
    nodes = _conv_backward_nodes(ours)
    assert len(nodes) == len(spec.conv_filters)
    assert all(node.next_functions[2][0] is None for node in nodes)  # no bias edge
    ours.float().square().sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        ref = _reference_forward(model, x)
    assert torch.equal(ours, ref)
    ref.float().square().sum().backward()
    for name, p in model.named_parameters():
        assert float(p.grad.abs().max()) > 0, name
        rtol = 1e-2 if autocast and name.endswith("bias") else 1e-5
        torch.testing.assert_close(grads[name], p.grad, rtol=rtol, atol=1e-6, msg=name)
