"""OC20 data layer: the reference LMDB (read from records real torch pickled, written by an
independent writer), malicious records refused with nothing run, the synthetic EMT slabs
(both formats equal, deterministic, physically right, graphs as specified), collate, the
listing, every kind of bad input as one line naming the file (reader and CLI, exit 2), and
the LMDB → npy converter (equal shards, nothing half-written on failure).

Datasets are tiny (2×2×3 slabs, cutoff 4 Å, ≤ 12 neighbours, 5 structures per container
so a split spans several containers) and generated once per module. `sciperf prepare` runs
through its main in this process (testkit.cli), except where two generator processes are
what is tested."""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sciperf.data import pickles
from sciperf.errors import SciperfError
from sciperf.workloads.oc20 import data, graph, synthetic
from sciperf.workloads.oc20.spec import ModelSpec
from testkit import cli, sciperf

CUTOFF = 4.0
REQUEST = synthetic.GenerateRequest(
    root="", train_samples=12, eval_samples=4, seed=3, cutoff=CUTOFF, max_neighbours=12,
    slab=(2, 2, 3), metals=("Cu", "Pt"), rattle=0.05, adsorbate_probability=0.5,
    per_container=5)
TINY = ModelSpec(hidden_channels=16, out_emb_channels=16, int_emb_size=8, basis_emb_size=4,
                 num_blocks=1, cutoff=CUTOFF)
EXISTING = ["data.source=existing", "data.train_samples=12", "data.eval_samples=4",
            f"model.cutoff={CUTOFF}"]


def _request(root: Path, **changes: Any) -> synthetic.GenerateRequest:
    return dataclasses.replace(REQUEST, root=str(root), **changes)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's synthetic set (never modified: tests that damage data copy it)."""
    root = tmp_path_factory.mktemp("oc20")
    synthetic.generate(_request(root), workers=1, show_progress=False)
    return root


@pytest.fixture
def copy(dataset: Path, tmp_path: Path) -> Path:
    """A private copy of the synthetic set to damage."""
    return Path(shutil.copytree(dataset, tmp_path / "data"))


def _read_split(root: Path, split: str, fmt: str) -> list[dict[str, Any]]:
    reader = data.StructureReader(fmt, CUTOFF)
    try:
        return [reader(p) for p in data.list_samples(root, split, fmt)]
    finally:
        reader.close()


def _write_raw_lmdb(path: Path, values: list[bytes], length: bool = True) -> None:
    """An LMDB laid out as spec/oc20.md §2 says, written with the lmdb package itself."""
    import lmdb

    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    env = lmdb.open(str(path), subdir=False, map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i, value in enumerate(values):
            txn.put(f"{i}".encode("ascii"), value)
        if length:
            txn.put(b"length", pickle.dumps(len(values), protocol=-1))
    env.close()
    Path(f"{path}-lock").unlink(missing_ok=True)


def _prepare(*args: str) -> subprocess.CompletedProcess:
    """`sciperf prepare workload=oc20 ARGS` in this process."""
    return cli("prepare", "workload=oc20", *args)


def _assert_cli_error(proc: subprocess.CompletedProcess, *names: str) -> None:
    """Exit 2 and one error line naming every one of `names` (last on stderr, after any
    progress lines), no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    errors = [ln for ln in lines if "error" in ln.lower()]
    assert errors == lines[-1:] and "Traceback" not in proc.stderr, proc.stderr
    err = errors[0]
    assert err.startswith("sciperf prepare: error: "), err
    for name in names:
        assert name in err, (name, err)


def _assert_one_line(exc: pytest.ExceptionInfo, *names: str) -> None:
    text = str(exc.value)
    assert "\n" not in text, text
    for name in names:
        assert name in text, (name, text)


# ------------------------------------------------------------------ the reference format

def _install_fake_pyg(mp: pytest.MonkeyPatch) -> type:
    """A class importable as PyG 1.x's ``torch_geometric.data.data.Data`` (what the
    reference pickles), so real torch pickles and unpickles records of it."""
    module = types.ModuleType("torch_geometric.data.data")

    class Data:
        def __init__(self, **kw: Any):
            self.__dict__.update(kw)

    Data.__module__, Data.__qualname__ = module.__name__, "Data"
    module.Data = Data
    for name in ("torch_geometric", "torch_geometric.data"):
        mp.setitem(sys.modules, name, types.ModuleType(name))
    mp.setitem(sys.modules, module.__name__, module)
    return Data


def _torch_record(torch: Any, data_cls: type, s: dict[str, Any], sid: int, fid: int) -> Any:
    """A record with the reference preprocessing's fields and dtypes (spec §2)."""
    n = len(s["atomic_numbers"])
    return data_cls(
        pos=torch.tensor(s["pos"], dtype=torch.float32),
        cell=torch.tensor(s["cell"], dtype=torch.float32).view(1, 3, 3),
        atomic_numbers=torch.tensor(s["atomic_numbers"], dtype=torch.float32), natoms=n,
        edge_index=torch.tensor(s["edge_index"], dtype=torch.int64),
        cell_offsets=torch.tensor(s["cell_offsets"], dtype=torch.int64),
        y=float(s["energy"]) - 1.5, force=torch.tensor(s["force"], dtype=torch.float32),
        fixed=torch.tensor(s["fixed"], dtype=torch.float32),
        tags=torch.tensor(s["tags"], dtype=torch.int64), sid=sid, fid=fid)


