"""The sliding window's tiles by hand: the CPU fast path of the ``"blocked"`` kernel.

:mod:`.blocked` hands each chunk of tiles to fused SDPA. On a CPU, with no gradient wanted, this
module does a tile's steps itself, because three of SDPA's costs can go:

1. **The max.** A safe softmax subtracts each row's maximum before exponentiating, which costs
   a pass over the scores (find the max) and another (subtract it). The maximum is there only
   to keep ``exp`` inside float32's range; any constant gives the same softmax. So the scores
   are exponentiated as they are, and the kernel checks afterwards that nothing left the range:
   every row sum must lie in ``[2^-60, 2^100 / max|v|]`` (below: the largest weight could have
   lost precision to underflow; above: an exponential or a product with v could have
   overflowed). A row fails only when its largest score is above about 69 (e^69 is 2^100) or
   below about -41 (2^-60); typical scores are within +-20. Its block of b queries is recomputed
   with the max subtracted. Where the check passes the result equals the safe softmax up to
   float32 rounding: no argument was shifted, so none lost digits to the shift either.
2. **Base e.** In torch's CPU kernels ``exp2`` is faster than ``exp``, by how much depends on the
   CPU's vector instructions (1.7 to 1.8 times on the AVX2 CPU whose run chapter 8 prints, 4.4 to
   4.5 times on an AVX-512 one; ``benchmarks/sparse.py`` times both), and ``exp(s) = 2^(s log2 e)``:
   the factor ``log2 e`` rides along with the ``1/sqrt(d_k)`` scale inside the score product,
   where it costs nothing.
3. **The normalization pass.** Instead of dividing all b x W weights of a tile by their row
   sum, the kernel multiplies the *unnormalized* weights by v and divides the b x d_v result:
   W / d_v times fewer divisions (544 / 64 here).

Per chunk of interior tiles: one batched product ``Q K^T`` into a reused buffer, ``-inf`` on
the two b x b corners the band cuts off (``masked_fill``: adding ``-inf`` would let a NaN
score outside the band spoil its row), ``exp2`` in place, the row sums, one batched product
with v written straight into the output, one division. Nothing is allocated inside the loop, so
nothing is page-faulted in again on every step. The queries at the two ends of the sequence,
whose tiles would stick out of it, take the same steps once per end, on the keys that exist
and with the band as a mask over the whole block.
"""
from __future__ import annotations

import math
from typing import Iterator, NamedTuple

import torch

__all__: list[str] = []  # reached through sliding_window_attention(kernel="blocked") on a CPU

_LOG2E = math.log2(math.e)
_CHUNK_QUERIES = 512  # queries per step and thread: 16 tiles of 32 x 544 scores, 1.1 MB (the fastest chunk, CHANGELOG.md)
_LOW, _HIGH = 2.0 ** -60, 2.0 ** 100  # row sums outside [_LOW, _HIGH / max|v|]: redo with the max


def needs_autograd(*tensors: torch.Tensor) -> bool:
    """Whether a call on these tensors must be differentiable (the hand-written paths are not)."""
    return torch.is_grad_enabled() and any(x.requires_grad for x in tensors)


def score_scale(q: torch.Tensor, scale: float | None) -> float:
    """The score multiplier: ``scale``, or SDPA's default ``1 / sqrt(d_k)``."""
    return q.shape[-1] ** -0.5 if scale is None else scale


