"""``tf.train.Example`` messages without TensorFlow: encode and decode the protobuf subset.

The payload layer of the generic TFRecord codec (:mod:`sciperf.data.tfrecord`): a record's
bytes ↔ a dict of features, with numpy and the standard library only. The records that
carry these payloads in files are :mod:`sciperf.data.tfrecord_framing`'s.

Protobuf subset (``tf.train.Example``)::

    Example   { 1: Features }
    Features  { 1: repeated Entry }           # map<string, Feature>
    Entry     { 1: string key, 2: Feature }
    Feature   { oneof: 1: BytesList, 2: FloatList, 3: Int64List }
    BytesList { 1: repeated bytes }
    FloatList { 1: repeated float  (packed or not) }
    Int64List { 1: repeated int64  (packed or not) }

The decoder follows protobuf semantics where they matter for foreign writers:
fields may come in any order, unknown fields are skipped by wire type,
repeated scalars may be packed or unpacked, a repeated message field is merged,
and the last oneof member wins.  Large ``bytes`` fields are sliced from the
payload through ``memoryview`` so decoding a 16.8 MB sample copies the pixel
data at most once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from sciperf.data.tfrecord_framing import TFRecordError

__all__ = ["DecodedFeature", "FeatureValue", "decode_example", "encode_example"]

FeatureValue = bytes | list[bytes] | np.ndarray | list[float] | list[int]
DecodedFeature = list[bytes] | np.ndarray

_U64 = 0xFFFFFFFFFFFFFFFF
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
# Wire types of the protobuf encoding.
_VARINT, _FIXED64, _LEN, _START_GROUP, _END_GROUP, _FIXED32 = 0, 1, 2, 3, 4, 5
# Field numbers of tf.train.Feature's oneof, and their names in error messages.
_KIND_NAMES = {1: "bytes_list", 2: "float_list", 3: "int64_list"}
_BYTES, _FLOAT, _INT64 = 1, 2, 3
# Same limit as protobuf's default recursion limit.
_MAX_GROUP_DEPTH = 100


class _MalformedError(ValueError):
    """Internal: protobuf decoding failed; re-raised as TFRecordError with a source."""



# ---------------------------------------------------------------- protobuf: write


def _varint(value: int) -> bytes:
    """Encode a non-negative integer below 2**64 as a protobuf base-128 varint."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    """Encode a field key (field number and wire type)."""
    return _varint((number << 3) | wire_type)


@dataclass
class _Pieces:
    """A message under construction as a list of byte chunks plus its total size.

    Nesting length-delimited fields by concatenation would copy a 16.8 MB
    ``x`` once per nesting level; keeping chunks and joining once copies it once.
    """

    chunks: list[bytes | memoryview] = field(default_factory=list)
    size: int = 0

    def add(self, chunk: bytes | memoryview) -> None:
        """Append raw bytes to the message."""
        self.chunks.append(chunk)
        self.size += len(chunk)

    def add_len_field(self, number: int, body: _Pieces) -> None:
        """Append ``body`` as a length-delimited field ``number``."""
        self.add(_key(number, _LEN) + _varint(body.size))
        self.chunks.extend(body.chunks)
        self.size += body.size


def _leaf(data: bytes | memoryview) -> _Pieces:
    """Wrap one chunk of bytes as a _Pieces body."""
    pieces = _Pieces()
    pieces.add(data)
    return pieces


def _is_bytes_like(value: object) -> bool:
    """Return whether ``value`` is a single bytes value for a bytes_list."""
    return isinstance(value, bytes | bytearray | memoryview)


def _classify(name: str, value: object) -> int:
    """Decide which Feature kind ``value`` becomes (bytes, float or int64 list)."""
    if _is_bytes_like(value):
        return _BYTES
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f":
            return _FLOAT
        if value.dtype.kind in "iub":
            return _INT64
        raise TypeError(f"feature {name!r}: unsupported array dtype {value.dtype}")
    if not isinstance(value, list | tuple):
        raise TypeError(f"feature {name!r}: unsupported value type {type(value).__name__}")
    if not value:
        raise ValueError(
            f"feature {name!r}: cannot infer the kind of an empty list; "
            "pass an empty np.ndarray with a dtype instead"
        )
    if all(_is_bytes_like(v) for v in value):
        return _BYTES
    if all(isinstance(v, int | np.integer) for v in value):
        return _INT64
    if all(isinstance(v, int | float | np.integer | np.floating) for v in value):
        return _FLOAT
    raise TypeError(f"feature {name!r}: list mixes bytes and numbers or has unsupported items")


def _bytes_list(value: object) -> _Pieces:
    """Encode a BytesList message from one bytes value or a list of them."""
    items = [value] if _is_bytes_like(value) else value
    body = _Pieces()
    for item in items:
        body.add_len_field(1, _leaf(memoryview(item).cast("B")))
    return body


def _float_list(value: object) -> _Pieces:
    """Encode a FloatList message (packed little-endian float32)."""
    data = np.ascontiguousarray(value, dtype="<f4").reshape(-1).tobytes()
    body = _Pieces()
    body.add_len_field(1, _leaf(data))
    return body


def _int64_list(name: str, value: object) -> _Pieces:
    """Encode an Int64List message (packed varints, two's complement for negatives)."""
    values = [int(v) for v in np.asarray(value).reshape(-1).tolist()]
    if any(v < _INT64_MIN or v > _INT64_MAX for v in values):
        raise ValueError(f"feature {name!r}: value outside the int64 range")
    body = _Pieces()
    body.add_len_field(1, _leaf(b"".join(_varint(v & _U64) for v in values)))
    return body


def _feature(name: str, value: object) -> _Pieces:
    """Encode one tf.train.Feature with the kind inferred from ``value``."""
    kind = _classify(name, value)
    if kind == _BYTES:
        inner = _bytes_list(value)
    elif kind == _FLOAT:
        inner = _float_list(value)
    else:
        inner = _int64_list(name, value)
    feature = _Pieces()
    feature.add_len_field(kind, inner)
    return feature


def encode_example(features: dict[str, FeatureValue]) -> bytes:
    """Serialize ``features`` as a ``tf.train.Example`` protobuf.

    Kinds are inferred so callers need no protobuf knowledge: bytes (or a list
    of bytes) become a ``bytes_list``; float arrays and lists containing a
    Python/numpy float become a ``float_list`` (stored as float32, arrays
    flattened in C order); integer/bool arrays and all-integer lists become an
    ``int64_list``.  Keys are written in sorted order so the same input always
    gives the same bytes (reproducible datasets, stable checksums).
    """
    features_msg = _Pieces()
    for name in sorted(features):
        if not isinstance(name, str):
            raise TypeError(f"feature names must be str, got {type(name).__name__}")
        entry = _Pieces()
        entry.add_len_field(1, _leaf(name.encode("utf-8")))
        entry.add_len_field(2, _feature(name, features[name]))
        features_msg.add_len_field(1, entry)
    example = _Pieces()
    example.add_len_field(1, features_msg)
    return b"".join(example.chunks)


# ----------------------------------------------------------------- protobuf: read


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Decode the varint at ``pos``; return (value mod 2**64, position after it)."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise _MalformedError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & _U64, pos
        shift += 7
        if shift >= 70:
            raise _MalformedError("varint longer than 10 bytes")


def _take(buf: memoryview, pos: int, size: int) -> tuple[memoryview, int]:
    """Slice ``size`` bytes at ``pos`` without copying; fail if they are not there."""
    end = pos + size
    if end > len(buf):
        raise _MalformedError(f"field of {size} bytes at offset {pos} runs past the end")
    return buf[pos:end], end


def _skip_group(buf: memoryview, pos: int, number: int, depth: int = 0) -> int:
    """Skip a (deprecated) group up to its matching end-group key; return the end."""
    if depth >= _MAX_GROUP_DEPTH:  # crafted input must not exhaust the Python stack
        raise _MalformedError("groups nested too deeply")
    while True:
        key, pos = _read_varint(buf, pos)
        wire_type = key & 7
        if wire_type == _END_GROUP:
            if key >> 3 != number:
                raise _MalformedError("mismatched end-group")
            return pos
        if wire_type == _START_GROUP:
            pos = _skip_group(buf, pos, key >> 3, depth + 1)
        else:
            pos = _read_value(buf, pos, wire_type)[1]


def _read_value(buf: memoryview, pos: int, wire_type: int) -> tuple[int | memoryview, int]:
    """Read one non-group value; varints as int, everything else as a memoryview."""
    if wire_type == _VARINT:
        return _read_varint(buf, pos)
    if wire_type == _FIXED64:
        return _take(buf, pos, 8)
    if wire_type == _FIXED32:
        return _take(buf, pos, 4)
    if wire_type == _LEN:
        size, pos = _read_varint(buf, pos)
        return _take(buf, pos, size)
    raise _MalformedError(f"invalid wire type {wire_type}")


def _fields(buf: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """Yield (field number, wire type, value) for each field; groups are skipped."""
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise _MalformedError("field number 0")
        if wire_type == _START_GROUP:
            pos = _skip_group(buf, pos, number)
            continue
        value, pos = _read_value(buf, pos, wire_type)
        yield number, wire_type, value


def _expect_view(value: int | memoryview, what: str) -> memoryview:
    """Check that a known message/bytes field really is length-delimited."""
    if not isinstance(value, memoryview):
        raise _MalformedError(f"{what} is not length-delimited")
    return value


def _decode_packed_varints(data: memoryview) -> np.ndarray:
    """Decode a packed run of varints to int64 with numpy (no per-byte Python loop)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size == 0:
        return np.zeros(0, dtype=np.int64)
    if raw[-1] & 0x80:
        raise _MalformedError("truncated packed varint")
    ends = np.flatnonzero(raw < 0x80)
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if lengths.max() > 10:
        raise _MalformedError("varint longer than 10 bytes")
    index_in_varint = np.arange(raw.size) - np.repeat(starts, lengths)
    shifts = (7 * index_in_varint).astype(np.uint64)
    groups = (raw & 0x7F).astype(np.uint64) << shifts  # bits beyond 64 drop, as in protobuf
    return np.add.reduceat(groups, starts).view(np.int64)


@dataclass
class _ListParts:
    """The pieces of one Feature's value list, in wire order, before concatenation."""

    kind: int = 0
    parts: list = field(default_factory=list)  # memoryviews or arrays, by kind


def _merge_feature(parts: _ListParts, kind: int, body: memoryview) -> None:
    """Add a Bytes/Float/Int64List body; a different oneof member replaces the old one."""
    if kind != parts.kind:
        parts.kind, parts.parts = kind, []
    for number, wire_type, value in _fields(body):
        if number != 1:
            continue
        if kind == _BYTES:
            parts.parts.append(_expect_view(value, "bytes_list value"))
        elif kind == _FLOAT:
            parts.parts.append(_float_part(wire_type, value))
        else:
            parts.parts.append(_int64_part(wire_type, value))


def _float_part(wire_type: int, value: int | memoryview) -> memoryview:
    """Return the raw little-endian float32 bytes of a packed or unpacked float field."""
    if wire_type not in (_LEN, _FIXED32) or not isinstance(value, memoryview):
        raise _MalformedError(f"float_list value has wire type {wire_type}")
    if len(value) % 4:
        raise _MalformedError(f"packed float_list of {len(value)} bytes is not a multiple of 4")
    return value


def _int64_part(wire_type: int, value: int | memoryview) -> np.ndarray:
    """Return the int64 values of a packed or unpacked int64 field."""
    if wire_type == _VARINT and isinstance(value, int):
        return np.array([value], dtype=np.uint64).view(np.int64)
    if wire_type == _LEN and isinstance(value, memoryview):
        return _decode_packed_varints(value)
    raise _MalformedError(f"int64_list value has wire type {wire_type}")


def _parse_feature(body: memoryview, parts: _ListParts) -> None:
    """Merge a tf.train.Feature into ``parts`` (a repeated message field is merged)."""
    for number, _, value in _fields(body):
        if number in _KIND_NAMES:
            _merge_feature(parts, number, _expect_view(value, _KIND_NAMES[number]))


def _parse_entry(body: memoryview) -> tuple[str, _ListParts]:
    """Parse one map entry of Features (key string, Feature value)."""
    key = b""
    parts = _ListParts()
    for number, _, value in _fields(body):
        if number == 1:
            key = bytes(_expect_view(value, "feature name"))
        elif number == 2:
            _parse_feature(_expect_view(value, "feature value"), parts)
    try:
        return key.decode("utf-8"), parts
    except UnicodeDecodeError as exc:
        raise _MalformedError(f"feature name is not UTF-8: {key!r}") from exc


def _parse_example(payload: bytes | memoryview) -> dict[str, _ListParts]:
    """Parse a tf.train.Example into raw per-feature pieces (no data copied yet)."""
    view = memoryview(payload).cast("B")
    features: dict[str, _ListParts] = {}
    for number, _, value in _fields(view):
        if number != 1:
            continue
        for entry_number, _, entry in _fields(_expect_view(value, "features")):
            if entry_number == 1:
                name, parts = _parse_entry(_expect_view(entry, "feature entry"))
                features[name] = parts  # map semantics: the last entry for a key wins
    return features


def _floats(parts: list) -> np.ndarray:
    """Join raw little-endian float32 pieces into a native float32 array."""
    return np.frombuffer(b"".join(parts), dtype="<f4").astype(np.float32)


def _finish(parts: _ListParts) -> DecodedFeature:
    """Turn raw pieces into the public value (list of bytes or numpy array)."""
    if parts.kind == _FLOAT:
        return _floats(parts.parts)
    if parts.kind == _INT64:
        if not parts.parts:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(parts.parts).astype(np.int64)
    return [bytes(view) for view in parts.parts]  # bytes_list, or a Feature with no kind


def decode_example(
    payload: bytes | memoryview, *, source: str = "<payload>"
) -> dict[str, DecodedFeature]:
    """Decode a serialized ``tf.train.Example`` into plain Python/numpy values.

    ``bytes_list`` -> ``list[bytes]``, ``float_list`` -> float32 array,
    ``int64_list`` -> int64 array; a feature with no kind set decodes to ``[]``.
    ``source`` (e.g. the file name) only goes into error messages, so a corrupt
    sample in a large dataset can be found.
    """
    try:
        return {name: _finish(parts) for name, parts in _parse_example(payload).items()}
    except _MalformedError as exc:
        raise TFRecordError(f"{source}: malformed tf.train.Example protobuf: {exc}") from None
