"""A learnable synthetic token stream with a known entropy rate (the spec's generator, not
test fakes), written as GPT-2 token files (``gpt2.tokens``).

The stream is a Markov chain over the vocabulary whose last id is the end-of-text token,
as in the GPT-2 BPE:

* from a word token i (every id but the last): with probability q the document ends
  (end-of-text next); otherwise one of i's k successors j, distinct word tokens drawn once
  per chain, with i's own probabilities p_ij (a Dirichlet(α) draw per token), so the next
  token is j with probability (1 − q)·p_ij;
* from end-of-text: a word token drawn uniformly (a new document).

Every token is reachable from end-of-text and end-of-text from every token, and
end-of-text returns after 2 and after 3 steps, so the chain is irreducible and aperiodic:
it has one stationary distribution π, and its entropy rate — the best cross-entropy any
model can reach on the stream, in nats/token — is

    H = Σ_i π_i · H_i,   H_i = −q ln q − (1 − q) ln(1 − q) + (1 − q) · H(p_i)   (word i),
                         H_eot = ln(V − 1),

with H(p_i) = −Σ_j p_ij ln p_ij. π comes from power iteration to 1e-13 (L1), so H is
exact to float precision. A mini's target is then H plus a margin the model must close
(:func:`entropy_rate`), and one line of the test checks the true chain's cross-entropy on
a generated split against H.

Splits are generated in parallel runs of the chain that each start after an end-of-text
and are cut after their last one, then concatenated: each join is an end-of-text followed
by a fresh document — itself a transition of the chain — so the whole file is one
realisation of it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sciperf.data import manifest
from sciperf.errors import SciperfError
from sciperf.progress import Progress
from sciperf.workloads.gpt2 import tokens as tok

FORMAT = "bin"
SPLIT_IDS = {"train": 0, "validation": 1}
TOLERANCE = 1e-13  # L1 change of π at which the power iteration stops
MAX_ITERATIONS = 100_000


@dataclass(frozen=True)
class MarkovChain:
    """The chain of the module docstring: `successors` and `probs` (V − 1 rows of k) for
    the word tokens, `end_prob` q; the end-of-text token is ``vocab_size − 1``."""

    vocab_size: int
    successors: np.ndarray
    probs: np.ndarray
    end_prob: float

    @property
    def eot(self) -> int:
        return self.vocab_size - 1


def make_chain(vocab_size: int, successors: int = 4, end_prob: float = 1 / 256,
               alpha: float = 1.0, seed: int = 0) -> MarkovChain:
    """The chain of `seed`: for every word token, `successors` distinct word tokens and
    their Dirichlet(`alpha`) probabilities."""
    words = vocab_size - 1
    if not 1 <= successors <= words:
        raise ValueError(f"{successors} successors per token need 1…{words} (the word "
                         f"tokens of a vocabulary of {vocab_size})")
    if not 0 < end_prob < 1:
        raise ValueError(f"end_prob={end_prob} must be in (0, 1)")
    rng = np.random.default_rng([int(seed), 0x6770_7432])
    succ = rng.integers(0, words, size=(words, successors))
    while True:  # redraw the rows that name a successor twice
        ordered = np.sort(succ, axis=1)
        again = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
        if again.size == 0:
            break
        succ[again] = rng.integers(0, words, size=(again.size, successors))
    probs = rng.dirichlet(np.full(successors, float(alpha)), size=words)
    return MarkovChain(int(vocab_size), succ.astype(np.int64), probs, float(end_prob))


def _step(chain: MarkovChain, pi: np.ndarray) -> np.ndarray:
    """π·P for the chain's transition matrix P (sparse: k + 1 entries a row)."""
    words, q = chain.eot, chain.end_prob
    out = np.bincount(chain.successors.ravel(),
                      weights=((1 - q) * pi[:words, None] * chain.probs).ravel(),
                      minlength=chain.vocab_size)
    out[chain.eot] += q * pi[:words].sum()
    out[:words] += pi[chain.eot] / words
    return out


def stationary(chain: MarkovChain) -> np.ndarray:
    """The stationary distribution π (power iteration from uniform to :data:`TOLERANCE`)."""
    pi = np.full(chain.vocab_size, 1.0 / chain.vocab_size)
    for _ in range(MAX_ITERATIONS):
        nxt = _step(chain, pi)
        nxt /= nxt.sum()
        if np.abs(nxt - pi).sum() < TOLERANCE:
            return nxt
        pi = nxt
    raise ArithmeticError(f"the chain's stationary distribution did not converge in "
                          f"{MAX_ITERATIONS} iterations")


def state_entropies(chain: MarkovChain) -> np.ndarray:
    """H_i of every state, nats (module docstring)."""
    q, p = chain.end_prob, chain.probs
    plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(axis=1)
    words = -q * math.log(q) - (1 - q) * math.log(1 - q) - (1 - q) * plogp
    return np.append(words, math.log(chain.eot))


def entropy_rate(chain: MarkovChain) -> float:
    """H = Σ π_i H_i, nats/token: the cross-entropy of the chain itself on its stream."""
    return float(stationary(chain) @ state_entropies(chain))


