"""Multi-head latent attention (chapter 25): parity with transformers' DeepSeek-V3 attention,
absorbed decoding equal to the naive path, the cache holding only c_KV and k_R, bad inputs."""
import pytest
import torch

import transformer_lib as tl

from transformer_lib import KVCache
from transformer_lib.latent_attention import LatentAttention, cache_bytes_per_token

ds = pytest.importorskip("transformers.models.deepseek_v3.modeling_deepseek_v3")
from transformers import DeepseekV3Config  # noqa: E402

SIZES = dict(d_model=32, num_heads=4, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6)


def _pair(q_lora_rank, seed=0):
    torch.manual_seed(seed)
    ours = LatentAttention(**SIZES, q_lora_rank=q_lora_rank).eval()
    for p in ours.parameters():  # RMSNorm weights away from one so they matter
        torch.nn.init.normal_(p, 0, 0.3) if p.dim() == 1 else None
    cfg = DeepseekV3Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=12,
                           qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, q_lora_rank=q_lora_rank,
                           rope_interleave=False, attention_bias=False, rms_norm_eps=1e-6)
    cfg._attn_implementation = "eager"
    ref = ds.DeepseekV3Attention(cfg, layer_idx=0).eval()
    missing = ref.load_state_dict(ours.state_dict(), strict=True)  # the same parameter names
    assert not missing.missing_keys
    assert ref.scaling == pytest.approx(ours.scale)
    return ours, ref


@pytest.mark.parametrize("q_lora_rank", [None, 10])
@pytest.mark.parametrize("absorbed", [False, True])
def test_equals_transformers_deepseek_v3_attention(q_lora_rank, absorbed):
    ours, ref = _pair(q_lora_rank)
    B, L = 2, 9
    x = torch.randn(B, L, 32, generator=torch.Generator().manual_seed(1))
    # RoPE's half-split layout computed here from its definition (cos/sin of position x base^(-2i/d))
    inv = 1.0 / 10000.0 ** (torch.arange(0, 4, 2, dtype=torch.float32) / 4)
    angles = torch.arange(L).float()[:, None] * inv[None]
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()  # (L, 4)
    mask = torch.full((L, L), float("-inf")).triu(1)[None, None].expand(B, 1, L, L)
    with torch.no_grad():
        want, _ = ref(x, (cos[None].expand(B, L, 4), sin[None].expand(B, L, 4)), mask)
        got, _ = ours(x, absorbed=absorbed)
    # float32; sums of <= 32 products of O(1) terms before and after a softmax: ~1e-6
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("absorbed", [False, True])
def test_cached_decoding_equals_the_full_pass_and_caches_only_the_latent(absorbed):
    ours, _ = _pair(None, seed=2)
    x = torch.randn(2, 11, 32, generator=torch.Generator().manual_seed(3))
    cache = KVCache(1)
    with torch.no_grad():
        full = ours(x)[0]
        parts = [ours(x[:, :4], cache=cache, absorbed=absorbed)[0]]
        parts += [ours(x[:, t:t + 1], cache=cache, absorbed=absorbed)[0] for t in range(4, 11)]
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-5)
    assert cache.keys[0][:, :, :cache.length].shape == (2, 1, 11, 12)  # the latent c_KV, one for all heads
    assert cache.values[0][:, :, :cache.length].shape == (2, 1, 11, 4)  # the rotary key k_R
    per_token = cache.nbytes() / (2 * 11)
    assert per_token == cache_bytes_per_token("mla", kv_lora_rank=12, qk_rope_head_dim=4, bytes_per_element=4)
    # against multi-head attention over the same heads: 2 * 4 * (8 + 4) numbers vs 12 + 4
    assert per_token < cache_bytes_per_token("mha", num_heads=4, head_dim=12, bytes_per_element=4)


