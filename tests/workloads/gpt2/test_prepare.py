"""OpenWebText's three releases → the same train.bin and val.bin: documents cleaned,
encoded, joined by end-of-text and split as nanoGPT splits them; bad sources in one line.
Skipped, with the reason, where no GPT-2 BPE file is installed."""

from __future__ import annotations

import importlib.util
import io
import lzma
import tarfile
from pathlib import Path

import numpy as np
import pytest

from sciperf.data import conversion
from sciperf.workloads.gpt2 import prepare, spec, tokenizer
from sciperf.workloads.gpt2 import tokens as tok
from testkit import refused

# two .xz files of the archive, their .txt members deliberately not in name order
DOCS = {"urlsf_subset00-1_data.xz": {"0002-b.txt": "Second  document.\n\n\n\nIts end. ",
                                     "0001-a.txt": "\nFirst document, it's short.\n"},
        "urlsf_subset00-2_data.xz": {"0003-c.txt": "Third: café 東京.",
                                     "0005-e.txt": "Fifth.\n\n\nLast.",
                                     "0004-d.txt": "Fourth one!"}}
ORDER = ["First document, it's short.", "Second  document.\n\nIts end.", "Third: café 東京.",
         "Fourth one!", "Fifth.\n\nLast."]  # sorted, cleaned


def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _xz_files() -> dict[str, bytes]:
    return {name: lzma.compress(_tar({k: v.encode() for k, v in docs.items()}))
            for name, docs in DOCS.items()}


def _encoder() -> tokenizer.Encoder:
    if not any(p.is_file() for p in tokenizer.candidates()):
        pytest.skip("no GPT-2 BPE file installed (openai-whisper ships one)")
    return tokenizer.encoder()


def _converted(root: Path) -> tuple[bytes, bytes]:
    conversion.run(prepare.CONVERSION, root, show_progress=False, summary=False)
    return ((root / "train.bin").read_bytes(), (root / "val.bin").read_bytes())


def test_archive_release_split_as_nanogpt_splits(tmp_path: Path) -> None:
    enc = _encoder()
    for name, data in _xz_files().items():
        (tmp_path / "openwebtext").mkdir(exist_ok=True)
        (tmp_path / "openwebtext" / name).write_bytes(data)
    train, val = _converted(tmp_path)
    want_train, want_val = prepare.split_documents(5)
    assert len(want_val) == 1 and len(want_train) == 4  # ⌈0.0005·5⌉, ⌊0.9995·5⌋
    for data, docs in ((train, want_train), (val, want_val)):
        ids = np.frombuffer(data, dtype=tok.DTYPE).tolist()
        expected: list[int] = []
        for d in docs:
            expected += [*enc.encode_ordinary(ORDER[d]), spec.END_OF_TEXT]
        assert ids == expected
    # the held-out document is HF train_test_split's: the permutation's first
    assert want_val[0] == np.random.default_rng(2357).permutation(5)[0]


def test_every_release_gives_the_same_files(tmp_path: Path) -> None:
    _encoder()
    archive, subsets = tmp_path / "archive", tmp_path / "subsets"
    (archive / "openwebtext").mkdir(parents=True)
    for name, data in _xz_files().items():
        (archive / "openwebtext" / name).write_bytes(data)
    (subsets / "subsets").mkdir(parents=True)
    (subsets / "subsets" / "urlsf_subset00.tar").write_bytes(
        _tar({f"openwebtext/{k}": v for k, v in reversed(_xz_files().items())}))
    reference = _converted(archive)
    assert _converted(subsets) == reference
    if importlib.util.find_spec("pyarrow") is None:
        pytest.skip("pyarrow is not installed: the parquet release was not checked")
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = tmp_path / "parquet"
    (parquet / "data").mkdir(parents=True)
    pq.write_table(pa.table({"text": ORDER[:2]}), parquet / "data" / "train-00000.parquet")
    pq.write_table(pa.table({"text": ORDER[2:]}), parquet / "data" / "train-00001.parquet")
    assert _converted(parquet) == reference


def test_bad_sources_are_one_line(tmp_path: Path) -> None:
    _encoder()
    assert refused(prepare.sources, tmp_path).startswith(f"{tmp_path}: no OpenWebText text")
    (tmp_path / "openwebtext").mkdir()
    bad = tmp_path / "openwebtext" / "urlsf_subset00-1_data.xz"
    bad.write_bytes(b"not xz")
    line = refused(conversion.run, prepare.CONVERSION, tmp_path, show_progress=False)
    assert line.startswith(f"{bad}: not an xz tar of .txt files")
    (tmp_path / "x.parquet").write_bytes(b"")
    assert "holds more than one release" in refused(prepare.sources, tmp_path)
