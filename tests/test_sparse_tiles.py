"""The sliding window's hand-written CPU paths: ``sparse.tiles`` (the ``"blocked"`` kernel on a
CPU without autograd) and ``sparse.fused`` (the same steps compiled, ``kernel="fused"``).

Both exponentiate the scores without subtracting the row max and check the row sums afterwards,
so the tests hold them to the readable reference on ordinary inputs *and* on inputs built to
break a max-free softmax: scores past float32's exp range, rows whose every score underflows, values
so large that the product with v could overflow, NaN. Tolerances: on O(1) inputs the two paths
differ by float32 rounding of sums over at most a few hundred O(1) terms (~1e-6), so 1e-5 as in
test_sparse.py; float64 at 1e-12. Where the scores reach hundreds, a score's own rounding
(eps * |s| ~ 2e-5 at |s| = 200) moves each weight by that relative amount in *every* correct
float32 kernel, so the two kernels are compared to 1e-3 there. The fused kernel's exp2 is a
polynomial with relative error below 1e-7 (tested here against float64), inside the same budget.
The fused tests build the C++ extension once (tens of seconds) and skip where it cannot be built.
"""
import math
import warnings

from unittest import mock

import pytest
import torch
from hypothesis import given, settings, strategies as st

from transformer_lib import sparse as sp
from transformer_lib._extensions import Kernel
from transformer_lib.masks import sliding_window_mask as tl_mask
from transformer_lib.sparse import fused, tiles

ATOL = 1e-5


def _qkv(B, H, L, d, seed, dtype=torch.float32, d_v=None, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    q, k = (scale * torch.randn(B, H, L, d, generator=g, dtype=dtype) for _ in range(2))
    return q, k, torch.randn(B, H, L, d_v or d, generator=g, dtype=dtype)


@pytest.fixture(scope="module")
def fused_ok():
    ok, reason = sp.fused_available()
    if not ok:
        pytest.skip(f"the fused kernel cannot be built here: {reason}")


@pytest.fixture(params=["blocked", "fused"])
def kernel(request):
    """Both hand-written paths; the fused one only where its extension builds."""
    if request.param == "fused":
        request.getfixturevalue("fused_ok")
    return request.param


def _window(q, k, v, w, causal=False, kernel="blocked", **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a silent fallback would not test the fused kernel
        return sp.sliding_window_attention(q, k, v, w, causal, kernel=kernel, **kw)


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
    """Wraps a function of ``module`` (tiles.hand_window, tiles._safe_step, ...) and counts the calls."""

    def __init__(self, name, module=tiles):
        self.name, self.calls, self.real = name, 0, getattr(module, name)

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


@pytest.fixture(scope="module")
def fused_or_skip():
    """The kernels a hypothesis test runs: blocked always, fused where it builds (no fixture
    parameters with @given: one test, both kernels per example)."""
    return ("blocked", "fused") if sp.fused_available()[0] else ("blocked",)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(L=st.integers(1, 300), w=st.integers(1, 200), d=st.integers(1, 12), d_v=st.integers(1, 9),
       causal=st.booleans(), block=st.sampled_from([1, 4, 16, 32]), seed=st.integers(0, 10_000),
       heads_last=st.booleans(), scale=st.sampled_from([None, 0.3]))
def test_hand_paths_equal_reference(fused_or_skip, L, w, d, d_v, causal, block, seed, heads_last, scale):
    q, k, v = _qkv(2, 3, L, d, seed, d_v=d_v)
    if heads_last:  # a model's (B, L, H, d) projections, viewed as (B, H, L, d): not contiguous
        q, k, v = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v))
    ref = sp.sliding_window_reference(q, k, v, w, causal, scale=scale)
    for kernel in fused_or_skip:
        _assert_close(_window(q, k, v, w, causal, kernel, block_size=block, scale=scale), ref)


def test_hand_path_float64():
    q, k, v = _qkv(2, 2, 400, 16, 1, dtype=torch.float64)
    for causal in (False, True):
        ref = sp.sliding_window_reference(q, k, v, 100, causal)
        _assert_close(_window(q, k, v, 100, causal), ref, atol=1e-12)


