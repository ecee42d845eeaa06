"""`sciperf prepare` / `sciperf run` refuse what they cannot do before they write: a
`data.dir` that cannot take the dataset, and (run) a framework that lacks the workload —
one line naming it, exit 2, nothing generated.

Each case runs the verb's main in this process (testkit.cli); only the full disk, a
kernel limit set on a process of its own, starts the console script."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from testkit import SCIPERF, cli, one_error_line


def _one_line(proc: subprocess.CompletedProcess, verb: str, *words: str) -> str:
    """Exit 2, no traceback, one `sciperf VERB: error:` line on stderr naming every one of
    `words` (testkit.one_error_line: in process, nothing else reaches stderr)."""
    line = one_error_line(proc, verb)
    for word in words:
        assert word in line, (word, line)
    return line


@pytest.mark.parametrize("workload", ["cosmoflow", "deepcam", "oc20", "openfold"])
@pytest.mark.parametrize("case", ["file", "below-a-file"])
def test_prepare_refuses_a_data_dir_it_cannot_write(tmp_path: Path,
                                                    workload: str, case: str) -> None:
    """A file where the dataset should go (or on its path) is one line naming data.dir,
    before any generator starts — not a NotADirectoryError from deep in the writer."""
    blocker = tmp_path / "blocker"
    blocker.write_text("keep")
    data = blocker if case == "file" else blocker / "data"
    proc = cli("prepare", f"workload={workload}", "experiment=mini", f"data.dir={data}",
               cwd=tmp_path)
    _one_line(proc, "prepare", f"data.dir={data}")
    assert blocker.read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]


@pytest.mark.parametrize("source", ["synthetic", "existing"])
def test_only_sources_that_write_probe_the_data_dir(monkeypatch, tmp_path: Path,
                                                    source: str) -> None:
    """Verifying a download must work on a read-only filesystem: `existing` writes
    nothing, so the writability probe is asked of every other source only."""
    from sciperf.config import compose
    from sciperf.errors import SciperfError
    from sciperf.tools import prepare as tool
    from sciperf.workloads import get

    def unwritable(path: Path, what: str) -> None:
        raise SciperfError(f"{what}{path} cannot be written (probe)")

    ran: list[str] = []
    sources = {name: (lambda cfg, force, name=name: ran.append(name))
               for name in get("cosmoflow").dataset.prepare}
    monkeypatch.setattr(tool, "check_output_dir", unwritable)
    monkeypatch.setattr(tool, "get", lambda name: _with_sources(get(name), sources))
    cfg = compose(["experiment=mini", f"data.source={source}",
                   f"data.dir={tmp_path / 'new'}"])
    if source == "existing":
        tool.prepare(cfg)
        assert ran == ["existing"]
    else:
        with pytest.raises(SciperfError, match="cannot be written"):
            tool.prepare(cfg)
        assert ran == []
    # an existing directory is the source's to judge: a complete set on a read-only mount
    # is "dataset ready" (the probe refused it), an incomplete one its check_writable
    ran.clear()
    tool.prepare(compose(["experiment=mini", f"data.source={source}", f"data.dir={tmp_path}"]))
    assert ran == [source]


def _with_sources(workload, sources):
    """`workload` whose dataset's prepare sources are `sources` (recorders, not writers)."""
    import dataclasses
    return dataclasses.replace(workload, dataset=dataclasses.replace(workload.dataset,
                                                                      prepare=sources))


