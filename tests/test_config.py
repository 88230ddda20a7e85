"""ModelConfig, and every switch composing with every tool the book applies to "any model".

The composition test draws a seeded sample of configurations (positions x norms x activations x
kv heads x bias x experts x norm placement x tying x QK-norm x attention kind, multi-head or latent) and runs each through the tools:
cached decoding = full forward, generation with and without a cache, int8/int4 quantization then
cached decoding = the quantized full forward, LoRA merged = unmerged, every hook point fires,
record_attention sees every layer, a training step, and save/load. A tool that cannot take a
configuration must refuse it with a ValueError naming the switch; none does today.

Tolerances (float32): a cached step and the full forward sum the same products in another order,
~1e-6 relative on logits of size ~1; 1e-4 absolute leaves a wide margin and still catches a wrong
position or mask (errors of order 0.1).
"""
from __future__ import annotations

import dataclasses
import itertools
import random

import pytest
import torch
from hypothesis import given, strategies as st

from transformer_lib import DecoderOnlyLM
from transformer_lib.config import ModelConfig
from transformer_lib.lora import add_lora, merge_lora
from transformer_lib.probes import hook_points, record_activations, record_attention
from transformer_lib.quantization import FUSED_ANY, FUSED_VALUES, fused_refusal, quantize
from transformer_lib.sampling import generate
from transformer_lib.saving import from_pretrained, save_pretrained

SWITCHES = dict(positional=["learned", "sinusoidal", "rope", "alibi", "none"], norm=["layer", "rms"],
                activation=["relu", "gelu", "swiglu"], num_kv_heads=[None, 2, 1], bias=[True, False],
                num_experts=[None, 4], norm_first=[True, False], tie_weights=[True, False], qk_norm=[False, True],
                rotary_style=["interleaved", "halves"], attention=["mha", "mla"])
# latent attention has its own keys: it takes RoPE, one latent for all heads and no QK-norm
MLA_NEEDS = dict(positional="rope", num_kv_heads=None, qk_norm=False)


def sample_configs(n: int, seed: int = 0) -> list[ModelConfig]:
    """``n`` configurations drawn without replacement from the product of SWITCHES (seeded)."""
    everything = list(itertools.product(*SWITCHES.values()))
    rng = random.Random(seed)
    configs = []
    for values in rng.sample(everything, n):
        switches = dict(zip(SWITCHES, values))
        if switches["attention"] == "mla":
            switches.update(MLA_NEEDS)
        configs.append(ModelConfig(37, d_model=32, num_heads=4, num_layers=2, d_ff=64, max_len=32, **switches))
    return configs


CONFIGS = sample_configs(24)


def _ids(c: ModelConfig, B: int = 2, L: int = 9, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, c.vocab_size, (B, L), generator=torch.Generator().manual_seed(seed))


def _model(c: ModelConfig) -> DecoderOnlyLM:
    torch.manual_seed(0)
    return DecoderOnlyLM(c).eval()


def _cached_logits(model, tokens: torch.Tensor, prompt: int = 4) -> torch.Tensor:
    """The prompt in one call, then one token per call: (B, L, V) like the full forward."""
    cache = model.new_cache()
    out = [model(tokens[:, :prompt], cache=cache)]
    for t in range(prompt, tokens.shape[1]):
        out.append(model(tokens[:, t:t + 1], cache=cache))
    return torch.cat(out, dim=1)


# -- the configuration object ---------------------------------------------------------------------

def test_positional_fields_and_keywords_build_the_same_model():
    a = DecoderOnlyLM(61, 32, 4, 2, positional="rope")
    b = DecoderOnlyLM(ModelConfig(vocab_size=61, d_model=32, num_heads=4, num_layers=2, positional="rope"))
    assert a.config == b.config
    assert DecoderOnlyLM(a.config, num_layers=3).config.num_layers == 3


@given(st.sampled_from(CONFIGS), st.integers(1, 4), st.floats(1.0, 1e6), st.sampled_from([16, 4096]), st.booleans())
def test_to_dict_round_trips_exactly(c, layers, base, context, strict):
    c = dataclasses.replace(c, num_layers=layers, rope_base=base, max_len=context, strict_length=strict)
    assert ModelConfig.from_dict(c.to_dict()) == c


def test_changed_lists_what_differs_from_chapter_16s_gpt():
    assert ModelConfig(61, qk_norm=True).changed() == {"vocab_size": 61, "qk_norm": True}


@pytest.mark.parametrize("kwargs, name", [
    (dict(vocab_size=0), "vocab_size"), (dict(vocab_size=10, d_model=-1), "d_model"),
    (dict(vocab_size=10, positional="rotary"), "positional"), (dict(vocab_size=10, norm_eps=0.0), "norm_eps"),
    (dict(vocab_size=10, num_experts=4, ffn=False), "num_experts"),
    (dict(vocab_size=10, shared_experts=1), "shared_experts"), (dict(vocab_size=10, max_len=0), "max_len"),
])
def test_bad_fields_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ModelConfig(**kwargs)


