"""Sparse attention kernels equal the readable references; counts, masks, bad input.

Two references: ``transformer_lib.scaled_dot_product_attention`` (scores materialized) with the
pattern's boolean mask from ``transformer_lib.masks``, and, for the sliding window, the readable
block loop ``sparse.sliding_window_reference`` (itself held equal to the first). Tolerance: the
kernels reorder float32 sums over at most ~100 keys of O(1) terms, so differences stay near
1e-6; 1e-5 leaves room without hiding a wrong key (which moves outputs by ~1e-1).
"""
import os
import subprocess
import sys
import warnings
from unittest import mock

import pytest
import torch
from hypothesis import given, settings, strategies as st

import transformer_lib as tl
from transformer_lib import sparse as sp
from transformer_lib._extensions import Kernel
from transformer_lib.sparse import flex as flex_module
from transformer_lib.masks import dilated_mask, sliding_window_mask

ATOL = 1e-5


def _qkv(B, H, L, d, seed, dtype=torch.float32, d_v=None):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, d, generator=g, dtype=dtype)
    k = torch.randn(B, H, L, d, generator=g, dtype=dtype)
    v = torch.randn(B, H, L, d_v or d, generator=g, dtype=dtype)
    return q, k, v


def _key_mask(B, L, cut, seed):
    """(B, L) True = real: the first sequence is full, the others lose up to ``cut`` trailing tokens."""
    g = torch.Generator().manual_seed(seed)
    lengths = [L] + [max(0, L - int(torch.randint(0, cut + 1, (1,), generator=g))) for _ in range(B - 1)]
    return tl.padding_mask(lengths, L)[:, 0, 0, :]  # (B, L)


def _reference(q, k, v, mask, key_mask=None):
    if key_mask is not None:
        mask = mask & key_mask[:, None, None, :]  # (B, 1, L, L)
    out, _ = tl.scaled_dot_product_attention(q, k, v, mask)
    return out


def _close(a, b, atol=ATOL):
    assert a.shape == b.shape
    err = (a - b).abs().max().item() if a.numel() else 0.0
    assert err <= atol, f"max |difference| {err:.3g} > {atol}"


def test_top_level_exports():
    assert tl.sliding_window_attention is sp.sliding_window_attention
    assert tl.dilated_attention is sp.dilated_attention
    assert all(hasattr(sp, name) for name in sp.__all__)
    assert not hasattr(sp, "median_time") and not hasattr(sp, "peak_memory")  # timers live in profiling only
    assert sp.longformer_mask is tl.masks.longformer_mask  # one home for masks


# -- the readable reference ---------------------------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(L=st.integers(1, 70), w=st.integers(1, 90), causal=st.booleans(), block=st.integers(1, 40),
       pad=st.integers(0, 40), seed=st.integers(0, 10_000))
def test_reference_equals_dense_masked_attention(L, w, causal, block, pad, seed):
    q, k, v = _qkv(2, 2, L, 5, seed)
    key_mask = _key_mask(2, L, pad, seed) if pad else None
    ref = _reference(q, k, v, sliding_window_mask(L, w, causal), key_mask)
    _close(sp.sliding_window_reference(q, k, v, w, causal, key_mask=key_mask, block_size=block), ref)


def test_reference_computes_only_its_tiles():
    """Keys outside a block's tile are never read: poisoning them with NaN changes nothing."""
    q, k, v = _qkv(1, 1, 64, 4, 11)
    v2 = v.clone()
    v2[..., 40:, :] = float("nan")  # queries < 40 - 4 = 36 must not see these; blocks of 8 end at 32
    out = sp.sliding_window_reference(q, k, v2, 8, block_size=8)
    assert torch.isfinite(out[..., :32, :]).all()
    _close(out[..., :32, :], sp.sliding_window_reference(q, k, v, 8, block_size=8)[..., :32, :])


