"""The synthetic Markov stream: its entropy rate against the true chain's cross-entropy on
a generated validation split, the stationary distribution, and the generator's files."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sciperf.workloads.gpt2 import synthetic
from sciperf.workloads.gpt2 import tokens as tok
from testkit import refused


def _request(root: Path, **kw: int) -> synthetic.GenerateRequest:
    return synthetic.GenerateRequest(root=str(root), **({"train_tokens": 20_000,
                                                         "eval_tokens": 200_000,
                                                         "vocab_size": 64, "seed": 5} | kw))


def test_stationary_distribution_and_entropy_rate() -> None:
    chain = synthetic.make_chain(64, successors=3, end_prob=0.1, seed=1)
    pi = synthetic.stationary(chain)
    np.testing.assert_allclose(synthetic._step(chain, pi), pi, atol=1e-13)
    assert (chain.successors < chain.eot).all()
    assert all(len(set(row)) == 3 for row in chain.successors.tolist())
    # H by its definition, from the dense transition matrix
    dense = np.zeros((64, 64))
    for i in range(63):
        dense[i, chain.successors[i]] = 0.9 * chain.probs[i]
        dense[i, 63] = 0.1
    dense[63, :63] = 1 / 63
    np.testing.assert_allclose(dense.sum(axis=1), 1.0)
    safe = np.where(dense > 0, dense, 1.0)
    rate = -(pi[:, None] * dense * np.log(safe)).sum()
    assert math.isclose(synthetic.entropy_rate(chain), rate, rel_tol=1e-12)


def test_true_chain_cross_entropy_on_the_validation_split(tmp_path: Path) -> None:
    """The chain's own cross-entropy on its 200,000-token validation split is the entropy
    rate within 0.02 nats (about 8 standard errors), and a model that ignores the chain
    (uniform) is far above it."""
    req = _request(tmp_path)
    rate = synthetic.generate(req, show_progress=False)
    assert synthetic.dataset_complete(req)
    assert synthetic.recorded_entropy(tmp_path) == rate
    val = tok.open_tokens(tok.split_path(tmp_path, "validation"), 64, 1024)
    assert len(val) == 200_000
    chain = req.chain()
    assert abs(synthetic.cross_entropy(chain, val) - rate) < 0.02
    assert rate < math.log(64) - 1.0
    assert np.isfinite(synthetic.log_probs(chain, val[:-1], val[1:])).all()  # joins valid
    again = synthetic.sample(chain, 20_000, 5, "train")
    np.testing.assert_array_equal(again, tok.open_tokens(tok.split_path(tmp_path, "train"),
                                                         64, 8))


def test_generator_refuses_a_set_it_did_not_write(tmp_path: Path) -> None:
    tok.write_tokens(tmp_path / "train.bin", np.arange(100), 200)
    req = _request(tmp_path, train_tokens=1000, eval_tokens=1000)
    assert not synthetic.dataset_complete(req)
    line = refused(synthetic.generate, req, show_progress=False)
    assert line.startswith(f"{tmp_path / 'train.bin'}: a dataset sciperf's generator did not "
                           "write")
    assert (tmp_path / "train.bin").stat().st_size == 200


def test_prepare_writes_once_then_finds_the_set_ready(tmp_path: Path, capsys) -> None:
    from types import SimpleNamespace

    from sciperf.workloads.gpt2 import prepare

    cfg = SimpleNamespace(seed=2, model=SimpleNamespace(vocab_size=64, context=16),
                          data=SimpleNamespace(dir=str(tmp_path), train_tokens=3000,
                                               eval_tokens=1000))
    prepare.SOURCES["synthetic"](cfg)
    assert "entropy rate" in capsys.readouterr().out
    before = (tmp_path / "train.bin").stat().st_mtime_ns
    prepare.SOURCES["synthetic"](cfg)
    assert capsys.readouterr().out.startswith(f"dataset ready: {tmp_path}")
    assert (tmp_path / "train.bin").stat().st_mtime_ns == before
    prepare.SOURCES["existing"](cfg)
    assert f"{tmp_path / 'val.bin'}: 1,000 tokens" in capsys.readouterr().out
