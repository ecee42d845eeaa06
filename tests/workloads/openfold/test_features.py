"""OpenFold feature pipeline: one sample's feature dict from a chain, its a3m files and its
templates.

Evidence that it is the reference's pipeline, draw for draw: the torch-compatible random
stream equals torch's CPU generator (when torch is installed), and on :func:`case` the
features equal those of the reference (mlcommons/hpc @2c627d45 ``openfold/data/features.py``
+ ``transforms.py``, run with torch 2.13 CPU in /tmp on the same inputs and seed): the
hashes in ``REFERENCE_SHA256`` were taken from the reference's arrays (its raw template
input: the same templates as one-hot HHblits residue types). Keys computed with
transcendental functions (the deletion ``atan`` columns: at most 1 float32 ulp apart there)
or by the geometry module (float64 here, float32 there; tested in test_geometry.py) are
left out of the hashes. Beyond that: the schema, the MSA concatenation and de-duplication,
the crop shared by the recycling copies, BERT statistics, the cluster profile recomputed by
brute force, evaluation mode, seeds, and the one-line errors.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest

from sciperf.errors import SciperfError
from sciperf.workloads.openfold import features as feats
from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold.parsers import parse_a3m
from sciperf.workloads.openfold.templates import TemplateFeatures

SEQUENCE = "MKTAYIAKQRQBSFVKSHFX"  # B and X are unknown residues (X = 20) in the chain
UNIREF90 = """\
>query
MKTAYIAKQRQBSFVKSHFX
>u1
MKTAYLAKQRQISFaaVKSHF-
>u2
MR-AYIAKqQRQISFVKSHWX
>u3
--TAYIAKERQISFVKSHFZ
>u4
MKTAYIAKQRQUSFVKSHFXk
>u5
MKTGYIAKQRQISFVRSHFB
"""
BFD_UNICLUST = """\
>query
MKTAYIAKQRQBSFVKSHFX
>b1 duplicate of u3
--TAYIAKERQISFVKSHFZ
>b2
MKSAYIAKQRQISFVKSHFL
>b3
MKTAYIAKQRQISFVKSHFL
"""
MGNIFY = """\
>m1
MKTAYIAKQRQISFVKSHFA
>m2
AKTAYIAKQRQISFVKSHFAa
"""
SIZES = feats.FeatureSizes(crop=12, msa_clusters=4, extra_msa=5, templates=2, recycling_copies=4)
SEED = 0x5EED_1234_ABCD
# sha256 (first 16 hex digits) of each array of the reference's features on case(), train
# mode, SIZES, SEED; the same with mode="eval" and the default evaluation seed.
REFERENCE_SHA256 = {
    "train": {
        "aatype": "645e19cb12cfd46a",
        "all_atom_mask": "fb0a88fc2c69c39a",
        "all_atom_positions": "943ef26952577f61",
        "atom14_atom_exists": "a1615e8c083a3d74",
        "atom37_atom_exists": "eeebb85adbc84226",
        "bert_mask": "cac4ab3be1906764",
        "extra_has_deletion": "8ff1d63ac9d571f5",
        "extra_msa": "803b2c84cffaa9a5",
        "extra_msa_mask": "8ee8e618cd50888e",
        "extra_msa_row_mask": "822d06342bcaebfe",
        "is_distillation": "374708fff7719dd5",
        "msa_feat[exact columns]": "42e8d3d03fdceb5a",
        "msa_mask": "5ce183e97a10e7ae",
        "msa_row_mask": "9628e545ed3ac074",
        "residue_index": "39f1423fe5bd07dd",
        "residx_atom14_to_atom37": "da03ed05767c7f85",
        "residx_atom37_to_atom14": "677c7d18307ffc9a",
        "resolution": "766dcd9e0afacd80",
        "seq_length": "9a49a9b318db661e",
        "seq_mask": "c90489868a1a64a7",
        "target_feat": "ec7a2fc9fad86471",
        "template_aatype": "e27bfc4f63b0d7bd",
        "template_all_atom_mask": "9bcaae686d449284",
        "template_all_atom_positions": "08ae9477a162550c",
        "template_mask": "527d32343c0a9600",
        "template_pseudo_beta": "5141644963c3be4c",
        "template_pseudo_beta_mask": "16044b6ef771eb89",
        "template_sum_probs": "5172010935493f28",
        "true_msa": "e25e57581dd5302b",
        "use_clamped_fape": "f6bb1294da2f78cd",
    },
    "eval": {
        "aatype": "7402c5f5313314cd",
        "all_atom_mask": "3b4cf11845144ede",
        "all_atom_positions": "20c2ca5925208757",
        "atom14_atom_exists": "bbc7ef8e06c27fc6",
        "atom37_atom_exists": "dd54920d2530c8fa",
        "bert_mask": "b38e45f68751399c",
        "extra_has_deletion": "70b0305e1ef20bce",
        "extra_msa": "ad2a8ee1fd231b4c",
        "extra_msa_mask": "7da902a745287e38",
        "extra_msa_row_mask": "822d06342bcaebfe",
        "is_distillation": "374708fff7719dd5",
        "msa_feat[exact columns]": "c6550ae7ba2da7cc",
        "msa_mask": "5c9d51f4ee957e78",
        "msa_row_mask": "9628e545ed3ac074",
        "residue_index": "de1c1ef663b03ce8",
        "residx_atom14_to_atom37": "8f702f967f2ba037",
        "residx_atom37_to_atom14": "0288f3c878f03087",
        "resolution": "766dcd9e0afacd80",
        "seq_length": "1f90b41633c647af",
        "seq_mask": "beea08e0b2386530",
        "target_feat": "cff40f0a3c054b15",
        "template_aatype": "beacfcd8a62f5bed",
        "template_all_atom_mask": "f05e7b52aa46af54",
        "template_all_atom_positions": "4482b834d7d2d27d",
        "template_mask": "4f05df05f8da9356",
        "template_pseudo_beta": "4b9e37228f3a4567",
        "template_pseudo_beta_mask": "65a13dbb68b6da36",
        "template_sum_probs": "07f19e36eb8c01cd",
        "true_msa": "ab793d61675b11b1",
    },
}
HASHED = ("aatype", "residue_index", "seq_length", "seq_mask", "target_feat", "resolution",
          "is_distillation", "bert_mask", "true_msa", "msa_mask", "msa_row_mask", "extra_msa",
          "extra_msa_mask", "extra_msa_row_mask", "extra_has_deletion", "all_atom_positions",
          "all_atom_mask", "atom14_atom_exists", "residx_atom14_to_atom37",
          "residx_atom37_to_atom14", "atom37_atom_exists", "template_aatype",
          "template_all_atom_positions", "template_all_atom_mask", "template_sum_probs",
          "template_mask", "template_pseudo_beta", "template_pseudo_beta_mask")
MSA_FEAT_EXACT = np.r_[0:24, 25:48]  # one-hot, has_deletion, profile (no atan columns)


def _coil(length: int, phase: float) -> np.ndarray:
    """[length, 37, 3] closed-form coordinates (a helix, atoms spread along it): inputs that
    do not change when any generator does; rounded to 0.001 Å."""
    turn = 1.75 * np.arange(length)[:, None] + 0.3 * np.arange(37)[None, :] + phase
    rise = 1.5 * np.arange(length)[:, None] + 0.1 * np.arange(37)[None, :]
    return np.round(np.stack([2.3 * np.cos(turn), 2.3 * np.sin(turn), rise], -1), 3)


def case() -> tuple[feats.Chain, list, TemplateFeatures]:
    """A 20-residue chain (two unresolved residues, some missing side-chain atoms), its three
    a3m files, and three templates (nothing aligned on some residues of the second)."""
    aatype = feats.sequence_aatype(SEQUENCE)
    length = len(SEQUENCE)
    mask = rc.RESTYPE_ATOM37_MASK[aatype].astype(bool)
    mask[[4, 15]] = False
    mask[7, 5:] = False
    positions = (_coil(length, 0.0) * mask[..., None]).astype(np.float32)
    chain = feats.Chain("1abc_A", SEQUENCE, positions, mask, 2.1)
    alignments = [parse_a3m(UNIREF90, "uniref90_hits.a3m"),
                  parse_a3m(BFD_UNICLUST, "bfd_uniclust_hits.a3m"),
                  parse_a3m(MGNIFY, "mgnify_hits.a3m")]
    t_aatype = np.stack([aatype, np.roll(aatype, 1), aatype])
    t_aatype[1, :3] = 21  # nothing aligned there
    t_mask = rc.RESTYPE_ATOM37_MASK[np.minimum(t_aatype, 20)] * (t_aatype < 21)[..., None]
    t_positions = np.stack([_coil(length, phase) for phase in (0.5, 1.0, 2.0)])
    templates = TemplateFeatures.build(("2xyz_A", "3pqr_B", "4lmn_C"), t_aatype,
                                       t_positions * t_mask[..., None], t_mask,
                                       np.array([[9.5], [7.25], [3.0]]))
    return chain, alignments, templates


@pytest.fixture(scope="module")
def sample() -> dict[str, np.ndarray]:
    chain, alignments, templates = case()
    return feats.make_features(chain, alignments, templates, mode="train", sizes=SIZES, seed=SEED)


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_equals_the_reference(mode: str) -> None:
    """The arrays the reference produced for the same inputs and seed (see the module
    docstring for what is hashed); the atan columns agree with the formula."""
    chain, alignments, templates = case()
    seed = SEED if mode == "train" else None
    out = feats.make_features(chain, alignments, templates, mode=mode, sizes=SIZES, seed=seed)
    expected = REFERENCE_SHA256[mode]
    digests = {key: _digest(out[key]) for key in HASHED}
    digests["msa_feat[exact columns]"] = _digest(out["msa_feat"][..., MSA_FEAT_EXACT, :])
    if mode == "train":
        digests["use_clamped_fape"] = _digest(out["use_clamped_fape"])
    assert digests == expected
    deletions = np.tan(out["msa_feat"][..., 24, :] * np.pi / 2) * 3  # back to counts
    np.testing.assert_allclose(deletions, np.round(deletions), atol=2e-4)


def test_schema(sample: dict[str, np.ndarray]) -> None:
    """Every key of the reference's FEATURE_SHAPES (+ use_clamped_fape in training) with its
    padded shape, its dtype and the trailing recycling axis."""
    assert set(sample) == set(feats.FEATURE_SCHEMA) | {"use_clamped_fape"}
    sizes = {feats.N_RES: SIZES.crop, feats.N_CLUST: SIZES.msa_clusters,
             feats.N_EXTRA: SIZES.extra_msa, feats.N_TEMPL: SIZES.templates}
    for name, (shape, dtype) in feats.FEATURE_SCHEMA.items():
        expected = tuple(sizes.get(d, d) for d in shape) + (SIZES.recycling_copies,)
        assert sample[name].shape == expected, name
        assert sample[name].dtype == np.dtype(dtype), name
    assert sample["msa_feat"].shape[-2] == 49 and sample["target_feat"].shape[-2] == 22


def test_msa_concatenation_and_deduplication() -> None:
    """uniref90, bfd_uniclust, mgnify in order, each row once (its first deletions), letters
    in the HHblits code mapped to our order (B→D, Z→E, U→C, gap 21)."""
    _, alignments, _ = case()
    msa, deletions = feats.merge_alignments(SEQUENCE, alignments)
    rows = list(alignments[0].sequences) + [alignments[1].sequences[i] for i in (2, 3)] + \
        list(alignments[2].sequences)
    assert msa.shape == (len(rows), 20) and msa.dtype == np.int64
    order = rc.RESTYPES_WITH_X_AND_GAP
    decoded = ["".join(order[i] for i in row) for row in msa]
    hhblits_to_ours = str.maketrans("BZUJO", "DECXX")
    assert decoded == [row.translate(hhblits_to_ours) for row in rows]
    assert deletions[2, 8] == 1 and deletions[1, 14] == 2 and deletions.sum() == 3
    assert deletions.dtype == np.float32


def test_without_alignments_the_msa_is_the_query() -> None:
    msa, deletions = feats.merge_alignments(SEQUENCE, [None, None, None])
    # read in the HHblits code like any MSA row: B is D there (the aatype says X)
    np.testing.assert_array_equal(msa[0], feats.sequence_aatype(SEQUENCE.replace("B", "D")))
    assert msa.shape == (1, 20) and not deletions.any()


def test_copies_share_the_crop_and_differ_in_sampling(sample: dict[str, np.ndarray]) -> None:
    """One contiguous window for all copies; the query is the first cluster of every copy;
    the copies draw different clusters and masks."""
    index = sample["residue_index"]
    assert (index == index[:, :1]).all()
    start = int(index[0, 0])
    np.testing.assert_array_equal(index[:, 0], np.arange(start, start + SIZES.crop))
    window = slice(start, start + SIZES.crop)
    msa, _ = feats.merge_alignments(SEQUENCE, case()[1])
    for copy in range(SIZES.recycling_copies):
        # the MSA's query row reads B as D (HHblits code), the sequence's aatype as X
        np.testing.assert_array_equal(sample["true_msa"][0, :, copy], msa[0, window])
        np.testing.assert_array_equal(sample["aatype"][:, copy],
                                      feats.sequence_aatype(SEQUENCE)[window])
    assert len({sample["bert_mask"][..., c].tobytes() for c in range(4)}) == 4
    assert len({sample["true_msa"][..., c].tobytes() for c in range(4)}) > 1


def test_deterministic_in_the_seed() -> None:
    chain, alignments, templates = case()
    one = feats.make_features(chain, alignments, templates, mode="train", sizes=SIZES, seed=7)
    two = feats.make_features(chain, alignments, templates, mode="train", sizes=SIZES, seed=7)
    other = feats.make_features(chain, alignments, templates, mode="train", sizes=SIZES, seed=8)
    assert all(np.array_equal(one[k], two[k], equal_nan=True) for k in one)
    assert not np.array_equal(one["bert_mask"], other["bert_mask"])


def test_bert_masking_statistics() -> None:
    """About 15 % of the cluster positions are replaced; of those about 70 % become the mask
    token; positions not replaced show their true residue."""
    rng = np.random.default_rng(3)
    length, rows = 40, 120
    sequence = "".join(rng.choice(list(rc.RESTYPES), length))
    text = ">q\n" + sequence + "\n" + "".join(
        f">r{i}\n" + "".join(rng.choice(list(rc.RESTYPES) + ["-"], length)) + "\n"
        for i in range(rows))
    chain = feats.Chain("1xyz_A", sequence, np.zeros((length, 37, 3), np.float32),
                    np.zeros((length, 37), bool), 1.5)
    sizes = feats.FeatureSizes(crop=length, msa_clusters=100, extra_msa=30, templates=0,
                           recycling_copies=4)
    out = feats.make_features(chain, [parse_a3m(text)], None, mode="train", sizes=sizes, seed=11)
    masked = out["bert_mask"] > 0
    assert 0.13 < masked.mean() < 0.17
    shown = np.argmax(out["msa_feat"][..., :23, :], axis=-2)
    assert 0.66 < (shown[masked] == rc.MSA_MASK_ID).mean() < 0.74
    np.testing.assert_array_equal(shown[~masked], out["true_msa"][~masked])


def test_cluster_profile_by_brute_force() -> None:
    """msa_feat's profile and deletion-mean columns recomputed from the outputs: every extra
    row joins the cluster it agrees with most (residues and X count, gaps and masks not),
    and a cluster's profile counts its centre (the masked row) and its members."""
    chain, alignments, _ = case()
    sizes = feats.FeatureSizes(crop=20, msa_clusters=4, extra_msa=20, templates=0,
                           recycling_copies=2)
    out = feats.make_features(chain, alignments, None, mode="train", sizes=sizes, seed=99)
    for copy in range(2):
        feat = out["msa_feat"][..., copy]
        centres = np.argmax(feat[..., :23], axis=-1)
        n_extra = int(out["extra_msa_row_mask"][:, copy].sum())
        extra = out["extra_msa"][:n_extra, :, copy]
        agreement = ((extra[:, None] == centres[None]) & (extra[:, None] < 21)).sum(-1)
        member = np.argmax(agreement, axis=1)
        extra_deletions = np.tan(out["extra_deletion_value"][:n_extra, :, copy] * np.pi / 2) * 3
        centre_deletions = np.tan(feat[..., 24] * np.pi / 2) * 3
        for c in range(4):
            rows = extra[member == c]
            counts = np.eye(23)[rows].sum(0) + np.eye(23)[centres[c]]
            np.testing.assert_allclose(feat[c, :, 25:48], counts / (1 + len(rows) + 1e-6),
                                       rtol=1e-6)
            mean = (extra_deletions[member == c].sum(0) + centre_deletions[c]) / (
                1 + len(rows) + 1e-6)
            np.testing.assert_allclose(np.tan(feat[c, :, 48] * np.pi / 2) * 3, mean,
                                       atol=1e-3)


