"""Sparse mixture of experts (chapter 25): many FFNs, a router picks k of them per token.

A dense FFN spends all its parameters on every token. A mixture of experts holds ``num_experts``
FFNs but runs only ``top_k`` of them on each token, so the parameter count grows with the number
of experts while the FLOPs per token grow only with ``top_k``. Routing follows Mixtral: a
bias-free linear ``router`` gives logits (tokens, E); softmax; the top-k probabilities,
renormalised to sum to one, weight the chosen experts' outputs.

The router logits of the last call are kept on the module (``last_router_logits``, (N, E) with
N = B * L) and also pass through the hook point ``hook_router_logits`` so that the training
loop can add :func:`load_balancing_loss` (GShard, Switch Transformer; Mixtral's too) without
changing what ``forward`` returns.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import (check_expert_parallel, check_experts, check_features, check_int, check_moe_decoder,
                      check_router_logits, check_top_k)
from .feedforward import FeedForward


def route(router_logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixtral's routing: softmax (in float32), top-k, renormalise.

    router_logits (N, E) -> weights (N, k) summing to one per token, indices (N, k) of experts.
    """
    check_router_logits(router_logits)
    check_top_k(top_k, router_logits.shape[-1])
    probs = F.softmax(router_logits.float(), dim=-1)                   # (N, E)
    weights, indices = torch.topk(probs, top_k, dim=-1)                # (N, k) each
    weights = weights / weights.sum(dim=-1, keepdim=True)              # (N, k), rows sum to 1
    return weights, indices


def load_balancing_loss(router_logits, top_k: int, num_experts: int | None = None) -> torch.Tensor:
    """The auxiliary loss of GShard and Switch Transformer (Mixtral's too): ``E * sum_e f_e * P_e``.

    (Shazeer et al. 2017 balanced with a different loss: the squared coefficient of variation of
    each expert's summed probability, plus a smooth load estimate under noisy gating.)

    ``f_e`` is the assignments per token to expert e (counted per k slot and averaged over tokens,
    as transformers' ``load_balancing_loss_func``, so that ``sum_e f_e = top_k``), ``P_e`` the mean
    router probability of expert e. A router with uniform probabilities gives ``top_k`` (whatever
    it picks); all tokens on one expert with probability one gives about ``E`` (the first slot's
    f * P is 1, the second slot's expert has P near 0). It is a surrogate, not a measure of
    imbalance: its minimum is not at balance (an expert picked often at a low probability has a
    large f but a small P), and what balances the router is its gradient through P, which lowers
    the probability of the experts that already get most assignments. ``router_logits`` is one (N, E) tensor or a
    tuple/list of them (one per layer; concatenated over tokens, as transformers does).
    """
    router_logits = check_router_logits(router_logits, num_experts)  # (layers * N, E): layers concatenated
    E = router_logits.shape[-1]
    check_top_k(top_k, E)
    probs = F.softmax(router_logits.float(), dim=-1)                   # (N, E)
    _, chosen = torch.topk(probs, top_k, dim=-1)                       # (N, k)
    counts = F.one_hot(chosen, E).float()                              # (N, k, E)
    fraction = counts.mean(dim=0)                                      # (k, E): share of slot j on e
    mean_prob = probs.mean(dim=0)                                      # (E,)
    return E * (fraction * mean_prob).sum()


