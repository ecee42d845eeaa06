"""One HTTP(S) GET of a byte range, its errors sorted into those another try may cure
(:class:`TransientError`) and those it will not (one line, SciperfError)."""

from __future__ import annotations

import http.client
import ssl
import urllib.error
import urllib.request
from pathlib import Path

from sciperf import __version__
from sciperf.errors import SciperfError, first_line

RETRY_STATUS = frozenset({408, 425, 429})  # 4xx answers that say "try again later"


class TransientError(Exception):
    """A failure another try may not meet: a dropped connection, a timeout, a 5xx."""


class UnsatisfiableError(Exception):
    """HTTP 416 with the file's length (None when the server does not say it)."""

    def __init__(self, total: int | None):
        super().__init__(total)
        self.total = total


def open_range(url: str, start: int, end: int | None, timeout_s: float,
          dest: Path) -> http.client.HTTPResponse:
    """GET `url` (bytes from `start`, up to `end` exclusive when given) with a socket
    timeout. Errors another try may cure are TransientError; the rest one line."""
    headers = {"User-Agent": f"sciperf/{__version__}", "Accept-Encoding": "identity"}
    if start or end is not None:
        headers["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
    request = urllib.request.Request(url, headers=headers)
    try:
        return urllib.request.urlopen(request, timeout=timeout_s)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 416:
            total = (exc.headers.get("Content-Range") or "").rpartition("/")[2]
            raise UnsatisfiableError(int(total) if total.isdigit() else None) from None
        if exc.code >= 500 or exc.code in RETRY_STATUS:
            raise TransientError(f"HTTP {exc.code} {exc.reason}") from None
        raise SciperfError(f"{url}: HTTP {exc.code} {exc.reason} (for {dest})") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ssl.SSLCertVerificationError):
            raise SciperfError(f"{url}: {exc.reason}") from None
        raise TransientError(first_line(exc.reason) if isinstance(exc.reason, BaseException)
                              else str(exc.reason)) from None
    except (OSError, http.client.HTTPException) as exc:
        raise TransientError(first_line(exc)) from None
    except ValueError as exc:
        raise SciperfError(f"{url}: not a URL that can be fetched ({exc})") from None


def content_range(resp: http.client.HTTPResponse, url: str) -> tuple[int, int, int | None]:
    """(first, last, total) of a 206's ``Content-Range: bytes first-last/total``."""
    text = resp.headers.get("Content-Range", "")
    unit, _, spec = text.partition(" ")
    span, _, total = spec.partition("/")
    first, _, last = span.partition("-")
    if unit != "bytes" or not (first.isdigit() and last.isdigit()):
        raise SciperfError(f"{url}: a partial answer without a usable Content-Range "
                           f"({text!r})")
    return int(first), int(last), int(total) if total.isdigit() else None
