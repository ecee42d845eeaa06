"""One DeepCAM sample on disk, in either format: read checked, written atomically.

* ``hdf5`` — the reference format, read as is from the real 8.8 TB dataset: one file per
  sample under ``<dir>/train`` and ``<dir>/validation`` holding ``climate/data``
  (H, W, 16) float32 and ``climate/labels_0`` (H, W) with values {0, 1, 2}.
* ``npy`` — the fast format optimized submissions convert to: ``<name>.data.npy``
  (float32, H×W×16, raw values) beside ``<name>.label.npy`` (uint8, H×W), read with one
  memcpy each.

Every read checks the values: data of a numeric dtype, finite and within ±DATA_BOUND
(one vectorised min and max over what the read holds; npy: piece by piece as it arrives,
``sciperf.data.npy.load_checked``), labels in {0, 1, 2} — a NaN would otherwise train at
`loss nan` naming no file, a finite 3e38 passed as climate data. An hdf5 file's
declarations (shapes, dtypes, datasets rather than groups, data stored in the file itself:
no external raw storage, virtual dataset or link leading out of it) are checked before
anything is read.

Both formats share these checks and the raw (unnormalised) sample they return, so they
live together; the normalisation statistics are :mod:`.stats`, the normalising reader and
the dataset-wide jobs (stats over the train split, hdf5 → npy) :mod:`.data`.
"""

from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np

from sciperf.data import atomic, npy
from sciperf.data.layout import SampleLayout, label_path
from sciperf.errors import SciperfError
from sciperf.workloads.deepcam import spec as spec

__all__ = [
    "DATA_BOUND",
    "DATA_KEY",
    "H5_WRITE_ERRORS",
    "LABEL_KEY",
    "LAYOUT",
    "MAX_SAMPLE_FACTOR",
    "MAX_SAMPLE_VALUES",
    "NUMERIC_KINDS",
    "SUFFIX",
    "list_samples",
    "read_raw",
    "split_dir",
    "write_sample",
]

SUFFIX = {"hdf5": ".h5", "npy": ".data.npy"}
LAYOUT = SampleLayout(SUFFIX, spec.SPLITS)
split_dir, list_samples, _check_format = LAYOUT.split_dir, LAYOUT.list_samples, LAYOUT.check_format
DATA_KEY, LABEL_KEY = "climate/data", "climate/labels_0"
NUMERIC_KINDS = "iuf"  # numpy dtype kinds read as numbers (not bool, complex, text, records)
# A sample read without a model shape (stats, convert) may hold at most this many values:
# a declared (200000, 200000, 16) in a 1 MB chunked file would otherwise be allocated.
MAX_SAMPLE_FACTOR = 4
MAX_SAMPLE_VALUES = MAX_SAMPLE_FACTOR * math.prod(spec.SAMPLE_SHAPE)
# |raw value| a sample may hold. The 16 CAM5 fields are SI quantities whose largest
# magnitude is surface pressure (PS, PSL ≈ 1.1e5 Pa; next Z200 ≈ 1.2e4 m, then
# temperatures ≈ 300 K): 1e9 is 10^4 beyond it, and with the statistics' span checked
# against it (stats.normalisation) every admissible value normalises to a finite float32.
DATA_BOUND = 1e9
# Soft links followed while resolving a dataset's path (HDF5's own default limit is 16).
MAX_SOFT_LINKS = 16
# h5py reports a write that failed on close (a full disk) as RuntimeError ("Can't decrement
# id ref count (unable to extend file properly, … 'File too large')")
H5_WRITE_ERRORS = (OSError, RuntimeError)


# --- reading --------------------------------------------------------------------------------
def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _channel(index: int) -> str:
    """'channel 3 UBOT' (the reference's name where the index has one)."""
    name = f" {spec.CHANNELS[index]}" if index < len(spec.CHANNELS) else ""
    return f"channel {index}{name}"


