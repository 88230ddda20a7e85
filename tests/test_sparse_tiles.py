"""The sliding window's hand-written CPU path (``transformer_lib.sparse.tiles``).

It exponentiates the scores without subtracting the row max and checks the row sums afterwards,
so the tests hold it to the readable reference on ordinary inputs *and* on inputs built to break
a max-free softmax: scores past float32's exp range, rows whose every score underflows, values
so large that the product with v could overflow, NaN. Tolerances: on O(1) inputs the two paths
differ by float32 rounding of sums over at most a few hundred O(1) terms (~1e-6), so 1e-5 as in
test_sparse.py; float64 at 1e-12. Where the scores reach hundreds, a score's own rounding
(eps * |s| ~ 2e-5 at |s| = 200) moves each weight by that relative amount in *every* correct
float32 kernel, so the two kernels are compared to 1e-3 there.
"""
from unittest import mock

import pytest
import torch
from hypothesis import given, settings, strategies as st

from transformer_lib import sparse as sp
from transformer_lib.sparse import tiles

ATOL = 1e-5


def _qkv(B, H, L, d, seed, dtype=torch.float32, d_v=None, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    q, k = (scale * torch.randn(B, H, L, d, generator=g, dtype=dtype) for _ in range(2))
    return q, k, torch.randn(B, H, L, d_v or d, generator=g, dtype=dtype)


def _window(q, k, v, w, causal=False, **kw):
    return sp.sliding_window_attention(q, k, v, w, causal, kernel="blocked", **kw)


def _sdpa_path(q, k, v, w, causal=False, **kw):
    """The same kernel through fused SDPA: gradients wanted, so the hand path steps aside."""
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    return _window(q, k, v, w, causal, **kw).detach()


def _assert_close(a, b, atol=ATOL):
    assert a.shape == b.shape
    assert torch.equal(a.isnan(), b.isnan()), "NaN in different places"
    err = (a - b).nan_to_num().abs().max().item() if a.numel() else 0.0
    assert err <= atol, f"max |difference| {err:.3g} > {atol}"


class _Counter:
    """Wraps tiles.hand_window / tiles._safe_step and counts the calls."""

    def __init__(self, name):
        self.name, self.calls, self.real = name, 0, getattr(tiles, name)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.real(*args, **kwargs)


def test_hand_path_serves_cpu_calls_without_autograd_only():
    q, k, v = _qkv(1, 2, 300, 8, 0)
    counter = _Counter("hand_window")
    with mock.patch("transformer_lib.sparse.blocked.hand_window", counter):
        plain = _window(q, k, v, 64)
        assert counter.calls == 1
        with torch.no_grad():
            _window(*(x.clone().requires_grad_() for x in (q, k, v)), 64)
        assert counter.calls == 2  # no_grad: nothing to differentiate
        through_sdpa = _sdpa_path(q, k, v, 64)
        _window(q.bfloat16(), k.bfloat16(), v.bfloat16(), 64)
        assert counter.calls == 2  # gradients wanted, or bfloat16: fused SDPA
    _assert_close(plain, through_sdpa)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(L=st.integers(1, 300), w=st.integers(1, 200), d=st.integers(1, 12), d_v=st.integers(1, 9),
       causal=st.booleans(), block=st.sampled_from([1, 4, 16, 32]), seed=st.integers(0, 10_000),
       heads_last=st.booleans(), scale=st.sampled_from([None, 0.3]))
def test_hand_path_equals_reference(L, w, d, d_v, causal, block, seed, heads_last, scale):
    q, k, v = _qkv(2, 3, L, d, seed, d_v=d_v)
    if heads_last:  # a model's (B, L, H, d) projections, viewed as (B, H, L, d): not contiguous
        q, k, v = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v))
    ref = sp.sliding_window_reference(q, k, v, w, causal, scale=scale)
    _assert_close(_window(q, k, v, w, causal, block_size=block, scale=scale), ref)


def test_hand_path_float64():
    q, k, v = _qkv(2, 2, 400, 16, 1, dtype=torch.float64)
    for causal in (False, True):
        ref = sp.sliding_window_reference(q, k, v, 100, causal)
        _assert_close(_window(q, k, v, 100, causal), ref, atol=1e-12)


def test_ordinary_scores_need_no_max():
    """randn inputs keep every row sum in range: no step is redone."""
    q, k, v = _qkv(1, 4, 2048, 64, 2)
    safe = _Counter("_safe_step")
    with mock.patch.object(tiles, "_safe_step", safe):
        _window(q, k, v, 512)
    assert safe.calls == 0


def test_scores_past_exp_range_are_redone_with_the_max():
    q, k, v = _qkv(1, 2, 600, 4, 3, scale=8.0)  # scores of a few hundred: exp2 overflows float32
    assert (q @ k.transpose(-1, -2) / 2 * 1.4426950408889634).max() > 128
    safe = _Counter("_safe_step")
    with mock.patch.object(tiles, "_safe_step", safe):
        out = _window(q, k, v, 64)
    assert safe.calls > 0 and out.isfinite().all()
    _assert_close(out, _sdpa_path(q, k, v, 64), atol=1e-3)


def test_only_the_steps_with_bad_rows_are_redone():
    q, k, v = _qkv(1, 2, 2048, 16, 4)
    q[0, 1, 1000] *= 100.0  # one query of head 1 with scores in the hundreds
    safe = _Counter("_safe_step")
    with mock.patch.object(tiles, "_safe_step", safe):
        out = _window(q, k, v, 128)
    assert safe.calls == 1  # the one chunk of tiles that holds query 1000 of head 1
    _assert_close(out, sp.sliding_window_reference(q, k, v, 128), atol=1e-3)


def test_rows_whose_scores_all_underflow():
    """Every score of a row far below zero: exp2 gives zeros, the safe softmax a proper average."""
    q, k, v = _qkv(1, 1, 400, 8, 5)
    k = k.abs() + 1.0  # every key positive in every coordinate
    q[0, 0, 200] = -40.0  # so this query's scores are all below -100: exp2 underflows to 0
    out = _window(q, k, v, 64)
    ref = sp.sliding_window_reference(q, k, v, 64)
    assert out.isfinite().all()
    _assert_close(out, ref, atol=1e-3)


def test_huge_values_cannot_overflow_the_product_with_v():
    q, k, v = _qkv(1, 1, 400, 8, 6)
    v = v * 1e36  # sum of weights (up to 2^100 unnormalized) x |v| would overflow float32
    safe = _Counter("_safe_step")
    with mock.patch.object(tiles, "_safe_step", safe):
        out = _window(q, k, v, 64)
    assert safe.calls > 0 and out.isfinite().all()
    ref = sp.sliding_window_reference(q.double(), k.double(), v.double(), 64)
    assert ((out.double() - ref).abs() / 1e36).max() < ATOL


def test_nan_spreads_exactly_as_in_the_reference():
    q, k, v = _qkv(1, 2, 500, 8, 7)
    k[0, 0, 250, 3] = float("nan")  # every query that sees key 250 of head 0 gets NaN
    out = _window(q, k, v, 64)
    ref = sp.sliding_window_reference(q, k, v, 64)
    assert out.isnan().any()
    _assert_close(out, ref)


@pytest.mark.parametrize("causal", [False, True])
def test_window_narrower_than_two_blocks(causal):
    """When the band is narrower than 2 b the two cut corners overlap: the whole tile is masked."""
    q, k, v = _qkv(1, 2, 500, 8, 8)
    for w in (2, 20, 40):
        _assert_close(_window(q, k, v, w, causal, block_size=32), sp.sliding_window_reference(q, k, v, w, causal))
