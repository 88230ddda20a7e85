"""Continuous batching: a scheduler that admits requests into the running batch at every step and
retires finished ones (chapter 28; Orca, Yu et al. 2022; vLLM, Kwon et al. 2023).

Static batching runs a batch until its longest request ends: rows that finished early idle, and
a request that arrives meanwhile waits for the whole batch. A continuous batcher decides again
at every step (*iteration-level scheduling*). Its policy here (``policy="mixed"``), stated once:

1. **admit** waiting requests in arrival order while the batch has fewer than ``max_batch`` rows,
   the step's prompt budget (``max_prefill_tokens`` prompt tokens per step) has tokens left, and
   the block pool has room for the request's prompt and first token now, after what the running
   requests still need (``allocation="on-demand"``, vLLM's way: blocks are taken only as tokens
   are written) or for the request at its longest, prompt + ``max_tokens`` positions
   (``allocation="reserve"``: promised, never pre-empted);
2. **plan one forward pass** holding every running request's next tokens: one token for each
   request that is decoding, and for each request still prefilling the next *chunk* of its prompt,
   as much of the budget as the requests admitted before it left (a prompt longer than the budget
   is prefilled over several steps: Sarathi-Serve's chunked prefill, Agrawal et al. 2024);
3. **pre-empt** if the step's tokens need more blocks than the pool has free (on-demand only): the
   newest running request gives all its blocks back and returns to the front of the queue; when
   it is admitted again its prompt *and the tokens it already produced* are prefilled again
   (vLLM's recompute pre-emption), which gives its next token, the same one it would have decoded;
4. **run the step**: the planned tokens of every request laid end to end in one forward pass
   (:func:`~.varlen.varlen_forward`: each weight read once for decoding rows and prompt chunks
   together, the keys and values written to a :class:`~.paged_cache.PagedKVCache`); a request
   whose pending tokens were all fed gets its next token (a prompt's last chunk: its first);
5. **retire** requests that reached ``max_tokens`` or ``eos_id``: their blocks go back to the pool.

Why mixed: decoding a few rows is memory-bound (every weight read for a handful of tokens), a
prompt is compute-bound (every weight used for many tokens). In one forward pass the decoding rows
ride on the prompt's weight reads nearly free, and the running requests never wait a separate
forward pass per newcomer; the budget bounds how long a step with prompts in it can take (time
per output token), and a newcomer still gets its first token within a step or a few (time to
first token). The two baselines, on the same arrivals and the same clock, are in :mod:`.baselines`.
"""
from __future__ import annotations

import collections
import contextlib
import time

import torch

from .._checks import check_int, check_scheduler_args
from ..logit_filters import sample_next
from .packed_linear import PackedLinears
from .paged_cache import PagedKVCache, blocks_needed
from .varlen import check_varlen_model, varlen_forward
from .workload import Request

__all__ = ["ContinuousBatcher", "serve_continuous", "POLICIES", "ALLOCATIONS"]

POLICIES = ("mixed",)
ALLOCATIONS = ("on-demand", "reserve")


def _generator(r: Request) -> torch.Generator:
    """The request's own sampling generator, seeded as ``sampling.generate_ids(..., seed=...)`` seeds it."""
    return torch.Generator().manual_seed(0 if r.seed is None else r.seed)


def _pick(logits: torch.Tensor, requests: list[Request], generators: dict) -> list[int]:
    """One token per row of ``logits`` (B, V): greedy rows together, sampling rows each with its
    request's own generator (the draws ``sampling.generate_ids(..., seed=...)`` makes)."""
    tokens = logits.argmax(-1).tolist()
    for i, r in enumerate(requests):
        if r.temperature > 0:
            tokens[i] = int(sample_next(logits[i:i + 1], r.temperature, generator=generators[r.id]))
    return tokens


