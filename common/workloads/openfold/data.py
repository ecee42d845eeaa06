"""OpenFold's samples as the contract sees them: chains of the reference's processed layout.

A sample is a PDB chain, named ``<root>/pdb_mmcif/processed/chains.csv/<pdb_chain_id>``: a
record inside the container that lists it, as OC20's ``<container>/<index>`` (the staging,
sharding and loaders treat it like any sample path). The reader turns one into the
reference's feature dict:

* a training item is a :class:`Draw` — the chain and the sample seed the sampler drew with
  it (training draws chains with replacement, :func:`draw`): cropped to
  ``model.crop_size``, MSA rows sampled and BERT-masked from that seed, the top template
  hits shuffled with it;
* a validation item is the plain sample path: the whole chain, the seed from its id, the
  templates in hit order.

Per item: the chain's dicts entry (sequence, atoms), its alignment files (seek + read in a
shard), the a3m MSAs and the hhr hits parsed, the templates featurised (kalign where a hit
must be realigned), then :func:`.features.make_features`. The layout's shared tables
(chains.csv, the alignment index, the template database) are read once per process.

Batches (:func:`collate`) stack the feature dicts; validation chains of different lengths
are padded to the longest (masks mark the padding) — sciperf evaluates one chain per batch,
as the reference (the plan's ``eval_batch``).
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.errors import SciperfError
from sciperf.workloads.openfold import layout, sampler
from sciperf.workloads.openfold.features import make_features
from sciperf.workloads.openfold.parsers import Alignment, TemplateHit, parse_a3m, parse_hhr
from sciperf.workloads.openfold.schema import (
    FEATURE_SCHEMA,
    N_CLUST,
    N_EXTRA,
    N_RES,
    N_TEMPL,
    TRAIN_ONLY_FEATURES,
    Chain,
    FeatureSizes,
)
from sciperf.workloads.openfold.sizes import ModelSpec
from sciperf.workloads.openfold.templates import template_features

FORMATS = (layout.FORMAT,)


@dataclass(frozen=True)
class Draw:
    """A training item: the chain (its sample path) and the seed the sampler drew with it."""

    path: Path
    seed: int


def _root(sample: Path) -> Path:
    """The dataset root of a sample path (``<root>/<CHAINS_CSV>/<pdb_chain_id>``)."""
    root = Path(sample).parent
    for _ in layout.CHAINS_CSV.parts:
        root = root.parent
    return root


def sample_path(root: str | Path, pdb_chain_id: str) -> Path:
    """The sample path of a chain."""
    return Path(root) / layout.CHAINS_CSV / pdb_chain_id


def list_samples(root: str | Path, split: str, fmt: str, n: int = 0) -> list[Path]:
    """The split's chains in chains.csv order (training: the reference's filter;
    validation: the CAMEO targets, or the dataset's own ``validation_targets.txt``)."""
    _check_format(fmt)
    chains = layout.split_chains(root, split)
    if not chains:
        raise SciperfError(f"{Path(root) / layout.CHAINS_CSV}: no {split} chains")
    if n > len(chains):  # was trained on the fewer chains there, the log saying so silently
        raise SciperfError(f"{Path(root) / layout.CHAINS_CSV} holds {len(chains)} {split} "
                           f"chains but {n} were requested")
    chains = chains[:n] if n > 0 else chains
    return [sample_path(root, row.pdb_chain_id) for row in chains]


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise SciperfError(f"data.format={fmt}: OpenFold reads the reference's processed "
                           f"layout ({', '.join(FORMATS)})")


@functools.lru_cache(maxsize=8)
def _dataset_files(root: Path) -> tuple[Path, ...]:
    """Every file of a processed dataset: a chain's features may read any dicts file (its
    templates), so staging copies the whole layout (the node's ranks split the copying)."""
    shared = [root / layout.CHAINS_CSV, root / layout.SUPER_INDEX]
    optional = [root / layout.OBSOLETE_DAT, root / layout.VALIDATION_TARGETS]
    dicts = sorted((root / layout.DICTS_DIR).glob("*"))
    shards = sorted((root / layout.ALIGNMENTS_DIR).glob("*.db"))
    return tuple(shared + [p for p in optional if p.is_file()] + dicts + shards)


def sample_files(path: Path, fmt: str) -> list[Path]:
    """The files a sample may read: the whole processed layout (see :func:`_dataset_files`)."""
    return list(_dataset_files(_root(path)))


@functools.lru_cache(maxsize=8)
def _tables(root: Path) -> tuple[dict[str, layout.ChainRow], layout.AlignmentIndex, Any]:
    """chains.csv by id, the alignment index and the template database of one dataset
    (once per process: every loader thread of a rank shares them)."""
    rows = layout.read_chains(root)
    return ({row.pdb_chain_id: row for row in rows}, layout.AlignmentIndex(root),
            layout.template_database(root, rows))


@functools.lru_cache(maxsize=8)
def _check_tables(root: Path) -> None:
    """The dataset's tables read (:func:`_tables`) and every chain's ``super.index`` entry
    checked, the index as one table: a malformed entry is a refusal when the reader is
    built, not a failure when training first draws that chain (once per process)."""
    rows, index, _ = _tables(root)
    for chain_id in rows:
        if chain_id in index:
            index.files(chain_id)


def feature_sizes(model: ModelSpec) -> FeatureSizes:
    """The padded sizes of a sample for model spec `model`."""
    return FeatureSizes(crop=int(model.crop_size), msa_clusters=int(model.max_msa_clusters),
                        extra_msa=int(model.max_extra_msa), templates=int(model.max_templates),
                        recycling_copies=int(model.num_recycling_iters) + 1)


