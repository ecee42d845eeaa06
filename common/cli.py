"""`sciperf <verb> key=value …`: the one console command.

Verbs take Hydra overrides. User errors end in one line on stderr and exit code 2
(docs/architecture.md, rule 10); `--debug` (or SCIPERF_DEBUG=1) shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from sciperf.cli_args import VERBS, parse, verb
from sciperf.console import silence_stdout, whole_lines
from sciperf.distributed import ignore_terminations
from sciperf.errors import SciperfError


def _cfg(args: argparse.Namespace):
    from sciperf.config import compose
    return compose(args.overrides)


@verb("prepare", "generate (data.source=synthetic) or verify the dataset",
      options=(("force", None),),
      examples=("sciperf prepare workload=NAME experiment=mini data.dir=DIR",
                "sciperf prepare workload=NAME data.source=convert data.dir=DIR",
                "sciperf prepare workload=NAME data.source=existing data.dir=DIR"))
def cmd_prepare(args: argparse.Namespace) -> int:
    from sciperf.tools.prepare import prepare
    prepare(_cfg(args), force=args.force)
    return 0


@verb("data", "the real datasets: list, download, verify, convert (over MPI ranks), subset",
      operands="ACTION key=value",
      operand_help="list | download | verify | convert | subset, then Hydra overrides "
                   "(workload=, data.dir=) and the action's words (part=, mirror=, "
                   "train=N …)",
      options=(("json", "list, verify: print JSON"), ("full", "verify: read every file"),
               ("connections", None), ("force", "download: replace files that differ; "
                                                "subset: replace --out; convert: redo all"),
               ("out", "subset: the folder of the smaller set")),
      examples=("sciperf data list [workload=NAME] [--json]",
                "sciperf data download workload=NAME part=PART data.dir=DIR",
                "sciperf data verify workload=NAME data.dir=DIR [--full]",
                "mpirun -n 8 sciperf data convert workload=NAME data.dir=DIR",
                "sciperf data subset workload=NAME data.dir=DIR --out SMALL train=512 "
                "validation=64"))
def cmd_data(args: argparse.Namespace) -> int:
    from sciperf.tools.datatool import run
    return run(args)


@verb("train", "train to the target; writes OUT/result_<instance>.txt + summary.json",
      examples=("sciperf train workload=NAME framework=pytorch experiment=mini "
                "data.dir=DIR output_dir=OUT",
                "sciperf train … train.resume=auto   # continue from OUT/checkpoints/"))
def cmd_train(args: argparse.Namespace) -> int:
    from sciperf.backends import require_pair
    from sciperf.run import require_dataset, train
    cfg = _cfg(args)
    require_pair(cfg.framework.name, cfg.workload)  # before "run `sciperf prepare`"
    require_dataset(cfg)
    summary = train(cfg)
    if summary["rank"] == 0:
        _print_summary(summary, cfg.output_dir)
    return _exit_status(summary)


@verb("check", "run the official MLPerf compliance checker (hpc 3.0.0) on result logs "
               "or run directories (several instances: also their throughput)",
      operands="RUN", operand_help="result files or run folders",
      options=(("ruleset", None),),
      examples=("sciperf check OUT", "sciperf check OUT/result_0.txt --ruleset 2.0.0"))
def cmd_check(args: argparse.Namespace) -> int:
    from sciperf.results.check import check_log, result_files
    from sciperf.results.throughput import throughput
    if not args.overrides:
        raise SciperfError("usage: sciperf check RESULT_FILE|RUN_DIR […] [--ruleset 2.0.0]")
    ok = True
    for target in args.overrides:
        files = result_files(target)
        verdicts = [check_log(p, ruleset=args.ruleset) for p in files]
        for v in verdicts:
            print(v.line())
        ok = ok and all(v.ok for v in verdicts)
        if len(files) > 1:
            print(throughput(files, [v.ok for v in verdicts]).line())
    return 0 if ok else 1


@verb("score", "MLPerf HPC scores of result logs (olympic time to solution, throughput "
               "TTTa) grouped by system/benchmark/mode, with the rules' verdict",
      operands="RESULTS", operand_help="submission trees, run folders or result files",
      options=(("ruleset", None), ("json", "print JSON instead of the table")),
      examples=("sciperf score submission/", "sciperf score OUT_seed0 OUT_seed1 … --json"))
def cmd_score(args: argparse.Namespace) -> int:
    from sciperf.results.score import score, score_table, skip_lines
    if not args.overrides:
        raise SciperfError("usage: sciperf score RESULT_DIR|RESULT_FILE [...] [--json]")
    scores = score(args.overrides, ruleset=args.ruleset)
    if args.json:  # the table ends with the skipped lines; beside JSON they go to stderr
        print(json.dumps([s.as_dict() for s in scores], indent=2))
        for line in skip_lines(scores):
            print(line, file=sys.stderr)
    else:
        print(score_table(scores))
    return 0 if all(s.valid for s in scores) else 1


@verb("package", "arrange run directories into the official submission tree "
                 "(results/<system>/{strong,weak}/<benchmark>/, systems/<system>.json)",
      operands="RUN", operand_help="run folders (one per seed or instance set)",
      options=(("system", None), ("out", "destination (default ./submission)"),
               ("ruleset", None)),
      examples=("sciperf package OUT_seed0 OUT_seed1 --system cpu2_pytorch "
                "--out submission/sciperf",))
def cmd_package(args: argparse.Namespace) -> int:
    from sciperf.results import tree
    from sciperf.results.package import package
    from sciperf.results.score import score, score_table
    dest = package(args.overrides, args.system, args.out or "submission")
    for folder in sorted((dest / tree.RESULTS).glob("*/*/*")):
        count = len(list(folder.glob(tree.RESULT_GLOB)))
        print(f"wrote {folder} ({count} result file{'s' if count != 1 else ''})")
    print(f"wrote {tree.system_json(dest, args.system)}")
    print(score_table(score([dest], ruleset=args.ruleset)))
    return 0


@verb("report", "Markdown + PNG + HTML report comparing runs (scores, time breakdown, "
                "convergence curves, scaling)",
      operands="RESULTS", operand_help="run folders, submission trees or result files",
      options=(("out", "the report folder (default ./report)"), ("ruleset", None),
               ("json", "print report.json (every table's and figure's numbers) instead of "
                        "the summary line")),
      examples=("sciperf report OUT_pytorch OUT_tensorflow --out report",
                "sciperf report hpc_results_v3.0/*/ --out round --json > round.json"))
def cmd_report(args: argparse.Namespace) -> int:
    from sciperf.results.report import report
    if not args.overrides:
        raise SciperfError("usage: sciperf report RESULT_DIR|RESULT_FILE [...] [--out DIR]")
    out = report(args.overrides, args.out or "report", ruleset=args.ruleset)
    if args.json:
        print((out / "report.json").read_text(), end="")
        return 0
    print(f"wrote {out}/report.md, {out}/report.html, {out}/report.json and "
          f"{len(list(out.glob('*.png')))} PNG plots")
    return 0


@verb("characterize", "FLOPs/sample, bytes read, all-reduce bytes, arithmetic intensity; "
                      "with run=OUT achieved FLOP/s and I/O vs the system's peak, roofline PNG",
      operand_help="Hydra overrides, and run=OUT for a finished run",
      options=(("out", "folder for characterize.json + roofline.png (default "
                       "./characterize)"),
               ("json", "print JSON instead of the table")),
      examples=("sciperf characterize workload=NAME experiment=full",
                "sciperf characterize workload=NAME framework=pytorch run=OUT "
                "system.peak_flops=2e11"))
def cmd_characterize(args: argparse.Namespace) -> int:
    from sciperf.backends import available, require_pair
    from sciperf.config import compose
    from sciperf.tools.characterize import characterize, check_out, load_run, table, write_outputs
    runs = [o.split("=", 1)[1] for o in args.overrides if o.startswith("run=")]
    overrides = [o for o in args.overrides if not o.startswith("run=")]
    if len(runs) > 1:
        raise SciperfError("characterize takes at most one run=OUT")
    if runs and not runs[0].strip():
        raise SciperfError("run= is empty: name a run's output folder (an unset shell "
                           "variable?)")
    out = check_out(Path(args.out or "characterize"))
    run = load_run(runs[0]) if runs else None
    cfg = compose(overrides)
    if cfg.framework.name in available():  # counts need no framework; a label must be true
        require_pair(cfg.framework.name, cfg.workload)
    if run is not None:
        _refuse_ignored_overrides(overrides, cfg, run["config"])
    result = characterize(cfg, run)
    out = write_outputs(result, out)
    print(json.dumps(result, indent=2) if args.json else table(result))
    # beside JSON on stdout, the path goes to stderr (stdout stays one JSON document)
    print(f"wrote {out}/characterize.json and {out}/roofline.png",
          file=sys.stderr if args.json else sys.stdout)
    return 0


# what `characterize run=OUT` takes from the command line; the rest comes from the run
RUN_OVERRIDES = ("workload", "system.peak_flops", "system.peak_io_bw")


def _refuse_ignored_overrides(overrides: list[str], cfg: Any, run_config: dict) -> None:
    """With run=OUT the counts describe the run's own config: an override that says
    otherwise (framework=tensorflow for a PyTorch run, another batch) would be silently
    replaced by the run's value, so it is refused; one that agrees is harmless."""
    from omegaconf import OmegaConf
    ran = OmegaConf.create(run_config)
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in RUN_OVERRIDES:
            continue
        given, had = OmegaConf.select(cfg, key), OmegaConf.select(ran, key)
        if OmegaConf.is_config(given):  # a group choice: framework=…, system=…
            given, had = given.get("name"), had.get("name") if OmegaConf.is_config(had) else had
        if given != had:
            raise SciperfError(f"{override}: the run had {key}={_plain_value(had)}; with "
                               "run=OUT characterize counts the run's own config (only "
                               f"{', '.join(k + '=' for k in RUN_OVERRIDES)} may differ)")


