"""Containers: each wraps the program and says where host paths appear inside it.

`none` runs the installed `sciperf`; `apptainer` and `docker` mount the dataset read-only
at `container.data_mount` (/data) and the output directory at `container.output_mount`
(/results), and the program is told those in-container paths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from sciperf.errors import SciperfError


class Container:
    """Base: no wrapping, paths unchanged."""

    name: ClassVar[str] = "none"

    def __init__(self, options: Mapping[str, Any], accelerators: int = 0) -> None:
        self.options = dict(options)
        gpus = self.options.get("gpus", "auto")
        self.gpus = accelerators > 0 if gpus in (None, "auto") else bool(gpus)

    def data_path(self, host: str) -> str:
        return host

    def output_path(self, host: str) -> str:
        return host

    def words(self, data_dir: str | None, output_dir: str | None,
              env_names: Sequence[str], extra_binds: Sequence[str] = ()) -> list[str]:
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

    def binds(self, data_dir: str | None, output_dir: str | None,
              extra_binds: Sequence[str]) -> list[str]:
        """`SRC:DST[:ro]` entries: data read-only, output writable, then the extra ones."""
        binds = []
        if data_dir:
            binds.append(f"{data_dir}:{self.data_mount}:ro")
        if output_dir:
            binds.append(f"{output_dir}:{self.output_mount}")
        return binds + [str(b) for b in (*extra_binds, *(self.options.get("binds") or []))]

    def extra(self) -> list[str]:
        return [str(a) for a in self.options.get("extra_args") or []]


class Apptainer(_Image):
    """`apptainer exec --nv --bind …`: the host environment (rank variables) passes through."""

    name = "apptainer"

    def words(self, data_dir: str | None, output_dir: str | None,
              env_names: Sequence[str], extra_binds: Sequence[str] = ()) -> list[str]:
        words = [str(self.options.get("executable") or "apptainer"), "exec"]
        if self.gpus:
            words.append("--nv")
        binds = self.binds(data_dir, output_dir, extra_binds)
        if binds:
            words += ["--bind", ",".join(binds)]
        return words + self.extra() + [self.image]


class Docker(_Image):
    """`docker run --rm …`: host network and IPC for the collectives; rank variables via -e."""

    name = "docker"

    def words(self, data_dir: str | None, output_dir: str | None,
              env_names: Sequence[str], extra_binds: Sequence[str] = ()) -> list[str]:
        words = [str(self.options.get("executable") or "docker"), "run", "--rm"]
        if self.gpus:
            words += ["--gpus", "all"]
        for bind in self.binds(data_dir, output_dir, extra_binds):
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
