"""Accelerators `sciperf project` knows: peak dense FLOP/s per precision, memory bandwidth,
the node-to-node (injection) bandwidth a typical node gives each one, and the intra-node
link bandwidth each one has to its peers.

Every number is a vendor datasheet's (the source is named on each entry, ``sources``),
except the injection and link shares, which are the vendor's reference node divided by its
accelerators (named too). Peaks are DENSE: a datasheet's "with sparsity" figure is halved.
A precision the part lacks maps to what a framework runs it as: TF32 on parts without it is
plain FP32; BF16 on a V100 (no BF16) is its FP16 tensor rate, which mixed precision uses.

A system description names its accelerator in words ("NVIDIA A100-SXM4-40GB",
"NVIDIA H100 80GB HBM3"); :func:`find` matches those words against each entry's patterns,
most specific first, so an 80 GB A100 gets its faster HBM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TERA, GIGA = 1e12, 1e9
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")

NVIDIA_A100 = ("NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-"
               "1758950-r4-web.pdf): FP32 19.5, TF32 156 (312 sparse), BF16/FP16 312 (624 "
               "sparse) TFLOPS; HBM2 1,555 GB/s (40GB), HBM2e 1,935 GB/s (80GB PCIe), "
               "2,039 GB/s (80GB SXM); NVLink 600 GB/s (SXM), PCIe Gen4 64 GB/s")
NVIDIA_DGX_A100 = ("NVIDIA DGX A100 datasheet: 8 GPUs, 8× single-port ConnectX-6 200 Gb/s "
                   "HDR InfiniBand for compute (one 25 GB/s port per GPU)")
NVIDIA_H100 = ("NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column): FP32 67, TF32 989*, "
               "BF16/FP16 1,979* TFLOPS (*with sparsity: dense is half); HBM3 3.35 TB/s; "
               "NVLink 900 GB/s")
NVIDIA_DGX_H100 = ("NVIDIA DGX H100 datasheet: 8 GPUs, 8× ConnectX-7 400 Gb/s NDR for "
                   "compute (one 50 GB/s port per GPU)")
NVIDIA_H200 = ("NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column): FP32 67, TF32 989*, "
               "BF16/FP16 1,979* TFLOPS (*with sparsity); HBM3e 4.8 TB/s; NVLink 900 GB/s")
NVIDIA_GH200 = ("NVIDIA GH200 Grace Hopper Superchip datasheet: FP32 67, TF32 989*, "
                "BF16/FP16 1,979* TFLOPS (*with sparsity); 96 GB HBM3 4 TB/s; NVLink 900 GB/s")
NVIDIA_V100 = ("NVIDIA V100 Tensor Core GPU datasheet (V100 SXM2 column): FP32 15.7, tensor "
               "(FP16) 125 TFLOPS; HBM2 900 GB/s; NVLink 300 GB/s")
AMD_MI250X = ("AMD Instinct MI250X datasheet: FP32 vector 47.9, FP32 matrix 95.7, FP16/BF16 "
              "383 TFLOPS; HBM2e 3.2 TB/s; Infinity Fabric links 8× 100 GB/s")
AMD_MI300A = ("AMD Instinct MI300A APU datasheet: FP32 matrix 122.6, TF32 490.3 (980.6 "
              "sparse), FP16/BF16 980.6 (1,961.2 sparse) TFLOPS; HBM3 5.3 TB/s; 4× Infinity "
              "Fabric links, 128 GB/s each")
SLINGSHOT_NODE = ("HPE Cray EX nodes (Frontier, El Capitan, Alps, Perlmutter): one HPE "
                  "Slingshot-11 200 Gb/s NIC per accelerator (25 GB/s)")
FUJITSU_A64FX = ("Fujitsu A64FX datasheet / RIKEN Fugaku specification: 48 compute cores, "
                 "FP64 3.072, FP32 6.144, FP16 12.288 TFLOPS at 2.0 GHz; HBM2 1,024 GB/s; "
                 "Tofu interconnect D, 6 ports × 6.8 GB/s = 40.8 GB/s injection")


@dataclass(frozen=True)
class Accelerator:
    """One accelerator part: its kind (the efficiency factor's key), its peaks and shares."""

    name: str
    kind: str
    patterns: tuple[str, ...]  # regular expressions on a description's words (any matches)
    peak: dict[str, float]  # precision → dense FLOP/s
    mem_bw: float  # bytes/s of its own memory (HBM)
    injection_bw: float  # bytes/s of node-to-node bandwidth a typical node gives it
    link_bw: float  # bytes/s, one direction, to the other accelerators of its node
    sources: tuple[str, ...] = field(default=())

    def peak_flops(self, precision: str) -> float:
        """Dense FLOP/s at `precision` (fp32, tf32, bf16 or fp16)."""
        return self.peak[precision]


def _peaks(fp32: float, tf32: float, bf16: float, fp16: float | None = None) -> dict[str, float]:
    return {"fp32": fp32 * TERA, "tf32": tf32 * TERA, "bf16": bf16 * TERA,
            "fp16": (bf16 if fp16 is None else fp16) * TERA}


# most specific first: :func:`find` takes the first entry whose pattern matches
TABLE: tuple[Accelerator, ...] = (
    Accelerator("A100-SXM4-80GB", "A100", (r"a100.*sxm.*80", r"a100.*80.*sxm"),
                _peaks(19.5, 156, 312), 2039 * GIGA, 25 * GIGA, 300 * GIGA,
                (NVIDIA_A100, NVIDIA_DGX_A100)),
    Accelerator("A100-PCIe-80GB", "A100", (r"a100.*pcie.*80", r"a100.*80.*pcie"),
                _peaks(19.5, 156, 312), 1935 * GIGA, 25 * GIGA, 32 * GIGA,
                (NVIDIA_A100, NVIDIA_DGX_A100)),
    Accelerator("A100-PCIe-40GB", "A100", (r"a100.*pcie",),
                _peaks(19.5, 156, 312), 1555 * GIGA, 25 * GIGA, 32 * GIGA,
                (NVIDIA_A100, NVIDIA_DGX_A100)),
    Accelerator("A100-SXM4-40GB", "A100", (r"a100",),
                _peaks(19.5, 156, 312), 1555 * GIGA, 25 * GIGA, 300 * GIGA,
                (NVIDIA_A100, NVIDIA_DGX_A100)),
    Accelerator("GH200", "GH200", (r"gh200", r"grace.?hopper"),
                _peaks(67, 494.5, 989.5), 4000 * GIGA, 25 * GIGA, 450 * GIGA,
                (NVIDIA_GH200, SLINGSHOT_NODE)),
    Accelerator("H200-SXM", "H200", (r"h200",),
                _peaks(67, 494.5, 989.5), 4800 * GIGA, 50 * GIGA, 450 * GIGA,
                (NVIDIA_H200, NVIDIA_DGX_H100)),
    Accelerator("H100-SXM", "H100", (r"h100",),
                _peaks(67, 494.5, 989.5), 3350 * GIGA, 50 * GIGA, 450 * GIGA,
                (NVIDIA_H100, NVIDIA_DGX_H100)),
    Accelerator("MI300A", "MI300A", (r"mi300a",),
                _peaks(122.6, 490.3, 980.6), 5300 * GIGA, 25 * GIGA, 128 * GIGA,
                (AMD_MI300A, SLINGSHOT_NODE)),
    Accelerator("MI250X", "MI250X", (r"mi250x",),
                _peaks(95.7, 95.7, 383), 3200 * GIGA, 25 * GIGA, 100 * GIGA,
                (AMD_MI250X, SLINGSHOT_NODE)),
    Accelerator("V100-SXM2", "V100", (r"v100",),
                _peaks(15.7, 15.7, 125), 900 * GIGA, 12.5 * GIGA, 150 * GIGA,
                (NVIDIA_V100, "NVIDIA DGX-1 datasheet: 8 GPUs, 4× 100 Gb/s EDR InfiniBand "
                              "(12.5 GB/s per 2 GPUs; here one EDR port per GPU is assumed "
                              "as the upper share)")),
    Accelerator("A64FX", "A64FX", (r"a64fx",),
                _peaks(6.144, 6.144, 12.288), 1024 * GIGA, 40.8 * GIGA, 0.0,
                (FUJITSU_A64FX,)),
)


def find(description: str) -> Accelerator | None:
    """The table's entry whose pattern matches `description` (case-insensitive), None for
    an accelerator the table does not hold."""
    text = description.lower()
    return next((a for a in TABLE if any(re.search(p, text) for p in a.patterns)), None)


def names() -> list[str]:
    """The table's accelerators by name (the `system.accelerator=` values it knows)."""
    return [a.name for a in TABLE]


def peak_flops(description: str, precision: str) -> float | None:
    """Dense FLOP/s at `precision` of the accelerator a description names (None: not in
    the table, or no peak at that precision)."""
    found = find(description)
    return found.peak.get(precision) if found else None
