"""A whole ``torch.save`` checkpoint read without torch and without running its code.

The TensorFlow image has no torch, yet the reference's resumable checkpoints (model and
Adam state) are ``torch.save`` zip files. `sciperf.data.pickles.load_torch_file` reads them
into numpy through the allow-list unpickler; torch is used here only to write them.
"""

from __future__ import annotations

import io
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from sciperf.data.pickles import load_torch_file
from testkit import refused

torch = pytest.importorskip("torch")


def _numpy(value):
    """What the reader should give for a value torch.save wrote."""
    if isinstance(value, torch.Tensor):
        return value.float().numpy() if value.dtype == torch.bfloat16 else value.numpy()
    if isinstance(value, dict):
        return {k: _numpy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_numpy(v) for v in value)
    return value


def _assert_same(got, want, where: str = "") -> None:
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype, where
        np.testing.assert_array_equal(got, want, err_msg=where)
    elif isinstance(want, dict):
        assert list(got) == list(want), where
        for key in want:
            _assert_same(got[key], want[key], f"{where}/{key}")
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_same(g, w, f"{where}[{i}]")
    else:
        assert got == want, where


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> tuple[Path, dict]:
    """A resumable checkpoint as a training loop writes one: model, Adam after two steps
    (moments and step counts), and odd tensors (a transposed view, two views of one
    storage, bfloat16, int64, bool, a 0-d tensor)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    adam = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-6)
    for _ in range(2):
        adam.zero_grad()
        model(torch.randn(5, 4)).square().sum().backward()
        adam.step()
    base = torch.arange(12, dtype=torch.float32)
    state = {"model": model.state_dict(), "optimizer": adam.state_dict(), "epoch": 7,
             "extra": {"transposed": torch.randn(3, 5).t(), "halves": [base[:6], base[6:]],
                       "bf16": torch.randn(4).to(torch.bfloat16), "ids": torch.arange(3),
                       "mask": torch.tensor([True, False]), "scalar": torch.tensor(2.5)}}
    path = tmp_path_factory.mktemp("torch_file") / "resume.pt"
    torch.save(state, path)
    return path, state


def test_a_checkpoint_reads_as_numpy_equal_to_what_torch_saved(checkpoint) -> None:
    path, state = checkpoint
    got = load_torch_file(path)
    _assert_same(got, _numpy(state))
    moments = got["optimizer"]["state"][0]
    assert set(moments) == {"step", "exp_avg", "exp_avg_sq"} and moments["step"] == 2
    assert got["optimizer"]["param_groups"][0]["eps"] == 1e-6


def test_torch_is_never_imported(checkpoint) -> None:
    """In a process where importing torch fails, as in the TensorFlow image."""
    path, _ = checkpoint
    code = ("import sys; sys.modules['torch'] = None\n"
            "from sciperf.data.pickles import load_torch_file\n"
            f"state = load_torch_file({str(path)!r})\n"
            "print(state['epoch'], state['model']['0.weight'].shape)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["7", "(3,", "4)"]


def _archive(path: Path, pickled: bytes, members: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("ckpt/data.pkl", pickled)
        for name, data in (members or {}).items():
            zf.writestr(f"ckpt/{name}", data)
    return path


class _Calls:
    """Pickles to a call of `func(*args)` (what a hostile checkpoint would hold)."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def test_a_checkpoint_that_would_run_code_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hostile = pickle.dumps({"model": _Calls(open, str(marker), "w")}, protocol=4)
    path = _archive(tmp_path / "evil.pt", hostile)
    text = refused(load_torch_file, path)
    assert text.startswith(f"{path}: refused to unpickle io.open (") and not marker.exists()


def test_malformed_checkpoints_are_one_line(tmp_path: Path) -> None:
    plain = tmp_path / "plain.pt"
    plain.write_bytes(b"not a zip at all")
    assert refused(load_torch_file, plain).startswith(f"{plain}: not a torch.save checkpoint")
    missing = tmp_path / "missing.pt"
    assert refused(load_torch_file, missing).startswith(f"{missing}: not a torch.save")
    # a storage shorter than its tensor says: cut the saved file's first storage
    buf = io.BytesIO()
    torch.save({"w": torch.ones(4)}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zf:
        members = {n.split("/", 1)[1]: zf.read(n) for n in zf.namelist()}
    members["data/0"] = members["data/0"][:8]
    cut = _archive(tmp_path / "cut.pt", members.pop("data.pkl"), members)
    assert "storage ckpt/data/0 holds 8 bytes for 4 elements of 4" in refused(load_torch_file,
                                                                             cut)


# ------------------------------------------------------------------ writing one without torch
def test_a_written_file_is_what_torch_loads_and_the_reader_reads(checkpoint,
                                                                 tmp_path: Path) -> None:
    """What load_torch_file read of torch's own file, written back by dump_torch_file:
    torch.load(weights_only=True) gives the same values (tensors, an OrderedDict state
    dict, Adam's int-keyed state and tuple betas, numbers), and so does the reader."""
    from sciperf.data.pickles import dump_torch_file

    path, state = checkpoint
    read = load_torch_file(path)
    out = dump_torch_file(tmp_path / "written.pt", read)
    back = torch.load(out, weights_only=True)
    assert type(back["model"]).__name__ == "OrderedDict"
    _assert_same(_numpy(back), read)
    _assert_same(load_torch_file(out), read)
    assert isinstance(back["optimizer"]["param_groups"][0]["betas"], tuple)


def test_a_value_no_torch_file_holds_writes_nothing(tmp_path: Path) -> None:
    from sciperf.data.pickles import dump_torch_file

    target = tmp_path / "bad.pt"
    with pytest.raises(TypeError, match="complex"):
        dump_torch_file(target, {"z": np.zeros(2, np.complex64)})
    assert list(tmp_path.iterdir()) == []
