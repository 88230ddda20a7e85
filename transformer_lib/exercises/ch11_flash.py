"""Chapter 11 (exact attention in linear memory) exercises: one online-softmax update, one tile of
attention with its rescaled partial output, the tiles a causal mask skips, and merging two partial
results with their log-sum-exp."""

import torch

from ..attention import scaled_dot_product_attention
from ..tiled import count_tiles, merge_partial_attention, online_softmax_step, tiled_attention
from ._core import NotYet, compare_arrays, compare_value, exercise, to_int, to_numpy

NEG_INF = float("-inf")


def _pair(result, what):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise NotYet(f"{what} should return a pair (two values), got {type(result).__name__}")
    return result


# -- 1. one online-softmax update ---------------------------------------------------------------

def _step_cases():
    g = torch.Generator().manual_seed(11)
    start = (torch.full((3,), NEG_INF), torch.zeros(3))  # nothing seen yet
    cases = [("the first block", *start, torch.randn(3, 4, generator=g)),
             ("a block of one score", torch.tensor([0.5, -1.0]), torch.tensor([2.0, 1.0]), torch.tensor([[3.0], [-4.0]])),
             ("a block whose max is below the running max", torch.tensor([4.0, 2.0]), torch.tensor([1.5, 3.0]),
              torch.randn(2, 5, generator=g)),
             ("a block whose max is above the running max", torch.tensor([-1.0, 0.0]), torch.tensor([2.0, 1.0]),
              2 + torch.randn(2, 5, generator=g).abs()),
             # large scores, and a running max 100 above the block's in row 0: exp(s) overflows, and
             # so does exp(m - block max), the rescale of a form that shifts by the block's own max
             ("large scores (around 1000)", torch.tensor([1100.0, 1000.0]), torch.tensor([1.0, 2.0]),
              1000 + torch.randn(2, 6, generator=g))]
    return cases


@exercise("flash.online_softmax_step",
          hint="m_new = max(m, max of the block); l_new = exp(m - m_new) * l + sum(exp(s - m_new)); "
               "every exponent must be <= 0",
          call="step(running_max, running_sum, scores)")
def _check_step(answer):
    cases = _step_cases()
    for label, m, l, s in cases:
        m_new, l_new = _pair(answer(m.clone(), l.clone(), s.clone()), "step")
        ref_m, ref_l = online_softmax_step(m, l, s)
        compare_arrays(m_new, ref_m, what=f"the new running max for {label}")
        compare_arrays(l_new, ref_l, what=f"the new running sum for {label}", rtol=1e-5)
    return f"right on all {len(cases)} blocks, including scores near 1000."


# -- 2. one tile: rescaling the partial output --------------------------------------------------


@exercise("flash.tile_update",
          hint="rescale both the old output and the old sum by exp(m - m_new), then add exp(s - m_new) @ v "
               "and the row sums; divide by l only once, after the last block",
          call="tile_update(acc, m, l, scores, v)")
def _check_tile(answer):
    g = torch.Generator().manual_seed(12)
    # rows, n, block, d_v, score scale, offset added to every score, where the row maximum is
    settings = [(3, 10, 4, 3, 1.0, 0.0, "last"), (4, 12, 12, 2, 1.0, 0.0, "last"),
                (2, 9, 2, 5, 4.0, 300.0, "first"), (1, 7, 1, 3, 3.0, 300.0, "last")]
    for rows, n, block, d_v, scale, offset, where in settings:
        scores = offset + scale * torch.randn(rows, n, generator=g)
        if offset:  # large scores: exp(s) overflows float32, so an unshifted exp(s) / exp(m_new) gives inf / inf
            scores[:, 0 if where == "first" else -1] += 120.0
            # max first: later blocks lie ~100 below the running max, so a form that shifts by the
            # block's own maximum needs exp(m - block max) = exp(~100): it overflows too
        else:
            scores[:, -1] += 3 * scale  # the max arrives late: the rescale matters
        v = torch.randn(n, d_v, generator=g)
        acc, m, l = torch.zeros(rows, d_v), torch.full((rows,), NEG_INF), torch.zeros(rows)
        for start in range(0, n, block):
            s_blk, v_blk = scores[:, start:start + block], v[start:start + block]
            result = answer(acc.clone(), m.clone(), l.clone(), s_blk.clone(), v_blk.clone())
            if not isinstance(result, (tuple, list)) or len(result) != 3:
                raise NotYet("tile_update should return three values: (acc, m, l)")
            acc, m, l = (torch.as_tensor(to_numpy(x, "a returned value"), dtype=torch.float32) for x in result)
        label = f"{rows} rows, n={n}, blocks of {block}" + (f", scores near {offset:g}, the row maximum {where}"
                                                            if offset else "")
        compare_arrays(m, scores.amax(-1), what=f"the final running max ({label})")
        compare_arrays(l, torch.exp(scores - scores.amax(-1, keepdim=True)).sum(-1),
                       what=f"the final running sum ({label})", rtol=1e-4)
        compare_arrays(acc / l[:, None], torch.softmax(scores, dim=-1) @ v,  # (rows, n) @ (n, d_v)
                       what=f"the output acc / l after the last block ({label})")
    return f"acc / l equals softmax(scores) @ v for all {len(settings)} settings."