def _plain_value(value: Any) -> str:
    return "(unset)" if value is None else str(value)


@verb("project", "performance model: time to train a workload on a described system "
                 "(roofline, all-reduce, input, staging, RCP epochs), or the model checked "
                 "against published result trees",
      operand_help="Hydra overrides (workload=, system=, system.accelerator=, "
                   "system.nodes=, train.global_batch_size= …), or result trees",
      options=(("json", "print JSON instead of the table"),),
      examples=("sciperf project workload=NAME system=perlmutter-like system.accelerator=A100 "
                "system.nodes=128 train.global_batch_size=512",
                "sciperf project workload=NAME system.accelerator=H100 "
                "system.accelerators_per_node=8 system.nodes=64",
                "sciperf project hpc_results_v2.0 hpc_results_v3.0   # the model's check"))
def cmd_project(args: argparse.Namespace) -> int:
    from sciperf.tools.project import run
    return run(args)


@verb("run", "the main job: prepare (if missing) + train + check",
      options=(("force", "regenerate existing synthetic data first"),),
      examples=("sciperf run workload=NAME framework=pytorch experiment=mini",
                "sciperf run workload=NAME framework=tensorflow experiment=mini "
                "output_dir=OUT"))
def cmd_run(args: argparse.Namespace) -> int:
    from sciperf import allocator
    from sciperf.backends import require_pair
    from sciperf.results.check import check_log
    from sciperf.run import train
    from sciperf.tools.prepare import prepare
    cfg = _cfg(args)
    require_pair(cfg.framework.name, cfg.workload)  # before prepare writes a dataset
    # before prepare's threads allocate: glibc fixes its arena limit then (train sets the
    # same mode again, a no-op)
    allocator.configure(str(cfg.framework.malloc))
    prepare(cfg, force=args.force)
    summary = train(cfg)
    if summary["rank"] != 0:  # only an instance's rank 0 wrote a log
        return _exit_status(summary)
    verdict = check_log(Path(cfg.output_dir) / summary["result_file"], ruleset=cfg.mllog.ruleset)
    _print_summary(summary, cfg.output_dir)
    print(verdict.line())
    return _exit_status(summary) or (0 if verdict.ok or _unconverged_instance(summary) else 1)


