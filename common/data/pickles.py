"""Reading torch-pickled records without torch and without running code from the file.

Some reference datasets store each sample as ``pickle.dumps`` of an object holding torch
tensors. Unpickling is arbitrary code execution, and even ``torch.load`` runs inside such a
pickle: a tensor rebuilds through ``torch._utils._rebuild_tensor_v2`` from a storage that
``torch.storage._load_from_bytes`` decodes with a nested ``torch.load`` of a legacy-format
blob. This module never imports torch and never resolves a global it was not told to:

* :func:`loads` unpickles with an allow-list — the two tensor functions above (replaced by
  numpy decoders written here), ``collections.OrderedDict``, and the record classes the
  caller names (their own stubs). Any other global — ``os.system``, ``builtins.eval``, a
  persistent id — is refused with one line naming the file and the global, before anything
  is called.
* the nested storage blob (legacy ``torch.save``: magic number, protocol 1001, system info,
  the storage's persistent id, its key list, then per storage an int64 element count and
  the raw little-endian bytes) is parsed with the same restricted unpickler, which there
  allows only the ``torch.<Type>Storage`` names and maps them to numpy dtypes;
* tensors become numpy arrays (a copy of the strided view, bounds checked).

:func:`dumps` is the inverse, for writing records in such a reference format without torch:
it emits the opcodes torch's own ``pickle.dumps`` of a tensor produces (the legacy storage
blob included) around numpy arrays, so torch itself and :func:`loads` read them alike.

Some reference files hold builtin values only (dicts, lists, tuples, strings, bytes,
numbers; OpenFold's processed mmCIF ``dicts``). :func:`loads_builtins` reads them with an
empty allow-list: every class or function lookup (``GLOBAL``/``STACK_GLOBAL``/``INST``, which
``REDUCE``, ``NEWOBJ`` and ``BUILD`` need first) and every persistent id is refused in one
line naming the file, so nothing named by the file is ever called. :func:`dumps_builtins`
writes such files and refuses any other type up front (``numpy.float64`` is a ``float``
subclass that would pickle through a numpy global the reader then refuses).

:func:`load_torch_file` reads a whole ``torch.save`` file of today's format (a zip archive:
``data.pkl`` whose persistent ids name the storages stored beside it as ``data/<key>``),
such as the reference's resumable checkpoint with its optimizer state, into nested dicts and
lists of numpy arrays with the same allow-list: a TensorFlow install reads it with no torch.
bfloat16 storages become float32 (exactly: a bfloat16 is the top half of a float32).
:func:`dump_torch_file` writes such a file without torch (a TensorFlow run's checkpoint in
the reference's resumable format).
"""

from __future__ import annotations

import collections
import io
import math
import pickle
import struct
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.errors import SciperfError

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001
STORAGE_DTYPES = {
    "DoubleStorage": np.float64, "FloatStorage": np.float32, "HalfStorage": np.float16,
    "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
    "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}
Global = tuple[str, str]


class UnsafePickleError(SciperfError):
    """A pickle asked for something outside the allow-list (nothing of it was run)."""


class _Restricted(pickle.Unpickler):
    """An unpickler that resolves only allow-listed globals and no persistent ids."""

    def __init__(self, file: io.BytesIO, allowed: Mapping[Global, Any], source: str):
        super().__init__(file)
        self.allowed, self.source = allowed, source

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.allowed:
            return self.allowed[(module, name)]
        raise UnsafePickleError(f"{self.source}: refused to unpickle {module}.{name} "
                                "(not a class this record format may contain)")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(f"{self.source}: refused a persistent id in the pickle")


class _StorageHeader(_Restricted):
    """The object pickle of a legacy storage blob: its persistent id describes it."""

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"):
            raise UnsafePickleError(f"{self.source}: unexpected persistent id in a storage")
        _, dtype, key, _location, numel = pid[:5]
        if len(pid) > 5 and pid[5] is not None:
            raise SciperfError(f"{self.source}: storage views are not supported")
        return dtype, str(key), int(numel)


def loads(data: bytes, source: str, classes: Mapping[Global, Any] | None = None) -> Any:
    """Unpickle `data` (from `source`, named in errors), resolving only torch's two tensor
    functions (decoded to numpy), ``OrderedDict`` and `classes` ((module, name) → the
    caller's stub)."""
    allowed: dict[Global, Any] = {
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
        ("torch.storage", "_load_from_bytes"): lambda blob: _storage(blob, source),
        ("collections", "OrderedDict"): collections.OrderedDict,
        **(classes or {}),
    }
    return _guarded(lambda: _Restricted(io.BytesIO(data), allowed, source).load(), source)


def _guarded(load: Callable[[], Any], source: str) -> Any:
    """One line naming the file for a malformed pickle (refusals pass through)."""
    try:
        return load()
    except SciperfError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            IndexError, KeyError, OverflowError) as exc:
        raise SciperfError(f"{source}: not a valid record pickle ({type(exc).__name__}: "
                           f"{exc})") from None


