"""data.loader=dali for DeepCAM: the DALI pipeline against the native loaders, over data
made by the real ``sciperf prepare`` (10 training and 7 validation samples, 32×48×16).

The pipeline normalises with the native reader's two float32 operations in the same order,
so x must be bit-identical to the native loaders' (0 ulp, measured here on the CPU) and
labels must equal them in value and dtype (int64 for PyTorch, int32 for TensorFlow).
Sharding must be the driver's: training every file of the rank's shard at most once per
epoch in full batches (the remainder dropped), validation every file exactly once with a
smaller last batch. Samples are told apart by their normalised bytes (each synthetic sample
is its own random field), so any duplicate, loss or misordering is caught. Without DALI
only the error paths run; everything else skips with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sciperf.config import compose
from sciperf.data import dali as dali_spec
from sciperf.distributed import RankInfo
from sciperf.errors import SciperfError
from sciperf.run import resolve_files
from sciperf.workloads import get
from sciperf.workloads.deepcam import dali as dc_dali
from sciperf.workloads.deepcam import data as dc
from sciperf.workloads.deepcam import spec as spec
from testkit import sciperf

H, W, C = 32, 48, 16
N_TRAIN, N_EVAL, BATCH = 10, 7, 4
SMALL = ["workload=deepcam", "experiment=mini", f"model.height={H}", f"model.width={W}",
         f"data.train_samples={N_TRAIN}", f"data.eval_samples={N_EVAL}"]
NO_DALI = "nvidia-dali-cuda120 not installed (containers/install.sh --dali)"

needs_dali = pytest.mark.skipif(not dali_spec.available(), reason=NO_DALI)


def prepare(root: Path, fmt: str) -> Path:
    proc = sciperf("prepare", *SMALL, f"data.format={fmt}", f"data.dir={root}")
    assert proc.returncode == 0, proc.stderr
    return root


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return prepare(tmp_path_factory.mktemp("deepcam_dali"), "npy")


@pytest.fixture(scope="module")
def h5_root(tmp_path_factory) -> Path:
    return prepare(tmp_path_factory.mktemp("deepcam_dali_h5"), "hdf5")


@pytest.fixture(scope="module")
def model() -> spec.ModelSpec:
    return spec.ModelSpec(**compose(SMALL).model)


@pytest.fixture(scope="module")
def train_files(root) -> list[Path]:
    return dc.list_samples(root, "train", "npy")


@pytest.fixture(scope="module")
def eval_files(root) -> list[Path]:
    return dc.list_samples(root, "validation", "npy")


class Catalog:
    """The native reader's (x, y) of every sample; identifies a batch row by its x bytes."""

    def __init__(self, root: Path, files: list[Path]):
        read = dc.make_reader(root, "npy", (H, W, C))
        self.samples = [read(f) for f in files]
        self.index = {x.tobytes(): i for i, (x, _) in enumerate(self.samples)}
        assert len(self.index) == len(files)  # every sample distinguishable

    def order(self, batches: list[tuple[np.ndarray, np.ndarray]]) -> list[int]:
        """Sample indices in batch order; each row's x bit-identical to the native
        reader's and its y that same sample's labels (data and label readers aligned)."""
        out = []
        for xs, ys in batches:
            for x, y in zip(xs, ys, strict=True):
                i = self.index.get(np.ascontiguousarray(x, np.float32).tobytes())
                assert i is not None, "a DALI sample differs from every native sample"
                np.testing.assert_array_equal(y, self.samples[i][1])
                out.append(i)
        return out


@pytest.fixture(scope="module")
def train_catalog(root, train_files) -> Catalog:
    return Catalog(root, train_files)


@pytest.fixture(scope="module")
def eval_catalog(root, eval_files) -> Catalog:
    return Catalog(root, eval_files)


def to_nhwc(batches) -> list[tuple[np.ndarray, np.ndarray]]:
    """Framework batches as numpy NHWC (PyTorch's NCHW view permuted back)."""
    out = []
    for x, y in batches:
        x = x.numpy()
        if x.shape[1:] != (H, W, C):  # PyTorch: (N, C, H, W)
            x = x.transpose(0, 2, 3, 1)
        out.append((x, y.numpy()))
    return out


def max_ulp(a: np.ndarray, b: np.ndarray) -> int:
    """Largest distance in float32 steps (same-sign values: normalised data is ≥ 0)."""
    a, b = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
    return int(np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32)).max())


# ------------------------------------------------------------------ errors (no DALI needed)

