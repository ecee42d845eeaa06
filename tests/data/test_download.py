"""`sciperf data download` against a real HTTP server on 127.0.0.1 (tests/data/httpserver.py):
files fetched, checked and recorded; a dropped connection or a killed download resumed
from where it stopped; several connections giving the same bytes as one; and every
refusal — HTTP errors, wrong size, wrong checksum, corrupt or unsafe archives, a full
disk, a read-only folder, a user's file under a published name, too little space — one
line naming the file, nothing under a finished name that is not the published file.

The files are declared at https://data.example.org/… and served through `mirror=`, the
`wget -x` layout a site's mirror has, so the mirror's mapping is tested by every case.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import resource
import subprocess
import sys
import tarfile
import textwrap
import urllib.parse
from pathlib import Path

import pytest
from data.httpserver import Fault, FileServer, write_file

from sciperf.data import filemanifest
from sciperf.data.download import MIN_RANGE, part_of, state_of
from sciperf.data.sources import DataPart, DataSources, GlobusPath, RemoteFile
from sciperf.data.unpack import unpacked_marker
from sciperf.tools.data_download import download
from testkit import cli, one_error_line, refused

HOST = "data.example.org"
FAST = {"backoff_s": 0.001}  # retries without the real backoff's seconds


def _bytes(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tar(members: dict[str, bytes], links: dict[str, str] | None = None,
         mode: str = "w:gz") -> bytes:
    """A tar archive of `members` (name → bytes) and symbolic `links` (name → target)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return out.getvalue()


class Site:
    """The server's folder, laid out as the mirror of https://data.example.org/."""

    def __init__(self, server: FileServer, folder: Path):
        self.server, self.folder = server, folder

    def publish(self, name: str, data: bytes, *, sizes: bool = True, sha256: bool = True,
                md5: bool = False, unpack: bool = False) -> RemoteFile:
        """`data` served as dataset/`name`; its declaration with the facts asked for."""
        write_file(self.folder / HOST / "dataset", name, data)
        return RemoteFile(url=f"https://{HOST}/dataset/{name}", name=name,
                          size=len(data) if sizes else None,
                          sha256=_sha(data) if sha256 else None,
                          md5=hashlib.md5(data).hexdigest() if md5 else None, unpack=unpack)

    def path(self, name: str) -> str:
        """The path the server sees for dataset/`name`."""
        return f"/{HOST}/dataset/{name}"

    def fault(self, name: str, **how: object) -> None:
        self.server.faults[self.path(name)] = Fault(**how)  # type: ignore[arg-type]

    def gets(self, name: str) -> list[str | None]:
        return self.server.ranges(self.path(name))


@pytest.fixture
def site(tmp_path: Path):
    with FileServer(tmp_path / "srv") as server:
        yield Site(server, tmp_path / "srv")


def _sources(*files: RemoteFile, globus: GlobusPath | None = None) -> DataSources:
    return DataSources(parts=(DataPart(name="train", description="", fmt="npy",
                                       https=files, globus=globus),))


def _get(site: Site, root: Path, *files: RemoteFile, **kw: object) -> int:
    return download(_sources(*files), root, [], mirror=site.server.root,
                    **(FAST | kw))  # type: ignore[arg-type]


def _nothing_finished(root: Path, *names: str) -> None:
    """No file took a published name, no .part was left complete under one."""
    for name in names:
        assert not (root / name).exists(), name


# -- downloads that succeed -----------------------------------------------------------------

