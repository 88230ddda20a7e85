"""A small, explicit training loop shared by the chapters that train a model live.

Adam with optional linear warmup and gradient clipping, a progress bar, and a history of
losses. The loop is deliberately plain so a chapter can show it; chapters that need something
unusual write their own few lines instead.
"""
from __future__ import annotations

import os
from typing import Any, Callable

import torch

__all__ = ["fit", "warmup_schedule", "progress_bar"]


def progress_bar(iterable, total: int | None = None, desc: str = ""):
    """A plain-text tqdm progress bar that prints the same text on every run.

    It refreshes every ``total // 20`` steps (not by wall time) and shows no timing, so an
    executed notebook's output is reproducible and nbval can compare it. The environment
    variable ``TLIB_PROGRESS=0`` turns it off.
    """
    if os.environ.get("TLIB_PROGRESS", "1") == "0":
        return iterable
    from tqdm import tqdm
    tqdm.monitor_interval = 0  # no background thread adjusting the refresh rate by time
    total = total if total is not None else len(iterable)
    return tqdm(iterable, total=total, desc=desc, ncols=80, ascii=True, mininterval=0,
                miniters=max(1, total // 20), bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}{postfix}")


def warmup_schedule(warmup_steps: int) -> Callable[[int], float]:
    """Learning-rate multiplier: linear from 1/warmup to 1 over ``warmup_steps`` steps, then 1."""
    if warmup_steps <= 0:
        return lambda step: 1.0
    return lambda step: min(1.0, (step + 1) / warmup_steps)


def fit(model: torch.nn.Module, make_batch: Callable[[int], Any], loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor],
        steps: int, lr: float = 1e-3, warmup_steps: int = 0, grad_clip: float | None = 1.0,
        weight_decay: float = 0.0, desc: str = "training", progress: bool = True,
        on_step: Callable[[int, float], None] | None = None) -> list[float]:
    """Train ``model`` for ``steps`` steps; return the loss of every step.

    ``make_batch(step)`` returns a batch, ``loss_fn(model, batch)`` the scalar loss.
    ``on_step(step, loss)`` is called after each update (e.g. to record gradient norms).
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_schedule(warmup_steps))
    model.train()
    losses = []
    steps_iter = progress_bar(range(steps), total=steps, desc=desc) if progress else range(steps)
    for step in steps_iter:
        loss = loss_fn(model, make_batch(step))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if hasattr(steps_iter, "set_postfix_str") and step % max(1, steps // 20) == 0:
            steps_iter.set_postfix_str(f"loss {losses[-1]:.3f}", refresh=False)
        if on_step is not None:
            on_step(step, losses[-1])
    model.eval()
    return losses
