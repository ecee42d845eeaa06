"""docs/architecture.md, rule 2: `sciperf` (common/) imports no ML framework.

Dynamic check: a fresh interpreter whose import system refuses torch/tensorflow/keras imports
every submodule of sciperf, runs the CLI help and composes configs. Static check: no file
under common/ names a framework in an import statement or an import_module/__import__ call.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BLOCKED = ("torch", "tensorflow", "keras")

CHILD = textwrap.dedent(
    """
    import contextlib, importlib, importlib.abc, io, json, pkgutil, sys

    BLOCKED = {blocked!r}
    attempts = []

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                attempts.append(name)
                raise ModuleNotFoundError(f"blocked by test: {{name}}", name=name)
            return None

    sys.meta_path.insert(0, Block())

    # The blocker itself must work, or everything below proves nothing.
    blocker_works = {{}}
    for name in sorted(BLOCKED):
        try:
            importlib.import_module(name)
            blocker_works[name] = False
        except ImportError:
            blocker_works[name] = True
    attempts.clear()

    import sciperf

    errors = []
    modules = []
    def onerror(name):
        errors.append(f"{{name}}: {{sys.exc_info()[1]!r}}")
    for info in pkgutil.walk_packages(sciperf.__path__, "sciperf.", onerror=onerror):
        try:
            importlib.import_module(info.name)
            modules.append(info.name)
        except Exception as exc:
            errors.append(f"{{info.name}}: {{exc!r}}")

    from sciperf import cli
    out = io.StringIO()
    code = None
    with contextlib.redirect_stdout(out):
        try:
            cli.main(["--help"])
        except SystemExit as exc:
            code = exc.code
    help_text = out.getvalue()

    from sciperf.config import compose
    composed = {{}}
    for exp in ("mini", "full"):
        cfg = compose([f"experiment={{exp}}"])
        composed[exp] = [cfg.workload, cfg.experiment, int(cfg.model.input_size)]
    show = io.StringIO()
    with contextlib.redirect_stdout(show):
        show_rc = cli.main(["show", "experiment=full"])

    print(json.dumps({{
        "blocker_works": blocker_works,
        "modules": modules,
        "errors": errors,
        "help_code": code,
        "help": help_text,
        "verbs": sorted(cli.VERBS),
        "composed": composed,
        "show_rc": show_rc,
        "show": show.getvalue(),
        "attempts": attempts,
        "loaded": sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED),
    }}))
    """
).format(blocked=set(BLOCKED))


@pytest.fixture(scope="module")
def isolated(tmp_path_factory) -> dict:
    """Run the child interpreter once and return its JSON report."""
    cwd = tmp_path_factory.mktemp("isolated")
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_blocker_refuses_frameworks(isolated: dict) -> None:
    assert isolated["blocker_works"] == dict.fromkeys(sorted(BLOCKED), True)


def test_every_submodule_imports_without_frameworks(isolated: dict, repo_root: Path) -> None:
    assert isolated["errors"] == []
    modules = set(isolated["modules"])
    # The walk really covered the package (core modules of the documented layout).
    for name in ("sciperf.cli", "sciperf.config", "sciperf.results.mllog",
                 "sciperf.results.check", "sciperf.schedules", "sciperf.workloads.base",
                 "sciperf.workloads.cosmoflow.spec", "sciperf.workloads.cosmoflow.data",
                 "sciperf.workloads.cosmoflow.synthetic", "sciperf.data.loader",
                 "sciperf.data.sharding", "sciperf.data.tfrecord", "sciperf.tools.bench"):
        assert name in modules
    # …and every .py file under common/ was among them.
    common = repo_root / "common"
    on_disk = set()
    for path in common.rglob("*.py"):
        parts = path.relative_to(common).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        on_disk.add(".".join(("sciperf", *parts)))
    assert on_disk - {"sciperf"} <= modules


def test_no_framework_imported_or_attempted(isolated: dict) -> None:
    assert isolated["loaded"] == []
    assert isolated["attempts"] == []


def test_cli_help_lists_verbs(isolated: dict) -> None:
    assert isolated["help_code"] == 0
    help_text = isolated["help"]
    assert "usage: sciperf" in help_text
    assert {"prepare", "train", "check", "run", "show"} <= set(isolated["verbs"])
    for verb in isolated["verbs"]:
        assert f"  {verb} " in help_text, verb


def test_compose_and_show_without_frameworks(isolated: dict) -> None:
    assert isolated["composed"]["full"] == ["cosmoflow", "full", 128]
    assert isolated["composed"]["mini"][:2] == ["cosmoflow", "mini"]
    assert isolated["show_rc"] == 0
    assert "workload: cosmoflow" in isolated["show"]
    assert "experiment: full" in isolated["show"]


# --- static scan ------------------------------------------------------------------------

def framework_imports(source: str, filename: str = "<src>") -> list[str]:
    """Framework modules named by import statements or constant import_module/__import__."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if fname in ("import_module", "__import__") and isinstance(arg, ast.Constant) \
                    and isinstance(arg.value, str):
                names = [arg.value]
        found += [f"{filename}:{node.lineno}: {n}" for n in names
                  if n.split(".")[0] in BLOCKED]
    return found


def test_scanner_detects_framework_imports() -> None:
    src = textwrap.dedent(
        """
        import os
        import torch.nn as nn
        from tensorflow import keras
        def f():
            import importlib
            return importlib.import_module("keras.layers"), __import__("torch")
        from torchvision import models  # a different package: allowed
        """
    )
    hits = framework_imports(src)
    assert [h.rsplit(": ", 1)[1] for h in hits] == [
        "torch.nn", "tensorflow", "keras.layers", "torch"]


def test_common_never_imports_a_framework(repo_root: Path) -> None:
    files = list((repo_root / "common").rglob("*.py"))
    assert len(files) >= 10
    hits = []
    for path in files:
        hits += framework_imports(path.read_text(), str(path.relative_to(repo_root)))
    assert hits == []
