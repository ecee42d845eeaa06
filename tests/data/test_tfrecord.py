"""Tests for sciperf.data.tfrecord: the framework-free TFRecord / tf.train.Example codec.

TensorFlow cross-checks run in a subprocess so this pytest process never
imports TensorFlow (the sciperf package must work without any framework).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from sciperf.data.tfrecord import (
    TFRecordError,
    decode_example,
    encode_example,
    read_records,
    write_records,
)
from sciperf.workloads.cosmoflow.tfrecord import read_sample as read_cosmoflow_sample
from sciperf.workloads.cosmoflow.tfrecord import write_sample as write_cosmoflow_sample

SHAPE = (8, 8, 8, 4)


def _sample(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A small CosmoFlow-like sample with negative and large int16 values."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-32768, 32767, size=SHAPE, dtype=np.int16)
    y = rng.standard_normal(4).astype(np.float32)
    return x, y


def _varint(value: int) -> bytes:
    """Protobuf varint, for hand-built messages (test-local, independent of the module)."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, wire_type: int, body: bytes) -> bytes:
    """Key + (length prefix for wire type 2) + body."""
    key = _varint(number << 3 | wire_type)
    if wire_type == 2:
        return key + _varint(len(body)) + body
    return key + body


def _flip(path: Path, offset: int) -> None:
    """Flip all bits of one byte of a file in place."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


# ------------------------------------------------------------------ round trips


@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_records_round_trip(tmp_path: Path, compression: str) -> None:
    payloads = [b"", b"a", os.urandom(100_000), bytes(range(256)) * 3]
    path = tmp_path / "r.tfrecord"
    write_records(path, payloads, compression=compression)
    assert list(read_records(path, compression=compression)) == payloads
    assert list(read_records(path)) == payloads  # "auto" detects the compression
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == (compression == "gzip")


def test_records_accepts_bytes_like_payloads(tmp_path: Path) -> None:
    path = tmp_path / "r.tfrecord"
    write_records(path, [bytearray(b"xyz"), memoryview(b"0123456789")[2:5]])
    assert list(read_records(path)) == [b"xyz", b"234"]


def test_many_records_in_one_file(tmp_path: Path) -> None:
    examples = [encode_example({"i": [i], "s": f"rec{i}".encode()}) for i in range(500)]
    path = tmp_path / "many.tfrecord"
    write_records(path, iter(examples))
    decoded = [decode_example(p) for p in read_records(path)]
    assert [int(d["i"][0]) for d in decoded] == list(range(500))
    assert decoded[123]["s"] == [b"rec123"]


def test_empty_file_has_no_records(tmp_path: Path) -> None:
    path = tmp_path / "empty.tfrecord"
    write_records(path, [], compression="none")
    assert path.stat().st_size == 0
    assert list(read_records(path)) == []
    write_records(path, [], compression="gzip")
    assert list(read_records(path)) == []


def test_concatenated_gzip_members_are_read(tmp_path: Path) -> None:
    a, b, both = tmp_path / "a", tmp_path / "b", tmp_path / "both"
    write_records(a, [b"one"])
    write_records(b, [b"two", b"three"])
    both.write_bytes(a.read_bytes() + b.read_bytes())
    assert list(read_records(both)) == [b"one", b"two", b"three"]


def test_auto_detection_of_raw_file_starting_with_gzip_magic(tmp_path: Path) -> None:
    # A payload of 0x8b1f bytes makes the raw file start with the gzip magic 1f 8b;
    # the valid length CRC must still identify it as uncompressed.
    payload = os.urandom(0x8B1F)
    path = tmp_path / "magic.tfrecord"
    write_records(path, [payload], compression="none")
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert list(read_records(path)) == [payload]


def test_gzip_output_is_reproducible(tmp_path: Path) -> None:
    first, second = tmp_path / "1", tmp_path / "2"
    write_records(first, [b"same"] * 3)
    write_records(second, [b"same"] * 3)
    assert first.read_bytes() == second.read_bytes()
    assert gzip.decompress(first.read_bytes())[:8] == struct.pack("<Q", 4)


def test_invalid_compression_argument(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="compression"):
        write_records(tmp_path / "x", [b""], compression="zlib")
    write_records(tmp_path / "x", [b""])
    with pytest.raises(ValueError, match="compression"):
        list(read_records(tmp_path / "x", compression="lz4"))


# -------------------------------------------------------------- Example encoding


def test_example_round_trip_all_kinds() -> None:
    features = {
        "bytes_one": b"\x00\x01raw",
        "bytes_many": [b"a", b"", b"ccc"],
        "floats_np64": np.array([0.5, -1.25, 3.0e38]),
        "floats_np32": np.arange(6, dtype=np.float32).reshape(2, 3),
        "floats_py": [1.5, 2, -0.0],
        "ints_py": [0, 1, -1, 300, 2**63 - 1, -(2**63)],
        "ints_np": np.array([7, -7], dtype=np.int32),
        "bools": np.array([True, False]),
        "empty_floats": np.zeros(0, dtype=np.float32),
    }
    out = decode_example(encode_example(features))
    assert set(out) == set(features)
    assert out["bytes_one"] == [b"\x00\x01raw"]
    assert out["bytes_many"] == [b"a", b"", b"ccc"]
    for key in ("floats_np64", "floats_np32", "floats_py", "empty_floats"):
        assert out[key].dtype == np.float32
        expected = np.asarray(features[key], dtype=np.float32).reshape(-1)
        np.testing.assert_array_equal(out[key], expected)
    assert np.signbit(out["floats_py"][2])
    for key in ("ints_py", "ints_np", "bools"):
        assert out[key].dtype == np.int64
        np.testing.assert_array_equal(out[key], np.asarray(features[key]).astype(np.int64))


def test_example_encoding_is_deterministic() -> None:
    a = encode_example({"b": [1.0], "a": b"x", "c": [3]})
    b = encode_example({"c": [3], "a": b"x", "b": [1.0]})
    assert a == b
    assert a.index(b"\x0a\x01a") < a.index(b"\x0a\x01b") < a.index(b"\x0a\x01c")


def test_known_encoding_bytes() -> None:
    # Example{features{feature{key:"k" value{int64_list{value:[1, 150]}}}}}, packed.
    int64_list = _field(1, 2, b"\x01\x96\x01")
    feature = _field(3, 2, int64_list)
    entry = _field(1, 2, b"k") + _field(2, 2, feature)
    expected = _field(1, 2, _field(1, 2, entry))
    assert encode_example({"k": [1, 150]}) == expected


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ([], ValueError),
        ([b"a", 1], TypeError),
        ("text", TypeError),
        (np.array(["a"]), TypeError),
        ([2**64], ValueError),
        (np.array([2**63], dtype=np.uint64), ValueError),
    ],
)
def test_encode_rejects_ambiguous_or_unsupported_values(value: object, error: type) -> None:
    with pytest.raises(error):
        encode_example({"f": value})  # type: ignore[dict-item]


def test_decoder_accepts_unpacked_reordered_and_unknown_fields() -> None:
    floats = b"".join(_field(1, 5, struct.pack("<f", v)) for v in (1.5, -2.0))
    floats += _field(1, 2, struct.pack("<2f", 3.0, 4.0))  # packed and unpacked mixed
    ints = _field(1, 0, _varint(5)) + _field(1, 0, _varint((-3) & (2**64 - 1)))
    ints += _field(1, 2, _varint(7) + _varint(2**63))  # packed: 7, INT64_MIN
    unknown = (
        _field(9, 0, _varint(12345))
        + _field(10, 1, b"\x00" * 8)
        + _field(11, 5, b"\x00" * 4)
        + _field(12, 2, b"junk")
        + _varint(13 << 3 | 3)
        + _field(1, 0, b"\x01")
        + _varint(13 << 3 | 4)  # a group
    )
    entry_f = _field(2, 2, unknown + _field(2, 2, floats)) + unknown + _field(1, 2, b"f")
    entry_i = _field(2, 2, _field(3, 2, ints + unknown)) + _field(1, 2, b"i")
    entry_b = _field(1, 2, b"b") + _field(2, 2, _field(1, 2, _field(1, 2, b"v")))
    features = _field(1, 2, entry_f) + unknown + _field(1, 2, entry_i)
    # Example.features given twice: protobuf merges them (map entries accumulate).
    payload = unknown + _field(1, 2, features) + _field(1, 2, _field(1, 2, entry_b))
    out = decode_example(payload)
    np.testing.assert_array_equal(out["f"], np.array([1.5, -2.0, 3.0, 4.0], np.float32))
    np.testing.assert_array_equal(out["i"], np.array([5, -3, 7, -(2**63)], np.int64))
    assert out["b"] == [b"v"]


def test_decoder_oneof_last_member_wins_and_empty_feature() -> None:
    feature = _field(1, 2, _field(1, 2, b"old")) + _field(2, 2, _field(1, 5, b"\x00\x00\x80?"))
    entry = _field(1, 2, b"k") + _field(2, 2, feature)
    empty_entry = _field(1, 2, b"e") + _field(2, 2, b"")
    out = decode_example(_field(1, 2, _field(1, 2, entry) + _field(1, 2, empty_entry)))
    np.testing.assert_array_equal(out["k"], np.array([1.0], np.float32))
    assert out["e"] == []


@pytest.mark.parametrize(
    "payload",
    [
        b"\x0a\x05abc",  # length runs past the end
        b"\x0a",  # truncated varint length
        b"\x0a\x03\x0a\x01",  # nested field truncated
        b"\x0f",  # invalid wire type 7
        b"\x00\x01",  # field number 0
        b"\x0c",  # end-group without a start
        b"\x0a\x04\x0a\x02\x12\x00" + b"\xff" * 11,  # overlong varint
        _field(1, 2, _field(1, 2, _field(2, 2, _field(2, 2, _field(1, 2, b"abc"))))),
        _field(1, 2, _field(1, 2, _field(2, 2, _field(3, 2, _field(1, 2, b"\x80"))))),
        _field(1, 2, _field(1, 0, b"\x01")),  # Features.feature as a varint
        b"\x0b" * 5000,  # groups nested absurdly deep
    ],
)
def test_decoder_rejects_malformed_protobuf(payload: bytes) -> None:
    with pytest.raises(TFRecordError, match=r"sample\.bin: malformed"):
        decode_example(payload, source="sample.bin")


# ----------------------------------------------------------------- CosmoFlow


def test_cosmoflow_round_trip(tmp_path: Path) -> None:
    x, y = _sample()
    path = tmp_path / "univ_0.tfrecord"
    write_cosmoflow_sample(path, x, y)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    x2, y2 = read_cosmoflow_sample(path, SHAPE)
    assert x2.dtype == np.int16 and x2.shape == SHAPE
    assert y2.dtype == np.float32 and y2.shape == (4,)
    np.testing.assert_array_equal(x2, x)
    np.testing.assert_array_equal(y2, y)
    assert x2.flags.writeable and x2.flags.c_contiguous and x2.flags.aligned


def test_cosmoflow_layout_matches_reference_format(tmp_path: Path) -> None:
    x, y = _sample(1)
    path = tmp_path / "s.tfrecord"
    write_cosmoflow_sample(path, x, y.astype(np.float64))
    [payload] = list(read_records(path))
    features = decode_example(payload)
    assert set(features) == {"x", "y"}
    assert features["x"] == [x.astype("<i2").tobytes()]
    np.testing.assert_array_equal(features["y"], y)


def test_cosmoflow_big_endian_input_is_stored_little_endian(tmp_path: Path) -> None:
    x, y = _sample(2)
    path = tmp_path / "be.tfrecord"
    write_cosmoflow_sample(path, x.astype(">i2"), y)
    np.testing.assert_array_equal(read_cosmoflow_sample(path, SHAPE)[0], x)


def test_cosmoflow_writer_validates_inputs(tmp_path: Path) -> None:
    x, y = _sample()
    with pytest.raises(TypeError, match="int16"):
        write_cosmoflow_sample(tmp_path / "a", x.astype(np.int32), y)
    with pytest.raises(ValueError, match="4"):
        write_cosmoflow_sample(tmp_path / "a", x, y[:3])
    assert list(tmp_path.iterdir()) == []


def test_cosmoflow_wrong_shape_names_file_and_sizes(tmp_path: Path) -> None:
    x, y = _sample()
    path = tmp_path / "univ_wrong.tfrecord"
    write_cosmoflow_sample(path, x, y)
    with pytest.raises(TFRecordError) as info:
        read_cosmoflow_sample(path, (16, 8, 8, 4))
    message = str(info.value)
    assert "univ_wrong.tfrecord" in message
    assert str(x.nbytes) in message and str(2 * x.nbytes) in message
    assert "(16, 8, 8, 4)" in message


@pytest.mark.parametrize(
    ("features", "match"),
    [
        ({"y": [1.0, 2.0, 3.0, 4.0]}, "missing feature 'x'"),
        ({"x": b"\x00" * 4096}, "missing feature 'y'"),
        ({"x": [1, 2], "y": [1.0, 2.0, 3.0, 4.0]}, "'x' is a int64_list, expected a bytes_list"),
        ({"x": b"\x00" * 4096, "y": [b"1"]}, "'y' is a bytes_list, expected a float_list"),
        ({"x": b"\x00" * 4096, "y": [1.0, 2.0, 3.0]}, "'y' has 3 floats, expected 4"),
        ({"x": [b"\x00" * 2048] * 2, "y": [1.0] * 4}, "2 bytes values, expected 1"),
    ],
)
def test_cosmoflow_bad_features(tmp_path: Path, features: dict, match: str) -> None:
    path = tmp_path / "bad_sample.tfrecord"
    write_records(path, [encode_example(features)])
    with pytest.raises(TFRecordError, match=match) as info:
        read_cosmoflow_sample(path, SHAPE)
    assert "bad_sample.tfrecord" in str(info.value)


@pytest.mark.parametrize(("count", "match"), [(0, "found none"), (2, "found more")])
def test_cosmoflow_requires_exactly_one_record(tmp_path: Path, count: int, match: str) -> None:
    x, y = _sample()
    path = tmp_path / "count.tfrecord"
    write_records(path, [encode_example({"x": x.tobytes(), "y": y})] * count)
    with pytest.raises(TFRecordError, match=match) as info:
        read_cosmoflow_sample(path, SHAPE)
    assert "count.tfrecord" in str(info.value)


def test_cosmoflow_malformed_payload_names_file(tmp_path: Path) -> None:
    path = tmp_path / "garbled.tfrecord"
    write_records(path, [b"\x0a\x7f"])
    with pytest.raises(TFRecordError, match=r"garbled\.tfrecord.*malformed"):
        read_cosmoflow_sample(path, SHAPE)


# ------------------------------------------------------------------ corruption


def _raw_file(tmp_path: Path, name: str = "data.tfrecord") -> tuple[Path, list[bytes]]:
    payloads = [b"first record payload", b"second record payload!"]
    path = tmp_path / name
    write_records(path, payloads, compression="none")
    return path, payloads


@pytest.mark.parametrize("compression", ["gzip", "none"])
@pytest.mark.parametrize("keep", [5, 20, 40, -3])
def test_truncated_file(tmp_path: Path, compression: str, keep: int) -> None:
    path = tmp_path / "trunc.tfrecord"
    write_records(path, [b"first record payload", b"second"], compression=compression)
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(TFRecordError, match="truncated") as info:
        list(read_records(path))
    assert "trunc.tfrecord" in str(info.value)


def test_flipped_payload_byte_is_bad_data_crc(tmp_path: Path) -> None:
    path, payloads = _raw_file(tmp_path, "flip_data.tfrecord")
    record0_size = 12 + len(payloads[0]) + 4
    _flip(path, record0_size + 12 + 3)  # inside the second record's payload
    records = read_records(path)
    assert next(records) == payloads[0]  # the intact first record is still delivered
    with pytest.raises(TFRecordError, match=r"flip_data\.tfrecord: record 1 .*bad data CRC"):
        next(records)
    corrupt = list(read_records(path, verify_crc=False))
    assert corrupt[1] != payloads[1] and len(corrupt[1]) == len(payloads[1])


def test_flipped_data_crc_byte(tmp_path: Path) -> None:
    path, payloads = _raw_file(tmp_path, "flip_crc.tfrecord")
    _flip(path, 12 + len(payloads[0]))  # first byte of record 0's data CRC
    with pytest.raises(TFRecordError, match=r"flip_crc\.tfrecord.*bad data CRC"):
        list(read_records(path))


@pytest.mark.parametrize("offset", [0, 7, 9])
def test_flipped_length_byte_is_bad_length_crc(tmp_path: Path, offset: int) -> None:
    path, _ = _raw_file(tmp_path, "flip_len.tfrecord")
    _flip(path, offset)
    with pytest.raises(TFRecordError, match=r"flip_len\.tfrecord.*bad length CRC"):
        list(read_records(path))


def test_huge_corrupt_length_without_crc_check_is_truncation(tmp_path: Path) -> None:
    path, _ = _raw_file(tmp_path, "huge_len.tfrecord")
    _flip(path, 6)  # length becomes ~2**55: must not try to allocate it
    with pytest.raises(TFRecordError, match=r"huge_len\.tfrecord.*truncated"):
        list(read_records(path, verify_crc=False))


def test_corrupt_gzip_stream(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.tfrecord.gz"
    write_records(path, [os.urandom(5000)])
    _flip(path, len(path.read_bytes()) // 2)
    with pytest.raises(TFRecordError) as info:
        list(read_records(path))
    assert "corrupt.tfrecord.gz" in str(info.value)


def test_not_gzip_with_gzip_compression(tmp_path: Path) -> None:
    path = tmp_path / "garbage.bin"
    path.write_bytes(b"this is certainly not a gzip stream")
    with pytest.raises(TFRecordError, match=r"garbage\.bin: not a gzip file"):
        list(read_records(path, compression="gzip"))
    raw, _ = _raw_file(tmp_path, "raw.tfrecord")
    with pytest.raises(TFRecordError, match=r"raw\.tfrecord: not a gzip file"):
        list(read_records(raw, compression="gzip"))


def test_garbage_in_auto_mode_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "garbage.bin"
    path.write_bytes(b"this is certainly not a TFRecord file")
    with pytest.raises(TFRecordError, match=r"garbage\.bin.*bad length CRC"):
        list(read_records(path))


def test_gzip_file_read_as_uncompressed_fails_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "g.tfrecord"
    write_records(path, [b"payload"])
    with pytest.raises(TFRecordError, match=r"g\.tfrecord"):
        list(read_records(path, compression="none"))


# ------------------------------------------------------------- atomic writing


def test_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    def payloads():
        yield b"one"
        yield os.urandom(1 << 20)
        raise RuntimeError("writer died")

    for compression in ("gzip", "none"):
        with pytest.raises(RuntimeError, match="writer died"):
            write_records(tmp_path / "out.tfrecord", payloads(), compression=compression)
        assert list(tmp_path.iterdir()) == []


def test_failed_overwrite_keeps_old_file(tmp_path: Path) -> None:
    path = tmp_path / "keep.tfrecord"
    write_records(path, [b"good"])
    before = path.read_bytes()

    def payloads():
        yield b"new"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_records(path, payloads())
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["keep.tfrecord"]


def test_written_file_gets_normal_permissions(tmp_path: Path) -> None:
    path = tmp_path / "perm.tfrecord"
    write_records(path, [b"x"])
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_module_imports_no_ml_framework() -> None:
    code = (
        "import sys, sciperf.data.tfrecord\n"
        "bad = {'tensorflow', 'torch', 'keras', 'jax'} & set(sys.modules)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ------------------------------------------------------- real TensorFlow checks

_TF_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import numpy as np
    import tensorflow as tf

    work = Path(sys.argv[1])
    inputs = np.load(work / "inputs.npz")
    x, y = inputs["x"], inputs["y"]

    # (a) TF writes: GZIP CosmoFlow sample and an uncompressed multi-record file.
    def feature(kind, values):
        cls = {"b": tf.train.BytesList, "f": tf.train.FloatList, "i": tf.train.Int64List}
        key = {"b": "bytes_list", "f": "float_list", "i": "int64_list"}[kind]
        return tf.train.Feature(**{key: cls[kind](value=values)})

    sample = tf.train.Example(features=tf.train.Features(feature={
        "x": feature("b", [x.tobytes()]), "y": feature("f", y.tolist())}))
    with tf.io.TFRecordWriter(str(work / "tf_sample.tfrecord"), options="GZIP") as w:
        w.write(sample.SerializeToString())
    with tf.io.TFRecordWriter(str(work / "tf_multi.tfrecord")) as w:
        for i in range(3):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "i": feature("i", [i, -i - 1, 2**40]),
                "f": feature("f", [i / 4, -1.5]),
                "b": feature("b", [b"r%d" % i, b""])}))
            w.write(ex.SerializeToString())

    # (b) TF reads the file written by sciperf, the way the reference pipeline does.
    spec = {"x": tf.io.FixedLenFeature([], tf.string),
            "y": tf.io.FixedLenFeature([4], tf.float32)}
    ds = tf.data.TFRecordDataset(str(work / "ours.tfrecord"), compression_type="GZIP")
    parsed = [tf.io.parse_single_example(r, spec) for r in ds]
    xs = [tf.io.decode_raw(p["x"], tf.int16).numpy() for p in parsed]
    ys = [p["y"].numpy() for p in parsed]
    np.savez(work / "tf_read.npz", n=len(parsed), x=xs[0], y=ys[0])

    # Our generic encoder, parsed by TF's own protobuf classes.
    general = tf.train.Example.FromString((work / "ours_general.bin").read_bytes())
    out = {}
    for name, feat in general.features.feature.items():
        kind = feat.WhichOneof("kind")
        values = list(getattr(feat, kind).value)
        out[name] = [kind, [v.hex() if isinstance(v, bytes) else v for v in values]]
    raw_ds = tf.data.TFRecordDataset(str(work / "ours_multi.tfrecord"))
    out["__multi__"] = [r.numpy().hex() for r in raw_ds]
    (work / "tf_general.json").write_text(json.dumps(out))
    """
)

