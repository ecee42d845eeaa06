"""docs/architecture.md, rule 9: where both frameworks compute a formula of a workload's
spec, both call the spec — a framework that retypes the formula fails here.

For every workload both framework registries implement, every module of its two framework
folders is parsed and the functions and classes of the workload's common package
(``sciperf.workloads.<name>``: spec, basis, data, flops…) that it calls or references are
collected, through any import form (``spec.f(…)``, ``from ….spec import f``, ``import
….spec as s``, ``oc20.spec.f``). A callable one framework uses and the other does not is a
formula typed twice (or a step one framework skips) unless `EXCEPTIONS` names it with its
reason. Constants do not count (a number is not a formula), nor do annotations (a type is
not a computation). The callables are resolved by importing the common modules, which
import no ML framework (rule 2), and keyed by where they are defined, so a re-export and
its original are one callable. A method counts when reached through its class
(``ModelSpec.weight_shapes``); a method called on an instance (``model_spec.layers()``) is
not followed, as the instance's type is not known from the source alone.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from types import ModuleType

import pytest

from sciperf.workloads import WORKLOADS

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = ("pytorch", "tensorflow")

# (workload, callable as "module.qualname" inside the workload's package, the one framework
# that uses it) → why the other framework legitimately does not. Each entry must still be a
# live difference (a stale one fails too).
EXCEPTIONS: dict[tuple[str, str, str], str] = {
    ("openfold", "data.feature_sizes", "tensorflow"):
        "the compiled step's input signature (one trace for every chain length); PyTorch "
        "runs eagerly and needs none",
    ("gpt2", "spec.released_name", "pytorch"):
        "PyTorch's module tree is the released checkpoint's, so its parameter names map to "
        "the canonical ones through it; TensorFlow's variables carry the canonical names",
}

Uses = dict[str, list[str]]  # callable key → "file:line" of each use


def _registry(framework: str) -> dict[str, str]:
    """The framework's BACKENDS table, read from its source (no framework import)."""
    path = ROOT / "frameworks" / framework / "workloads" / "__init__.py"
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "BACKENDS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path}: no BACKENDS table")


def _folder(framework: str, name: str) -> Path:
    """The workload's folder of `framework`, from its registry entry's module path."""
    module = _registry(framework)[name].partition(":")[0]
    return ROOT / "frameworks" / framework / Path(*module.split(".")[1:-1])


SHARED = [w for w in WORKLOADS if all(w in _registry(fw) for fw in FRAMEWORKS)]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _bindings(tree: ast.AST, package: str) -> dict[str, object]:
    """Names the module binds to the workload's common modules and their members."""
    out: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _within(alias.name, package):
                    continue
                module = importlib.import_module(alias.name)
                if alias.asname:
                    out[alias.asname] = module
                else:  # `import a.b.c` binds `a`; attribute chains walk down from it
                    top = alias.name.partition(".")[0]
                    out[top] = importlib.import_module(top)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if alias.name == "*" or not (_within(node.module, package)
                                             or _within(full, package)):
                    continue
                parent = importlib.import_module(node.module)
                obj = getattr(parent, alias.name, None)
                out[alias.asname or alias.name] = (obj if obj is not None
                                                   else importlib.import_module(full))
    return out


def _annotation_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation."""
    roots: list[ast.AST | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            roots.append(node.returns)
        elif isinstance(node, ast.arg | ast.AnnAssign):
            roots.append(node.annotation)
    return {id(n) for root in roots if root is not None for n in ast.walk(root)}


def _chain(node: ast.AST) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None when the chain starts at anything but a name."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(attrs)]


def _key(obj: object, package: str) -> str | None:
    """"spec.loss_scale" for a function or class defined in the workload's package."""
    if not (inspect.isroutine(obj) or inspect.isclass(obj)):
        return None
    module = getattr(obj, "__module__", None) or ""
    if not _within(module, package):
        return None
    return ".".join(filter(None, (module[len(package) + 1:], obj.__qualname__)))


def collect(source: str, name: str, file: str) -> Uses:
    """The callables of workload `name`'s common package that `source` calls or references."""
    package = f"sciperf.workloads.{name}"
    tree = ast.parse(source, file)
    bound = _bindings(tree, package)
    skip = _annotation_nodes(tree)
    uses: Uses = {}
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, ast.Name | ast.Attribute):
            continue
        chain = _chain(node)
        if chain is None or chain[0] not in bound:
            continue
        obj = bound[chain[0]]
        for attr in [None, *chain[1:]]:
            if attr is not None:
                if not isinstance(obj, ModuleType) and not inspect.isclass(obj):
                    break
                obj = getattr(obj, attr, None)
            key = _key(obj, package)
            if key is not None:
                where = f"{file}:{node.lineno}"
                if where not in uses.setdefault(key, []):
                    uses[key].append(where)
    return uses


