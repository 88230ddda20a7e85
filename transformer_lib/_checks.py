"""Input checks shared by the whole library: each rule is written once, here.

Every public function or module checks its input once, at the door, and raises a ``ValueError``
that says what was expected; the private cores underneath (``attention._attention``, ...) trust
their input and do not check again. A multi-head call therefore checks its mask once, not once
per layer of helpers it passes through.
"""
from __future__ import annotations

import torch

__all__ = ["check_int", "check_positive", "check_tokens", "check_qkv", "check_mask", "check_square_maps",
           "check_probability", "check_positive_float", "check_floating"]


def check_int(name: str, value, low: int = 1, high: int | None = None) -> None:
    """``value`` must be an integer (not a bool) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or \
            (high is not None and value > high):
        if high is not None:
            what = f"an integer in [{low}, {high}]"
        else:
            what = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise ValueError(f"{name} must be {what}, got {value!r}")


def check_positive(name: str, value) -> None:
    """``value`` must be a positive integer (``>= 1``)."""
    check_int(name, value, 1)


def check_tokens(tokens: torch.Tensor, name: str = "tokens") -> None:
    """A batch of token ids must be (B, L)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"{name} must be (B, L), got shape {shape}")


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, ...]:
    """Queries (..., L_q, d_k), keys (..., L_k, d_k), values (..., L_k, d_v); return the scores' shape.

    The leading (batch, head) dimensions must broadcast; the result is (..., L_q, L_k).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_floating(name, t)
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError("q, k and v must have shape (..., L, d)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share d_k, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length L_k, got {k.shape[-2]} and {v.shape[-2]}")
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError as err:
        raise ValueError(
            f"batch/head dims of q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
            "do not broadcast") from err
    return tuple(batch) + (q.shape[-2], k.shape[-2])


def check_mask(mask: torch.Tensor | None, scores_shape: tuple[int, ...]) -> None:
    """``mask`` must be None, or boolean (True = may attend) and broadcastable to ``scores_shape``."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(
            f"mask must be boolean with True = may attend, got dtype {mask.dtype}; "
            "convert an additive float mask with transformer_lib.masks.from_torch_mha_mask")
    ok = mask.dim() <= len(scores_shape) and all(
        m in (1, s) for m, s in zip(reversed(mask.shape), reversed(scores_shape)))
    if not ok:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(scores_shape)} (..., L_q, L_k)")


def check_square_maps(weights: torch.Tensor) -> int:
    """Self-attention maps (..., L, L); return L."""
    if weights.dim() < 2 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be (..., L, L) self-attention maps, got shape {tuple(weights.shape)}")
    return weights.shape[-1]


def check_probability(name: str, value) -> None:
    """``value`` must be a real number in [0, 1] (a dropout rate, a top-p mass, ...)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")


def check_positive_float(name: str, value) -> None:
    """``value`` must be a finite real number > 0 (an epsilon, a temperature, a base ...)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < float(value) < float("inf"):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def check_floating(name: str, tensor: torch.Tensor) -> None:
    """``tensor`` must be a floating-point tensor (token ids go through an embedding first)."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        what = tensor.dtype if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise ValueError(f"{name} must be a floating-point tensor, got {what}")


def check_text(text, what: str = "text") -> bytes:
    """``text`` must be a str of valid Unicode; return its UTF-8 bytes.

    Python strings may hold lone surrogates (U+D800..U+DFFF, e.g. from ``"\\ud83d"``), which have
    no UTF-8 encoding: no tokenizer can round-trip them, so every text entry point refuses them here.
    """
    if not isinstance(text, str):
        raise ValueError(f"{what} must be a str, got {type(text).__name__}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        bad = text[err.start]
        raise ValueError(f"{what} contains a lone surrogate U+{ord(bad):04X} at index {err.start}; "
                         "only valid Unicode (no unpaired surrogates) can be encoded as UTF-8") from None


# --- distributed training (chapter 18, transformer_lib.distributed) ---

def check_distributed_run(strategy, steps, global_batch, world_size, seed) -> None:
    """A data-parallel run: a known strategy, positive step count, a global batch that the
    world size divides (every rank takes the same number of rows), an integer seed >= 0."""
    if not isinstance(strategy, str) or strategy not in ("hand", "ddp", "fsdp"):
        raise ValueError(f"strategy must be one of 'hand', 'ddp', 'fsdp', got {strategy!r}")
    check_int("steps", steps, 1)
    check_int("global_batch", global_batch, 1)
    check_int("world_size", world_size, 1)
    check_int("seed", seed, 0)
    if global_batch % world_size:
        raise ValueError(f"global_batch must be divisible by the number of processes: {global_batch} rows "
                         f"do not split evenly over {world_size} ranks")


def check_parallel_split(name: str, size: int, world_size: int) -> None:
    """Tensor parallelism splits ``size`` (hidden units or heads) evenly over the ranks."""
    check_int(name, size, 1)
    check_int("world_size", world_size, 1)
    if size % world_size:
        raise ValueError(f"{name} = {size} must be divisible by the tensor-parallel world size {world_size}")


def check_pipeline(stages, micro_batches) -> None:
    """A pipeline has >= 1 stage and >= 1 micro-batch."""
    check_int("stages", stages, 1)
    check_int("micro_batches", micro_batches, 1)
