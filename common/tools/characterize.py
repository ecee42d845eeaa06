"""`sciperf characterize workload=… framework=… [run=OUT]`: what a benchmark asks of a system.

Counted from the model spec, not measured, so the numbers hold for every framework:

* FLOPs per sample. Convention: the multiply-adds of the convolution and dense layers, 2
  FLOPs each (what torch's FlopCounterMode counts; bias adds, norms, the ASPP affine,
  activations, pooling, upsampling, dropout and the loss are left out — under 0.1 % for
  a plain CNN, about 0.4 % for a normalised segmentation net at ~4 FLOPs per feature-map
  element). Each workload lists its counted layers (``Cost.layers``, its ``flops.py``).
  A conv's multiply-adds are prod(weight shape) × its OUTPUT positions (a depthwise conv's
  weight is c·1·k·k), a transposed conv's × its INPUT positions, as FlopCounterMode counts
  them (padding included). Forward: Σ 2·MACs. Backward: each layer's weight gradient costs
  its forward, and so does its input gradient — except the first layer's, which nobody
  needs: backward = 2·forward − forward(first layer). That holds for depthwise and
  transposed convs too. FlopCounterMode agrees with it everywhere except the
  weight gradient of a grouped conv, which its formula counts as if the conv were dense
  (groups ignored: c × the real work for a depthwise conv); the tests show the difference
  is exactly that and nothing else. A training sample costs forward + backward; an
  evaluation sample its forward. A model whose output is a derivative states its passes
  (``Cost.passes``): OC20's forces −∂E/∂pos cost one more forward-sized pass
  (each layer's input gradient), and training differentiates both passes with respect to
  weights and inputs (2 × 2 forwards): training 6×, evaluation 2× the forward.
  Where the data sets a sample's cost (OC20: atoms, edges, triplets of each graph) and
  data.dir holds training data, the layers are counted on the mean sizes of its first 64
  training samples (``Cost.on_data``), else on the spec's typical sample; the
  result's ``flops_source`` says which.
* Bytes read per sample and per epoch: the mean size of the sample files of the data
  format (data.dir when its train split holds them, e.g. gzip'ed TFRecords), else the
  format's uncompressed payload from the spec.
* Gradient all-reduce bytes per step and rank: ring all-reduce of fp32 gradients,
  2·(N−1)/N × 4 bytes × parameters for N ranks.
* Arithmetic intensity: training FLOPs per byte read (I/O), and per byte all-reduced.

With a measured run (`run=OUT`, its summary.json) it adds the achieved FLOP/s (counted
training FLOPs × measured training samples/s), the I/O bandwidth the training consumed and,
where the system config gives `peak_flops` / `peak_io_bw` (per node), the fraction of the
machine's peak; and it draws the roofline (`roofline.png`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sciperf.config_checks import check_peak
from sciperf.data import atomic
from sciperf.data.layout import check_output_dir
from sciperf.errors import SciperfError
from sciperf.results.logs import parse_log
from sciperf.results.summary import CHARACTERIZE, SUMMARY_FILE, load_summary
from sciperf.workloads import get, names
from sciperf.workloads.base import Layer, Workload

FP32_BYTES = 4


def _owner(model: Any) -> Workload:
    """The workload whose contract defines the model spec's class (``Workload.model``)."""
    owner = next((get(w) for w in names() if isinstance(model, get(w).model)), None)
    if owner is None:
        raise SciperfError(f"{type(model).__name__} is no registered workload's model")
    return owner


def layers(model: Any) -> list[Layer]:
    """The counted layers of a model spec, by the workload that owns its class."""
    return _owner(model).cost.layers(model)


@dataclass
class Counts:
    """Per-sample FLOPs and parameters of a model."""

    forward: int
    backward: int
    params: int
    first_layer_forward: int
    eval: int = -1  # FLOPs of an evaluation sample (-1: the forward)

    def __post_init__(self) -> None:
        if self.eval < 0:
            self.eval = self.forward

    @property
    def train(self) -> int:
        return self.forward + self.backward


