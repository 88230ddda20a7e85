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


# -- models, caches, generation and training (model, kv_cache, sampling, training, positional) --------

def check_token_ids(tokens, vocab_size: int, name: str = "tokens") -> None:
    """``tokens`` must be an integer (B, L) tensor of ids in ``[0, vocab_size)``.

    Float ids are refused rather than truncated (3.7 is not a token), and an id outside the table
    is named here instead of failing deep inside ``nn.Embedding``'s index lookup.
    """
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids (B, L), got {type(tokens).__name__}")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"{name} must be (B, L), got shape {tuple(tokens.shape)}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"{name} must lie in [0, {vocab_size}), got ids from {int(tokens.min())} "
                         f"to {int(tokens.max())}")


def check_prompt_ids(prompt_ids, vocab_size: int | None = None, name: str = "prompt_ids") -> None:
    """A prompt for generation: a non-empty 1-D sequence of integer ids (list or tensor), each in
    ``[0, vocab_size)`` when the vocabulary is known. A 2-D prompt is refused, not flattened."""
    ids = prompt_ids if isinstance(prompt_ids, torch.Tensor) else torch.as_tensor(prompt_ids)
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if ids.dim() != 1:
        raise ValueError(f"{name} must be one 1-D sequence of token ids, got shape {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise ValueError(f"{name} must hold at least one token")
    if vocab_size is not None and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(f"{name} must lie in [0, {vocab_size}), got ids from {int(ids.min())} to {int(ids.max())}")


def check_cache(cache, num_layers: int) -> None:
    """``cache`` must be None or a KV cache built for exactly ``num_layers`` layers.

    A cache with more layers would keep its unused layers at length 0 (``length`` is the minimum,
    so the context-length check would see 0); one with fewer would fail with an IndexError.
    """
    if cache is None:
        return
    layers = getattr(cache, "num_layers", None)
    if layers is None or not hasattr(cache, "update"):
        raise TypeError(f"cache must be a KVCache (see model.new_cache()), got {type(cache).__name__}")
    if layers != num_layers:
        raise ValueError(f"cache was built for {layers} layers but the model has {num_layers}; "
                         "make it with model.new_cache()")


def check_real(name: str, value, low: float | None = None, high: float | None = None,
               low_open: bool = False) -> None:
    """``value`` must be a finite real number (not a bool, not NaN) in ``[low, high]``
    (``(low, high]`` with ``low_open``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    bad = v != v or v in (float("inf"), float("-inf")) or (low is not None and (v <= low if low_open else v < low)) \
        or (high is not None and v > high)
    if bad:
        lo = "" if low is None else (f"> {low}" if low_open else f">= {low}")
        hi = "" if high is None else f"<= {high}"
        what = " and ".join(s for s in (lo, hi) if s) or "finite"
        raise ValueError(f"{name} must be a finite number {what}, got {value!r}")


def check_logits(logits, name: str = "logits") -> None:
    """Next-token logits: a floating tensor (V,) or (B, V) with no NaN (``-inf`` marks a removed
    token; ``+inf`` is refused too). NaN would otherwise become a plausible token: argmax picks it,
    and ``torch.multinomial`` fails with a message that names nothing the caller passed."""
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (V,) or (B, V), got {type(logits).__name__}")
    if logits.dim() not in (1, 2) or not logits.is_floating_point():
        raise ValueError(f"{name} must be a float tensor (V,) or (B, V), got {logits.dtype} of shape "
                         f"{tuple(logits.shape)}")
    if logits.shape[-1] == 0:
        raise ValueError(f"{name} must have at least one vocabulary entry, got shape {tuple(logits.shape)}")
    if torch.isnan(logits).any() or torch.isposinf(logits).any():
        raise ValueError(f"{name} contain NaN or +inf; the model's output is broken, no token can be chosen")
    if torch.isneginf(logits).all(dim=-1).any():
        raise ValueError(f"every entry of a row of {name} is -inf: no token is left to choose")


def check_id_list(name: str, ids, vocab_size: int) -> torch.Tensor:
    """Token ids already seen (1-D, any length, integers in ``[0, vocab_size)``); returned as a long
    tensor. An id of -1 would otherwise index the last vocabulary entry."""
    t = ids if isinstance(ids, torch.Tensor) else torch.as_tensor(list(ids))
    if t.numel() == 0:
        return t.reshape(0).long()
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {t.dtype}")
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    if int(t.min()) < 0 or int(t.max()) >= vocab_size:
        raise ValueError(f"{name} must lie in [0, {vocab_size}), got ids from {int(t.min())} to {int(t.max())}")
    return t.long()


def check_positions(positions: torch.Tensor, name: str = "positions") -> None:
    """Positions must be an integer tensor (a fractional position would be silently rounded
    elsewhere; negative ones are relative offsets, which RoPE defines)."""
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of integer positions, got {type(positions).__name__}")
    if positions.dtype.is_floating_point or positions.dtype.is_complex or positions.dtype == torch.bool:
        raise ValueError(f"{name} must be integers, got dtype {positions.dtype}")


def check_cache_layer(cache, layer) -> None:
    """An attention module's ``layer`` index must name one of ``cache``'s layers."""
    check_cache(cache, getattr(cache, "num_layers", -1))
    check_int("layer", layer, 0, cache.num_layers - 1)


def check_chat_messages(messages) -> list[dict]:
    """Chat messages: a non-empty list of ``{'role': 'system'|'user'|'assistant', 'content': str}``."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant") \
                or not isinstance(m.get("content"), str):
            raise ValueError(f"each message must be a dict with role 'system', 'user' or 'assistant' and a "
                             f"string content, got {m!r}")
    return list(messages)


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


