"""Answers for the checkers of transformer_lib/exercises/ch11_flash.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import math

import numpy as np
import torch

from transformer_lib.tiled import count_tiles, merge_partial_attention, online_softmax_step


def _skipped(n, block_q, block_k):
    computed, total = count_tiles(n, n, block_q, block_k, causal=True)
    return total - computed


def _step_no_rescale(m, l, s):
    m_new = torch.maximum(m, s.amax(-1))
    return m_new, l + torch.exp(s - m_new[:, None]).sum(-1)  # forgets that l was summed against the old max


def _step_rescale_upside_down(m, l, s):
    m_new = torch.maximum(m, s.amax(-1))
    return m_new, torch.exp(m_new - m) * l + torch.exp(s - m_new[:, None]).sum(-1)


def _step_block_max_only(m, l, s):
    m_new = s.amax(-1)  # ignores the running max
    return m_new, torch.exp(m - m_new) * l + torch.exp(s - m_new[:, None]).sum(-1)


def _step_unshifted(m, l, s):
    m_new = torch.maximum(m, s.amax(-1))
    return m_new, (torch.exp(m) * l + torch.exp(s).sum(-1)) / torch.exp(m_new)  # right in exact arithmetic


def _step_old_max_for_block(m, l, s):
    m_new = torch.maximum(m, s.amax(-1))
    return m_new, torch.exp(m - m_new) * l + torch.exp(s - m[:, None]).sum(-1)


def _step_block_max_shift(m, l, s):  # shifts by the block's own max: exp(m - block max) can be exp(100)
    m_blk = s.amax(-1)
    m_new = torch.maximum(m, m_blk)
    return m_new, (torch.exp(m - m_blk) * l + torch.exp(s - m_blk[:, None]).sum(-1)) * torch.exp(m_blk - m_new)


def _step_by_logsumexp(m, l, s):
    m_new = torch.maximum(m, s.amax(-1))
    total = torch.logaddexp(m + torch.log(l), torch.logsumexp(s, dim=-1))  # log of the running sum against 0
    return m_new, torch.exp(total - m_new)


def _step_numpy(m, l, s):
    m, l, s = np.asarray(m, dtype=np.float64), np.asarray(l, dtype=np.float64), np.asarray(s, dtype=np.float64)
    m_new = np.maximum(m, s.max(axis=-1))
    with np.errstate(invalid="ignore"):
        rescale = np.where(np.isneginf(m), 0.0, np.exp(m - m_new))
    return m_new, rescale * l + np.exp(s - m_new[:, None]).sum(axis=-1)


def _reference_tile(acc, m, l, s, v):
    m_new, l_new = online_softmax_step(m, l, s)
    rescale = torch.exp(m - m_new)[:, None]  # (R, 1)
    return rescale * acc + torch.exp(s - m_new[:, None]) @ v, m_new, l_new  # (R, b) @ (b, d_v)


def _tile_no_rescale(acc, m, l, s, v):
    m_new, l_new = online_softmax_step(m, l, s)
    return acc + torch.exp(s - m_new[:, None]) @ v, m_new, l_new


def _tile_rescale_upside_down(acc, m, l, s, v):
    m_new, l_new = online_softmax_step(m, l, s)
    return torch.exp(m_new - m)[:, None].nan_to_num(0.0) * acc + torch.exp(s - m_new[:, None]) @ v, m_new, l_new


def _tile_normalizes_early(acc, m, l, s, v):
    new_acc, m_new, l_new = _reference_tile(acc, m, l, s, v)
    return new_acc / l_new[:, None], m_new, l_new  # divides at every step: the next rescale undoes nothing


def _tile_old_max(acc, m, l, s, v):
    m_new, l_new = online_softmax_step(m, l, s)
    shift = torch.where(torch.isneginf(m), m_new, m)
    return torch.exp(m - m_new)[:, None] * acc + torch.exp(s - shift[:, None]) @ v, m_new, l_new


def _tile_sum_not_rescaled(acc, m, l, s, v):
    new_acc, m_new, _ = _reference_tile(acc, m, l, s, v)
    return new_acc, m_new, l + torch.exp(s - m_new[:, None]).sum(-1)


def _tile_unshifted(acc, m, l, s, v):  # exp(s) / exp(m_new): equal in exact arithmetic, inf / inf in float32
    m_new = torch.maximum(m, s.amax(-1))
    p = torch.exp(s) / torch.exp(m_new)[:, None]  # (R, b)
    alpha = torch.exp(m) / torch.exp(m_new)  # (R,)
    return alpha[:, None] * acc + p @ v, m_new, alpha * l + p.sum(-1)


def _tile_block_max_shift(acc, m, l, s, v):
    """Shifts by the block's own maximum and rescales back at the end: equal in exact arithmetic,
    but the old output is multiplied by exp(m - block max), which overflows when the running max
    lies far above this block's (the row maximum came in an earlier block)."""
    m_blk = s.amax(-1)  # (R,)
    m_new = torch.maximum(m, m_blk)
    p = torch.exp(s - m_blk[:, None])  # (R, b)
    alpha = torch.exp(m - m_blk)  # > 1 when the old max is larger: the exponent is not <= 0
    back = torch.exp(m_blk - m_new)
    return (alpha[:, None] * acc + p @ v) * back[:, None], m_new, (alpha * l + p.sum(-1)) * back


