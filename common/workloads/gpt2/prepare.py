"""GPT-2's `sciperf prepare` sources: the synthetic Markov stream, OpenWebText's text →
token files (:data:`CONVERSION`), or an existing pair of token files (every id checked).

The conversion reads whichever release is under data.dir (``gpt2.sources``): the archive's
``openwebtext/*.xz`` (each an xz tar of one ``.txt`` per document), the 21
``subsets/*.tar`` (plain tars of those ``.xz``), or ``*.parquet`` files with a ``text``
column. One job per file, spread over the ranks: its documents in order — the ``.xz``
files and their ``.txt`` members sorted by name, parquet rows as stored — each cleaned as
the Hugging Face loader cleans it (runs of 3+ newlines → 2, stripped), encoded with the
GPT-2 BPE and followed by the end-of-text token, into ``tokens/<file>.bin`` beside the
token count of each document (``tokens/<file>.docs.npy``). Rank 0 then numbers the
documents in job order and splits them as nanoGPT's prepare.py does with Hugging Face's
``train_test_split(test_size=0.0005, seed=2357)``: a permutation from
``numpy.random.default_rng(2357)``, its first ⌈0.0005·N⌉ documents the validation split and
the next ⌊0.9995·N⌋ the training split, each written in permutation order to ``val.bin``
and ``train.bin``.
"""

from __future__ import annotations

import functools
import io
import lzma
import math
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from sciperf.data import atomic, conversion
from sciperf.data.conversion import Conversion, Job
from sciperf.data.layout import check_writable
from sciperf.errors import SciperfError
from sciperf.progress import Progress
from sciperf.workloads.gpt2 import spec, synthetic, tokenizer
from sciperf.workloads.gpt2 import tokens as tok

SHARDS = "tokens"  # the per-job token files under data.dir
DOCS_SUFFIX = ".docs.npy"
_BLANK_RUNS = re.compile("\n\n\n+")


# -- synthetic ----------------------------------------------------------------------------

def _request(cfg: Any) -> synthetic.GenerateRequest:
    return synthetic.GenerateRequest(
        root=str(Path(cfg.data.dir).resolve()), train_tokens=int(cfg.data.train_tokens),
        eval_tokens=int(cfg.data.eval_tokens), vocab_size=int(cfg.model.vocab_size),
        seed=int(cfg.seed))


def prepare_synthetic(cfg: Any, force: bool = False) -> None:
    """The synthetic Markov stream unless an identical complete set exists; prints the
    chain's entropy rate (the floor a mini's target sits above)."""
    req = _request(cfg)
    if not force and synthetic.dataset_complete(req):
        rate = synthetic.recorded_entropy(req.root)
        print(f"dataset ready: {req.root} ({req.train_tokens}+{req.eval_tokens} synthetic "
              f"tokens, vocabulary {req.vocab_size}, seed {req.seed}; entropy rate "
              f"{rate:.4f} nats/token)")
        return
    check_writable(Path(req.root))
    rate = synthetic.generate(req)
    print(f"wrote {req.train_tokens}+{req.eval_tokens} synthetic tokens (vocabulary "
          f"{req.vocab_size}) to {req.root}; entropy rate {rate:.4f} nats/token")


# -- existing -----------------------------------------------------------------------------

def verify_existing(cfg: Any, force: bool = False) -> None:
    """Both token files open and every id is within the vocabulary (a chunked scan)."""
    for split in spec.SPLITS:
        path = tok.split_path(cfg.data.dir, split)
        tokens = tok.open_tokens(path, int(cfg.model.vocab_size), int(cfg.model.context),
                                 show_progress=True)
        print(f"{path}: {len(tokens):,} tokens, every id below {int(cfg.model.vocab_size):,}")


# -- convert: text → token files ----------------------------------------------------------

def clean(text: str) -> str:
    """A document as the Hugging Face loader holds it: runs of 3+ newlines → 2, stripped."""
    return _BLANK_RUNS.sub("\n\n", text).strip()


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SciperfError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})"
                           ) from None


def _xz_documents(data: bytes | Path, where: str) -> Iterator[str]:
    """The .txt members of one xz-compressed tar (`data`: its bytes or its path), sorted
    by name."""
    try:
        with lzma.open(io.BytesIO(data) if isinstance(data, bytes) else data) as source, \
                tarfile.open(fileobj=source, mode="r|") as tar:
            texts = {}
            for member in tar:
                if member.isfile() and member.name.endswith(".txt"):
                    texts[member.name] = tar.extractfile(member).read()  # type: ignore[union-attr]
    except (lzma.LZMAError, tarfile.TarError, EOFError, OSError) as exc:
        raise SciperfError(f"{where}: not an xz tar of .txt files ({exc})") from None
    for name in sorted(texts):
        yield clean(_decode(texts[name], f"{where}/{name}"))


def _subset_documents(path: Path) -> Iterator[str]:
    """The documents of every .xz inside a plain tar, the .xz files sorted by name."""
    try:
        with tarfile.open(path, mode="r:") as tar:
            members = sorted((m for m in tar.getmembers()
                              if m.isfile() and m.name.endswith(".xz")), key=lambda m: m.name)
            for member in members:
                data = tar.extractfile(member).read()  # type: ignore[union-attr]
                yield from _xz_documents(data, f"{path}/{member.name}")
    except tarfile.TarError as exc:
        raise SciperfError(f"{path}: not a tar of .xz files ({exc})") from None


