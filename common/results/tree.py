"""The MLPerf HPC submission tree: its folder and file names, where a file sits in it, and
which of its files mlperf-logging's result summarizer reads.

    <org>/results/<system>/{strong,weak}/<benchmark>/result_<i>.txt  (+ scaling.json)
    <org>/systems/<system>.json

This module is the only one that names the tree's folders and files: `package` writes the
tree through `result_dir`, `result_name` and `system_json`, `score` selects what to score
with `select`, and `logs` / `report` tell a tree's logs from our run directories with
`tree_place`. A test fails when another results module retypes a name.

Inside a submission tree only what the summarizer reads is scored: the folders of
`results/` whose `systems/<system>.json` exists, their `strong/` and `weak/`, the benchmark
folders there and, in each, `result_*.txt` (and `scaling.json`). Anything else — a stray
sub-folder such as `pruned_results/`, a README, a description without results — is named in
one "skipped" line instead of becoming a group of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sciperf.errors import SciperfError

RESULTS, SYSTEMS, SCALING = "results", "systems", "scaling.json"
STRONG, WEAK = "strong", "weak"
MODES = (STRONG, WEAK)
RESULT_GLOB = "result_*.txt"
DESCRIPTION = ".json"  # systems/<system>.json
LAYOUT = f"{RESULTS}/<system>/{{{STRONG},{WEAK}}}/<benchmark>/{RESULT_GLOB}"
OUTLINE = f"{RESULTS}/<system>/…, {SYSTEMS}/<system>{DESCRIPTION}"  # the tree in one phrase
ORG, RESULTS_DIR, SYSTEM, MODE, BENCHMARK, BELOW = range(6)  # depths in a submission tree


def result_dir(org: Path, system: str, mode: str, benchmark: str) -> Path:
    """The folder of one system's runs of `benchmark` in `mode` (strong or weak)."""
    return org / RESULTS / system / mode / benchmark


def result_name(index: int) -> str:
    """The file name of the run numbered `index` in a result folder."""
    return f"result_{index}.txt"


def result_index(path: Path) -> tuple[int, str]:
    """Sort key of a result file: its number, files without one last, by name."""
    tail = path.stem.split("_", 1)[-1]
    return (int(tail), path.name) if tail.isdigit() else (1 << 30, path.name)


def system_json(org: Path, system: str) -> Path:
    """The system description the summarizer needs before it reads results/<system>/."""
    return org / SYSTEMS / f"{system}{DESCRIPTION}"


@dataclass(frozen=True)
class TreePlace:
    """Where a file sits in a submission tree: <org>/results/<system>/<mode>/<benchmark>/."""

    org_dir: Path
    system: str
    mode: str
    benchmark: str


def tree_place(path: Path) -> TreePlace | None:
    """The submission-tree coordinates of a result file, None outside such a tree."""
    parts = path.resolve().parts
    if len(parts) >= 6 and parts[-5] == RESULTS and parts[-3] in MODES:
        return TreePlace(Path(*parts[:-5]), parts[-4], parts[-3], parts[-2])
    return None


# --- which files are scored: the summarizer's folder rules ------------------------------------

@dataclass(frozen=True)
class Skipped:
    """Something under a scored folder that the summarizer does not score, and why: named
    once, so a stray folder neither becomes a group of its own nor vanishes silently."""

    path: Path
    why: str

    def line(self) -> str:
        return f"skipped {self.path}: {self.why}"


@dataclass
class Selection:
    """The result files the folder rules keep, and the lines about what they leave out."""

    files: list[Path] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def skip(self, path: Path, why: str) -> None:
        self.skipped.append(Skipped(path, why))

    def lines(self) -> list[str]:
        """One line per skipped thing (first mention of a path wins), then the notes."""
        seen: dict[Path, Skipped] = {}
        for item in self.skipped:
            seen.setdefault(item.path.resolve(), item)
        return [s.line() for s in seen.values()] + list(dict.fromkeys(self.notes))


def _not_layout(detail: str) -> str:
    return f"outside the summarizer's layout ({detail})"


def _entries(folder: Path) -> list[Path]:
    """A folder's entries by name, the order the summarizer lists them in."""
    try:
        return sorted(folder.iterdir())
    except OSError as exc:
        raise SciperfError(f"cannot list {folder}: {exc.strerror or exc}") from None


def _is_tree_results(folder: Path) -> bool:
    """Whether `folder` is the results/ of a submission tree: beside a systems/ folder, or
    holding <system>/strong|weak/ — our own run directories may sit in a results/ too."""
    if folder.name != RESULTS or not folder.is_dir():
        return False
    if (folder.parent / SYSTEMS).is_dir():
        return True
    return any((system / mode).is_dir() for system in _entries(folder) for mode in MODES)


def _tree_depth(folder: Path) -> int | None:
    """Where a folder sits in a submission tree (ORG … BENCHMARK, BELOW for anything inside
    a benchmark folder), None outside any tree: a target may be any folder of a tree."""
    real = folder.resolve()
    if _is_tree_results(real / RESULTS):
        return ORG
    chain = [real, *real.parents]
    for index, top in enumerate(chain):
        depth = index + RESULTS_DIR
        mode_ok = depth < MODE or chain[depth - MODE].name in MODES
        if top.name == RESULTS and mode_ok and _is_tree_results(top):
            return min(depth, BELOW)
    return None


def _walk_generic(folder: Path, sel: Selection) -> None:
    """Outside a submission tree (our run directories) every result_*.txt below counts;
    a submitter's folder met on the way is read by the summarizer's rules."""
    if _is_tree_results(folder / RESULTS):
        _walk_org(folder, sel)
        return
    for entry in _entries(folder):
        if entry.is_dir() and not entry.is_symlink():
            _walk_generic(entry, sel)
        elif entry.is_file() and entry.match(RESULT_GLOB):
            sel.files.append(entry)


