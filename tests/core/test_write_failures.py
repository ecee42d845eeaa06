"""A write the disk refuses stops the run in one line naming the file (issue: a full disk).

stdlib logging swallowed the MLLOG file's ENOSPC (a "--- Logging error ---" block per record)
and the run trained on to a raw traceback; summary.json kept "running" and a torch
checkpoint that did not fit left chained tracebacks and an empty `.summary.json.tmp`.
A kernel file-size limit (RLIMIT_FSIZE, no mount needed) fails writes as a full disk does.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from sciperf.config import compose
from sciperf.errors import SciperfError
from sciperf.results.mllog import MLLogger
from sciperf.run.files import check_init_files
from sciperf.weights import save_npz
from sciperf.workloads import get

TRAIN = ["train", "experiment=mini", "data.train_samples=64", "data.eval_samples=32",
         "train.global_batch_size=32", "train.target=0.0001", "framework.threads=1",
         "precision=fp32"]  # no precision probe (its cache is a file too)


def _file_size_limit(limit: int):
    """Writes past `limit` bytes fail with EFBIG, once SIGXFSZ is ignored."""
    import resource
    import signal

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def _train(cmd: list[str], data: Path, out: Path, *extra: str,
           limit: int | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SCIPERF_DEBUG"}
    return subprocess.run([*cmd, *TRAIN, f"data.dir={data}", f"output_dir={out}", *extra],
                          capture_output=True, text=True, timeout=300, check=False, env=env,
                          preexec_fn=_file_size_limit(limit) if limit else None)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "Logging error" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("sciperf ")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def _whole_records(log: Path) -> None:
    """The log holds whole MLLOG lines only (the cut record was dropped)."""
    text = log.read_text()
    assert text.endswith("\n"), text[-200:]
    for line in text.splitlines():
        json.loads(line.removeprefix(":::MLLOG "))


def _temporaries(out: Path) -> list[Path]:
    return [p for p in out.rglob(".*") if p.name.endswith(".tmp")]


# result_0.txt holds ~4.5 KB at run_start and grows ~1 KB an epoch; summary.json ~4.3 KB;
# a mini checkpoint's state.pt ~0.9 MB
@pytest.mark.parametrize(("limit", "extra", "first", "summary"), [
    (5500, (), "result_0.txt", "error"),  # the log fills in epoch 2
    (3000, (), "result_0.txt", None),  # in its header; summary too big
    (64 << 10, ("train.checkpoint_every=1",), "checkpoints/epoch_0001", "error"),
], ids=["log", "log-and-summary", "checkpoint"])
def test_a_refused_write_stops_the_run_in_one_line(
        sciperf_cmd, tiny_mini_data: Path, tmp_path: Path, limit: int,
        extra: tuple[str, ...], first: str, summary: str | None) -> None:
    out = tmp_path / "run"
    proc = _train(sciperf_cmd, tiny_mini_data, out, "train.max_epochs=8", *extra,
                  limit=limit)
    line = _one_line(proc)
    assert line.startswith(f"sciperf train: error: {out}/{first}: cannot be written ("), line
    assert "; is the disk full" in line, line
    assert "epoch   3/8" not in proc.stdout, proc.stdout  # stopped at the first failure
    _whole_records(out / "result_0.txt")
    assert not _temporaries(out)
    if summary is None:  # not even summary.json fitted: the line says so
        assert line.endswith(f"closing records not written: {out}/summary.json: cannot be "
                             "written (File too large; is the disk full?)"), line
        assert not (out / "summary.json").exists()
    else:
        assert "closing records" not in line, line
        assert json.loads((out / "summary.json").read_text())["status"] == summary
    if extra:  # the half-written checkpoint is gone, no folder claims to be one
        assert not list((out / "checkpoints").iterdir())


def test_a_log_that_cannot_be_written_raises_once_naming_it(capsys) -> None:
    """/dev/full: logging printed its traceback block and went on; now one error, and the
    closing records that follow write nothing (they do not raise again)."""
    mll = MLLogger("/dev/full")
    with pytest.raises(SciperfError, match=r"^/dev/full: cannot be written \(No space left "
                                           r"on device; is the disk full\?\)$"):
        mll.event("seed", 1)
    mll.run_stop(False, 1)
    mll.close()
    assert mll.failure == ("/dev/full: cannot be written (No space left on device; is the "
                           "disk full?)")
    assert "Logging error" not in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["missing", "truncated"])
def test_a_bad_init_weights_file_is_refused_before_any_record(
        sciperf_cmd, tiny_mini_data: Path, tmp_path: Path, kind: str) -> None:
    """Missing, or cut short (a copy that ran out of disk): the backend's load found the
    latter only after result_0.txt and summary.json were written."""
    out, path = tmp_path / "run", tmp_path / "w.npz"
    if kind == "truncated":
        whole = save_npz(tmp_path / "whole.npz", _zeros(_mini_cfg(path)))
        path.write_bytes(whole.read_bytes()[:-100])
    proc = _train(sciperf_cmd, tiny_mini_data, out, "train.max_epochs=1",
                  f"train.init_weights={path}")
    want = "no such file" if kind == "missing" else "cannot read weight file"
    assert _one_line(proc).startswith(f"sciperf train: error: train.init_weights={path}: "
                                      f"{want}"), proc.stderr[-2000:]
    assert not out.exists()


def _mini_cfg(path: Path):
    return compose(["workload=cosmoflow", "experiment=mini", f"train.init_weights={path}"])


def _zeros(cfg) -> dict[str, np.ndarray]:
    """A canonical weight file's arrays for `cfg`'s model, every entry its right shape."""
    shapes = get(cfg.workload).model_spec(cfg).weight_shapes()
    return {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}


@pytest.mark.parametrize("key", ["train.init_weights", "train.init_checkpoint"])
def test_init_files_are_checked(tmp_path: Path, key: str) -> None:
    """Every key whose role is `reads`: OpenFold declares train.init_checkpoint (other
    workloads' configs have no such key), every workload has train.init_weights."""
    section, name = key.split(".")
    workload = get("openfold" if name == "init_checkpoint" else "cosmoflow")
    cfg = OmegaConf.create({section: {name: str(tmp_path)}})
    with pytest.raises(SciperfError, match=f"^{key}={tmp_path}: is not a regular file$"):
        check_init_files(cfg, workload)
    with pytest.raises(SciperfError, match=f"^{key}={tmp_path}/no.pt: no such file"):
        check_init_files(OmegaConf.create({section: {name: str(tmp_path / "no.pt")}}),
                          workload)
    (tmp_path / "w.bin").write_bytes(b"x")  # OpenFold's loader reads its own format
    check_init_files(OmegaConf.create({"train": {"init_checkpoint": str(tmp_path / "w.bin")}}),
                      get("openfold"))
    check_init_files(OmegaConf.create({"train": {"init_weights": ""}}), workload)


def test_init_weights_are_read_and_fitted_to_the_model_before_the_run(tmp_path: Path) -> None:
    """The canonical .npz whole, as the backend reads it: not an archive, or the weights
    of another model (the full one for a mini run), is one line naming the key."""
    path = tmp_path / "w.npz"
    cfg = _mini_cfg(path)
    cosmoflow = get("cosmoflow")
    save_npz(path, _zeros(cfg))
    check_init_files(cfg, cosmoflow)
    path.write_bytes(b"x")
    with pytest.raises(SciperfError, match=rf"^train.init_weights={path}: cannot read weight "
                                           rf"file {path}: "):
        check_init_files(cfg, cosmoflow)
    full = compose(["workload=cosmoflow", "experiment=full", f"train.init_weights={path}"])
    save_npz(path, _zeros(full))
    with pytest.raises(SciperfError, match=rf"^train.init_weights={path}: {path}: "):
        check_init_files(cfg, cosmoflow)


def test_a_resume_that_cannot_write_its_log_is_one_line(sciperf_cmd, tiny_mini_data: Path,
                                                        tmp_path: Path) -> None:
    """The resumed log is the checkpoint's copy written aside: a full disk there was a
    traceback and left `.result_0.txt.tmp`."""
    out = tmp_path / "run"
    first = _train(sciperf_cmd, tiny_mini_data, out, "train.max_epochs=1",
                   "train.checkpoint_every=1")
    assert first.returncode == 1, first.stderr[-2000:]
    before = (out / "result_0.txt").read_text()
    proc = _train(sciperf_cmd, tiny_mini_data, out, "train.max_epochs=2", "train.resume=auto",
                  "train.checkpoint_every=1", limit=1000)
    assert "result_0.txt: cannot be written (File too large; is the disk full?)" in _one_line(proc)
    assert not _temporaries(out) and (out / "result_0.txt").read_text() == before
