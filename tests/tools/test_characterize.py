"""`sciperf characterize`: counted FLOPs agree with torch's own FLOP counter (CosmoFlow and
DeepCAM); bytes, all-reduce volume and a measured run's achieved rates follow from real files
and a real run."""

from __future__ import annotations

import io
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from matplotlib.image import imread

from sciperf.config import compose
from sciperf.errors import SciperfError
from sciperf.tools.characterize import allreduce_bytes, characterize, count_flops, layers, load_run
from sciperf.workloads.cosmoflow.spec import FULL_PARAMETER_COUNT, ModelSpec
from sciperf.workloads.deepcam import spec as deepcam

BIN = Path(sys.executable).parent


def mini_spec() -> ModelSpec:
    cfg = compose(["experiment=mini"])
    return ModelSpec(**dict(cfg.model))


def deepcam_spec(experiment: str) -> deepcam.ModelSpec:
    return deepcam.ModelSpec(**dict(compose(["workload=deepcam",
                                             f"experiment={experiment}"]).model))


def torch_net(spec: ModelSpec | deepcam.ModelSpec, batch: int) -> tuple[Any, Any]:
    """The PyTorch model of a spec and a zero input batch, both on the meta device (the
    counter works from shapes, nothing is computed)."""
    torch = pytest.importorskip("torch")
    with torch.device("meta"):
        if isinstance(spec, deepcam.ModelSpec):
            from sciperf_pytorch.workloads.deepcam.model import DeepCam
            return DeepCam(spec), torch.zeros(batch, spec.in_channels, spec.height, spec.width)
        from sciperf_pytorch.workloads.cosmoflow.model import CosmoFlow
        return CosmoFlow(spec), torch.zeros(batch, spec.in_channels, *(spec.input_size,) * 3)


def torch_counts(spec: ModelSpec | deepcam.ModelSpec, batch: int, backward: bool,
                 custom: dict[Any, Any] | None = None) -> int:
    """Total FLOPs torch's FlopCounterMode counts for the PyTorch model (`custom`: formulas
    replacing torch's own for some ops)."""
    from torch.utils.flop_counter import FlopCounterMode
    model, x = torch_net(spec, batch)
    counter = FlopCounterMode(display=False, custom_mapping=custom)
    with counter:
        y = model(x)
        if backward:
            y.sum().backward()
    return counter.get_total_flops()


def conv_backward_by_groups(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding,
                            _dilation, transposed, _output_padding, _groups, output_mask,
                            out_shape=None, **_) -> int:
    """torch's convolution_backward formula with the weight gradient counted per group:
    each gradient autograd asks for costs one forward of the conv (torch's own grad-input
    term is exactly that; its grad-weight term treats a grouped conv as dense)."""
    from torch.utils.flop_counter import conv_flop_count
    forward = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed)
    return forward * (int(output_mask[0]) + int(output_mask[1]))


