"""The submission tree's layout lives in `sciperf.results.tree` alone: the other results
modules never retype its folder and file names, and a tree written by `package`'s helpers
is the tree `select` walks back, file for file."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import sciperf.results as results_pkg
from sciperf.results import tree
from sciperf.results.package import RunDir, plan, write_tree

RESULTS_DIR = Path(results_pkg.__file__).parent
# the modules that read or write the tree through `tree`, never by its names
USERS = ("score.py", "package.py", "logs.py", "report.py", "compare.py", "report_compute.py",
         "report_document.py", "report_figures.py", "report_groups.py", "report_rcp.py",
         "report_systems.py", "report_tables.py")
NAMES = {tree.RESULTS, tree.SYSTEMS, tree.SCALING, tree.STRONG, tree.WEAK, tree.RESULT_GLOB}
NV = "NVIDIA/results/eos_n64_ngc23.09_pytorch/strong/cosmoflow"
NV_SYSTEM = "NVIDIA/systems/eos_n64_ngc23.09_pytorch.json"
HPE_WEAK = "HPE+LBNL/results/perlmutter_10x128x4_ngc21.09_mxnet/weak/cosmoflow"


def _docstrings(module: ast.Module) -> set[int]:
    """ids of the docstring nodes: prose about the tree may name it."""
    found = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def tree_names_in(source: Path) -> list[tuple[int, str]]:
    """(line, literal) of every string literal of `source` (f-string parts included,
    docstrings not) that holds one of the tree's names as a word or path segment."""
    module = ast.parse(source.read_text(), filename=str(source))
    skip = _docstrings(module)
    hits = []
    for node in ast.walk(module):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            words = re.split(r"[^A-Za-z0-9_.*+-]+", node.value)
            if NAMES.intersection(words):
                hits.append((node.lineno, node.value))
    return hits


def test_the_guard_finds_the_names_where_they_are_typed():
    """tree.py types them: a scanner that found nothing there would guard nothing."""
    found = {value for _, value in tree_names_in(RESULTS_DIR / "tree.py")}
    assert found >= NAMES


@pytest.mark.parametrize("module", USERS)
def test_no_other_results_module_retypes_the_tree_names(module):
    hits = tree_names_in(RESULTS_DIR / module)
    assert hits == [], f"{module} types the submission tree's names; use sciperf.results.tree"


def test_a_tree_written_by_package_is_walked_back_by_select(published_results, tmp_path):
    v30 = published_results / "v3.0"
    strong = sorted((v30 / NV).glob(tree.RESULT_GLOB), key=tree.result_index)[:3]
    weak = sorted((v30 / HPE_WEAK).glob(tree.RESULT_GLOB), key=tree.result_index)
    runs = [RunDir(log.parent, [{"benchmark": "cosmoflow"}], [log]) for log in strong]
    runs.append(RunDir(weak[0].parent, [{"benchmark": "cosmoflow", "instances": len(weak)}],
                       weak))
    desc = json.loads((v30 / NV_SYSTEM).read_text()) | {"system_name": "sys"}
    org = tmp_path / "org"
    write_tree(org, "sys", plan(runs), desc)

    written = [tree.result_dir(org, "sys", mode, "cosmoflow") / tree.result_name(i)
               for mode, logs in ((tree.STRONG, strong), (tree.WEAK, weak))
               for i in range(len(logs))]
    system_folder = written[0].parent.parent.parent
    for target in (org, system_folder.parent, system_folder):  # any level of the tree
        sel = tree.select([target])
        assert sel.files == [p.resolve() for p in written], target
        assert sel.lines() == []  # nothing stray, the description is where the rules want it
    assert [p.read_bytes() for p in written] == [p.read_bytes() for p in strong + weak]
    assert json.loads(tree.system_json(org, "sys").read_text()) == desc
    places = {tree.tree_place(p) for p in written}
    assert places == {tree.TreePlace(org.resolve(), "sys", mode, "cosmoflow")
                      for mode in tree.MODES}
