"""A checkpoint whose state file was edited and its manifest hash re-computed (a hand-made
or planted file, not a damaged copy) is refused in one line, exit 2, before anything
trains: NaN weights, a complex or sparse tensor, an optimizer hyperparameter of the wrong
type (torch accepts ``momentum="x"`` and fails at the first step), a TensorFlow
``state.npz`` with other counters, text in a variable or a flipped byte. The same for
OpenFold's ``train.init_checkpoint``, whose loss zeroes NaN terms (as the reference's
does), so NaN weights would otherwise train to a loss of 0.0000.

The CosmoFlow cases copy the session's checkpointed runs of test_checkpoint.py (the same
words, tests/runzoo.py: no training of their own), tamper with the newest checkpoint and
resume it through the CLI in process (`testkit.cli`): the refusal comes before any epoch,
so a new interpreter would only add its start-up. Which run is tampered with (its epochs)
does not matter, only that its state file is refused. The OpenFold cases load into a mini
AlphaFold in-process (a CLI run of it takes minutes)."""

from __future__ import annotations

import copy
import json
import subprocess
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sciperf import checkpoint
from sciperf.errors import SciperfError
from testkit import cli

# test_checkpoint.py's BASE: its 1-epoch PyTorch run and its uninterrupted 4-epoch
# TensorFlow run, both with a checkpoint per epoch
BASE = ("train", "experiment=mini", "data.train_samples=64", "data.eval_samples=32",
        "train.global_batch_size=32", "train.target=0.0001", "train.save_weights=true",
        "train.checkpoint_every=1")
EPOCHS = {"pytorch": 1, "tensorflow": 4}
STATE = {"pytorch": "state.pt", "tensorflow": "state.npz"}


def _words(framework: str, epochs: int) -> tuple[str, ...]:
    return (*BASE, f"framework={framework}", f"train.max_epochs={epochs}")


def _tamper_and_resume(run_zoo, data: Path, tmp: Path, framework: str,
                       edit: Callable[[Path], None]) -> tuple[subprocess.CompletedProcess,
                                                              Path, Path]:
    """A copy of the session's run whose newest state file `edit` changed, the manifest
    updated to match (as the audit's attacker did), resumed for one more epoch."""
    epochs = EPOCHS[framework]
    out = run_zoo.copy(tmp / "run", *_words(framework, epochs)).out
    folder = checkpoint.folder(out) / f"epoch_{epochs:04d}"
    state = folder / STATE[framework]
    edit(state)
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    manifest["files"][state.name] = {"bytes": state.stat().st_size,
                                     "sha256": checkpoint._sha256(state)}
    (folder / "MANIFEST.json").write_text(json.dumps(manifest))
    proc = cli(*_words(framework, epochs + 1), "train.resume=auto", f"data.dir={data}",
               f"output_dir={out}")
    return proc, out, state


