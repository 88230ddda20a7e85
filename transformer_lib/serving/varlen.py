"""One forward pass over many sequences' new tokens laid end to end (chapter 28): the step of a
continuous batcher, decoding rows and prompt chunks together, through a paged KV cache.

A step of a continuous batcher holds rows of very different shapes: a running request adds one
token, a newly admitted one adds its prompt (or a chunk of it). Padding them into one (B, L_max)
batch would multiply a one-token row by the longest prompt; running each prompt as its own
forward pass reads every weight once more per prompt and makes the running rows wait. So, as
vLLM, Sarathi-Serve and transformers' continuous batching do, the step *flattens* them: the T new
tokens of all sequences become one (T, d_model) matrix, and

* every **linear layer, norm and FFN** runs once on the T tokens (each weight read once per step:
  the memory-bound decode rows ride along with the prompt's arithmetic);
* **positions** are per token (sequence i's new tokens sit at ``len_i .. len_i + n_i - 1``); RoPE's
  cos/sin rows are looked up once per step for all layers;
* **keys and values** of the T tokens go to their pool slots with one ``index_copy_`` per layer
  (the slots computed once per step from the block tables);
* **attention** is the only part that knows about sequences: the one-token rows attend together,
  (H_kv, B_dec, g, W) scores against their own blocks gathered out of the pool through one index
  (``-inf`` on slots past a row's end, the same additive mask for every layer); each prompt chunk
  attends causally to its own keys (SDPA, as the model's own prefill does).

The model's own modules run (its weights, norms, FFN or mixture of experts, quantized linears
included): what this file owns is the step's bookkeeping, done once per step and not once per
layer, and no Python loop over rows inside a layer except one attention call per prompt chunk.
It supports ``DecoderOnlyLM`` s whose blocks are ``TransformerBlock`` s with
``MultiHeadAttention`` (RoPE, learned, sinusoidal or no positions, pre- or post-norm, grouped-query
heads, QK-norm); :func:`check_varlen_model` says why another cannot run. Outputs equal the
module path's to float32 rounding (tests/test_serving_varlen.py).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..layers import TransformerBlock
from ..multihead import MultiHeadAttention
from ..positional import rotate
from .paged_cache import PagedKVCache

__all__ = ["varlen_forward", "check_varlen_model", "StepPlan"]


def check_varlen_model(model) -> None:
    """Refuse a model :func:`varlen_forward` cannot run, with the reason."""
    positional = getattr(getattr(model, "config", None), "positional", None)
    if positional not in ("rope", "learned", "sinusoidal", "none"):
        raise ValueError(f"model: positional={positional!r}: rows of different lengths need 'rope', 'learned', "
                         "'sinusoidal' or 'none' (ALiBi builds one bias for all rows)")
    for block in model.blocks:
        if type(block) is not TransformerBlock or not isinstance(block.self_attn, MultiHeadAttention):
            raise ValueError("model: the flattened step runs TransformerBlocks with MultiHeadAttention; "
                             f"got {type(block).__name__} with {type(block.self_attn).__name__}")


class StepPlan:
    """The step's bookkeeping, computed once and shared by every layer: for sequences ``seqs`` with
    ``counts[i]`` new tokens each (room already made in ``cache``), the tokens' positions and
    write slots, the one-token rows' gather index and additive mask, each chunk's span."""

    def __init__(self, cache: PagedKVCache, seqs: list, counts: list[int]):
        past = [cache.seq_lengths[s] for s in seqs]
        self.positions = torch.cat([torch.arange(p, p + n) for p, n in zip(past, counts)])  # (T,)
        ends = torch.tensor(counts).cumsum(0)
        self.last = ends - 1  # (S,) each sequence's last new token: the logits kept
        self.write = torch.cat([cache.slots(s, p, p + n) for s, p, n in zip(seqs, past, counts)])  # (T,)
        self.decode = [i for i, n in enumerate(counts) if n == 1]  # one-token rows, attended together
        self.decode_tokens = self.last[self.decode]  # (B_dec,) their tokens' places in the T
        if self.decode:
            width = max(past[i] + 1 for i in self.decode)
            rows = [cache.slots(seqs[i], 0, width, pad=True) for i in self.decode]
            self.decode_slots = torch.stack(rows)  # (B_dec, W)
            seen = torch.arange(width)[None, :] <= torch.tensor([past[i] for i in self.decode])[:, None]  # (B_dec, W)
            self.decode_bias = torch.zeros(seen.shape).masked_fill_(~seen, float("-inf"))[:, None]  # (B_dec, 1, W)
        # chunks of several tokens: (start, end) in the T, cached positions before, pool slots to read
        self.chunks = [(int(e) - n, int(e), p, cache.slots(s, 0, p + n) if p else None)
                       for s, p, n, e in zip(seqs, past, counts, ends) if n > 1]


def _attend(attn: MultiHeadAttention, q, k, v, keys, values, plan: StepPlan) -> torch.Tensor:
    """Attention of the step's T tokens, (T, H, d) queries -> (T, H * d): one-token rows together
    against their gathered blocks, each chunk against its own keys."""
    T, H, d = q.shape
    Hk, g = attn.num_kv_heads, attn.groups
    out = q.new_empty(T, H, d)
    if plan.decode:
        B, W = plan.decode_slots.shape
        kd = keys.index_select(1, plan.decode_slots.view(-1)).view(Hk, B, W, d)  # (H_kv, B_dec, W, d)
        vd = values.index_select(1, plan.decode_slots.view(-1)).view(Hk, B, W, d)
        # query head j * g + i reads key head j: (B_dec, H, d) -> (H_kv, B_dec, g, d)
        qd = q[plan.decode_tokens].view(B, Hk, g, d).transpose(0, 1)
        scores = qd @ kd.transpose(-1, -2) / math.sqrt(d) + plan.decode_bias  # (H_kv, B_dec, g, W)
        od = scores.softmax(-1) @ vd  # (H_kv, B_dec, g, d)
        out[plan.decode_tokens] = od.transpose(0, 1).reshape(B, H, d)
    for start, end, past, slots in plan.chunks:
        qc = q[start:end].transpose(0, 1)[None]  # (1, H, n, d)
        if past == 0:  # a whole prompt: its own keys, causal
            kc, vc = k[start:end].transpose(0, 1)[None], v[start:end].transpose(0, 1)[None]  # (1, H_kv, n, d)
            mask, causal = None, True
        else:  # a later chunk: the cached positions and its own, token t sees slots <= past + t
            kc = keys.index_select(1, slots)[None]  # (1, H_kv, past + n, d)
            vc = values.index_select(1, slots)[None]
            n = end - start
            mask = torch.arange(past + n)[None, :] <= past + torch.arange(n)[:, None]  # (n, past + n)
            causal = False
        o = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=mask, is_causal=causal, enable_gqa=g > 1)
        out[start:end] = o[0].transpose(0, 1)  # (n, H, d)
    return out.view(T, H * d)


def _self_attention(block, x, keys, values, plan: StepPlan, rope) -> torch.Tensor:
    """(1, T, D) -> (1, T, D): the block's attention over the step's tokens, their keys/values written to the pool."""
    attn = block.self_attn
    T, d = x.shape[1], attn.head_dim
    q = attn.q_proj(x).view(T, attn.num_heads, d)  # (T, H, d)
    k = attn.k_proj(x).view(T, attn.num_kv_heads, d)  # (T, H_kv, d)
    v = attn.v_proj(x).view(T, attn.num_kv_heads, d)
    if attn.q_norm is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    if rope is not None:  # each token by its own position
        cos, sin, style = rope
        q, k = rotate(q, cos, sin, style), rotate(k, cos, sin, style)  # (T, H, d), cos/sin (T, 1, d/2)
    keys.index_copy_(1, plan.write, k.transpose(0, 1))  # (H_kv, T, d) into their slots
    values.index_copy_(1, plan.write, v.transpose(0, 1))
    return attn.out_proj(_attend(attn, q, k, v, keys, values, plan)[None])  # (1, T, D)


def varlen_forward(model, cache: PagedKVCache, seqs: list, tokens: list[list[int]]) -> torch.Tensor:
    """Run ``tokens[i]`` (new token ids) of sequence ``seqs[i]`` of ``cache`` for every i in one
    forward pass of ``model``; their keys and values join the cache, and the result is the logits
    of each sequence's last new token, (S, V) float32 (the only ones a server samples from)."""
    counts = [len(t) for t in tokens]
    for s, n in zip(seqs, counts):
        cache.make_room(s, n)
    plan = StepPlan(cache, seqs, counts)
    device = next(model.parameters()).device
    ids = torch.tensor([t for chunk in tokens for t in chunk], device=device)  # (T,)
    x = model.embed(ids)[None]  # (1, T, D): the step's tokens end to end, one "row" for the modules
    if model.pos is not None:  # a learned or sinusoidal table: each token its own position
        x = model.pos(x.transpose(0, 1), offset=plan.positions.to(device)).transpose(0, 1)  # as (T, 1, D)
    rope = model.blocks[0].self_attn.rotary
    if rope is not None:
        cos, sin = rope.cos_sin(int(plan.positions.max()) + 1, device, x.dtype)
        rope = (cos[plan.positions][:, None], sin[plan.positions][:, None], rope.style)  # (T, 1, d/2) each
    for layer, block in enumerate(model.blocks):
        attn = block.self_attn
        keys, values = cache.pool(layer, attn.num_kv_heads, attn.head_dim, x)
        x = block.around(x, lambda h: _self_attention(block, h, keys, values, plan, rope))  # (1, T, D)
    for s, n in zip(seqs, counts):
        cache.seq_lengths[s] += n
    x = x[0, plan.last.to(device)]  # (S, D): the last new token of each sequence
    if model.norm is not None:
        x = model.norm(x)
    return model.head(x).float()  # (S, V)