def hand_tiles_apply(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether :func:`hand_window` serves this call: a CPU, float32/64, no gradient wanted."""
    return q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64) and not needs_autograd(q, k, v)


def tile_keep(rows: int, cols: int, lo: int, hi: int, device=None) -> torch.Tensor:
    """(rows, cols) booleans: True where ``r + lo <= c <= r + hi`` (tile row r may see column c)."""
    r = torch.arange(rows, device=device).unsqueeze(1)  # (rows, 1)
    c = torch.arange(cols, device=device).unsqueeze(0)  # (1, cols)
    return (c >= r + lo) & (c <= r + hi)  # (rows, cols)


def tile_bias(rows: int, cols: int, lo: int, hi: int, like: torch.Tensor) -> torch.Tensor:
    """:func:`tile_keep` as an additive mask: 0 where kept, -inf elsewhere (for SDPA)."""
    keep = tile_keep(rows, cols, lo, hi, like.device)
    return torch.zeros(keep.shape, dtype=like.dtype, device=like.device).masked_fill(~keep, float("-inf"))


def windows(x: torch.Tensor, start: int, count: int, step: int, width: int) -> torch.Tensor:
    """Overlapping windows along the rows of a (..., L, d) tensor: window t holds rows
    ``[start + t step, start + t step + width)``. Returns a (..., count, width, d) *view*, no
    copy: consecutive windows share memory. The caller keeps every window inside the tensor."""
    *lead, sl, sd = x.stride()
    return x.as_strided((*x.shape[:-2], count, width, x.shape[-1]), (*lead, step * sl, sl, sd),
                        x.storage_offset() + start * sl)


class _Step(NamedTuple):
    """One batched step of one head: ``m`` tiles of ``b`` query rows from row ``r0`` on."""
    r0: int
    m: int
    b: int
    qt: torch.Tensor  # (m, b, d_k) queries
    kt: torch.Tensor  # (m, W, d_k) keys, overlapping views
    vt: torch.Tensor  # (m, W, d_v) values
    o: torch.Tensor  # (m, b, d_v) the output rows, written in place
    cut: torch.Tensor  # (b, W) booleans, True outside the band
    corners: bool  # the band cuts only the two b x b corners off (else mask the whole tile)


def _head_steps(Q, K, V, O, half: int, right: int, b: int, inner: range, chunk: int, cuts) -> Iterator[_Step]:
    """The steps of one head (Q, K, V, O: (L, d) views): chunks of interior tiles, then the two ends."""
    L, W = Q.shape[0], b + half + right
    for t0 in range(inner.start, inner.stop, chunk):
        m, r0 = min(chunk, inner.stop - t0), t0 * b
        yield _Step(r0, m, b, windows(Q, r0, m, b, b), windows(K, r0 - half, m, b, W), windows(V, r0 - half, m, b, W),
                    windows(O, r0, m, b, b), cuts["tile"], W >= 2 * b)
    for s, e in ((0, inner.start * b), (inner.stop * b, L)):
        if e > s:  # queries [s, e) against the keys that exist, [s - half, e + right) clipped
            ks, ke = max(0, s - half), min(L, e + right)
            yield _Step(s, 1, e - s, Q[None, s:e], K[None, ks:ke], V[None, ks:ke], O[None, s:e], cuts[s, e], False)


def _corners(s: torch.Tensor, b: int) -> torch.Tensor:
    """The first and the last b columns of (m, b, W) tiles, as one (m, b, 2, b) view (W >= 2 b)."""
    m, rows, W = s.shape
    sm, sr, sc = s.stride()
    return s.as_strided((m, rows, 2, b), (sm, sr, (W - b) * sc, sc), s.storage_offset())


def _end_cut(s: int, e: int, L: int, half: int, right: int) -> torch.Tensor:
    """Queries [s, e) against keys [s - half, e + right) clipped to [0, L): True outside the band."""
    ks = max(0, s - half)
    return ~tile_keep(e - s, min(L, e + right) - ks, s - half - ks, s + right - ks)  # key ks + c, query s + r


def hand_window(q, k, v, half: int, right: int, b: int, inner: range, scale: float | None) -> torch.Tensor:
    """The whole window by hand (``inner``: the blocks whose tiles lie inside the sequence, not empty).

    Block t holds queries ``[t b, (t + 1) b)`` and its tile the keys ``[t b - half, t b + b + right)``.
    In tile coordinates query row r sees columns ``r .. r + half + right``: one (b, W) pattern for
    every interior tile, cut only on its two b x b corners.
    """
    B, H, L, _ = q.shape
    scale = score_scale(q, scale)
    W, c = b + half + right, scale * _LOG2E  # scores in base 2: exp(s) = exp2(s log2 e)
    out = q.new_empty(B, H, L, v.shape[-1])
    cuts = {"tile": ~tile_keep(b, W, 0, half + right)}  # (b, W), and one per end of the sequence
    for s, e in ((0, inner.start * b), (inner.stop * b, L)):
        cuts[s, e] = _end_cut(s, e, L, half, right)
    corner_cut = _corners(cuts["tile"][None], b).contiguous()  # (1, b, 2, b): the two cut corners
    chunk = max(1, _CHUNK_QUERIES * torch.get_num_threads() // b)  # a chunk per thread
    buffers = {}  # reused score buffers, one per step shape
    sums = q.new_empty(B, H, L)  # every row's sum, checked once at the end
    for bi in range(B):
        for h in range(H):
            for st in _head_steps(q[bi, h], k[bi, h], v[bi, h], out[bi, h], half, right, b, inner, chunk, cuts):
                shape = (st.m, st.b, st.kt.shape[1])
                s = buffers[shape] if shape in buffers else buffers.setdefault(shape, q.new_empty(shape))
                torch.baddbmm(s, st.qt, st.kt.transpose(1, 2), beta=0, alpha=c, out=s)  # (m, b, W)
                if st.corners:
                    _corners(s, b).masked_fill_(corner_cut, float("-inf"))  # both corners; the middle is all band
                else:
                    s.masked_fill_(st.cut, float("-inf"))
                s.exp2_()  # unnormalized weights, no max subtracted (checked below)
                total = torch.sum(s, dim=-1, out=sums[bi, h, st.r0:st.r0 + st.m * st.b].view(st.m, st.b))
                torch.bmm(s, st.vt, out=st.o)  # (m, b, W) @ (m, W, d_v)
                st.o.div_(total.unsqueeze(-1))
    bad = out_of_range_rows(sums, v)
    if bad is not None:  # rare: reshaping may copy q, k, v here
        flat = [x.reshape(B * H, L, x.shape[-1]) for x in (q, k, v)]
        redo_rows(*flat, out.view(B * H, L, -1), bad.view(B * H, L), half, right, b, scale)
    return out


def _safe_step(st: _Step, scale: float) -> None:
    """A step again with the textbook safe softmax (max subtracted): the fallback."""
    scores = torch.bmm(st.qt, st.kt.transpose(1, 2)).mul_(scale).masked_fill_(st.cut, float("-inf"))  # (m, b, W)
    weights = torch.softmax(scores, dim=-1)
    torch.bmm(weights, st.vt, out=st.o)  # (m, b, W) @ (m, W, d_v)


def out_of_range_rows(sums: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
    """Rows whose sum of unnormalized weights left ``[2^-60, 2^100 / max|v|]`` (NaN included),
    as a boolean tensor shaped like ``sums``; None when every row is in range (the usual case)."""
    vmin, vmax = torch.aminmax(v)
    high = _HIGH / max(1.0, vmax.item(), -vmin.item())
    bad = ~((sums >= _LOW) & (sums <= high))  # NaN fails both comparisons
    return bad if bool(bad.any()) else None


def redo_rows(q, k, v, out, bad, half: int, right: int, b: int, scale: float) -> None:
    """Recompute with the safe softmax every block of ``b`` queries that holds a row marked in ``bad``.

    q, k, v, out: (BH, L, d) views; bad: (BH, L) booleans. Each block gets the keys it can see,
    clipped to the sequence, as in the fused kernel.
    """
    L = q.shape[1]
    for bh, t in torch.nonzero(_blocks_with(bad, b)).tolist():
        s, e = t * b, min(L, t * b + b)
        ks, ke = max(0, s - half), min(L, e + right)
        _safe_step(_Step(s, 1, e - s, q[bh, None, s:e], k[bh, None, ks:ke], v[bh, None, ks:ke], out[bh, None, s:e],
                         _end_cut(s, e, L, half, right), False), scale)


def _blocks_with(bad: torch.Tensor, b: int) -> torch.Tensor:
    """(BH, blocks) booleans: block t of head bh holds a marked row."""
    pad = (-bad.shape[1]) % b
    return torch.nn.functional.pad(bad, (0, pad)).view(bad.shape[0], -1, b).any(dim=2)
