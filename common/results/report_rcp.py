"""The reference convergence points (RCPs) of mlperf-logging, as data for the report's
epochs-to-target figure: per benchmark and global batch size, the reference runs' epochs.

mlperf-logging's own RCP checker reads its `rcp_checker/hpc_<ruleset>/rcps_<bench>.json`
and derives the numbers its review uses: the olympic mean of the reference epochs and
the lowest mean a submission may show before it is normalised ("Min Epochs", from the
reference spread at the rules' run count). The report takes them from that checker, so
the points drawn are the ones `sciperf score` reviews against.
"""

from __future__ import annotations

import contextlib
import io
import logging
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any


@dataclass(frozen=True)
class RcpPoint:
    """One reference batch size: mean epochs (olympic), the lowest accepted mean, the
    reference runs' fastest and slowest, and whether the review uses it (pruned set)."""

    batch_size: int
    mean: float
    lowest_accepted: float
    fastest: float
    slowest: float
    runs: int
    reviewed: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@cache
def rcp_points(benchmark: str, ruleset: str) -> tuple[tuple[RcpPoint, ...], str | None]:
    """The RCPs of `benchmark` under the hpc `ruleset`, by batch size, and None; or no
    points and the reason (no RCP file for that benchmark or ruleset)."""
    from mlperf_logging.rcp_checker import rcp_checker
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            checker = rcp_checker.RCP_Checker("hpc", ruleset, benchmark, False)
    except Exception as exc:  # no file (OSError), unknown benchmark (KeyError), a ruleset
        # it does not support (its own bare Exception): drawn without RCPs, with a note
        return (), f"no RCPs for {benchmark} in mlperf-logging's hpc {ruleset} " \
                   f"({type(exc).__name__}: {exc})"
    finally:
        logging.disable(previous)
    reviewed = set(checker.pruned_rcp_data)
    points = tuple(
        RcpPoint(int(r["BS"]), float(r["RCP Mean"]), float(r["Min Epochs"]),
                 float(min(r["Epochs to converge"])), float(max(r["Epochs to converge"])),
                 len(r["Epochs to converge"]), name in reviewed)
        for name, r in checker.rcp_data.items())
    return tuple(sorted(points, key=lambda p: p.batch_size)), None
