"""`sciperf data download`: the parts of a workload's dataset, fetched into ``data.dir``.

Everything that can be refused is refused before the first byte: an unknown part, a file
already there under a published name that is not the published file (the user's, never
overwritten without `force`), a folder that cannot take writes, too little free space.
Then each HTTPS file is fetched (``sciperf.data.download``: resumed, split over
connections, checked), recorded in ``sciperf_files.json`` and, when it is an archive,
unpacked; a Globus-only part gets its `globus transfer` command, run when the Globus CLI
is logged in and a local endpoint is up. A file already there and checked is skipped, so
running the same command again finishes what a killed one left.
"""

from __future__ import annotations

import datetime
import json
import re
import shlex
import shutil
import subprocess
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sciperf import jsondata
from sciperf.data import atomic, filemanifest
from sciperf.data.byte_progress import human
from sciperf.data.download import fetch, mirrored
from sciperf.data.layout import check_output_dir
from sciperf.data.part_file import held
from sciperf.data.sources import DataPart, DataSources, RemoteFile
from sciperf.data.unpack import unpack, unpacked_marker
from sciperf.errors import SciperfError

LOCAL_ENDPOINT = "LOCAL_ENDPOINT"  # the placeholder of a printed `globus transfer`
GLOBUS_TIMEOUT_S = 120


@dataclass
class _File:
    """One HTTPS file of a part and what this download does with it."""

    part: DataPart
    remote: RemoteFile
    dest: Path
    todo: str  # "fetch", "unpack" (the archive is there, not unpacked) or "there"


def run(cfg: Any, parts: list[str], connections: int, mirror: str | None,
        force: bool) -> int:
    """`sciperf data download workload=… part=… data.dir=…`."""
    from sciperf.workloads import get

    return download(get(cfg.workload).dataset.sources, Path(str(cfg.data.dir)), parts,
                    connections=connections, mirror=mirror, force=force)


def download(sources: DataSources, root: Path, parts: list[str], *, connections: int = 4,
             mirror: str | None = None, force: bool = False, retries: int = 5,
             backoff_s: float = 1.0) -> int:
    """Fetch `parts` (all when empty) into `root`; one summary line per part. Returns 0
    when everything is there, 1 when a part is left (Globus only, nothing published)."""
    if connections < 1:
        raise SciperfError(f"--connections {connections}: need at least 1")
    if mirror is not None and urllib.parse.urlsplit(mirror).scheme not in ("http", "https"):
        raise SciperfError(f"mirror={mirror} is not an http:// or https:// URL")
    chosen = _chosen(sources, parts)
    root = root.absolute()
    records = filemanifest.read(root) if root.is_dir() else {}
    files = [_plan(root, part, remote, records, force)
             for part in chosen for remote in part.https]
    if any(f.todo != "there" for f in files):
        check_output_dir(root, "data.dir=")
        _check_space(root, [f for f in files if f.todo != "there"])
    left = []
    for part in chosen:
        if part.https:
            _fetch_part(root, part, [f for f in files if f.part is part], connections,
                        mirror, force, retries, backoff_s)
        elif part.globus is not None:
            left.append(f"{part.name} ({_globus(root, part)})")
        else:
            print(f"part {part.name}: no download is published for it")
            left.append(f"{part.name} (nothing published to download)")
    if left:
        print(f"not fetched: {'; '.join(left)}")
        return 1
    return 0


def _chosen(sources: DataSources, parts: list[str]) -> list[DataPart]:
    """The parts asked for, in the order given, each once (all when none is named)."""
    if not sources.parts:
        raise SciperfError("this workload publishes no dataset to download")
    if not parts:
        return list(sources.parts)
    chosen: list[DataPart] = []
    for name in parts:
        try:
            part = sources.part(name)
        except ValueError as exc:
            raise SciperfError(str(exc)) from None
        if part not in chosen:
            chosen.append(part)
    return chosen


# -- what is there already ----------------------------------------------------------------

