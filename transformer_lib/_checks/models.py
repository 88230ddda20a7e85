"""Models and their KV caches (model, kv_cache, sampling)."""
from __future__ import annotations

from .scalars import check_choice, check_int


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


def check_cache_layer(cache, layer) -> None:
    """An attention module's ``layer`` index must name one of ``cache``'s layers."""
    check_cache(cache, getattr(cache, "num_layers", -1))
    check_int("layer", layer, 0, cache.num_layers - 1)


POSITIONAL = ("sinusoidal", "learned", "rope", "alibi", "none")


def check_decoder_options(positional, ffn: bool, num_experts) -> None:
    """A decoder-only model's switches: a known positional scheme; experts (``num_experts``)
    replace the blocks' FFN, so they need ``ffn=True``."""
    check_choice("positional", positional, POSITIONAL)
    if num_experts is not None and not ffn:
        raise ValueError("num_experts needs ffn=True: experts replace the blocks' FFN")


def check_context_length(tokens, cache, context_length) -> None:
    """Cached plus new positions must fit ``context_length``: a strict model's ``max_len`` (None: no limit)."""
    if context_length is not None and tokens.dim() == 2:
        past = 0 if cache is None else getattr(cache, "length", 0)
        if past + tokens.shape[1] > context_length:
            raise ValueError(f"tokens: {past + tokens.shape[1]} positions exceed the context length "
                             f"{context_length} ({past} cached + {tokens.shape[1]} new)")
