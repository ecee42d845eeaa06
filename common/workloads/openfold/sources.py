"""Where OpenFold's real data and starting checkpoint are published (`sciperf data
list/download/verify`).

The reference's README (mlcommons/hpc openfold/README.md, commit 7b07678 "Add download
links to README") publishes one Globus collection and one HTTPS folder holding the
processed dataset and the checkpoint, the tree they make (the checkpoint beside
``pdb_mmcif/processed`` and ``open_protein_set/processed``: the layout sciperf's readers
look for under data.dir), their sizes (1.1 GiB; 601 GiB + 15 GiB = 616 GiB in ~1k files)
and the checkpoint's SHA-256. The checkpoint's URL is that folder joined with the file
name the tree shows; the processed files are not named one by one, so that part is the
collection. The SHA-256 and the checkpoint's name are the spec's (its logged
``init_checkpoint_sha256sum``), and so are the split counts (closed_openfold.yaml).
"""

from __future__ import annotations

from sciperf.data.sources import DataPart, DataSources, GlobusPath, RemoteFile
from sciperf.workloads.openfold import spec

README = "github.com/mlcommons/hpc openfold/README.md (commit 7b07678)"
GLOBUS_ENDPOINT = "6b83c9b6-c9dc-11ed-9622-4b6fcc022e5a"
HTTPS_FOLDER = "https://portal.nersc.gov/cfs/m4291/openfold/"
GIB = 1 << 30

PROCESSED = DataPart(
    name="processed",
    description=("the reference's processed PDB mmCIF (chains.csv, dicts/, obsolete.dat) "
                 "and OpenProteinSet alignments (10 shards + super.index); the collection "
                 f"also holds the checkpoint (HTTPS folder: {HTTPS_FOLDER})"),
    fmt="processed",
    size_bytes=616 * GIB,  # "616 GiB": 601 GiB alignments + 15 GiB mmCIF
    samples={"train": spec.TRAIN_SAMPLES, "validation": spec.EVAL_SAMPLES},
    globus=GlobusPath(endpoint=GLOBUS_ENDPOINT, path="/", name="."),
    closed=(f"required: training draws from the {spec.TRAIN_SAMPLES:,} chains the "
            f"reference's filter keeps and validates on its {spec.EVAL_SAMPLES} CAMEO "
            "chains (closed_openfold.yaml checks both counts)"),
    mini="nothing: the mini runs on synthetic proteins from `sciperf prepare`",
    reference=README,
)

CHECKPOINT = DataPart(
    name="checkpoint",
    description=("the resumable checkpoint every closed run starts from "
                 "(train.init_checkpoint)"),
    fmt="checkpoint",
    size_bytes=int(1.1 * GIB),  # "1.1 GiB"
    files=1,
    https=(RemoteFile(url=HTTPS_FOLDER + spec.INIT_CHECKPOINT_NAME,
                      name=spec.INIT_CHECKPOINT_NAME, sha256=spec.INIT_CHECKPOINT_SHA256),),
    closed=("required: train.init_checkpoint is this file; its SHA-256 is logged "
            "(init_checkpoint_sha256sum) and must match"),
    mini=("nothing: `sciperf prepare` pre-trains the mini's own starting checkpoint "
          "(data.pretrain_epochs)"),
    reference=README + " (Checkpoint: sha256sum)",
)

SOURCES = DataSources(parts=(PROCESSED, CHECKPOINT),
                      counts={"train": spec.TRAIN_SAMPLES, "validation": spec.EVAL_SAMPLES})