def storage_from_bytes(blob: bytes, source: str) -> np.ndarray:
    """The 1-D array of a legacy ``torch.save`` storage blob (errors name `source`)."""
    return _guarded(lambda: _storage(blob, source), source)


def _storage(blob: bytes, source: str) -> np.ndarray:
    """:func:`storage_from_bytes` without the error wrapper (it runs inside :func:`loads`)."""
    f = io.BytesIO(blob)
    plain: dict[Global, Any] = {}
    magic, protocol, info = (_Restricted(f, plain, source).load() for _ in range(3))
    if magic != LEGACY_MAGIC or protocol != LEGACY_PROTOCOL:
        raise SciperfError(f"{source}: a tensor storage is not in torch's legacy format")
    if not isinstance(info, dict) or info.get("little_endian") is not True:
        raise SciperfError(f"{source}: big-endian tensor storages are not supported")
    types = {("torch", name): dtype for name, dtype in STORAGE_DTYPES.items()}
    dtype, key, numel = _StorageHeader(f, types, source).load()
    keys = _Restricted(f, plain, source).load()
    if keys != [key]:
        raise SciperfError(f"{source}: a tensor storage blob holds {keys!r}, expected [{key!r}]")
    count = int.from_bytes(f.read(8), "little", signed=True)
    raw = f.read()
    itemsize = np.dtype(dtype).itemsize
    if count != numel or len(raw) != numel * itemsize:
        raise SciperfError(f"{source}: a tensor storage is truncated ({len(raw)} bytes for "
                           f"{numel} elements of {itemsize})")
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)


def _rebuild_tensor(storage: np.ndarray, offset: int, size: tuple[int, ...],
                    stride: tuple[int, ...], requires_grad: bool = False,
                    backward_hooks: Any = None, metadata: Any = None) -> np.ndarray:
    """torch's tensor rebuild as numpy: the strided view of the storage, copied."""
    if not isinstance(storage, np.ndarray):
        raise ValueError("a tensor without a decoded storage")
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride) or any(s < 0 for s in (*size, *stride)) or offset < 0:
        raise ValueError(f"invalid tensor geometry size={size} stride={stride}")
    last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) \
        if all(size) else offset - 1
    if last >= storage.size:
        raise ValueError(f"tensor of size {size} overruns its storage of {storage.size}")
    # zero strides repeat elements: a (10**7, 10**7) view of one element copied 364 TiB
    if math.prod(size) > storage.size:
        raise ValueError(f"tensor of size {size} holds more elements than its storage of "
                         f"{storage.size}")
    view = np.lib.stride_tricks.as_strided(
        storage[offset:], shape=size, strides=tuple(s * storage.itemsize for s in stride))
    return np.array(view)


# numpy dtype → the torch storage class a tensor of it pickles under (see STORAGE_DTYPES)
STORAGE_NAMES = {np.dtype(dtype): name for name, dtype in STORAGE_DTYPES.items()}


