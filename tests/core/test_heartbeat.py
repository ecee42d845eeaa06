"""The hang sentinel (sciperf.heartbeat) on its own: a real sentinel process watching a real
rank-0 stand-in whose steps stop ending.

The end-to-end case (a SIGSTOP'd Horovod rank under mpirun, both frameworks) is in
tests/launch/test_distributed_train.py; these cover the sentinel's own rules quickly: it
stays quiet while steps end, and when rank 0 itself is stuck (no watcher thread answers
SIGUSR2) it writes run_stop aborted and the summary's final status from outside, prints
one line and kills rank 0.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

# a stand-in for rank 0: a summary that says running, the log up to run_start, then the
# sentinel with a 1 s bound; it beats `beats` times 0.05 s apart and then blocks
RANK0 = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from sciperf import heartbeat
    from sciperf.results.mllog import MLLogger

    out, beats = Path(sys.argv[1]), int(sys.argv[2])
    log, summary = out / "result_0.txt", out / "summary.json"
    mll = MLLogger(log)
    mll.start("run_start")
    mll.close()
    summary.write_text(json.dumps({"status": "running", "run_start_unix": time.time()}))
    with heartbeat.sentinel(1.0, log, summary, None):
        heartbeat.phase("train")
        for _ in range(beats):
            time.sleep(0.05)
            heartbeat.beat()
        heartbeat.epochs(2)
        print("beats done", flush=True)
        time.sleep(float(sys.argv[3]))
    print("left the sentinel", flush=True)
""")


def _rank0(tmp_path, beats: int, sleep_s: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RANK0, str(tmp_path), str(beats),
                           str(sleep_s)], capture_output=True, text=True, timeout=120)


def test_a_stuck_rank_0_is_ended_with_the_records_written_from_outside(tmp_path):
    """No step for > max(1 s, 4 × the slowest): the sentinel sends SIGUSR2; nothing in
    this rank 0 answers it (no watcher thread), so after WATCHER_GRACE_S the sentinel
    writes run_stop aborted + status error itself, prints ONE line and SIGKILLs rank 0."""
    t0 = time.time()
    done = _rank0(tmp_path, beats=5, sleep_s=60)
    ended = time.time() - t0
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stderr)
    assert "left the sentinel" not in done.stdout
    assert ended < 20, ended  # 1 s bound + 5 s grace + polling, not the 60 s sleep
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("sciperf train: error: no training step "
                                                   "ended for"), done.stderr
    assert "run_stop aborted and summary.json written" in lines[0]
    stops = [json.loads(ln[len(":::MLLOG "):]) for ln in
             (tmp_path / "result_0.txt").read_text().splitlines() if '"run_stop"' in ln]
    assert len(stops) == 1 and stops[0]["metadata"]["status"] == "aborted"
    assert stops[0]["metadata"]["epoch_num"] == 2  # the completed epochs rank 0 kept
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "error" and summary["time_to_train_s"] > 0
    assert "hang sentinel" in summary["ended_by"]


def test_the_sentinel_stays_quiet_while_steps_end_and_leaves_with_rank_0(tmp_path):
    """Beats every 0.05 s for ~1.5 s and a pause under the bound: nothing fires, the block
    ends normally and the sentinel process is gone (no record touched)."""
    done = _rank0(tmp_path, beats=30, sleep_s=0.5)
    assert done.returncode == 0, done.stderr
    assert "left the sentinel" in done.stdout and done.stderr.strip() == ""
    assert '"run_stop"' not in (tmp_path / "result_0.txt").read_text()
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "running"
    left = subprocess.run(["pgrep", "-af", "sciperf.heartbeat"], capture_output=True, text=True)
    assert str(tmp_path) not in left.stdout
