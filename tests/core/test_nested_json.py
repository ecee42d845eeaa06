"""JSON nested past Python's recursion limit in any file sciperf reads back is malformed
JSON, said in one line or treated as a missing cache — never a RecursionError traceback.

`json.loads` raises RecursionError (not ValueError) for `[[[[…]]]]` a few KB deep, which
every reader below let escape. Each reader is called in process on the file a hostile
hand or a crash could leave.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sciperf import checkpoint, jsondata
from sciperf.errors import SciperfError

NESTED = "[" * 100_000 + "]" * 100_000


def test_loads_calls_deep_nesting_malformed() -> None:
    with pytest.raises(ValueError, match="recursion limit"):
        jsondata.loads(NESTED)
    assert jsondata.loads('{"a": [1]}') == {"a": [1]}


def test_a_checkpoint_manifest_nested_too_deeply_is_a_reason_to_skip(tmp_path: Path) -> None:
    path = tmp_path / "epoch_0001"
    path.mkdir()
    (path / checkpoint.MANIFEST).write_text(NESTED)
    assert checkpoint.problem(path) == f"no readable {checkpoint.MANIFEST} (ValueError)"


def test_a_checkpoint_driver_nested_too_deeply_is_no_valid_checkpoint(tmp_path: Path) -> None:
    path = checkpoint.folder(tmp_path) / "epoch_0001"
    path.mkdir(parents=True)
    (path / checkpoint.MANIFEST).write_text(json.dumps({"format": checkpoint.FORMAT,
                                                        "files": {}}))
    (path / checkpoint.DRIVER).write_text(NESTED)
    with pytest.raises(SciperfError) as info:
        checkpoint.latest(tmp_path)
    assert "\n" not in str(info.value)
    assert f"{path}: {checkpoint.DRIVER} is unusable (ValueError)" in str(info.value)


def test_the_dataset_manifest_nested_too_deeply_is_no_manifest(tmp_path: Path) -> None:
    from sciperf.data import manifest

    (tmp_path / manifest.MANIFEST).write_text(NESTED)
    assert manifest.entry(tmp_path, "npy") is None


def test_the_precision_cache_nested_too_deeply_is_an_empty_cache(tmp_path: Path) -> None:
    from sciperf import precision

    (tmp_path / "cache.json").write_text(NESTED)
    assert precision._read(tmp_path / "cache.json") == {}


def test_an_earlier_summary_nested_too_deeply_says_no_status(tmp_path: Path) -> None:
    from sciperf.run import resume

    (tmp_path / "summary.json").write_text(NESTED)
    assert resume._earlier_status(tmp_path / "summary.json") is None


def test_the_launch_verdict_reads_a_summary_nested_too_deeply_as_no_checkpoint(
        tmp_path: Path) -> None:
    report = pytest.importorskip("sciperf_launchers.report")
    (tmp_path / "summary.json").write_text(NESTED)
    assert report.checkpointed_since(tmp_path / "summary.json", 0) is False


def test_the_hang_fallback_writes_its_records_over_a_summary_nested_too_deeply(
        tmp_path: Path) -> None:
    from sciperf import heartbeat

    summary, log = tmp_path / "summary.json", tmp_path / "result_0.txt"
    summary.write_text(NESTED)
    heartbeat._fallback_records(log, summary, None, 3)
    record = json.loads(summary.read_text())
    assert record["status"] == "error" and record["epochs"] == 3
    assert '"run_stop"' in log.read_text()


def test_image_info_nested_too_deeply_is_one_line(tmp_path: Path, monkeypatch) -> None:
    from sciperf import info

    path = tmp_path / "image.json"
    path.write_text(NESTED)
    monkeypatch.setenv(info.IMAGE_INFO_ENV, str(path))
    with pytest.raises(SciperfError) as caught:
        info.image_info()
    assert str(caught.value).startswith(f"{path}: unreadable image info (nested deeper")


def test_an_openfold_alignment_index_nested_too_deeply_is_one_line(tmp_path: Path) -> None:
    from sciperf.workloads.openfold.layout.alignment_shards import AlignmentIndex
    from sciperf.workloads.openfold.layout.paths import ALIGNMENTS_DIR, SUPER_INDEX, LayoutError

    (tmp_path / ALIGNMENTS_DIR).mkdir(parents=True)
    (tmp_path / ALIGNMENTS_DIR / SUPER_INDEX.name).write_text(NESTED)
    with pytest.raises(LayoutError, match="not valid JSON .nested deeper"):
        AlignmentIndex(tmp_path)