def log_probs(chain: MarkovChain, prev: np.ndarray, nxt: np.ndarray) -> np.ndarray:
    """ln P(nxt | prev) per pair (−inf for a transition the chain cannot make)."""
    prev, nxt = np.asarray(prev, np.int64), np.asarray(nxt, np.int64)
    q, eot = chain.end_prob, chain.eot
    word = np.minimum(prev, eot - 1)
    match = chain.successors[word] == nxt[:, None]
    p = ((1 - q) * chain.probs[word] * match).sum(axis=1)
    p = np.where(nxt == eot, q, p)
    p = np.where(prev == eot, np.where(nxt == eot, 0.0, 1.0 / eot), p)
    with np.errstate(divide="ignore"):
        return np.log(p)


def cross_entropy(chain: MarkovChain, tokens: np.ndarray) -> float:
    """Mean −ln P(t_{i+1} | t_i) of the chain over a stream: ≈ :func:`entropy_rate` on a
    long stream of its own."""
    t = np.asarray(tokens, np.int64)
    return float(-log_probs(chain, t[:-1], t[1:]).mean())


def sample(chain: MarkovChain, n_tokens: int, seed: int, split: str) -> np.ndarray:
    """`n_tokens` of the chain for `split` (module docstring), deterministic in its
    arguments; a uint16 array."""
    out: list[np.ndarray] = []
    have, rounds = 0, 0
    length = max(int(8 / chain.end_prob), 256)  # steps per run: most runs end many documents
    runs = int(min(max(n_tokens // length + 1, 64), 8192))
    while have < n_tokens:
        rng = np.random.default_rng([int(seed), SPLIT_IDS[split], rounds])
        block = _runs(chain, rng, runs, length)
        for run in block.T:
            ends = np.flatnonzero(run == chain.eot)
            if ends.size:
                out.append(run[:ends[-1] + 1])
                have += ends[-1] + 1
        rounds += 1
    return np.concatenate(out)[:n_tokens].astype(tok.DTYPE)


def _runs(chain: MarkovChain, rng: np.random.Generator, runs: int, length: int) -> np.ndarray:
    """`runs` independent runs of `length` steps (length × runs), each starting at a word
    drawn uniformly (the token after an end-of-text)."""
    eot, q = chain.eot, chain.end_prob
    cum = np.cumsum(chain.probs, axis=1)[:, :-1]
    state = rng.integers(0, eot, size=runs)
    block = np.empty((length, runs), np.int64)
    for t in range(length):
        block[t] = state
        word = np.minimum(state, eot - 1)
        pick = (rng.random(runs)[:, None] > cum[word]).sum(axis=1)
        nxt = chain.successors[word, pick]
        nxt = np.where(rng.random(runs) < q, eot, nxt)
        state = np.where(state == eot, rng.integers(0, eot, size=runs), nxt)
    return block


@dataclass
class GenerateRequest:
    """What `sciperf prepare data.source=synthetic` writes: both splits' token counts, the
    vocabulary, the chain's shape and the seed (everything that decides the bytes)."""

    root: str
    train_tokens: int
    eval_tokens: int
    vocab_size: int
    seed: int
    successors: int = 4
    end_prob: float = 1 / 256
    alpha: float = 1.0

    def chain(self) -> MarkovChain:
        return make_chain(self.vocab_size, self.successors, self.end_prob, self.alpha,
                          self.seed)


def _counts(req: GenerateRequest) -> dict[str, int]:
    return {"train": int(req.train_tokens), "validation": int(req.eval_tokens)}


def dataset_complete(req: GenerateRequest) -> bool:
    """True when `root` holds both token files of exactly this request (the manifest's
    entry, written last, and each file's length)."""
    entry = manifest.entry(req.root, FORMAT)
    if not isinstance(entry, dict):
        return False
    made = {k: v for k, v in entry.items() if k != "entropy_rate"}
    if made != manifest.content(asdict(req)):
        return False
    for split, n in _counts(req).items():
        path = tok.split_path(req.root, split)
        if not path.is_file() or path.stat().st_size != n * tok.DTYPE.itemsize:
            return False
    return True


def recorded_entropy(root: str | Path) -> float | None:
    """The entropy rate the generator recorded for the set in `root` (None: none)."""
    entry = manifest.entry(root, FORMAT)
    value = entry.get("entropy_rate") if isinstance(entry, dict) else None
    return float(value) if isinstance(value, int | float) else None


def generate(req: GenerateRequest, show_progress: bool = True) -> float:
    """Write both splits (each aside, then renamed) and the manifest last; returns the
    chain's entropy rate, which the manifest records beside the request. Files of the
    format that the generator did not write are refused (``manifest.forget``)."""
    root = Path(req.root)
    counts = _counts(req)
    if min(counts.values()) < 2:
        raise SciperfError(f"{root}: a synthetic split needs at least 2 tokens "
                           f"(asked for {counts})")
    present = [p for split in counts if (p := tok.split_path(root, split)).exists()]
    manifest.forget(root, FORMAT, None, present)
    chain = req.chain()
    bar = Progress(sum(counts.values()), "synthetic tokens", unit="tokens",
                   enabled=show_progress)
    for split, n in counts.items():
        tok.write_tokens(tok.split_path(root, split), sample(chain, n, req.seed, split),
                         req.vocab_size)
        bar.update(n)
    rate = entropy_rate(chain)
    manifest.record(root, FORMAT, asdict(req) | {"entropy_rate": rate})
    return rate
