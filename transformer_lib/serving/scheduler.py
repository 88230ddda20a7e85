"""Continuous batching: a scheduler that admits requests into the running batch at every step and
retires finished ones (chapter 28; Orca, Yu et al. 2022; vLLM, Kwon et al. 2023).

Static batching runs a batch until its longest request ends: rows that finished early idle, and
a request that arrives meanwhile waits for the whole batch. A continuous batcher decides again
at every step (*iteration-level scheduling*). Its policy here, stated once:

1. **admit** waiting requests in arrival order while the batch has fewer than ``max_batch`` rows,
   the step's prefill budget (``max_prefill_tokens`` prompt tokens; the first one always fits)
   lasts, and the block pool can hold the request at its longest (prompt + ``max_tokens``
   positions, *reserved*, not allocated: blocks are taken as tokens arrive, so no running request
   is ever evicted);
2. **prefill** each admitted prompt, one forward pass each (a prompt's tokens are already many
   rows: compute-bound), which gives its first token;
3. **decode** one token for every running request in one forward pass of B rows (each row its own
   length, positions and mask: :mod:`.ragged`), through a :class:`~.paged_cache.PagedKVCache`;
4. **retire** requests that reached ``max_tokens`` or ``eos_id``: their blocks go back to the pool.

Prefill first, under a budget: a new request gets its first token at the next step (short time
to first token), and the budget bounds how long the running requests' next token waits behind
prefills (time per output token). :func:`serve_one_at_a_time` and :func:`serve_static` are the two
baselines, on the same arrivals and the same clock.
"""
from __future__ import annotations

import collections
import time

import torch

from .._checks import check_int, check_scheduler_args
from ..logit_filters import sample_next
from .batching import PaddedKVCache, pad_prompts
from .paged_cache import PagedKVCache, blocks_needed
from .workload import Request

__all__ = ["ContinuousBatcher", "serve_one_at_a_time", "serve_static", "serve_continuous", "POLICIES"]

POLICIES = ("prefill-first",)


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
    (the server streams from them). The cache is a pool of ``num_blocks`` blocks of ``block_size``."""

    def __init__(self, model, max_batch: int = 8, max_prefill_tokens: int = 512, block_size: int = 16,
                 num_blocks: int = 256, eos_id: int | None = None, policy: str = "prefill-first",
                 clock=time.perf_counter, on_token=None, on_finish=None):
        check_scheduler_args(max_batch, max_prefill_tokens, policy, POLICIES)
        if eos_id is not None:
            check_int("eos_id", eos_id, 0)
        self.model, self.max_batch, self.max_prefill_tokens = model, max_batch, max_prefill_tokens
        self.eos_id, self.clock, self.start = eos_id, clock, clock()
        self.cache = PagedKVCache(len(model.blocks), num_blocks, block_size)
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: list[Request] = []
        self.cancelled: set = set()
        self.on_token, self.on_finish = on_token, on_finish
        self.reserved = 0  # blocks promised to running requests at their longest
        self._generators: dict = {}
        self.device = next(model.parameters()).device
        # memory over the run, in cache positions: blocks held, real tokens, and what contiguous
        # caches reserving each running request's longest length would hold
        self.peak = {"paged_positions": 0, "real_positions": 0, "contiguous_positions": 0}

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
        self.reserved -= self.capacity_for(r)
        self._generators.pop(r.id, None)
        if self.on_finish is not None:
            self.on_finish(r)

    def _drop_cancelled(self) -> None:
        for r in [r for r in self.running if r.id in self.cancelled]:
            self._retire(r)
        if self.cancelled:
            self.waiting = collections.deque(r for r in self.waiting if r.id not in self.cancelled)
            self.cancelled = set()

    def _admit(self) -> list[Request]:
        admitted, budget = [], self.max_prefill_tokens
        while self.waiting and len(self.running) + len(admitted) < self.max_batch:
            r = self.waiting[0]
            need = self.capacity_for(r)
            if self.reserved + need > self.cache.num_blocks or (admitted and len(r.prompt) > budget):
                break
            self.waiting.popleft()
            self.reserved += need
            budget -= len(r.prompt)
            admitted.append(r)
        return admitted

    @torch.no_grad()
    def step(self) -> None:
        """One iteration: drop cancelled requests, admit and prefill, decode every running row, retire."""
        self._drop_cancelled()
        for r in self._admit():  # prefill, one prompt per forward pass
            self.cache.add_sequence(r.id)
            self.cache.select([r.id])
            if r.temperature > 0:
                self._generators[r.id] = _generator(r)
            prompt = torch.tensor([r.prompt], device=self.device)  # (1, L)
            logits = self.model(prompt, cache=self.cache)[:, -1].float()  # (1, V)
            self.running.append(r)
            self._emit(r, _pick(logits, [r], self._generators)[0])
            if self._done(r):
                self._retire(r)
        rows = list(self.running)
        if rows:  # decode: one token for every running request, one forward pass
            self.cache.select([r.id for r in rows])
            last = torch.tensor([[r.tokens[-1]] for r in rows], device=self.device)  # (B, 1)
            logits = self.model(last, cache=self.cache)[:, -1].float()  # (B, V)
            self._measure()
            for r, token in zip(rows, _pick(logits, rows, self._generators)):
                self._emit(r, token)
                if self._done(r):
                    self._retire(r)

    def _measure(self) -> None:
        bs = self.cache.block_size
        now = {"paged_positions": self.cache.blocks_in_use() * bs,
               "real_positions": sum(self.cache.seq_lengths.values()),
               "contiguous_positions": sum(len(r.prompt) + r.max_tokens for r in self.running)}
        for key, value in now.items():
            self.peak[key] = max(self.peak[key], value)

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
    seconds, peak memory in cache positions)."""
    batcher = ContinuousBatcher(model, **options)
    seconds = batcher.run(requests)
    return seconds, batcher.peak


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
def serve_static(model, requests: list[Request], max_batch: int = 8, clock=time.perf_counter) -> tuple[float, dict]:
    """Static batching: when idle, take up to ``max_batch`` arrived requests and decode them
    together to the end of the longest (a :class:`~.batching.PaddedKVCache` sized to the batch's
    longest prompt plus its largest ``max_tokens``); rows that finish early idle. Greedy. Returns
    (wall seconds, peak memory in cache positions)."""
    check_int("max_batch", max_batch)
    device, start = next(model.parameters()).device, clock()
    pending = collections.deque(sorted(requests, key=lambda r: r.arrival))
    peak = {"padded_positions": 0, "real_positions": 0}
    while pending:
        time.sleep(max(0.0, pending[0].arrival - (clock() - start)))
        batch = []
        while pending and len(batch) < max_batch and pending[0].arrival <= clock() - start:
            batch.append(pending.popleft())
        tokens, lengths = pad_prompts([r.prompt for r in batch])
        steps = max(r.max_tokens for r in batch)
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
            peak["padded_positions"] = max(peak["padded_positions"], len(batch) * (tokens.shape[1] + steps))
            peak["real_positions"] = max(peak["real_positions"],
                                         int(lengths.sum()) + sum(len(r.tokens) for r in batch))
            if step + 1 < steps:
                logits = model(token[:, None], cache=cache)[:, -1].float()
    return clock() - start, peak
