"""OC20's counted layers: parameters add up to the spec's count, the dense layers' rows
(atoms, edges or triplets) equal what PyTorch's forward really multiplies, graph sizes come
from the data, and characterize reports FLOPs per structure."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from sciperf.config import compose
from sciperf.tools.characterize import characterize, count_flops
from sciperf.workloads.oc20 import WORKLOAD, bench, data, flops, spec, synthetic

TINY = spec.ModelSpec(hidden_channels=16, out_emb_channels=12, int_emb_size=8,
                      basis_emb_size=4, num_blocks=2, num_spherical=3, num_radial=4,
                      cutoff=4.0)  # every width distinct, so a swapped row count shows


def tiny_request(root: Path) -> synthetic.GenerateRequest:
    """2×2×3 slabs (12 metal atoms, + O half the time) at 4 Å / ≤ 8 neighbours."""
    return synthetic.GenerateRequest(
        root=str(root), train_samples=3, eval_samples=1, seed=0, cutoff=4.0, max_neighbours=8,
        slab=(2, 2, 3), metals=("Cu", "Pt"), rattle=0.05, adsorbate_probability=0.5,
        per_container=3)


@pytest.mark.parametrize("model", [spec.ModelSpec(), spec.ModelSpec(output_up_bias=False),
                                   TINY], ids=["reference", "tf-original", "tiny"])
def test_parameters_add_up_to_the_spec(model: spec.ModelSpec) -> None:
    found = flops.layers(model)
    assert sum(layer.params for layer in found) == model.parameter_count()
    assert [layer.kind for layer in found[:2]] == ["basis", "embedding"]
    assert all(layer.macs == 0 for layer in found[:2])  # a sine and a lookup
    assert all(layer.kind == "dense" and layer.macs > 0 for layer in found[2:])


def test_typical_structure_and_reference_counts() -> None:
    """73 atoms × 47 edges × 46 triplets per edge; the reference's FLOPs per structure."""
    assert flops.GraphSizes(73, 3431, 157_826) == flops.TYPICAL
    per_atom_triplets = flops.TYPICAL.triplets / flops.TYPICAL.atoms
    assert 1_800 <= per_atom_triplets <= 2_400  # spec/oc20.md §7
    counts = count_flops(spec.ModelSpec())
    assert counts.params == spec.FULL_PARAMETER_COUNT
    assert counts.forward == 9_056_123_040  # ≈ 9.06 GFLOP per structure
    # forces are a derivative: evaluation is the forward + the force pass, training
    # differentiates both again (spec.FLOPS_PASSES)
    assert counts.train == 6 * counts.forward and counts.eval == 2 * counts.forward


def test_counts_scale_with_each_graph_size() -> None:
    """MACs are linear in atoms, edges and triplets; each size moves only its own layers."""
    def per_atom(name: str) -> bool:
        return name.startswith("output_blocks/") and not name.endswith("/dense_rbf")

    def per_triplet(name: str) -> bool:
        return name.endswith(("/dense_sbf1", "/dense_sbf2"))

    def per_edge(name: str) -> bool:
        return not per_atom(name) and not per_triplet(name)

    sizes = {"atoms": 10, "edges": 100, "triplets": 1000}
    base = {layer.name: layer.macs for layer in flops.layers_for(TINY, **sizes)}
    for axis, rule in (("atoms", per_atom), ("edges", per_edge), ("triplets", per_triplet)):
        doubled = flops.layers_for(TINY, **{**sizes, axis: 2 * sizes[axis]})
        for layer in doubled:
            want = 2 * base[layer.name] if rule(layer.name) else base[layer.name]
            assert layer.macs == want, (axis, layer.name)