def _parquet_documents(path: Path) -> Iterator[str]:
    """The ``text`` column of a parquet file, row by row."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SciperfError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)"
                           ) from None
    try:
        table = pq.ParquetFile(path)
        if "text" not in table.schema_arrow.names:
            raise SciperfError(f"{path}: no text column (columns: "
                               f"{', '.join(table.schema_arrow.names)})")
        for batch in table.iter_batches(columns=["text"], batch_size=1024):
            for text in batch.column(0).to_pylist():
                if not isinstance(text, str):
                    raise SciperfError(f"{path}: a text value is {type(text).__name__}, "
                                       "not a string")
                yield clean(text)
    except OSError as exc:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise SciperfError(f"{path}: not a readable parquet file ({exc})") from None
    except ValueError as exc:
        raise SciperfError(f"{path}: not a readable parquet file ({exc})") from None


READERS = {".xz": lambda p: _xz_documents(p, str(p)), ".tar": _subset_documents,
           ".parquet": _parquet_documents}


def sources(root: Path) -> list[Path]:
    """The text files of one release under `root`, sorted (module docstring); one line
    when there is none, or when two releases lie side by side (their documents would be
    counted twice)."""
    found = {"openwebtext/*.xz": sorted(root.glob("openwebtext/*.xz")),
             "subsets/*.tar": sorted(root.glob("subsets/*.tar")),
             "*.parquet": sorted(p for p in root.rglob("*.parquet")
                                 if SHARDS not in p.relative_to(root).parts)}
    present = {k: v for k, v in found.items() if v}
    if not present:
        raise SciperfError(f"{root}: no OpenWebText text to convert (looked for "
                           f"{', '.join(found)})")
    if len(present) > 1:
        raise SciperfError(f"{root}: holds more than one release ({', '.join(present)}); "
                           "keep one, or the documents would be counted twice")
    return next(iter(present.values()))


def shard_paths(root: Path, source: Path) -> tuple[Path, Path]:
    """The token file and document index a source file converts to."""
    stem = source.relative_to(root).as_posix().replace("/", "__")
    folder = root / SHARDS
    return folder / f"{stem}.bin", folder / f"{stem}{DOCS_SUFFIX}"


def _jobs(root: Path) -> list[Job]:
    return [Job(src, shard_paths(root, src)) for src in sources(root)]


@functools.cache
def _encoder(bpe_file: str) -> tokenizer.Encoder:
    return tokenizer.encoder(bpe_file or None)


def convert_file(job: Job, bpe_file: str = "") -> int:
    """One source file's documents, each encoded and followed by end-of-text, into its
    token file and document index (both written aside); returns its documents."""
    enc = _encoder(bpe_file)
    out, index = job.outputs
    lengths: list[int] = []
    writer = tok.TokenWriter(out, spec.VOCAB_SIZE)
    with writer.open():
        for text in READERS[job.source.suffix](job.source):
            ids = enc.encode_ordinary(text)
            ids.append(spec.END_OF_TEXT)
            writer.write(np.asarray(ids, dtype=np.int64))
            lengths.append(len(ids))
    with atomic.replacing(index) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.asarray(lengths, dtype=np.int64))
    return len(lengths)


def split_documents(n_documents: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) document numbers: Hugging Face's train_test_split with
    nanoGPT's test_size and seed (module docstring)."""
    n_val = math.ceil(spec.VAL_FRACTION * n_documents)
    n_train = math.floor((1 - spec.VAL_FRACTION) * n_documents)
    order = np.random.default_rng(spec.SPLIT_SEED).permutation(n_documents)
    return order[n_val:n_val + n_train], order[:n_val]


def assemble(root: Path) -> None:
    """``train.bin`` and ``val.bin`` from every job's shard, documents in split order."""
    shards = [shard_paths(root, src) for src in sources(root)]
    lengths = []
    for _, index in shards:
        try:
            lengths.append(np.load(index, allow_pickle=False))
        except (OSError, ValueError) as exc:
            raise SciperfError(f"{index}: cannot be read ({exc})") from None
    counts = np.array([len(x) for x in lengths])
    doc_len = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    owner = np.repeat(np.arange(len(shards)), counts)
    starts = np.concatenate([np.cumsum(x) - x for x in lengths]) if lengths else doc_len
    maps = [np.memmap(b, dtype=tok.DTYPE, mode="r") if b.stat().st_size else
            np.zeros(0, tok.DTYPE) for b, _ in shards]
    for split, docs in zip(("train", "validation"), split_documents(len(doc_len)),
                           strict=True):
        path = tok.split_path(root, split)
        writer = tok.TokenWriter(path, spec.VOCAB_SIZE)
        bar = Progress(len(docs), f"writing {path.name}", unit="documents")
        with writer.open():
            for d in docs:
                writer.write(maps[owner[d]][starts[d]:starts[d] + doc_len[d]])
                bar.update()
        print(f"{path}: {writer.written:,} tokens of {len(docs):,} documents")


CONVERSION = Conversion(source="text", target="bin", jobs=_jobs, convert=convert_file,
                        after=assemble, unit="documents",
                        configure=lambda cfg: _configured(str(cfg.data.bpe_file)))


def _configured(bpe_file: str) -> Conversion:
    """The conversion with the BPE file a config names."""
    return Conversion(source="text", target="bin", jobs=_jobs,
                      convert=functools.partial(convert_file, bpe_file=bpe_file),
                      after=assemble, unit="documents")


def convert(cfg: Any, force: bool = False) -> None:
    """OpenWebText's text under data.dir → train.bin and val.bin (:data:`CONVERSION`),
    spread over the ranks of a launched prepare."""
    root = Path(cfg.data.dir)
    check_writable(root)
    conversion.run(CONVERSION.for_config(cfg), root, force=force, program="sciperf prepare")


SOURCES = {"synthetic": prepare_synthetic, "existing": verify_existing, "convert": convert}
