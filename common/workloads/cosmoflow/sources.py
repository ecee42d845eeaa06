"""Where CosmoFlow's real data is published (`sciperf data list/download/verify`).

Every fact is from the reference's README (mlcommons/hpc cosmoflow/README.md, commit
db72e2c "update cosmoflow globus link", 2024-02-07): the Globus collection, the HTTPS folder
that holds the same contents, the v1.0 tarball's name, size and sample counts, and the
small starter tarball of the v0.7 preparation with its size and counts. The README names
the folder and the files, so each file's URL is the folder joined with its name, and its
Globus path the same name at the collection's root. No checksum, exact byte size or file
count is published. The split counts are the spec's (every number once: ``spec``).
"""

from __future__ import annotations

from sciperf.data.sources import DataPart, DataSources, GlobusPath, RemoteFile
from sciperf.workloads.cosmoflow import spec

README = "github.com/mlcommons/hpc cosmoflow/README.md (commit db72e2c)"
HTTPS_FOLDER = "https://portal.nersc.gov/project/dasrepo/cosmoflow-benchmark/"
GLOBUS_ENDPOINT = "31647fba-a006-4322-ad3e-9a4f124db422"
FULL_TAR = "cosmoUniverse_2019_05_4parE_tf_v2.tar"
SMALL_TGZ = "cosmoUniverse_2019_05_4parE_tf_small.tgz"
MINI_NEEDS = "nothing: the mini runs on synthetic data from `sciperf prepare`"

FULL = DataPart(
    name="full",
    description=("the MLPerf HPC v1.0 preparation: gzip-compressed TFRecords, one "
                 "128x128x128x4 sample per file, in train/, validation/ and test/ folders"),
    fmt="tfrecord",
    size_bytes=1_700_000_000_000,  # "a 1.7TB tarball"
    samples={"train": spec.TRAIN_SAMPLES, "validation": spec.EVAL_SAMPLES},
    https=(RemoteFile(url=HTTPS_FOLDER + FULL_TAR, name=FULL_TAR, unpack=True),),
    globus=GlobusPath(endpoint=GLOBUS_ENDPOINT, path="/" + FULL_TAR, name=FULL_TAR,
                      recursive=False),
    closed=(f"required: closed runs train on all {spec.TRAIN_SAMPLES:,} train samples and "
            f"evaluate all {spec.EVAL_SAMPLES:,} validation samples of this preparation"),
    mini=MINI_NEEDS,
    reference=README,
)

SMALL = DataPart(
    name="small",
    description=("the README's starter set of the earlier v0.7 preparation: 32 train and "
                 "32 validation TFRecords, a real-data smoke test"),
    fmt="tfrecord",
    size_bytes=179_000_000,  # "a small tarball (179MB)"
    samples={"train": 32, "validation": 32},
    https=(RemoteFile(url=HTTPS_FOLDER + SMALL_TGZ, name=SMALL_TGZ, unpack=True),),
    globus=GlobusPath(endpoint=GLOBUS_ENDPOINT, path="/" + SMALL_TGZ, name=SMALL_TGZ,
                      recursive=False),
    closed="not usable: 64 samples of the v0.7 preparation, not the closed dataset",
    mini=MINI_NEEDS + " (this set is optional, to try the real format)",
    reference=README,
)

SOURCES = DataSources(parts=(FULL, SMALL),
                      counts={"train": spec.TRAIN_SAMPLES, "validation": spec.EVAL_SAMPLES})
