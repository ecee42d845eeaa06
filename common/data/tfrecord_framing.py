"""TFRecord files: opaque records framed with their length and CRCs, optionally gzip-compressed.

The container layer of the generic TFRecord codec (:mod:`sciperf.data.tfrecord`): it moves
payloads in and out of files and never looks inside them (the ``tf.train.Example`` messages
they usually hold are :mod:`sciperf.data.tf_example`'s). Standard library, numpy and the
hardware CRC only, so the framework-free package can read and write reference datasets.

Container format (one record)::

    uint64 length        little-endian
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

The whole stream may be gzip-compressed.  ``masked_crc32c`` rotates the
CRC-32C right by 15 bits and adds ``0xa282ead8`` (mod 2**32), so that a CRC of
data that itself contains CRCs is not trivially zero.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import secrets
import struct
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import google_crc32c
import numpy as np

from sciperf.data import atomic

__all__ = ["PathLike", "TFRecordError", "read_records", "write_records"]

PathLike = str | os.PathLike[str]

_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_GZIP_MAGIC = b"\x1f\x8b"
# zlib's default level: what TF's GZIP writer uses; level 9 is much slower for ~no gain.
_GZIP_LEVEL = 6
# Read huge records in bounded pieces so a corrupt (unchecked) length fails as
# "truncated" instead of trying to allocate petabytes up front.
_READ_CHUNK = 64 << 20


class TFRecordError(ValueError):
    """A TFRecord file or ``tf.train.Example`` payload is corrupt or not as expected.

    The message always names the file (or payload) and what is wrong, because a
    dataset has hundreds of thousands of files and "bad CRC" alone is useless.
    """



# --------------------------------------------------------------------------- CRC


def _masked_crc(data: bytes | memoryview) -> int:
    """Return TFRecord's masked CRC-32C of ``data`` (hardware CRC via google_crc32c)."""
    # The C extension only takes objects without a buffer-release hook (bytes,
    # numpy arrays); a uint8 view over a memoryview avoids copying the data.
    buf = data if isinstance(data, bytes) else np.frombuffer(data, dtype=np.uint8)
    crc = google_crc32c.value(buf)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32



# ------------------------------------------------------------------ record files


def _header(length: int) -> bytes:
    """Return the 12-byte record header (length and its masked CRC)."""
    length_bytes = struct.pack("<Q", length)
    return length_bytes + _FOOTER.pack(_masked_crc(length_bytes))


def _write_all(stream: BinaryIO | gzip.GzipFile, payloads: Iterable[bytes], where: Path) -> None:
    """Write every payload as a framed record to ``stream``. A write the disk refuses is one
    line naming ``where``; an error of the payloads' own iterator stays its own."""
    for payload in payloads:
        data = payload if isinstance(payload, bytes) else memoryview(payload).cast("B")
        with atomic.failing_as(where):
            stream.write(_header(len(data)))
            stream.write(data)
            stream.write(_FOOTER.pack(_masked_crc(data)))


