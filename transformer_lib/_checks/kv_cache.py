"""The KV cache's sizes (kv_cache): its formula's factors and a new cache's shape."""
from __future__ import annotations

import torch

from .scalars import check_int


def check_cache_sizes(num_layers, num_kv_heads, head_dim, bytes_per_element) -> None:
    """Each factor of ``cache_bytes_per_token`` must be a positive integer (a bool or a float is
    refused: 2.5 heads or ``True`` layers are mistakes, not sizes)."""
    for name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim),
                        ("bytes_per_element", bytes_per_element)):
        check_int(name, value)


def check_new_cache(num_layers, initial_capacity) -> None:
    """A new ``KVCache`` needs at least one layer and room for at least one position."""
    check_int("num_layers", num_layers)
    check_int("initial_capacity", initial_capacity)


def check_cache_update(layer, k, v, cached_keys: list, cached_values: list | None = None) -> None:
    """New keys and values for one layer: ``layer`` indexes ``cached_keys`` (one buffer or None
    per layer), k (B, H_kv, L, d_k) and v (B, H_kv, L, d_v) (d_v may differ: latent attention
    caches its latent and its rotary key), and once the layer holds keys the same B, H_kv and d_k."""
    check_int("layer", layer, 0, len(cached_keys) - 1)
    cached_k = cached_keys[layer]
    if k.dim() != 4 or v.dim() != 4 or k.shape[:3] != v.shape[:3]:
        raise ValueError(f"expected k (B, H_kv, L, d_k) and v (B, H_kv, L, d_v), got {tuple(k.shape)} and {tuple(v.shape)}")
    if cached_k is not None and (cached_k.shape[:2] != k.shape[:2] or cached_k.shape[3] != k.shape[3]):
        raise ValueError(f"cached keys are (B, H_kv, ., d) = {tuple(cached_k.shape)}, new keys {tuple(k.shape)} do not fit")
    cached_v = None if cached_values is None else cached_values[layer]
    if cached_v is not None and cached_v.shape[3] != v.shape[3]:
        raise ValueError(f"cached values are (B, H_kv, ., d_v) = {tuple(cached_v.shape)}, new values {tuple(v.shape)} do not fit")


def check_reorder_index(index, batch: int | None) -> None:
    """Beam search keeps batch rows ``index``: a 1-D integer tensor of rows in [0, batch) (any
    rows while the cache is empty, ``batch`` None)."""
    if not isinstance(index, torch.Tensor) or index.dim() != 1 or index.dtype.is_floating_point \
            or index.dtype == torch.bool:
        raise ValueError(f"index must be a 1-D integer tensor of batch rows, got {index!r}")
    if batch is not None and index.numel() and (int(index.min()) < 0 or int(index.max()) >= batch):
        raise ValueError(f"index must hold batch rows in [0, {batch}), got {index.tolist()}")


def check_step_times(ids, contexts, repeat) -> list[int]:
    """Context lengths (integers >= 1, at least one), ``repeat`` >= 1 and ``ids`` (1, L) with a
    token after the longest context. Returns the contexts as a list."""
    contexts = list(contexts)
    for c in contexts:
        check_int("contexts", c)
    check_int("repeat", repeat)
    if not contexts or ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] <= max(contexts):
        raise ValueError(f"ids must be (1, L) with L > max(contexts) = {max(contexts, default=None)}, "
                         f"got {tuple(ids.shape)}")
    return contexts
