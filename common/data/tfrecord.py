"""TFRecord files and ``tf.train.Example`` messages without TensorFlow.

Reference datasets ship as ``.tfrecord`` files (often gzip-compressed, often one
``tf.train.Example`` per file). This module is the generic codec's one import point:
records and Example messages with numpy and the standard library only, so the
framework-free ``sciperf`` package (and any backend) can prepare, check and load the data
without importing an ML framework. A workload's own sample layout (which features, which
shapes) lives in its folder and is built on :func:`read_example` / :func:`feature_parts`.

The codec has two layers, each in its own module and re-exported here:

* :mod:`sciperf.data.tfrecord_framing` — the container: records framed with their length
  and masked CRC-32C, gzip or not, written atomically, read as a checked stream;
* :mod:`sciperf.data.tf_example` — the payload: the ``tf.train.Example`` protobuf subset,
  encoded and decoded (protobuf semantics for foreign writers, no copy of large bytes).

This module itself holds what joins them: files of exactly one Example (the per-sample
layout of the reference datasets) and the checked access to their features.
"""

from __future__ import annotations

import os

import numpy as np

from sciperf.data.tf_example import (
    _KIND_NAMES,
    _floats,
    _ListParts,
    _MalformedError,
    _parse_example,
    decode_example,
    encode_example,
)
from sciperf.data.tfrecord_framing import PathLike, TFRecordError, read_records, write_records

__all__ = [
    "TFRecordError",
    "decode_example",
    "encode_example",
    "feature_parts",
    "floats",
    "read_example",
    "read_records",
    "write_records",
]


# --------------------------------------------------------------------- one-Example files


def _only_record(path: PathLike) -> bytes:
    """Return the single record of a file, failing if there are zero or several."""
    name = os.fspath(path)
    records = read_records(path)
    try:
        first = next(records, None)
        if first is None:
            raise TFRecordError(f"{name}: expected exactly one record, found none")
        if next(records, None) is not None:
            raise TFRecordError(f"{name}: expected exactly one record, found more")
    finally:
        records.close()
    return first


def read_example(path: PathLike) -> dict[str, _ListParts]:
    """The features of a file holding exactly one ``tf.train.Example`` (errors name it)."""
    name = os.fspath(path)
    payload = _only_record(path)
    try:
        return _parse_example(payload)
    except _MalformedError as exc:
        raise TFRecordError(f"{name}: malformed tf.train.Example protobuf: {exc}") from None


def feature_parts(features: dict[str, _ListParts], key: str, kind: str, name: str) -> list:
    """The pieces of feature ``key`` (kind ``bytes_list``, ``float_list`` or
    ``int64_list``), checking it exists and has that kind; ``name`` is the file."""
    want = {v: k for k, v in _KIND_NAMES.items()}[kind]
    if key not in features:
        raise TFRecordError(f"{name}: missing feature {key!r} (found {sorted(features)})")
    found = features[key].kind
    if found != want:
        found_name = _KIND_NAMES.get(found, "empty feature")
        raise TFRecordError(
            f"{name}: feature {key!r} is a {found_name}, expected a {kind}"
        )
    return features[key].parts


def floats(parts: list) -> np.ndarray:
    """The float32 values of a float_list feature's pieces."""
    return _floats(parts)
