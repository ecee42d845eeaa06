"""data.loader=dali: the DALI pipeline against the native loaders, over real synthetic files.

Without DALI only the error paths run (they need no DALI); everything else skips with the
reason. The pipeline's log1p is correctly rounded (a float64 table), so DALI's x must equal
``log1p`` in float64 rounded to float32 exactly; against the native loaders, whose log1p
are the frameworks' own float32 routines, x is compared in units in the last place (ulp):
torch.log1p is within 1 ulp of correct rounding, tf.math.log1p within 2. Labels must be
bit-identical everywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from sciperf.data import dali as dali_spec
from sciperf.data.sharding import shard
from sciperf.errors import SciperfError
from sciperf.workloads.cosmoflow import data as cf
from sciperf.workloads.cosmoflow import synthetic

SIZE, N, BATCH = 16, 32, 4
SHAPE = (SIZE, SIZE, SIZE, 4)
MAX_ULP = 2

needs_dali = pytest.mark.skipif(
    not dali_spec.available(),
    reason="nvidia-dali-cuda120 not installed (containers/install.sh --dali)")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("dali_data")
    synthetic.generate(synthetic.GenerateRequest(str(root), "npy", N, BATCH, SIZE, 4),
                       show_progress=False)
    return cf.list_samples(root, "train", "npy", N)


@pytest.fixture(scope="module")
def samples(files) -> list[tuple[np.ndarray, np.ndarray]]:
    return [cf.read_sample(f, "npy", SHAPE) for f in files]


@pytest.fixture(scope="module")
def by_label(samples) -> dict[bytes, int]:
    """Each synthetic sample has its own random targets: label bytes → file index."""
    table = {y.tobytes(): i for i, (_, y) in enumerate(samples)}
    assert len(table) == N
    return table


def max_ulp(a: np.ndarray, b: np.ndarray) -> int:
    """Largest distance in float32 steps between two arrays of finite non-negative floats."""
    a, b = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
    return int(np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32)).max())


def exact_log1p(x: np.ndarray) -> np.ndarray:
    """log(1 + x) in float64, rounded once to float32 (the correctly rounded reference)."""
    return np.log1p(x.astype(np.float64)).astype(np.float32)


def check_pairs(batches, samples, by_label) -> list[int]:
    """File indices in batch order; each x is the log1p of its own y's file (readers aligned)."""
    order = []
    for xs, ys in batches:
        for x, y in zip(xs, ys, strict=True):
            i = by_label[np.asarray(y).tobytes()]
            np.testing.assert_array_equal(x, exact_log1p(samples[i][0]))
            order.append(i)
    return order


def to_ndhwc(batches) -> list[tuple[np.ndarray, np.ndarray]]:
    """Framework batches as numpy NDHWC (PyTorch's NCDHW view permuted back)."""
    out = []
    for x, y in batches:
        x = x.numpy()
        if x.shape[1:] != SHAPE:  # PyTorch: (N, C, D, H, W)
            x = x.transpose(0, 2, 3, 4, 1)
        out.append((x, y.numpy()))
    return out


# ------------------------------------------------------------------ errors (no DALI needed)

def test_tfrecord_format_is_a_clear_error(tmp_path) -> None:
    synthetic.generate(synthetic.GenerateRequest(str(tmp_path), "tfrecord", 4, 4, 8, 0),
                       show_progress=False)
    records = cf.list_samples(tmp_path, "train", "tfrecord")
    with pytest.raises(SciperfError, match="DALI reads the fast npy format") as info:
        dali_spec.plan(records, BATCH, 0, False, fmt="tfrecord")
    assert "data.format=tfrecord" in str(info.value)
    assert "sciperf prepare data.format=npy" in str(info.value)
    with pytest.raises(SciperfError, match="DALI reads the fast npy format") as info:
        dali_spec.plan(records, BATCH, 0, False)  # npy claimed, tfrecord files given
    assert str(records[0]) in str(info.value)


