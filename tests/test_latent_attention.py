"""Multi-head latent attention (chapter 25): parity with transformers' DeepSeek-V3 attention,
absorbed decoding equal to the naive path, the cache holding only c_KV and k_R, bad inputs."""
import pytest
import torch

from transformer_lib.latent_attention import LatentAttention, LatentCache, cache_bytes_per_token, rope_cos_sin

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
    cos, sin = rope_cos_sin(torch.arange(L), 4)
    mask = torch.full((L, L), float("-inf")).triu(1)[None, None].expand(B, 1, L, L)
    with torch.no_grad():
        want, _ = ref(x, (cos[None].expand(B, L, 4), sin[None].expand(B, L, 4)), mask)
        got = ours(x, absorbed=absorbed)
    # float32; sums of <= 32 products of O(1) terms before and after a softmax: ~1e-6
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("absorbed", [False, True])
def test_cached_decoding_equals_the_full_pass_and_caches_only_the_latent(absorbed):
    ours, _ = _pair(None, seed=2)
    x = torch.randn(2, 11, 32, generator=torch.Generator().manual_seed(3))
    cache = LatentCache(1)
    with torch.no_grad():
        full = ours(x)
        parts = [ours(x[:, :4], cache=cache, absorbed=absorbed)]
        parts += [ours(x[:, t:t + 1], cache=cache, absorbed=absorbed) for t in range(4, 11)]
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-5)
    assert cache.latent[0].shape == (2, 11, 12) and cache.rope_key[0].shape == (2, 11, 4)
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
    with pytest.raises(ValueError, match="x must be"):
        LatentAttention(**SIZES)(torch.randn(2, 3, 31))
    with pytest.raises(ValueError, match="kind"):
        cache_bytes_per_token("gqa2")