def _plan(root: Path, part: DataPart, remote: RemoteFile,
          records: dict[str, dict[str, Any]], force: bool) -> _File:
    """What to do with one file: "there" when it (or, for an archive, its unpacked
    contents) is the published file; a file under its name that is not is refused
    unless `force`."""
    try:
        name = filemanifest.relative_name(remote.name)
    except ValueError as exc:
        raise SciperfError(f"part {part.name}: {exc}") from None
    dest = root / name
    if remote.unpack and _unpacked(dest, remote):
        return _File(part, remote, dest, "there")
    if not (dest.exists() or dest.is_symlink()):
        return _File(part, remote, dest, "fetch")
    differs = _differs(root, name, dest, remote, records.get(name))
    if not differs:
        return _File(part, remote, dest, "unpack" if remote.unpack else "there")
    if force:
        return _File(part, remote, dest, "fetch")
    raise SciperfError(f"{dest} exists and is not the published file ({differs}); move it "
                       "away or pass --force to replace it")


def _unpacked(dest: Path, remote: RemoteFile) -> bool:
    """The archive's unpacking is recorded (for the published checksum, when there is one)."""
    marker = unpacked_marker(dest)
    if not marker.is_file():
        return False
    try:
        record = jsondata.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and (remote.sha256 is None
                                         or record.get("sha256") == remote.sha256.lower())


def _differs(root: Path, name: str, dest: Path, remote: RemoteFile,
             record: dict[str, Any] | None) -> str:
    """Why the file at `dest` is not the published one ("" when it is). A record of ours
    that matches its size and is not older than the file stands for it; otherwise its
    checksums are computed (and a match recorded)."""
    if not dest.is_file():
        return "not a regular file"
    stat = dest.stat()
    if remote.size is not None and stat.st_size != remote.size:
        return f"{stat.st_size} bytes, {remote.size} published"
    if record is not None and record["size"] == stat.st_size and \
            (remote.sha256 is None or record["sha256"] == remote.sha256.lower()) and \
            stat.st_mtime <= _timestamp(record.get("date")) + 1:
        return ""
    if remote.sha256 is None and remote.md5 is None and remote.size is None:
        return "no size or checksum is published to check it against"
    sha256 = filemanifest.sha256_of(dest)
    if remote.sha256 is not None and sha256 != remote.sha256.lower():
        return f"sha256 {sha256}, {remote.sha256} published"
    if remote.md5 is not None:
        import hashlib

        digest = hashlib.md5()
        with dest.open("rb") as fh:
            while block := fh.read(filemanifest.CHUNK):
                digest.update(block)
        if digest.hexdigest() != remote.md5.lower():
            return f"md5 {digest.hexdigest()}, {remote.md5} published"
    filemanifest.add(root, name, filemanifest.entry(stat.st_size, sha256, remote.url))
    return ""


def _timestamp(date: Any) -> float:
    try:
        return datetime.datetime.fromisoformat(str(date)).timestamp()
    except ValueError:
        return float("-inf")


def _check_space(root: Path, files: list[_File]) -> None:
    """Refuse, before the first byte, a download the free space cannot hold: each file's
    size (published; else its part's published size shared among its files) less what
    its ``.part`` holds, plus as much again for an archive to unpack."""
    need = 0
    for f in files:
        size = f.remote.size
        if size is None and f.part.size_bytes is not None:
            size = f.part.size_bytes // max(len(f.part.https), 1)
        if size is None:
            continue
        if f.todo == "fetch":
            need += max(size - held(f.dest), 0)
        if f.remote.unpack:
            need += size
    base = root
    while not base.exists() and base != base.parent:
        base = base.parent
    free = shutil.disk_usage(base).free
    if need > free:
        raise SciperfError(f"data.dir={root} has {human(free)} free ({free} bytes) but the "
                           f"download needs {human(need)} ({need} bytes)")


# -- fetching -----------------------------------------------------------------------------

def _fetch_part(root: Path, part: DataPart, files: list[_File], connections: int,
                mirror: str | None, force: bool, retries: int, backoff_s: float) -> None:
    fetched = unpacked = 0
    size = 0
    for f in files:
        if f.todo == "fetch":
            size += _fetch_one(root, f, connections, mirror, force, retries, backoff_s)
            fetched += 1
            unpacked += f.remote.unpack
        elif f.todo == "unpack":
            record = filemanifest.read(root).get(f.dest.relative_to(root).as_posix(), {})
            sha256 = record.get("sha256") or filemanifest.sha256_of(f.dest)
            _unpack(root, f, f.dest, sha256, force)
            unpacked += 1
    there = sum(f.todo == "there" for f in files)
    words = [f"{fetched} file(s) fetched ({human(size)})"] if fetched else []
    words += [f"{there} already there"] if there else []
    words += [f"{unpacked} archive(s) unpacked"] if unpacked else []
    print(f"part {part.name}: {', '.join(words)} in {root}")