def test_download_checks_records_unpacks_and_skips_on_rerun(site: Site, tmp_path: Path,
                                                            capsys) -> None:
    """A file (md5 and sha256 published) and a tar.gz archive: both land under their names,
    recorded with their sha256; the archive is unpacked into data.dir. A second run finds
    everything there and asks the server for nothing."""
    data = _bytes(300_000)
    members = {"train/a.npy": b"a" * 1000, "train/b.npy": b"b" * 2000}
    archive = _tar(members)
    root = tmp_path / "data"
    files = (site.publish("x.bin", data, md5=True), site.publish("set.tar.gz", archive,
                                                                 unpack=True))
    assert _get(site, root, *files) == 0
    assert (root / "x.bin").read_bytes() == data
    for name, content in members.items():
        assert (root / name).read_bytes() == content
    records = filemanifest.read(root)
    assert records["x.bin"]["sha256"] == _sha(data)
    assert records["set.tar.gz"]["sha256"] == _sha(archive)
    assert records["x.bin"]["source"] == f"https://{HOST}/dataset/x.bin"
    assert json.loads(unpacked_marker(root / "set.tar.gz").read_text())["top"] == ["train"]
    assert not list(root.rglob("*.part*")) and not list(root.glob(".*.unpacking"))
    assert site.gets("x.bin") == [None]  # the mirror's layout: /<host>/<path>
    assert "2 file(s) fetched" in capsys.readouterr().out

    site.server.requests.clear()
    assert _get(site, root, *files) == 0
    assert site.server.requests == []
    assert "2 already there" in capsys.readouterr().out


def test_dropped_connection_resumes_from_where_it_stopped(site: Site, tmp_path: Path) -> None:
    """The server cuts the body halfway: the retry asks for the rest (Range) and the
    file is whole, each byte sent once."""
    data = _bytes(200_000)
    remote = site.publish("x.bin", data)
    site.fault("x.bin", drop_after=100_000)
    assert _get(site, tmp_path / "d", remote, connections=1) == 0
    assert (tmp_path / "d" / "x.bin").read_bytes() == data
    assert site.gets("x.bin") == [None, "bytes=100000-"]
    assert site.server.sent[site.path("x.bin")] == len(data)


def test_killed_download_resumes_and_a_server_without_ranges_restarts(site: Site,
                                                                      tmp_path: Path) -> None:
    """A `.part` left by a killed run continues from its length; when the server answers
    the range with the whole file (200), the file starts again from zero."""
    data = _bytes(100_000)
    remote = site.publish("x.bin", data)
    root = tmp_path / "d"
    root.mkdir()
    part_of(root / "x.bin").write_bytes(data[:60_000])
    assert _get(site, root, remote, connections=1) == 0
    assert site.gets("x.bin") == ["bytes=60000-"]
    assert site.server.sent[site.path("x.bin")] == 40_000
    assert (root / "x.bin").read_bytes() == data

    other = tmp_path / "e"
    other.mkdir()
    part_of(other / "x.bin").write_bytes(b"\0" * 60_000)  # not a prefix of this file
    site.fault("x.bin", ignore_range=True)
    assert _get(site, other, remote, connections=1) == 0
    assert (other / "x.bin").read_bytes() == data


def test_four_connections_give_the_bytes_one_gives_and_resume_each_range(
        site: Site, tmp_path: Path) -> None:
    """4 connections fetch 4 ranges side by side into the same bytes as 1 connection. A
    split download that fails keeps its ranges' progress (.part.json), and the next run
    asks each range only for what it lacks."""
    data = _bytes(4 * MIN_RANGE + 12_345)
    remote = site.publish("big.bin", data)
    assert _get(site, tmp_path / "one", remote, connections=1) == 0
    site.server.requests.clear()
    assert _get(site, tmp_path / "four", remote, connections=4) == 0
    ranges = [r for r in site.gets("big.bin") if r != "bytes=0-0"]  # the probe
    assert len(ranges) == 4 and len({r.split("-")[0] for r in ranges}) == 4
    assert (tmp_path / "four" / "big.bin").read_bytes() == \
        (tmp_path / "one" / "big.bin").read_bytes() == data
    assert filemanifest.read(tmp_path / "four")["big.bin"]["sha256"] == _sha(data)

    site.server.requests.clear()
    site.fault("big.bin", drop_after=500_000, drops=4)
    root = tmp_path / "resumed"
    line = refused(_get, site, root, remote, connections=4, retries=0)
    assert "connection lost" in line and "run again to resume" in line
    assert state_of(root / "big.bin").is_file() and not (root / "big.bin").exists()
    saved = json.loads(state_of(root / "big.bin").read_text())["ranges"]
    assert any(done for _, _, done in saved)
    site.server.sent.clear()
    site.server.faults.clear()
    site.server.requests.clear()
    assert _get(site, root, remote, connections=4) == 0
    assert (root / "big.bin").read_bytes() == data
    assert not state_of(root / "big.bin").exists()
    resumed = sorted(int(r.split("=")[1].split("-")[0]) for r in site.gets("big.bin"))
    assert resumed == sorted(start + done for start, end, done in saved if start + done < end)
    assert site.server.sent[site.path("big.bin")] == \
        len(data) - sum(done for _, _, done in saved)