# -- sliding window ---------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 70), w=st.integers(1, 90), d=st.integers(1, 9), causal=st.booleans(),
       block=st.sampled_from([2, 7, 16, 64]), pad=st.integers(0, 40), seed=st.integers(0, 10_000))
def test_sliding_window_blocked_equals_dense_reference(L, w, d, causal, block, pad, seed):
    q, k, v = _qkv(2, 2, L, d, seed)
    key_mask = _key_mask(2, L, pad, seed) if pad else None
    ref = sp.sliding_window_reference(q, k, v, w, causal, key_mask=key_mask)
    for kernel in ("blocked", "dense", "auto"):
        out = sp.sliding_window_attention(q, k, v, w, causal, key_mask=key_mask, kernel=kernel, block_size=block)
        _close(out, ref)


@pytest.mark.parametrize("causal", [False, True])
def test_sliding_window_interior_blocks_long_sequence(causal):
    """L >> window + block: most blocks take the shared-tile path."""
    q, k, v = _qkv(1, 2, 600, 16, 1, d_v=8)
    ref = sp.sliding_window_reference(q, k, v, 64, causal)
    for block in (32, 64):
        _close(sp.sliding_window_attention(q, k, v, 64, causal, kernel="blocked", block_size=block), ref)


def test_sliding_window_full_band_is_full_attention_and_window_one_is_identity():
    q, k, v = _qkv(1, 1, 50, 8, 2)
    full, _ = tl.scaled_dot_product_attention(q, k, v)
    _close(sp.sliding_window_attention(q, k, v, 200, kernel="blocked", block_size=16), full)
    # window 1: each query sees only itself, so the output is its own value
    _close(sp.sliding_window_attention(q, k, v, 1, kernel="blocked", block_size=16), v)


def test_sliding_window_float64_scale_and_gradients():
    q, k, v = _qkv(2, 2, 70, 6, 3, dtype=torch.float64)
    mask = sliding_window_mask(70, 21, causal=True)
    ref, _ = tl.scaled_dot_product_attention(q, k, v, mask, scale=0.3)
    out = sp.sliding_window_attention(q, k, v, 21, True, kernel="blocked", block_size=8, scale=0.3)
    _close(out, ref, atol=1e-12)
    # the blocked kernel writes into slices of one output: autograd must still see every block
    q1, k1, v1 = (t.clone().requires_grad_() for t in (q, k, v))
    q2, k2, v2 = (t.clone().requires_grad_() for t in (q, k, v))
    grad = torch.randn_like(ref)
    (sp.sliding_window_attention(q1, k1, v1, 21, True, block_size=8) * grad).sum().backward()
    (tl.scaled_dot_product_attention(q2, k2, v2, mask)[0] * grad).sum().backward()
    for a, b in ((q1, q2), (k1, k2), (v1, v2)):
        _close(a.grad, b.grad, atol=1e-10)


def test_padding_row_that_sees_nothing_gives_zeros():
    q, k, v = _qkv(1, 1, 40, 4, 4)
    key_mask = torch.zeros(1, 40, dtype=torch.bool)
    key_mask[0, :5] = True  # only the first five tokens are real
    out = sp.sliding_window_attention(q, k, v, 6, causal=False, key_mask=key_mask, block_size=8)
    assert torch.isfinite(out).all()
    assert out[0, 0, 10:].abs().max() == 0  # queries >= 8 see no real key within 3 positions
    _close(out, _reference(q, k, v, sliding_window_mask(40, 6), key_mask))


# -- dilated ----------------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 90), dilation=st.integers(1, 25), d=st.integers(1, 9), causal=st.booleans(),
       pad=st.integers(0, 40), seed=st.integers(0, 10_000))
def test_dilated_equals_dense_reference(L, dilation, d, causal, pad, seed):
    q, k, v = _qkv(2, 2, L, d, seed)
    key_mask = _key_mask(2, L, pad, seed) if pad else None
    ref = _reference(q, k, v, dilated_mask(L, dilation, causal), key_mask)
    for kernel in ("strided", "dense", "auto"):
        _close(sp.dilated_attention(q, k, v, dilation, causal, key_mask=key_mask, kernel=kernel), ref)