def test_hdf5_is_one_clear_line(h5_root) -> None:
    h5 = dc.list_samples(h5_root, "train", "hdf5")
    with pytest.raises(SciperfError) as info:
        dali_spec.plan(h5, BATCH, 0, False, fmt="hdf5", workload="deepcam", root=h5_root,
                       remainder="drop")
    assert str(info.value) == f"data.format=hdf5: {dc_dali.NOT_NPY}"
    assert "workload=deepcam data.source=convert" in str(info.value)
    with pytest.raises(SciperfError, match="DALI reads the fast npy format") as info:
        dali_spec.plan(h5, BATCH, 0, False, workload="deepcam", root=h5_root,
                       remainder="drop")  # npy claimed, hdf5 files given
    assert str(h5[0]) in str(info.value)


def test_unknown_workload_is_a_clear_error() -> None:
    with pytest.raises(SciperfError, match="does not support workload=oc20"):
        dali_spec.sample_format("oc20")


def test_train_with_hdf5_and_dali_exits_2_naming_data_format(h5_root, tmp_path) -> None:
    """The backends no longer ignore data.loader=dali: hdf5 is refused in one line."""
    pytest.importorskip("torch")
    proc = sciperf("train", *SMALL, "data.format=hdf5", "data.loader=dali",
                   "train.max_epochs=1", "framework.threads=1", f"data.dir={h5_root}",
                   f"output_dir={tmp_path}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "data.format=hdf5" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------ the plan

@needs_dali
def test_plan_batches_follow_the_native_rule(root, train_files, eval_files, tmp_path) -> None:
    def deepcam_plan(files, remainder, **kw):
        return dali_spec.plan(files, BATCH, 0, False, workload="deepcam", root=root,
                              remainder=remainder, **kw)

    train, evals = deepcam_plan(train_files, "drop"), deepcam_plan(eval_files, "keep")
    assert (train.sizes, train.samples, train.steps) == ([4, 4], 8, 2)
    assert (evals.sizes, evals.samples, evals.steps) == ([4, 3], 7, 2)
    assert (evals.sample_shape, evals.label_shape, evals.label_dtype) == (
        (H, W, C), (H, W), "uint8")
    shift, scale = dc.normalisation(dc.stats_path(root))
    assert evals.transform == dc_dali.MinMax(tuple(shift.tolist()), tuple(scale.tolist()))
    empty = deepcam_plan([], "keep", shape=(H, W, C))  # an empty uneven validation shard
    assert (empty.steps, empty.samples, empty.sample_shape) == (0, 0, (H, W, C))
    with pytest.raises(ValueError, match="world=1"):
        deepcam_plan(eval_files, "keep", rank=0, world=2)
    with pytest.raises(SciperfError, match=r"expected float32 \(32, 32, 16\)") as info:
        deepcam_plan(eval_files, "keep", shape=(32, 32, 16))  # not the model's input
    assert str(eval_files[0]) in str(info.value)
    bad = tmp_path / "odd.data.npy"
    np.save(bad, np.zeros((H, W, C), np.float32))
    np.save(dc.label_path(bad), np.zeros((H, W), np.int64))
    with pytest.raises(SciperfError, match=r"expected uint8 \(32, 48\)") as info:
        deepcam_plan([bad], "keep")
    assert str(dc.label_path(bad)) in str(info.value)


# ------------------------------------------------------------------ PyTorch

def _native_pt(root, model, files, remainder, seed=0, shuffle=False):
    import torch

    from sciperf_pytorch import input as pt

    loader = pt.make_loader(files, dc.model_reader(root, "npy", model), BATCH, seed, shuffle, 2,
                            remainder)
    return list(pt.batches(loader, 0, torch.device("cpu")))


@needs_dali
def test_pytorch_eval_batches_equal_native(torch_dali, root, model, eval_files,
                                           eval_catalog) -> None:
    import torch

    loader = torch_dali.make_loader(eval_files, dc.model_reader(root, "npy", model), "deepcam",
                                    root, BATCH, 0, False, 2, "keep")
    ref = _native_pt(root, model, eval_files, "keep")
    got = list(torch_dali.batches(loader, 0, torch.device("cpu")))
    assert [len(y) for _, y in got] == [len(y) for _, y in ref] == [4, 3]
    assert len(loader) == 2 and loader.samples == N_EVAL
    for (x, y), (x_ref, y_ref) in zip(got, ref, strict=True):
        assert x.shape == x_ref.shape and x.shape[1:] == (C, H, W)
        assert x.is_contiguous(memory_format=torch.channels_last)
        assert x.dtype == torch.float32 and y.dtype == y_ref.dtype == torch.int64
        assert max_ulp(x.numpy(), x_ref.numpy()) == 0  # bit-identical normalisation
        assert torch.equal(y, y_ref)
    assert eval_catalog.order(to_nhwc(got)) == list(range(N_EVAL))  # each once, in order
    assert eval_catalog.order(to_nhwc(loader.epoch(3))) == list(range(N_EVAL))


@needs_dali
@pytest.mark.parametrize("batch", [4, 5])
def test_pytorch_training_epochs_cover_the_shard_once_in_full_batches(
        torch_dali, root, model, train_files, train_catalog, batch) -> None:
    loader = torch_dali.make_loader(train_files, dc.model_reader(root, "npy", model), "deepcam",
                                    root, batch, 7, True, 2, "drop")
    full = N_TRAIN // batch * batch
    orders = []
    for epoch in range(3):
        batches = to_nhwc(loader.epoch(epoch))
        assert [len(y) for _, y in batches] == [batch] * (N_TRAIN // batch)
        order = train_catalog.order(batches)
        assert len(order) == len(set(order)) == full  # no sample twice, remainder dropped
        orders.append(order)
    assert orders[0] != orders[1] != orders[2]  # a new permutation every epoch
    twin = torch_dali.make_loader(train_files, dc.model_reader(root, "npy", model), "deepcam",
                                  root, batch, 7, True, 2, "drop")
    assert train_catalog.order(to_nhwc(twin.epoch(1))) == orders[1]  # fixed by (seed, epoch)
    if full == N_TRAIN:
        assert all(sorted(o) == list(range(N_TRAIN)) for o in orders)


@needs_dali
def test_two_ranks_eval_shards_together_are_the_validation_set(torch_dali, root, model,
                                                               eval_catalog) -> None:
    """The driver's uneven validation shards (4 + 3 files), each read by DALI with a smaller
    last batch: disjoint, and together every validation sample exactly once."""
    cfg = compose([*SMALL, f"data.dir={root}", "train.global_batch_size=4"])
    plans = [resolve_files(cfg, RankInfo(r, 2), get("deepcam")) for r in range(2)]
    assert [len(p.evals) for p in plans] == [4, 3] and plans[0].local_batch == 2
    parts = []
    for p in plans:
        loader = torch_dali.make_loader(p.evals, dc.model_reader(root, "npy", model), "deepcam",
                                        root, p.local_batch, 0, False, 2, "keep")
        batches = to_nhwc(loader.epoch(0))
        assert [len(y) for _, y in batches] == ([2, 2] if len(p.evals) == 4 else [2, 1])
        parts.append(eval_catalog.order(batches))
    assert not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1]) == list(range(N_EVAL))


