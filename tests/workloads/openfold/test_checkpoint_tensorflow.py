"""The reference's resumable checkpoint (a ``torch.save`` file) into the TensorFlow
OpenFold: weights and Adam's state placed by canonical name, read without torch through
the allow-list unpickler — and every bad file refused in one line before any variable
changes, with nothing in the file run.

The files are the ones the PyTorch tests write (``conftest.reference_state``: a mini
AlphaFold's state dict shifted off any initialisation and Adam moments set to known
values, saved by torch); the loads run in process, one in a subprocess that proves torch
is never imported.
"""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from workloads.openfold.test_cli import (  # noqa: E402 (the same files both frameworks refuse)
    _a_list,
    _extra,
    _missing,
    _moment_reshaped,
    _nth,
    _renamed,
    _reshaped,
    _resumable,
    _save,
    _System,
)

from sciperf.errors import SciperfError  # noqa: E402
from sciperf.workloads.openfold import spec as of_spec  # noqa: E402
from sciperf.workloads.openfold.sizes import mini_spec  # noqa: E402
from sciperf_tensorflow import weights as keras_weights  # noqa: E402
from sciperf_tensorflow.optim import AdamFamily  # noqa: E402
from sciperf_tensorflow.workloads.openfold.backend import load_reference_checkpoint  # noqa: E402
from sciperf_tensorflow.workloads.openfold.model import AlphaFold  # noqa: E402

SPEC = mini_spec()


@pytest.fixture(scope="module")
def target() -> tuple[AlphaFold, AdamFamily]:
    """A TF mini AlphaFold and torch-semantics Adam over its variables."""
    model = AlphaFold(SPEC, checkpointing=False)
    adam = AdamFamily(model.trainable_variables, "Adam", of_spec.BASE_LR, (0.5, 0.5), 1e-3,
                      0.0)
    return model, adam



def test_weights_and_adam_state_land_on_their_variables(
        target, reference_state, tmp_path: Path) -> None:
    """Every weight equals the file's (kernels transposed), every moment its parameter's,
    Adam's step count and the file's betas and eps replace the built ones (torch's load
    does the same)."""
    model, adam = target
    weights, optimizer = reference_state
    path = _save(tmp_path / "resumable.pt", _resumable(weights, optimizer))
    load_reference_checkpoint(path, model, SPEC, adam)
    mapped = keras_weights.mapped(model)
    position = {id(v): i for i, v in enumerate(adam.variables)}
    for name, (entry, transposed) in SPEC.canonical_names().items():
        var = mapped[entry][0]
        want = weights[name].numpy()
        np.testing.assert_array_equal(var.numpy(), want.T if transposed else want, name)
        i = position[id(var)]
        assert float(adam.m[i].numpy().max()) == float(adam.m[i].numpy().min()) == 10.0
        assert float(adam.v[i].numpy().min()) == 100.0
    assert float(adam.t.numpy()) == 1_000_000.0
    assert (adam.beta1, adam.beta2, adam.eps) == (*of_spec.ADAM_BETAS, of_spec.ADAM_EPS)


