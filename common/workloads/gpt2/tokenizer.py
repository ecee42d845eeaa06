"""GPT-2's byte-pair encoding, offline and checked.

tiktoken fetches its BPE file from the network on first use, which compute nodes cannot.
The same file ships as package data of ``openai-whisper`` (``whisper/assets/gpt2.tiktoken``)
and sits in tiktoken's cache wherever tiktoken once ran online; :func:`find_bpe_file` looks
there (without importing whisper, which imports torch), or takes a path. Whatever the
source, its SHA-256 must be tiktoken's published hash of ``r50k_base`` — the GPT-2 BPE
(:data:`R50K_SHA256`) — else one line refuses it.

Encoding runs in tiktoken when it is installed (the fast standard) and otherwise in
:class:`PureBPE`, this module's own merge loop over the same ranks (the ``regex`` package
for the pre-tokenizer's Unicode classes): far slower, but it needs no compiled extension
and checks tiktoken's answers in the tests.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sciperf.errors import SciperfError
from sciperf.workloads.gpt2 import spec

# tiktoken's expected_hash of r50k_base (tiktoken_ext/openai_public.py, tiktoken 0.14.0),
# which openai-whisper's whisper/assets/gpt2.tiktoken (20250625) equals
R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
BPE_FILE = "gpt2.tiktoken"
MERGEABLE = spec.END_OF_TEXT  # ranks 0 … 50255; 50256 is <|endoftext|>
END_OF_TEXT = "<|endoftext|>"
# The pre-tokenizer of the released GPT-2 encoder (openai/gpt-2 src/encoder.py)
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def _tiktoken_cache() -> Path:
    """Where tiktoken caches a downloaded file (its read_file_cached rule: the SHA-1 of
    the URL under $TIKTOKEN_CACHE_DIR, $DATA_GYM_CACHE_DIR or <tmp>/data-gym-cache)."""
    folder = (os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
              or os.path.join(tempfile.gettempdir(), "data-gym-cache"))
    return Path(folder) / hashlib.sha1(R50K_URL.encode()).hexdigest()


def _whisper_asset() -> Path | None:
    """openai-whisper's packaged copy, found without importing the package."""
    found = importlib.util.find_spec("whisper")
    places = list(found.submodule_search_locations or []) if found else []
    return Path(places[0]) / "assets" / BPE_FILE if places else None


def candidates() -> list[Path]:
    """Where the BPE file is looked for, in order (an explicit path comes first)."""
    return [p for p in (_whisper_asset(), _tiktoken_cache()) if p is not None]


def find_bpe_file(path: str | Path | None = None) -> Path:
    """The GPT-2 BPE file: `path` when given, else the first of :func:`candidates` that
    exists; one line saying where it looked and how to get one otherwise."""
    if path:
        path = Path(path)
        if not path.is_file():
            raise SciperfError(f"{path}: no such GPT-2 BPE file")
        return path
    for place in candidates():
        if place.is_file():
            return place
    looked = ", ".join(str(p) for p in candidates())
    raise SciperfError(f"no GPT-2 BPE file ({BPE_FILE}) found (looked in {looked}); "
                       f"install openai-whisper (it ships one) or give the path of a copy of "
                       f"{R50K_URL}")


def load_ranks(path: str | Path) -> dict[bytes, int]:
    """The mergeable tokens of a BPE file and their ranks, after its SHA-256 is checked:
    a file that is not GPT-2's is one line, never a tokenizer that writes other ids."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SciperfError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    digest = hashlib.sha256(raw).hexdigest()
    if digest != R50K_SHA256:
        raise SciperfError(f"{path}: SHA-256 {digest} is not the GPT-2 BPE's {R50K_SHA256} "
                           "(tiktoken's r50k_base)")
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


class Encoder(Protocol):
    """What converting text needs of a tokenizer."""

    def encode_ordinary(self, text: str) -> list[int]: ...

    def decode_bytes(self, ids: Sequence[int]) -> bytes: ...


@dataclass
class PureBPE:
    """GPT-2's BPE in Python: the released pre-tokenizer, then within each piece the
    adjacent pair of lowest rank merged until no pair is a token (ranks are the merge
    order). The same ids as tiktoken, far slower."""

    ranks: dict[bytes, int]
    _pattern: Any = field(default=None, repr=False)
    _cache: dict[bytes, tuple[int, ...]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        try:
            import regex  # \p{L}, \p{N}: the stdlib's re has no Unicode classes
        except ImportError:
            raise SciperfError("GPT-2 tokenization needs tiktoken or the regex package "
                               "(pip install tiktoken)") from None
        self._pattern = regex.compile(PATTERN)
        self._tokens = {rank: token for token, rank in self.ranks.items()}

    def _merge(self, piece: bytes) -> tuple[int, ...]:
        parts = [piece[i:i + 1] for i in range(len(piece))]
        while len(parts) > 1:
            pairs = [self.ranks.get(a + b) for a, b in zip(parts, parts[1:], strict=False)]
            best = min((r, i) for i, r in enumerate(pairs) if r is not None) \
                if any(r is not None for r in pairs) else None
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return tuple(self.ranks[p] for p in parts)

    def encode_ordinary(self, text: str) -> list[int]:
        out: list[int] = []
        for piece in self._pattern.findall(text):
            raw = piece.encode("utf-8")
            if raw not in self._cache:
                self._cache[raw] = self._merge(raw)
            out.extend(self._cache[raw])
        return out

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        return b"".join(END_OF_TEXT.encode() if i == spec.END_OF_TEXT else self._tokens[i]
                        for i in ids)


def encoder(path: str | Path | None = None, engine: str = "auto") -> Encoder:
    """The GPT-2 encoder from a checked BPE file (:func:`find_bpe_file`): tiktoken's
    (`engine` ``auto`` when installed, or ``tiktoken``) or :class:`PureBPE` (``python``)."""
    ranks = load_ranks(find_bpe_file(path))
    if len(ranks) != MERGEABLE or sorted(ranks.values()) != list(range(MERGEABLE)):
        raise SciperfError(f"{path or BPE_FILE}: not {MERGEABLE} ranks 0…{MERGEABLE - 1}")
    if engine == "python":
        return PureBPE(ranks)
    try:
        import tiktoken
    except ImportError:
        if engine == "tiktoken":
            raise SciperfError("engine tiktoken: tiktoken is not installed "
                               "(pip install tiktoken)") from None
        return PureBPE(ranks)
    return tiktoken.Encoding(name="gpt2", pat_str=PATTERN, mergeable_ranks=ranks,
                             special_tokens={END_OF_TEXT: spec.END_OF_TEXT},
                             explicit_n_vocab=spec.VOCAB_SIZE)
