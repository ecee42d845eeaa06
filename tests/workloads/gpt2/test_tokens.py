"""GPT-2 token files: windows for training and validation, and each kind of bad file
refused in one line naming it."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from sciperf.workloads.gpt2 import tokens as tok
from testkit import refused


def test_round_trip_and_windows(tmp_path: Path) -> None:
    ids = np.arange(50, dtype=np.int64) % 7
    path = tok.write_tokens(tmp_path / "val.bin", ids, vocab_size=7)
    assert path.stat().st_size == 100 and not list(tmp_path.glob(".*"))
    tokens = tok.open_tokens(path, vocab_size=7, context=8)
    np.testing.assert_array_equal(tokens, ids)
    starts = tok.eval_starts(len(tokens), 8)
    np.testing.assert_array_equal(starts, [0, 8, 16, 24, 32, 40])  # 41 + 8 = 49 < 50
    x, y = tok.windows(tokens, starts, 8)
    assert x.shape == y.shape == (6, 8) and x.dtype == tok.WINDOW_DTYPE
    np.testing.assert_array_equal(x.ravel(), ids[:48])  # every target once, in order
    np.testing.assert_array_equal(y.ravel(), ids[1:49])


def test_training_draws_are_seeded_and_cover_every_start() -> None:
    a = tok.train_starts(100, 10, 5000, seed=3, draw=0)
    assert a.min() == 0 and a.max() == 89  # 0 … n − context − 1: the last window fits
    np.testing.assert_array_equal(a, tok.train_starts(100, 10, 5000, seed=3, draw=0))
    assert not np.array_equal(a, tok.train_starts(100, 10, 5000, seed=3, draw=1))
    assert not np.array_equal(a, tok.train_starts(100, 10, 5000, seed=4, draw=0))


def test_window_reader_pickles_without_its_mapping(tmp_path: Path) -> None:
    path = tok.write_tokens(tmp_path / "train.bin", np.arange(30), vocab_size=30)
    reader = tok.WindowReader(context=4)
    x, y = reader(tok.sample_name(path, 10))
    np.testing.assert_array_equal(x, [10, 11, 12, 13])
    np.testing.assert_array_equal(y, [11, 12, 13, 14])
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._maps == {} and copy.x_shape == (4,)
    np.testing.assert_array_equal(copy(tok.sample_name(path, 25))[1], [26, 27, 28, 29])
    assert "ends past the file's 30 tokens" in refused(copy, tok.sample_name(path, 26))


def test_bad_files_are_one_line_naming_them(tmp_path: Path) -> None:
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x00\x02")
    assert refused(tok.open_tokens, odd, 10, 2) == \
        f"{odd}: 3 bytes is not a whole number of uint16 tokens"
    short = tok.write_tokens(tmp_path / "short.bin", np.arange(8), vocab_size=10)
    assert refused(tok.open_tokens, short, 10, 8) == \
        f"{short}: 8 tokens, fewer than one window of 8 + 1 (the targets are the inputs " \
        "shifted by one)"
    missing = tmp_path / "val.bin"
    assert refused(tok.open_tokens, missing, 10, 2) == f"{missing}: no such token file"


def test_an_id_beyond_the_vocabulary_is_found_by_chunks(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan reads the file a chunk at a time and names the first bad position, in a
    later chunk than the first."""
    monkeypatch.setattr(tok, "CHUNK", 16)
    ids = np.full(100, 5, np.uint16)
    ids[[37, 80]] = [50_257, 60_000]
    path = tmp_path / "train.bin"
    path.write_bytes(ids.astype("<u2").tobytes())
    assert refused(tok.open_tokens, path, 50_257, 8) == \
        f"{path}: token id 50257 at position 37 is beyond the vocabulary of 50,257 " \
        "(ids 0…50256)"
    tokens = tok.open_tokens(path, 50_257, 8, check_ids=False)  # a reader that trusts it
    assert len(tokens) == 100
    assert "token ids must be integers in [0, 7)" in refused(
        tok.write_tokens, tmp_path / "w.bin", np.array([1, -1]), 7)
    assert not (tmp_path / "w.bin").exists()
