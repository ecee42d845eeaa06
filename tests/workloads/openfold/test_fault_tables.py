"""OpenFold's dataset tables are checked before a run claims its output_dir (issue 37):
``super.index`` (missing, or an entry that is not ``{"db", "files"}``) and ``obsolete.dat``
(not text) end ``sciperf train`` in one line naming the file, exit 2, and no
result_0.txt/summary.json — so the run after the fix may use the same folder.

The reader's items read these tables only when training draws a chain; the driver builds
the reader (``Dataset.reader``) before the claim, and building it reads them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from sciperf.workloads.openfold import layout
from testkit import cli, one_error_line

# one step of one chain, one validation chain, no starting checkpoint: a refusal comes at
# setup, before any training
RUN = ("workload=openfold", "experiment=mini", "framework=pytorch", "data.train_samples=1",
       "data.eval_samples=1", "train.global_batch_size=1", "train.val_every_iters=1",
       "train.max_epochs=1", "model.num_recycling_iters=1", "train.checkpointing=false",
       "framework.threads=1", "train.init_checkpoint=")


@pytest.fixture(scope="module")
def openfold_data(shared_tmp: Path) -> Path:
    """16 + 2 synthetic chains in the processed layout, prepared once per session."""
    from runzoo import prepared
    return prepared(shared_tmp, "workload=openfold", "experiment=mini",
                    "data.train_samples=16", "data.eval_samples=2", "data.pretrain_epochs=0")


def _index_missing(root: Path) -> tuple[Path, str]:
    path = root / layout.SUPER_INDEX
    path.unlink()
    return path, "cannot read the alignment index"


def _index_entry_malformed(root: Path) -> tuple[Path, str]:
    """Every entry a number: valid JSON, an object of chains, no chain readable."""
    path = root / layout.SUPER_INDEX
    index = json.loads(path.read_text())
    path.write_text(json.dumps(dict.fromkeys(index, 5)))
    return path, 'is not {"db": name, "files": [[basename, offset, size], ...]}'


def _obsolete_not_text(root: Path) -> tuple[Path, str]:
    path = root / layout.OBSOLETE_DAT
    assert path.is_file()
    path.write_bytes(b"\xff\xfe OBSLTE")
    return path, "cannot read the obsolete list"


DAMAGE: dict[str, Callable[[Path], tuple[Path, str]]] = {
    "super.index-missing": _index_missing,
    "super.index-entry-malformed": _index_entry_malformed,
    "obsolete.dat-not-text": _obsolete_not_text,
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_bad_table_is_refused_before_output_dir_is_claimed(openfold_data: Path,
                                                             tmp_path: Path,
                                                             case: str) -> None:
    root = Path(shutil.copytree(openfold_data, tmp_path / "data"))
    path, words = DAMAGE[case](root)
    out = tmp_path / "run"
    line = one_error_line(cli("train", *RUN, f"data.dir={root}", f"output_dir={out}"),
                          "train")
    assert str(path) in line and words in line, line
    assert not (out / "result_0.txt").exists() and not (out / "summary.json").exists()
