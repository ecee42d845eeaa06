"""OpenFold's bad inputs and its reference checkpoint, through the real `sciperf` command.

Every damaged input — an alignment shard missing, truncated or not UTF-8, a garbage or
malformed a3m, a malformed hhr, ``super.index`` missing, not JSON, pointing beyond its
shard or lacking a chain, a corrupt or malicious ``dicts`` pickle, a ``chains.csv`` with
other columns, kalign missing where a template hit must be realigned, and every kind of bad
``train.init_checkpoint`` — ends ``sciperf train`` (and ``sciperf prepare
data.source=existing``) in one line on stderr naming the file, key or parameter, exit 2,
and records that claim nothing: refused before ``run_start``, result_0.txt has no
run_start and summary.json says ``error``; met mid-run (training reads a chain only when it
draws it), the log ends ``run_stop aborted``. Malicious pickles run nothing (a marker file
stays absent). A good reference-format checkpoint trains: its SHA-256 is the MLLOG's
``init_checkpoint_sha256sum``, its weights and its Adam moments are the ones the first step
starts from.

One synthetic dataset per session (16 + 2 chains, runzoo.prepared; another with template
hits), copied per test before damage; runs take one step of one chain and evaluate one
chain (1 recycling iteration, no gradient checkpointing), so most cases end at setup or the
first step. A refusal runs the verb's main in this process (testkit.cli); the runs that
train to a checkpoint have a process of their own.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sciperf import output
from sciperf.config import compose
from sciperf.errors import SciperfError
from sciperf.workloads import get
from sciperf.workloads.openfold import data, layout
from sciperf.workloads.openfold import spec as of_spec
from testkit import cli, mllog, one_error_line, sciperf, summary

FMT = "processed"
TRAIN_CHAINS, EVAL_CHAINS = 16, 2
# one optimizer step on one chain, one validation chain; the fewest passes the model has
RUN = ("workload=openfold", "experiment=mini", "data.train_samples=1", "data.eval_samples=1",
       "train.global_batch_size=1", "train.val_every_iters=1", "train.max_epochs=1",
       "model.num_recycling_iters=1", "train.checkpointing=false", "framework.threads=1")
EXISTING = ("workload=openfold", "experiment=mini", "data.source=existing",
            f"data.train_samples={TRAIN_CHAINS}", f"data.eval_samples={EVAL_CHAINS}")
# the datasets here need no pre-trained starting checkpoint (making one costs minutes); the
# words of tests/workloads/openfold/test_fault_tables.py's set, so the session makes it once
DATASET = ("workload=openfold", "experiment=mini", f"data.train_samples={TRAIN_CHAINS}",
           f"data.eval_samples={EVAL_CHAINS}", "data.pretrain_epochs=0")
# ------------------------------------------------------------------ running the command

def _env_without(program: str, scratch: Path) -> dict[str, str]:
    """This environment with `program` gone from PATH: each PATH folder holding it is
    replaced by a folder of links to everything else in it."""
    shim = scratch / f"path-without-{program}"
    shim.mkdir(parents=True, exist_ok=True)
    folders = []
    for part in os.environ.get("PATH", "").split(os.pathsep):
        folder = Path(part)
        if not (folder / program).exists():
            folders.append(part)
            continue
        for entry in folder.iterdir():
            if entry.name != program and not (shim / entry.name).exists():
                (shim / entry.name).symlink_to(entry)
        if str(shim) not in folders:
            folders.append(str(shim))
    env = {k: v for k, v in os.environ.items() if k != "SCIPERF_DEBUG"}
    env["PATH"] = os.pathsep.join(folders)
    assert shutil.which(program, path=env["PATH"]) is None
    return env


def _train_args(root: Path, out: Path, extra: tuple[str, ...],
                checkpoint: str | Path) -> tuple[str, ...]:
    return ("train", *RUN, f"data.dir={root}", f"output_dir={out}",
            f"train.init_checkpoint={checkpoint}", *extra)


def _train(root: Path, out: Path, *extra: str, checkpoint: str | Path = "",
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A one-step `sciperf train` that a bad input ends, in this process."""
    return cli(*_train_args(root, out, extra, checkpoint), env=env)


