"""An interrupted `sciperf bench` stops its row process, says so in one line, and leaves
the last complete JSON as it was: SIGTERM once left the spawned row running to its end
(multiprocessing joins live children at exit) and then printed a BrokenPipeError
traceback, Ctrl-C printed the child's 40-line KeyboardInterrupt traceback, and a cut-short
bench replaced a whole bench's file with its few rows."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sciperf.info import machine
from sciperf.tools import bench
from sciperf.tools.bench import isolation

OLD = {"workload": "cosmoflow", "complete": True, "train": [{"model": "old"}], "input": []}


def _children(parent: int) -> list[int]:
    """Processes whose parent is `parent` (from /proc: no psutil needed)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            found.append(int(stat.parent.name))
    return found


def _sigint_ignored(pid: int) -> bool:
    """Whether `pid` ignores SIGINT (the row process does once its row has begun)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line for line in status.splitlines() if line.startswith("SigIgn:"))
               .split()[1], 16)
    return bool(mask & (1 << (signal.SIGINT - 1)))


def _row_process(proc: subprocess.Popen, timeout_s: float = 120) -> int:
    """The pid of the bench's spawned row process once it is in its row."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        for pid in _children(proc.pid):
            try:
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes() and \
                        _sigint_ignored(pid):
                    return pid
            except OSError:
                continue
        time.sleep(0.2)
    raise AssertionError("no row process started")


def _gone(pid: int, timeout_s: float) -> bool:
    """Whether `pid` ended (or is a zombie nobody reaped) within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_a_signalled_bench_stops_its_row_process(sig: str, tmp_path: Path) -> None:
    """SIGTERM to the bench, Ctrl-C (SIGINT to the whole process group) or SIGKILL: the
    row process ends within seconds, the bench's line names what is left, no traceback,
    and the previous complete JSON is untouched."""
    pytest.importorskip("torch")
    (tmp_path / "cosmoflow.json").write_text(json.dumps(OLD))
    args = ["bench", "workload=cosmoflow", "bench.cases=mini", "bench.precision=fp32",
            "bench.samples=16", "bench.batch=8", "bench.epochs=100000", f"output={tmp_path}"]
    # Ctrl-C's handler as in a terminal: a test run started in the background (`make test &`
    # from a script) passes SIGINT on ignored, and Python then keeps ignoring it — the bench
    # would be right to time on (it did, twice, in a clean clone's suite run in the background)
    cmd = [sys.executable, "-c", "import runpy, signal, sys; "
           "signal.signal(signal.SIGINT, signal.default_int_handler); "
           f"sys.argv = ['sciperf', *{args!r}]; "
           "runpy.run_module('sciperf.cli', run_name='__main__', alter_sys=True)"]
    # faulthandler: a bench that does not end is made to print where each thread is
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            env=os.environ | {"PYTHONFAULTHANDLER": "1"})
    try:
        row = _row_process(proc)
        if sig == "SIGINT":  # as a terminal's Ctrl-C: every process of the group
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, getattr(signal, sig))
        try:
            _out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGABRT)  # its threads' stacks, on stderr
            _out, err = proc.communicate(timeout=30)
            pytest.fail(f"the bench did not end within 60 s of {sig}; its threads:\n{err}")
        assert _gone(row, 15), f"the row process {row} outlived the bench ({sig})"
    finally:  # whatever failed: nothing of this bench's process group runs on
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert json.loads((tmp_path / "cosmoflow.json").read_text()) == OLD
    if sig == "SIGKILL":
        return  # nothing of the bench ran on: only its row process had to end
    assert "Traceback" not in err and "Error" not in err, err
    left = f"(no row finished; {tmp_path}/cosmoflow.json is as it was)"
    if sig == "SIGTERM":
        assert proc.returncode == 128 + signal.SIGTERM
        assert err.strip().splitlines()[-1] == f"sciperf bench: terminated by SIGTERM {left}"
    else:
        assert proc.returncode == 130
        assert err.strip().splitlines()[-1] == f"sciperf bench: interrupted {left}"


def test_a_cut_short_bench_keeps_the_last_complete_json(tmp_path: Path, monkeypatch) -> None:
    """Rows land in `<workload>.json.partial`; `<workload>.json` is replaced only by a
    bench that completes, and records which cases were asked."""
    (tmp_path / "cosmoflow.json").write_text(json.dumps(OLD))
    monkeypatch.setattr(bench, "_auto_choice", lambda fw, w: {"precision": "fp32",
                                                              "reason": "stub"})
    rows: list[str] = []
    stop_at = {"n": 2}

    def fake_row(fw, experiment, precision, root, extra, shape=None):
        if len(rows) + 1 == stop_at["n"]:
            raise KeyboardInterrupt
        rows.append(precision)
        return {"framework": fw, "model": experiment, "precision": precision,
                "samples_per_s": 1.0, "seconds": 1.0, "peak_rss_MB": 1,
                "fraction_of_peak": 0.5}

    monkeypatch.setattr(bench, "train_case", fake_row)
    monkeypatch.setattr(bench, "machine", lambda: {**machine(), "bf16_kernels": True})
    args = ["workload=cosmoflow", "bench.cases=mini", "bench.precision=fp32,bf16",
            "bench.isolate=false", f"output={tmp_path}"]
    with pytest.raises(KeyboardInterrupt) as exc:
        bench.bench(args)
    partial = tmp_path / "cosmoflow.json.partial"
    assert exc.value.sciperf_records == (f"the rows done are in {partial}; "
                                         f"{tmp_path}/cosmoflow.json is as it was")
    assert json.loads((tmp_path / "cosmoflow.json").read_text()) == OLD
    done = json.loads(partial.read_text())
    assert done["complete"] is False and [r["precision"] for r in done["train"]] == ["fp32"]
    assert done["asked"]["cases"] == ["mini"] and done["asked"]["precisions"] == ["fp32", "bf16"]
    rows.clear()
    stop_at["n"] = 0  # never: this bench completes
    assert bench.bench(args) == 0
    new = json.loads((tmp_path / "cosmoflow.json").read_text())
    assert new["complete"] is True and [r["precision"] for r in new["train"]] == ["fp32", "bf16"]
    assert not partial.exists() and not list(tmp_path.glob(".*.tmp"))


def test_a_row_process_whose_parent_left_ends_quietly(monkeypatch) -> None:
    """The reading end closed (the bench gone): the row's send is a BrokenPipe, which the
    row process takes as the end, not a traceback."""
    import multiprocessing

    monkeypatch.setattr(isolation, "train_case", lambda *a: {"samples_per_s": 1.0})
    recv, send = multiprocessing.Pipe(duplex=False)
    recv.close()
    before = signal.getsignal(signal.SIGINT)
    try:
        bench._child_row(send, "pytorch", "mini", "fp32", "/nonexistent", [], None)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # the parent decides
    finally:
        signal.signal(signal.SIGINT, before)