@verb("compare", "side-by-side table of runs' summaries (e.g. PyTorch vs TensorFlow)",
      operands="RUN", operand_help="run folders or summary.json files",
      examples=("sciperf compare OUT_pytorch OUT_tensorflow",))
def cmd_compare(args: argparse.Namespace) -> int:
    from sciperf.results.compare import compare_table
    print(compare_table(args.overrides))
    return 0


@verb("launch", "render the job (system/launcher/container); submit it on Slurm or start it here",
      examples=("sciperf launch system=SYSTEM launcher=srun container=apptainer "
                "container.image=IMAGE.sif nodes=4 data.dir=DIR output_dir=OUT",
                "sciperf launch launcher=local launcher.nprocs=2 experiment=mini",
                "sciperf launch … dry_run=true   # print the job script, start nothing"))
def cmd_launch(args: argparse.Namespace) -> int:
    try:
        from sciperf_launchers import launch
    except ImportError as exc:
        raise SciperfError("`sciperf launch` needs the launcher layer: pip install --no-deps "
                           "-e launchers (containers/install.sh does)") from exc
    if args.debug:  # the ranks it starts (or submits) inherit it
        os.environ["SCIPERF_DEBUG"] = "1"
    return launch(_cfg(args), overrides=args.overrides)


@verb("show", "print the composed config (after overrides) as YAML",
      examples=("sciperf show workload=NAME experiment=full",))
