"""Training: one loop core, the small loop of the chapters' toy models, and the language-model recipe.

* :func:`train_loop` the loop core every training function of the library runs (step,
  learning-rate schedule, gradient clipping, evaluations, callback), recording a :class:`History`
  (``history["loss"]``: the loss of every step). The mode rule: a model trains in training mode
  (DPO keeps eval mode: dropout off) and every training function leaves it in eval mode.
* :func:`fit` the loop the early chapters use: AdamW (weight decay 0 by default, i.e. Adam), an
  optional linear warmup, gradient clipping, a progress bar and the loss of every step.
* The recipe of chapter 16 ("Training a small GPT"), one helper per ingredient:
  :func:`causal_lm_loss` (next-token cross-entropy, optional label smoothing) and
  :func:`perplexity`; :func:`warmup_cosine_schedule` (linear warmup, then cosine decay);
  :func:`decay_parameter_groups` and :func:`make_adamw` (weight decay on the weight matrices of
  linear layers only); :func:`lm_batch` and :func:`evaluate_lm` (random training windows,
  deterministic validation windows). The loop that ties them together is :func:`train_lm`;
  text comes from :mod:`transformer_lib.sampling`.
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import check_int, check_number, check_token_ids
from ._checks.training import check_lm_logits, check_loss, check_schedule, check_token_stream, check_windows
__all__ = ["History", "train_loop", "fit", "warmup_schedule", "progress_bar", "warmup_cosine_schedule",
           "causal_lm_loss", "perplexity",
           "decay_parameter_groups", "make_adamw", "lm_batch", "evaluate_lm", "train_lm"]


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


# -- the loop core every training function runs ---------------------------------------------

class History(dict):
    """What a training run records: a dict of lists, one entry per step or per evaluation.

    Every training function of the library returns one. ``history["loss"]`` is the loss of every
    optimizer step (in order); functions that schedule the learning rate add ``history["lr"]``
    (the rate each step used), and evaluations append their own lists (e.g. ``eval_steps``,
    ``eval_val``), one entry per evaluation. A plain ``dict`` underneath, so it prints, pickles
    and serializes to JSON like one."""

    def log(self, **values) -> None:
        """Append each value to the list of its name (created on first use)."""
        for name, value in values.items():
            self.setdefault(name, []).append(value)


def train_loop(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int, step_fn: Callable[[int], Any], *,
               schedule: Callable[[int], float] | None = None, grad_clip: float | None = None, params=None,
               after_backward: Callable[[], None] | None = None,
               loss_value: Callable[[torch.Tensor], float] | None = None,
               evaluate: Callable[[int], dict] | None = None, eval_every: int | None = None,
               callback: Callable[[int, History], None] | None = None, record_lr: bool = False,
               train_mode: bool = True, progress: bool = False, desc: str = "training",
               history: History | None = None) -> History:
    """The loop core: ``steps`` optimizer steps, each

    1. ``evaluate(n)`` first, when ``n`` (the updates done so far) is a multiple of ``eval_every``:
       it runs in eval mode, its dict is logged into the history, and the model goes back to its
       training mode;
    2. ``optimizer.zero_grad()``, ``loss = step_fn(step)`` and ``loss.backward()`` (a ``step_fn``
       that back-propagates itself, e.g. over micro-batches, returns the loss as a float instead);
    3. ``after_backward()`` (e.g. averaging gradients across processes), gradient clipping at
       ``grad_clip`` (over ``params``, default every parameter of the model), the optimizer step
       and the learning-rate ``schedule`` (a multiplier of each group's initial rate, as
       ``LambdaLR``);
    4. ``history["loss"]`` gets ``loss_value(loss)`` (default ``float(loss)``), ``history["lr"]``
       the rate used (with ``record_lr``), and ``callback(step, history)`` is called.

    After the last step ``evaluate(steps)`` runs once more (if given). **The mode rule**: the model
    trains in training mode (``train_mode=False`` keeps it in eval mode, dropout off, as DPO wants)
    and every training function leaves it in eval mode, ready to evaluate or generate.
    """
    check_int("steps", steps)
    if eval_every is not None:
        check_int("eval_every", eval_every)
    history = History() if history is None else history
    scheduler = None if schedule is None else torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    params = list(model.parameters()) if params is None else params

    def run_evaluation(n):
        model.eval()
        history.log(**evaluate(n))
        model.train(train_mode)

    steps_iter = progress_bar(range(steps), total=steps, desc=desc) if progress else range(steps)
    try:
        model.train(train_mode)
        for step in steps_iter:
            if evaluate is not None and eval_every is not None and step % eval_every == 0:
                run_evaluation(step)
            optimizer.zero_grad(set_to_none=True)
            loss = step_fn(step)
            if isinstance(loss, torch.Tensor):
                loss.backward()
            if after_backward is not None:
                after_backward()
            if grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            if record_lr:
                history.log(lr=optimizer.param_groups[0]["lr"])
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            history.log(loss=loss_value(loss) if loss_value is not None else
                        loss.item() if isinstance(loss, torch.Tensor) else float(loss))
            if hasattr(steps_iter, "set_postfix_str") and step % max(1, steps // 20) == 0:
                steps_iter.set_postfix_str(f"loss {history['loss'][-1]:.3f}", refresh=False)
            if callback is not None:
                callback(step, history)
        if evaluate is not None:
            model.eval()
            history.log(**evaluate(steps))
    finally:
        model.eval()
    return history


def fit(model: torch.nn.Module, make_batch: Callable[[int], Any], loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor],
        steps: int, lr: float = 1e-3, warmup_steps: int = 0, grad_clip: float | None = 1.0,
        weight_decay: float = 0.0, desc: str = "training", progress: bool = True,
        callback: Callable[[int, History], None] | None = None) -> History:
    """Train ``model`` for ``steps`` steps with AdamW (``weight_decay`` on every parameter; 0 by
    default, which makes it plain Adam); return the :class:`History` (``history["loss"]``: the
    loss of every step).

    ``make_batch(step)`` returns a batch, ``loss_fn(model, batch)`` the scalar loss.
    ``callback(step, history)`` is called after each update (e.g. to record gradient norms).
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    return train_loop(model, optimizer, steps, lambda step: loss_fn(model, make_batch(step)),
                      schedule=warmup_schedule(warmup_steps), grad_clip=grad_clip, callback=callback,
                      progress=progress, desc=desc)