def test_dilation_one_is_full_attention():
    q, k, v = _qkv(1, 2, 33, 8, 5)
    for causal in (False, True):
        ref, _ = tl.scaled_dot_product_attention(q, k, v, tl.causal_mask(33) if causal else None)
        _close(sp.dilated_attention(q, k, v, 1, causal), ref)


def test_dilated_mixes_only_within_a_residue_class():
    """Changing the values of odd positions leaves the even positions' outputs (d = 2) unchanged."""
    q, k, v = _qkv(1, 1, 20, 4, 6)
    v2 = v.clone()
    v2[..., 1::2, :] += 10.0
    a, b = sp.dilated_attention(q, k, v, 2), sp.dilated_attention(q, k, v2, 2)
    _close(a[..., 0::2, :], b[..., 0::2, :])
    assert (a[..., 1::2, :] - b[..., 1::2, :]).abs().min() > 1.0


# -- global tokens and BigBird ---------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(L=st.integers(1, 70), w=st.integers(1, 40), causal=st.booleans(), pad=st.integers(0, 30),
       globals_=st.lists(st.integers(0, 79), max_size=4), block=st.sampled_from([4, 16, 64]),
       seed=st.integers(0, 10_000))
def test_longformer_equals_dense_reference(L, w, causal, pad, globals_, block, seed):
    positions = sorted({p % L for p in globals_})
    q, k, v = _qkv(2, 2, L, 5, seed)
    key_mask = _key_mask(2, L, pad, seed) if pad else None
    mask = sp.longformer_mask(L, w, positions, causal)
    ref = _reference(q, k, v, mask, key_mask)
    for kernel in ("blocked", "dense"):
        out = sp.longformer_attention(q, k, v, w, positions, causal, key_mask=key_mask, kernel=kernel,
                                      block_size=block)
        _close(out, ref)


def test_longformer_mask_is_window_or_global():
    m = sp.longformer_mask(12, 4, [0, 7])
    assert m[0].all() and m[:, 0].all() and m[7].all() and m[:, 7].all()
    assert not m[3, 10] and m[3, 5] and not m[3, 6]
    assert torch.equal(sp.longformer_mask(12, 4, [0, 7], causal=True), m & tl.causal_mask(12))


@settings(max_examples=25, deadline=None)
@given(L=st.integers(1, 70), block=st.integers(3, 16), window_blocks=st.integers(1, 5),
       global_blocks=st.integers(0, 2), random_blocks=st.integers(0, 3), pad=st.integers(0, 30),
       seed=st.integers(0, 10_000))