def _assert_refused(proc: subprocess.CompletedProcess, out: Path, epochs: int,
                    *words: str) -> None:
    """Exit 2, one sciperf line holding `words`, no traceback, no epoch trained beyond the
    run's `epochs`."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("sciperf ")]
    assert len(lines) == 1, lines
    for word in words:
        assert word in lines[0], lines[0]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["status"], summary["epochs"], len(summary["history"])) == \
        ("error", epochs, epochs)


# ------------------------------------------------------------------ PyTorch resume
def _torch_edit(change: Callable[[dict], str]) -> Callable[[Path], list[str]]:
    def edit(path: Path) -> list[str]:
        import torch
        state = torch.load(path, weights_only=True)
        words = change(state)
        torch.save(state, path)
        return words
    return edit


def _momentum_text(state: dict) -> list[str]:
    state["optimizer"]["param_groups"][0]["momentum"] = "x"
    return ["optimizer param_group 0 momentum='x' is not a finite number"]


def _nan_weight(state: dict) -> list[str]:
    name = next(k for k, v in state["model"].items() if v.is_floating_point())
    state["model"][name].fill_(float("nan"))
    return [f"parameter {name} holds NaN/Inf"]


def _complex_velocity(state: dict) -> list[str]:
    import torch
    slots = state["optimizer"]["state"][0]
    slots["velocity"] = slots["velocity"].to(torch.complex64)
    return ["optimizer velocity of parameter",
            "is not a real floating tensor (torch.complex64)"]


TORCH_CASES = {"momentum-text": _momentum_text, "nan-weight": _nan_weight,
               "complex-velocity": _complex_velocity}


@pytest.mark.parametrize("case", sorted(TORCH_CASES))
def test_a_tampered_pytorch_state_is_one_line(run_zoo, tiny_mini_data, tmp_path: Path,
                                              case: str) -> None:
    pytest.importorskip("torch")
    said: list[str] = []

    def edit(path: Path) -> None:
        said.extend(_torch_edit(TORCH_CASES[case])(path))
    proc, out, state = _tamper_and_resume(run_zoo, tiny_mini_data, tmp_path, "pytorch", edit)
    _assert_refused(proc, out, EPOCHS["pytorch"], f"{state}: ", *said)


# ------------------------------------------------------------------ TensorFlow resume
def _npz_edit(change: Callable[[dict[str, np.ndarray]], None]) -> Callable[[Path], None]:
    def edit(path: Path) -> None:
        with np.load(path) as saved:
            arrays = {k: saved[k] for k in saved.files}
        change(arrays)
        np.savez(path, **arrays)
    return edit


def _three_counters(arrays: dict[str, np.ndarray]) -> None:
    arrays["counters"] = np.array([1, 2, 3], np.int64)


def _text_variable(arrays: dict[str, np.ndarray]) -> None:
    arrays["model/00000"] = np.full(arrays["model/00000"].shape, "ab")


def _flipped_byte(path: Path) -> None:
    """One byte of the first member's payload flipped: the zip's CRC no longer holds."""
    with zipfile.ZipFile(path) as z:
        info = z.infolist()[0]
    blob = bytearray(path.read_bytes())
    at = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + \
        info.file_size // 2
    blob[at] ^= 0xFF
    path.write_bytes(bytes(blob))


TF_CASES = {"three-counters": (_npz_edit(_three_counters), "counters is int64 of shape (3,)"),
            "text-variable": (_npz_edit(_text_variable), "model variable 0 has dtype <U2"),
            "flipped-byte": (_flipped_byte, "Bad CRC-32")}


@pytest.mark.parametrize("case", sorted(TF_CASES))
def test_a_tampered_tensorflow_state_is_one_line(run_zoo, tiny_mini_data, tmp_path: Path,
                                                 case: str) -> None:
    pytest.importorskip("tensorflow")
    edit, words = TF_CASES[case]
    proc, out, state = _tamper_and_resume(run_zoo, tiny_mini_data, tmp_path, "tensorflow",
                                          edit)
    _assert_refused(proc, out, EPOCHS["tensorflow"], f"{state}: unreadable checkpoint (", words)


# ------------------------------------------------------------------ OpenFold init checkpoint
@pytest.fixture(scope="module")
def alphafold() -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(a mini AlphaFold, its state dict, a stepped Adam's state dict)."""
    torch = pytest.importorskip("torch")
    from sciperf.config import compose
    from sciperf.workloads import get
    from sciperf_pytorch.workloads.openfold.model import AlphaFold

    torch.manual_seed(3)
    spec = get("openfold").model_spec(compose(["workload=openfold", "experiment=mini"]))
    model = AlphaFold(spec, checkpointing=False)
    adam = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-6)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    adam.step()
    return model, copy.deepcopy(model.state_dict()), adam.state_dict()


def _full(t: Any, value: float) -> Any:
    import torch
    return torch.full_like(t, value)


def _first_weight(weights: dict[str, Any]) -> str:
    return next(k for k, v in weights.items() if v.is_floating_point() and v.dim())


def _of_nan(weights, adam):
    name = _first_weight(weights)
    return {**weights, name: _full(weights[name], float("nan"))}, adam, \
        f"parameter {name} holds NaN/Inf"


def _of_complex(weights, adam):
    import torch
    name = _first_weight(weights)
    return {**weights, name: weights[name].to(torch.complex64)}, adam, \
        f"parameter {name} is not a real floating tensor (torch.complex64)"


def _of_sparse(weights, adam):
    name = _first_weight(weights)
    return {**weights, name: weights[name].to_sparse()}, adam, \
        f"parameter {name} is not a dense tensor (torch.sparse_coo)"


def _of_betas(weights, adam):
    bad = copy.deepcopy(adam)
    bad["param_groups"][0]["betas"] = "xx"
    return weights, bad, "optimizer_state_dict param_group 0 betas='xx' is not a sequence of 2"


def _of_nan_moment(weights, adam):
    bad = copy.deepcopy(adam)
    bad["state"][0]["exp_avg_sq"] = _full(bad["state"][0]["exp_avg_sq"], float("inf"))
    return weights, bad, "optimizer_state_dict exp_avg_sq of parameter " \
        f"{_first_weight(weights)} holds NaN/Inf"


OF_CASES = {"nan-weight": _of_nan, "complex-weight": _of_complex, "sparse-weight": _of_sparse,
            "betas-text": _of_betas, "inf-moment": _of_nan_moment}


@pytest.mark.parametrize("case", sorted(OF_CASES))
def test_a_hostile_openfold_init_checkpoint_is_one_line(alphafold, tmp_path: Path,
                                                        case: str) -> None:
    import torch

    from sciperf_pytorch.workloads.openfold.backend import load_reference_checkpoint

    model, weights, adam_state = alphafold
    bad_weights, bad_adam, words = OF_CASES[case](weights, adam_state)
    path = tmp_path / "init.pt"
    torch.save({"alphafold_state_dict": bad_weights, "optimizer_state_dict": bad_adam}, path)
    fresh = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-6)
    with warnings.catch_warnings():  # torch drops an imaginary part with only a warning
        warnings.simplefilter("error")
        with pytest.raises(SciperfError) as err:
            load_reference_checkpoint(path, model, fresh)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"train.init_checkpoint={path}: "), text
    assert words in text, text