def test_forward_matmuls_equal_torch_flop_counter(tmp_path: Path) -> None:
    """FlopCounterMode counts only matrix products (mm, addmm, bmm, convolutions…): here
    the dense layers, 2 FLOPs per multiply-add; gathers, scatter sums, the bases and the
    activations are elementwise and left out on both sides. The energy forward (no forces,
    no grad) of a real two-slab batch must match exactly, layer by layer: any row count
    taken from the wrong set (atoms, edges, triplets) would differ."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from sciperf_pytorch.workloads.oc20.model import DimeNetPP

    req = tiny_request(tmp_path)
    structures = [synthetic.structure(req, "train", k) for k in range(2)]
    x, _ = data.collate(structures)
    batch = {k: torch.from_numpy(v) for k, v in x.items()}
    sizes = flops.graph_sizes(structures)
    atoms, edges, triplets = (round(2 * v) for v in (sizes.atoms, sizes.edges, sizes.triplets))
    assert len({atoms, edges, triplets}) == 3
    counted = flops.layers_for(TINY, atoms, edges, triplets)
    counter = FlopCounterMode(display=False)
    net = DimeNetPP(TINY)
    with torch.no_grad(), counter:
        net(batch)
    assert counter.get_total_flops() == sum(2 * layer.macs for layer in counted)
    per_module = counter.get_flop_counts()
    for layer in counted:
        measured = sum(per_module.get(f"DimeNetPP.{layer.name.replace('/', '__')}",
                                      {}).values())
        assert measured == 2 * layer.macs, layer.name


def _triplets_by_hand(s: dict) -> int:
    """Triplets k→j→i counted edge by edge: every edge into j, except k = i in the same
    image (an independent count of what graph.triplets lists)."""
    src, dst = s["edge_index"]
    off = np.asarray(s["cell_offsets"])
    total = 0
    for e in range(len(src)):
        for f in np.flatnonzero(dst == src[e]):
            total += not (src[f] == dst[e] and np.all(off[f] + off[e] == 0))
    return total


def test_graph_sizes_of_a_dataset(tmp_path: Path) -> None:
    req = tiny_request(tmp_path)
    synthetic.generate(req, show_progress=False)
    reader = data.StructureReader("npy", req.cutoff)
    structures = [reader(p) for p in data.list_samples(tmp_path, "train", "npy")]
    got = flops.graph_sizes(structures)
    assert got.atoms == pytest.approx(np.mean([len(s["atomic_numbers"]) for s in structures]))
    assert got.edges == pytest.approx(np.mean([s["edge_index"].shape[1] for s in structures]))
    assert got.triplets == pytest.approx(np.mean([_triplets_by_hand(s) for s in structures]))
    assert got.edges <= 8 * got.atoms  # the neighbour cap per centre
    with pytest.raises(ValueError, match="at least one"):
        flops.graph_sizes([])
    # characterize reads the same files: each container once, over the structures it holds
    for fmt in data.FORMATS:
        cfg = compose(["workload=oc20", "experiment=mini", f"data.dir={tmp_path}",
                       f"data.format={fmt}"])
        files = {f for p in data.list_samples(tmp_path, "train", fmt)
                 for f in data.sample_files(p, fmt)}
        result = characterize(cfg)
        assert result["bytes_per_sample"] == sum(f.stat().st_size for f in files) / 3
        # …and counts FLOPs on these graphs, not on OC20's typical structure
        mini = WORKLOAD.model_spec(cfg)
        want = flops.layers_for(mini, got.atoms, got.edges, got.triplets)
        assert result["flops_per_sample"]["forward"] == count_flops(mini, want).forward
        assert result["flops_per_sample"]["forward"] < count_flops(mini).forward / 5
        assert result["flops_source"].startswith(f"mean of 3 training structures in {tmp_path}")


def test_characterize_reports_flops_per_structure(tmp_path: Path) -> None:
    """The contract carries the table: characterize counts oc20 like any workload."""
    assert WORKLOAD.cost.layers is flops.layers and WORKLOAD.bench is bench.CASES
    assert WORKLOAD.cost.on_data is flops.cost_on_data
    cfg = compose(["workload=oc20", "experiment=full", f"data.dir={tmp_path}"])
    result = characterize(cfg)
    assert result["parameters"] == spec.FULL_PARAMETER_COUNT
    assert result["flops_per_sample"]["forward"] == count_flops(spec.ModelSpec()).forward
    assert result["bytes_per_sample"] == data.payload_bytes(spec.ModelSpec())
    assert result["flops_source"].startswith("the spec's typical sample")
    assert math.isclose(result["io_intensity_flop_per_byte"],
                        result["flops_per_sample"]["train"] / result["bytes_per_sample"])


def test_bench_graphs_follow_the_cutoff() -> None:
    """The reference graph at the reference cutoff; the mini experiment's own slab and
    neighbour cap below it (read from its config), and the mini input row at its cutoff."""
    assert bench.size(spec.ModelSpec()) == [6.0, spec.MAX_NEIGHBOURS, [3, 3, 4]]
    cfg = compose(["workload=oc20", "experiment=mini"])
    mini = WORKLOAD.model_spec(cfg)
    assert bench.size(mini) == [float(cfg.model.cutoff), int(cfg.data.max_neighbours),
                                list(cfg.data.slab)]
    assert float(cfg.model.cutoff) == bench.MINI_CUTOFF
    assert bench.size(WORKLOAD.model(**bench.CASES.input[0][0])) == bench.size(mini)


def test_bench_rows_rate_atoms_and_edges(tmp_path: Path) -> None:
    """Structures/s alone would favour small graphs: the rows add atoms/s and edges/s from
    the timed structures' own sizes."""
    from sciperf.tools import bench as bench_tool

    synthetic.generate(tiny_request(tmp_path), show_progress=False)
    samples = data.list_samples(tmp_path, "train", "npy")
    reader = data.StructureReader("npy", 4.0)
    atoms = np.mean([len(reader(p)["atomic_numbers"]) for p in samples])
    got = bench_tool._per_unit(WORKLOAD, WORKLOAD.model(cutoff=4.0), tmp_path, "npy", samples,
                               10.0)
    assert got["atoms_per_sample"] == pytest.approx(atoms, abs=0.01)
    assert got["atoms_per_s"] == pytest.approx(10 * atoms, abs=0.1)
    assert got["edges_per_s"] > got["atoms_per_s"]
    assert bench_tool._units({"samples_per_s": 1.0, **got}).startswith(
        f", {got['atoms_per_s']} atoms/s, {got['edges_per_s']} edges/s")