def _trained(root: Path, out: Path, *extra: str, checkpoint: str | Path = "",
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The same run in a process of its own: one that trains, with its threads and
    allocator its own."""
    return sciperf(*_train_args(root, out, extra, checkpoint), env=env, timeout=300)


def _existing(root: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return cli("prepare", *EXISTING, f"data.dir={root}", env=env)


def _one_line(proc: subprocess.CompletedProcess, verb: str, *words: str) -> str:
    """Exit 2 and one `sciperf <verb>: error:` line naming every one of `words`, no
    traceback: train's is its only line on stderr (no warnings either); prepare's is the
    last, after any progress lines."""
    if verb == "train":
        line = one_error_line(proc, verb)
    else:
        assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:],
                                      proc.stderr[-3000:])
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        ours = [ln for ln in lines if ln.startswith("sciperf ")]
        assert ours == lines[-1:] and "Traceback" not in proc.stderr, proc.stderr
        line = ours[0]
        assert line.startswith(f"sciperf {verb}: error: "), line
    for word in words:
        assert word in line, (word, line)
    return line


def _refused(out: Path, *, started: bool) -> None:
    """The records of a run a user's mistake ended: summary.json says error, no epoch
    finished, no checkpoint; before run_start the log has neither run_start nor run_stop,
    after it the last record is run_stop aborted."""
    said = summary(out)
    assert said["status"] == "error" and said["epochs"] == 0, said["status"]
    records = mllog(out / "result_0.txt")
    keys = [e["key"] for e in records]
    if started:
        last = records[-1]
        assert last["key"] == "run_stop" and last["metadata"]["status"] == "aborted", last
        assert "run_start" in keys and "eval_accuracy" not in keys
    else:
        assert "run_start" not in keys and "run_stop" not in keys, keys
        assert said["run_start_unix"] is None
    assert not (out / "checkpoints").exists()


# ------------------------------------------------------------------ datasets

@pytest.fixture(scope="module")
def dataset(shared_tmp: Path) -> Path:
    """The session's synthetic set (never damaged: tests copy it). Generated by the console
    script: its generator forks worker processes."""
    from runzoo import prepared
    return prepared(shared_tmp, *DATASET)


@pytest.fixture(scope="module")
def template_dataset(shared_tmp: Path) -> Path:
    """The same with hhr hits to earlier training chains (found in their entries as they
    are: no realignment needed)."""
    from runzoo import prepared
    return prepared(shared_tmp, *DATASET, "data.templates=true")


@pytest.fixture
def copy(dataset: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(dataset, tmp_path / "data"))


def _first(root: Path, split: str) -> str:
    """The chain a run with data.*_samples=1 reads in `split` (the real listing)."""
    return data.list_samples(root, split, FMT, 1)[0].name


def _index(root: Path) -> dict[str, Any]:
    return json.loads((root / layout.SUPER_INDEX).read_text())


def _shard(root: Path, chain: str) -> Path:
    return root / layout.ALIGNMENTS_DIR / _index(root)[chain]["db"]


def _file_entry(root: Path, chain: str, name: str) -> list:
    return next(f for f in _index(root)[chain]["files"] if f[0] == name)


def _read_file(root: Path, chain: str, name: str) -> bytes:
    _, offset, size = _file_entry(root, chain, name)
    return _shard(root, chain).read_bytes()[offset:offset + size]


def _replace_file(root: Path, chain: str, name: str, content: bytes) -> None:
    """A chain's file replaced as a packer would store it: the new bytes appended to the
    chain's shard, its index entry pointing there (other chains untouched)."""
    index = _index(root)
    shard = root / layout.ALIGNMENTS_DIR / index[chain]["db"]
    offset = shard.stat().st_size
    with open(shard, "ab") as f:
        f.write(content)
    for entry in index[chain]["files"]:
        if entry[0] == name:
            entry[1:] = [offset, len(content)]
    (root / layout.SUPER_INDEX).write_text(json.dumps(index))


def _overwrite_start(root: Path, chain: str, name: str, content: bytes) -> None:
    """The first bytes of a chain's file overwritten in its shard (a damaged disk block)."""
    _, offset, size = _file_entry(root, chain, name)
    shard = _shard(root, chain)
    raw = bytearray(shard.read_bytes())
    assert len(content) <= size
    raw[offset:offset + len(content)] = content
    shard.write_bytes(bytes(raw))


class _System:
    """Pickles as a call of os.system (what a malicious file would hold)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple:
        return os.system, (f"touch {self.marker}",)


# ------------------------------------------------------------------ bad data

ALIGNMENTS = "uniref90_hits.a3m"


def _missing_shard(root: Path, chain: str, tmp: Path) -> list[str]:
    shard = _shard(root, chain)
    shard.unlink()
    return [str(shard), f"cannot read alignments of {chain}"]


def _truncated_shard(root: Path, chain: str, tmp: Path) -> list[str]:
    shard = _shard(root, chain)
    shard.write_bytes(shard.read_bytes()[:100])
    return [str(shard), "truncated", chain, "the file has 100"]


def _not_utf8(root: Path, chain: str, tmp: Path) -> list[str]:
    _overwrite_start(root, chain, ALIGNMENTS, b">q\n\xff\xfe\xfa")
    return [str(_shard(root, chain)), f"{chain}'s {ALIGNMENTS} is not UTF-8"]


def _garbage_a3m(root: Path, chain: str, tmp: Path) -> list[str]:
    _overwrite_start(root, chain, ALIGNMENTS, b"garbage " * 8)
    return [f"{root / layout.ALIGNMENTS_DIR}:{chain}/{ALIGNMENTS}", "line 1",
            "not FASTA/a3m"]


def _ragged_a3m(root: Path, chain: str, tmp: Path) -> list[str]:
    """The second row one aligned column short of the query."""
    lines = _read_file(root, chain, ALIGNMENTS).decode().splitlines()
    row = [i for i, line in enumerate(lines) if line.startswith(">")][1] + 1
    width = sum(1 for c in lines[1] if not c.islower())
    last = max(i for i, c in enumerate(lines[row]) if not c.islower())  # an aligned column
    lines[row] = lines[row][:last] + lines[row][last + 1:]
    _replace_file(root, chain, ALIGNMENTS, ("\n".join(lines) + "\n").encode())
    return [f"{root / layout.ALIGNMENTS_DIR}:{chain}/{ALIGNMENTS}", "sequence 2",
            f"{width - 1} aligned columns, the query has {width}"]


def _malformed_hhr(root: Path, chain: str, tmp: Path) -> list[str]:
    """A hit paragraph whose summary line does not parse."""
    text = f"Query         {chain}\n\nNo 1\n>1001_A a hit\nProbab=high  E-value=0.1\n"
    _replace_file(root, chain, layout.HHR_FILE, text.encode())
    return [f"{root / layout.ALIGNMENTS_DIR}:{chain}/{layout.HHR_FILE}", "line 5",
            "expected the hit summary"]


def _index_missing(root: Path, chain: str, tmp: Path) -> list[str]:
    (root / layout.SUPER_INDEX).unlink()
    return [str(root / layout.SUPER_INDEX), "cannot read the alignment index"]


def _index_not_json(root: Path, chain: str, tmp: Path) -> list[str]:
    path = root / layout.SUPER_INDEX
    path.write_bytes(path.read_bytes()[:-40])
    return [str(path), "not valid JSON"]


def _index_beyond_shard(root: Path, chain: str, tmp: Path) -> list[str]:
    index = _index(root)
    index[chain]["files"][0][1] = 10**7
    (root / layout.SUPER_INDEX).write_text(json.dumps(index))
    return [str(_shard(root, chain)), "truncated", f"{chain}'s", "needs bytes 10000000.."]


def _chain_not_indexed(root: Path, chain: str, tmp: Path) -> list[str]:
    index = _index(root)
    del index[chain]
    (root / layout.SUPER_INDEX).write_text(json.dumps(index))
    return [str(root / layout.SUPER_INDEX), "have no alignments", chain]


def _dicts_file(root: Path, chain: str) -> Path:
    return layout.dicts_file(root, layout.split_chain_id(chain)[0])


def _corrupt_dicts(root: Path, chain: str, tmp: Path) -> list[str]:
    path = _dicts_file(root, chain)
    path.write_bytes(path.read_bytes()[:500])
    return [str(path), "truncated"]


def _malicious_dicts(root: Path, chain: str, tmp: Path) -> list[str]:
    path = _dicts_file(root, chain)
    path.write_bytes(pickle.dumps(_System(tmp / "pwned")))
    return [str(path), "refused to unpickle", "system"]


def _chains_csv_header(root: Path, chain: str, tmp: Path) -> list[str]:
    path = root / layout.CHAINS_CSV
    path.write_text(path.read_text().replace("sequence_length", "seq_length", 1))
    return [str(path), "columns", "seq_length"]


# case → (damage to the chain a one-chain run trains on, whether training meets it only
# after run_start: a chain's files are read when it is drawn; the others break the
# dataset's listing, which is checked before the run writes any record)
BAD_DATA: dict[str, tuple[Callable[[Path, str, Path], list[str]], bool]] = {
    "missing-shard": (_missing_shard, True),
    "truncated-shard": (_truncated_shard, True),
    "shard-not-utf8": (_not_utf8, True),
    "garbage-a3m": (_garbage_a3m, True),
    "ragged-a3m": (_ragged_a3m, True),
    "malformed-hhr": (_malformed_hhr, True),
    "index-missing": (_index_missing, False),
    "index-not-json": (_index_not_json, False),
    "index-beyond-shard": (_index_beyond_shard, True),
    "chain-not-indexed": (_chain_not_indexed, False),
    "dicts-corrupt": (_corrupt_dicts, True),
    "dicts-malicious": (_malicious_dicts, True),
    "chains-csv-header": (_chains_csv_header, False),
}


@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_bad_data_is_one_line_in_train_and_in_prepare_existing(
        copy: Path, tmp_path: Path, case: str) -> None:
    damage, mid_run = BAD_DATA[case]
    words = damage(copy, _first(copy, "train"), tmp_path)  # listed before the damage
    out = tmp_path / "out"
    _one_line(_train(copy, out), "train", *words)
    if mid_run:
        _refused(out, started=True)
    else:  # refused before the claim: the corrected run may use the same output_dir
        assert not out.exists() or output.run_records(out) == []
    _one_line(_existing(copy), "prepare", *words)
    assert not (tmp_path / "pwned").exists()  # the malicious pickle ran nothing


def test_prepare_existing_parses_every_chain_not_only_the_first(copy: Path,
                                                                 tmp_path: Path) -> None:
    """Training may draw any chain: a malformed a3m deep in the split is found by the
    verification, not when a run draws it. The damage goes to a second copy: a process
    reads a dataset's tables once (sciperf.workloads.openfold.data), and this one has read
    the first copy's."""
    chains = [p.name for p in data.list_samples(copy, "train", FMT, TRAIN_CHAINS)]
    assert _existing(copy).returncode == 0
    damaged = Path(shutil.copytree(copy, tmp_path / "damaged"))
    words = _ragged_a3m(damaged, chains[-1], damaged)
    _one_line(_existing(damaged), "prepare", *words)


# ------------------------------------------------------------------ kalign

def _hits_needing_realignment(root: Path, chain: str) -> None:
    """One residue of every hit's template row changed: the hit's residues then occur in
    no chain of the template's entry, so the search must realign it with kalign (one
    change in >= 11 residues keeps the 90 % identity a realigned hit needs)."""
    lines = _read_file(root, chain, layout.HHR_FILE).decode().splitlines()
    changed = 0
    for i, line in enumerate(lines):
        if not line.startswith("T ") or line.startswith("T Consensus"):
            continue
        start, row, end, total = line[17:].split()
        at = [k for k, c in enumerate(row) if c != "-"][len(row) // 2]
        row = row[:at] + ("W" if row[at] != "W" else "A") + row[at + 1:]
        lines[i] = f"{line[:17]}{start:>4} {row} {end:>4} {total}"
        changed += 1
    assert changed, "the validation chain has no template hits"
    _replace_file(root, chain, layout.HHR_FILE, ("\n".join(lines) + "\n").encode())


def _mini_spec() -> Any:
    return get("openfold").model_spec(compose(["workload=openfold", "experiment=mini"]))


@pytest.fixture
def realign(template_dataset: Path, tmp_path: Path) -> tuple[Path, str]:
    """A copy of the template set whose first validation chain's hits need realigning."""
    root = Path(shutil.copytree(template_dataset, tmp_path / "data"))
    chain = _first(root, "validation")
    _hits_needing_realignment(root, chain)
    return root, chain


def test_hits_found_in_their_entry_need_no_kalign(template_dataset: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The synthetic hits are exact pieces of their template chains: a run without kalign
    trains, and the validation chain's hit is a template all the same."""
    env = _env_without("kalign", tmp_path)
    out = tmp_path / "out"
    proc = _trained(template_dataset, out, env=env)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # trained (target not expected)
    assert summary(out)["epochs"] == 1
    monkeypatch.setenv("PATH", env["PATH"])
    reader = data.model_reader(template_dataset, FMT, _mini_spec())
    features, _ = reader(data.sample_path(template_dataset, _first(template_dataset,
                                                                   "validation")))
    assert features["template_mask"][0].min() == 1.0


def test_kalign_missing_is_one_line_when_a_hit_needs_realigning(
        realign: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = realign
    env = _env_without("kalign", tmp_path)
    out = tmp_path / "out"
    words = ("kalign not found on PATH", "apt-get install kalign")
    _one_line(_train(root, out, env=env), "train", *words)
    _refused(out, started=True)  # validation met the hit
    _one_line(_existing(root, env=env), "prepare", *words)


def test_a_hit_realigned_by_kalign_becomes_a_template(realign: tuple[Path, str],
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The same chain read by the real reader: with kalign its realigned hit is a
    template; without, the one-line error (so the hit did need realigning)."""
    if shutil.which("kalign") is None:
        pytest.skip("kalign is not installed (containers/install.sh)")
    root, chain = realign
    reader = data.model_reader(root, FMT, _mini_spec())
    features, _ = reader(data.sample_path(root, chain))
    assert features["template_mask"][0].min() == 1.0
    monkeypatch.setenv("PATH", _env_without("kalign", tmp_path)["PATH"])
    with pytest.raises(SciperfError, match="kalign not found on PATH"):
        reader(data.sample_path(root, chain))


# ------------------------------------------------------------------ train.init_checkpoint

from workloads.openfold.conftest import ADAM_STEP, MOMENT  # noqa: E402 (reference_state's)


def _expected_move(lr: float) -> float:
    """Adam's first step from the file's moments with a zero gradient (a gradient within
    the clip bound changes it by <= 0.12 %)."""
    b1, b2 = of_spec.ADAM_BETAS
    return -lr * b1 * MOMENT / (np.sqrt(b2) * MOMENT + of_spec.ADAM_EPS)


def _save(path: Path, obj: Any) -> Path:
    import torch

    torch.save(obj, path)
    return path


def _resumable(weights: dict[str, Any], optimizer: dict[str, Any]) -> dict[str, Any]:
    return {"alphafold_state_dict": weights, "optimizer_state_dict": optimizer, "iteration": 5}


def _state_after_one_step(out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model state dict, optimizer state dict) of the run's epoch-1 checkpoint."""
    import torch

    from sciperf_pytorch.backend import STATE_FILE
    from sciperf_pytorch.workloads.openfold.backend import OpenFoldBackend

    folder, = (out / "checkpoints").glob("epoch_*")
    state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
    model_key, optimizer_key = OpenFoldBackend.state_keys
    return state[model_key], state[optimizer_key]


def _trained_from(proc: subprocess.CompletedProcess, out: Path, checkpoint: Path) -> None:
    """The run trained its epoch and logged the file's SHA-256 (once)."""
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert summary(out)["epochs"] == 1
    logged = [e["value"] for e in mllog(out / "result_0.txt")
              if e["key"] == "init_checkpoint_sha256sum"]
    assert logged == [hashlib.sha256(checkpoint.read_bytes()).hexdigest()]


def test_a_reference_checkpoint_gives_the_first_step_its_weights_and_moments(
        dataset: Path, tmp_path: Path,
        reference_state: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Weights and Adam moments both come from the file: every parameter moves by exactly
    the step the file's moments make (a fresh Adam moves each by ~lr·sign(gradient)), and
    Adam's step count continues the file's."""
    weights, optimizer = reference_state
    checkpoint = _save(tmp_path / "resumable.pt", _resumable(weights, optimizer))
    out = tmp_path / "out"
    proc = _trained(dataset, out, "train.checkpoint_every=1", checkpoint=checkpoint)
    _trained_from(proc, out, checkpoint)
    after, adam = _state_after_one_step(out)
    move = _expected_move(of_spec.BASE_LR)
    assert list(after) == list(weights)
    for name, tensor in weights.items():
        np.testing.assert_allclose((after[name] - tensor).numpy(), move, rtol=0,
                                   atol=3e-6, err_msg=name)
    assert {float(s["step"]) for s in adam["state"].values()} == {ADAM_STEP + 1}


def test_a_bare_state_dict_loads_the_weights_with_a_fresh_adam(
        dataset: Path, tmp_path: Path,
        reference_state: tuple[dict[str, Any], dict[str, Any]]) -> None:
    weights, _ = reference_state
    checkpoint = _save(tmp_path / "bare.pt", weights)
    out = tmp_path / "out"
    proc = _trained(dataset, out, "train.checkpoint_every=1", checkpoint=checkpoint)
    _trained_from(proc, out, checkpoint)
    after, adam = _state_after_one_step(out)
    for name, tensor in weights.items():  # Adam's first step moves a weight by <= lr
        assert float((after[name] - tensor).abs().max()) <= of_spec.BASE_LR * 1.001, name
    assert {float(s["step"]) for s in adam["state"].values()} == {1.0}


class _Plain:
    """A class instance: torch's weights_only loader resolves no such global."""

    def __init__(self) -> None:
        self.weights = [1.0, 2.0]


def _nth(weights: dict[str, Any], i: int) -> str:
    return list(weights)[i]


def _renamed(weights, optimizer, tmp):
    name = _nth(weights, 7)
    items = [(f"{k}_renamed" if k == name else k, v) for k, v in weights.items()]
    return _resumable(dict(items), optimizer), ["parameter 7 is", f"{name}_renamed",
                                                f"the model's is {name}"]


def _reshaped(weights, optimizer, tmp):
    import torch

    name = _nth(weights, 12)
    shape = list(weights[name].shape)
    shape[0] += 1
    return _resumable({**weights, name: torch.zeros(shape)}, optimizer), \
        [f"parameter {name} has shape {shape}", f"the model's is {list(weights[name].shape)}"]


def _missing(weights, optimizer, tmp):
    name = _nth(weights, 20)
    return _resumable({k: v for k, v in weights.items() if k != name}, optimizer), \
        [f"lacks parameter {name}", f"index 20 holds {_nth(weights, 21)}"]


def _extra(weights, optimizer, tmp):
    import torch

    items = list(weights.items())
    items.insert(30, ("evoformer.extra.weight", torch.zeros(3)))
    return _resumable(dict(items), optimizer), \
        ["unexpected tensor evoformer.extra.weight at index 30", f"{_nth(weights, 30)}"]


def _moment_reshaped(weights, optimizer, tmp):
    import copy as copy_module

    import torch

    bad = copy_module.deepcopy(optimizer)
    bad["state"][3]["exp_avg"] = torch.zeros(2)
    return _resumable(weights, bad), [f"exp_avg of parameter {_nth(weights, 3)}",
                                      "has shape [2]"]


def _text(weights, optimizer, tmp):
    return b"not a checkpoint\n", ["not a checkpoint torch loads with weights_only=True"]


def _a_list(weights, optimizer, tmp):
    return [1, 2], ["holds a list, not a state dict"]


def _system_in_torch_file(weights, optimizer, tmp):
    return _resumable(weights, _System(tmp / "pwned")), ["refused", "GLOBAL", "system",
                                                         "nothing in the file was run"]


def _system_in_plain_pickle(weights, optimizer, tmp):
    return pickle.dumps(_System(tmp / "pwned")), ["weights_only=True"]


def _class_instance(weights, optimizer, tmp):
    return _Plain(), ["refused", "_Plain"]


# case → (the file's content: an object torch.save writes, or raw bytes; words of the line)
BAD_CHECKPOINTS = {
    "renamed-key": _renamed, "wrong-shape": _reshaped, "missing-tensor": _missing,
    "extra-tensor": _extra, "adam-moment-shape": _moment_reshaped, "text-file": _text,
    "a-list": _a_list, "os-system-in-torch-file": _system_in_torch_file,
    "os-system-plain-pickle": _system_in_plain_pickle, "class-instance": _class_instance,
}


@pytest.mark.parametrize("case", sorted(BAD_CHECKPOINTS))
def test_a_bad_checkpoint_is_one_line_and_nothing_runs(
        dataset: Path, tmp_path: Path, case: str,
        reference_state: tuple[dict[str, Any], dict[str, Any]]) -> None:
    content, words = BAD_CHECKPOINTS[case](*reference_state, tmp_path)
    path = tmp_path / "init.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        _save(path, content)
    out = tmp_path / "out"
    _one_line(_train(dataset, out, checkpoint=path), "train",
              f"train.init_checkpoint={path}: ", *words)
    _refused(out, started=False)
    assert not (tmp_path / "pwned").exists()


def test_a_missing_checkpoint_is_one_line(dataset: Path, tmp_path: Path) -> None:
    path = tmp_path / "nowhere.pt"
    out = tmp_path / "out"
    _one_line(_train(dataset, out, checkpoint=path), "train",
              f"train.init_checkpoint={path}", "no such file")
    assert not out.exists()  # refused before the records are claimed


@pytest.mark.parametrize(("split", "count"), [("train", TRAIN_CHAINS + 1),
                                              ("validation", EVAL_CHAINS + 3)])
def test_more_chains_than_the_set_holds_are_refused(dataset: Path, split: str,
                                                    count: int) -> None:
    """data.train_samples=100 over 16 chains trained on the 16 (MLLOG train_samples 16):
    the other workloads refuse a split shorter than asked, OpenFold now too."""
    held = TRAIN_CHAINS if split == "train" else EVAL_CHAINS
    with pytest.raises(SciperfError, match=rf"chains\.csv holds {held} {split} chains but "
                                           rf"{count} were requested$"):
        data.list_samples(dataset, split, FMT, count)