MISSING_CHILD = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "nvidia.dali" or name.startswith("nvidia.dali."):
                raise ModuleNotFoundError(f"blocked by test: {name}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    import sciperf.data.dali as dali_spec
    from sciperf.errors import SciperfError

    result = {"available": dali_spec.available(), "imported": "nvidia.dali" in sys.modules}
    try:
        dali_spec.plan([sys.argv[1]], 1, 0, False)
    except SciperfError as exc:
        result["error"] = str(exc)
    print(json.dumps(result))
    """)


def test_missing_dali_is_a_clear_error(files) -> None:
    proc = subprocess.run([sys.executable, "-c", MISSING_CHILD, str(files[0])],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"available": False, "imported": False, "error": dali_spec.MISSING}
    assert "containers/install.sh --dali" in dali_spec.MISSING


def test_dali_order_makes_contiguous_shards_strided() -> None:
    items = list(range(12))
    for world in (1, 2, 3, 4):
        order = dali_spec.dali_order(items, world)
        per = len(items) // world
        for r in range(world):
            assert order[r * per:(r + 1) * per] == shard(items, r, world)


def test_epoch_seed() -> None:
    assert dali_spec.epoch_seed(3, 1) == dali_spec.epoch_seed(3, 1)
    seeds = {dali_spec.epoch_seed(s, e) for s in range(4) for e in range(4)}
    assert len(seeds) == 16
    assert all(0 <= s < 2**31 for s in seeds)


# ------------------------------------------------------------------ the DALI plan

@needs_dali
def test_plan_len_divisibility_and_header_checks(files, tmp_path) -> None:
    p = dali_spec.plan(files, BATCH, 0, True, 1, 2)
    assert (p.samples, p.steps, p.sample_shape) == (N // 2, N // 2 // BATCH, SHAPE)
    with pytest.raises(ValueError, match="do not divide"):
        dali_spec.plan(files[:10], BATCH, 0, False)
    with pytest.raises(ValueError, match="do not divide"):
        dali_spec.plan(files[:12], BATCH, 0, False, 0, 2)  # 6 per rank
    with pytest.raises(SciperfError, match="invalid shard"):
        dali_spec.plan(files, BATCH, 0, False, 2, 2)
    bad = tmp_path / "odd.data.npy"
    np.save(bad, np.zeros(SHAPE, np.float32))
    np.save(cf.label_path(bad), np.zeros(4, np.float32))
    with pytest.raises(SciperfError, match="expected int16") as info:
        dali_spec.plan([bad], 1, 0, False)
    assert str(bad) in str(info.value)


# ------------------------------------------------------------------ PyTorch

@needs_dali
def test_pytorch_matches_native_loader_without_shuffle(torch_dali, files, samples,
                                                      by_label) -> None:
    import torch

    from sciperf_pytorch import input as pt_data
    from sciperf_pytorch.workloads.cosmoflow.backend import CosmoFlowBackend

    native = pt_data.make_loader(files, cf.SampleReader("npy", SHAPE), BATCH, 0, False, 2)
    loader = torch_dali.make_dali_loader(files, BATCH, 0, False)
    assert len(loader) == len(native) == N // BATCH and loader.samples == N
    ref = list(pt_data.batches(native, 0, torch.device("cpu"),
                               CosmoFlowBackend().device_transform))
    got = list(torch_dali.batches(loader, 0, torch.device("cpu")))
    assert len(got) == len(ref)
    for (x, y), (x_ref, y_ref) in zip(got, ref, strict=True):
        assert x.shape == x_ref.shape == (BATCH, 4, SIZE, SIZE, SIZE)
        assert x.dtype == y.dtype == torch.float32
        assert x.is_contiguous(memory_format=torch.channels_last_3d)
        assert torch.equal(y, y_ref)
        assert max_ulp(x.numpy(), x_ref.numpy()) <= 1
    assert check_pairs(to_ndhwc(got), samples, by_label) == list(range(N))
    again = list(loader.epoch(5))  # no shuffle: every epoch is the file order
    assert all(torch.equal(a[1], b[1]) for a, b in zip(again, got, strict=True))


@needs_dali
@pytest.mark.parametrize("mode", ["global", "fixed"])
def test_pytorch_shards_match_native_shards(torch_dali, files, mode) -> None:
    """Rank r of 2 reads the native shard files[r::2]: DALI sharding the whole list
    (global) or DALI over the rank's own shard (fixed, rank=0/world=1)."""
    import torch

    from sciperf_pytorch import input as pt_data
    from sciperf_pytorch.workloads.cosmoflow.backend import CosmoFlowBackend

    log1p = CosmoFlowBackend().device_transform
    for rank in range(2):
        mine = shard(files, rank, 2)
        native = pt_data.make_loader(mine, cf.SampleReader("npy", SHAPE), BATCH, 0, False, 2)
        ref = list(pt_data.batches(native, 0, torch.device("cpu"), log1p))
        args = (files, BATCH, 0, False, rank, 2) if mode == "global" else (mine, BATCH, 0,
                                                                             False, 0, 1)
        got = list(torch_dali.make_dali_loader(*args).epoch(0))
        assert len(got) == len(ref) == N // 2 // BATCH
        for (x, y), (x_ref, y_ref) in zip(got, ref, strict=True):
            assert torch.equal(y, y_ref)
            assert max_ulp(x.numpy(), x_ref.numpy()) <= 1


@needs_dali
def test_pytorch_shuffle_is_an_exact_permutation_per_epoch(torch_dali, files, samples,
                                                           by_label) -> None:
    loader = torch_dali.make_dali_loader(files, BATCH, 11, True)
    orders = [check_pairs(to_ndhwc(loader.epoch(e)), samples, by_label) for e in range(3)]
    for order in orders:
        assert sorted(order) == list(range(N))  # every sample exactly once
    assert orders[0] != orders[1] != orders[2] != orders[0]  # a new order every epoch
    assert orders[0] != list(range(N))
    twin = torch_dali.make_dali_loader(files, BATCH, 11, True)
    assert check_pairs(to_ndhwc(twin.epoch(2)), samples, by_label) == orders[2]  # (seed, epoch)
    assert check_pairs(to_ndhwc(twin.epoch(0)), samples, by_label) == orders[0]
    other = torch_dali.make_dali_loader(files, BATCH, 12, True)
    assert check_pairs(to_ndhwc(other.epoch(0)), samples, by_label) != orders[0]


@needs_dali
def test_pytorch_two_ranks_disjoint_and_complete(torch_dali, files, samples, by_label) -> None:
    ranks = [torch_dali.make_dali_loader(files, BATCH, 5, True, r, 2) for r in range(2)]
    seen = []
    for epoch in range(3):
        parts = [check_pairs(to_ndhwc(r.epoch(epoch)), samples, by_label) for r in ranks]
        assert len(parts[0]) == len(parts[1]) == N // 2
        assert not set(parts[0]) & set(parts[1])
        assert sorted(parts[0] + parts[1]) == list(range(N))
        seen.append(parts)
    assert seen[0] != seen[1]


@needs_dali
def test_pytorch_break_early_then_next_epoch(torch_dali, files) -> None:
    loader = torch_dali.make_dali_loader(files, BATCH, 0, True)
    it = loader.epoch(0)
    next(it)
    it.close()
    for x, _ in loader.epoch(0):
        assert x.shape[0] == BATCH
        break
    assert len(list(loader.epoch(1))) == len(loader)


@needs_dali
def test_pytorch_corrupt_file_is_a_sciperf_error(torch_dali, files, tmp_path) -> None:
    bad_files = _copy_with_truncated(files[:8], tmp_path, bad=5)
    loader = torch_dali.make_dali_loader(bad_files, BATCH, 0, False)
    with pytest.raises(SciperfError, match="DALI input pipeline failed") as info:
        list(loader.epoch(0))
    assert str(bad_files[5]) in str(info.value)
    assert "\n" not in str(info.value)


@needs_dali
@pytest.mark.parametrize("case", ["shape", "text-dtype"])
def test_pytorch_a_bad_sample_dali_names_no_file_for_is_named(torch_dali, files, tmp_path,
                                                              case: str) -> None:
    """DALI reports a batch of unequal shapes without the file, and a dtype its reader
    refuses below two lines that say nothing: either way the line names the file (headers
    checked against the plan on failure; DALI's own line about the file)."""
    bad_files = _copy_with_truncated(files[:8], tmp_path, bad=-1)
    victim = bad_files[5]
    x = np.zeros((SIZE, SIZE, SIZE // 2, 4), np.int16) if case == "shape" else \
        np.full(SHAPE, "a", dtype="<U1")
    np.save(victim, x)
    loader = torch_dali.make_dali_loader(bad_files, BATCH, 0, False)
    with pytest.raises(SciperfError, match="DALI input pipeline failed") as info:
        list(loader.epoch(0))
    line = str(info.value)
    if case == "shape":  # DALI: "The batch must be representable as a tensor…", no file
        assert line.startswith(f"{victim}: expected int16 {SHAPE}, found "), line
    else:  # DALI's own line names it, below two "Critical error in pipeline:" lines
        assert line.startswith("DALI input pipeline failed: ") and "U1" in line, line
        assert line.endswith(str(victim)), line
    assert "\n" not in line


def _copy_with_truncated(files: list[Path], folder: Path, bad: int) -> list[Path]:
    """Copies of `files` (data + label) where data file `bad` is cut in half."""
    out = []
    for i, f in enumerate(files):
        data = f.read_bytes()
        dst = folder / f.name
        dst.write_bytes(data[: len(data) // 2] if i == bad else data)
        cf.label_path(dst).write_bytes(cf.label_path(f).read_bytes())
        out.append(dst)
    return out


# ------------------------------------------------------------------ TensorFlow

@needs_dali
def test_tensorflow_matches_native_loader_without_shuffle(tf_dali, files, samples,
                                                         by_label) -> None:
    from sciperf_tensorflow import input as tf_data
    from sciperf_tensorflow.workloads.cosmoflow.backend import log1p

    native = tf_data.make_loader(files, cf.SampleReader("npy", SHAPE), BATCH, 0, False, 2)
    loader = tf_dali.make_dali_loader(files, BATCH, 0, False)
    assert len(loader) == len(native) == N // BATCH and loader.samples == N
    ref = list(tf_data.batches(native, 0, log1p))
    got = list(tf_dali.batches(loader, 0))
    assert len(got) == len(ref)
    for (x, y), (x_ref, y_ref) in zip(got, ref, strict=True):
        assert tuple(x.shape) == tuple(x_ref.shape) == (BATCH, *SHAPE)
        assert x.dtype.name == y.dtype.name == "float32"
        assert np.array_equal(y.numpy(), y_ref.numpy())
        assert max_ulp(x.numpy(), x_ref.numpy()) <= MAX_ULP  # TF's log1p: ≤ 2 ulp
    assert check_pairs(to_ndhwc(got), samples, by_label) == list(range(N))


@needs_dali
def test_tensorflow_shards_match_native_shards(tf_dali, files) -> None:
    from sciperf_tensorflow import input as tf_data
    from sciperf_tensorflow.workloads.cosmoflow.backend import log1p

    for rank in range(2):
        mine = shard(files, rank, 2)
        native = tf_data.make_loader(mine, cf.SampleReader("npy", SHAPE), BATCH, 0, False, 2)
        ref = list(tf_data.batches(native, 0, log1p))
        got = list(tf_dali.make_dali_loader(files, BATCH, 0, False, rank, 2).epoch(0))
        assert len(got) == len(ref) == N // 2 // BATCH
        for (x, y), (x_ref, y_ref) in zip(got, ref, strict=True):
            assert np.array_equal(y.numpy(), y_ref.numpy())
            assert max_ulp(x.numpy(), x_ref.numpy()) <= MAX_ULP


@needs_dali
def test_tensorflow_shuffle_and_two_ranks(tf_dali, files, samples, by_label) -> None:
    loader = tf_dali.make_dali_loader(files, BATCH, 11, True)
    orders = [check_pairs(to_ndhwc(loader.epoch(e)), samples, by_label) for e in range(2)]
    assert all(sorted(o) == list(range(N)) for o in orders)
    assert orders[0] != orders[1]
    twin = tf_dali.make_dali_loader(files, BATCH, 11, True)
    assert check_pairs(to_ndhwc(twin.epoch(1)), samples, by_label) == orders[1]
    parts = [check_pairs(to_ndhwc(tf_dali.make_dali_loader(files, BATCH, 5, True, r, 2)
                                  .epoch(1)), samples, by_label) for r in range(2)]
    assert not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1]) == list(range(N))


@needs_dali
def test_tensorflow_corrupt_file_is_a_sciperf_error(tf_dali, files, tmp_path) -> None:
    bad_files = _copy_with_truncated(files[:8], tmp_path, bad=5)
    loader = tf_dali.make_dali_loader(bad_files, BATCH, 0, False)
    with pytest.raises(SciperfError, match="DALI input pipeline failed") as info:
        list(loader.epoch(0))
    assert str(bad_files[5]) in str(info.value)


@needs_dali
def test_frameworks_get_the_same_dali_batches(torch_dali, tf_dali, files) -> None:
    """One pipeline definition: PyTorch and TF see bit-identical batches, shuffled too."""
    for args in ((files, BATCH, 3, True, 1, 2), (files, BATCH, 0, False)):
        pt = to_ndhwc(torch_dali.make_dali_loader(*args).epoch(2))
        tf_ = to_ndhwc(tf_dali.make_dali_loader(*args).epoch(2))
        assert len(pt) == len(tf_)
        for (xa, ya), (xb, yb) in zip(pt, tf_, strict=True):
            assert np.array_equal(xa, xb) and np.array_equal(ya, yb)


# ------------------------------------------------------------------ the backends, swapped

@pytest.fixture(scope="module")
def mini_root(tmp_path_factory) -> Path:
    """Universes of the mini model's input size (32³)."""
    root = tmp_path_factory.mktemp("dali_mini")
    synthetic.generate(synthetic.GenerateRequest(str(root), "npy", 8, 8, 32, 1),
                       show_progress=False)
    return root


def _native_then_swapped(module, cls, dali_module, framework: str, root: Path, monkeypatch,
                         get_weights, set_weights) -> None:
    """A backend on the native loader, then one configured with data.loader=dali, from
    the same weights: the same metric and the same training loss (inputs differ by
    ≤ 2 ulp)."""
    from sciperf.backends import RunContext
    from sciperf.config import compose
    from sciperf.workloads import get
    from sciperf.workloads.cosmoflow import spec as spec

    cfg = compose([f"framework={framework}", "experiment=mini", "precision=fp32",
                   f"data.dir={root}", "train.global_batch_size=4", "data.shuffle=false",
                   "data.train_samples=8", "data.eval_samples=8"])
    ctx = RunContext(cfg, get(cfg.workload), cf.list_samples(root, "train", "npy"),
                     cf.list_samples(root, "validation", "npy"), 4)
    native = cls()
    native.setup(ctx)
    start = get_weights(native)
    metric, epoch = native.evaluate(), native.train_epoch(0, 0.01)
    cfg_dali = compose([f"framework={framework}", "experiment=mini", "precision=fp32",
                        f"data.dir={root}", "train.global_batch_size=4", "data.shuffle=false",
                        "data.train_samples=8", "data.eval_samples=8", "data.loader=dali"])
    swapped = cls()
    swapped.setup(RunContext(cfg_dali, get(cfg_dali.workload), ctx.train_files,
                             ctx.eval_files, 4))
    assert isinstance(swapped.train_loader, dali_module.DaliLoader)
    assert isinstance(swapped.eval_loader, dali_module.DaliLoader)
    assert len(swapped.train_loader) == len(native.train_loader) == 2
    set_weights(swapped, start)
    np.testing.assert_allclose(swapped.evaluate(), metric, rtol=1e-5)
    result = swapped.train_epoch(0, 0.01)
    assert result.samples == epoch.samples == 8
    np.testing.assert_allclose(result.loss, epoch.loss, rtol=1e-5)


@needs_dali
def test_pytorch_backend_runs_on_dali(torch_dali, mini_root, monkeypatch) -> None:
    import copy

    from sciperf_pytorch.workloads.cosmoflow import backend

    _native_then_swapped(backend, backend.CosmoFlowBackend, torch_dali, "pytorch", mini_root,
                         monkeypatch, lambda b: copy.deepcopy(b.model.state_dict()),
                         lambda b, w: b.model.load_state_dict(w))


@needs_dali
def test_tensorflow_backend_runs_on_dali(tf_dali, mini_root, monkeypatch) -> None:
    from sciperf_tensorflow.workloads.cosmoflow import backend

    _native_then_swapped(backend, backend.CosmoFlowBackend, tf_dali, "tensorflow", mini_root,
                         monkeypatch, lambda b: b.model.get_weights(),
                         lambda b, w: b.model.set_weights(w))


@needs_dali
def test_model_input_size_mismatch_is_a_clear_error(files) -> None:
    with pytest.raises(SciperfError, match=r"expected int16 \(32, 32, 32, 4\)") as info:
        dali_spec.plan(files, BATCH, 0, False, shape=(32, 32, 32, 4))
    assert str(files[0]) in str(info.value)
