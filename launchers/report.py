"""How a job started here ended: one line on stderr and one exit status for `sciperf launch`.

The ranks decide the outcome (docs/distributed.md, "When a rank dies or hangs"): 0 when
every rank succeeded; 75 (EX_TEMPFAIL, `sciperf train`'s "stopped with a checkpoint,
resume it": rank 0 exits 75, its peers 0) when rank 0 checkpointed on request; else the
status of the rank that failed. `sciperf launch` exits with that verdict under every
launcher it runs on this host, so a wrapper, or Slurm requeue logic, tells "resume it"
from "killed" — a SIGTERM to `sciperf launch` ends a checkpointing run with 75, not 143.

torchrun reports a failed worker by letting its ChildFailedError escape to the interpreter
(a ~30-line traceback and box), a signal to itself likewise (SignalException), and exits 1
whatever the rank's status. `TorchrunReport` reads the job's stderr as it passes by,
withholds exactly those blocks and torchrun's log lines about the same teardown, passes
every other line (the ranks' own) on at once, and keeps the facts — which rank, which
status — for the one line `sciperf launch` prints instead. OpenMPI's mpirun exits with the
first failed rank's status but prints its own boxes of dashes about it; `MpirunReport`
withholds those it knows and keeps the same facts.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sciperf import jsondata

EX_TEMPFAIL = 75  # sciperf.cli: rank 0 stopped with a checkpoint to resume


def shell_status(returncode: int) -> int:
    """A process's status as a shell reports it (killed by signal N → 128+N)."""
    return 128 - returncode if returncode < 0 else returncode


# a rank that gets SIGKILL from nobody it knows: most often the kernel's OOM killer
KILLED_HINT = (" (SIGKILL: out of memory? the kernel's OOM killer leaves no other trace — "
               "`dmesg | grep -i oom`; lower train.global_batch_size or use more ranks)")
TERMINATED = 128 + signal.SIGTERM  # a rank a launcher's teardown ended (a casualty)


def failed_line(rank: int, status: int, rest: str = "") -> str:
    """`sciperf launch`'s one line for the rank that failed."""
    why = KILLED_HINT if status == 128 + signal.SIGKILL else ""
    return f"sciperf launch: rank {rank} exited with status {status}{why}{rest}"


CHECKPOINTED_LINE = ("sciperf launch: rank 0 stopped with a checkpoint (status 75): run the "
                     "same launch with train.resume=auto to continue")


def checkpointed_since(summary: Path | None, since_ns: int) -> bool:
    """Whether rank 0 wrote `summary` (summary.json) during this job and it says the run
    stopped with a checkpoint — the verdict a launcher that swallows the ranks' statuses
    (torchrun on a signal to itself) leaves nowhere else."""
    if summary is None:
        return False
    try:
        if summary.stat().st_mtime_ns < since_ns:  # an earlier run's (or a resumed one's)
            return False
        return jsondata.loads(summary.read_text()).get("status") == "checkpointed"
    except (OSError, ValueError, AttributeError):  # not there, half-read, not an object
        return False


# --- torchrun's report -------------------------------------------------------------------

TRACEBACK = b"Traceback (most recent call last):"
CHILD_FAILED = b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
SIGNALLED = re.compile(rb"^torch\.distributed\.elastic\.multiprocessing\.api\.SignalException:"
                       rb".*got signal: (\d+)")
# torchrun's log lines about the teardown the one line reports (glog-style "E1129 08:30:00
# 123 torch/distributed/elastic/….py:882] failed (exitcode: 1) local_rank: 0 …", or
# logging's default "ERROR:torch.distributed.elastic…:failed …")
AGENT_LOG = re.compile(rb"torch[/.]distributed[/.]elastic\S*[]:] ?.*(?:"
                       rb"Sending process \d+ closing signal|failed \(exitcode: -?\d+\)|"
                       rb"Received \S+ death signal)")
# the box ChildFailedError prints: a rule of "=", a title ("<the ranks' command> FAILED",
# several lines when an argument holds line breaks), a rule of "-", then "Failures:",
# "Root Cause (first observed failure):", "[i]:" and indented "key : value" lines between
# rules of "-", and a last rule of "="
BOX_BODY = re.compile(rb"^(-+|Failures:|Root Cause.*|\[\d+\]:|\s+\S.*|)$")
RANK = re.compile(rb"^\s+rank\s*:\s*(\d+)")
EXITCODE = re.compile(rb"^\s+exitcode\s*:\s*(-?\d+)")
TITLE_LINES = 200  # a longer title is no box this parser knows


@dataclass
class RankEnd:
    rank: int
    status: int  # as a shell reports it


