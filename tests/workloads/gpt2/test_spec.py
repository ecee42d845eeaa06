"""GPT-2 spec: the parameter count derived three ways, the released names, which tensors
decay, the LR schedule's shape and the config checks."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from sciperf.workloads.gpt2 import spec


class _Node(dict):
    """A config node as Hydra gives one: items and attributes."""

    __getattr__ = dict.__getitem__


def _cfg(**opt: float) -> SimpleNamespace:
    o = spec.OptimizerSpec(**opt)
    return SimpleNamespace(opt=o, train=spec.TrainSpec(), model=spec.ModelSpec())


def test_parameter_count_from_sizes_and_from_the_tensor_table() -> None:
    """124,439,808 = 50,257·768 + 1,024·768 + 12·(12·768² + 13·768) + 2·768, and the same
    summed over every canonical tensor (the tied output projection has none)."""
    model = spec.ModelSpec()
    assert model.parameter_count() == spec.FULL_PARAMETER_COUNT == 124_439_808
    assert 50_257 * 768 + 1_024 * 768 + 12 * (12 * 768**2 + 13 * 768) + 2 * 768 == 124_439_808
    shapes = model.weight_shapes()
    assert sum(math.prod(s) for s in shapes.values()) == 124_439_808
    assert len(shapes) == 2 + 12 * 12 + 2  # embeddings, 12 tensors a block, ln_f
    per_block = sum(math.prod(s) for n, s in shapes.items() if n.startswith("h/0/"))
    assert per_block == 7_087_872
    small = spec.ModelSpec(n_layer=2, n_head=2, d_model=8, context=5, vocab_size=11)
    assert small.parameter_count() == sum(math.prod(s) for s in small.weight_shapes().values())


def test_released_names_and_shapes() -> None:
    """The canonical table maps onto the released checkpoint's names; projections keep
    the released Conv1D layout (in, out)."""
    released = {spec.released_name(n): s for n, s in spec.ModelSpec().weight_shapes().items()}
    assert released["wte.weight"] == (50_257, 768)
    assert released["wpe.weight"] == (1024, 768)
    assert released["h.0.ln_1.weight"] == released["h.0.ln_1.bias"] == (768,)
    assert released["h.0.attn.c_attn.weight"] == (768, 2304)
    assert released["h.0.attn.c_attn.bias"] == (2304,)
    assert released["h.5.attn.c_proj.weight"] == (768, 768)
    assert released["h.11.mlp.c_fc.weight"] == (768, 3072)
    assert released["h.11.mlp.c_proj.weight"] == (3072, 768)
    assert released["ln_f.bias"] == (768,)
    assert "lm_head.weight" not in released


def test_weight_decay_on_matrices_only() -> None:
    shapes = spec.ModelSpec().weight_shapes()
    decayed = {n for n in shapes if spec.decays(n)}
    assert decayed == {n for n, s in shapes.items() if len(s) == 2}
    assert "wte/embeddings" in decayed and "h/0/attn/c_attn/bias" not in decayed
    assert sum(math.prod(shapes[n]) for n in decayed) == 124_439_808 - 12 * 13 * 768 - 2 * 768


def test_lr_schedule() -> None:
    """Linear warm-up to 6e-4 over 2,000 steps, cosine to 6e-5 at the schedule's end."""
    cfg = _cfg()
    end = cfg.train.max_steps
    assert end == math.ceil(10e9 / 491_520) == 20_346
    assert spec.lr_for_step(cfg, 0) == pytest.approx(6e-4 / 2000)
    assert spec.lr_for_step(cfg, 999) == pytest.approx(3e-4)
    assert spec.lr_for_step(cfg, 1999) == pytest.approx(6e-4)
    assert spec.lr_for_step(cfg, 2000) == pytest.approx(6e-4)
    middle = 2000 + (end - 2000) / 2
    assert spec.lr_at(int(middle), 6e-4, 6e-5, 2000, end) == pytest.approx(3.3e-4, rel=1e-3)
    assert spec.lr_for_step(cfg, end) == spec.lr_for_step(cfg, end + 99) == 6e-5
    lrs = [spec.lr_for_step(cfg, s) for s in range(2000, end + 1, 97)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:], strict=False))
    assert spec.lr_for_step(_cfg(decay_steps=4000), 4000) == 6e-5


def test_batch_and_accumulation() -> None:
    """480 sequences a step whatever the ranks: forwards of 12 accumulate 40 times; of
    96 (12 on each of 8 GPUs), 5 times — nanoGPT's layout; 0 tokens: one forward a step."""
    cfg = _cfg()
    assert spec.sequences_per_step(cfg) == 480
    assert spec.accumulation(cfg) == 40
    cfg.train.global_batch_size = 96
    assert spec.accumulation(cfg) == 5
    cfg.train.global_batch_size = 84
    with pytest.raises(ValueError, match="train.global_batch_size=84 do not divide"):
        spec.accumulation(cfg)
    cfg.train.global_batch_tokens = 0
    assert spec.sequences_per_step(cfg) == 84 and spec.accumulation(cfg) == 1


@pytest.mark.parametrize(("part", "key", "value", "says"), [
    ("model", "n_head", 5, "model.d_model=768 is not divisible by model.n_head=5"),
    ("model", "vocab_size", 70_000, "token files hold uint16 ids"),
    ("opt", "min_lr", 1e-3, "opt.min_lr=0.001 must be in (0, opt.peak_lr=0.0006]"),
    ("opt", "beta2", 1.0, "opt.beta2=1.0 must be in [0, 1)"),
])
def test_check_config_names_the_key(part: str, key: str, value: float, says: str) -> None:
    cfg = SimpleNamespace(model=_Node(vars(spec.ModelSpec())), opt=spec.OptimizerSpec(),
                          train=spec.TrainSpec())
    spec.check_config(cfg)
    if part == "model":
        cfg.model = _Node(cfg.model | {key: value})
    else:
        setattr(cfg.opt, key, value)
    with pytest.raises(ValueError) as err:
        spec.check_config(cfg)
    assert says in str(err.value)
