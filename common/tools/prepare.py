"""`sciperf prepare`: make the dataset a run needs, or verify the one a user points at.

What a workload can prepare is its contract's ``Dataset.prepare`` (``data.source`` →
function): synthetic data, an existing set to verify, conversions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sciperf.data.layout import check_output_dir
from sciperf.errors import SciperfError
from sciperf.workloads import get


def prepare(cfg: Any, force: bool = False) -> None:
    """Run the workload's `data.source` (synthetic data is skipped when an identical
    complete set exists, unless `force`)."""
    sources = get(cfg.workload).dataset.prepare
    source = cfg.data.source
    if source not in sources:
        raise SciperfError(f"data.source={source} is not one of {', '.join(sources)}")
    data = Path(cfg.data.dir)
    # every other source writes into data.dir: a path that cannot become a directory (a
    # file, a path below a file, an unwritable parent) is refused before any source starts;
    # an existing directory is left to the source, which says "dataset ready" for a
    # complete set (on a read-only mount too) and checks it can write before it does
    if source != "existing" and not data.is_dir():
        check_output_dir(data, "data.dir=")
    sources[source](cfg, force)
