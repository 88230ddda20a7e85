"""The two baselines continuous batching is measured against (chapter 28), on the same arrivals
and the same clock as :class:`~.scheduler.ContinuousBatcher`:

- :func:`serve_one_at_a_time`: each request alone, the next only after it (no batching at all);
- :func:`serve_static`: static batching, a batch run until its longest request ends, its cache
  sized for the longest possible request (what a server that cannot know where a request stops
  must preallocate).

:func:`serve_one_at_a_time` picks each token as the batcher does (greedy, or sampled with the
request's own generator), so the two produce the same tokens and differ only in when;
:func:`serve_static` is greedy.
"""
from __future__ import annotations

import collections
import contextlib
import time

import torch

from .._checks import check_int
from .batching import PaddedKVCache, pad_prompts
from .packed_linear import PackedLinears
from .scheduler import _generator, _pick
from .workload import Request

__all__ = ["serve_one_at_a_time", "serve_static"]


@torch.no_grad()
def serve_one_at_a_time(model, requests: list[Request], clock=time.perf_counter) -> float:
    """The baseline: each request in arrival order through ``model`` alone (its own
    :class:`~transformer_lib.kv_cache.KVCache`, the fused step where the model has one), the next
    one only after it; returns the wall seconds."""
    device, start = next(model.parameters()).device, clock()
    for r in sorted(requests, key=lambda r: r.arrival):
        time.sleep(max(0.0, r.arrival - (clock() - start)))
        cache = model.new_cache(initial_capacity=len(r.prompt) + r.max_tokens)
        generators = {r.id: _generator(r)}
        logits = model(torch.tensor([r.prompt], device=device), cache=cache)[:, -1].float()  # (1, V)
        while True:
            token = _pick(logits, [r], generators)[0]
            r.tokens.append(token)
            r.token_times.append(clock() - start)
            if len(r.tokens) >= r.max_tokens:
                break
            logits = model(torch.tensor([[token]], device=device), cache=cache)[:, -1].float()
    return clock() - start


@torch.no_grad()
def serve_static(model, requests: list[Request], max_batch: int = 8, clock=time.perf_counter,
                 reserve_tokens: int | None = None, pack_linears: bool = False) -> tuple[float, dict]:
    """Static batching: when idle, take up to ``max_batch`` arrived requests and decode them
    together to the end of the longest (a :class:`~.batching.PaddedKVCache` sized to the batch's
    longest prompt plus its largest ``max_tokens``, or plus ``reserve_tokens`` when given: what a
    server must preallocate when it cannot know where a request stops); rows that finish early
    idle. Greedy. Returns (wall seconds, memory in cache positions: peaks over the decode steps,
    their means under ``"mean"``). ``pack_linears``: as :class:`ContinuousBatcher`'s."""
    check_int("max_batch", max_batch)
    if reserve_tokens is not None:
        check_int("reserve_tokens", reserve_tokens)
    with PackedLinears(model) if pack_linears else contextlib.nullcontext():
        return _serve_static(model, requests, max_batch, clock, reserve_tokens)


def _serve_static(model, requests, max_batch, clock, reserve_tokens):
    device, start = next(model.parameters()).device, clock()
    pending = collections.deque(sorted(requests, key=lambda r: r.arrival))
    peak = {"padded_positions": 0, "real_positions": 0}
    total, count = {"padded_positions": 0, "real_positions": 0}, 0
    while pending:
        time.sleep(max(0.0, pending[0].arrival - (clock() - start)))
        batch = []
        while pending and len(batch) < max_batch and pending[0].arrival <= clock() - start:
            batch.append(pending.popleft())
        tokens, lengths = pad_prompts([r.prompt for r in batch])
        steps = max(r.max_tokens for r in batch)
        reserved = len(batch) * (tokens.shape[1] + (steps if reserve_tokens is None else max(steps, reserve_tokens)))
        cache = PaddedKVCache(len(model.blocks), len(batch), tokens.shape[1] + steps)
        logits = model(tokens.to(device), cache=cache)  # (B, L_max, V)
        cache.set_lengths(lengths)
        logits = logits[torch.arange(len(batch)), lengths.to(device) - 1].float()  # (B, V)
        for step in range(steps):
            token = logits.argmax(-1)  # (B,)
            now = clock() - start
            for r, t in zip(batch, token.tolist()):
                if len(r.tokens) < r.max_tokens:
                    r.tokens.append(t)
                    r.token_times.append(now)
            now = {"padded_positions": reserved, "real_positions": int(lengths.sum()) + sum(len(r.tokens) for r in batch)}
            for key, value in now.items():
                peak[key] = max(peak[key], value)
                total[key] += value
            count += 1
            if step + 1 < steps:
                logits = model(token[:, None], cache=cache)[:, -1].float()
    return clock() - start, {**peak, "mean": {k: v / max(1, count) for k, v in total.items()}}