# -- the language-model recipe (chapter 16) -------------------------------------------------

def warmup_cosine_schedule(warmup_steps: int, total_steps: int, min_ratio: float = 0.1) -> Callable[[int], float]:
    """Learning-rate multiplier for step ``s`` (0-based, as ``LambdaLR`` counts):

    * warmup, ``s < warmup_steps``: linear, ``(s + 1) / warmup_steps``, reaching 1 at the last warmup step;
    * decay: ``min_ratio + (1 - min_ratio) * (1 + cos(pi * t)) / 2`` with
      ``t = (s - warmup_steps) / (total_steps - warmup_steps)``, from 1 down to ``min_ratio`` at
      ``s = total_steps`` (and held there after).

    With ``min_ratio = 0`` and no warmup it is torch's ``CosineAnnealingLR`` with ``T_max = total_steps``.
    """
    check_schedule(warmup_steps, total_steps, min_ratio)

    def multiplier(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        t = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * t))
    return multiplier


def causal_lm_loss(logits: torch.Tensor, tokens: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Next-token cross-entropy: position t's logits predict token t + 1.

    ``logits`` (B, L, V) computed from ``tokens`` (B, L); the last position has no target and the
    first token is never predicted, so L - 1 predictions per row are scored (mean over all).
    """
    check_lm_logits(logits, tokens)
    V = logits.shape[-1]
    check_token_ids(tokens, V)
    check_number("label_smoothing", label_smoothing, 0, 1)
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1),  # (B*(L-1), V) vs (B*(L-1),)
                           label_smoothing=label_smoothing)


def perplexity(loss: float) -> float:
    """exp(mean cross-entropy in nats): the size of a uniform choice that is as surprised.

    A loss above ln(float max) ~ 709.8 gives ``inf`` (no finite perplexity), not an OverflowError."""
    loss = check_loss(loss)
    return math.exp(loss) if loss < 709.0 else float("inf")


def decay_parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW parameter groups: weight decay on the weight matrices of ``nn.Linear`` layers,
    none on biases, norm gains and embeddings (token and position tables).

    The choice (minGPT's): decay pulls weights toward 0, which regularizes a linear map but only
    rescales a norm's gain or a bias, and would shrink the vectors of rare tokens that get few
    gradient updates. A tied output head shares the embedding's tensor, so it is not decayed
    either: a parameter is decayed only if every module holding it is a linear layer.
    """
    decay: dict[int, bool] = {}
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            is_matrix = isinstance(module, nn.Linear) and name == "weight"
            decay[id(param)] = decay.get(id(param), True) and is_matrix
    params = list(model.parameters())  # unique tensors, tied ones once
    return [{"params": [p for p in params if decay[id(p)]], "weight_decay": weight_decay},
            {"params": [p for p in params if not decay[id(p)]], "weight_decay": 0.0}]


def make_adamw(model: nn.Module, lr: float, weight_decay: float = 0.1, betas=(0.9, 0.95)) -> torch.optim.AdamW:
    """AdamW over :func:`decay_parameter_groups` (betas as GPT-3 and nanoGPT use them)."""
    return torch.optim.AdamW(decay_parameter_groups(model, weight_decay), lr=lr, betas=betas)


def lm_batch(ids: torch.Tensor, batch_size: int, context: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``batch_size`` random windows of ``context`` consecutive tokens from the 1-D tensor ``ids``:
    (B, context). The model reads a window and each position predicts the next token in it."""
    check_int("batch_size", batch_size)
    check_int("context", context, 2)
    check_token_stream(ids, context)
    starts = torch.randint(0, len(ids) - context + 1, (batch_size,), generator=generator)
    return torch.stack([ids[s:s + context] for s in starts.tolist()])  # (B, context)


@torch.no_grad()
def evaluate_lm(model: nn.Module, ids: torch.Tensor, context: int, batch_size: int = 32,
                max_windows: int | None = None) -> float:
    """Mean next-token cross-entropy over consecutive, non-overlapping windows of ``context``
    tokens of ``ids`` (deterministic: the same number every call). Leaves the model in eval mode."""
    check_int("context", context, 2)
    check_int("batch_size", batch_size)
    if max_windows is not None:
        check_int("max_windows", max_windows)
    check_windows(ids, context)
    model.eval()
    n = len(ids) // context
    n = n if max_windows is None else min(n, max_windows)
    windows = ids[: n * context].view(n, context)  # (n, context)
    device = next(model.parameters()).device
    total = 0.0
    for chunk in windows.split(batch_size):
        chunk = chunk.to(device)
        total += causal_lm_loss(model(chunk), chunk).item() * len(chunk)  # mean over (b, context - 1) -> sum over rows
    return total / n


def train_lm(model: nn.Module, train_ids: torch.Tensor, val_ids: torch.Tensor, *, steps: int, batch_size: int = 16,
             context: int = 64, lr: float = 3e-3, warmup_steps: int = 0, min_lr_ratio: float = 0.1,
             weight_decay: float = 0.1, grad_clip: float | None = 1.0, label_smoothing: float = 0.0,
             eval_every: int = 50, eval_windows: int = 32, seed: int = 0, progress: bool = True,
             desc: str = "training", callback: Callable[[int, History], None] | None = None,
             stop_at: int | None = None) -> History:
    """The chapter-16 recipe on the loop core: random windows, causal LM loss (optionally label
    smoothed), AdamW with decay on linear weights only, warmup + cosine decay, gradient clipping.

    Every ``eval_every`` steps (and at the end) the plain cross-entropy on ``eval_windows`` fixed
    windows of the training and of the validation tokens is recorded, so the two curves are
    measured the same way (the overfitting curve). Returns a :class:`History` with per-step
    ``loss`` and ``lr``, the evaluations ``eval_steps``/``eval_train``/``eval_val``, and
    ``tokens_per_s`` (training steps only, evaluation excluded).

    ``stop_at`` (at most ``steps``) stops the run after its first ``stop_at`` steps, with the
    final evaluation at ``stop_at``: the schedule, the batches and the losses are those of the
    first ``stop_at`` steps of the full ``steps``-step run.
    """
    import time
    check_int("steps", steps)
    check_int("eval_every", eval_every)
    check_int("eval_windows", eval_windows)
    run_steps = steps if stop_at is None else check_int("stop_at", stop_at, 1, steps)
    generator = torch.Generator().manual_seed(seed)
    optimizer = make_adamw(model, lr, weight_decay)
    device = next(model.parameters()).device
    clock = {"start": 0.0, "train_s": 0.0}

    def evaluate(step):
        return {"eval_steps": step, "eval_train": evaluate_lm(model, train_ids, context, max_windows=eval_windows),
                "eval_val": evaluate_lm(model, val_ids, context, max_windows=eval_windows)}

    def step_fn(step):
        clock["start"] = time.perf_counter()
        batch = lm_batch(train_ids, batch_size, context, generator).to(device)  # (B, context)
        return causal_lm_loss(model(batch), batch, label_smoothing)

    def timed_callback(step, history):
        clock["train_s"] += time.perf_counter() - clock["start"]
        if callback is not None:
            callback(step, history)

    schedule = warmup_cosine_schedule(warmup_steps, steps, min_lr_ratio)
    history = train_loop(model, optimizer, run_steps, step_fn, schedule=schedule, grad_clip=grad_clip, evaluate=evaluate,
                         eval_every=eval_every, callback=timed_callback, record_lr=True, progress=progress, desc=desc)
    history["tokens_per_s"] = run_steps * batch_size * context / max(clock["train_s"], 1e-9)
    return history