# -- tokenization, tiled and sparse attention, masks, cost, forests, tasks, profiling ------------------
# (the checks these modules used to write for themselves: sparse/_checks.py, cost._check_sizes,
# forests._check_trees and _check_rho_sigma2 now live here)

def check_bool(name: str, value) -> None:
    """``value`` must be True or False (a string such as ``"no"`` would be truthy)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


def check_count(name: str, value, low: int = 1, high: int | None = None) -> int:
    """``value`` must be an integer (a Python or NumPy integer, not a bool) in ``[low, high]``;
    returned as an int. A non-number is a TypeError; a bool, a fraction or a value out of range a
    ValueError (2.5 trees, or True layers, are values a caller meant as numbers)."""
    import numbers

    if not isinstance(value, numbers.Number):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    check_int(name, value if isinstance(value, bool) or not isinstance(value, numbers.Integral) else int(value),
              low, high)  # a bool or a fraction: check_int's ValueError, with its wording
    return int(value)


def check_number(name: str, value, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False) -> float:
    """``value`` must be a finite real number (Python or NumPy, not a bool) within the bounds
    (``low_open`` / ``high_open`` exclude the end); returned as a float. NaN and inf are refused:
    they would compare False with every bound and pass a check written as ``if x < low``."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    v = float(value)
    too_low = low is not None and (v <= low if low_open else v < low)
    too_high = high is not None and (v >= high if high_open else v > high)
    if v != v or abs(v) == float("inf") or too_low or too_high:
        lo = "" if low is None else (f"> {low}" if low_open else f">= {low}")
        hi = "" if high is None else (f"< {high}" if high_open else f"<= {high}")
        what = " and ".join(s for s in (lo, hi) if s)
        raise ValueError(f"{name} must be a finite number{' ' + what if what else ''}, got {value!r}")
    return v


def check_choice(name: str, value, allowed) -> str:
    """``value`` must be one of ``allowed`` (a kernel name, a task, a model family)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, one of {', '.join(map(repr, allowed))}, got {type(value).__name__}")
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def check_str_list(name: str, value) -> tuple[str, ...]:
    """A list or tuple of strings (special tokens, labels); returned as a tuple. A bare string is a
    TypeError: iterating over ``"<eos>"`` would give five one-character strings."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list or tuple of str, got {type(value).__name__} {value!r}")
    for s in value:
        if not isinstance(s, str):
            raise TypeError(f"each entry of {name} must be a str, got {type(s).__name__} {s!r}")
    return tuple(value)


def check_finite(name: str, tensor: torch.Tensor) -> None:
    """A floating tensor must hold no NaN or inf (where a NaN would be turned into a number)."""
    if not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"{name} must be finite, got NaN or inf")


