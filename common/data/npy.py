"""The fast npy format's file I/O: thread-safe reads, atomic writes of sample pairs.

numpy parses an `.npy` header with ``ast.literal_eval``, and CPython 3.11's AST
constructor is not thread-safe: concurrent parses fail at random with "SystemError: AST
constructor recursion depth mismatch" (seen in the TensorFlow input pipeline's parallel
map). The header parse — microseconds — is serialised here; the array bytes, the real
work, are read outside the lock, in parallel. Writes go to a temporary name and are renamed
into place, so a reader never sees half a file.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

_HEADER_LOCK = threading.Lock()
_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0,
                   (2, 0): np.lib.format.read_array_header_2_0}


def _header(fh) -> tuple[tuple[int, ...], bool, np.dtype]:  # noqa: ANN001 - binary file
    """(shape, fortran order, dtype) of an open .npy file, parsed under the lock."""
    with _HEADER_LOCK:
        version = np.lib.format.read_magic(fh)
        reader = _HEADER_READERS.get(version)
        if reader is None:
            raise ValueError(f"unsupported .npy format version {version}")
        return reader(fh)


def load(path: str | Path) -> np.ndarray:
    """np.load(path, allow_pickle=False), safe to call from many threads.

    Raises ValueError for a truncated file, an object array or an unknown format version
    (callers turn it into one line naming the file), OSError when it cannot be opened.
    """
    with open(path, "rb") as fh:
        shape, fortran, dtype = _header(fh)
        if dtype.hasobject:
            raise ValueError("object arrays are not allowed")
        count = int(np.prod(shape, dtype=np.int64))
        flat = np.empty(count, dtype=dtype)
        want = flat.nbytes
        got = fh.readinto(flat.view(np.uint8)) if want else 0
        if got != want:
            raise ValueError(f"truncated .npy data: {got} of {want} bytes")
    return flat.reshape(shape, order="F" if fortran else "C")


def mapped(path: str | Path) -> np.ndarray:
    """A read-only memory map of an .npy file (header parsed under the lock, checked like
    :func:`load`: object arrays refused, a short file is a ValueError). Packed formats read
    slices of large arrays without loading them."""
    with open(path, "rb") as fh:
        shape, fortran, dtype = _header(fh)
        offset = fh.tell()
        size = os.fstat(fh.fileno()).st_size
    if dtype.hasobject:
        raise ValueError("object arrays are not allowed")
    want = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size - offset < want:
        raise ValueError(f"truncated .npy data: {size - offset} of {want} bytes")
    if want == 0:
        return np.empty(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=tuple(shape),
                     order="F" if fortran else "C")


def save(path: Path, arr: np.ndarray) -> None:
    """Write one array atomically (temporary name + rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, arr)
    os.replace(tmp, path)


def write_pair(folder: Path, name: str, x: np.ndarray, y: np.ndarray) -> Path:
    """One sample as ``<name>.data.npy`` beside ``<name>.label.npy`` (label first, so a
    data file never exists without its label); returns the data file."""
    from sciperf.data.layout import NPY_SUFFIX, label_path

    path = folder / f"{name}{NPY_SUFFIX}"
    save(label_path(path), y)
    save(path, x)
    return path