def test_padding_beyond_the_chain() -> None:
    """A chain shorter than the crop is kept whole and zero-padded (masks say where)."""
    chain, alignments, templates = case()
    sizes = feats.FeatureSizes(crop=32, msa_clusters=16, extra_msa=8, templates=4,
                           recycling_copies=1)
    out = feats.make_features(chain, alignments, templates, mode="train", sizes=sizes, seed=5)
    assert out["seq_mask"][:, 0].tolist() == [1.0] * 20 + [0.0] * 12
    assert out["seq_length"].tolist() == [20]
    assert out["msa_row_mask"][:, 0].sum() == 10  # 6 + 2 + 2 unique rows, all clusters
    assert not out["msa_feat"][10:].any() and not out["extra_msa_mask"].any()


def test_template_subsampling(sample: dict[str, np.ndarray]) -> None:
    """Training keeps a random run of a random permutation (possibly empty, at most N_templ);
    the kept templates are input templates cropped to the window."""
    _, _, templates = case()
    start = int(sample["residue_index"][0, 0])
    window = slice(start, start + SIZES.crop)
    kept = int(sample["template_mask"][:, 0].sum())
    assert kept <= SIZES.templates
    for t in range(kept):
        matches = [k for k in range(templates.count) if np.array_equal(
            sample["template_all_atom_positions"][t, ..., 0],
            templates.all_atom_positions[k, window])]
        assert len(matches) == 1
    seen = {int(feats.make_features(*case(), mode="train", sizes=SIZES, seed=s)[
        "template_mask"][:, 0].sum()) for s in range(20)}
    assert seen == {0, 1, 2}