def test_ordinary_scores_need_no_max(kernel):
    """randn inputs keep every row sum in range: no step is redone."""
    q, k, v = _qkv(1, 4, 2048, 64, 2)
    safe = _Counter("_safe_step")
    with mock.patch.object(tiles, "_safe_step", safe):
        _assert_close(_window(q, k, v, 512, kernel=kernel), sp.sliding_window_reference(q, k, v, 512))
    assert safe.calls == 0


def test_scores_past_exp_range_are_redone_with_the_max(kernel):
    q, k, v = _qkv(1, 2, 600, 4, 3, scale=8.0)  # scores of a few hundred: exp2 overflows float32
    assert (q @ k.transpose(-1, -2) / 2 * 1.4426950408889634).max() > 128
    safe = _Counter("_safe_step")
    with mock.patch.object(tiles, "_safe_step", safe):
        out = _window(q, k, v, 64, kernel=kernel)
    assert safe.calls > 0 and out.isfinite().all()
    _assert_close(out, _sdpa_path(q, k, v, 64), atol=1e-3)


def test_only_the_steps_with_bad_rows_are_redone(kernel):
    q, k, v = _qkv(1, 2, 2048, 16, 4)
    q[0, 1, 1000] *= 100.0  # one query of head 1 with scores in the hundreds
    safe = _Counter("_safe_step")
    with mock.patch.object(tiles, "_safe_step", safe):
        out = _window(q, k, v, 128, kernel=kernel)
    assert safe.calls == 1  # the one block of 32 queries that holds query 1000 of head 1
    _assert_close(out, sp.sliding_window_reference(q, k, v, 128), atol=1e-3)


def test_rows_whose_scores_all_underflow(kernel):
    """Every score of a row far below zero: exp2 gives zeros, the safe softmax a proper average."""
    q, k, v = _qkv(1, 1, 400, 8, 5)
    k = k.abs() + 1.0  # every key positive in every coordinate
    q[0, 0, 200] = -40.0  # so this query's scores are all below -100: exp2 underflows to 0
    out = _window(q, k, v, 64, kernel=kernel)
    ref = sp.sliding_window_reference(q, k, v, 64)
    assert out.isfinite().all()
    _assert_close(out, ref, atol=1e-3)


def test_huge_values_cannot_overflow_the_product_with_v(kernel):
    q, k, v = _qkv(1, 1, 400, 8, 6)
    v = v * 1e37  # row sums of ~100 unnormalized weights x |v| overflow float32 in the product with v
    safe = _Counter("_safe_step")
    with mock.patch.object(tiles, "_safe_step", safe):
        out = _window(q, k, v, 64, kernel=kernel)
    assert safe.calls > 0 and out.isfinite().all()
    ref = sp.sliding_window_reference(q.double(), k.double(), v.double(), 64)
    assert ((out.double() - ref).abs() / 1e37).max() < ATOL


def test_nan_spreads_exactly_as_in_the_reference(kernel):
    q, k, v = _qkv(1, 2, 500, 8, 7)
    k[0, 0, 250, 3] = float("nan")  # every query that sees key 250 of head 0 gets NaN
    out = _window(q, k, v, 64, kernel=kernel)
    ref = sp.sliding_window_reference(q, k, v, 64)
    assert out.isnan().any()
    _assert_close(out, ref)


@pytest.mark.parametrize("causal", [False, True])
def test_window_narrower_than_two_blocks(kernel, causal):
    """When the band is narrower than 2 b the two cut corners overlap: the whole tile is masked."""
    q, k, v = _qkv(1, 2, 500, 8, 8)
    for w in (2, 20, 40):
        _assert_close(_window(q, k, v, w, causal, kernel, block_size=32), sp.sliding_window_reference(q, k, v, w, causal))


# -- the fused kernel only ---------------------------------------------------------------------------

