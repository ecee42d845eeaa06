"""The up-front memory check (sciperf.memory): its per-layer outputs are the real models'
output sizes, it refuses only batches whose LOWER bound exceeds the node, in one line
before anything is written (issue 13: an OOM kill leaves no trace)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sciperf import memory
from sciperf.config import compose
from sciperf.errors import SciperfError
from sciperf.workloads import get

GIB = 2**30


@pytest.mark.parametrize("name", ["cosmoflow", "deepcam"])
def test_layer_outputs_are_the_pytorch_models_output_sizes(name: str) -> None:
    """Forward hooks on every counted module of the real PyTorch model: the elements each
    kind produces per sample equal what the spec's layer table says (convs, depthwise,
    transposed convs, norms, affines, dense)."""
    torch = pytest.importorskip("torch")
    from torch import nn

    w = get(name)
    spec = w.model_spec(compose([f"workload={name}", "experiment=mini"]))
    want: dict[str, int] = {}
    for layer in w.cost.layers(spec):
        want[layer.kind] = want.get(layer.kind, 0) + layer.outputs
    if name == "cosmoflow":
        from sciperf_pytorch.workloads.cosmoflow.model import CosmoFlow
        model, x = CosmoFlow(spec), torch.zeros(2, 4, *3 * [spec.input_size])
        kinds = {nn.Conv3d: "conv3d", nn.Linear: "dense"}
    else:
        from sciperf_pytorch.workloads.deepcam.model import Affine, DeepCam, DepthwiseConv2d
        model, x = DeepCam(spec), torch.zeros(2, spec.in_channels, spec.height, spec.width)
        kinds = {DepthwiseConv2d: "depthwise", nn.ConvTranspose2d: "deconv",
                 nn.Conv2d: "conv", nn.BatchNorm2d: "norm", Affine: "affine"}
    got: dict[str, int] = {}

    def count(module: nn.Module, _inputs: object, out: torch.Tensor) -> None:
        kind = next(k for cls, k in kinds.items() if isinstance(module, cls))
        got[kind] = got.get(kind, 0) + out.numel() // x.shape[0]

    for module in model.modules():
        if isinstance(module, tuple(kinds)):
            module.register_forward_hook(count)
    model.eval()
    with torch.no_grad():
        model(x)
    assert got == want


def _full_cosmoflow() -> list:
    w = get("cosmoflow")
    return w.cost.layers(w.model_spec(compose(["workload=cosmoflow", "experiment=full"])))


def test_the_bound_refuses_what_cannot_fit_and_passes_what_may() -> None:
    layers = _full_cosmoflow()
    est = memory.estimate(layers, "fp32")
    assert est.model == 12 * sum(layer.params for layer in layers)
    assert est.per_sample == 4 * sum(layer.outputs for layer in layers)
    assert memory.estimate(layers, "bf16").per_sample == est.per_sample // 2
    memory.check(layers, "fp32", 4, 1, "x", free=24 * GIB)  # the reference's batch fits
    with pytest.raises(SciperfError) as exc:
        memory.check(layers, "fp32", 128, 1, "workload=cosmoflow", free=24 * GIB)
    fits = (24 * GIB - est.model) // est.per_sample
    assert str(exc.value).endswith(f"at most {fits} samples per rank fit — lower "
                                   "train.global_batch_size or use more ranks")
    memory.check(layers, "fp32", fits, 1, "x", free=24 * GIB)  # the largest allowed
    with pytest.raises(SciperfError, match="each of the 4 rank"):  # ranks share the node
        memory.check(layers, "fp32", fits, 4, "x", free=24 * GIB)


def test_meminfo_is_read_and_a_missing_one_skips_the_check(tmp_path: Path) -> None:
    info = tmp_path / "meminfo"
    info.write_text("MemTotal: 100 kB\nMemAvailable: 2048 kB\nSwapFree: 1024 kB\n")
    assert memory.available(info) == 3072 * 1024
    assert memory.available(tmp_path / "none") is None


def test_train_refuses_an_impossible_batch_before_writing(sciperf_cmd, tiny_mini_data,
                                                          tmp_path: Path) -> None:
    """4,096 full-size universes on one rank need > 1 TiB by the lower bound alone."""
    out = tmp_path / "run"
    proc = subprocess.run([*sciperf_cmd, "train", "experiment=full",
                           "train.global_batch_size=4096", f"data.dir={tiny_mini_data}",
                           f"output_dir={out}"], capture_output=True, text=True,
                          timeout=300, check=False)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("sciperf ")]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "a local batch of 4096 needs at least" in lines[0]
    assert "lower train.global_batch_size" in lines[0]
    assert not out.exists()