def test_eval_mode() -> None:
    """Evaluation: the whole chain, templates in hit order, the seed of the chain id, no
    use_clamped_fape."""
    chain, alignments, templates = case()
    out = feats.make_features(chain, alignments, templates, mode="eval", sizes=SIZES)
    assert out["aatype"].shape == (20, 4) and "use_clamped_fape" not in out
    np.testing.assert_array_equal(out["residue_index"][:, 0], np.arange(20))
    np.testing.assert_array_equal(out["template_aatype"][..., 0], templates.aatype[:2])
    again = feats.make_features(chain, alignments, templates, mode="eval", sizes=SIZES,
                            seed=feats.eval_seed("1abc_A"))
    assert np.array_equal(out["bert_mask"], again["bert_mask"])


def test_use_clamped_fape(sample: dict[str, np.ndarray]) -> None:
    expected = float(random.Random(SEED).uniform(0, 1) < feats.USE_CLAMPED_FAPE_PROBABILITY)
    assert sample["use_clamped_fape"].tolist() == [expected] * 4
    chain, alignments, _ = case()
    values = {float(feats.make_features(chain, alignments, None, mode="train", sizes=SIZES,
                                    seed=s)["use_clamped_fape"][0]) for s in range(40)}
    assert values == {0.0, 1.0}