def test_server_errors_are_retried_with_backoff_then_given_up(site: Site,
                                                             tmp_path: Path) -> None:
    data = _bytes(10_000)
    remote = site.publish("x.bin", data)
    site.fault("x.bin", status=503, statuses=2)
    assert _get(site, tmp_path / "a", remote, connections=1, retries=2) == 0
    assert (tmp_path / "a" / "x.bin").read_bytes() == data
    site.fault("x.bin", status=503)
    line = refused(_get, site, tmp_path / "b", remote, connections=1, retries=2)
    assert "HTTP 503" in line and "gave up after 2 retries" in line and HOST in line
    assert len(site.gets("x.bin")) == 3 + 3
    _nothing_finished(tmp_path / "b", "x.bin", "x.bin.part")


# -- refusals -------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["404", "403", "wrong size", "checksum", "corrupt archive",
                                  "member outside", "link outside"])
def test_a_bad_file_is_one_line_and_never_takes_its_name(site: Site, tmp_path: Path,
                                                        case: str) -> None:
    data = _bytes(50_000)
    unpack = case in ("corrupt archive", "member outside", "link outside")
    if case == "member outside":
        data = _tar({"ok.txt": b"fine", "../evil.txt": b"gotcha"})
    elif case == "link outside":
        data = _tar({"ok.txt": b"fine"}, links={"passwd": "/etc/passwd"})
    remote = site.publish("x.tar" if unpack else "x.bin", data, unpack=unpack)
    if case == "wrong size":
        remote = RemoteFile(remote.url, remote.name, size=len(data) + 7)
    elif case in ("404", "403"):
        site.fault(remote.name, status=int(case))
    elif case == "checksum":
        site.fault(remote.name, wrong=True)
    root = tmp_path / "data"
    line = refused(_get, site, root, remote, connections=1)
    expect = {"404": "HTTP 404", "403": "HTTP 403", "wrong size": "published",
              "checksum": "does not match the published", "corrupt archive": "corrupt archive",
              "member outside": "unsafe member", "link outside": "unsafe member"}[case]
    assert expect in line and remote.name in line, line
    _nothing_finished(root, remote.name, remote.name + ".part", "ok.txt", "passwd", "evil.txt")
    assert not (tmp_path / "evil.txt").exists()
    assert not list(root.glob(".*.unpacking")) and not list(root.glob(".*.unpacked.json"))


def test_corrupt_archive_without_gzip(site: Site, tmp_path: Path) -> None:
    """A plain tar cut short (no checksum published to catch it) fails while unpacking."""
    archive = _tar({"a.npy": _bytes(20_000)}, mode="w")[:15_000]
    remote = site.publish("cut.tar", archive, sha256=False, unpack=True)
    line = refused(_get, site, tmp_path / "d", remote, connections=1)
    assert "corrupt archive" in line and "cut.tar" in line
    _nothing_finished(tmp_path / "d", "cut.tar", "cut.tar.part", "a.npy")


