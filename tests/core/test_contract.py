"""The workload contract and the registries (docs/architecture.md, "The workload contract").

Every registered workload is a `Workload` whose numbers agree with its spec and with the
official rules; every workload × framework pair either loads its backend class or is
refused in one line; generic modules name no workload; every package directory is
installed.
"""

from __future__ import annotations

import ast
import importlib
import tomllib
from pathlib import Path

import pytest

from sciperf.backends import Backend, available, backend_class, implemented, load_registry
from sciperf.config import compose
from sciperf.data.plan import StrictPlan
from sciperf.errors import SciperfError
from sciperf.workloads import DEFAULT, REGISTRY, WORKLOADS, get
from sciperf.workloads.base import Workload

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = ("pytorch", "tensorflow")
# Generic code: every module of the three packages outside workload folders and registries.
GENERIC = [p for d in ("common", "frameworks/pytorch", "frameworks/tensorflow", "launchers")
           for p in sorted((ROOT / d).rglob("*.py"))
           if "workloads" not in p.relative_to(ROOT).parts and ".egg-info" not in str(p)]


@pytest.mark.parametrize("name", WORKLOADS)
def test_every_workload_is_a_contract(name: str) -> None:
    w = get(name)
    assert isinstance(w, Workload) and w.name == name
    assert isinstance(w.plan, StrictPlan)  # the standard plans, or a subclass
    assert w.formats and w.dataset.splits == ("train", "validation")
    assert set(w.dataset.prepare) >= {"synthetic", "existing"}
    assert w.metric.key in ("eval_error", "eval_accuracy")
    assert w.model().parameter_count() == w.full_parameter_count
    cfg = compose([f"workload={name}", "experiment=full"])
    assert cfg.workload == name and cfg.train.target == w.metric.target
    assert cfg.data.train_samples == w.train_samples
    assert cfg.data.eval_samples == w.eval_samples
    # The per-epoch LR is the per-step LR at the epoch's first step.
    steps = w.plan.steps_per_epoch(cfg)
    assert steps > 0
    for epoch in (0, 1, 5):
        assert w.lr_for_epoch(cfg, epoch) == w.lr_for_step(cfg, epoch * steps, steps)


@pytest.mark.parametrize("name", WORKLOADS)
def test_runs_for_score_and_rcp_agree_with_mlperf_logging(name: str) -> None:
    """The contract's rule numbers are the official package's (a workload of sciperf's
    own, which the package does not know, takes the rules' smallest count)."""
    from sciperf.results.score import hpc_benchmarks, required_runs

    w = get(name)
    if name in hpc_benchmarks():
        assert required_runs(name) == w.runs_for_score
    else:
        assert w.runs_for_score == min(hpc_benchmarks().values())
    assert all(gbs > 0 and epochs > 0 for gbs, epochs in w.rcp_epochs.items())


def test_reached_follows_the_metric_direction() -> None:
    lower, higher = (get(n).metric for n in WORKLOADS[:2])
    assert lower.higher_is_better != higher.higher_is_better
    for metric in (lower, higher):
        better = metric.target + (1 if metric.higher_is_better else -1) * 0.01
        worse = metric.target - (1 if metric.higher_is_better else -1) * 0.01
        assert metric.reached(better) and metric.reached(metric.target)
        assert not metric.reached(worse)


def test_unknown_workload_is_one_line() -> None:
    with pytest.raises(SciperfError) as info:
        get("oc21")
    assert str(info.value) == f"unknown workload 'oc21'; valid choices: {', '.join(WORKLOADS)}"
    assert DEFAULT in REGISTRY


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("name", WORKLOADS)
def test_every_pair_loads_or_is_declared_unsupported(framework: str, name: str) -> None:
    if framework not in available():
        pytest.skip(f"framework {framework} not installed")
    if name not in implemented(framework):
        with pytest.raises(SciperfError, match=f"^{framework} does not implement {name} "):
            backend_class(framework, name)
        return
    cls = backend_class(framework, name)
    assert issubclass(cls, Backend)
    assert cls.__name__ == {"cosmoflow": "CosmoFlowBackend", "deepcam": "DeepCamBackend"}.get(
        name, cls.__name__)


# (framework, workload) pairs not implemented yet, each with its reason: the mirror
# tests hold for every other pair
PENDING: dict[tuple[str, str], str] = {}


def test_a_missing_pair_is_one_line_naming_what_exists(monkeypatch) -> None:
    framework, name = "tensorflow", "openfold"
    if framework not in available():
        pytest.skip(f"framework {framework} not installed")
    monkeypatch.delitem(load_registry(framework).BACKENDS, name)  # as if not yet written
    with pytest.raises(SciperfError) as info:
        backend_class(framework, name)
    have = ", ".join(implemented(framework))
    assert str(info.value) == f"{framework} does not implement {name} (has: {have})"


def test_framework_registries_mirror_each_other() -> None:
    """Same workloads (but the pending pairs), same module paths and class names in both
    framework packages."""
    regs = {fw: importlib.import_module(f"sciperf_{fw}.workloads").BACKENDS
            for fw in FRAMEWORKS if fw in available()}
    if len(regs) < 2:
        pytest.skip("needs both frameworks")
    pt, tf = regs["pytorch"], regs["tensorflow"]
    assert set(pt) == set(tf) | {w for fw, w in PENDING if fw == "tensorflow"}
    for name in set(pt) & set(tf):
        assert pt[name].replace("sciperf_pytorch", "") == tf[name].replace("sciperf_tensorflow",
                                                                            "")


def test_workload_folders_mirror_across_frameworks() -> None:
    """frameworks/{pytorch,tensorflow}/workloads/<w>/ hold the same file names."""
    def files(fw: str, name: str) -> set[str]:
        folder = ROOT / "frameworks" / fw / "workloads" / name
        return {p.name for p in folder.glob("*.py")}

    for name in WORKLOADS:
        assert {"__init__.py", "backend.py", "model.py"} <= files("pytorch", name)
        if ("tensorflow", name) not in PENDING:
            assert files("pytorch", name) == files("tensorflow", name)


def _code_strings_and_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Identifiers, attribute names, import paths and non-docstring string constants."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute):
            out.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            out.append((node.lineno, node.value))
    return out


def test_no_generic_module_names_a_workload() -> None:
    """Workload knowledge lives in the workload folders and registries only."""
    assert len(GENERIC) > 40  # the walk really covered the generic code
    hits = []
    for path in GENERIC:
        tree = ast.parse(path.read_text(), str(path))
        for line, text in _code_strings_and_names(tree):
            low = text.lower()
            if any(name in low for name in WORKLOADS):
                hits.append(f"{path.relative_to(ROOT)}:{line}: {text[:60]!r}")
    assert hits == [], "\n".join(hits)


def test_every_package_directory_is_installed() -> None:
    """Each pyproject lists every directory with an __init__.py (a non-editable install —
    a container image — would silently lack one)."""
    for folder, top in (("common", "sciperf"), ("frameworks/pytorch", "sciperf_pytorch"),
                        ("frameworks/tensorflow", "sciperf_tensorflow"),
                        ("launchers", "sciperf_launchers")):
        base = ROOT / folder
        listed = set(tomllib.loads((base / "pyproject.toml").read_text())
                     ["tool"]["setuptools"]["packages"])
        found = {".".join((top, *p.parent.relative_to(base).parts)) for p in
                 base.rglob("__init__.py") if ".egg-info" not in str(p)}
        assert listed == found, folder
