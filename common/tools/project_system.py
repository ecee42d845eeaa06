"""A system description → the :class:`~sciperf.tools.project_model.System` the model reads.

Two sources: the run config's ``system.*`` keys (`sciperf project workload=… system=…`)
and a published round's ``systems/<system>.json`` with the scale its logs ran at. What a
description lacks is taken from the accelerator table (``sciperf.tools.accelerators``) or
from the defaults below, each time with one line saying what was missing and what was
assumed; what cannot be assumed (no accelerator at all) is an error naming the key.
"""

from __future__ import annotations

import re
from typing import Any

from sciperf.config_checks import check_peak
from sciperf.errors import SciperfError
from sciperf.tools import accelerators
from sciperf.tools.accelerators import GIGA, Accelerator
from sciperf.tools.project_model import System

# Node-local reads where a description gives none: staged data read back from host memory
# (a RAM disk or the page cache), a fraction of a server's DRAM bandwidth.
DEFAULT_LOCAL_BW = 100 * GIGA
MIXED = "bf16"  # published rounds train in mixed precision (bf16 or fp16: the same peak)
# InfiniBand generations named without a rate (Gb/s per port); a Slingshot node's port
# count is never written, so its rate comes from the table
LINK_GBIT = {"ndr": 400, "hdr200": 200, "hdr100": 100, "hdr": 200, "edr": 100}


def _generic(name: str) -> Accelerator:
    """An accelerator the table lacks, described by the config's own peaks alone."""
    return Accelerator(name, name, (), {}, 0.0, 0.0, 0.0)


def from_config(cfg: Any) -> System:
    """The system of a composed run config: ``system.accelerator`` (a table name or a
    description's words) and the per-node keys that override or replace the table's."""
    s = cfg.system
    notes: list[str] = []
    nodes, per_node = int(s.nodes), max(int(s.accelerators_per_node), 1)
    if int(s.nodes) < 1:
        raise SciperfError(f"system.nodes={s.nodes} must be >= 1")
    given = {k: check_peak(f"system.{k}", s.get(k)) for k in
             ("peak_flops", "mem_bw", "injection_bw", "fs_bw", "local_bw")}
    name = s.get("accelerator")
    acc = accelerators.find(str(name)) if name else None
    if acc is None:
        missing = [f"system.{k}" for k in ("peak_flops", "mem_bw") if given[k] is None]
        if missing:
            what = f"system.accelerator={name} is not in the table" if name else \
                "system.accelerator is not set"
            raise SciperfError(f"{what} ({', '.join(accelerators.names())}) and "
                               f"{' and '.join(missing)} not given: nothing to project with")
        acc = _generic(str(name or "unnamed"))
        notes.append(f"accelerator {acc.name} not in the table: system.peak_flops and "
                     "system.mem_bw used as given")
    if int(s.accelerators_per_node) < 1:
        notes.append("system.accelerators_per_node=0: one accelerator per node assumed")
    precision = str(cfg.get("precision", "auto"))
    if precision not in accelerators.PRECISIONS:
        notes.append(f"precision={precision}: mixed precision ({MIXED}) assumed")
        precision = MIXED
    peak = given["peak_flops"] / per_node if given["peak_flops"] else acc.peak_flops(precision)
    mem = given["mem_bw"] / per_node if given["mem_bw"] else acc.mem_bw
    injection = given["injection_bw"] or _table_injection(acc, per_node, notes,
                                                          "system.injection_bw")
    local = given["local_bw"] or _default_local(notes, "system.local_bw")
    if given["fs_bw"] is None:
        notes.append("no system.fs_bw: the file system assumed to feed every node at its "
                     "injection bandwidth")
    return System(acc, nodes, per_node, precision, peak, mem, injection, acc.link_bw,
                  given["fs_bw"], local, notes)


def _table_injection(acc: Accelerator, per_node: int, notes: list[str], key: str) -> float:
    if acc.injection_bw <= 0:
        raise SciperfError(f"no {key} and the table has no injection bandwidth for "
                           f"{acc.name}: give {key}=BYTES_PER_S (per node)")
    bw = acc.injection_bw * per_node
    notes.append(f"no {key}: {per_node} × {acc.injection_bw / GIGA:g} GB/s per {acc.name} "
                 "assumed (the table's typical node)")
    return bw


def _default_local(notes: list[str], key: str) -> float:
    notes.append(f"no {key}: staged data assumed read from host memory at "
                 f"{DEFAULT_LOCAL_BW / GIGA:g} GB/s per node")
    return DEFAULT_LOCAL_BW


def network_bw(words: str) -> float | None:
    """Bytes/s of a description's compute network ("Compute: 8x ConnectX-7 IB NDR 400Gb/s",
    "4x Mellanox HDR200 InfiniBand", "TofuD interconnect [68GB/s x2 (in/out)]"): ports ×
    the rate, one port where no count is written; None when the words give no rate."""
    at = words.lower().find("compute:")
    part = words[at + len("compute:"):].split(",")[0] if at >= 0 else words
    part = part.replace(" / ", "/")
    counted = re.match(r"\s*(\d+)\s*x", part, re.IGNORECASE)
    count = int(counted.group(1)) if counted else 1
    rate = re.search(r"(\d+(?:\.\d+)?)\s*(GB|Gb|Gbit|gbit)(?![a-z])", part)
    if rate:
        value = float(rate.group(1)) * GIGA
        return count * (value if rate.group(2) == "GB" else value / 8)
    plain = part.lower().replace("-", "")
    found = next((v for k, v in LINK_GBIT.items() if k in plain), None)
    return count * found * GIGA / 8 if found else None


def from_description(desc: dict[str, Any], where: str, nodes: int, per_node: int) -> System:
    """The system of a published description (``systems/<system>.json``) at the scale its
    logs ran (nodes × accelerators per node of the instance)."""
    notes: list[str] = []
    words = str(desc.get("accelerator_model_name") or "").strip()
    if per_node < 1 or words.upper() in ("", "N/A", "NONE"):
        words = str(desc.get("host_processor_model_name") or "").strip()
        per_node = 1
    acc = accelerators.find(words) if words else None
    if acc is None:
        raise SciperfError(f"{where}: unknown accelerator {words or '(none named)'!r} (the "
                           f"table holds {', '.join(accelerators.names())})")
    network = str(desc.get("host_networking") or "")
    bw = network_bw(network)
    if bw is None:
        bw = _table_injection(acc, per_node, notes, "injection rate in host_networking")
        notes[-1] = f"{where}: " + notes[-1] + f" ({network or 'no host_networking'!r})"
    notes.append("no file-system or node-local bandwidth in the description: "
                 f"staged data read from host memory at {DEFAULT_LOCAL_BW / GIGA:g} GB/s per "
                 "node and the file "
                 "system at each node's injection bandwidth assumed")
    return System(acc, nodes, per_node, MIXED, acc.peak_flops(MIXED), acc.mem_bw, bw,
                  acc.link_bw, None, DEFAULT_LOCAL_BW, notes)