_GENERAL = {
    "ints": [0, -1, 2**63 - 1, -(2**63), 300],
    "floats": np.array([0.25, -3.5, 1e-3], dtype=np.float64),
    "blobs": [b"\x00\xff", b"", b"abc"],
}


@pytest.fixture(scope="module")
def tf_exchange(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, np.ndarray]:
    """Run one TensorFlow subprocess that writes files for us and reads ours."""
    if importlib.util.find_spec("tensorflow") is None:  # no import in this process
        pytest.skip("tensorflow is not installed")
    work = tmp_path_factory.mktemp("tf")
    x, y = _sample(7)
    np.savez(work / "inputs.npz", x=x, y=y)
    write_cosmoflow_sample(work / "ours.tfrecord", x, y)
    (work / "ours_general.bin").write_bytes(encode_example(_GENERAL))
    write_records(work / "ours_multi.tfrecord", [b"alpha", b"", b"gamma" * 1000], "none")
    script = work / "tf_script.py"
    script.write_text(_TF_SCRIPT)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    result = subprocess.run(
        [sys.executable, str(script), str(work)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return work, x, y


def test_tf_written_sample_read_by_sciperf(tf_exchange) -> None:
    work, x, y = tf_exchange
    x2, y2 = read_cosmoflow_sample(work / "tf_sample.tfrecord", SHAPE)
    np.testing.assert_array_equal(x2, x)
    np.testing.assert_array_equal(y2, y)


def test_tf_written_multi_record_file_read_by_sciperf(tf_exchange) -> None:
    work, _, _ = tf_exchange
    decoded = [decode_example(p) for p in read_records(work / "tf_multi.tfrecord")]
    assert len(decoded) == 3
    for i, features in enumerate(decoded):
        np.testing.assert_array_equal(features["i"], np.array([i, -i - 1, 2**40], np.int64))
        np.testing.assert_array_equal(features["f"], np.array([i / 4, -1.5], np.float32))
        assert features["b"] == [b"r%d" % i, b""]


def test_sciperf_written_sample_read_by_tf(tf_exchange) -> None:
    work, x, y = tf_exchange
    with np.load(work / "tf_read.npz") as got:
        assert int(got["n"]) == 1
        np.testing.assert_array_equal(got["x"].reshape(SHAPE), x)
        assert got["y"].dtype == np.float32
        np.testing.assert_array_equal(got["y"], y)


def test_sciperf_encoded_example_parsed_by_tf(tf_exchange) -> None:
    work, _, _ = tf_exchange
    out = json.loads((work / "tf_general.json").read_text())
    assert out["ints"] == ["int64_list", _GENERAL["ints"]]
    assert out["floats"][0] == "float_list"
    np.testing.assert_array_equal(
        np.array(out["floats"][1], np.float32), _GENERAL["floats"].astype(np.float32)
    )
    assert out["blobs"] == ["bytes_list", [b.hex() for b in _GENERAL["blobs"]]]
    assert [bytes.fromhex(h) for h in out["__multi__"]] == [b"alpha", b"", b"gamma" * 1000]
