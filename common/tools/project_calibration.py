"""The one calibrated number of `sciperf project`: an efficiency factor η per (workload,
accelerator kind), the share of the roofline a step's compute reaches.

η is fitted to measured training time per epoch by least squares on the logarithm of
projected / measured (a factor, so errors of 2× and ½× weigh the same), over a grid of
η fine enough (0.2 % apart) that the grid adds nothing to the error. Nothing else in the
model is fitted: peaks, bandwidths and latencies are the table's or the description's.

Each workload's contract holds the factors `sciperf project workload=…` uses
(``Cost.efficiency``, in its flops.py), fitted on every group of the published MLPerf HPC
v2.0 and v3.0 rounds that sciperf can project
(`sciperf project ROUND_TREES --json` prints them as "factors"); docs/projection.md shows
the check, with each group's error under its held-out factor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sciperf.tools.project_model import Costs, System, project

if TYPE_CHECKING:
    from sciperf.tools.project_check import GroupCheck

GRID = [10 ** (-3 + 3 * i / 3000) for i in range(3001)]  # 0.001 … 1
DEFAULT_EFFICIENCY = 0.3  # neither the pair nor the workload has a fitted factor

def stored(workload: str) -> dict[str, float]:
    """The workload's shipped factors (accelerator kind → η; its contract's
    ``Cost.efficiency``), none for a name no workload registers."""
    from sciperf.workloads import get, names
    return dict(get(workload).cost.efficiency) if workload in names() else {}


@dataclass(frozen=True)
class Fit:
    """A fitted factor and the groups it was fitted on."""

    efficiency: float
    groups: int

    def as_dict(self) -> dict[str, Any]:
        return {"efficiency": self.efficiency, "groups": self.groups}


Sample = tuple[Costs, System, bool, float]  # costs, system, staged, measured epoch seconds


def _loss(samples: Sequence[Sample], efficiency: float) -> float:
    return sum(math.log(project(c, s, efficiency, staged).epoch_s / measured) ** 2
               for c, s, staged, measured in samples)


def fit_factor(samples: Sequence[Sample]) -> Fit:
    """The grid's η with the least squared log error over `samples`."""
    coarse = min(range(0, len(GRID), 50), key=lambda i: _loss(samples, GRID[i]))
    near = range(max(coarse - 50, 0), min(coarse + 51, len(GRID)))
    best = min(near, key=lambda i: _loss(samples, GRID[i]))
    return Fit(GRID[best], len(samples))


def _samples(groups: Sequence[GroupCheck]) -> list[Sample]:
    return [(g.costs, g.system, g.staged, g.measured.epoch_s) for g in groups]


def held_out(group: GroupCheck, groups: Sequence[GroupCheck]) -> tuple[float, str | None]:
    """η for `group` fitted without it (nor its copies in another round): on its pair's
    other groups; with none, on its workload's groups of other kinds (said in a line);
    with none either, the default."""
    others = [g for g in groups if g.identity != group.identity and g.pair == group.pair]
    if others:
        return fit_factor(_samples(others)).efficiency, None
    kin = [g for g in groups if g.identity != group.identity and g.benchmark == group.benchmark]
    workload, kind = group.pair
    if kin:
        found = fit_factor(_samples(kin)).efficiency
        return found, (f"{group.label}: the only {workload} group on {kind}: its held-out "
                       f"factor η={found:.3g} is {workload}'s on other accelerators")
    return DEFAULT_EFFICIENCY, (f"{group.label}: no other {workload} group: held-out factor "
                                f"η={DEFAULT_EFFICIENCY} assumed")


def efficiency_for(workload: str, kind: str) -> tuple[float, str | None]:
    """The stored η of (workload, kind); without one, the workload's geometric mean over
    the kinds it has, or the default — each with a line saying so."""
    factors = stored(workload)
    if kind in factors:
        return factors[kind], None
    kin = list(factors.values())
    if kin:
        mean = math.exp(sum(math.log(v) for v in kin) / len(kin))
        return mean, (f"no factor fitted for {workload} on {kind}: η={mean:.3g}, {workload}'s "
                      "geometric mean over the accelerators fitted, assumed")
    return DEFAULT_EFFICIENCY, (f"no factor fitted for {workload}: η={DEFAULT_EFFICIENCY} "
                                "assumed")