class MixtureOfExperts(nn.Module):
    """Top-k mixture of SwiGLU experts (Mixtral), optional shared experts and capacity.

    ``shared_experts`` (DeepSeek) are dense SwiGLU FFNs every token passes through, added to the
    routed output. ``capacity_factor`` (Switch Transformer) caps each expert at
    ``ceil(capacity_factor * N * top_k / E)`` assignments per call; assignments over the cap are
    dropped (in token order), contribute nothing, and are counted in ``last_dropped``.
    """

    def __init__(self, d_model: int, d_ff: int, num_experts: int, top_k: int = 2,
                 shared_experts: int = 0, capacity_factor: float | None = None, bias: bool = False):
        super().__init__()
        check_int("d_model", d_model)
        check_int("d_ff", d_ff)
        check_int("num_experts", num_experts)
        check_top_k(top_k, num_experts)
        check_experts(shared_experts, capacity_factor)
        self.d_model, self.d_ff, self.num_experts, self.top_k = d_model, d_ff, num_experts, top_k
        self.capacity_factor = capacity_factor
        self.router = nn.Linear(d_model, num_experts, bias=False)      # W_r: (E, D)
        self.experts = nn.ModuleList(FeedForward(d_model, d_ff, activation="swiglu", bias=bias)
                                     for _ in range(num_experts))
        self.shared = nn.ModuleList(FeedForward(d_model, d_ff, activation="swiglu", bias=bias)
                                    for _ in range(shared_experts))
        self.hook_router_logits = nn.Identity()                        # (N, E)
        self.last_router_logits: torch.Tensor | None = None
        self.last_dropped = 0
        self.last_counts: torch.Tensor | None = None                   # (E,) assignments kept

    def capacity(self, num_tokens: int) -> int | None:
        """Assignments one expert may take in a call of ``num_tokens`` tokens (None: no cap)."""
        if self.capacity_factor is None:
            return None
        return int(-(-self.capacity_factor * num_tokens * self.top_k // self.num_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_features("x", x, self.d_model, min_dims=2)
        shape = x.shape
        flat = x.reshape(-1, self.d_model)                              # (N, D)
        logits = self.hook_router_logits(self.router(flat))             # (N, E)
        self.last_router_logits = logits
        weights, indices = route(logits, self.top_k)                    # (N, k), (N, k)
        out = torch.zeros_like(flat)                                    # (N, D)
        cap = self.capacity(flat.shape[0])
        dropped = 0
        counts = torch.zeros(self.num_experts, dtype=torch.long)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(indices == e)                     # (n_e,), (n_e,) in token order
            if cap is not None and token.numel() > cap:
                dropped += token.numel() - cap
                token, slot = token[:cap], slot[:cap]
            counts[e] = token.numel()
            if token.numel() == 0:
                continue
            y = expert(flat[token])                                     # (n_e, D): only its tokens
            out.index_add_(0, token, (y * weights[token, slot, None]).to(out.dtype))
        for expert in self.shared:
            out = out + expert(flat)                                    # (N, D)
        self.last_dropped, self.last_counts = dropped, counts
        return out.reshape(shape)

    def forward_dense(self, x: torch.Tensor) -> torch.Tensor:
        """Readable reference: every expert on every token, zero weight for the unchosen ones.

        Equal to ``forward`` without capacity; E times the expert FLOPs (tests only).
        """
        flat = x.reshape(-1, self.d_model)                              # (N, D)
        weights, indices = route(self.router(flat), self.top_k)         # (N, k)
        gate = torch.zeros(flat.shape[0], self.num_experts, dtype=weights.dtype, device=flat.device)
        gate.scatter_(1, indices, weights)                              # (N, E), k nonzeros a row
        ys = torch.stack([expert(flat) for expert in self.experts], 1)  # (N, E, D)
        out = (gate.unsqueeze(-1).to(ys.dtype) * ys).sum(1)             # (N, D)
        for expert in self.shared:
            out = out + expert(flat)
        return out.reshape(x.shape)


def ffn_of(block) -> nn.Module:
    """The block's FFN (one place to change if the block's names change)."""
    return block.ffn


def moe_decoder(model: nn.Module, num_experts: int, top_k: int = 2, d_ff: int | None = None,
                copy_dense: bool = False, **kwargs) -> nn.Module:
    """Replace every block's FFN of a ``DecoderOnlyLM`` by a :class:`MixtureOfExperts` in place
    (and its ``config`` by one that builds that model: ``DecoderOnlyLM(num_experts=...)`` calls this).

    ``d_ff`` defaults to the dense FFN's. ``copy_dense=True`` starts every expert as a copy of the
    dense SwiGLU FFN (upcycling): routing weights sum to one, so the model's outputs are unchanged.
    Returns the model.
    """
    check_int("num_experts", num_experts)
    check_top_k(top_k, num_experts)
    check_moe_decoder(model, copy_dense, [getattr(ffn_of(b), "activation", None) for b in getattr(model, "blocks", ())])
    for block in model.blocks:
        dense = ffn_of(block)
        bias = dense.linear1.bias is not None
        moe = MixtureOfExperts(dense.d_model, d_ff or dense.d_ff, num_experts, top_k, bias=bias, **kwargs)
        moe.to(dense.linear1.weight.device, dense.linear1.weight.dtype)
        if copy_dense:
            for expert in moe.experts:
                expert.load_state_dict(dense.state_dict())
        block.ffn = moe
    if getattr(model, "config", None) is not None:  # a DecoderOnlyLM: its configuration says what it now is
        model.config = dataclasses.replace(model.config, num_experts=num_experts, top_k=top_k,
                                           d_ff=model.config.d_ff if d_ff is None else d_ff,
                                           shared_experts=len(moe.shared), capacity_factor=moe.capacity_factor)
    return model


def router_logits(model: nn.Module) -> list[torch.Tensor]:
    """The last call's router logits of every MoE block, for :func:`load_balancing_loss`."""
    return [ffn_of(b).last_router_logits for b in model.blocks if isinstance(ffn_of(b), MixtureOfExperts)]


def expert_parallel_forward(moe: MixtureOfExperts, x: torch.Tensor) -> torch.Tensor:
    """Expert parallelism (forward, no capacity or shared experts): rank r of the default process
    group runs only experts ``r * E/W ... (r + 1) * E/W - 1``; every rank routes its own tokens,
    sends each (token, expert) assignment to the rank that holds the expert (``all_to_all``), runs
    what it received and sends the results back. Equal to ``moe(x)`` in one process.

    ``moe`` must be the same (same weights) on every rank; ``x`` (..., D) is this rank's tokens.
    """
    import torch.distributed as dist

    W, rank = dist.get_world_size(), dist.get_rank()
    E = moe.num_experts
    check_expert_parallel(E, W, moe.capacity_factor, len(moe.shared))
    per_rank = E // W
    flat = x.reshape(-1, moe.d_model)                                   # (N, D)
    weights, indices = route(moe.router(flat), moe.top_k)               # (N, k) each
    expert = indices.reshape(-1)                                        # (N k,)
    token = torch.arange(flat.shape[0]).repeat_interleave(moe.top_k)    # (N k,): the token of each assignment
    order = torch.argsort(expert, stable=True)                          # grouped by expert, hence by rank
    expert, token = expert[order], token[order]
    send_counts = torch.bincount(expert // per_rank, minlength=W)       # (W,)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)                    # how many each rank sends me
    send, recv = send_counts.tolist(), recv_counts.tolist()
    recv_x = flat.new_empty(sum(recv), moe.d_model)                     # (R, D)
    dist.all_to_all_single(recv_x, flat[token].contiguous(), recv, send)
    recv_e = expert.new_empty(sum(recv))                                # (R,): which expert each is for
    dist.all_to_all_single(recv_e, expert.contiguous(), recv, send)
    y = torch.zeros_like(recv_x)                                        # (R, D)
    for e in range(rank * per_rank, (rank + 1) * per_rank):
        rows = torch.where(recv_e == e)[0]
        if rows.numel():
            y[rows] = moe.experts[e](recv_x[rows])
    back = flat.new_empty(expert.numel(), moe.d_model)                  # (N k, D), in the sent order
    dist.all_to_all_single(back, y, send, recv)
    w = weights.reshape(-1)[order]                                      # (N k,)
    out = torch.zeros_like(flat).index_add_(0, token, back * w[:, None].to(back.dtype))
    return out.reshape(x.shape)


def expert_parallel_case(rank: int, world_size: int, num_experts: int = 4, top_k: int = 2, seed: int = 0) -> float:
    """Run on every rank (``distributed.launch``): the largest difference between the expert-parallel
    output on this rank's tokens and the one-process layer's."""
    torch.manual_seed(seed)
    moe = MixtureOfExperts(16, 24, num_experts, top_k).eval()           # the same weights on every rank
    x = torch.randn(3 + rank, 5, 16, generator=torch.Generator().manual_seed(seed + 1 + rank))  # uneven
    with torch.no_grad():
        return (expert_parallel_forward(moe, x) - moe(x)).abs().max().item()