def test_block_sparse_bigbird_equals_dense_reference(L, block, window_blocks, global_blocks, random_blocks, pad, seed):
    nb = -(-L // block)
    layout = sp.bigbird_block_layout(nb, window_blocks, min(global_blocks, nb), random_blocks, seed)
    q, k, v = _qkv(2, 2, L, 4, seed)
    key_mask = _key_mask(2, L, pad, seed) if pad else None
    ref = _reference(q, k, v, sp.layout_to_mask(layout, block, L), key_mask)
    for kernel in ("blocked", "dense"):
        _close(sp.block_sparse_attention(q, k, v, layout, block, key_mask=key_mask, kernel=kernel), ref)


def test_bigbird_layout_structure():
    layout = sp.bigbird_block_layout(16, window_blocks=3, global_blocks=2, random_blocks=2, seed=0)
    assert layout[:2].all() and layout[:, :2].all()  # global blocks: full rows and columns
    assert all(layout[r, max(0, r - 1):r + 2].all() for r in range(16))  # the window of blocks
    window_and_global = sp.bigbird_block_layout(16, 3, 2, 0, seed=0)
    extra = (layout & ~window_and_global).sum(dim=1)
    assert extra[:2].tolist() == [0, 0] and (extra[2:] == 2).all()  # exactly 2 random blocks per row
    assert torch.equal(layout, sp.bigbird_block_layout(16, 3, 2, 2, seed=0))  # seeded
    assert not torch.equal(layout, sp.bigbird_block_layout(16, 3, 2, 2, seed=1))
    mask = sp.bigbird_mask(50, 8, 3, 1, 1, seed=0)
    assert mask.shape == (50, 50) and mask[0].all() and mask[:, 0].all()


# -- counts, block masks, receptive fields ---------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 200), w=st.integers(1, 450), causal=st.booleans())
def test_score_counts_match_the_masks(n, w, causal):
    mask = sliding_window_mask(n, w, causal)
    assert sp.band_score_count(n, w, causal) == int(mask.sum())
    d = w % 17 + 1
    assert sp.dilated_score_count(n, d, causal) == int(dilated_mask(n, d, causal).sum())
    assert sp.blocked_score_count(n, w, causal, block_size=16) >= int(mask.sum())
    # flex scores whole b x b tiles: count the tiles the band touches, by brute force
    nb = -(-n // 32)
    padded = torch.zeros(nb * 32, nb * 32, dtype=torch.bool)
    padded[:n, :n] = mask
    tiles = padded.view(nb, 32, nb, 32).any(dim=3).any(dim=1)  # (nb, nb) tile touched
    sizes = torch.tensor([min(32, n - 32 * t) for t in range(nb)])
    assert sp.flex_score_count(n, w, causal, block_size=32) == int((tiles * sizes[:, None] * sizes[None, :]).sum())


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 300), w=st.integers(1, 200), causal=st.booleans(), block=st.sampled_from([1, 4, 16, 32]))
def test_blocked_score_count_is_what_the_kernel_computes(n, w, causal, block):
    """Tally the scores of every score product the blocked kernel makes (one head, batch 1), on
    both of its interior paths: fused SDPA (gradients wanted) and the hand-written tiles."""
    import torch.nn.functional as F

    computed = []
    sdpa, baddbmm = F.scaled_dot_product_attention, torch.baddbmm

    def counting_sdpa(q, k, v, *args, **kwargs):
        computed.append(q[..., 0].numel() * k.shape[-2])  # (batch dims) x rows x keys
        return sdpa(q, k, v, *args, **kwargs)

    def counting_baddbmm(input, batch1, batch2, **kwargs):
        computed.append(batch1.shape[0] * batch1.shape[1] * batch2.shape[2])  # tiles x rows x keys
        return baddbmm(input, batch1, batch2, **kwargs)

    for grad in (False, True):
        q, k, v = (x.requires_grad_(grad) for x in _qkv(1, 1, n, 2, 0))
        computed.clear()
        with mock.patch.object(F, "scaled_dot_product_attention", counting_sdpa), \
                mock.patch.object(torch, "baddbmm", counting_baddbmm):
            sp.sliding_window_attention(q, k, v, w, causal, kernel="blocked", block_size=block)
        assert sum(computed) == sp.blocked_score_count(n, w, causal, block_size=block)


