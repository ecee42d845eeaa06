"""The one MLPerf logger: every MLLOG event of a run goes through here.

docs/architecture.md, rule 8.

Built on ``mlperf_logging.mllog`` so the line format is the official one. Only the
logging rank writes; the file is flushed line by line so a killed job keeps its log.
A write that fails (a full disk, a quota, a file size limit) stops the run with one line
naming the file: stdlib logging would print a "Logging error" block per record and train
on with no log.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import sys
from pathlib import Path
from typing import Any

from mlperf_logging.mllog import constants as C  # noqa: N812
from mlperf_logging.mllog import mllog as mllog_impl

from sciperf.data import atomic
from sciperf.errors import SciperfError
from sciperf.results.logs import MAX_RECORD_BYTES

RULESET = "3.0.0"
_SERIAL = itertools.count()  # unique stdlib logger per MLLogger: handlers never shared


class _RecordFile(logging.FileHandler):
    """A FileHandler that keeps its first failed write instead of reporting it.

    logging's handleError prints a traceback block and carries on, and mlperf_logging
    catches whatever escapes a record (it then logs "Failed to encode"), so the failure
    is kept here and raised by :class:`MLLogger` once the logging call has returned.
    After it the handler writes nothing: a later record would land after a cut one.
    """

    failure: OSError | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.failure is None:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (stdlib name)
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            super().handleError(record)
        elif self.failure is None:
            self.failure = exc


# What a record adds to its key, value and metadata: the token, namespace, time, event type
# and the caller's file and line (a path inside the installed package).
_RECORD_OVERHEAD = 1 << 10


def _check_size(key: str, value: Any, metadata: dict[str, Any]) -> None:
    """Refuse a record whose line every MLLOG reader, sciperf's and the official checker's,
    would refuse (MAX_RECORD_BYTES), before any of it is written."""
    body = len(json.dumps({"key": key, "value": value, "metadata": metadata}, default=str))
    if body + _RECORD_OVERHEAD > MAX_RECORD_BYTES:
        raise SciperfError(f"MLLOG record {key} would be {body} bytes; a record line is at "
                           f"most {MAX_RECORD_BYTES} (shorten the value logged as {key})")


def _trim_cut_record(path: Path, tail: int = 1 << 16) -> None:
    """Drop the part of a record a failed write left at the end of `path`: what stays is
    whole MLLOG lines (shrinking a file needs no free space)."""
    if not path.is_file():  # a device (/dev/full) has no end to cut
        return
    with contextlib.suppress(OSError), path.open("r+b") as fh:
        size = fh.seek(0, 2)
        start = max(size - tail, 0)
        fh.seek(start)
        end = fh.read(size - start).rfind(b"\n")
        if end >= 0:
            fh.truncate(start + end + 1)
        elif start == 0:
            fh.truncate(0)


class MLLogger:
    """Writes MLLOG lines for one training instance to `path` (rank 0 only).

    Framework code calls the named methods; the keys and their order follow the hpc
    3.0.0 ruleset (common.yaml, closed_common.yaml, closed_<benchmark>.yaml).
    """

    def __init__(self, path: str | Path | None, enabled: bool = True, echo: bool = False,
                 instance: int | None = None, mode: str = "w"):
        self.enabled = enabled and path is not None
        self.mode = mode  # "a": a resumed run continues its log
        self.path = Path(path) if path else None
        self.instance = instance
        self.failure: str | None = None  # "PATH: cannot be written (why)", once one failed
        self._logger = mllog_impl.MLLogger(logger=self._make_logger(echo), root_dir=None)

    def _make_logger(self, echo: bool) -> logging.Logger:
        """A private stdlib logger writing bare lines; handlers flush after every record."""
        logger = logging.getLogger(f"sciperf.results.mllog.{next(_SERIAL)}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        if self.enabled and self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handler = _RecordFile(self.path, mode=self.mode)
            handler.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(handler)
        if self.enabled and echo:
            stream = logging.StreamHandler()
            stream.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(stream)
        return logger

    def close(self) -> None:
        """Flush and release the handlers; a file that cannot take its last lines is one
        line naming it (every handler is released either way)."""
        failure: OSError | None = None
        for handler in list(self._logger.logger.handlers):
            failure = failure or getattr(handler, "failure", None)  # a record's, first
            try:
                handler.flush()
                handler.close()
            except OSError as exc:
                if not isinstance(handler, _RecordFile):
                    raise
                failure = failure or exc
                with contextlib.suppress(OSError):
                    handler.close()  # the stream is closed even when its flush fails
            self._logger.logger.removeHandler(handler)
        if failure is not None:
            self._failed(failure)

    def _failed(self, exc: OSError) -> None:
        """Give the file up (its cut last record dropped) and stop the run in one line;
        later records go nowhere, so closing records after this raise nothing more."""
        for handler in list(self._logger.logger.handlers):
            if isinstance(handler, _RecordFile):
                with contextlib.suppress(OSError):
                    handler.close()
                self._logger.logger.removeHandler(handler)
        if self.path is not None:
            _trim_cut_record(self.path)
        self.failure = f"{self.path}: cannot be written ({atomic.why(exc)})"
        raise SciperfError(self.failure) from exc

    def _check_written(self) -> None:
        """Raise the failure a record's write met (see :class:`_RecordFile`)."""
        for handler in self._logger.logger.handlers:
            if isinstance(handler, _RecordFile) and handler.failure is not None:
                self._failed(handler.failure)

    def _log(self, kind: str, key: str, value: Any, metadata: dict[str, Any] | None) -> None:
        """Emit through mlperf_logging, attributing file/lineno to the first caller outside."""
        if not self.enabled:
            return
        meta = dict(metadata or {})
        if self.instance is not None:
            meta.setdefault("instance", self.instance)
        _check_size(key, value, meta)
        depth, frame = 0, sys._getframe(1)
        while frame is not None and frame.f_code.co_filename == __file__:
            frame, depth = frame.f_back, depth + 1
        getattr(self._logger, kind)(key=key, value=value, metadata=meta, stack_offset=2 + depth)
        self._check_written()

    def event(self, key: str, value: Any = None, metadata: dict[str, Any] | None = None) -> None:
        """A POINT_IN_TIME event."""
        self._log("event", key, value, metadata)

    def start(self, key: str, value: Any = None, metadata: dict[str, Any] | None = None) -> None:
        """An INTERVAL_START event."""
        self._log("start", key, value, metadata)

    def end(self, key: str, value: Any = None, metadata: dict[str, Any] | None = None) -> None:
        """An INTERVAL_END event."""
        self._log("end", key, value, metadata)

    # --- the run's phases, in the order the ruleset expects -------------------------------
    def init_start(self) -> None:
        """cache_clear (the node caches were dropped or are cold) then init_start."""
        self.event(C.CACHE_CLEAR, True)
        self.start(C.INIT_START)

    def submission(self, benchmark: str, system: Any, nodes: int = 1) -> None:
        """submission_* keys from the system config; the node count the run really used."""
        self.event(C.SUBMISSION_BENCHMARK, benchmark)
        self.event(C.SUBMISSION_ORG, system.submission_org)
        self.event(C.SUBMISSION_DIVISION, system.submission_division)
        self.event(C.SUBMISSION_STATUS, system.submission_status)
        self.event(C.SUBMISSION_PLATFORM, system.submission_platform)
        self.event("number_of_nodes", int(nodes))
        self.event("accelerators_per_node", int(system.accelerators_per_node))

    def hyperparameters(self, values: dict[str, Any]) -> None:
        """One event per benchmark hyper-parameter key (closed_<benchmark>.yaml)."""
        for key, value in values.items():
            self.event(key, value)

    def run_stop(self, success: bool, epoch_num: int) -> None:
        """run_stop with status success only when the quality target was met."""
        status = C.SUCCESS if success else C.ABORTED
        self.end(C.RUN_STOP, metadata={"status": status, "epoch_num": epoch_num})