def dumps(record: Mapping[str, Any], cls: Global) -> bytes:
    """Pickle `record` as an object of class `cls` ((module, name), e.g. PyG 1.x's
    ``torch_geometric.data.data.Data``) whose ``__dict__`` is the record, numpy arrays
    as torch tensors — the bytes ``pickle.dumps(Data(**record))`` would give with torch
    installed, made without it. Values: arrays, ints, floats, strings, None."""
    out = bytearray(b"\x80\x03")
    out += _global(*cls) + b")\x81}("  # cls.__new__(cls), then the state dict
    for key, value in record.items():
        out += _plain(str(key))
        out += _tensor(value) if isinstance(value, np.ndarray) else _plain(value)
    return bytes(out + b"ub.")  # SETITEMS, BUILD (state → __dict__), STOP


def _global(module: str, name: str) -> bytes:
    """GLOBAL opcode: the class or function `module.name` (resolved only by the reader)."""
    return b"c" + f"{module}\n{name}\n".encode()


def _plain(value: Any) -> bytes:
    """The opcodes of a plain value (no globals, no memo references across fragments)."""
    if not isinstance(value, (int, float, str, bytes, tuple, bool)) and value is not None:
        raise TypeError(f"cannot write a {type(value).__name__} into a record pickle")
    return pickle.dumps(value, protocol=3)[2:-1]  # without PROTO and STOP


