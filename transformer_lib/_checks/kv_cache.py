"""The KV cache's sizes (kv_cache): its formula's factors and a new cache's shape."""
from __future__ import annotations

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