def check_self_attention_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int]:
    """Self-attention shapes of the sparse kernels: q, k, v all (B, H, L, d) with the same B, H and
    L and one dtype (no broadcasting, unlike :func:`check_qkv`: a band is defined over one sequence
    of queries and keys); returns (B, H, L, d_k)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape (B, H, L, d_k), got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if q.shape[:3] != k.shape[:3] or k.shape[:3] != v.shape[:3]:
        raise ValueError("sparse self-attention needs q, k, v with the same (B, H, L); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share d_k, got {q.shape[-1]} and {k.shape[-1]}")
    if q.dtype != k.dtype or k.dtype != v.dtype:
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    B, H, L, d_k = q.shape
    if L < 1 or d_k < 1 or v.shape[-1] < 1:
        raise ValueError(f"q, k, v need L >= 1 and d >= 1, got {tuple(q.shape)} and d_v = {v.shape[-1]}")
    return B, H, L, d_k


def check_key_mask(key_mask: torch.Tensor | None, B: int, L: int, device) -> torch.Tensor | None:
    """Accept (B, L) or the (B, 1, 1, L) of :func:`~transformer_lib.masks.padding_mask`; return (B, L)."""
    if key_mask is None:
        return None
    if not isinstance(key_mask, torch.Tensor):
        raise TypeError(f"key_mask must be a boolean torch.Tensor with True = real token, got {type(key_mask).__name__}")
    if key_mask.dtype != torch.bool:
        raise ValueError(f"key_mask must be boolean with True = real token, got dtype {key_mask.dtype}")
    if key_mask.dim() == 4 and key_mask.shape[1:3] == (1, 1):
        key_mask = key_mask[:, 0, 0, :]  # (B, 1, 1, L) -> (B, L)
    if key_mask.dim() != 2 or key_mask.shape[1] != L or key_mask.shape[0] not in (1, B):
        raise ValueError(f"key_mask must have shape (B, L) = ({B}, {L}) or (B, 1, 1, L), "
                         f"got {tuple(key_mask.shape)}")
    return key_mask.to(device).expand(B, L)


def check_sparse_call(q, k, v, key_mask, causal, scale, **sizes: int):
    """The checks every sparse attention call shares: q, k, v; ``causal`` a bool; ``scale`` None or
    a finite number > 0; each named size an integer >= 1; the key mask. Returns (B, H, L, key_mask
    as (B, L) or None)."""
    B, H, L, _ = check_self_attention_qkv(q, k, v)
    check_bool("causal", causal)
    if scale is not None:
        check_number("scale", scale, 0.0, low_open=True)
    for name, value in sizes.items():
        check_count(name, value)
    return B, H, L, check_key_mask(key_mask, B, L, q.device)


def check_positions_list(name: str, positions, L: int) -> list[int]:
    """Token positions (any iterable of integers) in ``[0, L)``, returned sorted without repeats;
    a fractional position is refused rather than truncated."""
    import numbers

    if isinstance(positions, (str, bytes)) or not hasattr(positions, "__iter__"):
        raise TypeError(f"{name} must be an iterable of integer positions, got {type(positions).__name__}")
    items = positions.tolist() if isinstance(positions, torch.Tensor) else list(positions)
    for p in items:
        if isinstance(p, bool) or not isinstance(p, numbers.Integral):
            raise ValueError(f"{name} must hold integer positions, got {p!r}")
        if not 0 <= p < L:
            raise ValueError(f"{name} must lie in [0, {L}), got {sorted(int(x) for x in items)}")
    return sorted(set(int(p) for p in items))


def check_sizes(n, d, expansion=4, batch=1) -> None:
    """The sizes of the cost model: sequence length n, width d and batch integers >= 1, the FFN's
    expansion a finite number > 0."""
    check_count("n", n)
    check_count("d", d)
    check_count("batch", batch)
    check_number("expansion", expansion, 0.0, low_open=True)


def check_trees(n_trees) -> int:
    """The number of trees B of a forest: an integer >= 1."""
    return check_count("n_trees (the number of trees B)", n_trees)


def check_rho_sigma2(rho, sigma2, n_trees: int) -> None:
    """A variance ``sigma2 >= 0`` and an average pairwise correlation ``rho`` that B predictors can
    have: ``-1/(B-1) <= rho <= 1`` (their covariance matrix must be positive semi-definite)."""
    check_number("sigma2 (a variance)", sigma2, 0.0)
    lowest = -1.0 / (n_trees - 1) if n_trees > 1 else -1.0
    r = check_number("rho", rho)
    if r > 1 or r < lowest - 1e-12:
        raise ValueError(f"rho must lie in [{lowest:.4g}, 1] for B = {n_trees} (B predictors cannot all be "
                         f"more negatively correlated than -1/(B-1)), got {rho!r}")


# --- quantized weights and decoding (chapter 19, transformer_lib.quantization) ---

def check_quantization_args(w, bits, group_size, granularity: str = "group", any_bits: bool = False) -> None:
    """A float (N, K) weight matrix, ``bits`` 8 or 4 (2..8 with ``any_bits``), a ``group_size``
    that is an even integer >= 2 dividing K, and a granularity 'tensor', 'channel' or 'group'."""
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"w must be a torch.Tensor, got {type(w).__name__}")
    if w.dim() != 2 or not w.is_floating_point() or w.numel() == 0:
        raise ValueError(f"w must be a non-empty 2-D float tensor (out_features, in_features), got {w.dtype} "
                         f"of shape {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()):
        raise ValueError("w must be finite (no NaN or inf): a scale computed from it would be too")
    for name, value in (("bits", bits), ("group_size", group_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    allowed = range(2, 9) if any_bits else (4, 8)
    if bits not in allowed:
        raise ValueError(f"bits must be {' or '.join(map(str, allowed)) if not any_bits else 'in 2..8'}, got {bits}")
    if not isinstance(granularity, str):
        raise TypeError(f"granularity must be a str, got {type(granularity).__name__}")
    if granularity not in ("tensor", "channel", "group"):
        raise ValueError(f"granularity must be 'tensor', 'channel' or 'group', got {granularity!r}")
    if granularity == "group" and (group_size < 2 or group_size % 2 or w.shape[1] % group_size):
        raise ValueError(f"group_size must be an even integer >= 2 that divides in_features = {w.shape[1]}, "
                         f"got {group_size}")


def check_matvec_input(x, in_features: int) -> None:
    """The input of a quantized linear layer: a float tensor whose last dimension is ``in_features``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point() or x.dim() == 0 or x.shape[-1] != in_features:
        raise ValueError(f"x must be a float tensor (..., {in_features}), got {x.dtype} of shape {tuple(x.shape)}")


def check_positive_reals(**values) -> None:
    """Each named value must be a positive finite real number (bytes, GB/s, rows, bits per weight)."""
    import math
    import numbers

    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