def test_the_load_never_imports_torch(reference_state, tmp_path: Path) -> None:
    """The TensorFlow image has no torch: the load runs without it (a subprocess whose
    sys.modules is inspected after the load)."""
    path = _save(tmp_path / "resumable.pt", _resumable(*reference_state))
    code = (
        "import sys\n"
        "from sciperf.workloads.openfold.sizes import mini_spec\n"
        "from sciperf_tensorflow.workloads.openfold.backend import load_reference_checkpoint\n"
        "from sciperf_tensorflow.workloads.openfold.model import AlphaFold\n"
        "spec = mini_spec()\n"
        "model = AlphaFold(spec, checkpointing=False)\n"
        f"load_reference_checkpoint({str(path)!r}, model, spec, None)\n"
        "print(float(model.trainable_variables[0].numpy().sum()))\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = next(iter(reference_state[0].values())).numpy()
    assert float(proc.stdout.split()[-1]) == pytest.approx(float(first.sum()), rel=1e-5)



def _nan(weights, optimizer, tmp):
    name = _nth(weights, 9)
    bad = {**weights, name: torch.full_like(weights[name], float("nan"))}
    return _resumable(bad, optimizer), [f"parameter {name} holds NaN or Inf"]






def _moment_nan(weights, optimizer, tmp):
    bad = copy.deepcopy(optimizer)
    bad["state"][5]["exp_avg_sq"] = torch.full_like(bad["state"][5]["exp_avg_sq"],
                                                    float("inf"))
    return _resumable(weights, bad), [f"exp_avg_sq of parameter {_nth(weights, 5)}",
                                      "NaN or Inf"]


def _steps_differ(weights, optimizer, tmp):
    bad = copy.deepcopy(optimizer)
    bad["state"][2]["step"] = torch.tensor(3.0)
    return _resumable(weights, bad), ["different step counts"]


def _text(weights, optimizer, tmp):
    return b"not a checkpoint\n", ["not a torch.save checkpoint"]



def _system_in_torch_file(weights, optimizer, tmp):
    return _resumable(weights, _System(tmp / "pwned")), ["system"]


def _system_in_plain_pickle(weights, optimizer, tmp):
    return pickle.dumps(_System(tmp / "pwned")), ["not a torch.save checkpoint"]


BAD = {"nan-weight": _nan, "renamed-key": _renamed, "wrong-shape": _reshaped,
       "missing-tensor": _missing, "extra-tensor": _extra, "adam-moment-shape": _moment_reshaped,
       "adam-moment-inf": _moment_nan, "adam-steps-differ": _steps_differ, "text-file": _text,
       "a-list": _a_list, "os-system-in-torch-file": _system_in_torch_file,
       "os-system-plain-pickle": _system_in_plain_pickle}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_checkpoint_is_one_line_and_changes_nothing(
        target, reference_state, tmp_path: Path, case: str) -> None:
    model, adam = target
    content, words = BAD[case](*reference_state, tmp_path)
    path = tmp_path / "init.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        _save(path, content)
    before = [v.numpy().copy() for v in (*model.trainable_variables, adam.t, *adam.m[:4])]
    with pytest.raises(SciperfError) as info:
        load_reference_checkpoint(path, model, SPEC, adam)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"train.init_checkpoint={path}: ")
    for word in words:
        assert word in message, message
    after = [v.numpy() for v in (*model.trainable_variables, adam.t, *adam.m[:4])]
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    assert not (tmp_path / "pwned").exists()


def test_a_missing_checkpoint_is_one_line(target, tmp_path: Path) -> None:
    model, adam = target
    path = tmp_path / "nowhere.pt"
    with pytest.raises(SciperfError, match=f"^train.init_checkpoint={path}: no such file$"):
        load_reference_checkpoint(path, model, SPEC, adam)


def test_a_tensorflow_checkpoint_is_the_reference_format(target, reference_state,
                                                         tmp_path: Path) -> None:
    """What a TensorFlow checkpoint's state.pt holds (written without torch) loads into
    the PyTorch model and Adam through the reference's path, giving back the weights and
    moments the TensorFlow side was loaded with: the .pt moves both ways."""
    from sciperf.data.pickles import dump_torch_file
    from sciperf_pytorch.workloads.openfold.backend import (
        load_reference_checkpoint as torch_load,
    )
    from sciperf_pytorch.workloads.openfold.model import AlphaFold as TorchAlphaFold
    from sciperf_tensorflow.workloads.openfold.backend import reference_state as tf_state

    model, adam = target
    weights, optimizer = reference_state
    load_reference_checkpoint(_save(tmp_path / "in.pt", _resumable(weights, optimizer)),
                              model, SPEC, adam)
    written = dump_torch_file(tmp_path / "tf.pt", tf_state(model, SPEC, adam, 5))
    pt = TorchAlphaFold(SPEC, checkpointing=False)
    pt_adam = torch.optim.Adam(pt.parameters(), lr=of_spec.BASE_LR, betas=of_spec.ADAM_BETAS,
                               eps=of_spec.ADAM_EPS)
    torch_load(written, pt, pt_adam)
    for name, tensor in pt.state_dict().items():
        assert torch.equal(tensor, weights[name]), name
    state = pt_adam.state_dict()
    assert {float(s["step"]) for s in state["state"].values()} == {1_000_000.0}
    assert all(float(s["exp_avg"].min()) == float(s["exp_avg_sq"].max()) ** 0.5 == 10.0
               for s in state["state"].values())
    assert len(state["state"]) == len(weights)
