"""The contract is enough to add a workload: tinyreg (tests/plugins/sciperf_tinyreg), a
few-parameter regression registered as a plugin with no edit to sciperf, goes from
prepare to its target to a log the official checker's rules pass, in both frameworks; and
the generic pieces honour what it declares (its data plan, a file key's role, its step
pieces, its starting state), in both templates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sciperf import backends, workloads
from sciperf.backends import RunContext, load_backend
from sciperf.config import compose, keys_with
from sciperf.errors import SciperfError

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
NAME = "tinyreg"
FRAMEWORKS = ("pytorch", "tensorflow")
BIN = Path(sys.executable).parent


def plugin_env() -> dict[str, str]:
    """A process that knows tinyreg: its folder on PYTHONPATH, named in SCIPERF_PLUGINS."""
    path = os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, workloads.PLUGINS_ENV: "sciperf_tinyreg"}


def sciperf(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "sciperf"), *args], env=plugin_env(), capture_output=True,
                          text=True, check=False, timeout=600)


@pytest.fixture
def tinyreg(monkeypatch: pytest.MonkeyPatch) -> object:
    """tinyreg registered in this process for one test (the registries as they were after)."""
    monkeypatch.setitem(workloads.REGISTRY, NAME, "sciperf_tinyreg.workload")
    for fw in FRAMEWORKS:
        monkeypatch.setitem(backends.PLUGIN_BACKENDS, fw,
                            {**backends.PLUGIN_BACKENDS.get(fw, {}),
                             NAME: f"sciperf_tinyreg.{fw}.backend:TinyRegBackend"})
    monkeypatch.syspath_prepend(str(PLUGINS))
    import sciperf_tinyreg  # noqa: F401 (registers the same entries again: idempotent)
    return workloads.get(NAME)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tinyreg's data, made by `sciperf prepare` in a process that loads the plugin."""
    folder = tmp_path_factory.mktemp("tinyreg") / "data"
    proc = sciperf("prepare", f"workload={NAME}", f"data.dir={folder}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list((folder / "train").glob("sample_*.npy"))) == 256
    return folder


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_plugin_workload_trains_to_target_and_its_log_passes_the_rules(
        framework: str, data: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch" if framework == "pytorch" else "tensorflow")
    out = tmp_path / "out"
    proc = sciperf("train", f"workload={NAME}", f"framework={framework}", f"data.dir={data}",
                   f"output_dir={out}", "precision=fp32", "train.save_weights=true",
                   "system.submission_division=open")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "success" and summary["target_reached"]
    assert summary["final_metric"] <= 0.05 and summary["parameter_count"] == 9
    weights = np.load(out / "weights_rank0.npz")
    assert sorted(weights.files) == ["dense/bias", "dense/kernel"]
    assert weights["dense/kernel"].shape == (8, 1)
    check = sciperf("check", str(out))
    assert check.returncode == 0 and check.stdout.startswith("PASS "), check.stdout + check.stderr
    assert f"open {NAME}" in check.stdout
    if framework == "pytorch":  # the extended rules are the checker's: they do fail a log
        _check_refuses_a_tampered_log(out / "result_0.txt", tmp_path)


def _check_refuses_a_tampered_log(log: Path, tmp_path: Path) -> None:
    """A log whose every evaluation misses the target, and one claiming the closed
    division, fail the checker's rules (the quality rule; the division)."""
    lines = log.read_text().splitlines()
    missed, closed = tmp_path / "missed.txt", tmp_path / "closed.txt"
    missed.write_text("".join(_with(line, "eval_error", 0.9) + "\n" for line in lines))
    closed.write_text("".join(_with(line, "submission_division", "closed") + "\n"
                              for line in lines))
    verdict = sciperf("check", str(missed))
    assert verdict.returncode != 0 and verdict.stdout.startswith(f"FAIL {missed}:")
    assert "eval_error" in verdict.stdout, verdict.stdout
    verdict = sciperf("check", str(closed))
    assert verdict.returncode != 0 and "its runs are open division" in verdict.stdout


def _with(line: str, key: str, value: object) -> str:
    """An MLLOG line with `key`'s value replaced."""
    if not line.startswith(":::MLLOG ") or f'"key": "{key}"' not in line:
        return line
    record = json.loads(line[len(":::MLLOG "):])
    record["value"] = value
    return ":::MLLOG " + json.dumps(record)


def test_an_unregistered_plugin_is_one_line(tmp_path: Path) -> None:
    env = {**plugin_env(), workloads.PLUGINS_ENV: "no_such_plugin"}
    proc = subprocess.run([str(BIN / "sciperf"), "prepare", f"workload={NAME}"], env=env,
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "SCIPERF_PLUGINS: cannot import no_such_plugin (No module named 'no_such_plugin'); "
        "is its folder on PYTHONPATH?"), proc.stderr


def _backend(framework: str, data: Path, overrides: tuple[str, ...] = ()) -> object:
    workload = workloads.get(NAME)
    cfg = compose([f"workload={NAME}", f"framework={framework}", f"data.dir={data}",
                   "precision=fp32", "data.train_samples=64", "data.eval_samples=32",
                   *overrides])
    files = [workload.dataset.list_samples(data, split, "npy", n)
             for split, n in (("train", 64), ("validation", 32))]
    backend = load_backend(framework, NAME)
    backend.setup(RunContext(cfg, workload, *files, 16))
    return backend


def _weights(backend: object) -> dict[str, np.ndarray]:
    return backend.export_weights()  # type: ignore[attr-defined]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_both_templates_run_the_step_pieces_and_checkpoint_them(
        framework: str, tinyreg: object, data: Path, tmp_path: Path) -> None:
    """Clipping and the EMA act at every optimizer step, validation reads the EMA, and a
    checkpoint taken after an epoch resumes to the same weights and EMA as a run that went
    on (the pieces' state saved and restored by the template)."""
    pytest.importorskip("torch" if framework == "pytorch" else "tensorflow")
    first = _backend(framework, data)
    pieces = [type(p).__name__ for p in first.pieces]  # type: ignore[attr-defined]
    assert pieces == ["ClipGradNorm", "WeightEMA"]
    calls = []
    first.pieces.append(_counter(framework, calls))  # type: ignore[attr-defined]
    first.train_epoch(0, 0.1)
    assert len(calls) == 64 // 16  # after every optimizer step
    first.pieces.pop()  # type: ignore[attr-defined]
    first.save_state(tmp_path)
    first.train_epoch(1, 0.1)
    resumed = _backend(framework, data)
    resumed.load_state(tmp_path)
    resumed.train_epoch(1, 0.1)
    for name, value in _weights(first).items():
        np.testing.assert_array_equal(_weights(resumed)[name], value)
    assert first.evaluate() == resumed.evaluate()
    ema = first.ema.model  # type: ignore[attr-defined]
    assert _ema_kernel(framework, ema) != pytest.approx(
        _weights(first)["dense/kernel"].ravel().tolist())  # validation's model is the EMA


def _counter(framework: str, calls: list) -> object:
    module = __import__(f"sciperf_{framework}.pieces", fromlist=["StepCallback"])
    return module.StepCallback(lambda: calls.append(1))


def _ema_kernel(framework: str, model: object) -> list[float]:
    if framework == "pytorch":
        return model.dense.weight.detach().numpy().ravel().tolist()  # type: ignore[attr-defined]
    return model.dense.kernel.numpy().ravel().tolist()  # type: ignore[attr-defined]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_both_templates_load_the_workloads_starting_state(
        framework: str, tinyreg: object, data: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch" if framework == "pytorch" else "tensorflow")
    start = tmp_path / "start.npy"
    row = np.arange(9, dtype=np.float32) / 10
    np.save(start, row)
    backend = _backend(framework, data, (f"train.start_from={start}",))
    got = _weights(backend)
    np.testing.assert_array_equal(got["dense/kernel"].ravel(), row[:-1])
    np.testing.assert_array_equal(got["dense/bias"], row[-1:])


def test_generic_code_honours_the_workloads_own_key_roles(tinyreg: object,
                                                          tmp_path: Path) -> None:
    """train.start_from is tinyreg's own key, declared a file the run reads: the driver
    refuses a missing one before writing anything, and launch binds it read-only."""
    from sciperf.run.files import check_init_files
    from sciperf_launchers.compose import plan

    assert keys_with("reads", tinyreg) == ["train.init_weights", "train.start_from"]
    missing = tmp_path / "absent.npy"
    cfg = compose([f"workload={NAME}", f"train.start_from={missing}"])
    with pytest.raises(SciperfError, match=f"^train.start_from={missing}: no such file$"):
        check_init_files(cfg, tinyreg)
    overrides = [f"workload={NAME}", "container=apptainer", "container.image=x.sif",
                 f"train.start_from={missing}", f"output_dir={tmp_path / 'o'}",
                 f"data.dir={tmp_path}"]
    words = plan(compose(overrides), overrides=overrides).groups
    assert f"{missing}:{missing}:ro" in words[1][words[1].index("--bind") + 1].split(",")


@pytest.mark.parametrize("first", ["sciperf.backends", "sciperf.workloads", "sciperf.config",
                                   "sciperf.run"])
def test_the_plugin_loads_whichever_module_is_imported_first(first: str) -> None:
    """A plugin imports sciperf.backends and sciperf.workloads to register itself; with
    sciperf.backends imported first (what `sciperf train` does), loading the plugins from
    the half-imported module failed as a circular import."""
    code = (f"import {first}, sciperf.workloads as w, sciperf.backends as b; "
            f"print(w.get('{NAME}').name, sorted(b.PLUGIN_BACKENDS))")
    proc = subprocess.run([sys.executable, "-c", code], env=plugin_env(), capture_output=True,
                          text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [NAME, "['pytorch',", "'tensorflow']"]
