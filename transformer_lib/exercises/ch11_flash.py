"""Chapter 11 (exact attention in linear memory) exercises: one online-softmax update, one tile of
attention with its rescaled partial output, the tiles a causal mask skips, and merging two partial
results with their log-sum-exp."""
import math

import numpy as np
import torch

from ..attention import scaled_dot_product_attention
from ..tiled import count_tiles, merge_partial_attention, online_softmax_step, tiled_attention
from ._core import NotYet, compare_arrays, exercise, to_int, to_numpy

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
             ("large scores (around 1000)", torch.tensor([990.0, 1000.0]), torch.tensor([1.0, 2.0]),
              1000 + torch.randn(2, 6, generator=g))]
    return cases


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


@exercise("flash.online_softmax_step",
          hint="m_new = max(m, max of the block); l_new = exp(m - m_new) * l + sum(exp(s - m_new)); "
               "every exponent must be <= 0",
          solution=lambda: online_softmax_step,
          alternative_answers=lambda: [_step_by_logsumexp, _step_numpy],
          wrong_answers=lambda: [_step_no_rescale, _step_rescale_upside_down, _step_block_max_only,
                                 _step_unshifted, _step_old_max_for_block])
def _check_step(answer):
    if not callable(answer):
        raise NotYet(f"expected a function step(running_max, running_sum, scores), got {type(answer).__name__}")
    cases = _step_cases()
    for label, m, l, s in cases:
        m_new, l_new = _pair(answer(m.clone(), l.clone(), s.clone()), "step")
        ref_m, ref_l = online_softmax_step(m, l, s)
        compare_arrays(m_new, ref_m, what=f"the new running max for {label}")
        compare_arrays(l_new, ref_l, what=f"the new running sum for {label}", rtol=1e-5)
    return f"right on all {len(cases)} blocks, including scores near 1000."


# -- 2. one tile: rescaling the partial output --------------------------------------------------

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


@exercise("flash.tile_update",
          hint="rescale both the old output and the old sum by exp(m - m_new), then add exp(s - m_new) @ v "
               "and the row sums; divide by l only once, after the last block",
          solution=lambda: _reference_tile,
          alternative_answers=lambda: [_tile_einsum, _tile_loops],
          wrong_answers=lambda: [_tile_no_rescale, _tile_rescale_upside_down, _tile_normalizes_early,
                                 _tile_old_max, _tile_sum_not_rescaled])
def _check_tile(answer):
    if not callable(answer):
        raise NotYet(f"expected a function tile_update(acc, m, l, scores, v), got {type(answer).__name__}")
    g = torch.Generator().manual_seed(12)
    settings = [(3, 10, 4, 3, 1.0), (2, 9, 2, 5, 4.0), (4, 12, 12, 2, 1.0), (1, 7, 1, 3, 3.0)]  # rows, n, block, d_v, score scale
    for rows, n, block, d_v, scale in settings:
        scores = scale * torch.randn(rows, n, generator=g)
        scores[:, -1] += 3 * scale  # the max arrives late: the rescale matters
        v = torch.randn(n, d_v, generator=g)
        acc, m, l = torch.zeros(rows, d_v), torch.full((rows,), NEG_INF), torch.zeros(rows)
        for start in range(0, n, block):
            s_blk, v_blk = scores[:, start:start + block], v[start:start + block]
            result = answer(acc.clone(), m.clone(), l.clone(), s_blk.clone(), v_blk.clone())
            if not isinstance(result, (tuple, list)) or len(result) != 3:
                raise NotYet("tile_update should return three values: (acc, m, l)")
            acc, m, l = (torch.as_tensor(to_numpy(x, "a returned value"), dtype=torch.float32) for x in result)
        label = f"{rows} rows, n={n}, blocks of {block}"
        compare_arrays(m, scores.amax(-1), what=f"the final running max ({label})")
        compare_arrays(l, torch.exp(scores - scores.amax(-1, keepdim=True)).sum(-1),
                       what=f"the final running sum ({label})", rtol=1e-4)
        compare_arrays(acc / l[:, None], torch.softmax(scores, dim=-1) @ v,  # (rows, n) @ (n, d_v)
                       what=f"the output acc / l after the last block ({label})")
    return f"acc / l equals softmax(scores) @ v for all {len(settings)} settings."


# -- 3. the tiles a causal mask skips -----------------------------------------------------------

def _skipped(n, block_q, block_k):
    computed, total = count_tiles(n, n, block_q, block_k, causal=True)
    return total - computed


def _skipped_brute_force(n, block_q, block_k):
    skipped = 0
    for qs in range(0, n, block_q):
        for ks in range(0, n, block_k):
            last_query = min(qs + block_q, n) - 1
            skipped += ks > last_query  # every key of the tile lies after every query
    return skipped


