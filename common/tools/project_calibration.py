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


Table = dict[str, dict[str, float]]  # workload → accelerator kind → η


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def borrowed(table: Table, workload: str, kind: str) -> tuple[float, str]:
    """η for a (workload, kind) the table lacks, and how it was found ("η=…, …").

    A workload's factors differ across kinds by roughly what the kinds' software and
    efficiency differ by, and a kind differs from the others by roughly the same factor on
    every workload (the published V100 groups show it on CosmoFlow and DeepCAM alike:
    docs/projection.md). So: the workload's geometric mean over its other kinds, times the
    kind's geometric mean ratio to those kinds on the workloads fitted on both; without
    such a workload, the mean alone; without factors for the workload, the default."""
    own = {k: v for k, v in table.get(workload, {}).items() if k != kind}
    if not own:
        return DEFAULT_EFFICIENCY, (f"η={DEFAULT_EFFICIENCY}, the default ({workload} has no "
                                    "factor on any accelerator)")
    base = _geomean(list(own.values()))
    ratios, via = [], []
    for other, factors in sorted(table.items()):
        shared = [factors[k] for k in own if k in factors]
        if other != workload and kind in factors and shared:
            ratios.append(factors[kind] / _geomean(shared))
            via.append(other)
    if not ratios:
        return base, (f"η={base:.3g}, {workload}'s geometric mean over "
                      f"{', '.join(sorted(own))}")
    found = base * _geomean(ratios)
    return found, (f"η={found:.3g}, {workload}'s on {', '.join(sorted(own))} × {kind}'s "
                   f"ratio to them on {', '.join(via)} ({_geomean(ratios):.3g})")


def held_out(group: GroupCheck, groups: Sequence[GroupCheck]) -> tuple[float, str | None]:
    """η for `group` fitted without it (nor its copies in another round): on its pair's
    other groups; with none, borrowed (`borrowed`) from the factors fitted on every other
    group, said in a line."""
    rest = [g for g in groups if g.identity != group.identity]
    others = [g for g in rest if g.pair == group.pair]
    if others:
        return fit_factor(_samples(others)).efficiency, None
    pairs: dict[tuple[str, str], list[GroupCheck]] = {}
    for g in rest:
        pairs.setdefault(g.pair, []).append(g)
    table: Table = {}
    for (workload, kind), members in pairs.items():
        table.setdefault(workload, {})[kind] = fit_factor(_samples(members)).efficiency
    found, how = borrowed(table, *group.pair)
    workload, kind = group.pair
    return found, f"{group.label}: the only {workload} group on {kind}: held-out {how}"


def efficiency_for(workload: str, kind: str) -> tuple[float, str | None]:
    """The stored η of (workload, kind); without one, borrowed (`borrowed`) from the
    factors every workload ships, with a line saying so."""
    from sciperf.workloads import get, names
    if kind in stored(workload):
        return stored(workload)[kind], None
    table = {name: dict(get(name).cost.efficiency) for name in names()}
    found, how = borrowed(table, workload, kind)
    return found, f"no factor fitted for {workload} on {kind}: {how}"