def test_seed_numbers():
    n, w = 16384, 512
    assert n * n == 268_435_456
    assert sp.band_score_count(n, w) == 8_339_200  # the seed's "~8.4M" is n * w = 8,388,608
    assert round(n * n / sp.band_score_count(n, w), 1) == 32.2
    # 128-row blocks: blocks 2..125 are interior, 124 tiles of 128 x (128 + 512); each end is 256 x 512
    assert sp.blocked_score_count(n, w, block_size=128) == 124 * 128 * 640 + 256 * 512 + 256 * 512
    assert sp.dilated_score_count(12, 3) == 48  # 3 classes of 4 positions: 3 * 4^2, i.e. n / d per row


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L, block, padded", [(600, 128, True), (640, 64, True), (600, 64, False)])
def test_window_block_mask_matches_create_block_mask(L, block, padded, causal):
    """Our analytic block mask equals the one create_block_mask finds by evaluating all L^2 pairs."""
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    half = 100
    km = torch.ones(2, L, dtype=torch.bool)
    km[1, L - 150:] = False  # padding demotes full tiles to partial

    def mod(b, h, q_idx, kv_idx):
        diff = q_idx - kv_idx
        band = (diff <= half) & (diff >= (0 if causal else -half))
        return band & km[b, kv_idx] if padded else band

    ours = sp.window_block_mask(L, 2 * half, causal, km if padded else None, block_size=block)
    theirs = flex.create_block_mask(mod, 2, None, L, L, device="cpu", BLOCK_SIZE=block)
    # to_dense: 1 where a tile is computed (partial or full); compare full tiles separately
    assert torch.equal(ours.to_dense()[0, 0], theirs.to_dense().any(dim=0)[0])

    def full_tiles(mask, b):
        tiles = torch.zeros(mask.full_kv_num_blocks.shape[-1], mask.full_kv_indices.shape[-1], dtype=torch.bool)
        for r, (num, idx) in enumerate(zip(mask.full_kv_num_blocks[b, 0], mask.full_kv_indices[b, 0])):
            tiles[r, idx[:num].long()] = True
        return tiles

    # a tile is full for our shared mask only if it is full in every sequence of the batch
    assert torch.equal(full_tiles(ours, 0), full_tiles(theirs, 0) & full_tiles(theirs, 1))


def test_receptive_field_composes_masks():
    L = 64
    band = sliding_window_mask(L, 8)  # reach 4 each side
    assert torch.equal(sp.receptive_field([band, band, band]), sliding_window_mask(L, 24))
    # dilated windows with rates 1, 2, 4, 8 cover every offset in [-15, 15]: no holes
    mixed = sp.receptive_field([sp.dilated_window_mask(L, 2, d) for d in (1, 2, 4, 8)])
    assert torch.equal(mixed, sliding_window_mask(L, 30))
    # a fixed rate 2 repeated reaches only even offsets: the gridding artifact
    fixed = sp.receptive_field([sp.dilated_window_mask(L, 2, 2)] * 4)
    row = fixed[32]
    assert row[24:41:2].all() and not row[25:40:2].any()
    assert sp.gridding_holes(L, (1, 2, 4, 8), 2) == 0
    assert sp.gridding_holes(L, (2, 2, 2, 2), 2) == 8  # the odd offsets in [-8, 8]
    assert sp.gridding_holes(L, (4, 4, 4, 4), 2) == 24
    assert sp.gridding_holes(L, (2, 3), 2) == 2  # offsets +-4 are missing: 2a + 3b with |a|, |b| <= 1
    # a global token connects any two positions within two layers
    lf = sp.longformer_mask(L, 2, [0])
    assert sp.receptive_field([lf, lf]).all() and not lf.all()


def test_dilated_window_mask():
    m = sp.dilated_window_mask(20, 4, 3)
    assert m[10].nonzero().flatten().tolist() == [4, 7, 10, 13, 16]
    assert torch.equal(sp.dilated_window_mask(20, 5, 1), sliding_window_mask(20, 5))
    assert torch.equal(sp.dilated_window_mask(20, 4, 3, causal=True), m & tl.causal_mask(20))


# -- flex_attention (compiled): one fixed shape, skipped where it cannot compile -------------------

@pytest.fixture(scope="module")
def flex_ok():
    ok, reason = sp.flex_available()
    if not ok:
        pytest.skip(f"flex_attention cannot run here: {reason}")


