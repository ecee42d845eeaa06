"""Overrides the schema's types let through but no run can use: one line naming the key.

docs/architecture.md, rule 10. Hydra's `~key` deletes a key every run needs (it used to
end in a ConfigKeyError traceback inside `validate`) and `+key` adds a key no code reads
(a typo silently ignored); a zero or negative `distributed.timeout_s` crashed deep in
torch.distributed; an empty `output_dir=` / `data.dir=` (an unset shell variable) wrote
into the current directory; a negative or NaN roofline peak printed a negative "% of
peak" and wrote bare NaN (invalid JSON) into characterize.json. All in-process through
`compose()`, except one case through the real console script.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sciperf.config import compose
from sciperf.errors import SciperfError

BASE = ["workload=cosmoflow", "experiment=mini"]


def _refused(*overrides: str) -> str:
    """The one-line message `compose` refuses `overrides` with."""
    with pytest.raises(SciperfError) as info:
        compose([*BASE, *overrides])
    message = str(info.value)
    assert "\n" not in message, message
    return message


# --- ~key: deleting what every run needs ------------------------------------------------

@pytest.mark.parametrize("key", [
    "train", "model", "opt", "data", "seed", "output_dir", "time_limit", "train.max_epochs",
    "train.global_batch_size", "data.dir", "model.dropout", "opt.base_lr",
])
def test_deleting_a_required_key_is_one_line(key: str) -> None:
    message = _refused(f"~{key}")
    assert message.startswith(f"cannot delete {key}:"), message
    assert "required" in message


def test_deleting_a_launcher_group_still_composes() -> None:
    """`~launcher` drops the group: the launcher layer falls back to the local launcher."""
    assert dict(compose([*BASE, "~launcher"]).launcher) == {}


# --- +key: adding what the schema does not know -----------------------------------------

@pytest.mark.parametrize(("override", "key"), [
    ("+foo=1", "foo"),
    ("++foo=1", "foo"),
    ("+trian.max_epochs=1", "trian"),
    ("+framework.threadz=4", "framework.threadz"),
    ("+distributed.timeout=4", "distributed.timeout"),
    ("+system.peak_flop=1e15", "system.peak_flop"),
    ("+mllog.rules=3.0.0", "mllog.rules"),
    ("+framework.threadz.x=4", "framework.threadz"),
    ("+launcher.nproc=2", "launcher.nproc"),
    ("+container.imag=x.sif", "container.imag"),
])
def test_adding_an_unknown_key_is_one_line(override: str, key: str) -> None:
    message = _refused(override)
    assert message.startswith(f"unknown key {key} "), message
    assert "valid keys:" in message


def test_unknown_launcher_key_is_checked_against_the_chosen_launcher() -> None:
    message = _refused("launcher=srun", "+launcher.requeu=true")
    assert "launcher.requeu " in message and "requeue" in message, message


@pytest.mark.parametrize("overrides", [
    ["++seed=3"],  # ++ on a known key only sets it
    ["++framework.threads=2"],
    ["+workload_experiment=cosmoflow_mini"],  # a config group, not a key
])
def test_additions_the_schema_knows_still_compose(overrides: list[str]) -> None:
    compose([*BASE, *overrides])


# --- values ---------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-1", "-45", "31536001", "100000000000000"])
def test_distributed_timeout_must_be_positive_and_at_most_a_year(value: str) -> None:
    """10**14 s passed composition and crashed every rank's process-group setup in
    datetime.timedelta (OverflowError) with a traceback."""
    message = _refused(f"distributed.timeout_s={value}")
    assert f"distributed.timeout_s={value}" in message and "> 0 and <= 31536000" in message, \
        message


@pytest.mark.parametrize("value", [1, 31536000])
def test_distributed_timeout_from_one_second_to_a_year_composes(value: int) -> None:
    assert compose([*BASE, f"distributed.timeout_s={value}"]).distributed.timeout_s == value


@pytest.mark.parametrize(("key", "value"), [
    ("data.workers", -2), ("data.workers", 0), ("data.prefetch", 0), ("data.prefetch", -1),
    ("data.prepare_workers", 0), ("data.stage_workers", 0), ("train.log_every", -1),
    ("nodes", 0), ("system.nodes", 0), ("system.accelerators_per_node", -1),
    ("system.cpus_per_node", -4),
])
def test_counts_below_their_least_value_are_refused(key: str, value: int) -> None:
    """Not clamped in silence by the loader (max(workers, 1)) or rendered into an srun
    line (system.nodes=0)."""
    message = _refused(f"{key}={value}")
    assert message.startswith(f"{key}={value} must be at least "), message


@pytest.mark.parametrize(("key", "value"), [
    ("data.workers", 100000000), ("data.prefetch", 10**20), ("data.prepare_workers", 1025),
    ("data.stage_workers", 2000), ("framework.threads", 10**20),
    ("framework.inter_op_threads", 99999), ("nodes", 10**9),
    ("system.accelerators_per_node", 1025),
])
def test_counts_above_their_largest_value_are_refused(key: str, value: int) -> None:
    """Met at compose time, not after the records exist: `data.workers=10**8` had
    TensorFlow's map fill the machine's memory, 10**20 threads overflowed a C long."""
    message = _refused(f"{key}={value}")
    assert message.startswith(f"{key}={value} must be at most "), message


@pytest.mark.parametrize("end", [0, 1])
def test_counts_at_their_least_and_largest_values_compose(end: int) -> None:
    from sciperf.config import COUNTS
    cfg = compose([*BASE, *(f"{key}={bounds[end]}" for key, bounds in COUNTS.items())])
    assert all(OmegaConf.select(cfg, key) == bounds[end] for key, bounds in COUNTS.items())


@pytest.mark.parametrize("key", ["output_dir", "data.dir"])
@pytest.mark.parametrize("value", ["", "' '", "'\t'"])
def test_empty_directories_are_refused(key: str, value: str) -> None:
    message = _refused(f"{key}={value}")
    assert message.startswith(f"{key} is empty"), message


@pytest.mark.parametrize("key", ["system.peak_flops", "system.peak_io_bw"])
@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf", "-inf"])
def test_roofline_peaks_must_be_finite_and_positive(key: str, value: str) -> None:
    message = _refused(f"{key}={value}")
    assert message.startswith(f"{key}=") and "finite number > 0" in message, message


def test_roofline_peaks_compose_when_positive_or_null() -> None:
    cfg = compose([*BASE, "system.peak_flops=1.5e15", "system.peak_io_bw=null"])
    assert cfg.system.peak_flops == 1.5e15 and cfg.system.peak_io_bw is None


def test_characterize_refuses_a_bad_peak_recorded_in_a_run() -> None:
    """A run's summary carries its own config: a peak recorded before the check existed."""
    from sciperf.tools.characterize import measured
    cfg = OmegaConf.create({"system": {"peak_flops": float("nan"), "peak_io_bw": 1e9}})
    result = {"flops_per_sample": {"train": 1e9}, "bytes_per_sample": 1e6}
    with pytest.raises(SciperfError, match=r"^system\.peak_flops=nan must be a finite"):
        measured(result, {"samples_per_s": 10.0, "nodes_used": 1}, cfg)


