"""`precision=auto`: bf16 only where this machine measured it faster (by a margin), the
measurement cached per CPU/framework/op and shared by a node's ranks; an explicit
precision always wins; a GPU takes bf16 AMP without a probe."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from sciperf import precision
from sciperf.errors import SciperfError
from sciperf.workloads import get

MACHINE = {"cpu": "Test CPU 9000", "cores": 2, "amx_bf16": True, "avx512_bf16": False,
           "bf16_kernels": True}
CPU = {"framework": "pytorch", "torch": "9.9", "device": "cpu"}


class Probe:
    """A runtime whose op takes the given ms per precision; counts its probes."""

    def __init__(self, fp32: float, bf16: float):
        self.ms, self.calls = {"fp32": fp32, "bf16": bf16}, 0

    def probe_ms(self, op: str, p: str) -> float:
        self.calls += 1
        return self.ms[p]


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("SCIPERF_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("asked", ["fp32", "bf16"])
def test_an_explicit_precision_wins_without_a_probe(asked: str) -> None:
    probe = Probe(10.0, 1.0)
    choice = precision.choose(asked, "conv3d", probe, CPU, MACHINE, 2)
    assert (choice.precision, choice.asked, probe.calls) == (asked, asked, 0)


def test_bf16_is_refused_in_one_line_on_a_cpu_without_bf16_kernels() -> None:
    """An AVX2 CPU would emulate bf16 (25× fp32's time); a GPU beside it still takes it,
    and auto still probes (and picks fp32 by the measurement)."""
    probe, avx2 = Probe(1.0, 25.0), {**MACHINE, "amx_bf16": False, "bf16_kernels": False}
    with pytest.raises(SciperfError, match=r"^precision=bf16: this CPU \(Test CPU 9000\) has "
                       r"no bf16 kernels .* use precision=fp32 or precision=auto$") as err:
        precision.choose("bf16", "conv3d", probe, CPU, avx2, 2)
    assert "\n" not in str(err.value) and probe.calls == 0
    gpu = {**CPU, "device": "NVIDIA H100 80GB HBM3"}
    assert precision.choose("bf16", "conv3d", probe, gpu, avx2, 16).precision == "bf16"
    assert precision.choose("auto", "conv3d", probe, CPU, avx2, 2).precision == "fp32"
    assert probe.calls == 2


@pytest.mark.parametrize(("flags", "expected"), [
    ({"sse2", "avx", "avx2", "fma"}, False),  # AMD EPYC Zen 3
    ({"sse2", "avx2", "avx512f"}, False),  # AVX-512 foundation alone: no bf16 kernel
    ({"sse2", "avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq"}, True),  # Xeon, no AMX
    ({"sse2", "avx2", "avx512_bf16"}, True),  # Zen 4/5
    ({"sse2", "amx_bf16"}, True),
    ({"sse2", "avx2", "avx_ne_convert"}, True),
    ({"fp", "asimd", "bf16"}, True),  # not x86: nothing to judge by
])
def test_bf16_kernels_follow_the_cpu_flags(flags: set[str], expected: bool) -> None:
    from sciperf.info import bf16_kernels

    assert bf16_kernels(flags) is expected


def test_tf32_is_kept_on_a_gpu_and_refused_on_the_cpu_in_one_line() -> None:
    probe = Probe(10.0, 1.0)
    gpu = {**CPU, "device": "NVIDIA H100 80GB HBM3"}
    assert precision.choose("tf32", "conv3d", probe, gpu, MACHINE, 16).precision == "tf32"
    with pytest.raises(SciperfError, match="precision=tf32 needs an NVIDIA GPU") as err:
        precision.choose("tf32", "conv3d", probe, CPU, MACHINE, 2)
    assert "\n" not in str(err.value) and probe.calls == 0


def test_tf32_on_the_cpu_ends_train_before_anything_is_written(sciperf_cmd, tmp_path) -> None:
    import subprocess

    out = tmp_path / "out"
    proc = subprocess.run(
        [*sciperf_cmd, "train", "workload=cosmoflow", "experiment=mini", "precision=tf32",
         f"data.dir={tmp_path}", f"output_dir={out}"],
        capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode != 0 and not out.exists()
    assert proc.stderr.strip().splitlines()[-1] == (
        "sciperf train: error: precision=tf32 needs an NVIDIA GPU (TF32 tensor cores); this "
        "run is on the CPU: use fp32 or bf16")


def test_a_gpu_takes_bf16_amp_without_a_probe() -> None:
    probe = Probe(1.0, 10.0)
    gpu = {**CPU, "device": "NVIDIA H100 80GB HBM3"}
    choice = precision.choose("auto", "conv3d", probe, gpu, MACHINE, 16)
    assert choice.precision == "bf16" and "H100" in choice.reason and probe.calls == 0


@pytest.mark.parametrize(("fp32", "bf16", "expected"), [
    (30.0, 8.0, "bf16"), (10.0, 9.5, "fp32"), (10.0, 20.0, "fp32"), (11.0, 10.0, "bf16")])
def test_auto_takes_bf16_only_when_measured_faster_by_the_margin(
        fp32: float, bf16: float, expected: str, cache_dir: Path) -> None:
    probe = Probe(fp32, bf16)
    choice = precision.choose("auto", "conv2d", probe, CPU, MACHINE, 2)
    assert choice.precision == expected and probe.calls == 2
    assert choice.probe_ms == {"fp32": fp32, "bf16": bf16} and not choice.cached
    assert f"{fp32 / bf16:.2f}×" in choice.reason and "conv2d" in choice.reason
    # cached per CPU model, flags, threads, framework version and op: the next run reads it
    again = Probe(1.0, 100.0)
    cached = precision.choose("auto", "conv2d", again, CPU, MACHINE, 2)
    assert (cached.precision, cached.cached, again.calls) == (expected, True, 0)
    assert str(cache_dir) in cached.reason
    for other in ({"op": "matmul"}, {"threads": 4}, {"cpu": "Other CPU"},
                  {"torch": "10.0"}):
        fresh = Probe(1.0, 100.0)
        precision.choose("auto", other.get("op", "conv2d"), fresh,
                         {**CPU, **{k: v for k, v in other.items() if k == "torch"}},
                         {**MACHINE, **{k: v for k, v in other.items() if k == "cpu"}},
                         int(other.get("threads", 2)))
        assert fresh.calls == 2, other


def test_a_corrupt_cache_is_measured_again(cache_dir: Path) -> None:
    cache_dir.mkdir()
    (cache_dir / "precision.json").write_text("{not json")
    probe = Probe(30.0, 8.0)
    assert precision.choose("auto", "conv3d", probe, CPU, MACHINE, 2).precision == "bf16"
    assert probe.calls == 2
    saved = json.loads((cache_dir / "precision.json").read_text())
    assert list(saved.values()) == [{"fp32": 30.0, "bf16": 8.0}]


def test_a_nodes_other_ranks_read_the_first_ranks_measurement(cache_dir: Path) -> None:
    """Rank 1 waits for local rank 0's entry instead of probing beside it (two probes on
    one node would slow each other and could disagree)."""
    first = Probe(30.0, 8.0)
    writer = threading.Timer(0.3, lambda: precision.choose("auto", "conv3d", first, CPU,
                                                           MACHINE, 2))
    writer.start()
    second = Probe(1.0, 100.0)  # would pick fp32 if it measured
    start = time.monotonic()
    choice = precision.choose("auto", "conv3d", second, CPU, MACHINE, 2, wait_s=10.0)
    writer.join()
    assert (choice.precision, choice.cached, second.calls) == ("bf16", True, 0)
    assert time.monotonic() - start < 5.0


def test_an_unwritable_cache_measures_at_once_instead_of_waiting(tmp_path: Path,
                                                                 monkeypatch) -> None:
    """Where no rank can write the cache (here a file stands where its folder would be),
    waiting for another rank's entry would only cost the whole wait: measure at once."""
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("SCIPERF_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    probe = Probe(30.0, 8.0)
    start = time.monotonic()
    choice = precision.choose("auto", "conv3d", probe, CPU, MACHINE, 2, wait_s=30.0)
    assert choice.precision == "bf16" and probe.calls == 2 and not choice.cached
    assert time.monotonic() - start < 5.0


def test_workloads_name_their_hot_op_and_a_wrong_one_is_refused() -> None:
    from dataclasses import replace

    assert get("cosmoflow").cost.hot_op == "conv3d" and get("deepcam").cost.hot_op == "conv2d"
    with pytest.raises(ValueError, match="hot_op=conv4d is not one of conv3d, conv2d, matmul"):
        replace(get("cosmoflow").cost, hot_op="conv4d")


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_the_frameworks_probe_every_hot_op(framework: str) -> None:
    runtime = pytest.importorskip(f"sciperf_{framework}.runtime")
    for op in ("conv3d", "conv2d", "matmul"):
        for p in ("fp32", "bf16"):
            assert runtime.probe_ms(op, p, reps=1) > 0
    with pytest.raises(ValueError, match="no probe for op 'conv4d'"):
        runtime.probe_ms("conv4d", "fp32")


def test_a_run_records_what_auto_chose_and_why(sciperf_cmd, tiny_mini_data, tmp_path,
                                                cache_dir: Path) -> None:
    import subprocess

    out = tmp_path / "out"
    proc = subprocess.run(
        [*sciperf_cmd, "train", "workload=cosmoflow", "experiment=mini", "precision=auto",
         f"data.dir={tiny_mini_data}", "data.train_samples=64", "data.eval_samples=32",
         "train.max_epochs=1", f"output_dir={out}"],
        capture_output=True, text=True, check=False,
        env={**os.environ, "SCIPERF_CACHE_DIR": str(cache_dir)})
    summary = json.loads((out / "summary.json").read_text())
    choice = summary["precision_choice"]
    assert choice["asked"] == "auto" and choice["precision"] in ("fp32", "bf16")
    assert summary["precision"] == choice["precision"]
    assert set(choice["probe_ms"]) == {"fp32", "bf16"}
    assert f"precision=auto: {choice['precision']} (conv3d forward+backward" in proc.stdout
    assert json.loads((cache_dir / "precision.json").read_text())