def test_a_users_file_is_never_replaced_without_force(site: Site, tmp_path: Path) -> None:
    """A file of the user's under a published name is refused before any request; with
    force it is replaced by the published file."""
    data = _bytes(20_000)
    remote = site.publish("x.bin", data)
    root = tmp_path / "d"
    root.mkdir()
    (root / "x.bin").write_bytes(b"mine")
    line = refused(_get, site, root, remote)
    assert str(root / "x.bin") in line and "force" in line
    assert (root / "x.bin").read_bytes() == b"mine" and site.server.requests == []
    assert _get(site, root, remote, force=True) == 0
    assert (root / "x.bin").read_bytes() == data


def test_unknown_part_and_too_little_space_are_refused_first(site: Site,
                                                             tmp_path: Path) -> None:
    remote = site.publish("x.bin", b"tiny")
    line = refused(download, _sources(remote), tmp_path, ["nope"])
    assert "part=nope" in line and "train" in line
    huge = RemoteFile(remote.url, "huge.bin", size=1 << 62)
    line = refused(_get, site, tmp_path / "d", huge)
    assert f"data.dir={tmp_path / 'd'}" in line and str(1 << 62) in line and "free" in line
    assert site.server.requests == []


def test_full_disk_is_one_line_and_the_part_resumes(site: Site, tmp_path: Path) -> None:
    """A file-size limit (the kernel's EFBIG, as a quota or a full disk refuses a write)
    stops the download in one line; the `.part` stays and the next run resumes it."""
    data = _bytes(3 * MIN_RANGE)
    remote = site.publish("x.bin", data)
    root = tmp_path / "d"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (MIN_RANGE, hard))
    try:
        line = refused(_get, site, root, remote, connections=1)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert str(root / "x.bin") in line and "disk full" in line
    assert part_of(root / "x.bin").stat().st_size == MIN_RANGE
    _nothing_finished(root, "x.bin")
    assert _get(site, root, remote, connections=1) == 0
    assert site.gets("x.bin")[-1] == f"bytes={MIN_RANGE}-"
    assert (root / "x.bin").read_bytes() == data


def test_read_only_folder_is_one_line(site: Site, tmp_path: Path) -> None:
    """A folder that refuses writes. Root writes through mode 0555, so the download runs
    in a process whose capabilities lack CAP_DAC_OVERRIDE, as a user's would."""
    remote = site.publish("x.bin", _bytes(1000))
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o555)
    code = textwrap.dedent(f"""
        import sys
        from sciperf.data.sources import *
        from sciperf.errors import SciperfError
        from sciperf.tools.data_download import download
        sources = DataSources(parts=(DataPart("train", "", "npy", https=({remote!r},)),))
        try:
            download(sources, __import__("pathlib").Path({str(root)!r}), [],
                     mirror={site.server.root!r})
        except SciperfError as exc:
            sys.exit(f"error: {{exc}}")
    """)
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, preexec_fn=_without_dac_override)
    except subprocess.SubprocessError as exc:
        pytest.skip(f"cannot drop CAP_DAC_OVERRIDE for the download's process ({exc})")
    finally:
        root.chmod(0o755)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert str(root) in lines[0] and "cannot be written" in lines[0]
    assert sorted(os.listdir(root)) == [] and site.server.requests == []


def _without_dac_override() -> None:
    """In the child before exec: root's CAP_DAC_OVERRIDE out of the bounding set, so the
    program it runs honours file modes (nothing to do for another user)."""
    if os.geteuid() != 0:
        return
    import ctypes

    pr_capbset_drop, cap_dac_override = 24, 1
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_capbset_drop, cap_dac_override, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


# -- Globus -----------------------------------------------------------------------------------

GLOBUS = GlobusPath(endpoint="31647fba-a006-4322-ad3e-9a4f124db422", path="/sets/full/",
                    name="full")