# --- the console script -----------------------------------------------------------------

def test_cli_deletion_is_one_line_exit_2(sciperf_cmd: list[str], tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SCIPERF_DEBUG"}
    proc = subprocess.run([*sciperf_cmd, "show", "workload=cosmoflow", "~train"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False, env=env)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr + proc.stdout and proc.stdout == ""
    assert proc.stderr.splitlines() == [proc.stderr.strip()], proc.stderr
    assert proc.stderr.startswith("sciperf show: error: cannot delete train:")


@pytest.mark.parametrize(("override", "words"), [
    ("output_dir=/tmp/run (copy)", ["cannot parse the override 'output_dir=/tmp/run (copy)'",
                                    "quote a value"]),
    ("output_dir=/tmp/a=b", ["cannot parse the override 'output_dir=/tmp/a=b'"]),
    ("nokeyhere", ["cannot parse the override 'nokeyhere'", "key=value"]),
    ("output_dir=/tmp/a,b", ["'output_dir=/tmp/a,b' is a sweep", "key='a,b'"]),
    ("seed=range(1,3)", ["'seed=range(1,3)' is a sweep"]),
])
def test_syntax_errors_name_their_override(override: str, words: list[str]) -> None:
    """Hydra's "mismatched input ' (' expecting <EOF>" named no override (twice over), and
    a sweep's "requires --multirun" named a flag sciperf does not have."""
    message = _refused("seed=3", override)
    assert all(w in message for w in words), message
    assert "--multirun" not in message and message.count("mismatched") <= 1, message


def test_quoted_values_with_commas_and_spaces_compose() -> None:
    cfg = compose([*BASE, "output_dir='/tmp/a,b (copy)'"])
    assert cfg.output_dir == "/tmp/a,b (copy)"


@pytest.mark.parametrize("override", ["train.overwrite=2", "data.shuffle=-1",
                                      "framework.compile=1", "train.save_weights=yes",
                                      "data.pinned_batches=on", "dry_run=1"])
def test_booleans_are_true_or_false(override: str) -> None:
    """OmegaConf read `train.overwrite=2` as true in silence."""
    assert _refused(override) == f"{override} must be true or false"


def test_booleans_compose_from_true_and_false() -> None:
    cfg = compose([*BASE, "train.overwrite=true", "data.shuffle=False", "container=apptainer",
                   "container.gpus=auto"])
    assert cfg.train.overwrite is True and cfg.data.shuffle is False


@pytest.mark.parametrize("key", ["data.stage_dir", "system.stage_dir", "system.scratch_dir"])
def test_an_empty_optional_directory_is_refused(key: str) -> None:
    """`data.stage_dir=$LOCAL` with LOCAL unset turned staging off in silence; null says
    "none" on purpose."""
    assert _refused(f"{key}=").startswith(f"{key} is empty ({key}=''): ")
    assert OmegaConf.select(compose([*BASE, f"{key}=null"]), key) is None


# --- train.target: a value the metric can take ---------------------------------------------

@pytest.mark.parametrize(("workload", "target", "message"), [
    # a percent for DeepCAM's fraction: every epoch of a job ran, and it failed at the end
    ("deepcam", "82", r"^train.target=82: deepcam's validation IoU lies in \[0, 1\], so "
                      r"no run could reach it$"),
    ("openfold", "1.5", r"openfold's validation mean lDDT-Cα lies in \[0, 1\], so no run "
                        r"could reach it$"),
    ("cosmoflow", "-0.1", r"^train.target=-0.1: cosmoflow's validation MAE lies in "
                          r"\[0, inf\], so no run could reach it$"),
    ("oc20", "-1", r"oc20's validation force MAE lies in \[0, inf\], so no run could reach"),
    ("deepcam", "-0.5", r"lies in \[0, 1\], so no run could miss it$"),
])
def test_a_target_outside_the_metric_is_one_line(workload: str, target: str,
                                                 message: str) -> None:
    with pytest.raises(SciperfError, match=message):
        compose([f"workload={workload}", f"train.target={target}"])


@pytest.mark.parametrize(("workload", "target"), [
    ("deepcam", 1.0), ("deepcam", 0.0), ("openfold", 0.02), ("cosmoflow", 0.0),
    ("cosmoflow", 10.0),  # met at the first evaluation: tests use it
])
def test_a_target_the_metric_can_take_composes(workload: str, target: float) -> None:
    assert compose([f"workload={workload}", f"train.target={target}"]).train.target == target
