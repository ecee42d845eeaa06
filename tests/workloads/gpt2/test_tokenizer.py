"""The GPT-2 BPE offline: found, its hash checked, and tiktoken's ids equal to this
module's own merge loop and to known GPT-2 ids. Skipped, with the reason, where no BPE
file is installed (openai-whisper ships one)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from sciperf.workloads.gpt2 import tokenizer
from testkit import refused

TEXT = ("Hello world! It's 2019 — we'll see: naïve café, 東京, ½ and ²… \n\n  indented\tline's "
        "end   \n")


def _bpe_file() -> Path:
    for place in tokenizer.candidates():
        if place.is_file():
            return place
    pytest.skip("no GPT-2 BPE file installed (pip install openai-whisper --no-deps ships "
                "whisper/assets/gpt2.tiktoken)")


def test_a_file_that_is_not_gpt2s_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "gpt2.tiktoken"
    shutil.copyfile(_bpe_file(), copy)
    assert tokenizer.load_ranks(copy)[b"Hello"] == 15496
    with copy.open("r+b") as fh:
        fh.seek(0)
        fh.write(b"Iw")  # rank 0's token replaced
    line = refused(tokenizer.load_ranks, copy)
    assert line.startswith(f"{copy}: SHA-256 ") and tokenizer.R50K_SHA256 in line
    assert refused(tokenizer.find_bpe_file, tmp_path / "none") == \
        f"{tmp_path / 'none'}: no such GPT-2 BPE file"


def test_known_ids_and_both_engines_agree() -> None:
    path = _bpe_file()
    pure = tokenizer.encoder(path, engine="python")
    assert pure.encode_ordinary("Hello world") == [15496, 995]
    ids = pure.encode_ordinary(TEXT)
    assert pure.decode_bytes(ids).decode() == TEXT
    assert pure.decode_bytes([50256]) == b"<|endoftext|>"
    if importlib.util.find_spec("tiktoken") is None:
        pytest.skip("tiktoken is not installed: only the pure-Python engine was checked")
    fast = tokenizer.encoder(path, engine="tiktoken")
    assert fast.encode_ordinary(TEXT) == ids
    assert fast.encode_ordinary("<|endoftext|>") != [50256]  # ordinary text, never special