def _temp_path(path: str) -> str:
    """Return a fresh hidden name next to ``path`` (same directory, so os.replace is atomic)."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def write_records(path: PathLike, payloads: Iterable[bytes], compression: str = "gzip") -> None:
    """Write ``payloads`` as a TFRecord file, gzip-compressed unless ``compression="none"``.

    The file is written under a temporary name in the same directory and
    renamed into place only once complete, so readers (and a benchmark rerun
    after a killed data-preparation job) never see a half-written file.  If the
    payload iterator raises, the temporary file is removed and nothing appears; a
    write the disk refuses (full, quota, file-size limit) is a SciperfError naming
    ``path`` in one line (:mod:`sciperf.data.atomic`), as every dataset writer says it.
    """
    if compression not in ("gzip", "none"):
        raise ValueError(f"compression must be 'gzip' or 'none', got {compression!r}")
    final = os.fspath(path)
    where, temp = Path(final), _temp_path(final)
    try:
        with atomic.failing_as(where):
            raw = open(temp, "xb")  # noqa: SIM115 (closed below, whatever happens)
        stream: BinaryIO | gzip.GzipFile = raw
        try:
            if compression == "gzip":
                with atomic.failing_as(where):  # (its header)
                    # mtime=0 and no file name keep the output byte-for-byte reproducible.
                    stream = gzip.GzipFile(
                        filename="", mode="wb", fileobj=raw, compresslevel=_GZIP_LEVEL,
                        mtime=0)
            _write_all(stream, payloads, where)
            with atomic.failing_as(where):
                stream.close()  # gzip: its trailer
                raw.close()
                os.replace(temp, final)
        finally:
            for f in (stream, raw):  # after a failure: closed, whatever a close says
                with contextlib.suppress(OSError, ValueError):
                    f.close()
    except BaseException:
        with contextlib.suppress(OSError):  # the write's error is the one to tell
            os.unlink(temp)
        raise


def _read_up_to(stream: BinaryIO, size: int) -> bytes:
    """Read ``size`` bytes, or fewer only at end of file."""
    chunks: list[bytes] = []
    got = 0
    while got < size:
        chunk = stream.read(min(size - got, _READ_CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _next_record(stream: BinaryIO, verify_crc: bool, where: str) -> bytes | None:
    """Read one framed record; None at a clean end of file."""
    header = _read_up_to(stream, _HEADER.size)
    if not header:
        return None
    if len(header) < _HEADER.size:
        raise TFRecordError(f"{where}: truncated record header ({len(header)} of 12 bytes)")
    length, length_crc = _HEADER.unpack(header)
    if verify_crc and _masked_crc(header[:8]) != length_crc:
        raise TFRecordError(f"{where}: bad length CRC (corrupt length field or not a TFRecord)")
    payload = _read_up_to(stream, length)
    footer = _read_up_to(stream, _FOOTER.size)
    if len(payload) < length or len(footer) < _FOOTER.size:
        raise TFRecordError(f"{where}: truncated record (expected {length} data bytes)")
    if verify_crc and _masked_crc(payload) != _FOOTER.unpack(footer)[0]:
        raise TFRecordError(f"{where}: bad data CRC (record payload is corrupt)")
    return payload


def _iter_stream(stream: BinaryIO, name: str, verify_crc: bool) -> Iterator[bytes]:
    """Yield the payloads of all records in an (already decompressing) stream."""
    index = offset = 0
    while True:
        where = f"{name}: record {index} at byte {offset}"
        payload = _next_record(stream, verify_crc, where)
        if payload is None:
            return
        yield payload
        index += 1
        offset += _HEADER.size + len(payload) + _FOOTER.size


def _looks_gzip(head: bytes) -> bool:
    """Decide whether a file starting with ``head`` is gzip-compressed.

    A raw TFRecord whose length happens to start with the gzip magic bytes is
    recognised by its valid length CRC (a 1 in 2**32 coincidence otherwise).
    """
    if not head.startswith(_GZIP_MAGIC):
        return False
    if len(head) < _HEADER.size:
        return True
    return _masked_crc(head[:8]) != _HEADER.unpack(head[: _HEADER.size])[1]


def _resolve_compression(raw: BinaryIO, name: str, compression: str) -> str:
    """Turn "auto" into "gzip"/"none" and refuse a non-gzip file read as gzip."""
    if compression not in ("auto", "gzip", "none"):
        raise ValueError(f"compression must be 'auto', 'gzip' or 'none', got {compression!r}")
    head = raw.read(_HEADER.size)
    raw.seek(0)
    if compression == "auto":
        return "gzip" if _looks_gzip(head) else "none"
    if compression == "gzip" and head and not head.startswith(_GZIP_MAGIC):
        raise TFRecordError(f"{name}: not a gzip file (compression='gzip' requested)")
    return compression


def read_records(
    path: PathLike, compression: str = "auto", verify_crc: bool = True
) -> Iterator[bytes]:
    """Yield the payload of every record in a TFRecord file, streaming.

    ``compression`` is "gzip", "none" or "auto" (gzip is detected by its magic
    bytes).  CRCs are checked by default because silent bit rot in a training
    set is far more expensive than the hardware CRC (a few ms per 16.8 MB).
    Raises TFRecordError naming the file for any corruption or truncation.
    """
    name = os.fspath(path)
    with open(name, "rb") as raw:
        if _resolve_compression(raw, name, compression) == "none":
            yield from _iter_stream(raw, name, verify_crc)
            return
        try:
            with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
                yield from _iter_stream(stream, name, verify_crc)
        except EOFError as exc:
            raise TFRecordError(f"{name}: truncated gzip stream ({exc})") from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise TFRecordError(f"{name}: corrupt gzip data ({exc})") from None
