"""CosmoFlow's reference sample layout on the generic TFRecord codec.

One gzip-compressed ``.tfrecord`` per sample holding a single ``tf.train.Example`` with a
``bytes_list`` feature ``x`` (the raw little-endian bytes of an int16 array of shape
``(128, 128, 128, 4)``; the shape is not stored) and a ``float_list`` feature ``y`` (4
floats), exactly as the reference dataset ships it.
"""

from __future__ import annotations

import os

import numpy as np

from sciperf.data.tfrecord import (
    PathLike,
    TFRecordError,
    encode_example,
    feature_parts,
    floats,
    read_example,
    write_records,
)


def write_sample(path: PathLike, x: np.ndarray, y: np.ndarray) -> None:
    """Write one sample in the reference layout (gzip, one Example).

    ``x`` is stored as the raw little-endian int16 bytes of the array (any shape; the
    shape is not stored, exactly like the reference files) and ``y`` as a float_list of 4
    float32 values.
    """
    x = np.asarray(x)
    y = np.asarray(y)
    if x.dtype.kind != "i" or x.dtype.itemsize != 2:  # any byte order of int16
        raise TypeError(f"x must be int16, got {x.dtype}")
    if y.size != 4:
        raise ValueError(f"y must hold 4 values, got shape {y.shape}")
    x_bytes = np.ascontiguousarray(x, dtype="<i2").data.cast("B")
    payload = encode_example({"x": x_bytes, "y": y.astype(np.float32).reshape(4)})
    write_records(path, [payload], compression="gzip")


def _decode_x(parts: list, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Turn the ``x`` bytes into an int16 array of ``shape``, checking its size."""
    expected = int(np.prod(shape, dtype=np.int64)) * 2
    if len(parts) != 1:
        raise TFRecordError(f"{name}: feature 'x' has {len(parts)} bytes values, expected 1")
    if len(parts[0]) != expected:
        raise TFRecordError(
            f"{name}: feature 'x' has {len(parts[0])} bytes, expected {expected} "
            f"for int16 shape {tuple(shape)}"
        )
    # One copy: gives an aligned, writable, native-endian array that does not
    # keep the whole decompressed record alive.
    return np.frombuffer(parts[0], dtype="<i2").astype(np.int16).reshape(shape)


def read_sample(path: PathLike, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Read one sample: (int16 array of ``shape``, float32 array of 4).

    Checks the layout the benchmark relies on (exactly one record; ``x`` is one bytes
    value of exactly ``prod(shape) * 2`` bytes; ``y`` has 4 floats) and raises
    TFRecordError naming the file otherwise, since the reference files do not store the
    shape and a wrong shape would otherwise train on garbage.
    """
    name = os.fspath(path)
    features = read_example(path)
    x = _decode_x(feature_parts(features, "x", "bytes_list", name), shape, name)
    return x, _targets(features, name)


def read_cube(path: PathLike, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Read one sample whose cube size no config gives (a conversion): (int16 array of
    size³ × `channels`, float32 array of 4). The size follows from the bytes of ``x``,
    which must make a whole cube of `channels` int16 values, else TFRecordError naming
    the file."""
    name = os.fspath(path)
    features = read_example(path)
    parts = feature_parts(features, "x", "bytes_list", name)
    held = len(parts[0]) if len(parts) == 1 else 0
    size = round((held / 2 / channels) ** (1 / 3))
    if len(parts) == 1 and (size < 1 or size**3 * channels * 2 != held):
        raise TFRecordError(f"{name}: feature 'x' has {held} bytes, not a cube of "
                            f"{channels} int16 channels (size³ × {channels} × 2 bytes)")
    x = _decode_x(parts, (size, size, size, channels), name)
    return x, _targets(features, name)


def _targets(features: dict, name: str) -> np.ndarray:
    """The 4 float32 targets of feature ``y``."""
    y = floats(feature_parts(features, "y", "float_list", name))
    if y.shape != (4,):
        raise TFRecordError(f"{name}: feature 'y' has {y.size} floats, expected 4")
    return y
