"""A run's phases from its MLLOG intervals: an evaluation that stops training is
subtracted from it, one logged while another epoch trains (asynchronous) is not; epochs
are those that started, not numbers that only evaluated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sciperf.results.logs import parse_log
from sciperf.results.phases import epochs_started, evaluation_s, phases
from sciperf.tools.project_check import run_times
from testkit import MLLOG

NV_OC20 = "v3.0/NVIDIA/results/eos_n80_ngc23.09_pytorch/strong/oc20/result_1.txt"


def _log(path: Path, events: list[tuple[str, float, int | None]]) -> Path:
    """A log of (key, seconds, epoch_num) records between run_start at 0 s and run_stop."""
    lines = []
    for key, seconds, num in events:
        metadata = {} if num is None else {"epoch_num": num}
        if key == "run_stop":
            metadata["status"] = "success"
        lines.append(MLLOG + json.dumps({"namespace": "", "time_ms": 1e6 + seconds * 1000,
                                         "event_type": "POINT_IN_TIME", "key": key,
                                         "value": None, "metadata": metadata}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_evaluation_inside_its_own_epoch_stops_training(tmp_path: Path) -> None:
    # train 10 s, evaluate 2 s inside the epoch's interval, twice
    log = parse_log(_log(tmp_path / "sync.txt", [
        ("run_start", 0, None), ("epoch_start", 0, 1), ("eval_start", 10, 1),
        ("eval_stop", 12, 1), ("epoch_stop", 12, 1), ("epoch_start", 12, 2),
        ("eval_start", 22, 2), ("eval_stop", 24, 2), ("epoch_stop", 24, 2),
        ("run_stop", 24, None)]))
    assert evaluation_s(log) == (4.0, 0.0)
    assert phases(log)["training"] == 20.0 and phases(log)["evaluation"] == 4.0


def test_an_evaluation_beside_the_next_epoch_is_training_time(tmp_path: Path) -> None:
    # epoch k's evaluation runs while epoch k+1 trains; the initial checkpoint's
    # evaluation (number 0) is no epoch trained
    log = parse_log(_log(tmp_path / "async.txt", [
        ("run_start", 0, None), ("eval_start", 0, 0), ("epoch_start", 1, 1),
        ("eval_stop", 3, 0), ("epoch_stop", 11, 1), ("epoch_start", 11, 2),
        ("eval_start", 11, 1), ("eval_stop", 14, 1), ("epoch_stop", 21, 2),
        ("epoch_start", 21, 3), ("eval_start", 21, 2), ("eval_stop", 24, 2),
        ("run_stop", 24, None)]))
    assert evaluation_s(log) == (0.0, 9.0)  # evaluation 0 overlaps epoch 1 as well
    assert phases(log)["training"] == 24.0 and phases(log)["evaluation"] == 0.0
    assert epochs_started(log) == 3
    assert run_times(log) == (24.0, 24.0, 3, None, False)


def test_nvidia_s_oc20_evaluates_beside_training(published_results: Path) -> None:
    """NVIDIA's v3.0 OC20 starts epoch k+1 with epoch k's evaluation: a training time
    per epoch of 19 s, where subtracting the evaluations left 11 s."""
    log = parse_log(published_results / NV_OC20)
    blocking, beside = evaluation_s(log)
    run_s = (log.run_stop_ms - log.run_start_ms) / 1000
    assert blocking == 0.0 and beside > 200
    assert phases(log)["training"] == pytest.approx(run_s)
    training, _, epochs, _, _ = run_times(log)
    assert training / epochs == pytest.approx(19.0, abs=0.5)
