"""Data staging: shares per node/local rank, verified atomic copies, reruns, MLLOG placement.

Unit tests drive `sciperf.data.staging` on real files; end-to-end tests run the real
`sciperf` command (one process, and two ranks under the local launcher) and check the
MLLOG with the official checker under both rulesets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sciperf.data.sharding import shard
from sciperf.data.staging import (
    copy_file,
    crc32_file,
    rank_share,
    stage_files,
    stage_root,
    staged_path,
)
from sciperf.errors import SciperfError
from sciperf.results.check import check_log

BIN = Path(sys.executable).parent
SMALL = ["experiment=mini", "data.train_samples=64", "data.eval_samples=32",
         "train.max_epochs=1", "framework.threads=1"]


def _tree(root: Path, n: int = 12, size: int = 5000) -> list[Path]:
    files = []
    for i in range(n):
        path = root / ("train" if i % 3 else "validation") / f"s{i:03d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size + i))
        files.append(path)
    return sorted(files)


@pytest.mark.parametrize(("nodes", "local"), [(1, 1), (1, 4), (2, 2), (3, 2), (4, 1)])
def test_rank_shares_are_disjoint_cover_everything_and_follow_the_node_split(nodes, local):
    files = [Path(f"f{i:03d}") for i in range(48)]
    shares = {(n, lr): rank_share(files, n, nodes, lr, local)
              for n in range(nodes) for lr in range(local)}
    flat = [f for share in shares.values() for f in share]
    assert sorted(flat) == files and len(set(flat)) == len(files)
    for n in range(nodes):  # a node's ranks together hold exactly the node's strided share
        node_files = sorted(f for lr in range(local) for f in shares[(n, lr)])
        assert node_files == sorted(shard(files, n, nodes))
    assert {len(s) for s in shares.values()} == {48 // (nodes * local)}


def test_stage_copies_verifies_and_rerun_skips_intact_files(tmp_path):
    src, dst = tmp_path / "data", tmp_path / "stage"
    files = _tree(src)
    first = stage_files(files, src, dst, workers=3, progress=False)
    assert (first.files, first.copied, first.skipped) == (12, 12, 0)
    assert first.bytes_copied == first.bytes_total == sum(f.stat().st_size for f in files)
    for f in files:
        copy = staged_path(f, src, dst)
        assert copy.read_bytes() == f.read_bytes()
        assert copy.stat().st_mtime_ns == f.stat().st_mtime_ns
    assert not [p for p in dst.rglob(".*")], "no temporary files may remain"
    again = stage_files(files, src, dst, workers=3, progress=False)
    assert (again.copied, again.skipped, again.bytes_copied) == (0, 12, 0)


def test_truncated_copy_is_restaged(tmp_path):
    src, dst = tmp_path / "data", tmp_path / "stage"
    files = _tree(src, n=4)
    stage_files(files, src, dst, progress=False)
    victim = staged_path(files[1], src, dst)
    victim.write_bytes(victim.read_bytes()[:100])
    report = stage_files(files, src, dst, progress=False)
    assert (report.copied, report.skipped) == (1, 3)
    assert victim.read_bytes() == files[1].read_bytes()


def test_checksum_mode_catches_same_size_corruption_that_size_mode_keeps(tmp_path):
    src, dst = tmp_path / "data", tmp_path / "stage"
    files = _tree(src, n=3)
    stage_files(files, src, dst, progress=False, verify="checksum")
    victim = staged_path(files[0], src, dst)
    st = victim.stat()
    data = bytearray(victim.read_bytes())
    data[10] ^= 0xFF
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime
    assert stage_files(files, src, dst, progress=False).copied == 0  # quick check is fooled
    report = stage_files(files, src, dst, progress=False, verify="checksum")
    assert report.copied == 1
    assert crc32_file(victim) == crc32_file(files[0])


def test_bad_staging_requests_fail_with_one_clear_line(tmp_path):
    src = tmp_path / "data"
    files = _tree(src, n=2)
    with pytest.raises(SciperfError, match="overlaps data.dir"):
        stage_root(src / "stage", src, "cosmoflow")
    with pytest.raises(SciperfError, match="data.stage_verify=md5"):
        stage_files(files, src, tmp_path / "s", verify="md5", progress=False)
    with pytest.raises(SciperfError, match="s999.bin does not exist"):
        stage_files([src / "train" / "s999.bin"], src, tmp_path / "s", progress=False)
    with pytest.raises(SciperfError, match="not inside data.dir"):
        staged_path(tmp_path / "elsewhere.bin", src, tmp_path / "s")


def test_unwritable_stage_dir_names_the_file_and_leaves_nothing(tmp_path):
    src = tmp_path / "data"
    files = _tree(src, n=1)
    blocker = tmp_path / "stage"
    blocker.write_text("a file where a directory should be")
    with pytest.raises(SciperfError, match="staging .* failed"):
        copy_file(files[0], staged_path(files[0], src, blocker), "size")
    assert blocker.read_text().startswith("a file")


def test_stage_dir_that_cannot_be_created_is_one_clear_error(tmp_path):
    src = tmp_path / "data"
    files = _tree(src, n=2)
    blocker = tmp_path / "stage"
    blocker.write_text("a file where the stage directory should be")
    with pytest.raises(SciperfError, match="staging: cannot create .*stage"):
        stage_files(files, src, blocker, progress=False)


def test_stage_root_keys_by_dataset_and_instance(tmp_path):
    a = stage_root(tmp_path / "s", tmp_path / "d1", "cosmoflow")
    b = stage_root(tmp_path / "s", tmp_path / "d2", "cosmoflow")
    assert a != b and a.parent == b.parent == (tmp_path / "s").resolve()
    assert stage_root(tmp_path / "s", tmp_path / "d1", "cosmoflow", 1) == a / "instance-1"


# --- end to end through the real command -------------------------------------------------

@pytest.fixture(scope="module")
def data(tiny_mini_data: Path) -> Path:
    return tiny_mini_data


def _keys(log: Path) -> list[str]:
    return [json.loads(line[len(":::MLLOG"):])["key"]
            for line in log.read_text().splitlines() if line.startswith(":::MLLOG")]


def _train(data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "sciperf"), "train", *SMALL, f"data.dir={data}",
                           f"output_dir={out}", *extra],
                          capture_output=True, text=True, timeout=300, check=False)


def _only_quality_fails(log: Path, ruleset: str) -> list[str]:
    """Checker problems other than the (unreachable in one epoch) eval_error target."""
    return [p for p in check_log(log, ruleset=ruleset).problems if "eval_error" not in p]


def test_staged_run_logs_staging_before_run_start_for_ruleset_3(data, tmp_path):
    stage = tmp_path / "stage"
    proc = _train(data, tmp_path / "out", f"data.stage_dir={stage}")
    assert proc.returncode == 1, proc.stderr[-2000:]  # ran; target not expected in 1 epoch
    log = tmp_path / "out" / "result_0.txt"
    keys = _keys(log)
    assert keys.index("staging_start") < keys.index("staging_stop") < keys.index("init_stop") \
        < keys.index("run_start")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["staging"]["files"] == 2 * (64 + 32)  # npy: data + label per sample
    root = next(stage.iterdir())
    staged = sorted(str(p.relative_to(root)) for p in root.rglob("*.npy"))
    assert staged == sorted(str(p.relative_to(data)) for p in data.glob("*/*.npy"))
    assert _only_quality_fails(log, "3.0.0") == []
    # the same log breaks the 2.0.0 rule (staging inside the run): the placement matters
    assert any("staging_start" in p for p in _only_quality_fails(log, "2.0.0"))

    again = _train(data, tmp_path / "out2", f"data.stage_dir={stage}")
    rerun = json.loads((tmp_path / "out2" / "summary.json").read_text())["staging"]
    assert (rerun["copied"], rerun["skipped"]) == (0, 2 * 96), again.stderr[-2000:]


def test_ruleset_2_puts_staging_inside_the_run(data, tmp_path):
    proc = _train(data, tmp_path / "out", f"data.stage_dir={tmp_path / 'stage'}",
                  "mllog.ruleset=2.0.0", "data.stage_verify=checksum")
    log = tmp_path / "out" / "result_0.txt"
    assert log.is_file(), proc.stderr[-2000:]
    keys = _keys(log)
    assert keys.index("run_start") < keys.index("staging_start") < keys.index("epoch_start")
    assert _only_quality_fails(log, "2.0.0") == []


def test_two_ranks_stage_disjoint_halves_of_the_node_share(data, tmp_path):
    stage, out = tmp_path / "stage", tmp_path / "out"
    proc = subprocess.run([str(BIN / "sciperf"), "launch", "launcher=local",
                           "launcher.nprocs=2", *SMALL, f"data.dir={data}", f"output_dir={out}",
                           f"data.stage_dir={stage}"],
                          capture_output=True, text=True, timeout=300, check=False)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2, proc.stderr[-2000:]
    assert summary["staging"]["files"] == 96  # rank 0 copied its half of 2 × 96 files
    assert len(list(stage.rglob("*.npy"))) == 2 * 96  # together: everything, once


def test_bad_staging_overrides_are_one_line(tmp_path):
    for override, needle in (("data.stage_verify=md5", "data.stage_verify=md5"),
                             ("mllog.ruleset=1.0.0", "mllog.ruleset=1.0.0")):
        proc = subprocess.run([str(BIN / "sciperf"), "show", override], capture_output=True,
                              text=True, check=False)
        assert proc.returncode == 2 and needle in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("case", ["file", "inside-data"])
def test_an_unusable_stage_dir_is_refused_before_any_record(data, tmp_path, case):
    """A stage_dir that is a file (or inside data.dir) was refused in one line, but only
    after result_0.txt and summary.json had been written: the corrected rerun then met
    "output_dir already holds a run"."""
    if case == "file":
        stage = tmp_path / "stage"
        stage.write_text("not a folder")
        needle = f"data.stage_dir={stage}"
    else:
        stage, needle = data / "stage", "overlaps data.dir"
    out = tmp_path / "out"
    proc = _train(data, out, f"data.stage_dir={stage}")
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("sciperf ")]
    assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr
    assert not out.exists() or not any(out.iterdir())
    assert not (data / "stage").exists()