@exercise("flash.causal_tiles_skipped",
          hint="a tile (query block [qs, qe), key block [ks, ke)) is skipped when ks > qe - 1; the last "
               "blocks may be shorter (ceil, not floor); block_q and block_k may differ",
          solution=lambda: _skipped,
          alternative_answers=lambda: [_skipped_brute_force,
                                       lambda n, bq, bk: sum(max(0, math.ceil(n / bk) - (min(q + bq, n) - 1) // bk - 1)
                                                             for q in range(0, n, bq))],
          wrong_answers=lambda: [lambda n, bq, bk: (lambda t: t * (t - 1) // 2)(math.ceil(n / bq)),  # square grid
                                 lambda n, bq, bk: math.ceil(n / bq) * math.ceil(n / bk) // 2,  # "half"
                                 lambda n, bq, bk: count_tiles(n, n, bq, bk, causal=True)[0],  # computed, not skipped
                                 lambda n, bq, bk: (n // bq) * (n // bk) - count_tiles(n, n, bq, bk, True)[0],  # floor
                                 lambda n, bq, bk: sum(ks + bk - 1 > qs for qs in range(0, n, bq)  # partly hidden too
                                                       for ks in range(0, n, bk))])
def _check_skipped(answer):
    if not callable(answer):
        raise NotYet(f"expected a function skipped(n, block_q, block_k), got {type(answer).__name__}")
    cases = [(1, 1, 1), (8, 4, 4), (10, 4, 4), (100, 16, 32), (100, 32, 16), (50, 7, 3), (64, 128, 64), (4096, 64, 64)]
    for n, bq, bk in cases:
        got = to_int(answer(n, bq, bk), f"the count for n={n}, block_q={bq}, block_k={bk}")
        expected = _skipped(n, bq, bk)
        if got != expected:
            raise NotYet(f"the count for n={n}, block_q={bq}, block_k={bk} is too {'high' if got > expected else 'low'}")
    return f"right for all {len(cases)} (n, block_q, block_k) settings."


# -- 4. merging two partial attentions ----------------------------------------------------------

def _merge_softmax_weights(out_a, lse_a, out_b, lse_b):
    lse = torch.stack([lse_a, lse_b])  # (2, ...)
    w = torch.softmax(lse, dim=0)  # (2, ...): the two parts' shares of the total weight
    return w[0, ..., None] * out_a + w[1, ..., None] * out_b, torch.logsumexp(lse, dim=0)


@exercise("flash.merge",
          hint="lse = log(exp(lse_a) + exp(lse_b)) (torch.logaddexp); out = exp(lse_a - lse) * out_a + "
               "exp(lse_b - lse) * out_b",
          solution=lambda: merge_partial_attention,
          alternative_answers=lambda: [_merge_softmax_weights],
          wrong_answers=lambda: [
              lambda oa, la, ob, lb: ((oa + ob) / 2, torch.logaddexp(la, lb)),  # plain average
              lambda oa, la, ob, lb: merge_partial_attention(oa, la, ob, lb)[:1] + (torch.maximum(la, lb),),
              lambda oa, la, ob, lb: (torch.exp(la)[..., None] * oa + torch.exp(lb)[..., None] * ob,
                                      torch.logaddexp(la, lb)),  # unnormalized weights
              lambda oa, la, ob, lb: ((torch.exp(la)[..., None] * oa + torch.exp(lb)[..., None] * ob)
                                      / (torch.exp(la) + torch.exp(lb))[..., None], torch.logaddexp(la, lb)),  # overflows
              lambda oa, la, ob, lb: (merge_partial_attention(oa, la, ob, lb)[0], la + lb)])
def _check_merge(answer):
    if not callable(answer):
        raise NotYet(f"expected a function merge(out_a, lse_a, out_b, lse_b), got {type(answer).__name__}")
    g = torch.Generator().manual_seed(13)
    for split, offset in ((5, 0.0), (1, 0.0), (11, 400.0)):
        q, k, v = torch.randn(2, 12, 4, generator=g), torch.randn(2, 12, 4, generator=g), torch.randn(2, 12, 3, generator=g)
        q[:, :, 0] = 2.0
        k[:, :, 0] += offset  # every score grows by 2 * offset / sqrt(4) = offset: exp(lse) overflows float32
        parts = []
        for keys in (slice(0, split), slice(split, 12)):
            parts += list(tiled_attention(q, k[:, keys], v[:, keys], block_q=4, block_k=4, return_lse=True))
        out, lse = _pair(answer(*(p.clone() for p in parts)), "merge")
        _, expected_lse = merge_partial_attention(*parts)
        label = f"keys split at {split}" + (", large scores" if offset else "")
        compare_arrays(out, scaled_dot_product_attention(q, k, v)[0], what=f"the merged output ({label})")
        compare_arrays(lse, expected_lse, what=f"the merged lse ({label})", rtol=1e-5)
    return "the merged halves equal attention over all keys, also for scores near 400."
