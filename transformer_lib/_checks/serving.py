"""Rules of serving many requests at once: per-row positions, ragged caches, block pools,
schedulers, workloads and the HTTP server's requests (chapter 28)."""
from __future__ import annotations

import torch

from .scalars import check_int, check_number


def check_offset(offset, batch: int | None = None) -> None:
    """Where new positions start: an int >= 0 (every row alike), or one per row, a 1-D integer
    tensor of ``batch`` values >= 0 (rows of different lengths in one batch)."""
    if isinstance(offset, torch.Tensor):
        if offset.dim() != 1 or offset.dtype.is_floating_point or offset.dtype == torch.bool:
            raise ValueError(f"offset: expected an int or a 1-D integer tensor (one offset per row), "
                             f"got a {offset.dtype} tensor of shape {tuple(offset.shape)}")
        if batch is not None and offset.numel() != batch:
            raise ValueError(f"offset: expected one offset per row ({batch}), got {offset.numel()}")
        if offset.numel() and int(offset.min()) < 0:
            raise ValueError(f"offset: positions start at 0 or later, got {offset.tolist()}")
        return
    check_int("offset", offset, 0)


def check_prompt_list(prompts, vocab_size: int | None = None) -> list[list[int]]:
    """A list of prompts, each a non-empty list (or 1-D tensor) of ids in [0, vocab_size)."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError(f"prompts: expected a non-empty list of prompts (lists of ids), got {type(prompts).__name__}")
    rows = []
    for i, p in enumerate(prompts):
        if isinstance(p, torch.Tensor):
            if p.dim() != 1 or p.dtype.is_floating_point:
                raise ValueError(f"prompts[{i}]: expected a 1-D integer tensor, got shape {tuple(p.shape)} {p.dtype}")
            p = p.tolist()
        if not isinstance(p, (list, tuple)) or not p or not all(isinstance(t, int) and not isinstance(t, bool)
                                                                for t in p):
            raise ValueError(f"prompts[{i}]: expected a non-empty list of integer ids, got {p!r:.60}")
        if min(p) < 0 or (vocab_size is not None and max(p) >= vocab_size):
            raise ValueError(f"prompts[{i}]: ids must lie in [0, {vocab_size}), got {min(p)} .. {max(p)}")
        rows.append(list(p))
    return rows


def check_ragged_model(model) -> None:
    """Rows of different lengths need per-row positions: every positional scheme but ALiBi's
    distance bias (built for one shared offset) has them."""
    config = getattr(model, "config", None)
    if getattr(config, "positional", None) == "alibi":
        raise ValueError("model: positional='alibi' builds one bias for all rows; batches of rows of different "
                         "lengths need 'rope', 'learned', 'sinusoidal' or 'none'")


def check_block_pool(num_blocks, block_size) -> None:
    """A pool of ``num_blocks`` blocks of ``block_size`` positions each (both >= 1)."""
    check_int("num_blocks", num_blocks)
    check_int("block_size", block_size)


def check_sequence_id(seq, tables: dict) -> None:
    """A sequence the paged cache holds (one of ``tables``' keys)."""
    if seq not in tables:
        raise ValueError(f"seq: no sequence {seq!r} in the cache (it holds {sorted(tables)[:8]})")


def check_active_rows(rows, tables: dict) -> list:
    """The sequences of the next forward pass: a non-empty list of distinct sequences the cache holds."""
    if not isinstance(rows, (list, tuple)) or not rows:
        raise ValueError(f"rows: expected a non-empty list of sequence ids, got {rows!r:.60}")
    if len(set(rows)) != len(rows):
        raise ValueError(f"rows: a sequence may fill one row only, got {list(rows)}")
    for seq in rows:
        check_sequence_id(seq, tables)
    return list(rows)


def check_row_lengths(lengths, current: torch.Tensor, name: str = "lengths") -> torch.Tensor:
    """New row lengths for a ragged cache: one int per row, 0 <= new <= the row's cached length."""
    t = torch.as_tensor(lengths)
    if t.dim() != 1 or t.numel() != current.numel() or t.dtype.is_floating_point or t.dtype == torch.bool:
        raise ValueError(f"{name}: expected {current.numel()} integer lengths, one per row, got {lengths!r:.60}")
    t = t.to(current.device, torch.long)
    if bool((t < 0).any()) or bool((t > current).any()):
        raise ValueError(f"{name}: each row can only be cut shorter (0 .. {current.tolist()}), got {t.tolist()}")
    return t


def check_workload_args(num_requests, rate, prompt_lengths, output_lengths, seed) -> None:
    """A seeded workload: ``num_requests`` >= 1, an arrival ``rate`` > 0 per second (or None: all
    at time 0), (low, high) ranges of prompt and output lengths with 1 <= low <= high, a seed."""
    check_int("num_requests", num_requests)
    if rate is not None:
        check_number("rate", rate, 0, low_open=True)
    for name, pair in (("prompt_lengths", prompt_lengths), ("output_lengths", output_lengths)):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"{name}: expected a (low, high) pair of lengths, got {pair!r}")
        check_int(f"{name}[0]", pair[0], 1)
        check_int(f"{name}[1]", pair[1], pair[0])
    check_int("seed", seed, 0)


def check_scheduler_args(max_batch, max_prefill_tokens, policy, policies) -> None:
    """A continuous batcher's limits: rows per decode step and prompt tokens prefilled per step
    (both >= 1), and one of the named admission ``policies``."""
    check_int("max_batch", max_batch)
    check_int("max_prefill_tokens", max_prefill_tokens)
    if policy not in policies:
        raise ValueError(f"policy: expected one of {policies}, got {policy!r}")
