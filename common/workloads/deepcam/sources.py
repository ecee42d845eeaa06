"""Where DeepCAM's real data is published (`sciperf data list/download/verify`).

The reference publishes it on Globus only (mlcommons/hpc deepcam/README.md): one collection
whose dataset folder holds a README and ``All-Hist/``, the folder of all the data files,
split into train/, validation/ and test/ with the ``stats.h5`` the normalisation reads.
That ``All-Hist`` is the folder a run's data directory is (the README: "the data_dir
variable should point to the full path of the All-Hist directory"; NVIDIA's v3.0 README
reads ``<All-Hist>/train``, ``<All-Hist>/validation`` and ``<All-Hist>/stats.h5``), so the
transfer lands its contents in data.dir, where sciperf's readers look. The total size is
MLCommons' announcement of HPC v0.7 ("8.8 TB in the case of DeepCAM"); no checksum or file
count is published. The split counts are the spec's (fixed by the rules).
"""

from __future__ import annotations

from sciperf.data.sources import DataPart, DataSources, GlobusPath
from sciperf.workloads.deepcam import spec

GLOBUS_ENDPOINT = "0b226e2c-4de0-11ea-971a-021304b0cca7"

FULL = DataPart(
    name="full",
    description=("the CAM5/TECA climate set: one HDF5 file per 768x1152x16 sample, "
                 "train/, validation/, test/ and stats.h5 (Globus only)"),
    fmt="hdf5",
    size_bytes=8_800_000_000_000,  # "8.8 TB in the case of DeepCAM"
    samples={"train": spec.TRAIN_SAMPLES, "validation": spec.EVAL_SAMPLES},
    globus=GlobusPath(endpoint=GLOBUS_ENDPOINT, path="/All-Hist/", name="."),
    closed=(f"required: closed runs train on all {spec.TRAIN_SAMPLES:,} train and evaluate "
            f"all {spec.EVAL_SAMPLES:,} validation samples (closed_deepcam.yaml checks "
            "train_samples and eval_samples) with this stats.h5"),
    mini="nothing: the mini runs on synthetic data from `sciperf prepare`",
    reference=("github.com/mlcommons/hpc deepcam/README.md; github.com/mlcommons/"
               "hpc_results_v3.0 NVIDIA/benchmarks/deepcam/implementations/pytorch/README.md; "
               "https://mlcommons.org/en/news/mlperf-hpc-v07"),
)

SOURCES = DataSources(parts=(FULL,),
                      counts={"train": spec.TRAIN_SAMPLES, "validation": spec.EVAL_SAMPLES})
