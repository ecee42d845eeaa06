"""`sciperf data`'s command line: the action first, its own words apart from the overrides.

A missing or unknown action, a subset without a folder or a count, a count that is not a
whole number of samples, a word given twice: each one line before anything is read or
written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit import cli, one_error_line


@pytest.mark.parametrize(("words", "says"), [
    ((), "no action given: need one of list, download, verify, convert, subset"),
    (("fetch",), "`fetch` is not one of list, download, verify, convert, subset"),
    (("list", "workload=nosuch"), "workload=nosuch is not one of"),
    (("subset", "workload=deepcam", "train=4"), "subset needs --out DIR"),
    (("subset", "workload=deepcam", "--out", "{tmp}/s"), "subset needs a count per split"),
    (("subset", "workload=deepcam", "--out", "{tmp}/s", "train=four"),
     "train=four: a sample count must be a whole number"),
    (("subset", "workload=deepcam", "--out", "{tmp}/s", "train=0"),
     "train=0: a subset needs at least one sample per split"),
    (("download", "workload=deepcam", "mirror=http://127.0.0.1:1/", "mirror=http://127.0.0.1:2/"),
     "mirror= given 2 times; give it once"),
    (("download", "workload=deepcam", "--connections", "0"), "--connections 0: need at least 1"),
])
def test_a_bad_command_line_is_one_line(tmp_path: Path, words: tuple[str, ...],
                                        says: str) -> None:
    argv = [w.replace("{tmp}", str(tmp_path)) for w in words]
    line = one_error_line(cli("data", *argv, f"data.dir={tmp_path / 'd'}"
                              if words and words[0] != "list" else "--json", cwd=tmp_path),
                          "data")
    assert says in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []
