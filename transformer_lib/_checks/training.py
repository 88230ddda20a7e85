"""Training a language model (chapter 16, transformer_lib.training): schedules, the LM loss,
perplexity, token streams cut into windows."""
from __future__ import annotations

import torch


def check_schedule(warmup_steps, total_steps, min_ratio) -> None:
    """Integers ``0 <= warmup_steps < total_steps`` and a floor ``min_ratio`` in [0, 1]."""
    if not (isinstance(warmup_steps, int) and isinstance(total_steps, int)) or warmup_steps < 0 or total_steps <= warmup_steps:
        raise ValueError(f"need integers 0 <= warmup_steps < total_steps, got {warmup_steps!r} and {total_steps!r}")
    if not 0.0 <= min_ratio <= 1.0:
        raise ValueError(f"min_ratio must lie in [0, 1], got {min_ratio}")


def check_lm_logits(logits, tokens) -> None:
    """Float ``logits`` (B, L, V) read from ``tokens`` (B, L), at least 2 tokens per row (one to
    read, one to predict)."""
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() != 3 or \
            not isinstance(tokens, torch.Tensor) or tokens.shape != logits.shape[:2]:
        raise ValueError(f"expected float logits (B, L, V) and tokens (B, L), got {tuple(getattr(logits, 'shape', ()))}"
                         f" and {tuple(getattr(tokens, 'shape', ()))}")
    if tokens.shape[1] < 2:
        raise ValueError("need at least 2 tokens per row: one to read and one to predict")


def check_loss(loss) -> float:
    """A mean cross-entropy: a real number (or one-element tensor) >= 0, not NaN; returned as a float."""
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        loss = loss.item()
    if isinstance(loss, bool) or not isinstance(loss, (int, float)):
        raise TypeError(f"loss must be a real number, got {type(loss).__name__}")
    if loss != loss or loss < 0:
        raise ValueError(f"loss must be a cross-entropy >= 0, got {loss!r}")
    return loss


def check_token_stream(ids, context: int) -> None:
    """``ids`` a 1-D token tensor with more than ``context`` tokens (a window to read and its next token)."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or len(ids) <= context:
        raise ValueError(f"ids must be a 1-D token tensor longer than context = {context}, got shape "
                         f"{tuple(getattr(ids, 'shape', ()))}")


def check_windows(ids, context: int) -> None:
    """``ids`` long enough for at least one window of ``context`` (>= 2) tokens."""
    if len(ids) // context < 1 or context < 2:
        raise ValueError(f"need at least one window of context = {context} (>= 2) tokens, got {len(ids)} tokens")


def check_trainable(name: str, model, hint: str) -> list:
    """``model`` must have at least one parameter that requires grad; returns those parameters.
    ``hint`` tells the caller what to do (``"call add_lora(model, ...) first"``)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"{name} has no trainable parameters (none requires grad): {hint}")
    return params