def test_seeds() -> None:
    """The reference's string hash; evaluation hashes the chain id."""
    assert feats.seed_from_string("1abc_A") == random.Random("1abc_A").getrandbits(64)
    assert feats.eval_seed("1abc_A") == feats.seed_from_string("1abc_A")
    seeds = feats.train_sample_seeds(1234567890, 5)
    assert seeds.dtype == np.int64 and (seeds >= 0).all() and len(set(seeds.tolist())) == 5


def test_torch_compatible_stream() -> None:
    """Each draw equals torch's CPU generator with the same seed (the reference's calls)."""
    torch = pytest.importorskip("torch")
    for seed in (0, 12345, 2**64 - 3, 0x5EED_1234_ABCD + 3):
        def gen(s: int = seed) -> object:
            g = torch.Generator()
            g.manual_seed(s % 2**64)
            return g
        stream = feats.TorchCompatibleStream(seed)
        np.testing.assert_array_equal(stream.rand((7, 3)),
                                      torch.rand((7, 3), generator=gen()).numpy())
        for n in (0, 1, 2, 257):
            assert feats.TorchCompatibleStream(seed).randperm(n).tolist() == \
                torch.randperm(n, generator=gen()).tolist()
        assert feats.TorchCompatibleStream(seed).randint(0, 9) == int(
            torch.randint(0, 9, (1,), generator=gen())[0])
        probs = torch.rand((50, 23), generator=gen()) ** 3 + 1e-10
        words = feats.TorchCompatibleStream(seed).exponential_words(probs.numel())
        mine = np.argmax(probs.numpy() / feats.TorchCompatibleStream.exponential_of(words).reshape(
            50, 23), axis=-1)
        theirs = torch.multinomial(probs, 1, replacement=True, generator=gen())[:, 0].numpy()
        np.testing.assert_array_equal(mine, theirs)
        assert feats.TorchCompatibleStream(seed).randint64(2**63 - 1, 4).tolist() == \
            torch.randint(0, 2**63 - 1, [4], generator=gen()).tolist()