def _tile_einsum(acc, m, l, s, v):
    m_new = torch.maximum(m, s.max(dim=-1).values)
    p = torch.exp(s - m_new.unsqueeze(-1))
    alpha = torch.exp(m - m_new)
    return alpha.unsqueeze(-1) * acc + torch.einsum("rb,bd->rd", p, v), m_new, alpha * l + p.sum(-1)


def _tile_loops(acc, m, l, s, v):
    rows = []
    for r in range(s.shape[0]):
        m_new = max(float(m[r]), float(s[r].max()))
        alpha = math.exp(float(m[r]) - m_new)
        p = [math.exp(float(x) - m_new) for x in s[r]]
        out = [alpha * float(acc[r, c]) + sum(p[j] * float(v[j, c]) for j in range(len(p))) for c in range(v.shape[1])]
        rows.append((out, m_new, alpha * float(l[r]) + sum(p)))
    return ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])


def _skipped_brute_force(n, block_q, block_k):
    skipped = 0
    for qs in range(0, n, block_q):
        for ks in range(0, n, block_k):
            last_query = min(qs + block_q, n) - 1
            skipped += ks > last_query  # every key of the tile lies after every query
    return skipped


def _merge_softmax_weights(out_a, lse_a, out_b, lse_b):
    lse = torch.stack([lse_a, lse_b])  # (2, ...)
    w = torch.softmax(lse, dim=0)  # (2, ...): the two parts' shares of the total weight
    return w[0, ..., None] * out_a + w[1, ..., None] * out_b, torch.logsumexp(lse, dim=0)


ANSWERS = {
    'flash.online_softmax_step': {
        'solution': lambda: online_softmax_step,
        'alternatives': lambda: [_step_by_logsumexp, _step_numpy],
        'wrong': lambda: [_step_no_rescale, _step_rescale_upside_down, _step_block_max_only,
                          _step_unshifted, _step_old_max_for_block,
                          _step_block_max_shift],
    },
    'flash.tile_update': {
        'solution': lambda: _reference_tile,
        'alternatives': lambda: [_tile_einsum, _tile_loops],
        'wrong': lambda: [_tile_no_rescale, _tile_rescale_upside_down, _tile_normalizes_early,
                          _tile_old_max, _tile_sum_not_rescaled,
                          _tile_unshifted, _tile_block_max_shift],
    },
    'flash.causal_tiles_skipped': {
        'solution': lambda: _skipped,
        'alternatives': lambda: [_skipped_brute_force,
                                 lambda n, bq, bk: sum(max(0, math.ceil(n / bk) - (min(q + bq, n) - 1) // bk - 1)
                                                       for q in range(0, n, bq))],
        'wrong': lambda: [lambda n, bq, bk: (lambda t: t * (t - 1) // 2)(math.ceil(n / bq)),  # square grid
                          lambda n, bq, bk: math.ceil(n / bq) * math.ceil(n / bk) // 2,  # "half"
                          lambda n, bq, bk: count_tiles(n, n, bq, bk, causal=True)[0],  # computed, not skipped
                          lambda n, bq, bk: (n // bq) * (n // bk) - count_tiles(n, n, bq, bk, True)[0],  # floor
                          lambda n, bq, bk: sum(ks + bk - 1 > qs for qs in range(0, n, bq)  # partly hidden too
                                                for ks in range(0, n, bk))],
    },
    'flash.merge': {
        'solution': lambda: merge_partial_attention,
        'alternatives': lambda: [_merge_softmax_weights],
        'wrong': lambda: [
            lambda oa, la, ob, lb: ((oa + ob) / 2, torch.logaddexp(la, lb)),  # plain average
            lambda oa, la, ob, lb: merge_partial_attention(oa, la, ob, lb)[:1] + (torch.maximum(la, lb),),
            lambda oa, la, ob, lb: (torch.exp(la)[..., None] * oa + torch.exp(lb)[..., None] * ob,
                                    torch.logaddexp(la, lb)),  # unnormalized weights
            lambda oa, la, ob, lb: ((torch.exp(la)[..., None] * oa + torch.exp(lb)[..., None] * ob)
                                    / (torch.exp(la) + torch.exp(lb))[..., None], torch.logaddexp(la, lb)),  # overflows
            lambda oa, la, ob, lb: (merge_partial_attention(oa, la, ob, lb)[0], la + lb)],
    },
}
