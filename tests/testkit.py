"""What many tests need, written once: the console script in a process of its own or in
this one, the one-line error shape of docs/architecture.md rule 10 (on the command line and
as a raised SciperfError), readers of a run's records (the MLLOG, summary.json), and a
result log written as the driver writes one.

In-process (:func:`cli`) is how a refusal is tested: the verb's ``main(argv)``, its exit
status and its lines, without the seconds a new interpreter spends importing the
frameworks. A process of its own (:func:`sciperf`) is kept for what needs one: exit codes
set by a signal, several ranks, a run whose threads and allocator must be its own, and one
test per verb that the console script itself ends as its main does.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

BIN = Path(sys.executable).parent
SCIPERF = BIN / "sciperf"
MLLOG = ":::MLLOG "


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    """The environment a user's shell gives (no SCIPERF_DEBUG traceback), plus `extra`."""
    return {k: v for k, v in os.environ.items() if k != "SCIPERF_DEBUG"} | dict(extra or {})


def sciperf(*args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """The installed console script in a process of its own, as a user runs it."""
    return subprocess.run([str(SCIPERF), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False, env=_env(env))


@contextlib.contextmanager
def _kept_process_state(cwd: Path | None, env: Mapping[str, str] | None) -> Iterator[None]:
    """The working folder, the environment and the signal handlers `main` sets, as they
    were before (main installs SIGTERM/SIGHUP handlers for its run)."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    before_cwd, before_env = os.getcwd(), dict(os.environ)
    try:
        if cwd is not None:
            os.chdir(cwd)
        os.environ.clear()
        os.environ.update(_env(env))
        yield
    finally:
        os.chdir(before_cwd)
        os.environ.clear()
        os.environ.update(before_env)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


# the interpreter's warning filters with no -W and no PYTHONWARNINGS: what the console script
# shows a user (pytest records warnings instead of printing them)
SHOWN_BY_DEFAULT = (("default", DeprecationWarning, "__main__"),
                    ("ignore", DeprecationWarning, ""),
                    ("ignore", PendingDeprecationWarning, ""), ("ignore", ImportWarning, ""),
                    ("ignore", ResourceWarning, ""))


@contextlib.contextmanager
def _torch_threads_kept() -> Iterator[None]:
    """torch's intra-op threads as they were: a run sets them (framework.threads) for the
    whole process, here the pytest worker that runs the tests after it."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    try:
        yield
    finally:
        torch = sys.modules.get("torch")
        if torch is not None and threads is not None:
            torch.set_num_threads(threads)


def cli(*args: str, cwd: Path | None = None,
        env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """``sciperf ARGS`` through ``sciperf.cli.main`` in this process: its exit status and
    what it printed (Python-level stdout/stderr), as :func:`sciperf` returns them — the
    Python warnings it raised first on its stderr, as the console script prints them, so
    "one line and nothing else" holds in process as for the command a user runs. The
    working folder, environment, signal handlers and torch's thread count are put back."""
    from sciperf import cli as cli_module

    out, err = io.StringIO(), io.StringIO()
    with _kept_process_state(cwd, env), _torch_threads_kept(), \
            warnings.catch_warnings(record=True) as caught, \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        warnings.resetwarnings()
        for action, category, module in SHOWN_BY_DEFAULT:
            warnings.filterwarnings(action, category=category, module=module, append=True)
        try:
            code = cli_module.main(list(args))
        except SystemExit as exc:  # argparse's refusals
            code = exc.code if isinstance(exc.code, int) else 2
    shown = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line)
                    for w in caught)
    return subprocess.CompletedProcess(["sciperf", *args], code, out.getvalue(),
                                       shown + err.getvalue())


def one_error_line(proc: subprocess.CompletedProcess, verb: str, code: int = 2) -> str:
    """Rule 10's shape: exit status `code`, no traceback, exactly one line on stderr, led by
    ``sciperf VERB: error:`` — returns that line."""
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith(f"sciperf {verb}: error: "), lines[0]
    return lines[0]


def refused(call: Callable[..., object], *args: object, **kwargs: object) -> str:
    """The message of the SciperfError `call(*args, **kwargs)` raises, asserted to be one
    line: what the CLI prints after ``sciperf VERB: error:``, checked where it is raised
    (a reader, a writer) without a command around it."""
    from sciperf.errors import SciperfError

    with pytest.raises(SciperfError) as err:
        call(*args, **kwargs)
    text = str(err.value)
    assert "\n" not in text, text
    return text


def cosmoflow_log(path: Path, evals: Sequence[float] = (0.31, 0.18, 0.123),
                  success: bool | None = None, stopped: bool = True) -> Path:
    """A closed-division CosmoFlow result log in the driver's order (sciperf.run.driver):
    the header, run_start, an epoch and its evaluation per value of `evals`, then run_stop
    (success: whether an evaluation reached the target, unless given) — or, with
    ``stopped=False``, no run_stop, as a run that died leaves it. The official checker
    passes the default one; the tests of the checker's callers need no training for it."""
    from sciperf.config import compose
    from sciperf.results.mllog import MLLogger
    from sciperf.workloads import get
    from sciperf.workloads.cosmoflow import spec as cosmo

    cfg = compose(["experiment=mini"])
    log = MLLogger(path)
    log.init_start()
    log.submission(cosmo.NAME, cfg.system)
    log.hyperparameters(cosmo.mllog_hyperparameters(cfg, int(cfg.data.train_samples),
                                                    int(cfg.data.eval_samples)))
    log.event("seed", int(cfg.seed))
    log.end("init_stop")
    log.start("run_start")
    for num, metric in enumerate(evals, start=1):
        log.start("epoch_start", metadata={"epoch_num": num})
        log.end("epoch_stop", metadata={"epoch_num": num})
        log.start("eval_start", metadata={"epoch_num": num})
        log.end("eval_stop", metadata={"epoch_num": num})
        log.event(cosmo.METRIC_KEY, metric, metadata={"epoch_num": num})
    if stopped:
        reached = any(get("cosmoflow").reached(m, cosmo.TARGET) for m in evals)
        log.run_stop(reached if success is None else success, len(evals))
    log.close()
    return path


def mllog(path: Path) -> list[dict[str, Any]]:
    """Every MLLOG record of a result file, in order."""
    return [json.loads(ln[len(MLLOG):]) for ln in Path(path).read_text().splitlines()
            if ln.startswith(MLLOG)]


def events(path: Path, key: str) -> list[dict[str, Any]]:
    """The MLLOG records of `key`."""
    return [record for record in mllog(path) if record["key"] == key]


def summary(out: Path, name: str = "summary.json") -> dict[str, Any]:
    """A run's summary.json."""
    return json.loads((Path(out) / name).read_text())


# what mpirun needs to start ranks as root on an oversubscribed 2-core machine
MPI_ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def skip_without_horovod(module: str) -> None:
    """Skip the calling test unless mpirun and Horovod's `module` (``horovod.tensorflow``,
    ``horovod.torch``) are there, probed in a process of its own (importing Horovod here
    would initialise MPI in the test worker)."""
    import shutil

    if shutil.which("mpirun") is None:
        pytest.skip("mpirun (OpenMPI) is not installed")
    probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                           check=False)
    if probe.returncode != 0:
        pytest.skip("Horovod is not installed (install.sh --horovod)")
