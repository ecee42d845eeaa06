"""Bad values through the CLI: one line, exit 2, nothing written.

docs/architecture.md, rule 10: a value a workload cannot train with (a negative LR, a
dropout of 2, a seed numpy refuses, a port beyond 65535…) must end at composition, in one
line naming the key and what it accepts — not as a traceback after `run_start`, with a
half-written result log left behind. Every case runs `sciperf …` through its main in
this process (testkit.cli) on a real dataset (so a run would otherwise start) and checks
that the output directory (or, for `prepare`, the data directory) was never created.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from sciperf.config import compose
from sciperf.workloads.cosmoflow import spec as cosmoflow
from testkit import cli, one_error_line, sciperf

SEED_RANGE = "0..4294967295"

# (workload, override, key the line must name, what it must say is allowed)
TRAIN_CASES = [
    ("cosmoflow", "seed=-1", "seed", SEED_RANGE),
    ("cosmoflow", "seed=18446744073709551616", "seed", SEED_RANGE),
    ("cosmoflow", "opt.base_lr=-1", "opt.base_lr", "> 0"),
    ("cosmoflow", "opt.scaling=foo", "opt.scaling", "linear, sqrt, none"),
    ("cosmoflow", "opt.name=adam", "opt.name", "sgd"),
    ("cosmoflow", "opt.momentum=1", "opt.momentum", "[0, 1)"),
    ("cosmoflow", "opt.decay_factors=[0.25]", "opt.decay_factors", "same length"),
    ("cosmoflow", "model.input_size=33", "model.input_size", "divisible by 2**4"),
    ("cosmoflow", "model.dropout=2", "model.dropout", "[0, 1)"),
    ("cosmoflow", "model.dropout=abc", "model.dropout", "float"),
    ("cosmoflow", "model.kernel_size=0", "model.kernel_size", ">= 1"),
    ("cosmoflow", "model.conv_filters=[]", "model.conv_filters", ">= 1"),
    ("cosmoflow", "model.output_size=3", "model.output_size", "must be 4"),
    ("cosmoflow", "data.train_samples=-1", "data.train_samples", ">= 0"),
    ("cosmoflow", "data.eval_samples=-1", "data.eval_samples", ">= 0"),
    ("cosmoflow", "launcher.master_port=99999", "launcher.master_port", "1..65535"),
    ("cosmoflow", "framework.malloc=jemalloc", "framework.malloc", "reuse, system"),
    ("deepcam", "opt.lr=-1", "opt.lr", "> 0"),
    ("deepcam", "opt.betas=[2,3]", "opt.betas", "[0, 1)"),
    ("deepcam", "opt.name=SGD", "opt.name", "Adam, AdamW, LAMB"),
    ("deepcam", "opt.lr_warmup_factor=0.5", "opt.lr_warmup_factor", ">= 1"),
    ("deepcam", "opt.t_max=0", "opt.t_max", ">= 1"),
    ("deepcam", "opt.decay_rate=2", "opt.decay_rate", "(0, 1]"),
    ("deepcam", "model.middle_blocks=-1", "model.middle_blocks", ">= 0"),
    ("deepcam", "model.aspp_channels=0", "model.aspp_channels", ">= 1"),
    ("deepcam", "model.aspp_rates=[6,12]", "model.aspp_rates", "3 values"),
    ("deepcam", "model.num_classes=4", "model.num_classes", "must be 3"),
]

# `sciperf prepare` writes into data.dir: it must not even be created
PREPARE_CASES = [
    ("cosmoflow", "seed=-1", "seed", SEED_RANGE),
    ("cosmoflow", "data.train_samples=-1", "data.train_samples", ">= 0"),
    ("oc20", "opt.warmup_factor=2", "opt.warmup_factor", "[0, 1]"),
    ("oc20", "opt.decay_factor=0", "opt.decay_factor", "(0, 1]"),
    ("oc20", "model.cutoff=-1", "model.cutoff", "> 0"),
    ("oc20", "opt.lr=0", "opt.lr", "finite number > 0"),  # trained nothing, exit 1
    ("openfold", "opt.lr=0", "opt.lr", "finite number > 0"),
    ("openfold", "data.sequences=coil", "data.sequences", "mixed, one_class"),
]


def _run(_cmd: list[str], args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`sciperf ARGS` through its main in this process (a refusal needs no interpreter of
    its own; testkit.cli)."""
    return cli(*args, cwd=cwd)


def _one_error_line(proc: subprocess.CompletedProcess, verb: str) -> str:
    """Rule 10's shape: exit status 2, no traceback, exactly one line on stderr."""
    return one_error_line(proc, verb)


def _prepare(cmd: list[str], root: Path, workload: str, n: int) -> Path:
    """A real mini dataset of `n`+`n` samples, made by the real command."""
    subprocess.run([*cmd, "prepare", f"workload={workload}", "experiment=mini",
                    f"data.dir={root}", f"data.train_samples={n}", f"data.eval_samples={n}"],
                   check=True, capture_output=True, timeout=300)
    return root


@pytest.fixture(scope="module")
def datasets(tmp_path_factory, sciperf_cmd, tiny_mini_data: Path) -> dict[str, Path]:
    """A dataset per workload of TRAIN_CASES, so that a good config would start a run."""
    deepcam = _prepare(sciperf_cmd, tmp_path_factory.mktemp("deepcam-mini"), "deepcam", 8)
    return {"cosmoflow": tiny_mini_data, "deepcam": deepcam}


