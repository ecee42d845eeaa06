"""The reference's processed OpenFold data layout: read it, and write it byte for byte.

What people download (spec §7, REF ``scripts/preprocess_pdb_mmcif.py``,
``scripts/preprocess_open_protein_set.py``, ``openfold/data/mmcif.py``,
``data/alignments.py``, ``datasets.py``) and what :mod:`..synthetic` writes, under one root,
each file with the module that reads and writes it::

    pdb_mmcif/processed/chains.csv        :mod:`.chains`      one row per author chain
    pdb_mmcif/processed/dicts/<id[1:3]>   :mod:`.dicts`       pickle {pdb_id: entry}, builtins
    pdb_mmcif/processed/obsolete.dat      :mod:`.obsolete`    the PDB's obsolete-id list
    open_protein_set/processed/pdb_alignments/{0..9}.db   :mod:`.alignment_shards`
    open_protein_set/processed/pdb_alignments/super.index :mod:`.alignment_shards`
    validation_targets.txt                :mod:`.splits`      (sciperf's synthetic sets only)

:mod:`.paths` names those files and holds what every format shares (:class:`LayoutError`,
the atomic write); :mod:`.splits` selects the training and validation chains from
``chains.csv`` (its rules and the CAMEO table), :mod:`.weights` gives the training sampler's
weight of each chain, :mod:`.templates_db` the template search's view of the layout. Each
module's docstring states the facts of its format that the reference's readers and
preprocessing depend on. Every name is re-exported here: callers write ``layout.X``.

Every malformed input (a missing or truncated shard, an offset beyond a file, a chain absent
from ``super.index``, corrupt zlib, a csv with other columns or a release date that is not
YYYY-MM-DD, a pickle that names a class, a dicts value of the wrong type) is a
:class:`LayoutError` whose one line names the file.
"""

from sciperf.workloads.openfold.layout.alignment_shards import (
    A3M_FILES,
    HHR_FILE,
    NUM_SHARDS,
    AlignmentIndex,
    AlignmentWriter,
    alignments,
    pack_open_protein_set,
    shard_of,
)
from sciperf.workloads.openfold.layout.chains import (
    CHAIN_COLUMNS,
    NO_CLUSTER,
    ChainRow,
    chain_rows,
    read_chains,
    read_entity_clusters,
    write_chains,
)
from sciperf.workloads.openfold.layout.dicts import (
    ChainAtoms,
    DictsEntry,
    LoadedChain,
    compress_atoms,
    decompress_atoms,
    dicts_file,
    load_chain,
    load_entry,
    read_dicts_file,
    split_chain_id,
    write_dicts,
)
from sciperf.workloads.openfold.layout.obsolete import ObsoleteEntry, read_obsolete, write_obsolete
from sciperf.workloads.openfold.layout.paths import (
    ALIGNMENTS_DIR,
    CHAINS_CSV,
    DICTS_DIR,
    FORMAT,
    OBSOLETE_DAT,
    PDB_DIR,
    SUPER_INDEX,
    VALIDATION_TARGETS,
    LayoutError,
)
from sciperf.workloads.openfold.layout.splits import (
    CAMEO_TARGETS,
    SPLITS,
    SplitRules,
    cameo_targets,
    read_validation_targets,
    split_chains,
    top_residue_frequency,
    write_validation_targets,
)
from sciperf.workloads.openfold.layout.templates_db import release_dates, template_database
from sciperf.workloads.openfold.layout.weights import (
    SAMPLER_LENGTH_CAP,
    SAMPLER_LENGTH_FLOOR,
    sampler_weight,
    training_weights,
)

__all__ = [
    "A3M_FILES", "ALIGNMENTS_DIR", "CAMEO_TARGETS", "CHAINS_CSV", "CHAIN_COLUMNS", "DICTS_DIR",
    "FORMAT", "HHR_FILE", "NO_CLUSTER", "NUM_SHARDS", "OBSOLETE_DAT", "PDB_DIR",
    "SAMPLER_LENGTH_CAP", "SAMPLER_LENGTH_FLOOR", "SPLITS", "SUPER_INDEX", "VALIDATION_TARGETS",
    "AlignmentIndex", "AlignmentWriter", "ChainAtoms", "ChainRow", "DictsEntry", "LayoutError",
    "LoadedChain", "ObsoleteEntry", "SplitRules",
    "alignments", "cameo_targets", "chain_rows", "compress_atoms", "decompress_atoms",
    "dicts_file", "load_chain", "load_entry", "pack_open_protein_set", "read_chains",
    "read_dicts_file", "read_entity_clusters", "read_obsolete", "read_validation_targets",
    "release_dates", "sampler_weight", "shard_of", "split_chain_id", "split_chains",
    "template_database", "top_residue_frequency", "training_weights", "write_chains",
    "write_dicts", "write_obsolete", "write_validation_targets",
]