def _tensor(array: np.ndarray) -> bytes:
    """``torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict())``
    with the storage as ``torch.storage._load_from_bytes(<legacy blob>)``."""
    # native byte order (a big-endian array is still the same numbers; the storage lookup
    # and torch's tensor are native), C order; 0-d stays 0-d (ascontiguousarray: 1-d)
    arr = np.require(array, dtype=array.dtype.newbyteorder("="), requirements="C")
    if arr.dtype not in STORAGE_NAMES:
        raise TypeError(f"no torch storage holds {arr.dtype}")
    strides = tuple(s // arr.itemsize for s in arr.strides) if arr.size else \
        tuple(int(np.prod(arr.shape[i + 1:])) for i in range(arr.ndim))
    storage = _global("torch.storage", "_load_from_bytes") + _plain((_legacy_blob(arr),)) + b"R"
    ordered = _global("collections", "OrderedDict") + b")R"
    args = b"(" + storage + _plain(0) + _plain(tuple(arr.shape)) + _plain(strides) + \
        _plain(False) + ordered + b"t"
    return _global("torch._utils", "_rebuild_tensor_v2") + args + b"R"


def _legacy_blob(arr: np.ndarray) -> bytes:
    """A storage as legacy ``torch.save`` writes it: magic, protocol, system info, the
    storage object as a persistent id, its key list, then int64 count + raw bytes."""
    info = {"protocol_version": LEGACY_PROTOCOL, "little_endian": True,
            "type_sizes": {"short": 2, "int": 4, "long": 4}}
    head = b"".join(pickle.dumps(v, protocol=2) for v in (LEGACY_MAGIC, LEGACY_PROTOCOL, info))
    pid = b"\x80\x02(" + _plain("storage") + _global("torch", STORAGE_NAMES[arr.dtype]) + \
        _plain("0") + _plain("cpu") + _plain(int(arr.size)) + b"Nt" + b"Q."  # BINPERSID
    raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
    return head + pid + pickle.dumps(["0"], protocol=2) + struct.pack("<q", arr.size) + raw


# exact types a builtins-only pickle holds (subclasses such as numpy.float64 pickle through a
# global of their own module, which loads_builtins refuses)
BUILTIN_TYPES = (dict, list, tuple, str, bytes, int, float, bool, type(None))
BUILTINS_PROTOCOL = 4  # the reference's default; bytes as BINBYTES (protocol 2 needs a global)


def loads_builtins(data: bytes, source: str) -> Any:
    """Unpickle `data` (from `source`, named in errors) that may hold builtin values only:
    no global is resolved, no persistent id accepted (one line, nothing run)."""
    return _guarded(lambda: _Restricted(io.BytesIO(data), {}, source).load(), source)


def dumps_builtins(value: Any) -> bytes:
    """Pickle a tree of builtin values (:data:`BUILTIN_TYPES`, exact types) so that
    :func:`loads_builtins` and plain ``pickle.load`` read it alike; any other type is a
    TypeError naming where it sits in the tree."""
    _check_builtins(value, "value")
    return pickle.dumps(value, protocol=BUILTINS_PROTOCOL)


def _check_builtins(value: Any, where: str) -> None:
    if type(value) not in BUILTIN_TYPES:
        raise TypeError(f"{where} is a {type(value).__module__}.{type(value).__qualname__}, "
                        "not a builtin value a builtins-only pickle may hold")
    if type(value) is dict:
        for key, item in value.items():
            _check_builtins(key, f"{where} key {key!r}")
            _check_builtins(item, f"{where}[{key!r}]")
    elif type(value) in (list, tuple):
        for i, item in enumerate(value):
            _check_builtins(item, f"{where}[{i}]")


# --- a whole torch.save file (zip format) --------------------------------------------------

BFLOAT16 = "BFloat16Storage"  # no numpy dtype: read as uint16, returned as float32


class _ZipPickle(_Restricted):
    """data.pkl of a zip-format torch.save: each persistent id names a storage stored in
    the archive, which `storage` reads."""

    def __init__(self, file: io.BytesIO, allowed: Mapping[Global, Any], source: str,
                 storage: Callable[[str, Any, int], np.ndarray]):
        super().__init__(file, allowed, source)
        self.storage = storage

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise UnsafePickleError(f"{self.source}: unexpected persistent id in the pickle")
        _, dtype, key, _location, numel = pid
        return self.storage(str(key), dtype, int(numel))


def load_torch_file(path: str | Path) -> Any:
    """The object a zip-format ``torch.save`` file holds, tensors as numpy arrays, read
    without torch and resolving only the allow-list of :func:`loads` plus torch's storage
    types. A file that is not one, or asks for anything else, is one line naming it."""
    path = Path(path)
    source = str(path)
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise SciperfError(f"{source}: not a torch.save checkpoint (zip format) "
                           f"({getattr(exc, 'strerror', None) or exc})") from None
    with archive:
        return _guarded(lambda: _zip_object(archive, source), source)


def _zip_object(archive: zipfile.ZipFile, source: str) -> Any:
    """:func:`load_torch_file` inside the error wrapper."""
    pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pickles) != 1:
        raise SciperfError(f"{source}: not a torch.save checkpoint (no single data.pkl)")
    prefix = pickles[0][:-len("data.pkl")]
    if f"{prefix}byteorder" in archive.namelist() and \
            archive.read(f"{prefix}byteorder").strip() != b"little":
        raise SciperfError(f"{source}: big-endian checkpoints are not supported")
    cache: dict[str, np.ndarray] = {}

    def storage(key: str, dtype: Any, numel: int) -> np.ndarray:
        if key not in cache:
            cache[key] = _zip_storage(archive, f"{prefix}data/{key}", dtype, numel, source)
        return cache[key]

    allowed: dict[Global, Any] = {
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
        ("collections", "OrderedDict"): collections.OrderedDict,
        **{("torch", name): dtype for name, dtype in STORAGE_DTYPES.items()},
        ("torch", BFLOAT16): BFLOAT16,
    }
    return _ZipPickle(io.BytesIO(archive.read(pickles[0])), allowed, source, storage).load()