def _walk_org(org: Path, sel: Selection) -> None:
    """A submitter's folder: the summarizer reads its results/ and systems/ only."""
    for entry in _entries(org):
        if entry.name == RESULTS and entry.is_dir():
            _walk_results(entry, sel)
        elif entry.name == SYSTEMS and entry.is_dir():
            _walk_systems(entry, sel)
        else:
            sel.skip(entry, _not_layout("a submitter's folder is read only for results/ "
                                        "and systems/"))


def _walk_systems(systems: Path, sel: Selection) -> None:
    """Descriptions are read for the systems found in results/; any other file scores nothing."""
    results = systems.resolve().parent / RESULTS  # resolved: a target may be "."
    for entry in _entries(systems):
        if entry.suffix != DESCRIPTION or not entry.is_file():
            sel.skip(entry, "not a system description (systems/<system>.json)")
        elif not (results / entry.stem).is_dir():
            sel.skip(entry, f"no results/{entry.stem}/ folder: a system description without "
                            "results scores nothing")


def _walk_results(results: Path, sel: Selection) -> None:
    """Each folder of results/ is a system; a file there is nobody's result."""
    for entry in _entries(results):
        if entry.is_dir():
            _walk_system(entry, sel)
        else:
            sel.skip(entry, _not_layout("results/ is read only for its system folders"))


def _description_problem(system: Path, sel: Selection) -> str | None:
    """Why the summarizer passes over a system ('ERROR: Missing systems/<system>.json'),
    None when it reads it. A bare results/ without any systems/ (hand-made or test trees)
    is still scored by its folders, with a note, as sciperf always did."""
    real = system.resolve()  # a target may be "."
    org = real.parent.parent
    systems = org / SYSTEMS
    if not systems.is_dir():
        sel.notes.append(f"note: {systems.parent} has no systems/ folder: the summarizer "
                         "would skip its systems; scored by the folder layout alone")
        return None
    if not system_json(org, real.name).exists():
        return (f"no systems/{real.name}.json: the summarizer skips a system without "
                "its description")
    return None


def _walk_system(system: Path, sel: Selection) -> None:
    """A system folder: its strong/ and weak/ are read, when its description exists."""
    problem = _description_problem(system, sel)
    if problem:
        sel.skip(system, problem)
        return
    for entry in _entries(system):
        if entry.name in MODES and entry.is_dir():
            _walk_mode(entry, sel)
        else:
            sel.skip(entry, _not_layout("a system folder is read only for strong/ and weak/"))


def _walk_mode(mode: Path, sel: Selection) -> None:
    """strong/ or weak/: every sub-folder is a benchmark folder, files are ignored."""
    for entry in _entries(mode):
        if entry.is_dir():
            _walk_benchmark(entry, sel)
        else:
            sel.skip(entry, _not_layout(f"{mode.resolve().name}/ is read only for its "
                                        "benchmark folders"))


def _walk_benchmark(bench: Path, sel: Selection) -> None:
    """A benchmark folder: its own result_*.txt are the runs (the summarizer's glob does not
    descend) and scaling.json its factor; sub-folders and other files are not read."""
    for entry in _entries(bench):
        if entry.is_file() and entry.match(RESULT_GLOB):
            sel.files.append(entry)
        elif entry.name != SCALING or not entry.is_file():
            sel.skip(entry, _not_layout("a benchmark folder is read only for its own "
                                        "result_*.txt and scaling.json"))


WALKERS = {ORG: _walk_org, RESULTS_DIR: _walk_results, SYSTEM: _walk_system, MODE: _walk_mode,
           BENCHMARK: _walk_benchmark}


def _select_folder(folder: Path, sel: Selection) -> None:
    """A folder target, read by the rules of the level it sits at in its tree (if any)."""
    depth = _tree_depth(folder)
    if depth is None:
        _walk_generic(folder, sel)
    elif depth == BELOW:
        sel.skip(folder, _not_layout(f"inside a benchmark folder; it reads {LAYOUT}"))
    else:
        WALKERS[depth](folder, sel)


def _select_file(path: Path, sel: Selection) -> None:
    """A file target: scored as named, unless a tree's rules say the summarizer ignores it."""
    depth = _tree_depth(path.parent)
    if depth is None or (depth == BENCHMARK and path.match(RESULT_GLOB)):
        sel.files.append(path)
    else:
        sel.skip(path, _not_layout(f"it reads {LAYOUT}"))


def select(targets: Sequence[str | Path]) -> Selection:
    """The result files under `targets` that the summarizer would score (stable order:
    folder, then result index), and what it would skip. A target yielding no result file
    is a user error."""
    if not targets:
        raise SciperfError("name at least one result file or directory")
    sel = Selection()
    for target in targets:
        path, part = Path(target), Selection()
        if path.is_file():
            _select_file(path, part)
        elif path.is_dir():
            _select_folder(path, part)
        else:
            raise SciperfError(f"no such file or directory: {path}")
        if not part.files:
            raise SciperfError(_nothing_under(path, part))
        sel.files += sorted(part.files, key=lambda p: (str(p.parent), result_index(p)))
        sel.skipped += part.skipped
        sel.notes += part.notes
    sel.files = list(dict.fromkeys(p.resolve() for p in sel.files))
    return sel


def _nothing_under(path: Path, part: Selection) -> str:
    """The one-line error for a target that gives nothing to score, with the first reason."""
    if path.is_file():
        return f"{path} is not scored: {part.skipped[0].why}"
    why = f" that the summarizer scores: {part.skipped[0].line()}" if part.skipped else ""
    return f"no {RESULT_GLOB} MLLOG files under {path}{why}"
