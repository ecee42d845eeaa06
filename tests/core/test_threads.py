"""sciperf.threads: small layers run side by side in TensorFlow's inter-op pool, large ones
one at a time over every core; PyTorch (no inter-op pool) gives every op all cores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sciperf import threads
from sciperf.config import compose
from sciperf.errors import SciperfError


def test_small_layers_run_side_by_side_and_large_ones_over_every_core() -> None:
    small = threads.layout(2, 0, 51e6)  # DeepCAM mini: 51 MFLOP a layer a step
    assert (small.intra, small.inter) == (1, 2) and "side by side" in small.reason
    large = threads.layout(2, 0, 599e6)  # CosmoFlow mini
    assert (large.intra, large.inter) == (2, 1)
    assert (threads.layout(16, 0, 1e9).intra, threads.layout(16, 0, 1e9).inter) == (8, 2)
    assert threads.layout(1, 0, 1e6).inter == 1  # one core: nothing to put side by side
    assert threads.layout(4, 0, None).inter == 1  # unknown work: one op at a time


def test_an_asked_inter_op_count_shares_out_the_cores() -> None:
    asked = threads.layout(8, 4, 1e12)
    assert (asked.intra, asked.inter) == (2, 4) and "asked" in asked.reason


def test_layer_work_is_the_models_counted_flops_per_layer_and_step() -> None:
    from sciperf.tools.characterize import count_flops, counted_layers
    from sciperf.workloads import get

    cfg = compose(["workload=deepcam", "experiment=mini"])
    model = get("deepcam").model_spec(cfg)
    layers, _ = counted_layers(cfg, model)
    assert threads.layer_flops(cfg, 8) == pytest.approx(
        count_flops(model, layers).train * 8 / len(layers))


class _Runtime:
    INTER_OP_POOL = False

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def setup_threads(self, intra: int, inter: int) -> int:
        self.calls.append((intra, inter))
        return intra


def test_a_framework_without_an_inter_op_pool_gives_each_op_every_core() -> None:
    cfg = compose(["workload=deepcam", "experiment=mini", "framework.threads=4"])
    runtime = _Runtime()
    assert threads.apply(cfg, runtime, 8).inter == 1 and runtime.calls == [(4, 1)]
    runtime.INTER_OP_POOL = True
    assert threads.apply(cfg, runtime, 8).inter == 2 and runtime.calls[-1] == (2, 2)
    cfg = compose(["workload=deepcam", "experiment=mini", "framework.threads=4",
                   "framework.inter_op_threads=1"])
    assert threads.apply(cfg, runtime, 8).inter == 1 and runtime.calls[-1] == (4, 1)
    runtime.INTER_OP_POOL = False  # PyTorch: an asked count was ignored in silence
    with pytest.raises(SciperfError, match=r"^framework.inter_op_threads=1: pytorch runs one "
                                           r"op at a time \(it has no inter-op pool\)"):
        threads.apply(cfg, runtime, 8)


def test_tensorflow_really_runs_the_deepcam_mini_side_by_side(tmp_path: Path) -> None:
    """The backend's setup is TensorFlow's first op: its pools are fixed to the layout."""
    pytest.importorskip("tensorflow")
    code = f"""
import json, tensorflow as tf
from sciperf.backends import RunContext, load_backend
from sciperf.config import compose
from sciperf.errors import SciperfError
from sciperf.workloads import get
cfg = compose(["workload=deepcam", "experiment=mini", "framework=tensorflow",
               "framework.threads=2", "precision=fp32", "data.dir={tmp_path}"])
backend = load_backend("tensorflow", "deepcam")
try:
    backend.setup(RunContext(cfg, get("deepcam"), [], [], 4))
except Exception:
    pass  # no data: the threads are set before the loaders need any
print(json.dumps([tf.config.threading.get_intra_op_parallelism_threads(),
                  tf.config.threading.get_inter_op_parallelism_threads()]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [1, 2]
