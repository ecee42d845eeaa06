"""`sciperf characterize`: counted FLOPs agree with torch's own FLOP counter; bytes, all-reduce
volume and a measured run's achieved rates follow from real files and a real run."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from matplotlib.image import imread

from sciperf.characterize import allreduce_bytes, characterize, count_flops, load_run
from sciperf.config import compose
from sciperf.errors import SciperfError
from sciperf.workloads.cosmoflow import FULL_PARAMETER_COUNT, ModelSpec

BIN = Path(sys.executable).parent


def mini_spec() -> ModelSpec:
    cfg = compose(["experiment=mini"])
    return ModelSpec(**dict(cfg.model))


def torch_counts(spec: ModelSpec, batch: int, backward: bool) -> int:
    """Total FLOPs torch's FlopCounterMode counts for the PyTorch model (meta tensors: the
    counter works from shapes, nothing is computed)."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from sciperf_pytorch.models.cosmoflow import CosmoFlow
    with torch.device("meta"):
        model = CosmoFlow(spec)
        x = torch.zeros(batch, spec.in_channels, *(spec.input_size,) * 3)
    counter = FlopCounterMode(display=False)
    with counter:
        y = model(x)
        if backward:
            y.sum().backward()
    return counter.get_total_flops()


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
    assert math.isclose(json.loads(proc.stdout.split("\nwrote ")[0])["parameters"], 108_604)


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
