"""Where OpenWebText is published (`sciperf data list/download/verify`).

OpenWebText (Gokaslan & Cohen 2019, skylion007.github.io/OpenWebTextCorpus) is 8,013,769
documents of English web text. Three releases hold the same documents:

* the original archive on Zenodo (record 3834942): ``openwebtext.tar.xz``, whose folder
  ``openwebtext/`` holds ``urlsf_subsetNN-M_data.xz`` files, each an xz-compressed tar of
  one ``.txt`` file per document. Its URL, byte size and SHA-256, the document count and
  the text's size (39,769,494,896 bytes) are those of the Hugging Face datasets loading
  script that read it (github.com/huggingface/datasets datasets/openwebtext/
  dataset_infos.json and openwebtext.py, which sorts the xz files and, inside each, the
  txt files by name — the document order nanoGPT's split numbers);
* the same ``.xz`` files regrouped as 21 plain tars, ``subsets/urlsf_subset00.tar`` …
  ``urlsf_subset20.tar``, in the Hugging Face dataset repository Skylion007/openwebtext
  (its streamable loading script, "Make the dataset streamable (#3)"); no sizes or
  checksums are published for them;
* parquet files with a ``text`` column in the same repository (the owner's "Upload
  dataset" pull requests #19 and #20, under ``data/``); their names and sizes are not
  published on a page this module could cite, so the part names the repository only.

Tokenised with the GPT-2 BPE and split as nanoGPT's data/openwebtext/prepare.py splits
(4,007 documents held out), the token counts are the spec's (its readme).
"""

from __future__ import annotations

from sciperf.data.sources import DataPart, DataSources, RemoteFile
from sciperf.workloads.gpt2 import spec

ZENODO = "https://zenodo.org/record/3834942/files/openwebtext.tar.xz"
HF_REPO = "https://huggingface.co/datasets/Skylion007/openwebtext"
SUBSETS = 21
MINI_NEEDS = "nothing: the mini runs on the synthetic Markov stream from `sciperf prepare`"
CONVERT = ("`sciperf prepare data.source=convert` (or `sciperf data convert`) tokenises it "
           "into train.bin and val.bin")

ARCHIVE = DataPart(
    name="archive",
    description=(f"the original release, {spec.DOCUMENTS:,} documents: one tar.xz of "
                 "openwebtext/*.xz (each an xz tar of one .txt per document), unpacked into "
                 f"data.dir; {CONVERT}"),
    fmt="raw",  # text the conversion tokenizes (.xz tars)
    size_bytes=12_880_027_468,
    https=(RemoteFile(url=ZENODO, name="openwebtext.tar.xz", size=12_880_027_468,
                      sha256="9fe39d154c5bc67da8c359415372b79510eb1e2edb0d035fe4f7fc3a732b9336",
                      unpack=True),),
    closed="the source of the token files: every document, split as nanoGPT splits it",
    mini=MINI_NEEDS,
    reference=("github.com/huggingface/datasets datasets/openwebtext/dataset_infos.json "
               "(commit 040102f) and openwebtext.py; skylion007.github.io/OpenWebTextCorpus"),
)

SUBSET_TARS = DataPart(
    name="subsets",
    description=("the same .xz files as 21 plain tars (subsets/urlsf_subsetNN.tar), read "
                 f"in place; {CONVERT}"),
    fmt="raw",  # text the conversion tokenizes (.xz tars)
    files=SUBSETS,
    https=tuple(RemoteFile(url=f"{HF_REPO}/resolve/main/subsets/urlsf_subset{i:02d}.tar",
                           name=f"subsets/urlsf_subset{i:02d}.tar")
                for i in range(SUBSETS)),
    closed="an alternative to part archive (the same documents)",
    mini=MINI_NEEDS,
    reference=f"{HF_REPO} (subsets/, its loading script openwebtext.py)",
)

# no per-split sample counts: the splits are token files the conversion writes, not
# published samples `sciperf data verify` could count
# The parquet release (a `text` column; its files appear only in the Hugging Face
# repository's pull requests #19 and #20, names unpublished) converts as well, but is not
# a part: nothing names a file to fetch.
SOURCES = DataSources(parts=(ARCHIVE, SUBSET_TARS))