def read_raw(path: Path, fmt: str,
             shape: tuple[int, int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One sample as stored: (float32 (H, W, C), uint8 (H, W)); bad files name the file.

    `shape` (H, W, C) is what the model expects; a mismatch is reported, not reshaped.
    """
    _check_format(fmt)
    labels = path if fmt == "hdf5" else label_path(path)  # the file the labels come from
    if fmt == "hdf5":  # checked as declared, before the read
        (x, y), checked = _read_hdf5(path, shape), False
    else:
        (x, checked), y = _load_npy_data(path), _load_npy(labels, "label")
        _check_numeric(path, x)
        _check_declared(path, x.shape, y.shape, shape)
    with np.errstate(over="ignore"):  # an overflow is reported as Inf just below
        x32 = np.asarray(x, np.float32)
    if not checked:  # values within ±DATA_BOUND stay so, and finite, as float32
        _check_values(path, x32)
    return x32, _labels(labels, y)


def _check_numeric(path: Path, x: np.ndarray | h5py.Dataset) -> None:
    """One line naming the file for data that is not numbers (strings, bytes): the float32
    cast would fail with numpy's "could not convert string to float", naming no file, or
    silently turn text such as "1" into values."""
    if x.dtype.kind not in NUMERIC_KINDS:
        raise SciperfError(f"{path}: data dtype {x.dtype} is not numeric (the climate "
                           "fields must be float32 numbers)")


def _in_range(x: np.ndarray) -> bool:
    """Whether every value of `x` is finite and within ±DATA_BOUND: one min and one max
    (NaN propagates through both and fails the comparison). Non-numeric dtypes pass here
    and are refused after the read by `_check_numeric`."""
    if x.dtype.kind not in NUMERIC_KINDS or x.size == 0:
        return True
    return bool(x.min() >= -DATA_BOUND) and bool(x.max() <= DATA_BOUND)


def _check_values(path: Path, x: np.ndarray) -> None:
    """One line naming the file for NaN/Inf, or finite values beyond ±DATA_BOUND, in the
    (H, W, C) data; the counts and the first bad channel are only looked for once the
    cheap test has failed."""
    if _in_range(x):
        return
    finite = np.isfinite(x)
    if not finite.all():
        bad = ~finite
        nan = int(np.isnan(x).sum())
        first = _channel(int(np.argwhere(bad)[0][-1]))
        raise SciperfError(f"{path}: data holds NaN or Inf ({nan} NaN, "
                           f"{int(bad.sum()) - nan} Inf values; first in {first})")
    beyond = np.abs(x) > DATA_BOUND
    index = tuple(np.argwhere(beyond)[0])
    raise SciperfError(f"{path}: data holds {int(beyond.sum())} value(s) beyond "
                       f"±{DATA_BOUND:g} (first {x[index].item():g} in "
                       f"{_channel(int(index[-1]))}); the climate fields are at most ~1.1e5 "
                       "(surface pressure in Pa)")


def _read_hdf5(path: Path, shape: tuple[int, int, int] | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Data and labels of an hdf5 sample, their declarations checked before anything is
    read: a chunked dataset may declare terabytes in a 1 MB file (unwritten chunks read as
    zeros), and a group where a dataset belongs fails inside h5py naming no file."""
    try:
        with h5py.File(path, "r") as fh:
            x, y = _h5_dataset(fh, path, DATA_KEY), _h5_dataset(fh, path, LABEL_KEY)
            _check_numeric(path, x)
            _check_label_dtype(path, y.dtype)
            _check_declared(path, _h5_shape(x), _h5_shape(y), shape)
            return x[...], y[...]
    except KeyError as exc:
        raise SciperfError(f"{path}: missing dataset {DATA_KEY} or {LABEL_KEY}") from exc
    except (OSError, ValueError, TypeError) as exc:
        raise SciperfError(f"cannot read {path}: {_reason(exc)}") from exc


# The filters HDF5 and h5py build in: a file naming any other makes HDF5 search its plugin
# path and load a shared library, code the data file chooses.
H5_FILTERS = {h5py.h5z.FILTER_DEFLATE: "gzip", h5py.h5z.FILTER_SHUFFLE: "shuffle",
              h5py.h5z.FILTER_FLETCHER32: "fletcher32", h5py.h5z.FILTER_SZIP: "szip",
              h5py.h5z.FILTER_NBIT: "nbit", h5py.h5z.FILTER_SCALEOFFSET: "scaleoffset",
              h5py.h5z.FILTER_LZF: "lzf"}


def _h5_dataset(fh: h5py.File, path: Path, key: str) -> h5py.Dataset:
    """`key` of an open file, which must be a dataset (not a group or a link to one)
    stored in the file itself: its path is resolved link by link without leaving the file
    (:func:`_h5_resolve`), and its creation properties are checked before a byte is read —
    external raw storage reads any host file ("/etc/hostname") as climate data, a virtual
    dataset reads other HDF5 files."""
    obj = fh[_h5_resolve(fh, path, key)]
    if not isinstance(obj, h5py.Dataset):
        raise SciperfError(f"{path}: {key} is a {type(obj).__name__.lower()}, not a dataset")
    dcpl = obj.id.get_create_plist()
    if dcpl.get_layout() == h5py.h5d.VIRTUAL:
        raise SciperfError(f"{path}: {key} is a virtual dataset (its data would be read from "
                           "other files); sciperf reads only data stored in the file itself")
    if dcpl.get_external_count() > 0:
        where = dcpl.get_external(0)[0].decode(errors="replace")
        raise SciperfError(f"{path}: {key} has external raw storage ({where!r}); sciperf "
                           "reads only data stored in the file itself")
    for index in range(dcpl.get_nfilters()):
        code = dcpl.get_filter(index)[0]
        if code not in H5_FILTERS:
            raise SciperfError(f"{path}: {key} is stored through HDF5 filter {code}, which "
                               "HDF5 would load as a plugin (code named by the file); sciperf "
                               f"reads {', '.join(H5_FILTERS.values())}")
    return obj


def _h5_resolve(fh: h5py.File, path: Path, key: str) -> str:
    """The path inside the file that `key` names, found one link at a time without
    traversing any: each name is looked up (H5Lexists, H5Lget_info) in a group already
    reached through hard links, a soft link is followed by resolving its target the same
    way, and an external or user-defined link is refused before HDF5 opens what it names
    (h5py's `name in group` would open it). KeyError for a missing name."""
    links, hops = fh.id.links, 0

    def walk(target: str, here: str) -> str:
        nonlocal hops
        here = "" if target.startswith("/") else here
        for part in (p for p in target.split("/") if p and p != "."):
            name = f"{here}/{part}"
            raw = name.encode("utf-8", "surrogateescape")
            if not links.exists(raw):
                raise KeyError(name)
            kind = links.get_info(raw).type
            if kind == h5py.h5l.TYPE_HARD:
                here = name
                continue
            if kind != h5py.h5l.TYPE_SOFT:
                what = "an external link to " + ":".join(
                    v.decode(errors="replace") for v in links.get_val(raw)) \
                    if kind == h5py.h5l.TYPE_EXTERNAL else "a user-defined link"
                raise SciperfError(f"{path}: {key} leads out of the file ({name} is {what});"
                                   " sciperf reads only data stored in the file itself")
            hops += 1
            if hops > MAX_SOFT_LINKS:
                raise SciperfError(f"{path}: {key} passes more than {MAX_SOFT_LINKS} soft "
                                   "links (a loop)")
            here = walk(links.get_val(raw).decode("utf-8", "surrogateescape"), here)
        return here or "/"

    return walk(key, "")


def _h5_shape(ds: h5py.Dataset) -> tuple[int, ...]:
    """A dataset's declared shape (an empty dataspace, whose shape is None: ())."""
    return tuple(ds.shape or ())


def _check_declared(path: Path, x: tuple[int, ...], y: tuple[int, ...],
                    shape: tuple[int, int, int] | None) -> None:
    """Data (H, W, C) and labels (H, W) of the model's `shape`, or, with no model (stats,
    convert), at most MAX_SAMPLE_VALUES values: the shapes of what is about to be read."""
    if len(x) != 3 or y != x[:2]:
        raise SciperfError(f"{path}: data {x} and labels {y} do not fit "
                           "(expected (H, W, C) data and (H, W) labels)")
    if shape is not None and x != tuple(shape):
        raise SciperfError(f"{path}: sample shape {x} does not match the model's "
                           f"input {tuple(shape)} (model.height/width/in_channels)")
    if shape is None and math.prod(x) > MAX_SAMPLE_VALUES:
        raise SciperfError(f"{path}: {DATA_KEY} declares shape {x} ({math.prod(x) * 4 / 2**30:.1f}"
                           f" GiB as float32), over {MAX_SAMPLE_FACTOR}× the reference's "
                           f"{spec.SAMPLE_SHAPE}: not a DeepCAM sample")


def _load_npy(path: Path, what: str) -> np.ndarray:
    try:
        return npy.load(path)  # thread-safe header parse (loader threads)
    except (OSError, ValueError, EOFError) as exc:
        raise SciperfError(f"cannot read {what} file {path}: {_reason(exc)}") from exc


def _load_npy_data(path: Path) -> tuple[np.ndarray, bool]:
    """The data file and whether its values are finite and within ±DATA_BOUND, checked
    piece by piece as it is read (while each piece is in the CPU cache: cheaper than a
    pass over the whole array after it)."""
    try:
        return npy.load_checked(path, _in_range)
    except (OSError, ValueError, EOFError) as exc:
        raise SciperfError(f"cannot read data file {path}: {_reason(exc)}") from exc


def _labels(path: Path, y: np.ndarray) -> np.ndarray:
    """Labels as uint8; values outside {0, 1, 2} are a corrupt or foreign file. `path` is
    the file holding the labels (npy: the .label.npy), so the message points at it."""
    classes = f"classes 0..{spec.NUM_CLASSES - 1}"
    _check_label_dtype(path, y.dtype)
    bad = _first_bad_label(y)
    if bad is not None:
        raise SciperfError(f"{path}: label value {bad} is out of range; labels must be "
                           f"{classes} (dtype {y.dtype})")
    return y.astype(np.uint8)


def _check_label_dtype(path: Path, dtype: np.dtype) -> None:
    """Labels are numbers (text or records cannot be classes)."""
    if dtype.kind not in "iuf":
        raise SciperfError(f"{path}: labels must be classes 0..{spec.NUM_CLASSES - 1}, found "
                           f"dtype {dtype}")


def _first_bad_label(y: np.ndarray) -> int | float | None:
    """The first value outside [0, NUM_CLASSES) (NaN included) or, in a float file, not a
    whole number (1.5 was floored to class 1), or None; the min/max pass decides for a good
    integer file, the search for the culprit runs only for a bad one."""
    whole = y.dtype.kind != "f" or bool((y == np.floor(y)).all())
    if y.size == 0 or (whole and y.min() >= 0 and y.max() < spec.NUM_CLASSES):
        return None
    bad = ~((y >= 0) & (y < spec.NUM_CLASSES))
    if y.dtype.kind == "f":
        bad |= y != np.floor(y)
    return y[bad].flat[0].item()


# --- writing --------------------------------------------------------------------------------
def write_sample(folder: Path, name: str, fmt: str, x: np.ndarray, y: np.ndarray) -> Path:
    """Write one sample atomically (temp file + rename); returns the data file path."""
    _check_format(fmt)
    if fmt == "hdf5":
        path = folder / f"{name}{SUFFIX['hdf5']}"
        with atomic.replacing(path, H5_WRITE_ERRORS) as tmp, h5py.File(tmp, "w") as fh:
            fh.create_dataset(DATA_KEY, data=np.asarray(x, np.float32))
            fh.create_dataset(LABEL_KEY, data=np.asarray(y, np.uint8))
        return path
    return npy.write_pair(folder, name, np.asarray(x, np.float32), np.asarray(y, np.uint8))