def torch_ignores_groups_in_weight_grad() -> bool:
    """torch ≤ 2.13 counts a depthwise conv's weight gradient c× (groups ignored); a later
    torch may divide by the groups. Probed on one depthwise conv."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode
    with torch.device("meta"):
        conv = torch.nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False)
        x = torch.zeros(1, 4, 8, 8, requires_grad=True)
    counter = FlopCounterMode(display=False)
    with counter:
        conv(x).sum().backward()
    forward = 2 * 4 * 9 * 64
    assert counter.get_total_flops() in (3 * forward, 6 * forward)  # per group or dense
    return counter.get_total_flops() == 6 * forward


@pytest.mark.parametrize("spec", [mini_spec(), ModelSpec()], ids=["mini", "full"])
def test_forward_flops_equal_torch_flop_counter(spec):
    counts = count_flops(spec)
    assert counts.forward * 2 == torch_counts(spec, batch=2, backward=False)
    assert counts.params == spec.parameter_count()


def test_backward_convention_equals_torch_flop_counter():
    """Backward = 2×forward − forward(first layer): the input needs no gradient."""
    spec = mini_spec()
    counts = count_flops(spec)
    assert counts.train * 2 == torch_counts(spec, batch=2, backward=True)
    assert counts.backward == 2 * counts.forward - counts.first_layer_forward


def test_full_model_numbers():
    counts = count_flops(ModelSpec())
    assert counts.params == FULL_PARAMETER_COUNT
    # conv0 alone: 128³ outputs × 27·4·32 multiply-adds × 2
    assert counts.first_layer_forward == 2 * 128**3 * 27 * 4 * 32
    assert counts.forward == 68_862_099_968


# DeepCAM, counted here (exact integers per sample) and confirmed by FlopCounterMode: the
# full model's forward also on a real CPU run at 768×1152, batch 1 (655,337,666,560).
DEEPCAM = {"mini": {"forward": 209_383_680, "train": 620_188_416, "params": 419_960},
           "full": {"forward": 655_337_666_560, "train": 1_963_974_567_936,
                    "params": deepcam.FULL_PARAMETER_COUNT}}


@pytest.mark.parametrize("experiment", ["mini", "full"])
def test_deepcam_counts_equal_torch_flop_counter(experiment):
    """Forward: exactly FlopCounterMode's. Backward: every layer but conv1 needs its input
    gradient (autograd's output_mask says which), each gradient costs one forward."""
    spec = deepcam_spec(experiment)
    counts = count_flops(spec)
    assert counts.forward * 2 == torch_counts(spec, batch=2, backward=False)
    exact = {torch_aten().convolution_backward: conv_backward_by_groups}
    assert counts.train * 2 == torch_counts(spec, batch=2, backward=True, custom=exact)
    assert counts.backward == 2 * counts.forward - counts.first_layer_forward
    assert counts.params == spec.parameter_count()
    want = DEEPCAM[experiment]
    assert (counts.forward, counts.train, counts.params) == (
        want["forward"], want["train"], want["params"])


def test_deepcam_torch_overcount_is_only_the_depthwise_weight_gradient():
    """Unmodified FlopCounterMode differs from the count by exactly (c − 1)× the forward of
    every depthwise conv (its weight gradient counted as a dense c→c conv), where this
    torch has that formula, else not at all."""
    spec = deepcam_spec("mini")
    table = {layer.name: layer.cin for layer in spec.layers()}
    depthwise = [(layer.macs, table[layer.name]) for layer in layers(spec)
                 if layer.kind == "depthwise"]
    assert len(depthwise) == 3 * 3 + 2 * 3 + 3 + 3  # entry 3×3, middle 2×3, exit 3, conv3-5
    over = sum(2 * macs * (channels - 1) for macs, channels in depthwise)
    got = torch_counts(spec, batch=1, backward=True)
    assert got == count_flops(spec).train + (over if torch_ignores_groups_in_weight_grad()
                                             else 0)


def test_deepcam_layer_resolutions():
    """Output stride 16 walked through the table: conv1 at H/2, the skip of a strided
    block at its output size, ASPP at H/16, the image-pooling conv on 1×1, low_conv on
    block1's output (H/4), transposed convs over their input."""
    spec = deepcam_spec("full")
    macs = {layer.name: layer.macs for layer in layers(spec)}
    pixels = 768 * 1152
    assert macs["conv1"] == pixels // 4 * 9 * 16 * 32
    assert macs["block1_skip"] == pixels // 16 * 64 * 128
    assert macs["block3_sep3_depthwise"] == pixels // 256 * 9 * 728  # stride 2: H/16
    assert macs["aspp2"] == pixels // 256 * 9 * 2048 * 256
    assert macs["gpool_conv"] == 2048 * 256
    assert macs["low_conv"] == pixels // 16 * 128 * 48
    assert macs["deconv1a"] == pixels // 256 * 9 * 256 * 256  # input H/16
    assert macs["dec_conv1"] == pixels // 16 * 9 * (256 + 48) * 256
    assert macs["last_deconv"] == pixels // 4 * 9 * 256 * 3  # input H/2
    assert macs["bn1"] == 0 and sum(1 for m in macs.values() if m) == sum(
        1 for layer in spec.layers() if layer.kind not in ("norm", "affine"))


def torch_aten() -> Any:
    return pytest.importorskip("torch").ops.aten


def test_allreduce_ring_volume():
    assert allreduce_bytes(1000, 1) == 0.0
    assert allreduce_bytes(1000, 2) == 4000.0  # 2·(1/2)·4·P
    assert allreduce_bytes(FULL_PARAMETER_COUNT, 512) == pytest.approx(
        2 * 511 / 512 * 4 * FULL_PARAMETER_COUNT)


def test_characterize_without_data_uses_the_format_payload(tmp_path):
    cfg = compose(["experiment=full", "system=perlmutter-like", f"data.dir={tmp_path}"])
    result = characterize(cfg)
    assert result["bytes_per_sample"] == 128**3 * 4 * 2 + 4 * 4
    assert "uncompressed" in result["bytes_source"]
    assert result["bytes_per_epoch"] == result["bytes_per_sample"] * 524_288
    ranks = 1536 * 4  # perlmutter-like: nodes × GPUs per node
    assert result["ranks"] == ranks
    assert result["allreduce_bytes_per_step_per_rank"] == pytest.approx(
        2 * (ranks - 1) / ranks * 4 * FULL_PARAMETER_COUNT)
    assert result["io_intensity_flop_per_byte"] == pytest.approx(
        result["flops_per_sample"]["train"] / result["bytes_per_sample"])


def test_characterize_deepcam_payload_without_data(tmp_path):
    """Full DeepCAM with no files: float32 768×1152×16 fields + uint8 labels per sample."""
    cfg = compose(["workload=deepcam", "experiment=full", f"data.dir={tmp_path}"])
    result = characterize(cfg)
    assert result["bytes_per_sample"] == 768 * 1152 * 16 * 4 + 768 * 1152  # 57,507,840
    assert "uncompressed" in result["bytes_source"]
    assert result["bytes_per_epoch"] == result["bytes_per_sample"] * 121_266
    assert result["flops_per_sample"]["train"] == DEEPCAM["full"]["train"]
    assert result["parameters"] == deepcam.FULL_PARAMETER_COUNT


def test_cli_characterize_deepcam_reads_the_sample_files(tmp_path):
    """The real command on a prepared mini dataset (npy: data + label file per sample),
    under both frameworks: the counts do not depend on the framework."""
    data = tmp_path / "data"
    proc = subprocess.run([str(BIN / "sciperf"), "prepare", "workload=deepcam",
                           f"data.dir={data}", "data.train_samples=4", "data.eval_samples=2"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    sizes = [p.stat().st_size + p.with_name(p.name.replace(".data.", ".label.")).stat().st_size
             for p in (data / "train").glob("*.data.npy")]
    assert len(sizes) == 4
    printed = {}
    for framework in ("pytorch", "tensorflow"):
        out = tmp_path / framework
        proc = subprocess.run([str(BIN / "sciperf"), "characterize", "workload=deepcam",
                               f"framework={framework}", f"data.dir={data}", "--out", str(out)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        assert "deepcam / mini" in proc.stdout and "209.384 MFLOP" in proc.stdout
        result = json.loads((out / "characterize.json").read_text())
        assert result["framework"] == framework
        assert result["bytes_per_sample"] == sum(sizes) / len(sizes)
        assert result["bytes_per_sample"] > 96 * 144 * 17  # the labels' file is counted
        assert result["flops_per_sample"]["train"] == DEEPCAM["mini"]["train"]
        printed[framework] = {k: v for k, v in result.items() if k != "framework"}
    assert printed["pytorch"] == printed["tensorflow"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("characterize")
    data, out = root / "data", root / "out"
    for args in (["prepare", "experiment=mini", f"data.dir={data}", "data.format=tfrecord",
                  "data.train_samples=32", "data.eval_samples=16"],
                 ["train", "experiment=mini", f"data.dir={data}", "data.format=tfrecord",
                  "data.train_samples=32", "data.eval_samples=16", "train.max_epochs=1",
                  "framework.threads=1", f"output_dir={out}"]):
        proc = subprocess.run([str(BIN / "sciperf"), *args], capture_output=True, text=True,
                              timeout=600, check=False)
        assert proc.returncode in (0, 1), proc.stderr[-2000:]  # 1: target missed, expected
    return out


def test_measured_run_rates_and_roofline(run_dir, tmp_path):
    summary = json.loads((run_dir / "summary.json").read_text())
    data = Path(summary["config"]["data"]["dir"]) / "train"
    sizes = sorted(p.stat().st_size for p in data.glob("*.tfrecord"))
    proc = subprocess.run([str(BIN / "sciperf"), "characterize", "workload=cosmoflow",
                           "framework=pytorch", f"run={run_dir}", "system.peak_flops=1e12",
                           "system.peak_io_bw=2e9", "--json", "--out", str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "characterize.json").read_text())
    assert result["bytes_per_sample"] == pytest.approx(sum(sizes) / len(sizes))  # gzip'ed
    assert result["experiment"] == "mini" and result["parameters"] == 108_604
    got = result["measured"]
    rate = summary["samples_per_s"]
    assert got["achieved_flops"] == pytest.approx(result["flops_per_sample"]["train"] * rate)
    assert got["achieved_io_bytes_per_s"] == pytest.approx(result["bytes_per_sample"] * rate)
    assert got["fraction_of_peak_flops"] == pytest.approx(got["achieved_flops"] / 1e12)
    assert got["fraction_of_peak_io"] == pytest.approx(got["achieved_io_bytes_per_s"] / 2e9)
    png = (tmp_path / "roofline.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    image = imread(io.BytesIO(png), format="png")
    assert image.shape[0] > 100 and image.std() > 0
    # stdout is one JSON document (the path went after it, and json.load failed)
    assert math.isclose(json.loads(proc.stdout)["parameters"], 108_604)
    # (matplotlib may warn about fonts on stderr first, on a fresh font cache)
    assert proc.stderr.strip().splitlines()[-1] == (f"wrote {tmp_path}/characterize.json "
                                                    f"and {tmp_path}/roofline.png")


@pytest.mark.parametrize(("override", "had"), [
    ("framework=tensorflow", "framework=pytorch"),
    ("experiment=full", "experiment=mini"),
    ("train.global_batch_size=64", "train.global_batch_size=16"),
])
def test_an_override_the_run_contradicts_is_refused(run_dir, tmp_path, override, had):
    """With run=OUT the run's own config is counted: `framework=tensorflow` was silently
    replaced by the run's pytorch."""
    proc = subprocess.run([str(BIN / "sciperf"), "characterize", "workload=cosmoflow",
                           override, f"run={run_dir}", "--out", str(tmp_path / "c")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"sciperf characterize: error: {override}: the run had {had}")
    assert not (tmp_path / "c").exists()


def test_a_throughput_run_names_one_instance_summary(run_dir, tmp_path):
    """A throughput run folder (summary_<i>.json) was "not a sciperf run directory"."""
    folder = tmp_path / "tp"
    folder.mkdir()
    for i in range(2):
        shutil.copy(run_dir / "summary.json", folder / f"summary_{i}.json")
    with pytest.raises(SciperfError, match=r"throughput run of 2 instances: name one "
                                           r"instance's summary \(.*summary_0\.json\)"):
        load_run(folder)


def test_errors(tmp_path):
    with pytest.raises(SciperfError, match="no summary.json"):
        load_run(tmp_path)
    proc = subprocess.run([str(BIN / "sciperf"), "characterize", "system=nope"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "nope" in proc.stderr
    proc = subprocess.run([str(BIN / "sciperf"), "characterize", f"run={tmp_path}"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "no summary.json" in proc.stderr


def test_a_workload_cannot_be_declared_without_its_layer_table():
    """Characterize, bench, the memory check and the thread layout count every workload's
    layers, so the contract requires them (``Workload.cost``): a workload without them is
    refused where it is declared, not when a tool first asks."""
    from dataclasses import fields, replace

    from sciperf.workloads import get
    from sciperf.workloads.base import Workload
    oc20 = get("oc20")
    kept = {f.name: getattr(oc20, f.name) for f in fields(Workload) if f.name != "cost"}
    with pytest.raises(TypeError, match="cost"):
        Workload(**kept)
    assert replace(oc20).cost.layers(oc20.model())