class ChainReader:
    """Reads one item (a :class:`Draw` in training, a sample path in validation) into the
    feature dict; picklable, no open handles (the tables are cached per process)."""

    x_shape: tuple[int, ...] = ()
    x_dtype = np.dtype(np.float32)
    y_shape: tuple[int, ...] = ()
    y_dtype = np.dtype(np.float32)

    def __init__(self, model: ModelSpec):
        self.sizes = feature_sizes(model)

    def __call__(self, item: Draw | Path) -> tuple[dict[str, np.ndarray], np.ndarray]:
        train = isinstance(item, Draw)
        path = Path(item.path if isinstance(item, Draw) else item)
        root, chain_id = _root(path), path.name
        rows, index, templates_db = _tables(root)
        row = rows.get(chain_id)
        if row is None:
            raise SciperfError(f"{root / layout.CHAINS_CSV}: no chain {chain_id}")
        chain = layout.load_chain(root, chain_id)
        msas, hits = parse_alignments(root, chain_id, index.read(chain_id),
                                      templates=self.sizes.templates > 0)
        seed = item.seed if isinstance(item, Draw) else None
        templates = None
        if hits is not None:
            templates = template_features(
                chain.sequence, hits, templates_db, query_pdb_id=row.pdb_id,
                query_release_date=datetime.date.fromisoformat(row.release_date),
                max_templates=self.sizes.templates, shuffle_seed=seed if train else None)
        feats = make_features(
            Chain(chain_id, chain.sequence, chain.all_atom_positions, chain.all_atom_mask,
                  chain.resolution), msas, templates, mode="train" if train else "eval",
            sizes=self.sizes, seed=seed)
        return feats, np.zeros((), np.float32)


def parse_alignments(root: str | Path, chain_id: str, files: dict[str, str], *,
                     templates: bool) -> tuple[list[Alignment | None], list[TemplateHit] | None]:
    """A chain's parsed alignment files (:meth:`.layout.AlignmentIndex.read`): its MSAs in
    merge order (None where a file is absent or empty) and, when `templates`, its hhr hits
    (None without an hhr). The reader and ``prepare data.source=existing`` both parse
    through here, so verification meets a malformed file exactly as training would."""
    source = f"{Path(root) / layout.ALIGNMENTS_DIR}:{chain_id}"
    msas = [parse_a3m(files[name], f"{source}/{name}") if files.get(name) else None
            for name in layout.A3M_FILES]
    hits = None
    if templates and files.get(layout.HHR_FILE):
        hits = parse_hhr(files[layout.HHR_FILE], f"{source}/{layout.HHR_FILE}")
    return msas, hits


def model_reader(root: str | Path, fmt: str, model: ModelSpec) -> ChainReader:
    """The contract's reader for a dataset root and a model spec (its sample sizes). The
    dataset's tables (chains.csv, super.index, obsolete.dat) are read now: the driver builds
    the reader before it claims output_dir (``Dataset.reader``), so a missing or corrupt
    table is refused with no run records, and the reader's items find them cached."""
    _check_format(fmt)
    _check_tables(Path(root))
    return ChainReader(model)


def collate(samples: list[tuple[dict[str, np.ndarray], np.ndarray]]
            ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Feature dicts → one batch dict (leading batch axis); samples of different lengths
    (validation) are zero-padded along the residue axes to the longest."""
    dicts = [s[0] for s in samples]
    longest = max(int(d["aatype"].shape[0]) for d in dicts)
    out = {}
    for name in dicts[0]:
        arrays = [_pad_residues(d[name], name, longest) for d in dicts]
        out[name] = np.stack(arrays)
    return out, np.stack([s[1] for s in samples])


def _pad_residues(array: np.ndarray, name: str, length: int) -> np.ndarray:
    """Zero-pad the residue axes of one feature (their positions in the schema)."""
    shape = (FEATURE_SCHEMA.get(name) or TRAIN_ONLY_FEATURES[name])[0]
    widths = [(0, length - array.shape[i]) if dim == N_RES else (0, 0)
              for i, dim in enumerate(shape)] + [(0, 0)]  # the trailing recycling axis
    if not any(w for _, w in widths):
        return array
    return np.pad(array, widths)


def payload_bytes(model: ModelSpec) -> int:
    """Bytes of one training sample's features (the crop, every recycling copy)."""
    sizes = feature_sizes(model)
    dims = {N_RES: sizes.crop, N_CLUST: sizes.msa_clusters, N_EXTRA: sizes.extra_msa,
            N_TEMPL: sizes.templates}
    total = 0
    for shape, dtype in (*FEATURE_SCHEMA.values(), *TRAIN_ONLY_FEATURES.values()):
        count = int(np.prod([dims.get(d, d) for d in shape], dtype=np.int64))
        total += count * sizes.recycling_copies * np.dtype(dtype).itemsize
    return total


def draw(files: Sequence[Path], cfg: Any, epoch: int, rank: int, world: int,
         count: int) -> list[Draw]:
    """This rank's `count` training items of 0-indexed cycle `epoch` (the workload's
    ``SampledPlan`` sampler): the reference's sampler — chains drawn with replacement by
    weight, each with its seed, the global stream strided over the ranks
    (:mod:`.sampler`)."""
    if not files:
        raise SciperfError("no training chains to draw from")
    root = _root(files[0])
    rows, _, _ = _tables(root)
    chosen = [rows[Path(f).name] for f in files]
    weights = layout.training_weights(chosen)
    local_batch = count // int(cfg.train.val_every_iters)
    pairs = sampler.rank_epoch_draws(weights, int(cfg.seed), epoch, rank, world, local_batch,
                                     int(cfg.train.val_every_iters))
    return [Draw(Path(files[i]), int(s)) for i, s in pairs]