def _fetch_one(root: Path, f: _File, connections: int, mirror: str | None, force: bool,
               retries: int, backoff_s: float) -> int:
    """Fetch, check, unpack (archives, before the file takes its name) and record one
    file; returns its size."""
    remote = f.remote

    def unpack_part(part: Path, sha256: str) -> None:
        _unpack(root, f, part, sha256, force)

    sha256 = fetch(mirrored(remote.url, mirror), f.dest, size=remote.size, md5=remote.md5,
                   sha256=remote.sha256, connections=connections, retries=retries,
                   backoff_s=backoff_s, replace=force,
                   check=unpack_part if remote.unpack else None)
    size = f.dest.stat().st_size
    filemanifest.add(root, f.dest.relative_to(root).as_posix(),
                     filemanifest.entry(size, sha256, remote.url))
    return size


def _unpack(root: Path, f: _File, archive: Path, sha256: str, force: bool) -> None:
    """Unpack a verified archive and record it (so a rerun does not unpack it again)."""
    top = unpack(archive, root, force=force, named=f.dest)
    atomic.write_text(unpacked_marker(f.dest), json.dumps(
        {"archive": f.dest.relative_to(root).as_posix(), "sha256": sha256,
         "source": f.remote.url, "top": top,
         "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")},
        indent=1))


# -- Globus -------------------------------------------------------------------------------

def _globus(root: Path, part: DataPart) -> str:
    """Print (or, with a logged-in Globus CLI and a local endpoint, submit) the transfer of
    a Globus-only part; returns what is left to do, in a few words."""
    assert part.globus is not None
    where = part.globus
    dest = (root / where.name).absolute()
    local = _local_endpoint()
    label = re.sub(r"[^A-Za-z0-9 _-]", "-", f"sciperf {part.name}")

    def command(endpoint: str) -> list[str]:
        return ["globus", "transfer", f"{where.endpoint}:{where.path}", f"{endpoint}:{dest}",
                *(["--recursive"] if where.recursive else []), "--label", label]

    if local is not None:
        proc = subprocess.run(command(local), capture_output=True, text=True, check=False,
                              timeout=GLOBUS_TIMEOUT_S)
        if proc.returncode == 0:
            task = re.search(r"Task ID:\s*(\S+)", proc.stdout)
            wait = f"`globus task wait {task.group(1)}`" if task else "`globus task list`"
            print(f"part {part.name}: Globus transfer submitted: {shlex.join(command(local))}")
            return f"Globus transfer submitted; {wait} follows it"
        said = (proc.stderr or proc.stdout).strip().splitlines()
        print(f"part {part.name}: `globus transfer` failed: {said[0] if said else proc.returncode}")
    print(f"part {part.name}: published on Globus only; transfer it with\n"
          f"  {shlex.join(command(LOCAL_ENDPOINT))}\n"
          f"  ({LOCAL_ENDPOINT}: this machine's endpoint id — `globus endpoint local-id` "
          "prints it while Globus Connect Personal runs; at a site, its data transfer "
          "nodes' collection from `globus endpoint search`)")
    return "Globus only: run the printed `globus transfer`"


def _local_endpoint() -> str | None:
    """The local Globus endpoint's id when the Globus CLI is installed, logged in and
    Globus Connect Personal runs; else None."""
    if shutil.which("globus") is None:
        return None
    try:
        if subprocess.run(["globus", "whoami"], capture_output=True, check=False,
                          timeout=GLOBUS_TIMEOUT_S).returncode != 0:
            return None
        proc = subprocess.run(["globus", "endpoint", "local-id"], capture_output=True,
                              text=True, check=False, timeout=GLOBUS_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    local = proc.stdout.strip()
    return local if proc.returncode == 0 and re.fullmatch(r"[0-9a-fA-F-]{36}", local) else None