def framework_uses(framework: str, name: str) -> Uses:
    """`collect` over every module of the workload's folder of `framework`."""
    folder = _folder(framework, name)
    uses: Uses = {}
    for path in sorted(folder.rglob("*.py")):
        for key, where in collect(path.read_text(), name, str(path.relative_to(folder))).items():
            uses.setdefault(key, []).extend(where)
    return uses


def differences(name: str, found: dict[str, Uses],
                exceptions: dict[tuple[str, str, str], str] | None = None) -> list[str]:
    """One line per callable one framework uses and the other does not, and per stale
    exception of `name`."""
    exceptions = EXCEPTIONS if exceptions is None else exceptions
    out, live = [], set()
    for fw in FRAMEWORKS:
        (other,) = (f for f in FRAMEWORKS if f != fw)
        for key in sorted(set(found[fw]) - set(found[other])):
            live.add((name, key, fw))
            if (name, key, fw) not in exceptions:
                out.append(f"{name}: {other} does not call {key} ({fw} does at "
                           f"{', '.join(found[fw][key])})")
    out += [f"{name}: stale exception {entry}: no longer a difference"
            for entry in exceptions if entry[0] == name and entry not in live]
    return out


@pytest.mark.parametrize("name", SHARED)
def test_both_frameworks_call_the_same_spec_callables(name: str) -> None:
    found = {fw: framework_uses(fw, name) for fw in FRAMEWORKS}
    assert differences(name, found) == []


def test_exceptions_name_a_shared_workload_a_framework_and_a_reason() -> None:
    for (name, key, fw), reason in EXCEPTIONS.items():
        assert name in SHARED and fw in FRAMEWORKS and "." in key and reason.strip()


def test_the_scanner_finds_known_calls() -> None:
    """It reads the real trees: a scanner that finds nothing would pass the test above."""
    assert "oc20" in SHARED and len(SHARED) >= 3
    for fw in FRAMEWORKS:
        oc20 = framework_uses(fw, "oc20")
        assert oc20["spec.loss_scale"][0].startswith("backend.py:"), fw  # the force loss
        for key in ("basis.bessel_roots", "basis.envelope_coefficients"):  # the models' bases
            assert oc20[key][0].startswith("model.py:"), (fw, key)


SPEC_CALL = """\
from sciperf.workloads.oc20 import spec

def loss(l1, world, free):
    return l1 * spec.loss_scale(world, free)
"""
RETYPED = """\
from sciperf.workloads.oc20 import spec

def loss(l1, world, free):
    return l1 * spec.FORCE_COEFFICIENT * world / max(free, 1)
"""


def test_a_retyped_formula_is_caught() -> None:
    found = {"pytorch": collect(SPEC_CALL, "oc20", "backend.py"),
             "tensorflow": collect(RETYPED, "oc20", "backend.py")}
    assert found == {"pytorch": {"spec.loss_scale": ["backend.py:4"]}, "tensorflow": {}}
    assert differences("oc20", found, {}) == [
        "oc20: tensorflow does not call spec.loss_scale (pytorch does at backend.py:4)"]
    # An exception silences exactly its entry; one that no longer differs is reported.
    allowed = {("oc20", "spec.loss_scale", "pytorch"): "reason"}
    assert differences("oc20", found, allowed) == []
    same = {fw: found["pytorch"] for fw in FRAMEWORKS}
    assert differences("oc20", same, allowed) == [
        "oc20: stale exception ('oc20', 'spec.loss_scale', 'pytorch'): no longer a difference"]


@pytest.mark.parametrize("source", [
    "from sciperf.workloads.oc20.spec import loss_scale as scale\nscale(1, 2)\n",
    "import sciperf.workloads.oc20.spec as s\nf = s.loss_scale\n",
    "import sciperf.workloads.oc20.spec\nsciperf.workloads.oc20.spec.loss_scale(1, 2)\n",
    "from sciperf.workloads import oc20\noc20.spec.loss_scale(1, 2)\n",
])
def test_every_import_form_resolves_to_the_spec_callable(source: str) -> None:
    assert set(collect(source, "oc20", "m.py")) == {"spec.loss_scale"}


def test_constants_annotations_and_other_workloads_do_not_count() -> None:
    source = ("from sciperf.workloads.oc20 import spec\n"
              "from sciperf.workloads.cosmoflow import spec as other\n"
              "def f(m: spec.ModelSpec) -> spec.OptimizerSpec:\n"
              "    x: spec.TrainSpec = other.ModelSpec()\n"
              "    return spec.FORCE_COEFFICIENT * spec.RCP[256][0]\n")
    assert collect(source, "oc20", "m.py") == {}
    # A method reached through its class is the class's and the method's.
    uses = collect("from sciperf.workloads.oc20.spec import ModelSpec\n"
                   "n = ModelSpec.parameter_count(ModelSpec())\n", "oc20", "m.py")
    assert set(uses) == {"spec.ModelSpec", "spec.ModelSpec.parameter_count"}