@pytest.fixture(scope="module")
def independent(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list]]:
    """Reference LMDBs whose records real torch pickled (``pickle.dumps(Data, -1)``),
    written with the lmdb package: (root, split → the records' fields as numpy)."""
    torch = pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("independent")
    expected: dict[str, list] = {}
    with pytest.MonkeyPatch.context() as mp:
        data_cls = _install_fake_pyg(mp)
        for split, indices in (("train", (0, 1, 2)), ("validation", (0,))):
            recs = [_torch_record(torch, data_cls, synthetic.structure(_request(root), split, k),
                                  sid=1000 + k, fid=7 * k + 1) for k in indices]
            _write_raw_lmdb(root / split / "data.0000.lmdb",
                            [pickle.dumps(r, protocol=-1) for r in recs])
            expected[split] = [{k: v.numpy() if isinstance(v, torch.Tensor) else v
                                for k, v in r.__dict__.items()} for r in recs]
    return root, expected


def _assert_matches_reference(s: dict[str, Any], ref: dict[str, Any]) -> None:
    for key in ("pos", "force", "edge_index", "cell_offsets"):
        np.testing.assert_array_equal(s[key], ref[key], err_msg=key)
    np.testing.assert_array_equal(s["cell"], ref["cell"][0])
    np.testing.assert_array_equal(s["atomic_numbers"], ref["atomic_numbers"])
    np.testing.assert_array_equal(s["fixed"], ref["fixed"])
    np.testing.assert_array_equal(s["tags"], ref["tags"])
    assert (s["energy"], s["sid"], s["fid"]) == (ref["y"], ref["sid"], ref["fid"])


def test_records_pickled_by_real_torch_are_read_exactly(independent, tmp_path: Path) -> None:
    """The reader decodes what the reference's own writer (torch + PyG) produces, and the
    converter carries every field, sid and fid included, into the npy shards."""
    root, expected = independent
    for split, refs in expected.items():
        got = _read_split(root, split, "lmdb")
        assert len(got) == len(refs)
        for s, ref in zip(got, refs, strict=True):
            assert s["pos"].dtype == np.float32 and s["edge_index"].dtype == np.int64
            _assert_matches_reference(s, ref)
    converted = Path(shutil.copytree(root, tmp_path / "converted"))
    proc = _prepare("data.source=convert", f"data.dir={converted}",
                    f"model.cutoff={CUTOFF}")
    assert proc.returncode == 0, proc.stderr
    for split, refs in expected.items():
        for s, ref in zip(_read_split(converted, split, "npy"), refs, strict=True):
            _assert_matches_reference(s, ref)


def _assert_forces(forces: np.ndarray, n: int) -> None:
    assert forces.shape == (n, 3) and np.all(np.isfinite(forces))
    assert np.abs(forces).max() > 0  # the randomised output layers make them non-trivial


def test_pytorch_model_runs_on_a_collated_reference_batch(independent) -> None:
    torch = pytest.importorskip("torch")
    dpp = pytest.importorskip("sciperf_pytorch.workloads.oc20.model")
    root, _ = independent
    inputs, labels = data.collate(_read_split(root, "train", "lmdb"))
    torch.manual_seed(0)
    net = dpp.DimeNetPP(TINY)
    with torch.no_grad():
        for b in range(TINY.num_blocks + 1):
            net.dense(f"output_blocks/{b}/dense_final").weight.normal_(0.0, 0.5)
    energy, forces = dpp.energy_and_forces(
        net, {k: torch.from_numpy(v) for k, v in inputs.items()}, create_graph=False)
    assert tuple(energy.shape) == labels["energy"].shape == (3,)
    _assert_forces(forces.numpy(), len(inputs["pos"]))


