"""Scaled dot-product attention: parity with torch, masking semantics, properties, bad input."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from transformer_lib import attention_fast, scaled_dot_product_attention
from conftest import DEVICES

ATOL = 1e-5


def random_mask(B, H, Lq, Lk, device="cpu", ensure_row=True, p=0.5):
    mask = torch.rand(B, H, Lq, Lk, device=device) > p
    if ensure_row:
        mask[..., 0] = True  # every query sees at least one key
    return mask


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 4), (2, 3, 5, 7, 8), (3, 2, 16, 16, 32)])
def test_matches_torch_sdpa(device, shape):
    B, H, Lq, Lk, d = shape
    q, k, v = (torch.randn(B, H, L, d, device=device) for L in (Lq, Lk, Lk))
    mask = random_mask(B, H, Lq, Lk, device)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.allclose(out, expected, atol=ATOL)
    assert w.shape == (B, H, Lq, Lk)
    fast = attention_fast(q, k, v, mask)
    assert torch.allclose(fast, expected, atol=ATOL)
    out_nw, none = scaled_dot_product_attention(q, k, v, mask, need_weights=False)
    assert none is None and torch.allclose(out_nw, expected, atol=ATOL)


def test_weights_are_explicit_softmax():
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 3)
    _, w = scaled_dot_product_attention(q, k, v)
    manual = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), dim=-1)
    assert torch.allclose(w, manual, atol=ATOL)
    _, w1 = scaled_dot_product_attention(q, k, v, scale=1.0)
    assert torch.allclose(w1, torch.softmax(q @ k.transpose(-1, -2), dim=-1), atol=ATOL)


def test_additive_bias_matches_float_mask():
    q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
    bias = torch.randn(1, 2, 5, 5)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    out, _ = scaled_dot_product_attention(q, k, v, bias=bias)
    assert torch.allclose(out, expected, atol=ATOL)
    assert torch.allclose(attention_fast(q, k, v, bias=bias), expected, atol=ATOL)


def test_fully_masked_rows_are_zero_not_nan():
    q, k, v = (torch.randn(1, 1, 4, 8, requires_grad=True) for _ in range(3))
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    mask[..., 2, :] = False  # query 2 sees nothing
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(w[0, 0, 2], torch.zeros(4))
    assert torch.equal(out[0, 0, 2], torch.zeros(8))
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    fast = attention_fast(q, k, v, mask)
    assert torch.allclose(fast, out, atol=ATOL) and torch.isfinite(fast).all()


@settings(max_examples=40, deadline=None)
@given(Lq=st.integers(1, 7), Lk=st.integers(1, 7), d=st.integers(1, 8), seed=st.integers(0, 10_000))
def test_rows_sum_to_one_where_any_key_is_allowed(Lq, Lk, d, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(Lq, d, generator=g), torch.randn(Lk, d, generator=g), torch.randn(Lk, d, generator=g)
    mask = torch.rand(Lq, Lk, generator=g) > 0.5
    _, w = scaled_dot_product_attention(q, k, v, mask)
    sums = w.sum(-1)
    allowed = mask.any(-1)
    assert torch.allclose(sums[allowed], torch.ones(int(allowed.sum())), atol=1e-5)
    assert torch.equal(sums[~allowed], torch.zeros(int((~allowed).sum())))
    assert torch.equal(w[~mask.expand_as(w)], torch.zeros(int((~mask).sum())))


@settings(max_examples=40, deadline=None)
@given(L=st.integers(2, 8), d=st.integers(1, 8), blocked=st.integers(0, 7), seed=st.integers(0, 10_000))
def test_masked_key_value_has_no_effect(L, d, blocked, seed):
    blocked = blocked % L
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(L, d, generator=g) for _ in range(3))
    mask = torch.ones(L, L, dtype=torch.bool)
    mask[:, blocked] = False
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    k2, v2 = k.clone(), v.clone()
    k2[blocked] += 100.0
    v2[blocked] -= 100.0
    out2, _ = scaled_dot_product_attention(q, k2, v2, mask)
    assert torch.allclose(out, out2, atol=1e-5)
    assert torch.allclose(attention_fast(q, k2, v2, mask), out, atol=1e-5)


@pytest.mark.parametrize("bad_mask, message", [
    (torch.ones(1, 1, 3, 4), "boolean"),
    (torch.ones(1, 1, 3, 5, dtype=torch.bool), "broadcast"),
    (torch.ones(2, 1, 1, 3, 4, dtype=torch.bool), "broadcast"),
    ("not a tensor", "torch.Tensor"),
])
def test_bad_masks_raise_clear_errors(bad_mask, message):
    q, k, v = torch.randn(1, 1, 3, 8), torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(q, k, v, bad_mask)
    with pytest.raises(ValueError, match=message):
        attention_fast(q, k, v, bad_mask)


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="d_k"):
        scaled_dot_product_attention(torch.randn(2, 3, 8), torch.randn(2, 4, 6), torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match="same length"):
        scaled_dot_product_attention(torch.randn(2, 3, 8), torch.randn(2, 4, 8), torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match="broadcast"):
        scaled_dot_product_attention(torch.randn(2, 3, 8), torch.randn(3, 4, 8), torch.randn(3, 4, 8))


def test_one_dimensional_key_mask_on_both_paths():
    q = torch.randn(4, 3)
    mask = torch.tensor([True, False, True, True])  # (L_k,): broadcast over every query
    out, w = scaled_dot_product_attention(q, q, q, mask)
    assert torch.equal(w[:, 1], torch.zeros(4))
    assert torch.allclose(attention_fast(q, q, q, mask), out, atol=ATOL)