@pytest.mark.parametrize(("change", "message"), [
    ({"mode": "predict"}, "feature mode must be one of ('train', 'eval'), got 'predict'"),
    ({"seed": None}, "a training sample needs its seed"),
    ({"alignments": [parse_a3m(">q\nMKTA\n", "mgnify_hits.a3m")]},
     "mgnify_hits.a3m: alignment has 4 columns, the chain's sequence 20 residues"),
    ({"alignments": [parse_a3m(">q\n" + "MKTAYIAKQRQ*SFVKSHFX\n", "uniref90_hits.a3m")]},
     "uniref90_hits.a3m: sequence 1 has '*' at column 12, not a residue letter"),
    ({"alignments": [parse_a3m("# nothing\n", "bfd_uniclust_hits.a3m")]},
     "bfd_uniclust_hits.a3m: alignment has no sequences"),
    ({"positions": np.zeros((19, 37, 3))}, "chain 1abc_A: atoms have shapes (19, 37, 3)"),
])
def test_errors_are_one_line(change: dict, message: str) -> None:
    chain, alignments, templates = case()
    if "positions" in change:
        chain = feats.Chain(chain.chain_id, chain.sequence, change["positions"],
                        chain.all_atom_mask, chain.resolution)
    with pytest.raises(SciperfError) as err:
        feats.make_features(chain, change.get("alignments", alignments), templates,
                        mode=change.get("mode", "train"), sizes=SIZES,
                        seed=change.get("seed", SEED))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
