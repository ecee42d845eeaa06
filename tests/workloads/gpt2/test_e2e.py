"""GPT-2 end to end: the mini reaches its target — the synthetic stream's recorded entropy
rate plus ``train.target_above_floor`` — through the real CLI in both frameworks (one run
each, made once per session) and its log passes the official checker extended to a
workload of sciperf's own (division open); a bad token file is one line from the reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from runzoo import RunZoo, prepared
from sciperf.results.check import check_log
from sciperf.workloads import get
from sciperf.workloads.gpt2 import data, spec, synthetic
from sciperf.workloads.gpt2 import tokens as tok
from testkit import cli, mllog, one_error_line, refused, summary

MINI = ("workload=gpt2", "experiment=mini")


@pytest.fixture(scope="module")
def mini_data(shared_tmp) -> Path:
    return prepared(shared_tmp, *MINI)


@pytest.fixture(scope="module")
def zoo(shared_tmp, mini_data) -> RunZoo:
    return RunZoo(shared_tmp, mini_data)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_mini_reaches_the_floor_target_and_passes_the_checker(zoo: RunZoo, mini_data: Path,
                                                              framework: str) -> None:
    pytest.importorskip("torch" if framework == "pytorch" else "tensorflow")
    run = zoo.run("train", *MINI, f"framework={framework}", "precision=fp32")
    assert run.returncode == 0, run.stderr[-2000:]
    done = summary(run.out)
    floor = synthetic.recorded_entropy(mini_data)
    margin = done["config"]["train"]["target_above_floor"]
    assert floor is not None and 1.0 < floor < 1.2 and margin > 0
    assert done["target"] == pytest.approx(floor + margin)  # the data's, not train.target
    assert done["status"] == "success" and done["final_metric"] <= done["target"]
    assert done["division"] == "open" and done["epochs"] < done["config"]["train"]["max_epochs"]
    events = mllog(run.out / "result_0.txt")
    values = {e["key"]: e["value"] for e in events}
    assert values["submission_benchmark"] == "gpt2" and values["opt_name"] == "adamw"
    # 2^20 training tokens in windows of 128; 64 windows on the 1,024-token grid
    assert values["train_samples"] == (2**20 - 1) // 128 and values["eval_samples"] == 64
    assert values["global_batch_size"] == 16 and values["gradient_accumulation_steps"] == 1
    errors = [e["value"] for e in events if e["key"] == "eval_error"]
    assert errors[0] > floor + 0.5  # it learnt: the first cycle is far from the floor
    assert errors[-1] <= done["target"] < min(errors[:-1])
    verdict = check_log(run.out / "result_0.txt")
    assert verdict.ok, verdict.problems
    assert (verdict.division, verdict.benchmark) == ("open", "gpt2")


def test_full_config_is_the_recipe() -> None:
    """The contract's reference counts and the full recipe's accumulation."""
    workload = get("gpt2")
    assert workload.train_samples == (spec.TRAIN_TOKENS - 1) // 1024
    assert workload.eval_samples == (spec.EVAL_TOKENS - 1) // 1024 == 4330
    from sciperf.config import compose
    cfg = compose(["workload=gpt2", "experiment=full"])
    assert spec.accumulation(cfg) == 40 and cfg.system.submission_division == "open"


def test_the_target_needs_a_recorded_floor(tmp_path: Path) -> None:
    from sciperf.config import compose
    cfg = compose([*MINI, f"data.dir={tmp_path}"])
    with pytest.raises(ValueError, match="records no entropy rate"):
        data.run_target(cfg)


def _set(root: Path, train: np.ndarray, val: np.ndarray | bytes) -> Path:
    tok.write_tokens(root / "train.bin", train, 2**16)
    if isinstance(val, bytes):
        (root / "val.bin").write_bytes(val)
    else:
        tok.write_tokens(root / "val.bin", val, 2**16)
    return root


def test_bad_token_files_are_one_line_from_the_reader(tmp_path: Path) -> None:
    model = spec.ModelSpec(n_layer=1, n_head=1, d_model=8, context=16, vocab_size=64)
    good = np.arange(200) % 64
    odd = _set(tmp_path / "odd", good, good.astype("<u2").tobytes() + b"\0")
    assert "not a whole number of uint16 tokens" in refused(data.model_reader, odd, "bin",
                                                            model)
    big = _set(tmp_path / "big", np.where(np.arange(200) == 77, 64, good), good)
    assert "token id 64 at position 77 is beyond the vocabulary of 64" in refused(
        data.model_reader, big, "bin", model)
    short = _set(tmp_path / "short", good, good[:16])
    assert "16 tokens, fewer than one window of 16 + 1" in refused(data.model_reader, short,
                                                                    "bin", model)
    ok = _set(tmp_path / "ok", good, np.arange(2 * 1024 + 1) % 64)
    reader = data.model_reader(ok, "bin", model)
    evals = data.list_samples(ok, "validation", "bin")
    assert [p.name for p in evals] == ["0", "1024"]
    x, y = reader(evals[1])
    assert x.shape == y.shape == (16,) and (y[:-1] == x[1:]).all()


def test_more_training_windows_than_the_file_holds_is_refused_before_any_record(
        mini_data: Path, tmp_path: Path) -> None:
    """data.train_samples counts windows of the context: more than train.bin holds is one
    line before output_dir exists, not a run on a smaller set than asked."""
    out = tmp_path / "out"
    line = one_error_line(cli("train", *MINI, f"data.dir={mini_data}", f"output_dir={out}",
                              "data.train_samples=8192"), "train")
    assert line.endswith("holds 8191 training windows of 128 tokens but 8192 were requested "
                         "(data.train_samples)")
    assert not out.exists()
    from sciperf.config import compose
    cfg = compose([*MINI, f"data.dir={mini_data}", "data.train_samples=8191"])
    assert data.train_windows(cfg) == 8191

