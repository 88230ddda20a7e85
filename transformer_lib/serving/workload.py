"""A seeded workload of arriving requests, and the latency statistics of serving it (chapter 28).

Arrivals are a Poisson process of ``rate`` requests per second: the gaps between requests are
independent exponential draws with mean ``1 / rate`` (the usual model of many independent users;
``rate=None`` puts every request at time 0, an offline batch). Prompt and output lengths are
drawn uniformly from stated ranges, each prompt's ids uniformly from a vocabulary range (or the
caller's own prompts). Everything comes from one ``torch.Generator``: the same seed gives the
same workload on every machine.

The three numbers a user of a served model feels, per request:

* **time to first token** (TTFT): arrival to the first new token (queueing + prefill);
* **time per output token** (TPOT): the mean gap between its later tokens (the decode steps it
  shared with the batch);
* and, for the server, **throughput**: new tokens of all requests per second of wall time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .._checks import check_int, check_workload_args

__all__ = ["Request", "make_workload", "latency_summary", "percentile"]


@dataclass
class Request:
    """One request: its ``prompt`` (ids), how many new tokens it may take (``max_tokens``), when
    it arrives (seconds after the start), and what serving it recorded: the new ``tokens`` and
    the clock time of each (``token_times``, seconds after the start)."""
    id: int
    prompt: list[int]
    max_tokens: int
    arrival: float = 0.0
    temperature: float = 0.0
    seed: int | None = None
    tokens: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)

    @property
    def ttft(self) -> float:
        """Seconds from arrival to the first new token."""
        return self.token_times[0] - self.arrival

    @property
    def tpot(self) -> float | None:
        """Mean seconds between later tokens (None with fewer than two tokens)."""
        if len(self.token_times) < 2:
            return None
        return (self.token_times[-1] - self.token_times[0]) / (len(self.token_times) - 1)

    def fresh(self) -> "Request":
        """The same request, nothing served yet (one workload, many servers)."""
        return Request(self.id, list(self.prompt), self.max_tokens, self.arrival, self.temperature, self.seed)


def make_workload(num_requests: int, rate: float | None, prompt_lengths=(16, 128), output_lengths=(8, 64),
                  seed: int = 0, vocab: tuple[int, int] = (100, 10000), prompts=None) -> list[Request]:
    """``num_requests`` requests in arrival order: Poisson arrivals at ``rate`` per second (None:
    all at 0), prompt lengths uniform in ``prompt_lengths`` (inclusive), output lengths uniform in
    ``output_lengths``, prompt ids uniform in ``vocab`` [low, high) or, when ``prompts`` (a list of
    id lists) is given, each request's prompt the start of one of them (drawn uniformly)."""
    check_workload_args(num_requests, rate, prompt_lengths, output_lengths, seed)
    g = torch.Generator().manual_seed(seed)
    # (N,) seconds between arrivals, drawn at every rate (None too) so that the lengths and prompts
    # below are the same requests whatever the rate: only the arrival times scale
    gaps = torch.empty(num_requests).exponential_(1.0, generator=g) / (1.0 if rate is None else rate)
    arrivals = [0.0] * num_requests if rate is None else (gaps.cumsum(0) - gaps[0]).tolist()  # first at 0
    lo, hi = prompt_lengths
    p_len = torch.randint(lo, hi + 1, (num_requests,), generator=g).tolist()
    o_len = torch.randint(output_lengths[0], output_lengths[1] + 1, (num_requests,), generator=g).tolist()
    requests = []
    for i in range(num_requests):
        if prompts is not None:
            source = prompts[int(torch.randint(len(prompts), (1,), generator=g))]
            prompt = list(source[:p_len[i]])
        else:
            prompt = torch.randint(vocab[0], vocab[1], (p_len[i],), generator=g).tolist()
        requests.append(Request(i, prompt, o_len[i], round(arrivals[i], 6)))
    return requests


def percentile(values, q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation (numpy's default)."""
    t = torch.tensor(sorted(values), dtype=torch.float64)
    return float(torch.quantile(t, q / 100)) if len(values) else float("nan")


def latency_summary(requests: list[Request], seconds: float) -> dict:
    """Throughput (new tokens / ``seconds`` of wall time) and TTFT / TPOT p50 and p95 of served requests."""
    check_int("requests", len(requests))
    ttft = [r.ttft for r in requests]
    tpot = [r.tpot for r in requests if r.tpot is not None]
    tokens = sum(len(r.tokens) for r in requests)
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "ttft_p50_s": percentile(ttft, 50), "ttft_p95_s": percentile(ttft, 95),
            "tpot_p50_s": percentile(tpot, 50), "tpot_p95_s": percentile(tpot, 95)}
