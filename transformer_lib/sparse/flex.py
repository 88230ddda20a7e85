"""The sliding window through ``torch.nn.attention.flex_attention``, compiled, with a block mask.

flex_attention computes only the tiles its ``BlockMask`` lists: tiles the band covers completely
are "full" (no mask is evaluated there), tiles it only crosses are "partial" (the ``mask_mod``
decides per pair), all others are skipped. ``create_block_mask`` would find them by evaluating
the mask on all n^2 pairs (quadratic in eager mode); :func:`window_block_mask`
derives them from the window's arithmetic instead (:func:`~.patterns.window_block_layout`) and
caches the layout. Tiles are 64 x 64 on a CPU, 128 x 128 (torch's default) elsewhere.

Compiling takes tens of seconds the first time on a CPU, so the flex kernel is opt-in. If
``torch.compile``, a C compiler or the device cannot run it, the first call warns once and
returns None, and :func:`~.window.sliding_window_attention` falls back to the blocked kernel.

Where ``ATEN_CPU_CAPABILITY`` is set (``make test`` and ``make chapters`` set it to ``avx2``), the
compiled kernels are cached in a folder of their own (:func:`_cache_per_capability`): inductor's
cache key leaves that variable out (CHANGELOG.md tells how it showed).
"""
from __future__ import annotations

import functools
import os
import warnings

import torch

from .._checks import check_bool, check_int, check_window_key_mask
from .._extensions import Kernel
from .patterns import FLEX_CPU_BLOCK_SIZE, FLEX_GPU_BLOCK_SIZE, _window_block_layout

__all__ = ["window_block_mask", "flex_available"]

# why flex failed per (device type, dtype): a failure is remembered so that the (slow) compile is
# not retried on every call, and warned about once
KERNEL = Kernel("flex_attention kernel", "the blocked kernel")


def _flex_block_size(device) -> int:
    return FLEX_CPU_BLOCK_SIZE if torch.device(device).type == "cpu" else FLEX_GPU_BLOCK_SIZE


@functools.lru_cache(maxsize=32)
def _cached_window_layout(L: int, half: int, causal: bool, block_size: int):
    return _window_block_layout(L, half, causal, block_size)


def _pack_blocks(blocks: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(nb, nb) booleans -> BlockMask's (1, 1, nb) counts and (1, 1, nb, nb) column indices, listed first."""
    counts = blocks.sum(dim=1, dtype=torch.int32)  # (nb,)
    order = torch.argsort((~blocks).to(torch.int8), dim=1, stable=True).to(torch.int32)  # True columns first
    return counts[None, None].to(device), order[None, None].contiguous().to(device)


def _window_mask_mod(half: torch.Tensor, right: torch.Tensor, key_mask: torch.Tensor | None = None):
    """flex's mask_mod for the band, optionally with padding. The parameters are captured
    *tensors*, so one compiled kernel serves every window, causal or not, without recompiling
    (with and without ``key_mask`` are two kernels)."""
    if key_mask is None:
        def mask_mod(b, h, q_idx, kv_idx):
            diff = q_idx - kv_idx
            return (diff <= half) & (diff >= -right)
    else:
        def mask_mod(b, h, q_idx, kv_idx):
            diff = q_idx - kv_idx
            return (diff <= half) & (diff >= -right) & key_mask[b, kv_idx]
    return mask_mod


def window_block_mask(L: int, window: int, causal: bool = False, key_mask: torch.Tensor | None = None,
                      device=None, block_size: int | None = None):
    """flex_attention's ``BlockMask`` for the sliding window, built without touching n^2 pairs.

    ``key_mask`` (B, L), True = real token, adds padding: a tile holding a padded key is demoted
    from full to partial so that the mask_mod removes the padding. ``block_size`` defaults to 64
    on a CPU and 128 elsewhere.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    check_bool("causal", causal)
    check_window_key_mask(key_mask, L)
    return _window_block_mask(check_int("L", L), check_int("window", window) // 2, causal, key_mask, device,
                              _flex_block_size(device) if block_size is None else check_int("block_size", block_size))


def _window_block_mask(L: int, half: int, causal: bool, key_mask, device, block_size: int):
    from torch.nn.attention.flex_attention import BlockMask

    any_blocks, full_blocks = _cached_window_layout(L, half, causal, block_size)
    if key_mask is not None:
        pad = torch.zeros(key_mask.shape[0], -(-L // block_size) * block_size - L, dtype=torch.bool,
                          device=key_mask.device)
        tiles_real = torch.cat([key_mask, pad], dim=1).view(key_mask.shape[0], -1, block_size)  # (B, nb, b)
        complete = tiles_real.all(dim=2).all(dim=0).cpu()  # (nb,) no padding in this key tile
        full_blocks = full_blocks & complete[None, :]
    partial = any_blocks & ~full_blocks
    kv_num, kv_idx = _pack_blocks(partial, device)
    full_num, full_idx = _pack_blocks(full_blocks, device)
    mod = _window_mask_mod(torch.tensor(half, device=device), torch.tensor(0 if causal else half, device=device),
                           key_mask)
    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=block_size,
                                    mask_mod=mod, seq_lengths=(L, L))


@functools.lru_cache(maxsize=16)
def _cached_block_mask(L: int, half: int, causal: bool, device: str):
    return _window_block_mask(L, half, causal, None, torch.device(device), _flex_block_size(device))


def _cache_per_capability() -> None:
    """Give each ``ATEN_CPU_CAPABILITY`` its own inductor cache folder, unless the user chose one:
    inductor's cache key leaves the variable out, so a kernel compiled under one setting would be
    reused under another."""
    cap = os.environ.get("ATEN_CPU_CAPABILITY")
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # another torch: its cache layout is not the one this works around
        return
    default, chosen = default_cache_dir(), os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if cap and (chosen is None or os.path.abspath(chosen) == os.path.abspath(default)):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{default}_{cap}"


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    _cache_per_capability()
    from torch.nn.attention.flex_attention import flex_attention
    # dynamic=False: one kernel per shape, the fastest code; the window lives in tensors
    return torch.compile(flex_attention, dynamic=False)


def flex_window(q, k, v, half: int, causal: bool, key_mask, scale) -> torch.Tensor | None:
    """The compiled flex path (unchecked), or None (after one warning) where it cannot run."""
    key = (q.device.type, q.dtype)
    if key in KERNEL.errors:
        return None
    try:
        if q.device.type == "mps":
            raise RuntimeError("flex_attention does not support MPS")
        L = q.shape[2]
        block_mask = _cached_block_mask(L, half, causal, str(q.device)) if key_mask is None \
            else _window_block_mask(L, half, causal, key_mask, q.device, _flex_block_size(q.device))
        return _compiled_flex()(q, k, v, block_mask=block_mask, scale=scale)
    except Exception as err:  # torch.compile missing a C compiler, an unsupported device or dtype, ...
        KERNEL.fail(err, key, stacklevel=5)
        return None


def flex_available(device="cpu", dtype=torch.float32) -> tuple[bool, str]:
    """Try the compiled flex path once on a tiny input; return (works, reason). Slow the first time
    (it compiles); afterwards the answer is remembered."""
    q = torch.randn(1, 1, 256, 16, dtype=dtype, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        flex_window(q, q, q, 8, False, None, None)
    return KERNEL.status((q.device.type, dtype))