def test_tensorflow_model_runs_on_a_collated_reference_batch(independent) -> None:
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    model_mod = pytest.importorskip("sciperf_tensorflow.workloads.oc20.model")
    root, _ = independent
    inputs, labels = data.collate(_read_split(root, "train", "lmdb"))
    keras.utils.set_random_seed(0)
    net = model_mod.DimeNetPP(TINY)
    net({k: tf.constant(v) for k, v in inputs.items()})  # build the weights
    rng = np.random.default_rng(0)
    for block in net.output_blocks:
        kernel = block.dense_final.kernel
        kernel.assign(rng.normal(0, 0.5, kernel.shape).astype(kernel.dtype))
    energy, forces = model_mod.energy_and_forces(net, {k: tf.constant(v)
                                                       for k, v in inputs.items()})
    assert tuple(energy.shape) == labels["energy"].shape == (3,)
    _assert_forces(forces.numpy(), len(inputs["pos"]))


class _Payload:
    """A record whose unpickling runs a shell command (what a hostile LMDB would hold)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_malicious_record_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Payload(marker), protocol=-1)
    container = tmp_path / "data" / "train" / "data.0000.lmdb"
    _write_raw_lmdb(container, [payload])
    _write_raw_lmdb(tmp_path / "data" / "validation" / "data.0000.lmdb", [payload])
    with pytest.raises(SciperfError) as exc:
        data.StructureReader("lmdb", CUTOFF)(container / "0")
    _assert_one_line(exc, f"{container} key 0: refused to unpickle", "system")
    proc = _prepare(*EXISTING, "data.train_samples=1", "data.eval_samples=1",
                    f"data.dir={tmp_path / 'data'}", "data.format=lmdb")
    _assert_cli_error(proc, f"{container} key 0", "refused")
    # the count is a pickle too
    _write_raw_lmdb(container, [], length=False)
    import lmdb

    with lmdb.open(str(container), subdir=False) as env, env.begin(write=True) as txn:
        txn.put(b"length", payload)
    Path(f"{container}-lock").unlink(missing_ok=True)
    with pytest.raises(SciperfError) as exc:
        data.list_samples(tmp_path / "data", "train", "lmdb")
    _assert_one_line(exc, f"{container} key length: refused")
    assert not marker.exists()


# ------------------------------------------------------------------ synthetic EMT slabs

def test_both_formats_hold_identical_structures(dataset: Path) -> None:
    for split, n in (("train", 12), ("validation", 4)):
        lmdb_s, npy_s = _read_split(dataset, split, "lmdb"), _read_split(dataset, split, "npy")
        assert len(lmdb_s) == len(npy_s) == n
        for a, b in zip(lmdb_s, npy_s, strict=True):
            assert set(a) - {"natoms"} == set(b)
            for key in b:
                np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]),
                                              err_msg=key)
    assert [s["sid"] for s in _read_split(dataset, "validation", "npy")] == \
        [10**9 + k for k in range(4)]


def _files(root: Path, pattern: str) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.glob(pattern))
            if p.is_file()}


def _lmdb_values(root: Path) -> dict[tuple[str, bytes], bytes]:
    """Every key and value of every LMDB (the files themselves hold uninitialised bytes).
    Through the process's shared environments: py-lmdb refuses a second open of a file."""
    out = {}
    for path in sorted(root.glob("*/data.*.lmdb")):
        with data.shared_lmdb(path).begin() as txn:
            out.update({(str(path.relative_to(root)), k): v for k, v in txn.cursor()})
    return out