def _zip_storage(archive: zipfile.ZipFile, member: str, dtype: Any, numel: int,
                 source: str) -> np.ndarray:
    """One storage of the archive, `numel` elements of `dtype`, checked against its size."""
    wire = np.dtype(np.uint16) if dtype == BFLOAT16 else np.dtype(dtype)
    info = archive.getinfo(member)  # KeyError: the pickle names a storage the file lacks
    if numel < 0 or info.file_size != numel * wire.itemsize:
        raise SciperfError(f"{source}: storage {member} holds {info.file_size} bytes for "
                           f"{numel} elements of {wire.itemsize}")
    raw = np.frombuffer(archive.read(member), dtype=wire.newbyteorder("<")).astype(wire)
    if dtype == BFLOAT16:
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw


# ------------------------------------------------------------------ writing torch.save files
TORCH_FILE_VERSION = b"3\n"  # the zip format's version record torch writes today


def dump_torch_file(path: str | Path, obj: Any) -> Path:
    """Write `obj` as ``torch.save`` would (the zip format: ``data.pkl`` whose persistent
    ids name storages stored beside it), numpy arrays as tensors, without torch — so a
    framework that has no torch writes the reference's resumable checkpoint, which
    ``torch.load(weights_only=True)`` and :func:`load_torch_file` read alike. Values:
    dicts (``collections.OrderedDict`` kept as one), lists, tuples of plain values,
    strings, numbers, bools, None and arrays. Atomic: nothing half-written."""
    from sciperf.data import atomic

    path = Path(path)
    storages: list[np.ndarray] = []
    body = b"\x80\x02" + _torch_value(obj, storages) + b"."
    prefix = f"{path.stem or 'archive'}/"
    with atomic.folder_for(path.parent), atomic.replacing(path) as tmp, \
            zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(f"{prefix}data.pkl", body)
        archive.writestr(f"{prefix}byteorder", "little")
        for key, array in enumerate(storages):
            archive.writestr(f"{prefix}data/{key}", array.astype(
                array.dtype.newbyteorder("<"), copy=False).tobytes())
        archive.writestr(f"{prefix}version", TORCH_FILE_VERSION)
    return path


def _torch_value(value: Any, storages: list[np.ndarray]) -> bytes:
    """The opcodes of one value of :func:`dump_torch_file`."""
    if isinstance(value, np.ndarray):
        return _zip_tensor(value, storages)
    if isinstance(value, Mapping):
        head = _global("collections", "OrderedDict") + b")R" \
            if isinstance(value, collections.OrderedDict) else b"}"
        items = b"".join(_torch_value(k, storages) + _torch_value(v, storages)
                         for k, v in value.items())
        return head + (b"(" + items + b"u" if value else b"")
    if isinstance(value, list):
        items = b"".join(_torch_value(v, storages) for v in value)
        return b"]" + (b"(" + items + b"e" if value else b"")
    if isinstance(value, np.generic):
        return _plain(value.item())
    return _plain(value)


def _zip_tensor(array: np.ndarray, storages: list[np.ndarray]) -> bytes:
    """``torch._utils._rebuild_tensor_v2(<storage pid>, 0, size, stride, False,
    OrderedDict())``, the storage (a C-ordered copy) kept for the archive."""
    arr = np.require(array, dtype=array.dtype.newbyteorder("="), requirements="C")
    if arr.dtype not in STORAGE_NAMES:
        raise TypeError(f"no torch storage holds {arr.dtype}")
    key = str(len(storages))
    storages.append(arr)
    strides = tuple(int(np.prod(arr.shape[i + 1:])) for i in range(arr.ndim))
    pid = b"(" + _plain("storage") + _global("torch", STORAGE_NAMES[arr.dtype]) + \
        _plain(key) + _plain("cpu") + _plain(int(arr.size)) + b"tQ"  # BINPERSID
    ordered = _global("collections", "OrderedDict") + b")R"
    args = b"(" + pid + _plain(0) + _plain(tuple(arr.shape)) + _plain(strides) + \
        _plain(False) + ordered + b"t"
    return _global("torch._utils", "_rebuild_tensor_v2") + args + b"R"