def test_fused_exp2_polynomial_is_accurate(fused_ok):
    """The C++ exp2 against float64 across float32's range. A row of two keys with scores t and 0
    (in base 2) gives key 0 the weight 2^t / (2^t + 1), and with v = (1, 0) that weight is the
    output. t is what the kernel itself computes in float32, log2(e) times the score, so the
    comparison isolates the polynomial (relative error below 1e-7) and the rounding of one sum
    and one division (a few float32 epsilons)."""
    q, k = torch.zeros(1, 1, 2, 1), torch.tensor([[[[1.0], [0.0]]]])
    v = torch.tensor([[[[1.0], [0.0]]]])
    log2e = torch.tensor(math.log2(math.e), dtype=torch.float32)
    worst = 0.0
    for x in torch.linspace(-80.0, 80.0, 2001).tolist():
        q[0, 0, 0, 0] = x
        out = _window(q, k, v, 2, kernel="fused", scale=1.0)[0, 0, 0, 0].item()
        t = float((log2e * q[0, 0, 0, 0]).item())  # the kernel's score in base 2, rounded as it rounds it
        exact = 1.0 / (1.0 + 2.0 ** -t)
        worst = max(worst, abs(out - exact) / exact)
    assert worst < 5e-7


def test_fused_score_count_is_the_clipped_tiles():
    """Independently of the formula: per block, the smallest key range holding all of its band."""
    for n, w, causal, b in ((300, 64, False, 32), (333, 17, True, 8), (50, 500, False, 16), (1, 3, False, 32)):
        band = tl_mask(n, w, causal)
        count = 0
        for s in range(0, n, b):
            cols = torch.nonzero(band[s:s + b].any(dim=0)).flatten()
            count += band[s:s + b].shape[0] * (int(cols.max()) - int(cols.min()) + 1)
        assert sp.fused_score_count(n, w, causal, block_size=b) == count


def test_fused_falls_back_to_blocked_where_it_does_not_apply(fused_ok):
    q, k, v = _qkv(2, 2, 300, 8, 9)
    key_mask = torch.ones(2, 300, dtype=torch.bool)
    key_mask[1, 250:] = False
    calls = _Counter("_module", fused)  # fetched only by a call the compiled loop serves
    with mock.patch.object(fused, "_module", calls):
        _window(q, k, v, 64, kernel="fused")
        assert calls.calls == 1
        for args, kw in (((q.double(), k.double(), v.double(), 64), {}),  # float64
                         ((q, k, v, 64), {"key_mask": key_mask}),  # padding
                         (tuple(x.clone().requires_grad_() for x in (q, k, v)) + (64,), {})):  # autograd
            out = _window(*args, kernel="fused", **kw)
            ref = sp.sliding_window_reference(*args, **kw)
            _assert_close(out.detach().to(ref.dtype), ref.detach(), atol=ATOL if out.dtype == torch.float32 else 1e-12)
        assert calls.calls == 1  # none of them reached the compiled loop


def test_fused_build_failure_warns_once_and_falls_back(monkeypatch):
    monkeypatch.setattr(fused, "KERNEL", Kernel("fused sliding-window kernel", "the blocked kernel"))
    monkeypatch.setattr(fused, "_SOURCE", fused._SOURCE.with_name("missing.cpp"))
    q, k, v = _qkv(1, 2, 200, 8, 10)
    ref = sp.sliding_window_reference(q, k, v, 32)
    with pytest.warns(RuntimeWarning, match="cannot be built"):
        _assert_close(sp.sliding_window_attention(q, k, v, 32, kernel="fused"), ref)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # remembered: no second warning, no second build
        _assert_close(sp.sliding_window_attention(q, k, v, 32, kernel="fused"), ref)
    assert sp.fused_available()[0] is False


def test_fused_threads_agree(fused_ok):
    """The blocks are shared out over torch's threads: one or two threads, the same numbers (to float32 rounding)."""
    q, k, v = _qkv(1, 4, 3000, 16, 11)
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _window(q, k, v, 256, kernel="fused")
        torch.set_num_threads(2)
        two = _window(q, k, v, 256, kernel="fused")
    finally:
        torch.set_num_threads(saved)
    # Each block's products go to MKL's sgemm, whose kernel choice may depend on the threads it is
    # given (MKL's reproducibility mode keeps results equal only for a fixed thread count): one
    # or two threads may round differently, but by float32 rounding only, never by a block lost
    # or counted twice (that would move outputs by ~0.1, the size of one value's contribution).
    torch.testing.assert_close(one, two, rtol=1e-5, atol=1e-6)