@dataclass
class TorchrunReport:
    """A filter over the job's stderr lines (bytes, each with its newline)."""

    write: Callable[[bytes], None]
    ends: list[RankEnd] = field(default_factory=list)  # ChildFailedError's, root cause first
    signal: int | None = None  # torchrun itself ended by this signal
    _held: list[bytes] = field(default_factory=list)
    _mode: str = "pass"  # pass | traceback | box
    _rules: int = 0  # rules of "=" seen in the box
    _title: bool = False  # inside the box's title
    _root: bool = False  # inside its root cause
    _rank: int | None = None
    _found: list[tuple[RankEnd, bool]] = field(default_factory=list)  # (end, root cause)

    def feed(self, line: bytes) -> None:
        if self._mode == "box":
            self._box(line)
        elif self._mode == "traceback":
            self._traceback(line)
        elif line.startswith(TRACEBACK):
            self._mode, self._held = "traceback", [line]
        elif not AGENT_LOG.search(line):
            self.write(line)

    def close(self) -> None:
        """The stream ended: lines still held were not torchrun's report."""
        self._flush()

    def _flush(self) -> None:
        """Write what is held: it was not the report this parser knows (nothing is lost)."""
        held, self._held, self._mode = self._held, [], "pass"
        for line in held:
            self.write(line)

    def _traceback(self, line: bytes) -> None:
        """A traceback is held until its exception line says whose it is."""
        text = line.rstrip(b"\r\n")
        self._held.append(line)
        if not text or text[:1].isspace():  # a frame, its source line, a caret line
            return
        if text.startswith(CHILD_FAILED):
            self._mode, self._rules, self._title = "box", 0, False
            self._root, self._rank, self._found = False, None, []
        elif signalled := SIGNALLED.match(text):
            self.signal = int(signalled.group(1))
            self._held, self._mode = [], "pass"
        else:  # a rank's traceback (or torchrun failing on its own): the user's to read
            self._flush()

    def _box(self, line: bytes) -> None:
        """ChildFailedError's box, held until its last rule and then dropped; the ranks'
        statuses kept. A line the box cannot hold ends it: everything held is written."""
        text = line.rstrip(b"\r\n")
        self._held.append(line)
        if len(text) >= 10 and text.strip(b"=") == b"":
            self._rules += 1
            self._title = self._rules == 1
            if self._rules == 2:  # the last line: the report is complete
                self.ends = ([end for end, root in self._found if root]
                             + [end for end, root in self._found if not root])
                self._held, self._mode = [], "pass"
            return
        if self._title:  # the ranks' command line; a rule of "-" ends it
            if len(text) >= 10 and text.strip(b"-") == b"":
                self._title = False
            elif len(self._held) > TITLE_LINES:
                self._flush()
            return
        if not self._rules or not BOX_BODY.match(text):
            self._flush()
        elif text.startswith(b"Root Cause"):
            self._root = True
        elif rank := RANK.match(text):
            self._rank = int(rank.group(1))
        elif (code := EXITCODE.match(text)) and self._rank is not None:
            self._found.append((RankEnd(self._rank, shell_status(int(code.group(1)))),
                                self._root))
            self._rank = None

    def failed(self) -> RankEnd | None:
        """The rank to name: torchrun's root cause, unless that one only ended because a
        peer's failure tore it down (SIGTERM) while another rank failed on its own."""
        own = [end for end in self.ends if end.status != TERMINATED]
        return own[0] if own else (self.ends[0] if self.ends else None)


# --- mpirun's report (OpenMPI) -----------------------------------------------------------

MPI_RULE = re.compile(rb"^-{20,}$")
# the first line of each box mpirun prints about a failed rank; any other box passes
MPI_TITLES = (b"Primary job  terminated normally", b"mpirun detected that one or more",
              b"mpirun noticed that process rank")
MPI_PROCESS = re.compile(rb"^\s+Process name:\s+\[\[\d+,\d+\],(\d+)\]")
MPI_EXIT = re.compile(rb"^\s+Exit code:\s+(-?\d+)")
MPI_SIGNALLED = re.compile(rb"^mpirun noticed that process rank (\d+) .*exited on signal (\d+)")
MPI_BOX_LINES = 20  # a longer box is none of these


@dataclass
class MpirunReport:
    """A filter over the job's stderr lines (bytes, each with its newline): mpirun's boxes
    about a failed rank are withheld, the rank and its status kept."""

    write: Callable[[bytes], None]
    ends: list[RankEnd] = field(default_factory=list)  # in mpirun's order: the first failed
    signal: int | None = None  # mpirun reports none of its own
    _held: list[bytes] = field(default_factory=list)
    _mode: str = "pass"  # pass | opened (a rule seen) | box
    _rank: int | None = None

    def feed(self, line: bytes) -> None:
        text = line.rstrip(b"\r\n")
        if self._mode == "pass":
            if MPI_RULE.match(text):
                self._mode, self._held = "opened", [line]
            else:
                self.write(line)
        elif self._mode == "opened":
            self._held.append(line)
            if text.startswith(MPI_TITLES):
                self._mode, self._rank = "box", None
                self._box(text)
            else:
                self.close()
        else:
            self._held.append(line)
            if MPI_RULE.match(text):  # the closing rule: the box is whole
                self._held, self._mode = [], "pass"
            elif len(self._held) > MPI_BOX_LINES:
                self.close()
            else:
                self._box(text)

    def _box(self, text: bytes) -> None:
        """Keep what a line of a known box says about a rank."""
        if signalled := MPI_SIGNALLED.match(text):
            self.ends.append(RankEnd(int(signalled.group(1)), 128 + int(signalled.group(2))))
        elif process := MPI_PROCESS.match(text):
            self._rank = int(process.group(1))
        elif (code := MPI_EXIT.match(text)) and self._rank is not None:
            self.ends.append(RankEnd(self._rank, shell_status(int(code.group(1)))))
            self._rank = None

    def close(self) -> None:
        """Write what is held: it was not a box this parser knows (nothing is lost)."""
        held, self._held, self._mode = self._held, [], "pass"
        for line in held:
            self.write(line)

    def failed(self) -> RankEnd | None:
        """The first rank that failed on its own (one a teardown ended comes after)."""
        own = [end for end in self.ends if end.status != TERMINATED]
        return own[0] if own else (self.ends[0] if self.ends else None)