def test_flex_kernel_equals_dense_reference(flex_ok):
    L = 300  # not a multiple of the 128-wide tiles
    q, k, v = _qkv(2, 2, L, 16, 7)
    key_mask = _key_mask(2, L, 140, 7)
    for causal, w, km in ((False, 64, None), (True, 64, key_mask), (False, 300, key_mask), (True, 1, None)):
        ref = sp.sliding_window_reference(q, k, v, w, causal, key_mask=km)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a silent fallback would not test flex
            out = sp.sliding_window_attention(q, k, v, w, causal, key_mask=km, kernel="flex")
        _close(out, ref)


_FLEX_VS_REFERENCE = """
import torch, transformer_lib.sparse as sp
g = torch.Generator().manual_seed(7)
q, k, v = (torch.randn(2, 2, 300, 16, generator=g) for _ in range(3))
out = sp.sliding_window_attention(q, k, v, 64, True, kernel="flex")
print(float((out - sp.sliding_window_reference(q, k, v, 64, True)).abs().max()))
"""


@pytest.mark.skipif("avx2" not in (open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""),
                    reason="ATEN_CPU_CAPABILITY=avx2 needs an x86-64 CPU with AVX2")
def test_flex_is_right_after_a_compile_under_another_cpu_capability(flex_ok, tmp_path):
    """torch 2.13's inductor cache ignores ATEN_CPU_CAPABILITY: flex compiled in an unpinned
    process and reused in an avx2-pinned one (make test after a notebook) was off by 1.1, so the
    library keeps one cache folder per capability. Two fresh processes share one default cache
    folder (TMPDIR); each must equal the readable reference (float32 rounding: 1e-5)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "ATEN_CPU_CAPABILITY")}
    env["TMPDIR"] = str(tmp_path)
    for pin in ({}, {"ATEN_CPU_CAPABILITY": "avx2"}, {}):
        run = subprocess.run([sys.executable, "-c", _FLEX_VS_REFERENCE], env={**env, **pin},
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        assert float(run.stdout.split()[-1]) < 1e-5, (pin, run.stdout, run.stderr[-2000:])


def test_flex_falls_back_to_blocked_with_one_warning(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no C compiler")

    monkeypatch.setattr(flex_module, "_compiled_flex", lambda: broken)
    monkeypatch.setattr(flex_module, "KERNEL", Kernel("flex_attention kernel", "the blocked kernel"))
    q, k, v = _qkv(1, 2, 100, 8, 8)
    ref = _reference(q, k, v, sliding_window_mask(100, 16, True))
    with pytest.warns(RuntimeWarning, match="falling back"):
        out = sp.sliding_window_attention(q, k, v, 16, True, kernel="flex")
    _close(out, ref)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # only once
        _close(sp.sliding_window_attention(q, k, v, 16, True, kernel="flex"), ref)
    assert "no C compiler" in sp.flex_available()[1]


# -- measuring helpers -----------------------------------------------------------------------------


# -- bad input -------------------------------------------------------------------------------------

def test_bad_parameters_raise_value_errors():
    q, k, v = _qkv(1, 2, 10, 4, 0)
    swa, dil = sp.sliding_window_attention, sp.dilated_attention
    cases = [
        (lambda: swa(q, k, v, 0), "window must be a positive integer"),
        (lambda: swa(q, k, v, -3), "window must be a positive integer"),
        (lambda: swa(q, k, v, 2.5), "window must be a positive integer"),
        (lambda: swa(q, k, v, True), "window must be a positive integer"),
        (lambda: swa(q, k, v, 4, kernel="fast"), "kernel must be one of"),
        (lambda: swa(q, k, v, 4, block_size=0), "block_size must be a positive integer"),
        (lambda: swa(q[0], k[0], v[0], 4), r"must have shape \(B, H, L, d_k\)"),
        (lambda: swa(q, k[:, :, :8], v[:, :, :8], 4), r"same \(B, H, L\)"),
        (lambda: swa(q, k[..., :3], v, 4), "share d_k"),
        (lambda: swa(q.long(), k.long(), v.long(), 4), "floating-point"),
        (lambda: swa(q, k.double(), v, 4), "share a dtype"),
        (lambda: swa(q, k, v, 4, key_mask=torch.ones(1, 10)), "boolean"),
        (lambda: swa(q, k, v, 4, key_mask=torch.ones(1, 9, dtype=torch.bool)), r"shape \(B, L\)"),
        (lambda: dil(q, k, v, 0), "dilation must be a positive integer"),
        (lambda: dil(q, k, v, 2, kernel="blocked"), "kernel must be one of"),
        (lambda: sp.longformer_attention(q, k, v, 4, [10]), r"global_positions must lie in \[0, 10\)"),
        (lambda: sp.longformer_attention(q, k, v, 4, [2.7]), "global_positions must hold integer"),
        (lambda: swa(q, k, v, 4, scale=float("nan")), "scale must be a finite number > 0"),
        (lambda: swa(q, k, v, 4, scale=-1.0), "scale must be a finite number > 0"),
        (lambda: sp.block_sparse_attention(q, k, v, torch.ones(2, 2, dtype=torch.bool), 4), r"boolean \(3, 3\)"),
        (lambda: sp.bigbird_block_layout(4, random_blocks=-1), "random_blocks must be an integer >= 0"),
        (lambda: sp.bigbird_block_layout(4, global_blocks=5), "exceeds num_blocks"),
        (lambda: sp.receptive_field([]), "at least one mask"),
        (lambda: sp.gridding_holes(10, [], 2), "at least one dilation"),
        (lambda: sp.receptive_field([torch.ones(3, 3)]), "square boolean"),
        (lambda: sp.dilated_window_mask(10, 3, 0), "dilation must be a positive integer"),
        (lambda: sp.band_score_count(0, 4), "n must be a positive integer"),
        (lambda: sp.layout_to_mask(torch.ones(2, 2, dtype=torch.bool), 4, L=9), r"L must lie in \[1, 8\]"),
        (lambda: sp.sliding_window_reference(q, k, v, 0), "window must be a positive integer"),
        (lambda: sp.sliding_window_reference(q, k, v, 4, block_size=0), "block_size must be a positive integer"),
        (lambda: sp.sliding_window_reference(q, k[:, :, :8], v, 4), r"same \(B, H, L\)"),
        (lambda: sp.window_block_layout(10, 4, block_size=0), "block_size must be a positive integer"),
        (lambda: sp.window_block_layout(0, 4), "L must be a positive integer"),
        (lambda: sp.flex_score_count(10, 4, block_size=-1), "block_size must be a positive integer"),
        (lambda: sp.receptive_field([torch.ones(3, 3, dtype=torch.bool), torch.ones(4, 4, dtype=torch.bool)]),
         "share one shape"),
        (lambda: sp.bigbird_mask(0, 4), "L must be a positive integer"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


@settings(max_examples=30, deadline=None)
@given(L=st.integers(1, 150), w=st.integers(1, 120), causal=st.booleans(), block=st.sampled_from([4, 16, 32]))
def test_window_block_layout_matches_brute_force_tiles(L, w, causal, block):
    nb = -(-L // block)
    padded = torch.zeros(nb * block, nb * block, dtype=torch.bool)
    padded[:L, :L] = sliding_window_mask(L, w, causal)
    tiles = padded.view(nb, block, nb, block).transpose(1, 2)  # (nb, nb, block, block)
    real = torch.zeros_like(padded)
    real[:L, :L] = True
    real_tiles = real.view(nb, block, nb, block).transpose(1, 2)
    touched, full = sp.window_block_layout(L, w, causal, block_size=block)
    assert torch.equal(touched, tiles.any(dim=(2, 3)))
    # full: every pair inside the band and the tile not cut short by the end of the sequence
    assert torch.equal(full, (tiles | ~real_tiles).all(dim=(2, 3)) & real_tiles.all(dim=(2, 3)))