@needs_dali
def test_pytorch_corrupt_file_is_one_line(torch_dali, root, model, eval_files,
                                          tmp_path) -> None:
    copies = []
    for i, f in enumerate(eval_files):
        dst = tmp_path / f.name
        data = f.read_bytes()
        dst.write_bytes(data[: len(data) // 2] if i == 5 else data)
        dc.label_path(dst).write_bytes(dc.label_path(f).read_bytes())
        copies.append(dst)
    loader = torch_dali.make_loader(copies, dc.model_reader(root, "npy", model), "deepcam",
                                    root, BATCH, 0, False, 2, "keep")
    with pytest.raises(SciperfError, match="DALI input pipeline failed") as info:
        list(loader.epoch(0))
    assert str(copies[5]) in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------------------------ TensorFlow

@needs_dali
def test_tensorflow_eval_batches_equal_native(tf_dali, root, model, eval_files,
                                              eval_catalog) -> None:
    from sciperf_tensorflow import input as tf_data

    reader = dc.model_reader(root, "npy", model)
    loader = tf_dali.make_loader(eval_files, reader, "deepcam", root, BATCH, 0, False, 2,
                                 "keep")
    native = tf_data.make_loader(eval_files, reader, BATCH, 0, False, 2, "keep")
    ref = list(tf_data.batches(native, 0))
    got = list(tf_dali.batches(loader, 0))
    assert [int(y.shape[0]) for _, y in got] == [int(y.shape[0]) for _, y in ref] == [4, 3]
    for (x, y), (x_ref, y_ref) in zip(got, ref, strict=True):
        assert tuple(x.shape) == tuple(x_ref.shape) and tuple(x.shape[1:]) == (H, W, C)
        assert x.dtype.name == "float32" and y.dtype.name == y_ref.dtype.name == "int32"
        assert max_ulp(x.numpy(), x_ref.numpy()) == 0
        assert np.array_equal(y.numpy(), y_ref.numpy())
    assert eval_catalog.order(to_nhwc(got)) == list(range(N_EVAL))


@needs_dali
def test_tensorflow_training_epoch_covers_the_shard_once(tf_dali, root, model, train_files,
                                                         train_catalog) -> None:
    loader = tf_dali.make_loader(train_files, dc.model_reader(root, "npy", model), "deepcam",
                                 root, BATCH, 7, True, 2, "drop")
    orders = []
    for epoch in range(2):
        batches = to_nhwc(loader.epoch(epoch))
        assert [len(y) for _, y in batches] == [BATCH, BATCH]
        order = train_catalog.order(batches)
        assert len(set(order)) == len(order) == 8
        orders.append(order)
    assert orders[0] != orders[1]


@needs_dali
def test_frameworks_get_the_same_dali_batches(torch_dali, tf_dali, root, model,
                                              train_files, eval_files) -> None:
    """One pipeline definition: PyTorch and TF see bit-identical batches, shuffled too."""
    for files, shuffle, remainder in ((train_files, True, "drop"), (eval_files, False, "keep")):
        args = (files, str(root), "npy", model, BATCH, 3, shuffle, 2, remainder)
        pt = to_nhwc(torch_dali.make_loader(files, dc.model_reader(root, "npy", model),
                                            "deepcam", root, *args[4:]).epoch(2))
        tf_ = to_nhwc(tf_dali.make_loader(files, dc.model_reader(root, "npy", model),
                                          "deepcam", root, *args[4:]).epoch(2))
        assert len(pt) == len(tf_)
        for (xa, ya), (xb, yb) in zip(pt, tf_, strict=True):
            assert np.array_equal(xa, xb) and np.array_equal(ya, yb)


# ------------------------------------------------------------------ the backends, swapped

def _native_then_dali(framework: str, root: Path, train_files: list[Path],
                      eval_files: list[Path], dali_module, backend_class, models) -> None:
    """The DeepCAM backend on the native loader, then with data.loader=dali, from the same
    weights: DALI loaders in use, the same validation IoU and training loss (bit-identical
    inputs in the same order)."""
    from sciperf.backends import RunContext
    from sciperf.workloads import get

    base = [*SMALL, f"framework={framework}", "precision=fp32", f"data.dir={root}",
            "train.global_batch_size=4", "data.shuffle=false", "framework.threads=1"]
    results = []
    start = None
    for loader in ("native", "dali"):
        cfg = compose([*base, f"data.loader={loader}"])
        backend = backend_class()
        backend.setup(RunContext(cfg, get(cfg.workload), train_files, eval_files, 4))
        is_dali = isinstance(backend.train_loader, dali_module.DaliLoader)
        assert is_dali == isinstance(backend.eval_loader, dali_module.DaliLoader)
        assert is_dali == (loader == "dali")
        assert len(backend.train_loader) == len(backend.eval_loader) == 2
        if start is None:
            start = {k: np.array(v, copy=True)  # not views of weights training will change
                     for k, v in models.export_weights(backend.model).items()}
        else:
            models.import_weights(backend.model, start)
        metric = backend.evaluate()
        results.append((metric, backend.train_epoch(0, 0.0)))
    (m_native, e_native), (m_dali, e_dali) = results
    np.testing.assert_allclose(m_dali, m_native, rtol=1e-12)
    assert e_dali.samples == e_native.samples == 8
    np.testing.assert_allclose(e_dali.loss, e_native.loss, rtol=1e-6)


@needs_dali
def test_pytorch_backend_uses_dali(torch_dali, root, train_files, eval_files) -> None:
    from sciperf_pytorch.workloads.deepcam import backend as pt
    from sciperf_pytorch.workloads.deepcam import model as pt_models

    _native_then_dali("pytorch", root, train_files, eval_files, torch_dali, pt.DeepCamBackend,
                      pt_models)


@needs_dali
def test_tensorflow_backend_uses_dali(tf_dali, root, train_files, eval_files) -> None:
    from sciperf_tensorflow.workloads.deepcam import backend as tfd
    from sciperf_tensorflow.workloads.deepcam import model as tf_models

    _native_then_dali("tensorflow", root, train_files, eval_files, tf_dali,
                      tfd.DeepCamBackend, tf_models)


@needs_dali
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_sciperf_train_with_dali_logs_eval_accuracy(torch_dali, root, tmp_path,
                                                    framework) -> None:
    if framework == "tensorflow":
        pytest.importorskip("tensorflow")
    out = tmp_path / framework
    proc = sciperf("train", *SMALL, f"framework={framework}", "data.loader=dali",
                   "train.max_epochs=1", "framework.threads=1", f"data.dir={root}",
                   f"output_dir={out}")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 1: target not reached
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] in ("success", "aborted") and summary["epochs"] == 1
    assert summary["config"]["data"]["loader"] == "dali"
    accs = [json.loads(ln[len(":::MLLOG "):])["value"]
            for ln in (out / "result_0.txt").read_text().splitlines()
            if ln.startswith(":::MLLOG") and '"key": "eval_accuracy"' in ln]
    assert len(accs) == 1 and 0.0 <= accs[0] <= 1.0
    assert "eval_accuracy" in proc.stdout