def test_from_dict_refuses_an_unknown_field_by_name():
    with pytest.raises(ValueError, match="sliding_window"):
        ModelConfig.from_dict({"vocab_size": 10, "sliding_window": 4})


def test_a_mixture_of_experts_made_later_is_in_the_config():
    from transformer_lib.moe import moe_decoder
    model = moe_decoder(DecoderOnlyLM(37, 32, 4, 2, activation="swiglu"), num_experts=4, top_k=1)
    assert (model.config.num_experts, model.config.top_k) == (4, 1)
    assert set(DecoderOnlyLM(model.config).state_dict()) == set(model.state_dict())


# -- the fused quantized step reads the configuration ----------------------------------------------

def test_every_field_is_computed_by_the_fused_step_or_held_at_its_default():
    llama = ModelConfig(37, 32, 4, 2, d_ff=64, positional="rope", rotary_style="halves", norm="rms",
                        activation="swiglu", bias=False, num_kv_heads=2)
    assert fused_refusal(llama) is None
    # each field the step neither computes for any value nor lists, set away from its default
    away = {"qk_norm": dict(qk_norm=True), "attention": dict(attention="mla", num_kv_heads=None),
            "shared_experts": dict(num_experts=4, shared_experts=1), "capacity_factor": dict(num_experts=4, capacity_factor=1.5)}
    others = {f.name for f in dataclasses.fields(ModelConfig)} - FUSED_ANY - set(FUSED_VALUES)
    assert others == set(away), "a new switch: say here how to set it away from its default"
    for name, change in away.items():
        assert fused_refusal(dataclasses.replace(llama, **change)) is not None, name
    assert fused_refusal(dataclasses.replace(llama, qk_norm=True)) == "qk_norm=True"
    assert fused_refusal(dataclasses.replace(llama, num_experts=4)) == "num_experts=4"
    for name, allowed in FUSED_VALUES.items():  # and each listed switch at another value
        other = next(v for v in SWITCHES.get(name, [False, True, 4]) if v not in allowed)
        assert fused_refusal(dataclasses.replace(llama, **{name: other})) == f"{name}={other!r}"


# -- every switch composes with every tool ---------------------------------------------------------

@pytest.mark.parametrize("c", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.changed().items()
                                                                 if k not in ("vocab_size", "d_model", "num_heads",
                                                                              "num_layers", "d_ff", "max_len")))
def test_every_tool_takes_every_configuration(c, tmp_path):
    model = _model(c)
    tokens = _ids(c)
    with torch.no_grad():
        full = model(tokens)
        assert torch.allclose(_cached_logits(model, tokens), full, atol=1e-4), "cached != full forward"
        prompt = tokens[:, :4]
        assert torch.equal(generate(model, prompt, 5), generate(model, prompt, 5, use_cache=False))

        # every hook point fires, and record_attention sees every layer
        names = hook_points(model)
        with record_activations(model, names) as acts:
            model(tokens)
        assert set(acts) == set(names)
        with record_attention(model, weights=True) as calls:
            model(tokens)
        assert len(calls) == c.num_layers and calls[0].weights.shape == (2, 4, 9, 9)

    # save / load round trip
    save_pretrained(model, tmp_path / "m")
    again = from_pretrained(tmp_path / "m")
    assert again.config == c
    with torch.no_grad():
        assert torch.equal(again(tokens), full)

    # LoRA merged = unmerged
    lora = _model(c)
    add_lora(lora, rank=2, alpha=4.0, targets=["q_proj", "v_proj" if c.attention == "mha" else "kv_b_proj"])
    for p in lora.parameters():
        if p.requires_grad:
            torch.nn.init.normal_(p, std=0.1)  # B starts at zero: give the adapters something to add
    with torch.no_grad():
        unmerged = lora(tokens)
        merge_lora(lora)
        assert torch.allclose(lora(tokens), unmerged, atol=1e-5)

    # a training step moves the weights and gives a finite loss
    train = _model(c).train()
    before = [p.detach().clone() for p in train.parameters()]
    opt = torch.optim.AdamW(train.parameters(), lr=1e-2)
    loss = torch.nn.functional.cross_entropy(train(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    opt.step()
    assert torch.isfinite(loss) and any(not torch.equal(a, b) for a, b in zip(before, train.parameters()))

    # quantized 8 and 4 bits, then cached decoding equals the quantized full forward
    for bits in (8, 4):
        q = quantize(_model(c), bits)
        with torch.no_grad():
            assert torch.allclose(_cached_logits(q, tokens[:1]), q(tokens[:1]), atol=1e-4), f"int{bits} cached"
            assert torch.equal(generate(q, tokens[:1, :4], 5), generate(q, tokens[:1, :4], 5, use_cache=False))


def test_the_sample_covers_every_value_of_every_switch():
    for name, values in SWITCHES.items():
        assert {getattr(c, name) for c in CONFIGS} == set(values), name
    assert sum(c.attention == "mla" for c in CONFIGS) >= 3
