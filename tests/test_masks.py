"""Masks against their definitions written as plain loops; conversions; bad input."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import transformer_lib as tl
from transformer_lib import masks as M
from transformer_lib.masks import prefix_lm_mask


def brute(L_q, L_k, rule):
    return torch.tensor([[bool(rule(i, j)) for j in range(L_k)] for i in range(L_q)])


@settings(max_examples=30, deadline=None)
@given(L=st.integers(1, 12), w=st.integers(1, 15), d=st.integers(1, 6))
def test_patterns_match_definitions(L, w, d):
    assert torch.equal(M.causal_mask(L), brute(L, L, lambda i, j: j <= i))
    assert torch.equal(M.sliding_window_mask(L, w), brute(L, L, lambda i, j: abs(i - j) <= w // 2))
    assert torch.equal(M.sliding_window_mask(L, w, causal=True),
                       brute(L, L, lambda i, j: i - w // 2 <= j <= i))
    assert torch.equal(M.dilated_mask(L, d), brute(L, L, lambda i, j: (j - i) % d == 0))
    assert torch.equal(M.dilated_mask(L, d, causal=True), brute(L, L, lambda i, j: (j - i) % d == 0 and j <= i))
    # the sparse-attention patterns of chapter 8
    assert torch.equal(M.dilated_window_mask(L, w, d),
                       brute(L, L, lambda i, j: (j - i) % d == 0 and abs(j - i) <= (w // 2) * d))
    g = [0, L - 1]
    assert torch.equal(M.longformer_mask(L, w, g, causal=True),
                       brute(L, L, lambda i, j: (abs(i - j) <= w // 2 or i in g or j in g) and j <= i))
    layout = M.bigbird_block_layout(-(-L // d), window_blocks=3, global_blocks=1, random_blocks=0)
    assert torch.equal(M.layout_to_mask(layout, d, L),
                       brute(L, L, lambda i, j: abs(i // d - j // d) <= 1 or i < d or j < d))


def test_causal_rectangular_aligns_to_the_end():
    # 2 new queries after 3 cached keys: query 0 is position 3, query 1 is position 4
    assert torch.equal(M.causal_mask(2, 5), brute(2, 5, lambda i, j: j <= i + 3))
    # the same convention as torch's SDPA with is_causal on a square problem
    q = k = v = torch.randn(1, 1, 6, 4)
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=M.causal_mask(6))
    assert torch.allclose(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6)


def test_padding_mask():
    m = M.padding_mask([3, 1, 4])
    assert m.shape == (3, 1, 1, 4)
    assert torch.equal(m[:, 0, 0], torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool))
    assert M.padding_mask([2], max_len=5).shape == (1, 1, 1, 5)


def test_global_tokens_and_combine():
    g = M.global_tokens_mask(5, [0])
    assert g[0].all() and g[:, 0].all() and not g[1:, 1:].any()
    window_or_global = M.sliding_window_mask(5, 3) | g
    assert window_or_global[4, 0] and window_or_global[0, 4] and not window_or_global[4, 1]
    both = M.combine_masks(M.causal_mask(4), None, M.padding_mask([2, 4]))
    assert both.shape == (2, 1, 4, 4)
    assert not both[0, 0, 3, 2] and both[1, 0, 3, 2] and not both[1, 0, 0, 1]
    assert M.combine_masks(None) is None


def test_torch_mha_conversions_round_trip():
    m = M.causal_mask(5)
    assert torch.equal(M.to_torch_mha_mask(m), torch.triu(torch.ones(5, 5, dtype=torch.bool), 1))
    assert torch.equal(M.from_torch_mha_mask(M.to_torch_mha_mask(m)), m)
    additive = torch.nn.Transformer.generate_square_subsequent_mask(5)  # 0 / -inf floats
    assert torch.equal(M.from_torch_mha_mask(additive), m)
    kpm = torch.tensor([[False, False, True]])  # torch: True = pad
    assert torch.equal(M.key_padding_to_mask(kpm), M.padding_mask([2], max_len=3))


@pytest.mark.parametrize("call, message", [
    (lambda: M.sliding_window_mask(8, 0), "window"),
    (lambda: M.sliding_window_mask(8, -3), "window"),
    (lambda: M.dilated_mask(8, 0), "dilation"),
    (lambda: M.causal_mask(0), "positive"),
    (lambda: M.padding_mask([[1, 2]]), "1-D"),
    (lambda: M.padding_mask([5], max_len=3), "max_len"),
    (lambda: M.global_tokens_mask(4, [4]), "global_positions"),
    (lambda: M.global_tokens_mask(4, [1.5]), "global_positions"),
    (lambda: M.causal_mask(4, 2), "L_k"),
    (lambda: M.padding_mask([1.5, 2]), "integers"),
    (lambda: M.combine_masks(torch.ones(3, 3, dtype=torch.bool), torch.ones(4, 1, 2, dtype=torch.bool)), "broadcast"),
    (lambda: M.from_torch_mha_mask(torch.tensor([0.0, float("nan")])), "NaN"),
    (lambda: M.combine_masks(torch.zeros(3, 3)), "boolean"),
    (lambda: M.to_torch_mha_mask(torch.zeros(3, 3)), "boolean"),
    (lambda: M.from_torch_mha_mask(torch.zeros(3, 3, dtype=torch.long)), "boolean or float"),
])
def test_bad_parameters_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# -- prefix_lm_mask: a prefix seen in full, the rest causal (chapter 13) ---------------------------

def _prefix_lm_loop(n_prefix, L):
    """Dense reference written as the definition, entry by entry."""
    m = torch.zeros(L, L, dtype=torch.bool)
    for i in range(L):
        for j in range(L):
            m[i, j] = j < n_prefix or j <= i
    return m


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 12), data=st.data())
def test_prefix_lm_mask_matches_its_definition(L, data):
    n_prefix = data.draw(st.integers(0, L))
    mask = prefix_lm_mask(n_prefix, L)
    assert mask.dtype == torch.bool and mask.shape == (L, L)
    assert torch.equal(mask, _prefix_lm_loop(n_prefix, L))


def test_prefix_lm_mask_ends_are_causal_and_full():
    assert torch.equal(prefix_lm_mask(0, 6), tl.causal_mask(6))
    assert prefix_lm_mask(6, 6).all()
    assert prefix_lm_mask(1, 6).equal(tl.causal_mask(6))  # the first key is visible to all anyway


@pytest.mark.parametrize("n_prefix, L", [(-1, 4), (5, 4), (1.5, 4), (True, 4), (1, 0)])
def test_prefix_lm_mask_rejects_bad_sizes(n_prefix, L):
    with pytest.raises(ValueError):
        prefix_lm_mask(n_prefix, L)