def test_globus_only_part_prints_the_transfer_and_exits_1(tmp_path: Path, capsys,
                                                          monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-globus-here"))
    assert download(_sources(globus=GLOBUS), tmp_path / "d", []) == 1
    out = capsys.readouterr().out
    assert (f"globus transfer {GLOBUS.endpoint}:/sets/full/ LOCAL_ENDPOINT:"
            f"{tmp_path / 'd' / 'full'} --recursive --label 'sciperf train'") in out
    assert "globus endpoint local-id" in out
    assert "not fetched: train (Globus only" in out


def test_globus_transfer_is_submitted_when_the_cli_is_logged_in(tmp_path: Path, capsys,
                                                                monkeypatch) -> None:
    """A `globus` on PATH that is logged in and knows its local endpoint: the transfer is
    submitted (the stand-in records its arguments), and the part is still not here."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    fake = bin_dir / "globus"
    fake.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        echo "$@" >> {calls}
        case "$1 $2" in
          "endpoint local-id") echo 0bad0bad-0000-4000-8000-000000000001 ;;
          "transfer "*) echo "Task ID: 7777" ;;
        esac
        """))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert download(_sources(globus=GLOBUS), tmp_path / "d", []) == 1
    out = capsys.readouterr().out
    said = calls.read_text().splitlines()
    assert said[:2] == ["whoami", "endpoint local-id"]
    assert said[2] == (f"transfer {GLOBUS.endpoint}:/sets/full/ 0bad0bad-0000-4000-8000-"
                       f"000000000001:{tmp_path / 'd' / 'full'} --recursive --label "
                       "sciperf train")
    assert "Globus transfer submitted" in out and "globus task wait 7777" in out


def test_unpacking_never_replaces_a_users_file(site: Site, tmp_path: Path) -> None:
    """An archive whose member would replace a different file of the user's: refused after
    the download, the user's file intact, the complete `.part` kept — the next run, the
    file moved away, fetches nothing more and unpacks."""
    archive = _tar({"train/a.npy": b"new", "train/b.npy": b"same"})
    remote = site.publish("set.tar.gz", archive, unpack=True)
    root = tmp_path / "d"
    (root / "train").mkdir(parents=True)
    (root / "train" / "a.npy").write_bytes(b"mine")
    (root / "train" / "b.npy").write_bytes(b"same")  # the same content is no clash
    line = refused(_get, site, root, remote, connections=1)
    assert str(root / "train" / "a.npy") in line and "--force" in line
    assert (root / "train" / "a.npy").read_bytes() == b"mine"
    assert part_of(root / "set.tar.gz").stat().st_size == len(archive)
    _nothing_finished(root, "set.tar.gz")
    (root / "train" / "a.npy").rename(tmp_path / "moved.npy")
    site.server.requests.clear()
    assert _get(site, root, remote, connections=1) == 0
    assert site.server.requests == []  # the .part holds the published size
    assert (root / "train" / "a.npy").read_bytes() == b"new"


def test_the_command_fetches_a_workloads_part_through_a_mirror(site: Site,
                                                               tmp_path: Path) -> None:
    """`sciperf data download` end to end: CosmoFlow's small part, as a site's mirror
    serves it (its declaration publishes no size or checksum), fetched and unpacked; an
    unknown part is rule 10's one line."""
    from sciperf.workloads.cosmoflow.sources import SMALL

    remote = SMALL.https[0]
    where = urllib.parse.urlsplit(remote.url)
    write_file(site.folder, where.netloc + where.path,
               _tar({"cosmoUniverse_2019_05_4parE_tf_small/train/a.tfrecord": b"x" * 100}))
    root = tmp_path / "data"
    proc = cli("data", "download", "workload=cosmoflow", "part=small", f"data.dir={root}",
               f"mirror={site.server.root}/")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "part small: 1 file(s) fetched" in proc.stdout
    assert (root / "cosmoUniverse_2019_05_4parE_tf_small" / "train" / "a.tfrecord").is_file()
    assert remote.name in filemanifest.read(root)
    line = one_error_line(cli("data", "download", "workload=cosmoflow", "part=huge",
                              f"data.dir={root}"), "data")
    assert "part=huge" in line and "small" in line