def test_generation_is_deterministic_across_worker_counts(dataset: Path, tmp_path: Path) -> None:
    """Same seed: byte-identical shards and LMDB records, whether one process writes them
    or two (the CLI with data.prepare_workers=2); another seed: other structures."""
    again = tmp_path / "again"
    args = ["data.source=synthetic", f"data.dir={again}", "data.train_samples=12",
            "data.eval_samples=4", "seed=3", f"model.cutoff={CUTOFF}",
            "data.max_neighbours=12", "data.slab=[2,2,3]", "data.metals=[Cu,Pt]",
            "data.rattle=0.05", "data.adsorbate_probability=0.5",
            "data.structures_per_container=5", "data.prepare_workers=2"]
    # a process of its own: with data.prepare_workers=2 the generator forks its workers,
    # and a fork of this pytest worker (with its frameworks' threads) is not a user's prepare
    proc = sciperf("prepare", "workload=oc20", *args, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert synthetic.dataset_complete(_request(again.resolve()))
    shards = _files(dataset, "*/shard.*/*.npy")
    assert len(shards) == 4 * len(data.SHARD_ARRAYS)
    assert _files(again, "*/shard.*/*.npy") == shards
    assert _lmdb_values(again) == _lmdb_values(dataset)
    proc = _prepare(*args)  # complete and identical: not regenerated
    assert proc.returncode == 0 and "dataset ready" in proc.stdout
    other = tmp_path / "other"
    synthetic.generate(_request(other, seed=4), workers=1, show_progress=False)
    theirs = _files(other, "*/shard.*/*.npy")
    assert theirs.keys() == shards.keys()
    assert theirs["train/shard.0000/pos.npy"] != shards["train/shard.0000/pos.npy"]
    assert theirs["train/shard.0000/force.npy"] != shards["train/shard.0000/force.npy"]


def test_energies_and_forces_are_emt_of_the_stored_positions(dataset: Path) -> None:
    from ase import Atoms
    from ase.calculators.emt import EMT

    for split in ("train", "validation"):
        for s in _read_split(dataset, split, "npy"):
            atoms = Atoms(numbers=s["atomic_numbers"], positions=s["pos"].astype(np.float64),
                          cell=s["cell"].astype(np.float64), pbc=(True, True, False))
            atoms.calc = EMT()
            assert atoms.get_potential_energy() == pytest.approx(s["energy"], abs=1e-5)
            # float32 positions and forces: a few 1e-6 eV/Å apart
            np.testing.assert_allclose(atoms.get_forces(), s["force"], atol=5e-5)


def _layers(s: dict[str, Any]) -> np.ndarray:
    """Layer number of each metal atom from the bottom (0), by gaps in z (layers are ~2 Å
    apart, the rattle 0.05 Å)."""
    z = s["pos"][:, 2].astype(np.float64)
    metal = s["atomic_numbers"] != 8
    order = np.argsort(z[metal])
    breaks = np.r_[0, np.cumsum(np.diff(z[metal][order]) > 1.0)]
    layer = np.empty(int(metal.sum()), np.int64)
    layer[order] = breaks
    return layer


def _check_fixed_and_tags(s: dict[str, Any], layers: int) -> None:
    metal = s["atomic_numbers"] != 8
    layer = _layers(s)
    assert layer.max() == layers - 1
    np.testing.assert_array_equal(s["fixed"][metal], layer < 2)  # the bottom two layers
    np.testing.assert_array_equal(s["tags"][metal], layer == layers - 1)  # 1 surface
    assert np.all(s["tags"][~metal] == 2) and np.all(s["fixed"][~metal] == 0)
    assert set(np.unique(s["tags"])) <= {0, 1, 2}


def test_fixed_atoms_and_tags_follow_the_layers(dataset: Path) -> None:
    structures = _read_split(dataset, "train", "npy") + _read_split(dataset, "validation",
                                                                    "npy")
    adsorbed = [bool((s["atomic_numbers"] == 8).any()) for s in structures]
    assert any(adsorbed) and not all(adsorbed)
    for s in structures:
        _check_fixed_and_tags(s, 3)
    deeper = _request(dataset, slab=(2, 2, 4), adsorbate_probability=1.0)
    s = synthetic.structure(deeper, "train", 0)
    _check_fixed_and_tags(s, 4)
    assert set(np.unique(s["tags"])) == {0, 1, 2}


def test_edges_are_the_capped_radius_graph_of_the_stored_positions(dataset: Path) -> None:
    for split in ("train", "validation"):
        for s in _read_split(dataset, split, "npy"):
            ei = s["edge_index"].astype(np.int64)
            vec = s["pos"][ei[0]].astype(np.float64) - s["pos"][ei[1]] + \
                s["cell_offsets"].astype(np.float64) @ s["cell"].astype(np.float64)
            assert np.linalg.norm(vec, axis=1).max() <= CUTOFF
            assert np.bincount(ei[1]).max() <= 12
            g = graph.neighbour_graph(s["pos"], s["cell"], CUTOFF, 12)
            np.testing.assert_array_equal(ei, g.edge_index)
            np.testing.assert_array_equal(s["cell_offsets"], g.cell_offsets)


def test_manifest_and_regeneration_leave_no_stale_containers(dataset: Path,
                                                              copy: Path) -> None:
    req = _request(dataset)
    assert synthetic.dataset_complete(req)
    assert not synthetic.dataset_complete(dataclasses.replace(req, seed=4))
    assert not synthetic.dataset_complete(dataclasses.replace(req, train_samples=11))
    assert synthetic.dataset_complete(_request(copy))  # a moved set is the same set
    smaller = _request(copy, train_samples=6, eval_samples=2)
    synthetic.generate(smaller, workers=1, show_progress=False)
    assert synthetic.dataset_complete(smaller) and not synthetic.dataset_complete(_request(copy))
    assert sorted(p.name for p in (copy / "train").iterdir()) == \
        ["data.0000.lmdb", "data.0001.lmdb", "shard.0000", "shard.0001"]
    assert sorted(p.name for p in (copy / "validation").iterdir()) == \
        ["data.0000.lmdb", "shard.0000"]
    for fmt in data.FORMATS:
        assert len(data.list_samples(copy, "train", fmt)) == 6


# ------------------------------------------------------------------ batching and listing

def _toy(n: int, edges: list[tuple[int, int]], shift: float) -> dict[str, Any]:
    return {"atomic_numbers": np.arange(1, n + 1, dtype=np.uint8),
            "pos": np.arange(3 * n, dtype=np.float32).reshape(n, 3) + shift,
            "cell": np.eye(3, dtype=np.float32) * (10 + shift),
            "edge_index": np.array(edges, np.int32).T.reshape(2, -1),
            "cell_offsets": np.arange(3 * len(edges), dtype=np.int8).reshape(-1, 3),
            "force": -np.ones((n, 3), np.float32) * shift, "fixed": np.eye(n, dtype=np.uint8)[0],
            "energy": shift}


def test_collate_offsets_every_structure_into_its_own_atoms() -> None:
    a = _toy(2, [(1, 0), (0, 1)], 0.0)
    b = _toy(3, [(2, 0), (0, 2), (1, 2)], 1.0)
    c = _toy(1, [], 2.0)  # a structure without edges still owns its atom
    inputs, labels = data.collate([a, b, c])
    np.testing.assert_array_equal(inputs["edge_index"],
                                  [[1, 0, 4, 2, 3], [0, 1, 2, 4, 4]])
    np.testing.assert_array_equal(inputs["batch"], [0, 0, 1, 1, 1, 2])
    np.testing.assert_array_equal(inputs["atomic_numbers"], [1, 2, 1, 2, 3, 1])
    np.testing.assert_array_equal(inputs["pos"], np.concatenate([a["pos"], b["pos"], c["pos"]]))
    np.testing.assert_array_equal(inputs["cell"], np.stack([a["cell"], b["cell"], c["cell"]]))
    np.testing.assert_array_equal(inputs["cell_offsets"],
                                  np.concatenate([a["cell_offsets"], b["cell_offsets"]]))
    np.testing.assert_array_equal(labels["fixed"], [1, 0, 1, 0, 0, 1])
    np.testing.assert_array_equal(labels["energy"], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(labels["force"][2:5], -np.ones((3, 3)))
    want = {"atomic_numbers": ((6,), np.int64), "pos": ((6, 3), np.float32),
            "cell": ((3, 3, 3), np.float32), "batch": ((6,), np.int64),
            "edge_index": ((2, 5), np.int64), "cell_offsets": ((5, 3), np.float32)}
    assert {k: (v.shape, v.dtype) for k, v in inputs.items()} == want
    assert {k: (v.shape, v.dtype) for k, v in labels.items()} == {
        "force": ((6, 3), np.float32), "fixed": ((6,), np.float32),
        "energy": ((3,), np.float32)}


@pytest.mark.parametrize("fmt", data.FORMATS)
def test_list_samples_in_global_order(dataset: Path, fmt: str) -> None:
    name = data.CONTAINER[fmt]
    want = [dataset / "train" / name.format(c) / str(i)
            for c, count in enumerate((5, 5, 2)) for i in range(count)]
    assert data.list_samples(dataset, "train", fmt) == want
    assert data.list_samples(dataset, "train", fmt, 7) == want[:7]
    assert data.list_samples(dataset, "validation", fmt, 4) == \
        [dataset / "validation" / name.format(0) / str(i) for i in range(4)]
    with pytest.raises(SciperfError) as exc:
        data.list_samples(dataset, "train", fmt, 13)
    _assert_one_line(exc, str(dataset / "train"), "holds 12", "13")


def test_list_samples_refuses_missing_or_empty_splits(tmp_path: Path) -> None:
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / ".data.0000.lmdb.tmp").write_bytes(b"half-written")
    (tmp_path / "train" / ".shard.0000.tmp").mkdir()
    for fmt in data.FORMATS:
        with pytest.raises(SciperfError) as exc:
            data.list_samples(tmp_path, "train", fmt)
        _assert_one_line(exc, f"no {fmt} containers", str(tmp_path / "train"))
        with pytest.raises(SciperfError) as exc:
            data.list_samples(tmp_path, "validation", fmt)
        _assert_one_line(exc, str(tmp_path / "validation"), "does not exist")


# ------------------------------------------------------------------ bad input

def _structures(root: Path, container: Path) -> list[dict[str, Any]]:
    """The structures of one container, as read (LMDB or npy)."""
    fmt = "lmdb" if container.suffix == ".lmdb" else "npy"
    reader = data.StructureReader(fmt, 10.0)
    return [reader(container / str(i)) for i in range(data.record_count(container, fmt))]


def _rewrite(container: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Container with structure 0 changed, written by the format's own writer."""
    structures = _structures(container.parent.parent, container)
    change(structures[0])
    if container.suffix == ".lmdb":
        data.write_lmdb(container, structures)
    else:
        data.write_shard(container, structures)


def _poison(key: str, value: float) -> Callable[[dict[str, Any]], None]:
    """Set the first number of array `key` of structure 0 to `value`."""
    def change(s: dict[str, Any]) -> None:
        s[key] = s[key].copy()
        s[key].reshape(-1)[0] = value
    return change


def _all_fixed(s: dict[str, Any]) -> None:
    s["fixed"] = np.ones_like(s["fixed"])


def _wider_graph(s: dict[str, Any]) -> None:
    """Structure 0 again, its edges from a 5 Å radius (read with model.cutoff=4)."""
    wide = synthetic.structure(_request(Path("."), cutoff=5.0, max_neighbours=50), "train", 0)
    s.update(edge_index=wide["edge_index"], cell_offsets=wide["cell_offsets"])


def _garbage(c: Path) -> None:
    c.write_bytes(np.random.default_rng(0).bytes(c.stat().st_size))


def _damaged_pages(c: Path) -> None:
    """Meta pages intact, every data page garbage (a disk or transfer error)."""
    raw = c.read_bytes()
    c.write_bytes(raw[:8192] + np.random.default_rng(0).bytes(len(raw) - 8192))


def _truncate(c: Path) -> None:
    c.write_bytes(c.read_bytes()[: c.stat().st_size // 2])


def _drop_length(c: Path) -> None:
    _write_raw_lmdb(c, [pickles.dumps(data.to_reference(s), data.RECORD_CLASS)
                        for s in _structures(c.parent.parent, c)], length=False)


def _drop_force(c: Path) -> None:
    records = [data.to_reference(s) for s in _structures(c.parent.parent, c)]
    del records[0]["force"]
    _write_raw_lmdb(c, [pickles.dumps(r, data.RECORD_CLASS) for r in records])


def _npy(name: str, change: Callable[[Path], None]) -> Callable[[Path], None]:
    return lambda c: change(c / f"{name}.npy")


def _shorter(path: Path) -> None:
    np.save(path, np.load(path)[:-1])


BAD = {  # case → (format, damage to train's first container, words of the error)
    "garbage-lmdb": ("lmdb", _garbage, ("not a readable LMDB file",)),
    "truncated-lmdb": ("lmdb", _truncate, ("truncated LMDB file",)),  # was SIGBUS
    "damaged-lmdb-pages": ("lmdb", _damaged_pages, ("key length: corrupt LMDB file",)),
    "no-length-key": ("lmdb", _drop_length, ("no 'length' key",)),
    "record-without-force": ("lmdb", _drop_force, ("key 0", "lacks field(s) force")),
    "nan-position-lmdb": ("lmdb", lambda c: _rewrite(c, _poison("pos", np.nan)),
                          ("key 0", "pos holds NaN")),
    "nan-force-lmdb": ("lmdb", lambda c: _rewrite(c, _poison("force", np.nan)),
                       ("key 0", "force holds NaN")),
    "nan-force-npy": ("npy", lambda c: _rewrite(c, _poison("force", np.inf)),
                      ("key 0", "force holds NaN or Inf")),
    "no-free-atom-lmdb": ("lmdb", lambda c: _rewrite(c, _all_fixed),
                          ("key 0", "no free atom")),
    "no-free-atom-npy": ("npy", lambda c: _rewrite(c, _all_fixed),
                         ("key 0", "no free atom")),
    "edge-beyond-cutoff-lmdb": ("lmdb", lambda c: _rewrite(c, _wider_graph),
                                ("key 0", "exceeds model.cutoff=4.0")),
    "edge-beyond-cutoff-npy": ("npy", lambda c: _rewrite(c, _wider_graph),
                               ("key 0", "exceeds model.cutoff=4.0")),
    "truncated-npy": ("npy", _npy("pos", _truncate), ("pos.npy", "truncated .npy data")),
    "short-npy": ("npy", _npy("force", _shorter), ("force.npy", "does not hold")),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line_naming_the_file(copy: Path, case: str) -> None:
    """Reader (every structure of the split) and `sciperf prepare data.source=existing`."""
    fmt, damage, words = BAD[case]
    container = copy / "train" / data.CONTAINER[fmt].format(0)
    damage(container)
    with pytest.raises(SciperfError) as exc:
        _read_split(copy, "train", fmt)
    _assert_one_line(exc, str(container), *words)
    proc = _prepare(*EXISTING, f"data.dir={copy}", f"data.format={fmt}")
    _assert_cli_error(proc, str(container), *words)
    assert data.list_samples(copy, "validation", fmt)  # the other split is untouched


def test_existing_data_with_too_few_structures_is_refused(dataset: Path) -> None:
    proc = _prepare(*EXISTING, f"data.dir={dataset}", "data.format=npy",
                    "data.train_samples=13")
    _assert_cli_error(proc, str(dataset / "train"), "holds 12")
    proc = _prepare(*EXISTING, f"data.dir={dataset}", "data.format=lmdb")
    assert proc.returncode == 0, proc.stderr
    assert "12 lmdb structures" in proc.stdout and "4 lmdb structures" in proc.stdout


@pytest.mark.parametrize("which", ["last", "middle"])
def test_existing_reads_every_structure_of_every_container(copy: Path, which: str) -> None:
    """A container damaged past its first record (a bad last record, a NaN in the middle)
    is found by `data.source=existing`, not during training (only the first and last
    structure of each container were read: a NaN in the middle passed, exit 0)."""
    containers = sorted((copy / "train").glob("data.*.lmdb"))
    last = containers[-1] if which == "last" else containers[0]  # the first holds 5
    structures = _structures(copy, last)
    at = len(structures) - 1 if which == "last" else 2
    structures[at]["force"] = structures[at]["force"].copy()
    structures[at]["force"][0, 0] = np.nan
    data.write_lmdb(last, structures)
    proc = _prepare(*EXISTING, f"data.dir={copy}", "data.format=lmdb")
    _assert_cli_error(proc, f"{last} key {at}", "force holds NaN")
    proc = _prepare(*EXISTING, f"data.dir={copy}", "data.format=npy")
    assert proc.returncode == 0, proc.stderr
    assert "12 npy structures (every structure read and checked)" in proc.stdout


def test_fractional_atomic_numbers_are_refused_not_truncated(dataset: Path) -> None:
    s = _structures(dataset, dataset / "train" / "shard.0000")[0]
    rec = data.Record()
    rec.__dict__.update(data.to_reference(s))
    rec.__dict__["atomic_numbers"] = np.asarray(s["atomic_numbers"], np.float32)
    np.testing.assert_array_equal(data.from_reference(rec, "x")["atomic_numbers"],
                                  s["atomic_numbers"])  # PyG's float storage is fine
    rec.__dict__["atomic_numbers"][1] = 28.7  # not Ni (28): refused, never truncated
    with pytest.raises(SciperfError, match="^src key 0 atomic_numbers: not whole numbers$"):
        data.from_reference(rec, "src key 0")


def test_synthetic_data_needs_structures_in_both_splits(tmp_path: Path) -> None:
    for counts in ({"train_samples": 0}, {"eval_samples": 0}):
        with pytest.raises(SciperfError, match="at least one structure per split"):
            synthetic.generate(_request(tmp_path, **counts), show_progress=False)
    assert not list(tmp_path.iterdir())  # refused before anything is written


# ------------------------------------------------------------------ the converter

def _lmdb_only(root: Path) -> dict[str, bytes]:
    """Delete the npy shards (returning their bytes): what a reference download holds."""
    shards = _files(root, "*/shard.*/*.npy")
    for folder in root.glob("*/shard.*"):
        shutil.rmtree(folder)
    return shards


def test_convert_recreates_the_shards(copy: Path) -> None:
    shards = _lmdb_only(copy)
    proc = _prepare("data.source=convert", f"data.dir={copy}",
                    f"model.cutoff={CUTOFF}")
    assert proc.returncode == 0, proc.stderr
    assert "converted 16 structures in 4 LMDB files" in proc.stdout
    assert _files(copy, "*/shard.*/*.npy") == shards
    assert not list(copy.glob("*/.*"))


def test_convert_removes_shards_left_from_an_earlier_conversion(copy: Path) -> None:
    """An older, larger conversion left shard.0007: a run would train on it."""
    _lmdb_only(copy)
    stale = copy / "train" / "shard.0007"
    stale.mkdir()
    (stale / "natoms.npy").write_bytes(b"old")
    proc = _prepare("data.source=convert", f"data.dir={copy}",
                    f"model.cutoff={CUTOFF}")
    assert proc.returncode == 0, proc.stderr
    assert f"removed {stale}: no train/data.0007.lmdb" in proc.stdout
    assert not stale.exists() and len(data.list_samples(copy, "train", "npy")) == 12


def test_convert_failing_midway_leaves_nothing_half_written(copy: Path) -> None:
    _lmdb_only(copy)
    second = copy / "train" / "data.0001.lmdb"
    structures = _structures(copy, second)
    structures[2]["pos"] = structures[2]["pos"].copy()
    structures[2]["pos"][3, 1] = np.nan
    data.write_lmdb(second, structures)
    proc = _prepare("data.source=convert", f"data.dir={copy}",
                    f"model.cutoff={CUTOFF}")
    _assert_cli_error(proc, f"{second} key 2", "pos holds NaN")
    assert sorted(p.name for p in (copy / "train").iterdir()) == \
        ["data.0000.lmdb", "data.0001.lmdb", "data.0002.lmdb", "shard.0000"]
    assert len(data.list_samples(copy, "train", "npy")) == 5  # the finished one is whole


def test_writers_leave_no_temporaries_when_they_fail(dataset: Path, tmp_path: Path) -> None:
    structures = _structures(dataset, dataset / "train" / "shard.0000")
    structures[1]["cell_offsets"] = structures[1]["cell_offsets"].astype(np.int64) * 1000
    with pytest.raises(SciperfError) as exc:
        data.write_shard(tmp_path / "shard.0000", structures)
    _assert_one_line(exc, str(tmp_path / "shard.0000"), "cell_offsets", "do not fit int8")
    structures[1]["tags"] = np.array(["surface"] * len(structures[1]["tags"]))
    with pytest.raises(ValueError):
        data.write_lmdb(tmp_path / "data.0000.lmdb", structures)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ reader plumbing

@pytest.mark.parametrize("fmt", data.FORMATS)
def test_reader_pickles_for_loader_processes(dataset: Path, fmt: str) -> None:
    reader = data.StructureReader(fmt, CUTOFF)
    sample = data.list_samples(dataset, "train", fmt)[7]
    first = reader(sample)
    clone = pickle.loads(pickle.dumps(reader))
    assert (clone.fmt, clone.cutoff) == (fmt, CUTOFF)
    again = clone(sample)
    for key, value in first.items():
        np.testing.assert_array_equal(np.asarray(again[key]), np.asarray(value), err_msg=key)
    reader.close()
    clone.close()


def test_an_lmdb_file_is_opened_once_per_process(copy: Path) -> None:
    """py-lmdb refuses a second open of a file open in the process: a listing, a second
    reader and a reader's copy share the process's environment; a file replaced under the
    same name (a regeneration) is read afresh."""
    container = copy / "train" / "data.0000.lmdb"
    first = data.StructureReader("lmdb", CUTOFF)
    before = first(container / "1")
    assert len(data.list_samples(copy, "train", "lmdb")) == 12  # while `first` holds it
    np.testing.assert_array_equal(data.StructureReader("lmdb", CUTOFF)(container / "1")["pos"],
                                  before["pos"])
    structures = _structures(copy, container)
    structures[1]["pos"] = structures[1]["pos"] + np.float32(0.01)
    data.write_lmdb(container, structures)
    np.testing.assert_array_equal(data.StructureReader("lmdb", CUTOFF)(container / "1")["pos"],
                                  before["pos"] + np.float32(0.01))
    first.close()


def test_sample_files_are_the_containers_files(dataset: Path) -> None:
    sample = data.list_samples(dataset, "train", "lmdb")[6]
    assert data.sample_files(sample, "lmdb") == [dataset / "train" / "data.0001.lmdb"]
    assert all(p.is_file() for p in data.sample_files(sample, "lmdb"))
    sample = data.list_samples(dataset, "train", "npy")[6]
    files = data.sample_files(sample, "npy")
    assert all(p.is_file() for p in files)
    assert sorted(files) == sorted((dataset / "train" / "shard.0001").iterdir())
    with pytest.raises(SciperfError, match="not an OC20 sample"):
        data.split_sample(dataset / "train" / "data.0001.lmdb")