class ContinuousBatcher:
    """Serve :class:`~.workload.Request` s with continuous batching on ``model`` (a
    ``DecoderOnlyLM``): :meth:`submit` requests (from any thread), call :meth:`step` while
    :meth:`busy`. ``on_token(request, token)`` and ``on_finish(request)`` are called as tokens come
    (the server streams from them). The cache is a pool of ``num_blocks`` blocks of ``block_size``,
    taken as tokens are written (``allocation="on-demand"``, pre-empting the newest request when
    the pool runs out) or promised at admission for each request's longest length
    (``allocation="reserve"``). ``reserve_tokens`` only feeds the memory comparison: the new
    tokens a contiguous cache would have to reserve per request (None: its ``max_tokens``; a
    server that cannot foresee where a request stops must reserve its limit). ``pack_linears``
    runs the forward passes in :class:`~.packed_linear.PackedLinears` (a few rows then cost close
    to one row: up to 8 rows a kernel reading each weight once, more rows oneDNN-packed weights, a
    second copy of them in memory)."""

    def __init__(self, model, max_batch: int = 8, max_prefill_tokens: int = 512, block_size: int = 16,
                 num_blocks: int = 256, eos_id: int | None = None, policy: str = "mixed",
                 clock=time.perf_counter, on_token=None, on_finish=None, allocation: str = "on-demand",
                 reserve_tokens: int | None = None, pack_linears: bool = False):
        check_scheduler_args(max_batch, max_prefill_tokens, policy, POLICIES)
        check_varlen_model(model)
        if allocation not in ALLOCATIONS:
            raise ValueError(f"allocation: expected one of {ALLOCATIONS}, got {allocation!r}")
        if reserve_tokens is not None:
            check_int("reserve_tokens", reserve_tokens)
        self.allocation, self.reserve_tokens = allocation, reserve_tokens
        self.packs = PackedLinears(model) if pack_linears else contextlib.nullcontext()
        if eos_id is not None:
            check_int("eos_id", eos_id, 0)
        self.model, self.max_batch, self.max_prefill_tokens = model, max_batch, max_prefill_tokens
        self.eos_id, self.clock, self.start = eos_id, clock, clock()
        self.cache = PagedKVCache(len(model.blocks), num_blocks, block_size)
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: list[Request] = []
        self.cancelled: set = set()
        self.on_token, self.on_finish = on_token, on_finish
        self.reserved = 0  # blocks promised to running requests at their longest (allocation="reserve")
        self.preemptions = 0
        self._generators: dict = {}
        self.device = next(model.parameters()).device
        # memory over the run, in cache positions: blocks held, real tokens, and what contiguous
        # caches reserving each running request's longest length would hold; the peak over the
        # steps (forward passes; the key keeps its old name, decode_steps) and the sum (the mean is sum / decode_steps)
        self.peak = {"paged_positions": 0, "real_positions": 0, "contiguous_positions": 0}
        self.total = {"paged_positions": 0, "real_positions": 0, "contiguous_positions": 0, "decode_steps": 0}

    def capacity_for(self, request: Request) -> int:
        return blocks_needed(len(request.prompt) + request.max_tokens, self.cache.block_size)

    def submit(self, request: Request) -> None:
        """Queue a request (thread-safe: one deque append). One that could never fit the pool is refused."""
        if self.capacity_for(request) > self.cache.num_blocks:
            raise ValueError(f"request: {len(request.prompt)} + {request.max_tokens} positions exceed the cache's "
                             f"{self.cache.num_blocks * self.cache.block_size}")
        self.waiting.append(request)

    def cancel(self, request_id) -> None:
        """Drop a request at the next step (a client gone, a timeout)."""
        self.cancelled.add(request_id)

    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def now(self) -> float:
        return self.clock() - self.start

    def _emit(self, r: Request, token: int) -> None:
        r.tokens.append(token)
        r.token_times.append(self.now())
        if self.on_token is not None:
            self.on_token(r, token)

    def _done(self, r: Request) -> bool:
        return len(r.tokens) >= r.max_tokens or (self.eos_id is not None and r.tokens[-1] == self.eos_id)

    def _retire(self, r: Request) -> None:
        self.running.remove(r)
        self.cache.free(r.id)
        if self.allocation == "reserve":
            self.reserved -= self.capacity_for(r)
        self._generators.pop(r.id, None)
        if self.on_finish is not None:
            self.on_finish(r)

    def _drop_cancelled(self) -> None:
        for r in [r for r in self.running if r.id in self.cancelled]:
            self._retire(r)
        for r in self.waiting:  # a pre-empted request's generator is kept while it waits
            if r.id in self.cancelled:
                self._generators.pop(r.id, None)
        if self.cancelled:
            self.waiting = collections.deque(r for r in self.waiting if r.id not in self.cancelled)
            self.cancelled = set()

    def _context(self, r: Request) -> list[int]:
        """What ``r``'s cache must hold before its next token: its prompt and the tokens it
        produced (all but the last are cached while it decodes; all of them after a pre-emption)."""
        return r.prompt + r.tokens

    def _pending(self, r: Request) -> list[int]:
        """The tokens of ``r`` not yet in the cache: its last token while it decodes, the rest of
        its prompt (and of its earlier tokens, after a pre-emption) while it prefills."""
        return self._context(r)[self.cache.seq_lengths[r.id]:]

    def _owed(self, r: Request) -> int:
        """Blocks ``r`` still needs for its pending tokens and the token after them."""
        return max(0, blocks_needed(len(self._context(r)) + 1, self.cache.block_size) - len(self.cache.tables[r.id]))

    def _plan(self) -> list[tuple[Request, list[int]]]:
        """This step's tokens per running request, in order of admission: a decoding request's
        one token; a prefilling request's next chunk, as much of the prompt budget as is left."""
        plan, budget = [], self.max_prefill_tokens
        for r in self.running:
            pending = self._pending(r)
            if len(pending) > 1:  # prefilling: a chunk of the budget, or nothing this step
                pending = pending[:budget]
                budget -= len(pending)
            if pending:
                plan.append((r, pending))
        return plan

    def _admit(self) -> None:
        """Admit waiting requests while rows, the step's prompt budget and the pool allow."""
        budget = self.max_prefill_tokens - sum(len(p) for r, p in self._plan() if len(p) > 1)
        free = len(self.cache.free_blocks) - sum(self._owed(r) for r in self.running)  # on-demand: room left
        while self.waiting and len(self.running) < self.max_batch and budget > 0:
            r = self.waiting[0]
            tokens = len(self._context(r))
            if self.allocation == "reserve":
                need = self.capacity_for(r)
                if self.reserved + need > self.cache.num_blocks:
                    break
                self.reserved += need
            else:
                need = blocks_needed(tokens + 1, self.cache.block_size)  # its context and its next token
                if need > free:
                    break
                free -= need
            self.waiting.popleft()
            budget -= tokens
            self.cache.add_sequence(r.id)
            if r.temperature > 0 and r.id not in self._generators:
                self._generators[r.id] = _generator(r)
            self.running.append(r)

    def _step_blocks(self, plan) -> int:
        """New blocks the step's tokens take (no blocks are shared between a batcher's requests)."""
        bs = self.cache.block_size
        return sum(blocks_needed(self.cache.seq_lengths[r.id] + len(p), bs) - len(self.cache.tables[r.id])
                   for r, p in plan)

    def _preempt(self) -> list[tuple[Request, list[int]]]:
        """The step's plan, after freeing blocks for it (on-demand): while its tokens need more new
        blocks than the pool has, the newest request (``running`` is in order of admission) gives
        its blocks back and waits at the front of the queue, its tokens so far kept (they are
        prefilled again when it returns)."""
        plan = self._plan()
        while self._step_blocks(plan) > len(self.cache.free_blocks) and len(self.running) > 1:
            victim = self.running.pop()
            self.cache.free(victim.id)
            self.waiting.appendleft(victim)
            self.preemptions += 1
            plan = self._plan()
        return plan

    @torch.no_grad()
    def step(self) -> None:
        """One iteration: drop cancelled requests, admit, then one forward pass of every running
        request's next tokens (decoding rows and prompt chunks together); emit and retire."""
        with self.packs:
            self._step()

    def _step(self) -> None:
        self._drop_cancelled()
        self._admit()
        plan = self._preempt()
        if not plan:
            return
        logits = varlen_forward(self.model, self.cache, [r.id for r, _ in plan], [p for _, p in plan])  # (S, V)
        self._measure()
        ready = [i for i, (r, _) in enumerate(plan) if not self._pending(r)]  # every pending token fed
        rows = [plan[i][0] for i in ready]
        for r, token in zip(rows, _pick(logits[ready], rows, self._generators)):
            self._emit(r, token)
            if self._done(r):
                self._retire(r)

    def _measure(self) -> None:
        bs = self.cache.block_size
        now = {"paged_positions": self.cache.blocks_in_use() * bs,
               "real_positions": sum(self.cache.seq_lengths.values()),
               "contiguous_positions": sum(len(r.prompt) + (r.max_tokens if self.reserve_tokens is None
                                                            else self.reserve_tokens) for r in self.running)}
        for key, value in now.items():
            self.peak[key] = max(self.peak[key], value)
            self.total[key] += value
        self.total["decode_steps"] += 1

    def run(self, requests: list[Request]) -> float:
        """Serve ``requests`` as they arrive (``arrival`` seconds after now, waiting in real time
        when idle); returns the wall seconds from the start to the last token."""
        self.start = self.clock()
        pending = collections.deque(sorted(requests, key=lambda r: r.arrival))
        while pending or self.busy():
            while pending and pending[0].arrival <= self.now():
                self.submit(pending.popleft())
            if not self.busy():
                time.sleep(max(0.0, pending[0].arrival - self.now()))
                continue
            self.step()
        return self.now()


def serve_continuous(model, requests: list[Request], **options) -> tuple[float, dict]:
    """Continuous batching of ``requests`` (fresh copies are served, filled in place): (wall
    seconds, memory in cache positions: the peaks over the steps, their means under
    ``"mean"``, and the number of pre-emptions)."""
    batcher = ContinuousBatcher(model, **options)
    seconds = batcher.run(requests)
    steps = max(1, batcher.total["decode_steps"])
    mean = {k: v / steps for k, v in batcher.total.items() if k != "decode_steps"}
    return seconds, {**batcher.peak, "mean": mean, "preemptions": batcher.preemptions}
