"""Mixture of experts (chapter 25): parity with transformers' Mixtral block and its auxiliary loss,
properties of the routing, capacity, the decoder conversion and bad inputs."""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

import transformer_lib as tl
from transformer_lib.moe import MixtureOfExperts, load_balancing_loss, moe_decoder, route, router_logits

mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")
from transformers import MixtralConfig  # noqa: E402


def _pair(D=16, F=24, E=6, k=2, seed=0):
    torch.manual_seed(seed)
    ours = MixtureOfExperts(D, F, E, k)
    cfg = MixtralConfig(hidden_size=D, intermediate_size=F, num_local_experts=E, num_experts_per_tok=k,
                        router_jitter_noise=0.0)
    ref = mixtral.MixtralSparseMoeBlock(cfg).eval()
    with torch.no_grad():
        ref.gate.weight.copy_(ours.router.weight)
        for e, ex in enumerate(ours.experts):
            # transformers stacks [gate; up] rows; ours: linear1 = gate (SiLU), linear3 = up
            ref.experts.gate_up_proj[e].copy_(torch.cat([ex.linear1.weight, ex.linear3.weight], 0))
            ref.experts.down_proj[e].copy_(ex.linear2.weight)
    return ours.eval(), ref


@pytest.mark.parametrize("E,k", [(4, 1), (6, 2), (8, 3), (5, 5)])
def test_equals_transformers_mixtral_sparse_block(E, k):
    ours, ref = _pair(E=E, k=k)
    x = torch.randn(3, 7, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        # float32, sums of <= 24 products of O(1) terms: rounding ~1e-6, 1e-5 leaves margin
        torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)


def test_grouped_path_equals_the_dense_reference_and_gradients_flow():
    ours, _ = _pair(E=5, k=2, seed=3)
    x = torch.randn(4, 5, 16, generator=torch.Generator().manual_seed(2), requires_grad=True)
    torch.testing.assert_close(ours(x), ours.forward_dense(x), atol=1e-5, rtol=1e-5)
    ours(x).square().sum().backward()
    assert ours.router.weight.grad.abs().sum() > 0  # the router learns through the weights


def test_only_the_chosen_experts_run():
    ours, _ = _pair(E=6, k=2, seed=4)
    seen = [0] * 6
    for e, ex in enumerate(ours.experts):
        ex.register_forward_hook(lambda m, i, o, e=e: seen.__setitem__(e, seen[e] + i[0].shape[0]))
    x = torch.randn(2, 9, 16)
    with torch.no_grad():
        ours(x)
    _, idx = route(ours.last_router_logits, 2)
    assert seen == torch.bincount(idx.reshape(-1), minlength=6).tolist()
    assert sum(seen) == 18 * 2  # k expert calls per token, not E


@pytest.mark.parametrize("E,k,layers", [(4, 1, 1), (8, 2, 3), (6, 3, 2)])
def test_aux_loss_equals_transformers(E, k, layers):
    g = torch.Generator().manual_seed(E * 10 + k)
    logits = tuple(torch.randn(13, E, generator=g) * 2 for _ in range(layers))
    ref = mixtral.load_balancing_loss_func(logits, num_experts=E, top_k=k)
    torch.testing.assert_close(load_balancing_loss(logits, k), ref, atol=1e-6, rtol=1e-6)
    if layers == 1:
        torch.testing.assert_close(load_balancing_loss(logits[0], k), ref, atol=1e-6, rtol=1e-6)


def test_aux_loss_limits():
    E, k = 8, 2
    # uniform logits: every f_e = 1/E per slot, P_e = 1/E -> E * k * E * (1/E^2) = k
    # (topk on ties picks the first experts, so use a balanced assignment instead)
    N = 8 * 50
    logits = torch.full((N, E), -30.0)
    for t in range(N):
        logits[t, t % E] = logits[t, (t + 1) % E] = 5.0
    assert load_balancing_loss(logits, k).item() == pytest.approx(k, rel=1e-3)
    collapsed = torch.full((N, E), -30.0)
    collapsed[:, 0] = collapsed[:, 1] = 30.0  # all on experts 0 and 1 with probability 1/2 each
    assert load_balancing_loss(collapsed, k).item() == pytest.approx(E * k / 2, rel=1e-3)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(E=st.integers(1, 8), data=st.data(), N=st.integers(1, 20), seed=st.integers(0, 1000))
