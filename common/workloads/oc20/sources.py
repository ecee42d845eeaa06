"""Where OC20's real data is published (`sciperf data list/download/verify`).

Two roads to the same structures. The reference (mlcommons/hpc open_catalyst/README.md)
distributes its preprocessed LMDBs as one tarball on a Globus collection and a NERSC web
folder; neither the tarball's name nor its size is published, so the part gives the
collection (the HTTPS folder cannot name a file). Inside it the reference reads
``oc20_data/s2ef/2M/train`` and ``oc20_data/s2ef/all/val_id`` (the v3.0 submissions'
run_and_time.sh defaults), 64 ``data.NNNN.lmdb`` files each (scripts/preprocess_ef.py).

The raw S2EF tarballs those LMDBs are built from are on the Open Catalyst Project's
server with MD5 checksums (fair-chem docs/core/datasets/oc20.md). The copy of that table
in the reference's open_catalyst/DATASET.md predates the OCP fix that swapped the 2M and
20M checksums ("swap checksums", FAIR-Chem/fairchem #303), so the MD5 of the 2M tarball is
fair-chem's. Their sizes are published rounded ("3.4G", "1.7G") in an unstated unit, so no
byte size is given. The structure counts are scripts/download_data.py's S2EF_COUNTS (2M;
val_id), which are the spec's.
"""

from __future__ import annotations

from sciperf.data.sources import DataPart, DataSources, GlobusPath, RemoteFile
from sciperf.workloads.oc20 import spec

GLOBUS_ENDPOINT = "7008326a-def1-11eb-9b4d-47c0f9282fb8"
HTTPS_FOLDER = "https://portal.nersc.gov/project/dasrepo/mlperf-oc20/"
OCP_DATA = "https://dl.fbaipublicfiles.com/opencatalystproject/data/"
COUNTS = {"train": spec.TRAIN_SAMPLES, "validation": spec.EVAL_SAMPLES}
MINI_NEEDS = "nothing: the mini runs on synthetic EMT slabs from `sciperf prepare`"

LMDB = DataPart(
    name="lmdb",
    description=("the reference's preprocessed S2EF 2M train and val_id LMDBs (edges "
                 "precomputed, referenced energies), one tarball; after unpacking, "
                 "s2ef/2M/train is data.dir/train and s2ef/all/val_id data.dir/validation "
                 f"(also on {HTTPS_FOLDER})"),
    fmt="lmdb",
    samples=dict(COUNTS),
    globus=GlobusPath(endpoint=GLOBUS_ENDPOINT, path="/", name="mlperf-oc20"),
    closed=(f"required (or rebuilt from part raw): the {spec.TRAIN_SAMPLES:,} train and "
            f"{spec.EVAL_SAMPLES:,} val_id structures the reference trains and evaluates"),
    mini=MINI_NEEDS,
    reference=("github.com/mlcommons/hpc open_catalyst/README.md and "
               "open_catalyst/scripts/download_data.py (S2EF_COUNTS); github.com/mlcommons/"
               "hpc_results_v3.0 HPE+LBNL/benchmarks/oc20/implementations/"
               "opencatalyst-pytorch/run_and_time.sh"),
)

RAW = DataPart(
    name="raw",
    description=("the Open Catalyst Project's S2EF tarballs (extxyz.xz trajectories + "
                 "txt; 2M: 3.4G packed / 17G unpacked, val_id: 1.7G / 8.3G), input to the "
                 "reference's scripts/preprocess_ef.py --get-edges --ref-energy"),
    fmt="raw",
    samples=dict(COUNTS),
    https=(RemoteFile(url=OCP_DATA + "s2ef_train_2M.tar", name="raw/s2ef_train_2M.tar",
                      md5="953474cb93f0b08cdc523399f03f7c36"),
           RemoteFile(url=OCP_DATA + "s2ef_val_id.tar", name="raw/s2ef_val_id.tar",
                      md5="f57f7f5c1302637940f2cc858e789410")),
    closed="optional: the source of part lmdb, for rebuilding it with the reference's scripts",
    mini=MINI_NEEDS,
    reference=("github.com/FAIR-Chem/fairchem docs/core/datasets/oc20.md (S2EF table; "
               "checksums as corrected in commit 1c27cae, #303); github.com/mlcommons/hpc "
               "open_catalyst/scripts/download_data.py"),
)

SOURCES = DataSources(parts=(LMDB, RAW), counts=dict(COUNTS))
