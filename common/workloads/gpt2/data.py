"""GPT-2's samples as the contract sees them: windows of the token files (``gpt2.tokens``).

* A training sample is a window of ``context + 1`` tokens of ``train.bin`` at a start
  drawn uniformly, with replacement, from a seeded stream (:func:`draw`, the workload's
  ``SampledPlan`` sampler: one global stream per epoch strided over the ranks, so the
  global batches are the same whatever the rank count). The training split is listed as
  its one token file, the container every draw reads (``data.train_samples`` = n > 0:
  draws come from the first n windows' tokens only).
* A validation sample is the window at one point of a fixed grid: every
  :data:`EVAL_STRIDE`-th token of ``val.bin`` (``tokens.eval_starts`` at that stride),
  named ``val.bin/<start>``, scored on its first ``context`` targets. The grid is the
  dataset's, not the model's: the listing (``list_samples(root, split, fmt, n)``) knows no
  model, and the validation set stays the same samples whatever ``model.context`` is. At
  the released context (1,024 = the stride) the windows tile the split, every target
  scored once — the benchmark's metric; a smaller context scores each window's first
  ``context`` targets (the mini); a larger one is refused (:func:`check_context`).

The metric is the mean cross-entropy over every scored target token (nats/token). On a
synthetic set its floor is the Markov stream's entropy rate, which ``sciperf prepare``
records; ``train.target_above_floor`` puts a run's target that far above it
(:func:`run_target`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sciperf.data.plan import Draws, SampledPlan
from sciperf.errors import SciperfError
from sciperf.workloads.gpt2 import spec, synthetic
from sciperf.workloads.gpt2 import tokens as tok
from sciperf.workloads.gpt2.spec import ModelSpec

FORMATS = spec.DATA_FORMATS
EVAL_STRIDE = spec.CONTEXT  # the validation grid: one window every 1,024 tokens


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise SciperfError(f"data.format={fmt}: GPT-2 reads token files "
                           f"({', '.join(FORMATS)})")


def check_context(model: Any) -> None:
    """A context the validation grid holds (module docstring), or one line."""
    if int(model.context) > EVAL_STRIDE:
        raise SciperfError(f"model.context={model.context}: validation windows lie every "
                           f"{EVAL_STRIDE} tokens, so a context above {EVAL_STRIDE} would "
                           "score tokens twice")


def train_span(path: Path, n: int, context: int) -> int:
    """Tokens of the training split `path` draws come from: all, or the first n windows'
    (n·context + 1) when n > 0 — refused when the file holds fewer, since a smaller set
    than asked would change the run without a word."""
    n_tokens = tok.token_count(path)
    if n <= 0:
        return n_tokens
    if n * context + 1 > n_tokens:
        raise SciperfError(f"{path} holds {(n_tokens - 1) // context} training windows of "
                           f"{context} tokens but {n} were requested (data.train_samples)")
    return n * context + 1


def list_samples(root: str | Path, split: str, fmt: str, n: int = 0) -> list[Path]:
    """Training: ``[train.bin]`` (draws name windows inside it); validation: the grid's
    windows ``val.bin/<start>`` (the first n when n > 0)."""
    _check_format(fmt)
    path = tok.split_path(root, split)
    n_tokens = tok.token_count(path)
    if split == "train":
        return [path]
    starts = tok.eval_starts(n_tokens, EVAL_STRIDE)
    if not len(starts):
        raise SciperfError(f"{path}: {n_tokens} tokens hold no validation window of "
                           f"{EVAL_STRIDE} + 1")
    if n > len(starts):
        raise SciperfError(f"{path} holds {len(starts)} validation windows of {EVAL_STRIDE} "
                           f"tokens but {n} were requested (data.eval_samples)")
    return [tok.sample_name(path, int(s)) for s in (starts[:n] if n > 0 else starts)]


def _token_file(path: Path) -> Path:
    """The token file of a sample: the file itself, or the parent of ``<file>/<start>``."""
    path = Path(path)
    return path.parent if path.name.isdigit() else path


def sample_files(path: Path, fmt: str) -> list[Path]:
    """The one token file a window reads (staging copies it once)."""
    return [_token_file(path)]


@functools.lru_cache(maxsize=8)
def _checked(path: Path, size: int, mtime_ns: int, vocab_size: int, context: int) -> None:
    """One file's checks (``tokens.open_tokens``), once per process and file version: the
    driver and the backend both build the reader."""
    tok.open_tokens(path, vocab_size, context, show_progress=True)


def model_reader(root: str | Path, fmt: str, model: ModelSpec) -> tok.WindowReader:
    """The window reader of `model`'s context, after both token files are checked (whole
    uint16s, at least one window, every id within the vocabulary)."""
    _check_format(fmt)
    check_context(model)
    for split in spec.SPLITS:
        path = tok.split_path(root, split).resolve()
        tok.token_count(path)  # a missing file: one line before the stat below
        stat = path.stat()
        _checked(path, stat.st_size, stat.st_mtime_ns, int(model.vocab_size),
                 int(model.context))
    return tok.WindowReader(int(model.context))


def payload_bytes(model: Any) -> int:
    """One sample as the reader returns it: inputs and targets, ``context`` int64 each."""
    return 2 * int(model.context) * tok.WINDOW_DTYPE.itemsize


def draw(files: Sequence[Path], cfg: Any, epoch: int, rank: int, world: int,
         count: int) -> list[Path]:
    """This rank's `count` training windows of 0-indexed `epoch`: the epoch's global stream
    (``tokens.train_starts`` of seed and epoch, count × world starts) strided over the
    ranks."""
    path = Path(files[0])
    context = int(cfg.model.context)
    span = train_span(path, int(cfg.data.train_samples), context)
    starts = tok.train_starts(span, context, count * world, int(cfg.seed), epoch)
    return [tok.sample_name(path, int(s)) for s in starts[rank::world]]


class TokenPlan(SampledPlan):
    """The sampled plan with gradient accumulation: an epoch's optimizer steps each take
    ``spec.accumulation`` forwards, so a rank draws steps × forwards × its batch windows."""

    def draws(self, files: Sequence[Path], cfg: Any, rank: int, world: int,
              local_batch: int) -> Draws:
        return super().draws(files, cfg, rank, world, local_batch * spec.accumulation(cfg))

    def step_samples(self, cfg: Any) -> int:
        """A step accumulates ``spec.accumulation`` forwards of the global batch."""
        return spec.sequences_per_step(cfg)

    def epoch_overrides(self, samples: int, global_batch: int) -> list[str]:
        """An epoch of `samples` windows in steps of one forward each."""
        return [*super().epoch_overrides(samples, global_batch), "train.global_batch_tokens=0"]


PLAN = TokenPlan(spec.steps_per_epoch, draw, spec.EPOCH_KEY)


def train_windows(cfg: Any) -> int:
    """The training windows draws come from (MLLOG's train_samples): the span's tokens in
    windows of the context."""
    context = int(cfg.model.context)
    path = tok.split_path(cfg.data.dir, "train")
    return (train_span(path, int(cfg.data.train_samples), context) - 1) // context


def check_run(cfg: Any) -> None:
    """The spec's rules, then ``data.train_samples`` against the training file (when it
    is there): the listing knows no context, so the windows it asks for are counted here,
    before the run's records exist."""
    spec.check_run(cfg)
    if int(cfg.data.train_samples) > 0 and tok.split_path(cfg.data.dir, "train").is_file():
        train_windows(cfg)


def mllog_hyperparameters(cfg: Any, train_samples: int, eval_samples: int) -> dict[str, Any]:
    """The spec's MLLOG keys, train_samples in windows (the plan lists one token file)."""
    return spec.mllog_hyperparameters(cfg, train_windows(cfg), eval_samples)


def run_target(cfg: Any) -> float:
    """The target a run stops at: ``train.target``, or — with ``train.target_above_floor``
    > 0 — the entropy rate the synthetic generator recorded for data.dir plus that margin
    (one line when the set records none)."""
    margin = float(cfg.train.target_above_floor)
    if margin <= 0:
        return float(cfg.train.target)
    floor = synthetic.recorded_entropy(cfg.data.dir)
    if floor is None:
        raise ValueError(f"train.target_above_floor={margin:g}: data.dir={cfg.data.dir} "
                         "records no entropy rate (only `sciperf prepare "
                         "data.source=synthetic` does); set train.target instead")
    return floor + margin

