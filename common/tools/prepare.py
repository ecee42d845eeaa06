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
    if source != "existing":  # every other source writes into data.dir: refused up front
        check_output_dir(Path(cfg.data.dir), "data.dir=")
    sources[source](cfg, force)
