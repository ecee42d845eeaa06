"""A real HTTP server on 127.0.0.1 for the download tests: it serves a folder the test
writes, with byte ranges (206, 416), HEAD and Content-Length as a web server does, and
breaks on request, per path, the ways real servers break: a connection dropped after N
bytes, an error status, wrong bytes, Range ignored, no Content-Length.

    with FileServer(folder) as server:
        server.faults["/a.tar"] = Fault(drop_after=1000)
        fetch(server.url("a.tar"), …)
        server.requests  # [(method, path, Range header or None), …]
"""

from __future__ import annotations

import contextlib
import http.server
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Fault:
    """How the server misbehaves for one path."""

    drop_after: int | None = None  # a longer body is cut after this many bytes …
    drops: int = 1  # … this many times, then bodies are whole
    status: int | None = None  # answer with this status (404, 403, 503) …
    statuses: int = -1  # … this many times (-1: always)
    wrong: bool = False  # every byte inverted (same length)
    ignore_range: bool = False  # a range request gets the whole file, status 200
    no_length: bool = False  # no Content-Length: the body ends when the connection closes


@dataclass
class FileServer:
    """`folder` served on 127.0.0.1 on a free port, as a context manager."""

    folder: Path
    faults: dict[str, Fault] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    sent: dict[str, int] = field(default_factory=dict)  # path → body bytes sent

    def __enter__(self) -> FileServer:
        owner = self

        class Handler(_Handler):
            server_owner = owner

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,),
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    @property
    def root(self) -> str:
        """http://127.0.0.1:PORT"""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def url(self, path: str) -> str:
        return f"{self.root}/{path.lstrip('/')}"

    def ranges(self, path: str) -> list[str | None]:
        """The Range headers of the GETs of `path`, in order."""
        return [r for method, p, r in self.requests if method == "GET" and p == path]


class _Handler(http.server.BaseHTTPRequestHandler):
    server_owner: FileServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass  # a test's output stays its own

    def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
        self._answer(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        owner = self.server_owner
        path = "/" + urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        asked = self.headers.get("Range")
        owner.requests.append((self.command, path, asked))
        fault = owner.faults.get(path, Fault())
        if fault.status is not None and fault.statuses != 0:
            fault.statuses -= 1
            self.send_error(fault.status)
            return
        folder = owner.folder.resolve()
        file = (folder / path.lstrip("/")).resolve()
        if folder not in file.parents or not file.is_file():
            self.send_error(404)
            return
        size = file.stat().st_size
        first, last = 0, size - 1
        partial = asked is not None and not fault.ignore_range
        if partial:
            span = _span(asked, size)
            if span is None:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            first, last = span
        self.send_response(206 if partial else 200)
        if partial:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.send_header("Accept-Ranges", "none" if fault.ignore_range else "bytes")
        if not fault.no_length:
            self.send_header("Content-Length", str(last + 1 - first))
        self.end_headers()
        if body:
            self._body(file, first, last + 1 - first, fault, path)

    def _body(self, file: Path, offset: int, count: int, fault: Fault, path: str) -> None:
        owner = self.server_owner
        if fault.drop_after is not None and fault.drops > 0 and count > fault.drop_after:
            fault.drops -= 1
            count = fault.drop_after
        with contextlib.suppress(ConnectionError), file.open("rb") as fh:
            if not fault.wrong:
                sent = self.connection.sendfile(fh, offset, count)
            else:
                fh.seek(offset)
                data = bytes(b ^ 0xFF for b in fh.read(count))
                self.wfile.write(data)
                sent = len(data)
            owner.sent[path] = owner.sent.get(path, 0) + sent
        self.close_connection = True


def _span(header: str, size: int) -> tuple[int, int] | None:
    """(first, last) of ``bytes=first-[last]`` within a file of `size` bytes; None when
    it starts past the end (416)."""
    unit, _, spec = header.partition("=")
    first_text, _, last_text = spec.partition("-")
    if unit.strip() != "bytes" or not first_text.isdigit():
        return (0, size - 1) if size else None
    first = int(first_text)
    last = min(int(last_text), size - 1) if last_text.isdigit() else size - 1
    return (first, last) if first < size else None


def write_file(folder: Path, name: str, data: bytes) -> Path:
    """`data` as the served file `name` (its folders made)."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
