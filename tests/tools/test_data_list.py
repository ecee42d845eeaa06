"""`sciperf data list` and the declarations it reads (each workload's ``sources.py``).

The declarations are checked for form, since their facts are published ones no test can
fetch: every part has a source (HTTPS or Globus) and a reference, URLs are HTTPS, checksums
are hex of their digest's length, every name is a path inside data.dir, formats are the
workload's own, and the counts are the spec's constants. The listing is checked in
process: the table and the JSON document hold the same parts.
"""

from __future__ import annotations

import importlib
import json
import re
import uuid
from types import ModuleType
from urllib.parse import urlparse

import pytest

from sciperf import workloads
from sciperf.data.filemanifest import relative_name
from sciperf.data.sources import DataSources
from sciperf.tools import data_list
from sciperf.workloads.openfold import spec as openfold_spec
from testkit import cli, refused

REAL = workloads.BUILT_IN
HEX = {"md5": 32, "sha256": 64}
OTHER_FORMATS = ("checkpoint", "raw")  # parts that are not samples in a data.format
# a split is a token file the conversion writes: no published count of samples to hold
TOKEN_STREAMS = ("gpt2",)


def _module(name: str, leaf: str) -> ModuleType:
    return importlib.import_module(f"sciperf.workloads.{name}.{leaf}")


def _declared() -> dict[str, DataSources]:
    return {name: _module(name, "sources").SOURCES for name in REAL}


@pytest.mark.parametrize("name", REAL)
def test_every_part_has_a_source_a_reference_and_the_workloads_format(name: str) -> None:
    declared = _module(name, "sources").SOURCES
    dataset = workloads.get(name).dataset
    assert dataset.sources is declared, name  # the contract carries the folder's declaration
    assert declared.parts, name
    assert len({p.name for p in declared.parts}) == len(declared.parts), name
    for part in declared.parts:
        where = f"{name} part={part.name}"
        assert part.https or part.globus is not None, where
        assert part.reference and part.closed and part.mini and part.description, where
        assert part.fmt in (*dataset.formats, *OTHER_FORMATS), where
        assert set(part.samples) <= set(dataset.splits), where
        assert part.size_bytes is None or part.size_bytes > 0, where
        assert part.files is None or part.files > 0, where


@pytest.mark.parametrize("name", REAL)
def test_urls_checksums_names_and_endpoints_are_well_formed(name: str) -> None:
    for part in _module(name, "sources").SOURCES.parts:
        for remote in part.https:
            url = urlparse(remote.url)
            assert url.scheme == "https" and url.netloc and url.path, remote.url
            assert relative_name(remote.name) == remote.name, remote.name
            assert remote.size is None or remote.size > 0, remote
            for kind, length in HEX.items():
                value = getattr(remote, kind)
                assert value is None or re.fullmatch(f"[0-9a-f]{{{length}}}", value), remote
        if part.globus is not None:
            g = part.globus
            assert str(uuid.UUID(g.endpoint)) == g.endpoint, g
            assert g.path.startswith("/"), g
            assert relative_name(g.name), g


@pytest.mark.parametrize("name", REAL)
def test_counts_are_the_contracts(name: str) -> None:
    declared = _module(name, "sources").SOURCES
    w = workloads.get(name)
    if name in TOKEN_STREAMS:
        assert declared.counts == {}, name
        return
    assert declared.counts == {"train": w.train_samples, "validation": w.eval_samples}
    assert tuple(declared.counts) == tuple(w.dataset.splits)


def test_openfold_checkpoint_is_the_one_the_checker_wants() -> None:
    """The download is verified against the SHA-256 closed runs log and compliance checks
    (spec.INIT_CHECKPOINT_SHA256), saved under the reference's file name."""
    part = _module("openfold", "sources").SOURCES.part("checkpoint")
    assert [f.sha256 for f in part.https] == [openfold_spec.INIT_CHECKPOINT_SHA256]
    assert [f.name for f in part.https] == [openfold_spec.INIT_CHECKPOINT_NAME]


def _table_parts(lines: list[str]) -> dict[str, list[str]]:
    """workload → the names of the parts the table lists (the lines indented by two)."""
    found: dict[str, list[str]] = {}
    current = ""
    for line in lines:
        if line and not line.startswith(" "):
            current = line.split(":", 1)[0]
            found[current] = []
        elif line.startswith("  ") and not line.startswith("   "):
            found[current].append(line.split()[0])
    return found


def test_table_and_json_hold_the_same_parts() -> None:
    declared = _declared() | {"bare": DataSources()}
    document = json.loads(json.dumps(data_list.records(declared)))
    lines = data_list.table(declared)
    listed = _table_parts(lines)
    assert listed.keys() == document["workloads"].keys()
    for name, entry in document["workloads"].items():
        assert listed[name] == [p["name"] for p in entry["parts"]], name
        assert entry["counts"] == declared[name].counts
    assert listed["bare"] == [] and f"bare: {data_list.NONE_DECLARED}" in lines
    text = "\n".join(lines)
    for entry in document["workloads"].values():
        for part in entry["parts"]:
            for where in ([part["https"][0]["url"]] if part["https"] else []) + \
                    ([part["globus"]["endpoint"]] if part["globus"] else []):
                assert where in text, where
    # a line wider than the table is only an unbreakable URL
    assert all(len(ln) <= data_list.WIDTH or ln.strip().startswith("https://")
               for ln in lines)


def test_sizes_read_in_decimal_units() -> None:
    assert data_list.human_size(1_700_000_000_000) == "1.7 TB"
    assert data_list.human_size(179_000_000) == "179 MB"
    assert data_list.human_size(None) == "not published"


def test_run_prints_one_json_document_of_every_workload(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert data_list.run([], True) == 0
    document = json.loads(capsys.readouterr().out)
    assert tuple(document["workloads"]) == workloads.names()
    for name, entry in document["workloads"].items():
        declared = workloads.get(name).dataset.sources
        assert entry == data_list.records({name: declared})["workloads"][name]


def test_run_lists_only_the_named_workload(capsys: pytest.CaptureFixture[str]) -> None:
    assert data_list.run(["deepcam"], False) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("deepcam: ")
    assert not any(ln.startswith(("cosmoflow:", "oc20:", "openfold:")) for ln in lines)


def test_an_unknown_workload_is_one_line() -> None:
    assert "nosuch" in refused(data_list.run, ["nosuch"], False)


def test_the_command_prints_json() -> None:
    proc = cli("data", "list", "--json", "workload=oc20,openfold")
    assert proc.returncode == 0, proc.stderr
    assert list(json.loads(proc.stdout)["workloads"]) == ["oc20", "openfold"]