def count_flops(model: Any, found: list[Layer] | None = None) -> Counts:
    """FLOPs per sample by the convention of the module docstring, over `found` (the
    model's own counted layers by default)."""
    found = layers(model) if found is None else found
    forward = sum(2 * layer.macs for layer in found)
    first = 2 * found[0].macs
    params = sum(layer.params for layer in found)
    passes = _owner(model).cost.passes
    if passes is not None:
        train, evaluation = passes
        return Counts(forward, round((train - 1) * forward), params, first,
                      round(evaluation * forward))
    return Counts(forward, 2 * forward - first, params, first)


def _train_samples(cfg: Any) -> tuple[Path, str, list[Path]] | None:
    """(data.dir, data.format, its training samples) when data.dir holds that split."""
    workload = get(cfg.workload)
    folder, fmt = Path(str(cfg.data.dir)), str(cfg.data.format)
    if not (folder / "train").is_dir():
        return None
    try:
        samples = workload.dataset.list_samples(folder, "train", fmt)
    except SciperfError:
        return None
    return (folder, fmt, samples) if samples else None


def counted_layers(cfg: Any, model: Any) -> tuple[list[Layer], str]:
    """The layers to count and where their input sizes come from: a workload whose cost
    the data sets (``Cost.on_data``) counts the first 64 training samples of data.dir
    when it holds them; otherwise the model spec's own sizes."""
    cost = get(cfg.workload).cost
    found = _train_samples(cfg) if cost.on_data is not None else None
    if found is not None and cost.on_data is not None:
        folder, fmt, samples = found
        counted = cost.on_data(model, folder, fmt, samples[:64])
        return counted.layers, counted.source
    if cost.on_data is not None:
        return layers(model), "the spec's typical sample (no training data in data.dir)"
    return layers(model), "the model's input size"


def bytes_per_sample(cfg: Any) -> tuple[float, str]:
    """Mean bytes of one training sample's files, and where the number comes from.

    The files of the first 64 samples, each counted once, over the samples they hold: a
    sample may be a record of a container file that many samples name (OC20's LMDBs and
    shards), so a per-sample sum of its files would count the container once per record."""
    workload = get(cfg.workload)
    found = _train_samples(cfg)
    if found is not None:
        folder, fmt, samples = found
        files = {f for p in samples[:64] for f in workload.dataset.sample_files(p, fmt)}
        held = sum(set(workload.dataset.sample_files(p, fmt)) <= files for p in samples)
        total = sum(f.stat().st_size for f in files)
        return total / held, f"{len(files)} files holding {held} samples in {folder}/train"
    payload = workload.dataset.payload_bytes(workload.model_spec(cfg))
    return float(payload), f"{cfg.data.format} payload, uncompressed (no files in data.dir)"


