"""Fixtures the OpenFold tests of both frameworks share."""

from __future__ import annotations

from typing import Any

import pytest

from sciperf.config import compose
from sciperf.workloads import get
from sciperf.workloads.openfold import spec as of_spec

ADAM_STEP = 1_000_000.0  # bias corrections ~1: the first step's move is set by the moments
MOMENT = 10.0  # exp_avg; exp_avg_sq = MOMENT**2; gradients (clipped to norm 0.1) are tiny
WEIGHT_SHIFT = 0.25  # no initialisation of a run has these weights


@pytest.fixture(scope="module")
def reference_state() -> tuple[dict[str, Any], dict[str, Any]]:
    """(alphafold_state_dict, optimizer_state_dict) of a mini AlphaFold and its Adam, as
    the reference's writer stores them: weights shifted off any initialisation, moments
    set to known values."""
    torch = pytest.importorskip("torch")
    from sciperf_pytorch.workloads.openfold.model import AlphaFold

    torch.set_num_threads(1)
    torch.manual_seed(11)
    spec = get("openfold").model_spec(compose(["workload=openfold", "experiment=mini"]))
    model = AlphaFold(spec, checkpointing=False)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(WEIGHT_SHIFT)
    adam = torch.optim.Adam(model.parameters(), lr=of_spec.BASE_LR, betas=of_spec.ADAM_BETAS,
                            eps=of_spec.ADAM_EPS)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    adam.step()  # creates the moments; a zero gradient moves nothing
    for p in model.parameters():
        slot = adam.state[p]
        slot["step"].fill_(ADAM_STEP)
        slot["exp_avg"].fill_(MOMENT)
        slot["exp_avg_sq"].fill_(MOMENT**2)
    return model.state_dict(), adam.state_dict()


