"""Containers: each wraps the program and says where host paths appear inside it.

`none` runs the installed `sciperf`; `apptainer` and `docker` mount the dataset read-only
at `container.data_mount` (/data) and the output directory at `container.output_mount`
(/results), and the program is told those in-container paths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from sciperf.errors import SciperfError

from . import options as typed


class Container:
    """Base: no wrapping, paths unchanged."""

    name: ClassVar[str] = "none"

    def __init__(self, options: Mapping[str, Any], accelerators: int = 0) -> None:
        self.options = dict(options)
        gpus = typed.switch(self.options, "gpus", "container", auto=True)
        self.gpus = accelerators > 0 if gpus is None else gpus

    def data_path(self, host: str) -> str:
        return host

    def output_path(self, host: str) -> str:
        return host

    def words(self, data_dir: str | None, output_dir: str | None,
              env_names: Sequence[str], extra_binds: Sequence[str] = (),
              read_only: Sequence[str] = ()) -> list[str]:
        """The container's part of the command line (between launcher and program)."""
        return []


class _Image(Container):
    """Containers run from an image the user names in `container.image`."""

    def __init__(self, options: Mapping[str, Any], accelerators: int = 0) -> None:
        super().__init__(options, accelerators)
        if not self.options.get("image"):
            raise SciperfError(f"container={self.name} needs an image: set container.image=… "
                               f"(configs/container/{self.name}.yaml)")
        self.image = str(self.options["image"])
        self.data_mount = str(self.options.get("data_mount") or "/data")
        self.output_mount = str(self.options.get("output_mount") or "/results")

    def data_path(self, host: str) -> str:
        return self.data_mount

    def output_path(self, host: str) -> str:
        return self.output_mount

    # characters the bind syntax uses as separators (docker -v SRC:DST; apptainer's
    # --bind list also splits at commas)
    separators: ClassVar[str] = ":"

    def binds(self, data_dir: str | None, output_dir: str | None,
              same_place: Sequence[str], read_only: Sequence[str] = ()) -> list[str]:
        """`SRC:DST[:ro]` entries: data read-only, output writable, the program's paths at
        the same place (the files it only reads read-only), then `container.binds` as
        given."""
        binds = []
        if data_dir:
            binds.append(f"{self._host(data_dir, 'data.dir')}:{self.data_mount}:ro")
        if output_dir:
            binds.append(f"{self._host(output_dir, 'output_dir')}:{self.output_mount}")
        binds += [f"{self._host(p, 'a path')}:{p}" for p in same_place]
        binds += [f"{self._host(p, 'a path')}:{p}:ro" for p in read_only]
        return binds + typed.words(self.options, "binds", "container")

    def _host(self, path: str, key: str) -> str:
        """A host path the bind syntax can hold: one with a separator in it would be cut
        into other paths (`--bind D:/data:ro,/o,1:/results`)."""
        if found := sorted({c for c in path if c in self.separators}):
            raise SciperfError(f"container={self.name} cannot mount {key}={path}: its bind "
                               f"syntax splits at {' and '.join(repr(c) for c in found)}")
        return path

    def extra(self) -> list[str]:
        return typed.words(self.options, "extra_args", "container")


class Apptainer(_Image):
    """`apptainer exec --nv --bind …`: the host environment (rank variables) passes through."""

    name = "apptainer"
    separators = ":,"

    def words(self, data_dir: str | None, output_dir: str | None,
              env_names: Sequence[str], extra_binds: Sequence[str] = (),
              read_only: Sequence[str] = ()) -> list[str]:
        words = [str(self.options.get("executable") or "apptainer"), "exec"]
        if self.gpus:
            words.append("--nv")
        binds = self.binds(data_dir, output_dir, extra_binds, read_only)
        if binds:
            words += ["--bind", ",".join(binds)]
        return words + self.extra() + [self.image]


class Docker(_Image):
    """`docker run --rm …`: host network and IPC for the collectives; rank variables via -e."""

    name = "docker"

    def words(self, data_dir: str | None, output_dir: str | None,
              env_names: Sequence[str], extra_binds: Sequence[str] = (),
              read_only: Sequence[str] = ()) -> list[str]:
        words = [str(self.options.get("executable") or "docker"), "run", "--rm"]
        if self.gpus:
            words += ["--gpus", "all"]
        for bind in self.binds(data_dir, output_dir, extra_binds, read_only):
            words += ["-v", bind]
        words += ["--network", "host", "--ipc", "host"]
        for name in env_names:
            words += ["-e", name]  # `-e NAME` copies the launcher's value, if set
        return words + self.extra() + [self.image]


CONTAINERS: dict[str, type[Container]] = {c.name: c for c in (Container, Apptainer, Docker)}


def make_container(options: Mapping[str, Any], accelerators: int = 0) -> Container:
    name = options.get("name")
    if name not in CONTAINERS:
        raise SciperfError(f"container.name={name} is not one of {', '.join(CONTAINERS)}")
    return CONTAINERS[name](options, accelerators)