def allreduce_bytes(params: int, ranks: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of fp32 gradients."""
    return 2 * (ranks - 1) / ranks * FP32_BYTES * params if ranks > 1 else 0.0


def load_run(path: str | Path) -> dict[str, Any]:
    """summary.json of a measured run directory (or the file), checked by the shared
    loader (sciperf.results.summary) for every field characterize reads."""
    path = Path(path)
    file = path / SUMMARY_FILE if path.is_dir() else path
    summary = load_summary(path, CHARACTERIZE)
    if not summary.get("samples_per_s"):
        raise SciperfError(f"{file}: the run measured no training throughput (no epoch ran)")
    log = file.parent / str(summary.get("result_file", "result_0.txt"))
    summary["nodes_used"] = int(parse_log(log).value("number_of_nodes", 1)) \
        if log.is_file() else 1
    return summary


def characterize(cfg: Any, run: dict[str, Any] | None = None) -> dict[str, Any]:
    """The numbers, as a JSON-ready dict. A measured run's own model/data/batch config is
    used so the counts describe what ran."""
    from omegaconf import OmegaConf
    workload = get(cfg.workload)
    if run is not None:
        if run["benchmark"] != cfg.workload:
            raise SciperfError(f"the run is {run['benchmark']}, not workload={cfg.workload}")
        config = dict(run["config"])
        if "workload" not in config:  # summaries written before the key was `benchmark`
            config["workload"] = config.pop("benchmark", run["benchmark"])
        merged = OmegaConf.create(config)
        for key in ("peak_flops", "peak_io_bw"):  # the command line may supply the peaks
            if cfg.system.get(key) is not None:
                merged.system[key] = cfg.system[key]
        cfg = merged
    model = workload.model_spec(cfg)
    found, flops_source = counted_layers(cfg, model)
    counts = count_flops(model, found)
    per_sample, source = bytes_per_sample(cfg)
    ranks = int(run["world_size"]) if run else int(cfg.system.nodes) * max(
        int(cfg.system.accelerators_per_node), 1)
    gbs = int(cfg.train.global_batch_size)
    comm = allreduce_bytes(counts.params, ranks)
    step_flops_per_rank = counts.train * gbs / ranks
    result: dict[str, Any] = {
        "workload": cfg.workload, "framework": cfg.framework.name,
        "experiment": cfg.experiment, "system": cfg.system.name,
        "convention": "conv/deconv/dense multiply-adds × 2; backward = 2×forward − "
                      "forward(first layer, no input gradient); bias/norm/activation/pool/"
                      "loss not counted",
        "layers": [asdict(layer) for layer in found], "flops_source": flops_source,
        "parameters": counts.params,
        "flops_per_sample": {"forward": counts.forward, "backward": counts.backward,
                             "train": counts.train, "eval": counts.eval},
        "bytes_per_sample": per_sample, "bytes_source": source,
        "train_samples": int(cfg.data.train_samples),
        "bytes_per_epoch": per_sample * int(cfg.data.train_samples),
        "ranks": ranks, "global_batch_size": gbs,
        "allreduce_bytes_per_step_per_rank": comm,
        "io_intensity_flop_per_byte": counts.train / per_sample,
        "comm_intensity_flop_per_byte": step_flops_per_rank / comm if comm else None,
    }
    if run is not None:
        result["measured"] = measured(result, run, cfg)
    return result


def measured(result: dict[str, Any], run: dict[str, Any], cfg: Any) -> dict[str, Any]:
    """Achieved rates of a run and, with the system's per-node peaks × the nodes the run
    used (MLLOG number_of_nodes), its fraction of them."""
    rate = float(run["samples_per_s"])
    nodes = int(run.get("nodes_used") or 1)
    flops = result["flops_per_sample"]["train"] * rate
    io = result["bytes_per_sample"] * rate
    # the command line's peaks were checked at composition; a run's recorded ones here
    peak_flops = check_peak("system.peak_flops", cfg.system.get("peak_flops"))
    peak_bw = check_peak("system.peak_io_bw", cfg.system.get("peak_io_bw"))
    return {
        "run_samples_per_s": rate, "nodes": nodes, "precision": run.get("precision"),
        "achieved_flops": flops, "achieved_io_bytes_per_s": io,
        "peak_flops": peak_flops * nodes if peak_flops else None,
        "peak_io_bytes_per_s": peak_bw * nodes if peak_bw else None,
        "fraction_of_peak_flops": flops / (peak_flops * nodes) if peak_flops else None,
        "fraction_of_peak_io": io / (peak_bw * nodes) if peak_bw else None,
    }


def plot_roofline(result: dict[str, Any], path: Path) -> Any:
    """FLOP/s against FLOPs per byte read: the compute and I/O ceilings of the system
    config (where given), the workload's intensity and the measured point."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6.5, 4.5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ai = result["io_intensity_flop_per_byte"]
    got = result.get("measured") or {}
    peak, bw = got.get("peak_flops"), got.get("peak_io_bytes_per_s")
    xs = [ai / 100, ai * 100]
    if bw:
        ys = [min(bw * x, peak) if peak else bw * x for x in xs]
        ax.plot(xs, ys, color="#1f77b4", label=f"I/O ceiling {bw / 1e9:.3g} GB/s")
    if peak:
        ax.axhline(peak, color="#d62728", label=f"compute ceiling {peak / 1e12:.3g} TFLOP/s")
    ax.axvline(ai, color="#7f7f7f", ls=":", label=f"{result['workload']}: {ai:.3g} FLOP/byte")
    if got:
        ax.scatter([ai], [got["achieved_flops"]], color="black", zorder=3,
                   label=f"measured {got['achieved_flops'] / 1e9:.3g} GFLOP/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training FLOPs per byte read")
    ax.set_ylabel("FLOP/s")
    note = "" if (peak or bw) else " (no peak_flops/peak_io_bw in the system config)"
    ax.set_title(f"roofline: {result['workload']} {result['experiment']}{note}", fontsize=9)
    ax.legend(fontsize=7)
    fig.savefig(path, format="png")
    return fig


def check_out(out: Path) -> Path:
    """`--out` can take the outputs: called before counting, so a bad path is one line
    (naming it) rather than a traceback after the work."""
    check_output_dir(out)
    return out


def write_outputs(result: dict[str, Any], out: Path) -> Path:
    """characterize.json + roofline.png in `out`, replaced together
    (`sciperf.data.atomic.replace_together`): both written aside first, then renamed, so a
    failure — a full disk: one line naming the file — leaves no half of a new pair beside
    the other half of an old one. `out` may hold other files (a run's folder), so the pair
    is replaced file by file rather than the folder whole; a folder made for it (and its
    parents) goes again when the pair cannot be written (`atomic.folder_for`)."""
    check_out(out)
    with atomic.folder_for(out):
        atomic.replace_together({
            out / "characterize.json":
                lambda tmp: tmp.write_text(json.dumps(result, indent=2) + "\n"),
            out / "roofline.png": lambda tmp: plot_roofline(result, tmp),
        })
    return out


def _si(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3f} {prefix}{unit}"
    return f"{value:.3f} {unit}"


def table(result: dict[str, Any]) -> str:
    """A short human table of the result."""
    f = result["flops_per_sample"]
    rows = [
        ("workload / experiment", f"{result['workload']} / {result['experiment']}"),
        ("parameters", f"{result['parameters']:,}"),
        ("FLOPs/sample forward", _si(f["forward"], "FLOP")),
        ("FLOPs/sample backward", _si(f["backward"], "FLOP")),
        ("FLOPs/sample train", _si(f["train"], "FLOP")),
        ("FLOPs counted on", result.get("flops_source", "the model's input size")),
        ("bytes/sample read", f"{_si(result['bytes_per_sample'], 'B')} "
                              f"({result['bytes_source']})"),
        ("bytes/epoch read", _si(result["bytes_per_epoch"], "B")),
        (f"all-reduce/step/rank ({result['ranks']} ranks)",
         _si(result["allreduce_bytes_per_step_per_rank"], "B")),
        ("I/O intensity", f"{result['io_intensity_flop_per_byte']:.1f} FLOP/byte"),
    ]
    got = result.get("measured")
    if got:
        frac = got["fraction_of_peak_flops"]
        rows += [("measured samples/s", f"{got['run_samples_per_s']:.2f}"),
                 ("achieved", _si(got["achieved_flops"], "FLOP/s")
                  + (f" ({100 * frac:.2f} % of peak)" if frac is not None else "")),
                 ("I/O bandwidth", _si(got["achieved_io_bytes_per_s"], "B/s"))]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)