# -- 3. the tiles a causal mask skips -----------------------------------------------------------

@exercise("flash.causal_tiles_skipped",
          hint="a tile (query block [qs, qe), key block [ks, ke)) is skipped when ks > qe - 1; the last "
               "blocks may be shorter (ceil, not floor); block_q and block_k may differ",
          call="skipped(n, block_q, block_k)")
def _check_skipped(answer):
    cases = [(1, 1, 1), (8, 4, 4), (10, 4, 4), (100, 16, 32), (100, 32, 16), (50, 7, 3), (64, 128, 64), (4096, 64, 64)]
    for n, bq, bk in cases:
        computed, total = count_tiles(n, n, bq, bk, causal=True)  # the library's count of the grid
        what = f"the count for n={n}, block_q={bq}, block_k={bk}"
        compare_value(to_int(answer(n, bq, bk), what), total - computed, what, rtol=0)
    return f"right for all {len(cases)} (n, block_q, block_k) settings."


# -- 4. merging two partial attentions ----------------------------------------------------------


def _merge_cases() -> list[tuple]:
    """(split, offset, (q, k, v), the two halves' (out, lse) from the library's tiled attention)."""
    g = torch.Generator().manual_seed(13)
    cases = []
    for split, offset in ((5, 0.0), (1, 0.0), (11, 400.0)):
        q, k, v = torch.randn(2, 12, 4, generator=g), torch.randn(2, 12, 4, generator=g), torch.randn(2, 12, 3, generator=g)
        q[:, :, 0] = 2.0
        k[:, :, 0] += offset  # every score grows by 2 * offset / sqrt(4) = offset: exp(lse) overflows float32
        parts = []
        for keys in (slice(0, split), slice(split, 12)):
            parts += list(tiled_attention(q, k[:, keys], v[:, keys], block_q=4, block_k=4, return_lse=True))
        cases.append((split, offset, (q, k, v), parts))
    return cases


@exercise("flash.merge",
          hint="lse = log(exp(lse_a) + exp(lse_b)) (torch.logaddexp); out = exp(lse_a - lse) * out_a + "
               "exp(lse_b - lse) * out_b",
          call="merge(out_a, lse_a, out_b, lse_b)")
def _check_merge(answer):
    for split, offset, (q, k, v), parts in _merge_cases():
        out, lse = _pair(answer(*(p.clone() for p in parts)), "merge")
        _, expected_lse = merge_partial_attention(*parts)
        label = f"keys split at {split}" + (", large scores" if offset else "")
        # float32 rounds a score near 400 by ~3e-5, and the softmax passes that on to the output
        atol = 1e-4 if offset else 1e-5
        compare_arrays(out, scaled_dot_product_attention(q, k, v)[0], what=f"the merged output ({label})",
                       atol=atol)
        compare_arrays(lse, expected_lse, what=f"the merged lse ({label})", rtol=1e-5)
    return "the merged halves equal attention over all keys, also for scores near 400."
