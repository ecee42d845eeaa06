"""Hydra composition: every combination composes, defaults come from the spec, overrides work."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from sciperf import config as config_mod
from sciperf.config import compose, config_hash, to_container
from sciperf.errors import SciperfError
from sciperf.workloads import WORKLOADS, get
from sciperf.workloads.base import Workload
from sciperf.workloads.cosmoflow import spec as cosmo

CONFIGS = Path(config_mod.__file__).resolve().parent.parent / "configs"


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


def _workloads() -> list[str]:
    """Workloads generated from the spec plus any YAML ones."""
    return sorted(set(WORKLOADS) | set(_options("workload")))


def _combinations() -> list[tuple[str, str, str]]:
    """workload × framework × experiment; a named recipe `<workload>_…` pairs with its own."""
    combos = []
    for w, f, e in itertools.product(_workloads(), _options("framework"), _options("experiment")):
        owner = next((x for x in _workloads() if e.startswith(f"{x}_")), None)
        if owner is None or owner == w:
            combos.append((w, f, e))
    return combos


def test_discovered_choices() -> None:
    assert "cosmoflow" in _workloads()
    assert "pytorch" in _options("framework")
    assert {"mini", "full"} <= set(_options("experiment"))


@pytest.mark.parametrize(("workload", "framework", "experiment"), _combinations())
def test_every_combination_composes(workload: str, framework: str, experiment: str) -> None:
    cfg = compose([f"workload={workload}", f"framework={framework}",
                   f"experiment={experiment}"])
    assert cfg.workload == workload
    assert cfg.framework.name == framework
    assert cfg.experiment == experiment
    spec = get(workload)
    # Workload sections are the spec's own dataclasses, so they can be built from the config.
    model = spec.model(**cfg.model)
    spec.optimizer(**cfg.opt)
    assert model.parameter_count() > 0
    assert cfg.data.format in spec.formats
    assert cfg.output_dir == f"results/{workload}-{framework}-{experiment}"


@pytest.mark.parametrize("group", ["system", "launcher", "container"])
def test_every_option_of_the_other_groups_composes(group: str) -> None:
    options = _options(group)
    assert options
    for option in options:
        cfg = compose([f"{group}={option}"])
        assert cfg[group]["name"] == option


# --- defaults come from the spec -------------------------------------------------------

@pytest.fixture(scope="module")
def full():
    return compose(["workload=cosmoflow", "experiment=full"])


@pytest.fixture(scope="module")
def mini():
    return compose(["workload=cosmoflow", "experiment=mini"])


def test_full_equals_spec_dataclasses(full) -> None:
    plain = to_container(full)
    assert plain["model"] == asdict(cosmo.ModelSpec())
    assert plain["opt"] == asdict(cosmo.OptimizerSpec())
    for section, cls in (("train", cosmo.TrainSpec), ("data", cosmo.DataSpec)):
        expected = asdict(cls())
        assert {k: plain[section][k] for k in expected} == expected, section
    assert cosmo.ModelSpec(**full.model).parameter_count() == cosmo.FULL_PARAMETER_COUNT
    assert full.train.target == cosmo.TARGET
    assert full.data.train_samples == cosmo.TRAIN_SAMPLES
    assert full.data.eval_samples == cosmo.EVAL_SAMPLES


def test_workload_node_is_generated_from_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """Changing a number in the spec changes the composed config: nothing retyped in YAML."""
    original = Workload.default_config

    def patched(self: Workload) -> dict:
        node = original(self)
        if self.name == "cosmoflow":
            node["opt"]["base_lr"] = 0.0123
            node["model"]["conv_filters"] = [3, 5, 7, 9, 11]
            node["train"]["target"] = 0.5
        return node

    monkeypatch.setattr(Workload, "default_config", patched)
    cfg = compose(["experiment=full"])
    assert cfg.opt.base_lr == 0.0123
    assert list(cfg.model.conv_filters) == [3, 5, 7, 9, 11]
    assert cfg.train.target == 0.5


def _yaml_files() -> list[Path]:
    return sorted(CONFIGS.rglob("*.yaml"))


def test_no_yaml_retypes_a_spec_default() -> None:
    """A YAML value under model/opt/train/data equal to the spec default is a retyped number."""
    defaults = {"model": asdict(cosmo.ModelSpec()), "opt": asdict(cosmo.OptimizerSpec()),
                "train": asdict(cosmo.TrainSpec()), "data": asdict(cosmo.DataSpec())}
    retyped = []
    for path in _yaml_files():
        doc = yaml.safe_load(path.read_text()) or {}
        for section, spec_defaults in defaults.items():
            for key, value in (doc.get(section) or {}).items():
                if key in spec_defaults and value == spec_defaults[key]:
                    retyped.append(f"{path.relative_to(CONFIGS)}: {section}.{key}={value}")
    assert retyped == []


def test_mini_is_a_small_variant(full, mini) -> None:
    assert mini.experiment == "mini"
    assert mini.model.input_size < full.model.input_size
    small = cosmo.ModelSpec(**mini.model).parameter_count()
    assert small < cosmo.FULL_PARAMETER_COUNT / 20
    assert mini.data.train_samples < full.data.train_samples
    assert mini.data.eval_samples < full.data.eval_samples
    assert mini.train.max_epochs <= full.train.max_epochs
    # The input must survive one 2× max-pool per conv layer.
    assert cosmo.ModelSpec(**mini.model).flat_size() > 0
    # Same optimizer family and the same quality target.
    assert mini.opt.name == full.opt.name
    assert mini.train.target == full.train.target


# --- overrides --------------------------------------------------------------------------

OVERRIDES = [
    ("data.dir", "/scratch/somewhere/cf", "/scratch/somewhere/cf"),
    ("data.format", "npy", "npy"),
    ("data.train_samples", "32", 32),
    ("data.eval_samples", "16", 16),
    ("train.global_batch_size", "8", 8),
    ("train.max_epochs", "3", 3),
    ("train.target", "0.2", 0.2),
    ("precision", "bf16", "bf16"),
    ("seed", "7", 7),
    ("output_dir", "/tmp/sciperf-out", "/tmp/sciperf-out"),
]


@pytest.mark.parametrize(("key", "text", "value"), OVERRIDES, ids=[o[0] for o in OVERRIDES])
@pytest.mark.parametrize("experiment", ["full", "mini"])
def test_override_common_keys(request: pytest.FixtureRequest, experiment: str, key: str,
                              text: str, value) -> None:
    base = request.getfixturevalue(experiment)
    cfg = compose([f"experiment={experiment}", f"{key}={text}"])
    section, _, leaf = key.rpartition(".")
    got = cfg[section][leaf] if section else cfg[leaf]
    assert got == value
    assert type(got) is type(value)
    # Only that key changed.
    a, b = to_container(base), to_container(cfg)
    if section:
        a[section].pop(leaf)
        b[section].pop(leaf)
    else:
        a.pop(leaf)
        b.pop(leaf)
    assert a == b


def test_format_override_both_ways(full, mini) -> None:
    assert full.data.format == "tfrecord"
    assert compose(["experiment=full", "data.format=npy"]).data.format == "npy"
    assert compose(["experiment=mini", "data.format=tfrecord"]).data.format == "tfrecord"


def test_precision_override_both_ways() -> None:
    for value in ("fp32", "bf16"):
        for exp in ("full", "mini"):
            assert compose([f"experiment={exp}", f"precision={value}"]).precision == value


@pytest.mark.parametrize("override", [
    "precision=fp16", "data.format=hdf5", "train.max_epochs=abc", "no_such_key=1",
    "model.no_such=1", "train.global_batch_size=0", "workload=nope", "experiment=nope",
])
def test_bad_overrides_raise_sciperf_error(override: str) -> None:
    with pytest.raises(SciperfError) as info:
        compose([override])
    message = str(info.value)
    assert "\n" not in message
    assert override.split("=")[0].split(".")[-1] in message or "nope" in message


# --- config hash ------------------------------------------------------------------------

def test_config_hash_stable(mini) -> None:
    h = config_hash(mini)
    assert len(h) == 16
    assert int(h, 16) >= 0
    assert config_hash(compose(["experiment=mini"])) == h


def test_config_hash_stable_across_processes(mini, tmp_path: Path) -> None:
    code = ("import json; from sciperf.config import compose, config_hash; "
            "print(json.dumps(config_hash(compose(['experiment=mini']))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True, timeout=60).stdout
    assert json.loads(out) == config_hash(mini)


def test_config_hash_ignores_run_local_paths(mini) -> None:
    moved = compose(["experiment=mini", "output_dir=/elsewhere/out", "data.dir=/other/data"])
    assert config_hash(moved) == config_hash(mini)


@pytest.mark.parametrize("override", ["seed=1", "experiment=full", "train.global_batch_size=32",
                                      "precision=fp32", "data.format=tfrecord"])
def test_config_hash_sensitive_to_the_experiment(mini, override: str) -> None:
    assert config_hash(compose(["experiment=mini", override])) != config_hash(mini)