@pytest.mark.parametrize(("workload", "override", "key", "allowed"), TRAIN_CASES,
                         ids=[f"{w}:{o}" for w, o, _, _ in TRAIN_CASES])
def test_train_refuses_before_writing(sciperf_cmd, datasets, tmp_path: Path, workload: str,
                                      override: str, key: str, allowed: str) -> None:
    out = tmp_path / "out"
    proc = _run(sciperf_cmd, ["train", f"workload={workload}", "experiment=mini",
                              f"data.dir={datasets[workload]}", f"output_dir={out}",
                              "train.max_epochs=1", override], tmp_path)
    line = _one_error_line(proc, "train")
    assert key in line and allowed in line, line
    assert not out.exists(), sorted(out.iterdir())


@pytest.mark.parametrize(("workload", "override", "key", "allowed"), PREPARE_CASES,
                         ids=[f"{w}:{o}" for w, o, _, _ in PREPARE_CASES])
def test_prepare_refuses_before_writing(sciperf_cmd, tmp_path: Path, workload: str,
                                        override: str, key: str, allowed: str) -> None:
    root = tmp_path / "data"
    proc = _run(sciperf_cmd, ["prepare", f"workload={workload}", "experiment=mini",
                              f"data.dir={root}", override], tmp_path)
    line = _one_error_line(proc, "prepare")
    assert key in line and allowed in line, line
    assert not root.exists()


def test_launch_refuses_a_port_beyond_65535(sciperf_cmd, tiny_mini_data: Path,
                                            tmp_path: Path) -> None:
    """The local launcher bound the port only when starting ranks: an OverflowError."""
    out = tmp_path / "out"
    proc = _run(sciperf_cmd, ["launch", f"data.dir={tiny_mini_data}", f"output_dir={out}",
                              "launcher.master_port=99999"], tmp_path)
    line = _one_error_line(proc, "launch")
    assert "launcher.master_port=99999" in line and "1..65535" in line
    assert not out.exists()


# --- CosmoFlow's opt_name: the MLLOG reports the optimizer that trains ------------------
def _logged(path: Path, key: str) -> object:
    """The value of the first MLLOG record `key` in a result file."""
    for line in path.read_text().splitlines():
        if line.startswith(":::MLLOG"):
            record = json.loads(line[len(":::MLLOG"):])
            if record["key"] == key:
                return record["value"]
    raise AssertionError(f"{key} not logged in {path}")


def _built_optimizer(framework: str) -> object:
    """The optimizer the framework's CosmoFlow backend builds from the default config."""
    cfg = compose(["experiment=mini", f"framework={framework}"])
    if framework == "pytorch":
        torch = pytest.importorskip("torch")
        from sciperf_pytorch.workloads.cosmoflow.backend import CosmoFlowBackend
        params: list = [torch.nn.Parameter(torch.zeros(2))]
    else:
        tf = pytest.importorskip("tensorflow")
        from sciperf_tensorflow.workloads.cosmoflow.backend import CosmoFlowBackend
        params = [tf.Variable(tf.zeros(2))]
    backend = CosmoFlowBackend()
    backend.cfg = cfg
    return backend.build_optimizer(params)


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_cosmoflow_backends_train_the_logged_optimizer(framework: str) -> None:
    """Both backends build Keras-semantics SGD, whose MLLOG name is `sgd`; any other
    `opt.name` is refused (the table above), so the log cannot claim another one."""
    optimizer = _built_optimizer(framework)
    assert type(optimizer).__name__ == "KerasSGD"
    cfg = compose(["experiment=mini"])
    assert cosmoflow.mllog_hyperparameters(cfg, 1, 1)["opt_name"] == cosmoflow.OPTIMIZER == "sgd"


def test_cosmoflow_run_logs_opt_name_sgd(sciperf_cmd, tiny_mini_data: Path,
                                         tmp_path: Path) -> None:
    """One real epoch on 16 samples: the official log names the optimizer that ran."""
    out = tmp_path / "out"
    proc = sciperf("train", "experiment=mini", f"data.dir={tiny_mini_data}",
                   f"output_dir={out}", "data.train_samples=16", "data.eval_samples=16",
                   "train.global_batch_size=16", "train.max_epochs=1", "precision=fp32",
                   cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # 1: target not met in 1 epoch
    assert _logged(out / "result_0.txt", "opt_name") == "sgd"


# --- DeepCAM: a bad label file is named, with the bad value ------------------------------
def test_bad_label_file_is_named_with_its_value(sciperf_cmd, tmp_path: Path) -> None:
    """`prepare data.source=existing` reads the first sample of each split: a label 7 in
    its .label.npy must be reported there, not as the .data.npy and its dtype."""
    root = _prepare(sciperf_cmd, tmp_path / "dc", "deepcam", 2)
    data = sorted((root / "train").glob("*.data.npy"))[0]
    label = data.with_name(data.name.replace(".data.npy", ".label.npy"))
    y = np.load(label)
    y[3, 5] = 7
    np.save(label, y)
    proc = _run(sciperf_cmd, ["prepare", "workload=deepcam", "experiment=mini",
                              "data.source=existing", f"data.dir={root}",
                              "data.train_samples=2", "data.eval_samples=2"], tmp_path)
    line = _one_error_line(proc, "prepare")
    assert str(label) in line and "label value 7" in line and "0..2" in line, line
    assert str(data) not in line