def cmd_show(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf
    print(OmegaConf.to_yaml(_cfg(args)), end="")
    return 0


@verb("bench", "measure training and input throughput; writes JSON (see `make bench`)",
      examples=("sciperf bench workload=NAME framework=pytorch,tensorflow",
                "sciperf bench bench.cases=mini,input bench.precision=fp32,bf16"))
def cmd_bench(args: argparse.Namespace) -> int:
    from sciperf.tools.bench import bench
    return bench(args.overrides)


@verb("info", "versions of sciperf, the installed backends and the machine",
      operands="ARGS", operand_help="none: info takes no arguments", examples=("sciperf info",))
def cmd_info(args: argparse.Namespace) -> int:
    from sciperf.info import info
    if args.overrides:  # it takes none: a typo'd verb or a misplaced override, not ignored
        raise SciperfError(f"sciperf info takes no arguments (got: {' '.join(args.overrides)})")
    print(json.dumps(info(), indent=2))
    return 0


def _print_summary(summary: dict, out: str) -> None:
    """A short human table after a run."""
    rows = [
        ("status", summary["status"]),
        ("benchmark / framework", f"{summary['benchmark']} / {summary['framework']}"),
        ("experiment / precision", f"{summary['experiment']} / {summary['precision']}"),
        ("epochs", summary["epochs"]),
        ("time to train", _secs(summary["time_to_train_s"])),
        ("train throughput", _rate(summary["samples_per_s"])),
        (f"final {summary['metric_name']}", _num(summary["final_metric"])
         + f" (target {summary['target']}"
         + (f", {summary['metric_label']})" if summary.get("metric_label") else ")")),
        ("parameters", f"{summary['parameter_count']:,}" if summary["parameter_count"] else "-"),
        ("results", f"{out}/{summary['result_file']}, {out}/" + summary_name(summary)),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")


def _unconverged_instance(summary: dict) -> bool:
    """Throughput mode: an instance that ran all its epochs without reaching the target."""
    return summary["instances"] > 1 and summary["status"] == "aborted"


EX_TEMPFAIL = 75  # stopped on request with a checkpoint: resume it (sysexits' "try again")


def _exit_status(summary: dict) -> int:
    """0 on success; 75 when the run stopped on request (SIGUSR1) with a checkpoint to
    resume — from rank 0, which holds the records; the other ranks end 0 so that srun's
    --kill-on-bad-exit never cuts rank 0's last writes short; 1 when the target was
    missed — except for one of several instances, where a miss is a scored outcome (the
    job's other instances must run on), so 0."""
    if summary["status"] == "success" or _unconverged_instance(summary):
        return 0
    if summary["status"] == "checkpointed":
        return EX_TEMPFAIL if summary["rank"] == 0 else 0
    return 1


def summary_name(summary: dict) -> str:
    from sciperf.run import summary_file
    return summary_file(summary["instance"], summary["instances"])


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s"


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} samples/s"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


class Terminated(BaseException):
    """SIGTERM/SIGHUP arrived (job cancelled, or the launcher is tearing down after a peer
    rank died); raised so the run still writes `run_stop aborted` before exiting."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_signal(signum: int, _frame: object) -> None:
    raise Terminated(signum)


DEFAULT_RULESET = "3.0.0"


def _check_options(args: argparse.Namespace) -> None:
    """An empty `--out` (`--out $DIR`, DIR unset) is refused; the ruleset gets its default."""
    if args.out is not None and not args.out.strip():
        raise SciperfError(f"--out is empty ({args.out!r}): name a folder (an unset shell "
                           "variable?); it would write into the current directory")
    args.ruleset = args.ruleset or DEFAULT_RULESET


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `sciperf` console script."""
    if argv is None:  # the console script: a rank of a job whose ranks share one stderr
        whole_lines()
    args = parse(sys.argv[1:] if argv is None else argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    debug = args.debug or os.environ.get("SCIPERF_DEBUG") == "1"
    try:
        _check_options(args)
        return VERBS[args.verb].run(args)
    except BrokenPipeError:  # `sciperf score … | head`: the reader left, as for SIGPIPE
        silence_stdout()
        return 128 + signal.SIGPIPE
    except SciperfError as exc:
        if debug:
            raise
        print(f"sciperf {args.verb}: error: {exc}{_which_rank()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        records = getattr(exc, "sciperf_records", None)  # a run names what it left
        print(f"sciperf {args.verb}: interrupted" + (f" ({records})" if records else ""),
              file=sys.stderr)
        return 130
    except Terminated as exc:
        # a run names what it left; other verbs (a prepare half-way) say nothing they
        # cannot know ("nothing written" after 706 files)
        records = getattr(exc, "sciperf_records", None)
        if not getattr(exc, "sciperf_quiet", False):  # a rank that writes no records
            print(f"sciperf {args.verb}: terminated by {exc}"
                  + (f" ({records})" if records else ""), file=sys.stderr)
        return 128 + exc.signum  # as the shell reports a process the signal ended
    finally:
        if argv is None:  # the console script: only the interpreter's exit is left; a
            # SIGTERM now (a launcher stopping every rank after one failed) has nothing left
            # to stop, and Terminated raised inside atexit would print a traceback
            ignore_terminations()


def _which_rank() -> str:
    """" (rank R of N)" in a job of several ranks: mpirun and srun report the first rank to
    exit, often not the one whose error this is (a file only rank 1 reads)."""
    from sciperf.distributed import discover
    try:
        info = discover()
    except (SciperfError, ValueError, KeyError):  # no job around this process: say nothing
        return ""
    return f" (rank {info.rank} of {info.world})" if info.world > 1 else ""


if __name__ == "__main__":
    sys.exit(main())