def test_routing_weights_sum_to_one_and_pick_the_largest(E, data, N, seed):
    k = data.draw(st.integers(1, E))
    logits = torch.randn(N, E, generator=torch.Generator().manual_seed(seed))
    w, idx = route(logits, k)
    torch.testing.assert_close(w.sum(-1), torch.ones(N))
    assert (w >= 0).all()
    kth = logits.topk(k, -1).values[:, -1:]
    assert (logits.gather(1, idx) >= kth).all()
    assert 1 <= load_balancing_loss(logits, k).item() * (1 + 1e-5) and load_balancing_loss(logits, k) <= E * k + 1e-4


def test_top_k_equal_num_experts_is_a_softmax_weighted_mixture():
    ours, _ = _pair(E=3, k=3, seed=5)
    x = torch.randn(5, 16)
    with torch.no_grad():
        p = torch.softmax(ours.router(x), -1)
        want = sum(p[:, e:e + 1] * ex(x) for e, ex in enumerate(ours.experts))
        torch.testing.assert_close(ours(x), want, atol=1e-6, rtol=1e-5)


def test_shared_experts_are_added_to_every_token():
    torch.manual_seed(0)
    m = MixtureOfExperts(16, 24, 4, 2, shared_experts=2).eval()
    x = torch.randn(6, 16)
    with torch.no_grad():
        routed = m.forward_dense(x) - m.shared[0](x) - m.shared[1](x)
        plain = MixtureOfExperts(16, 24, 4, 2)
        plain.load_state_dict({k: v for k, v in m.state_dict().items() if not k.startswith("shared")})
        torch.testing.assert_close(routed, plain(x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(m(x), m.forward_dense(x), atol=1e-5, rtol=1e-5)


def test_capacity_drops_and_counts_the_overflow():
    torch.manual_seed(0)
    m = MixtureOfExperts(8, 12, 4, 1, capacity_factor=1.0).eval()
    with torch.no_grad():
        m.router.weight.zero_()
        m.router.weight[0, 0] = 10.0  # every token with x_0 > 0 prefers expert 0
    x = torch.randn(40, 8, generator=torch.Generator().manual_seed(0))
    x[:, 0] = x[:, 0].abs() + 1
    with torch.no_grad():
        y = m(x)
    cap = m.capacity(40)
    assert cap == math.ceil(1.0 * 40 * 1 / 4) == 10
    assert m.last_dropped == 30 and m.last_counts.tolist() == [10, 0, 0, 0]
    assert (y[10:] == 0).all() and (y[:10] != 0).any()  # overflow tokens get nothing (residual only)
    big = MixtureOfExperts(8, 12, 4, 1, capacity_factor=4.0)
    big.load_state_dict(m.state_dict())
    with torch.no_grad():
        big(x)
    assert big.last_dropped == 0


def _lm(seed=0):
    torch.manual_seed(seed)
    return tl.DecoderOnlyLM(23, d_model=32, num_heads=4, num_layers=2, max_len=40, positional="rope",
                            norm="rms", activation="swiglu", init_std=0.2).eval()


def _assert_cached_decoding_equals_one_pass(model, length: int, prompt: int) -> None:
    """A prompt, then one token at a time with the cache: the logits of one full pass."""
    tokens = torch.randint(0, 23, (2, length), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        parts = [model(tokens[:, :prompt], cache=cache)]
        parts += [model(tokens[:, t:t + 1], cache=cache) for t in range(prompt, length)]
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-5)


def test_moe_decoder_cached_decoding_is_exact():
    model = moe_decoder(_lm(), num_experts=4, top_k=2, d_ff=16)
    assert all(isinstance(b.ffn, MixtureOfExperts) for b in model.blocks)
    _assert_cached_decoding_equals_one_pass(model, 15, 6)
    logits = router_logits(model)
    assert len(logits) == 2 and logits[0].shape == (2, 4)  # the last call: 2 tokens, 4 experts


def test_upcycled_decoder_equals_the_dense_model():
    dense = _lm(seed=2)
    tokens = torch.randint(0, 23, (2, 11), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = dense(tokens)
        got = moe_decoder(dense, num_experts=4, top_k=2, copy_dense=True)(tokens)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="top_k"):
        MixtureOfExperts(8, 12, 4, 5)
    with pytest.raises(ValueError, match="top_k"):
        MixtureOfExperts(8, 12, 4, 0)
    with pytest.raises(ValueError, match="num_experts"):
        MixtureOfExperts(8, 12, 0, 1)
    with pytest.raises(ValueError, match="d_ff"):
        MixtureOfExperts(8, 0, 4, 1)
    with pytest.raises(ValueError, match="capacity_factor"):
        MixtureOfExperts(8, 12, 4, 1, capacity_factor=0)
    with pytest.raises(ValueError, match="shared_experts"):
        MixtureOfExperts(8, 12, 4, 1, shared_experts=-1)
    with pytest.raises(ValueError, match="router_logits"):
        load_balancing_loss(torch.randn(2, 3, 4), 1)
    with pytest.raises(ValueError, match="router_logits"):
        load_balancing_loss((torch.randn(3, 4), torch.randn(3, 5)), 1)
    with pytest.raises(ValueError, match="num_experts"):
        load_balancing_loss(torch.randn(3, 4), 1, num_experts=5)
    with pytest.raises(ValueError, match="top_k"):
        load_balancing_loss(torch.randn(3, 4), 5)
    with pytest.raises(ValueError, match="x must be"):
        MixtureOfExperts(8, 12, 4, 1)(torch.randn(3, 7))
    with pytest.raises(ValueError, match="top_k"):
        moe_decoder(_lm(), num_experts=2, top_k=3)


def test_route_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="router_logits"):
        route(torch.randn(4), 1)
    with pytest.raises(ValueError, match="top_k"):
        route(torch.randn(3, 4), 5)
    with pytest.raises(ValueError, match="copy_dense"):
        torch.manual_seed(0)
        moe_decoder(tl.DecoderOnlyLM(23, d_model=32, num_heads=4, num_layers=1, activation="gelu"), 2, 1,
                    copy_dense=True)


@pytest.mark.parametrize("world_size,E,k", [(2, 4, 2), (4, 8, 3)])
def test_expert_parallel_equals_one_process(world_size, E, k):
    from transformer_lib.distributed import launch
    from transformer_lib.moe import expert_parallel_case
    diffs = launch(expert_parallel_case, world_size, E, k, timeout=120)
    assert len(diffs) == world_size and max(diffs) < 1e-5, diffs


def test_decoder_only_lm_with_experts_decodes_exactly_with_its_cache():
    """``DecoderOnlyLM(num_experts=E, top_k=k)``: every block's FFN is a mixture of E SwiGLU
    experts of width d_ff; cached decoding equals one full pass, as for the dense model."""
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(23, d_model=16, num_heads=4, num_layers=2, d_ff=16, positional="rope",
                             num_experts=4, top_k=2, num_kv_heads=2).eval()
    assert all(isinstance(b.ffn, MixtureOfExperts) and b.ffn.top_k == 2 and len(b.ffn.experts) == 4
               for b in model.blocks)
    _assert_cached_decoding_equals_one_pass(model, 12, 5)
    with pytest.raises(ValueError, match="top_k"):
        tl.DecoderOnlyLM(23, d_model=16, num_heads=4, num_layers=1, num_experts=2, top_k=3)
    with pytest.raises(ValueError, match="num_experts"):
        tl.DecoderOnlyLM(23, d_model=16, num_heads=4, num_layers=1, num_experts=2, ffn=False)
