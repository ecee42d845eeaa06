"""What every kind of bench row shares: the workload's cases, and how a row states what it
measured — significant digits, the device it ran on, per-unit rates and their printed
form.

The training, loader, DALI and scaling rows each take these from here: every kind of row
names its device, rounds its rates and prints its per-unit rates alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sciperf.errors import SciperfError
from sciperf.info import machine
from sciperf.workloads.base import Workload


def _cases(workload: Workload) -> Any:
    if workload.bench is None:
        raise SciperfError(f"sciperf bench has no cases for workload={workload.name}")
    return workload.bench


def _input_model(workload: Workload, sizes: dict[str, Any]) -> Any:
    """The default model spec of the workload at one input size."""
    return workload.model(**sizes)


def significant(x: float, digits: int = 4) -> float:
    """`x` to `digits` significant digits: a full OpenFold step on a CPU is 0.0008
    samples/s, which three decimals would print as 0.001."""
    return float(f"{x:.{digits}g}")


def _device(name: str) -> str:
    """The row's device: the GPU's name, or the CPU model with its bf16 units (a row
    copied out of its JSON still says what it ran on: bf16 is 5× fp32 on one CPU and
    0.5× on the next)."""
    if name != "cpu":
        return name
    info = machine()
    units = [f for f in ("amx_bf16", "avx512_bf16") if info.get(f)]
    return f"{info['cpu']} ({info['cores']} cores, {', '.join(units) or 'no bf16 units'})"


def _per_unit(workload: Workload, model: Any, folder: Path, fmt: str, samples: list[Path],
              rate: float) -> dict[str, float]:
    """`<unit>_per_s` for the sizes that vary between samples (``Cost.on_data``'s units: an
    OC20 structure's atoms): samples/s alone would rank a run on small graphs first."""
    if workload.cost.on_data is None:
        return {}
    means = workload.cost.on_data(model, folder, fmt, samples).units
    return {f"{unit}_per_sample": round(mean, 2) for unit, mean in means.items()} | {
        f"{unit}_per_s": round(rate * mean, 1) for unit, mean in means.items()}


def _units(row: dict[str, Any]) -> str:
    """`, 1234.5 atoms/s` for each per-unit rate of a row."""
    return "".join(f", {v} {k[:-len('_per_s')]}/s" for k, v in row.items()
                   if k.endswith("_per_s") and k not in ("samples_per_s", "MB_per_s"))