def _without_openfold(monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorFlow's registry as if its OpenFold were not yet written (a missing pair)."""
    from sciperf.backends import load_registry
    monkeypatch.delitem(load_registry("tensorflow").BACKENDS, "openfold")


def test_run_refuses_a_missing_pair_before_preparing(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`sciperf run` prepares, then trains: a framework that lacks the workload is refused
    first, not after a dataset (OpenFold's: a pre-trained starting checkpoint) was made."""
    pytest.importorskip("tensorflow")
    _without_openfold(monkeypatch)
    data, out = tmp_path / "data", tmp_path / "out"
    proc = cli("run", "workload=openfold", "framework=tensorflow", "experiment=mini",
               f"data.dir={data}", f"output_dir={out}", cwd=tmp_path)
    _one_line(proc, "run", "tensorflow does not implement openfold")
    assert not data.exists() and not out.exists()


@pytest.mark.parametrize("verb", ["prepare", "train", "characterize"])
def test_other_verbs_refuse_a_missing_pair_first(verb: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare generated all 272 chains before its pre-training met the pair; train said
    "run `sciperf prepare`" for a pair no dataset can make work; characterize wrote a
    characterize.json labelled with a framework that has no such workload."""
    pytest.importorskip("tensorflow")
    _without_openfold(monkeypatch)
    data, out = tmp_path / "data", tmp_path / "out"
    extra = [f"--out={out}"] if verb == "characterize" else [f"output_dir={out}"]
    proc = cli(verb, "workload=openfold", "framework=tensorflow", "experiment=mini",
               f"data.dir={data}", *(extra if verb != "prepare" else []), cwd=tmp_path)
    _one_line(proc, verb, "tensorflow does not implement openfold")
    assert not data.exists() and not out.exists()


# (workload, the reference's file in a split folder, the format it is)
REAL = [("cosmoflow", "train/univ_ics_2019-03_a10000668_000.tfrecord", "tfrecord"),
        ("deepcam", "train/data-2016-06-08-03-1.h5", "hdf5"),
        ("oc20", "train/data.0000.lmdb", "lmdb")]


@pytest.mark.parametrize(("workload", "name", "fmt"), REAL)
def test_a_synthetic_prepare_never_replaces_a_dataset_it_did_not_write(
        tmp_path: Path, workload: str, name: str, fmt: str) -> None:
    """A data.dir holding the reference's files (no sciperf_dataset.json): the synthetic
    generator deleted them and wrote its own, exit 0 — a real dataset gone."""
    data = tmp_path / "real"
    real = data / name
    real.parent.mkdir(parents=True)
    real.write_bytes(b"the user's data")
    proc = cli("prepare", f"workload={workload}", "experiment=mini", f"data.dir={data}",
               f"data.format={fmt}", "data.train_samples=4", "data.eval_samples=4",
               cwd=tmp_path)
    _one_line(proc, "prepare", str(real), "a dataset sciperf's generator did not write",
              "data.source=existing")
    assert real.read_bytes() == b"the user's data"
    assert sorted(p.relative_to(data).as_posix() for p in data.rglob("*")) == \
        sorted({name.split("/")[0], name})


def test_an_interrupted_first_generation_is_still_the_generators(tmp_path: Path) -> None:
    """The manifest is written before the first sample: the files of a generation killed
    half-way (no finished entry) are replaced by the next prepare, not refused."""
    from sciperf.data import manifest
    data = tmp_path / "synth"
    manifest.claim(data, [])
    (data / "train").mkdir()
    (data / "train" / "univ_synth_0000000.data.npy").write_bytes(b"half")
    proc = cli("prepare", "experiment=mini", f"data.dir={data}", "data.train_samples=4",
               "data.eval_samples=4", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list((data / "train").glob("*.data.npy"))) == 4


def _file_size_limit(limit: int):
    """A kernel limit on file size for the child (no mount needed): writes past it fail
    with EFBIG, as on a full disk, once SIGXFSZ is ignored."""
    import resource
    import signal

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def _subprocess_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2 and one `sciperf …` line naming every one of `words`, no traceback; in a
    process of its own TensorFlow's C++ start-up lines may go to stderr before it."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("sciperf ")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


@pytest.mark.parametrize(("workload", "fmt", "limit"), [
    ("cosmoflow", "npy", 64 << 10), ("deepcam", "hdf5", 64 << 10), ("deepcam", "npy", 64 << 10),
    ("oc20", "npy", 2 << 10)])  # OC20's mini shards hold a few KiB
def test_a_write_that_fails_is_one_line_and_leaves_no_temporary(
        tmp_path: Path, workload: str, fmt: str, limit: int) -> None:
    """A full disk ended prepare in numpy's, h5py's or lmdb's traceback ("131072 requested
    and 83904 written", "Input/output error") and left the hidden temporary behind. A
    process of its own: the file-size limit is the process's (and would end pytest's)."""
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "SCIPERF_DEBUG"}
    proc = subprocess.run([str(SCIPERF), "prepare", f"workload={workload}", "experiment=mini",
                           f"data.dir={data}", f"data.format={fmt}", "data.train_samples=4",
                           "data.eval_samples=4"], capture_output=True, text=True,
                          timeout=300, check=False, env=env,
                          preexec_fn=_file_size_limit(limit))
    line = _subprocess_line(proc, "cannot be written (", "; is the disk full?)")
    assert line.startswith(f"sciperf prepare: error: {data}/"), line
    assert not [p for p in data.rglob(".*") if p.name.endswith(".tmp")]


@pytest.mark.parametrize("workload", ["cosmoflow", "deepcam"])
def test_a_set_missing_files_is_not_ready(tmp_path: Path, workload: str) -> None:
    """With the manifest intact but a train file and the validation split gone, prepare
    said "dataset ready" and train then refused the short split, pointing back at prepare."""
    data = tmp_path / "data"
    args = ("prepare", f"workload={workload}", "experiment=mini", f"data.dir={data}",
            "data.train_samples=4", "data.eval_samples=4")
    assert cli(*args, cwd=tmp_path).returncode == 0
    shutil.rmtree(data / "validation")
    next((data / "train").glob("*.data.npy")).unlink()
    again = cli(*args, cwd=tmp_path)
    assert again.returncode == 0 and "dataset ready" not in again.stdout, again.stdout
    assert len(list((data / "train").glob("*.data.npy"))) == 4
    assert len(list((data / "validation").glob("*.data.npy"))) == 4
    ready = cli(*args, cwd=tmp_path)
    assert "dataset ready" in ready.stdout
