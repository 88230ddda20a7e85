"""The few-rows linear paths (transformer_lib.serving.packed_linear: the compiled kernel up to 8 rows,
oneDNN beyond): equal to F.linear within the float32 rounding bound of a dot product, the kernel's
sums the same for any thread count, the model's modules restored after the block, a changed weight
packed again, and the continuous batcher's tokens unchanged with it on."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib.sampling import generate_ids
from transformer_lib.serving.packed_linear import (KERNEL_MAX_ROWS, PackedLinears, available, dot_error_bound, kernel_available,
                                                   linear_rows, packed_linear)
from transformer_lib.serving.baselines import serve_static
from transformer_lib.serving.scheduler import serve_continuous
from transformer_lib.serving.workload import make_workload

pytestmark = pytest.mark.skipif(not available(), reason="this torch has no oneDNN")


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 16, 40])
@pytest.mark.parametrize("n,k,bias", [(7, 13, True), (96, 64, False), (1000, 576, False)])
def test_packed_linear_equals_f_linear_within_the_dot_product_bound(rows, n, k, bias):
    g = torch.Generator().manual_seed(rows * 31 + n)
    x, w = torch.randn(rows, k, generator=g), torch.randn(n, k, generator=g) / k ** 0.5
    b = torch.randn(n, generator=g) if bias else None
    packed = torch.ops.mkldnn._reorder_linear_weight(w, None)
    got, want = packed_linear(x, w, packed, b), F.linear(x, w, b)
    exact = x.double() @ w.double().t() + (0 if b is None else b.double())
    # each side is within gamma_K sum|x w| of the exact product (plus one rounding of the bias add)
    bound = dot_error_bound(x, w) + (0 if b is None else 2 * 2.0 ** -24 * exact.abs())
    assert bool(((got.double() - exact).abs() <= bound).all()) and bool(((want.double() - exact).abs() <= bound).all())
    assert bool(((got.double() - want.double()).abs() <= 2 * bound).all())
    assert packed_linear(x[None], w, packed, b).shape == (1, rows, n)  # any leading dimensions


def test_the_block_swaps_plain_linears_and_restores_them_and_repacks_changed_weights():
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(50, 32, 4, 2, positional="rope", num_kv_heads=2, max_len=64).eval()
    tokens = torch.randint(0, 50, (3, 9))
    with torch.no_grad():
        want = model(tokens)
        packs = PackedLinears(model)
        with packs:
            got = model(tokens)
            assert any(type(m).__name__ == "_PackedLinear" for m in model.modules())
        assert all(type(m) is nn.Linear for m in model.modules() if isinstance(m, nn.Linear))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert packs.nbytes() > 0
        model.head.weight.mul_(2.0)  # (tied to the embedding): its pack is stale
        with packs:
            doubled = model(tokens)
        torch.testing.assert_close(doubled, model(tokens), rtol=1e-5, atol=1e-5)  # the new weight, not the old pack


def test_batchers_with_packed_linears_give_generate_ids_tokens():
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(89, 32, 4, 2, positional="rope", num_kv_heads=2, max_len=128).eval()
    workload = make_workload(8, rate=None, prompt_lengths=(2, 20), output_lengths=(1, 12), seed=3, vocab=(0, 89))
    want = [generate_ids(model, r.prompt, r.max_tokens) for r in workload]
    for serve in (lambda rs: serve_continuous(model, rs, max_batch=4, block_size=4, num_blocks=40, pack_linears=True),
                  lambda rs: serve_static(model, rs, max_batch=4, pack_linears=True)):
        requests = [r.fresh() for r in workload]
        serve(requests)
        assert [r.tokens for r in requests] == want


kernel = pytest.mark.skipif(not kernel_available()[0], reason="the few-rows kernel does not run here")


@kernel
@pytest.mark.parametrize("rows", range(1, KERNEL_MAX_ROWS + 1))
@pytest.mark.parametrize("n,k", [(5, 7), (70, 577), (300, 64)])
def test_linear_rows_is_a_float32_dot_product_per_output_and_the_same_for_any_thread_count(rows, n, k):
    g = torch.Generator().manual_seed(rows * 7 + k)
    x, w = torch.randn(rows, k, generator=g), torch.randn(n, k, generator=g) / k ** 0.5
    got = linear_rows(x, w)
    exact = x.double() @ w.double().t()
    assert bool(((got.double() - exact).abs() <= dot_error_bound(x, w)).all())
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert torch.equal(linear_rows(x, w), got)  # W's rows are shared out, never one output's K terms
    finally:
        torch.set_num_threads(threads)


@kernel
def test_linear_rows_names_the_bad_argument():
    w = torch.randn(4, 8)
    for x, name in ((torch.randn(KERNEL_MAX_ROWS + 1, 8), "x"), (torch.randn(0, 8), "x"), (torch.randn(8), "x"),
                    (torch.randn(2, 8, dtype=torch.float64), "x, weight")):
        with pytest.raises(ValueError, match=name):
            linear_rows(x, w)
    with pytest.raises(ValueError, match="weight"):
        linear_rows(torch.randn(2, 8), torch.randn(4, 9))


@kernel
def test_packed_linear_takes_the_kernel_for_a_few_rows_and_onednn_beyond():
    w = torch.randn(16, 32)
    packed = torch.ops.mkldnn._reorder_linear_weight(w, None)
    x = torch.randn(KERNEL_MAX_ROWS + 1, 32)
    with torch.no_grad():
        assert torch.equal(packed_linear(x[:3], w, packed), linear_rows(x[:3], w))
        want = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
        assert torch.equal(packed_linear(x, w, packed), want)