def test_cache_bytes_formulae():
    # SmolLM2-135M: 30 layers, 9 heads, 3 KV heads, head_dim 64, bf16
    assert cache_bytes_per_token("mha", num_heads=9, head_dim=64, num_layers=30) == 2 * 9 * 64 * 30 * 2
    assert cache_bytes_per_token("gqa", num_heads=9, num_kv_heads=3, head_dim=64, num_layers=30) == 2 * 3 * 64 * 60
    assert cache_bytes_per_token("mqa", head_dim=64, num_layers=30) == 2 * 64 * 60
    assert cache_bytes_per_token("mla", kv_lora_rank=512, qk_rope_head_dim=64, num_layers=61) == 576 * 61 * 2


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="kv_lora_rank"):
        LatentAttention(**{**SIZES, "kv_lora_rank": 4 * (8 + 6)})
    with pytest.raises(ValueError, match="kv_lora_rank"):
        LatentAttention(**{**SIZES, "kv_lora_rank": 0})
    with pytest.raises(ValueError, match="qk_rope_head_dim"):
        LatentAttention(**{**SIZES, "qk_rope_head_dim": 3})
    with pytest.raises(ValueError, match="q_lora_rank"):
        LatentAttention(**SIZES, q_lora_rank=0)
    with pytest.raises(ValueError, match="query must be"):
        LatentAttention(**SIZES)(torch.randn(2, 3, 31))
    with pytest.raises(ValueError, match="kind"):
        cache_bytes_per_token("gqa2")
    for name, kwargs in (("mask", dict(mask=torch.ones(3, 3, dtype=torch.bool))), ("bias", dict(bias=torch.zeros(1, 4, 3, 3))),
                         ("key", dict(key=torch.randn(2, 3, 32))), ("causal", dict(causal=False))):
        with pytest.raises(ValueError, match=name):
            LatentAttention(**SIZES)(torch.randn(2, 3, 32), **kwargs)


# -- latent attention as a switch of the model ----------------------------------------------------

MLA = dict(vocab_size=37, d_model=32, num_heads=4, num_layers=2, d_ff=64, positional="rope", rotary_style="halves",
           norm="rms", activation="swiglu", bias=False, attention="mla", kv_lora_rank=16, qk_rope_head_dim=4)


def test_an_mla_model_generates_with_a_cache_equal_to_its_full_forward():
    from transformer_lib.sampling import generate
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(**MLA).eval()
    assert all(isinstance(b.self_attn, LatentAttention) for b in model.blocks)
    tokens = torch.randint(0, 37, (2, 10), generator=torch.Generator().manual_seed(1))
    cache = model.new_cache()
    with torch.no_grad():
        full = model(tokens)
        steps = torch.cat([model(tokens[:, :3], cache=cache)] + [model(tokens[:, t:t + 1], cache=cache)
                                                                 for t in range(3, 10)], 1)
        torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)
        assert torch.equal(generate(model, tokens[:, :3], 6), generate(model, tokens[:, :3], 6, use_cache=False))
    # the model's KVCache holds the latent (r = 16) and the rotary key (4) per token and layer, no K or V
    assert cache.nbytes() == 2 * 10 * 2 * (16 + 4) * 4


def test_an_mla_model_is_recorded_by_the_probes():
    from transformer_lib.probes import hook_points, record_activations, record_attention
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(**MLA).eval()
    tokens = torch.randint(0, 37, (1, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), record_attention(model, weights=True) as calls:
        model(tokens)
    assert [c.name for c in calls] == ["blocks.0.self_attn", "blocks.1.self_attn"]
    w = calls[0].weights
    assert w.shape == (1, 4, 7, 7) and torch.allclose(w.sum(-1), torch.ones(1, 4, 7))
    assert torch.all(w.triu(1) == 0)  # causal
    with torch.no_grad(), record_activations(model, hook_points(model)) as acts:
        model(tokens)
    assert acts["blocks.0.hook_z"].shape == (1, 7, 4, 8) and acts["blocks.1.hook_pattern"].shape == (1, 4, 7, 7)


def test_absorbed_decoding_of_a_quantized_mla_model_equals_its_naive_path():
    from transformer_lib.quantization import fused_refusal, quantize
    torch.manual_seed(0)
    model = quantize(tl.DecoderOnlyLM(**MLA).eval(), 8, group_size=16)  # the latent is 16 wide
    assert fused_refusal(model.config) == "attention='mla'"  # the fused step leaves it to the modules
    tokens = torch.randint(0, 37, (1, 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        naive = model(tokens)
        for block in model.blocks:
            block.self_attn.absorbed = True
        torch.testing.assert_close(model(tokens), naive, atol=1e-4, rtol=1e-4)


def test_mla_refuses_switches_it_cannot_take_by_name():
    for name, value in (("positional", "learned"), ("num_kv_heads", 2), ("qk_norm", True)):
        with pytest.raises(ValueError, match=name):
            tl.DecoderOnlyLM(**{**MLA, name: value})
