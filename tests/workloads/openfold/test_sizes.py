"""OpenFold model sizes: the parameter table built from ModelSpec against the reference's
(names, shapes, order), the count and its per-module breakdown from the spec, and the mini
variant's count."""

from __future__ import annotations

import ast
import csv
import dataclasses
import math
from pathlib import Path

import pytest

from sciperf.workloads.openfold import sizes
from sciperf.workloads.openfold.sizes import MINI, ModelSpec, mini_spec

REFERENCE_TABLE = (Path(__file__).resolve().parents[3].parent / "shared" / "spec"
                   / "openfold_reference_parameters.tsv")


def _count(shapes: dict[str, tuple[int, ...]], prefix: str) -> int:
    return sum(math.prod(s) for name, s in shapes.items() if name.startswith(prefix))


def test_full_table_equals_the_reference_table():
    """The reference model's 5,044 tensors as listed by named_parameters() (spec beside)."""
    if not REFERENCE_TABLE.is_file():
        pytest.skip(f"reference parameter table not found at {REFERENCE_TABLE}")
    with REFERENCE_TABLE.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    reference = [(row["name"], tuple(ast.literal_eval(row["shape"]))) for row in rows]
    assert [int(row["index"]) for row in rows] == list(range(len(rows)))
    ours = list(ModelSpec().reference_shapes().items())
    assert len(ours) == len(reference) == 5044
    for i, (mine, theirs) in enumerate(zip(ours, reference, strict=True)):
        assert mine == theirs, f"entry {i}"
    assert sum(int(row["numel"]) for row in rows) == ModelSpec().parameter_count()


def test_full_parameter_count_and_breakdown():
    """93,229,082 (closed_openfold.yaml) split by module as spec §2 lists it."""
    spec = ModelSpec()
    shapes = spec.reference_shapes()
    assert spec.parameter_count() == sizes.FULL_PARAMETER_COUNT == 93_229_082
    breakdown = {"evoformer_stack.": 87_936_384, "extra_msa_stack.": 2_805_248,
                 "structure_module.": 2_019_116, "template_pair_stack.": 218_368,
                 "auxiliary_heads.": 101_422, "template_angle_embedder.": 80_640,
                 "input_embedder.": 33_024, "template_pointwise_attention.": 24_704,
                 "template_pair_embedder.": 5_696, "recycling_embedder.": 2_816,
                 "extra_msa_embedder.": 1_664}
    for prefix, count in breakdown.items():
        assert _count(shapes, prefix) == count, prefix
    assert sum(breakdown.values()) == spec.parameter_count()
    # A module's own parameters precede its children's (torch's named_parameters order).
    names = list(shapes)
    assert names.index("structure_module.ipa.head_weights") + 1 == names.index(
        "structure_module.ipa.linear_q.weight")


def test_mini_variant():
    spec = mini_spec()
    assert spec.parameter_count() == sizes.MINI_PARAMETER_COUNT == 199_226
    fields = {f.name for f in dataclasses.fields(ModelSpec)}
    assert set(MINI) <= fields
    full = ModelSpec()
    assert all(getattr(full, key) != value for key, value in MINI.items())  # real overrides
    # Every block type is still there: templates, extra MSA, Evoformer, SM, heads.
    shapes = spec.reference_shapes()
    for prefix in ("template_pair_stack.blocks.0.", "template_pointwise_attention.",
                   "extra_msa_stack.blocks.0.msa_att_col.global_attention.",
                   "evoformer_stack.blocks.1.", "structure_module.ipa.",
                   "structure_module.angle_resnet.layers.1.", "auxiliary_heads.plddt."):
        assert _count(shapes, prefix) > 0, prefix
    assert _count(shapes, "evoformer_stack.blocks.2.") == 0


def test_sizes_follow_the_spec_fields():
    spec = ModelSpec().replace(evoformer_blocks=3, c_z=8, num_heads_ipa=2)
    shapes = spec.reference_shapes()
    assert shapes["evoformer_stack.blocks.2.core.tri_mul_out.linear_z.weight"] == (8, 128)
    assert "evoformer_stack.blocks.3.msa_att_row.layer_norm_m.weight" not in shapes
    assert shapes["structure_module.ipa.head_weights"] == (2,)
    # IPA output: heads · (c_z + c_hidden + 4 · v_points) channels.
    assert shapes["structure_module.ipa.linear_out.weight"] == (384, 2 * (8 + 16 + 32))
    with pytest.raises(TypeError):
        ModelSpec().replace(no_such_size=1)
