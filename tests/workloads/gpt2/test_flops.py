"""GPT-2's counted layers against a hand count of GPT-2 small."""

from __future__ import annotations

from sciperf.workloads.gpt2 import flops, spec


def test_training_flops_per_token_by_hand() -> None:
    """6·N_mm + 12·L·T·d for GPT-2 small: N_mm = 12·12·768² + 50,257·768 = 123,532,032
    weights multiplied per token, attention 12·12·1,024·768 = 113,246,208 FLOPs."""
    model = spec.ModelSpec()
    assert flops.matmul_weights(model) == 84_934_656 + 38_597_376 == 123_532_032
    assert flops.training_flops_per_token(model) == 741_192_192 + 113_246_208 == 854_438_400


def test_layers_follow_characterizes_rule() -> None:
    """The layers, counted as characterize counts them (2 FLOPs a multiply-add, backward
    twice the forward less the first layer's), give the formula per token; their
    parameters are the model's."""
    model = spec.ModelSpec()
    found = flops.layers(model)
    forward = sum(2 * layer.macs for layer in found)
    backward = 2 * forward - 2 * found[0].macs
    assert (forward + backward) / model.context == flops.training_flops_per_token(model)
    assert sum(layer.params for layer in found) == model.parameter_count()
    small = spec.ModelSpec(n_layer=1, n_head=1, d_model=2, context=3, vocab_size=5)
    # by hand: qkv 3·2·6 + scores 3·3·2 + mix 3·3·2 + proj 3·2·2 + fc 3·2·8 + fc2 3·8·2
    # + head 3·2·5 = 36 + 18 + 18 + 12 + 48 + 48 + 30 = 210 multiply-adds
    assert sum(layer.macs for layer in flops.layers(small)) == 210
