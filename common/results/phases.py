"""A run's time split into phases from its MLLOG intervals — the one definition that
`sciperf report` (its breakdown) and `sciperf project` (its measured training time per
epoch) share.

init = init_start → init_stop less staging done inside it; staging = staging_start →
staging_stop (inside init from hpc 3.0, inside the run before); evaluation = Σ eval_start →
eval_stop of the evaluations that stop training; training = run time − evaluation −
staging in the run. A phase the log has no records for is None.

An evaluation stops training unless it overlaps the training interval (epoch_start →
epoch_stop) of another epoch: then it runs beside training (asynchronous evaluation, as
NVIDIA's v3.0 OpenFold and OC20 log it: the evaluation of epoch k while epoch k+1
trains) and its time is training time. Subtracting it would count the same seconds twice
and leave a training time a tenth of the epochs' own intervals.
"""

from __future__ import annotations

from sciperf.results.logs import Epoch, RunLog

PHASES = ("init", "staging", "training", "evaluation")


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else max(ms, 0.0) / 1000


def _overlap_ms(a: tuple[float, float], b: tuple[float, float]) -> float:
    return min(a[1], b[1]) - max(a[0], b[0])


def beside_training(epoch: Epoch, epochs: list[Epoch], run_stop_ms: float | None) -> bool:
    """Whether `epoch`'s evaluation overlaps another epoch's training (an epoch without
    epoch_stop trains until run_stop)."""
    if epoch.eval_start_ms is None or epoch.eval_stop_ms is None:
        return False
    evaluation = (epoch.eval_start_ms, epoch.eval_stop_ms)
    for other in epochs:
        if other.num == epoch.num or other.start_ms is None:
            continue
        stop = other.stop_ms if other.stop_ms is not None else run_stop_ms
        if stop is not None and _overlap_ms(evaluation, (other.start_ms, stop)) > 0:
            return True
    return False


def evaluation_s(log: RunLog) -> tuple[float, float] | None:
    """(seconds of evaluation that stops training, seconds beside training); None when
    the log has no evaluation intervals."""
    epochs = log.epochs
    timed = [e for e in epochs if e.eval_start_ms is not None and e.eval_stop_ms is not None]
    if not timed:
        return None
    blocking = beside = 0.0
    for epoch in timed:
        assert epoch.eval_start_ms is not None and epoch.eval_stop_ms is not None
        seconds = max(epoch.eval_stop_ms - epoch.eval_start_ms, 0.0) / 1000
        if beside_training(epoch, epochs, log.run_stop_ms):
            beside += seconds
        else:
            blocking += seconds
    return blocking, beside


def epochs_started(log: RunLog) -> int:
    """Epochs with an epoch_start before run_stop (numbers that only evaluated — the
    initial checkpoint's evaluation in OpenFold's logs — are not epochs trained); a log
    without epoch_start events counts every numbered epoch."""
    started = sum(e.start_ms is not None for e in log.epochs)
    return started or len(log.epochs)


def phases(log: RunLog) -> dict[str, float | None]:
    """Seconds of init, staging, training and evaluation (see the module docstring)."""
    start, stop = log.run_window
    staging = _seconds(log.interval_ms("staging_start", "staging_stop"))
    in_run = staging is not None and staged_in_run(log)
    init = _seconds(log.interval_ms("init_start", "init_stop"))
    if init is not None and staging is not None and not in_run:
        init = max(init - staging, 0.0)
    found = evaluation_s(log)
    evaluation = None if found is None else found[0]
    run = _seconds(stop - start) if start is not None and stop is not None else None
    training = None if run is None else max(
        run - (evaluation or 0.0) - (staging if in_run and staging else 0.0), 0.0)
    return {"init": init, "staging": staging, "training": training, "evaluation": evaluation}


def staged_in_run(log: RunLog) -> bool:
    """Whether staging started at or after run_start (hpc 2.0: timed with the run)."""
    start, _ = log.run_window
    events = log.all("staging_start")
    return bool(events) and start is not None and events[0].time_ms >= start
