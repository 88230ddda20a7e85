"""Positional information: sinusoidal, learned, rotary (RoPE) and ALiBi.

Self-attention by itself is permutation-equivariant: shuffle the tokens and the outputs shuffle
the same way. Every scheme here breaks that symmetry in a different place:

* sinusoidal / learned: add a vector to each token embedding before the first layer;
* RoPE: rotate each (query, key) feature pair by an angle proportional to the position, so the
  score q_i . k_j depends on the offset i - j only;
* ALiBi: add ``-slope_h * |i - j|`` to the scores of head h, a linear distance penalty.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from ._checks import (check_choice, check_divisible, check_int, check_number, check_offset, check_positions,
                      check_positions_fit, check_probability, check_rotary_positions)

__all__ = [
    "position_modules",
    "sinusoidal_encoding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "apply_rotary",
    "rotary_angles",
    "rotate",
    "ROTARY_STYLES",
    "alibi_slopes",
    "alibi_bias",
    "offset_positions",
]


def offset_positions(offset, L: int, device=None) -> torch.Tensor:
    """The positions of L new tokens that start at ``offset``: (L,) for an int offset (every row
    alike), (B, L) for a (B,) tensor of offsets, one per row (a batch of prompts of different
    lengths, chapter 28: row i's next token sits at its own length)."""
    steps = torch.arange(L, device=device if not isinstance(offset, torch.Tensor) else offset.device)
    if isinstance(offset, torch.Tensor):
        return offset[:, None] + steps  # (B, 1) + (L,) -> (B, L)
    return offset + steps  # (L,)


def sinusoidal_encoding(length: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(length, d_model) matrix of the paper:

        PE[pos, 2i] = sin(pos / base^(2i/d)),   PE[pos, 2i+1] = cos(pos / base^(2i/d))

    Wavelengths grow geometrically from 2*pi (i = 0) to 2*pi * base (i -> d/2).
    """
    check_int("length", length)
    check_int("d_model", d_model)
    check_number("base", base, 0, low_open=True)
    check_divisible("d_model", d_model, 2, why=" (sin/cos pairs)")
    pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)  # (L, 1)
    inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)  # (d/2,)
    angles = pos * inv_freq  # (L, d/2)
    pe = torch.zeros(length, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal matrix to (B, L, d_model) embeddings. No parameters, any length
    up to ``max_len`` (which only sizes the cache; it grows on demand)."""

    def __init__(self, d_model: int, max_len: int = 4096, dropout: float = 0.0):
        super().__init__()
        check_int("d_model", d_model)
        check_int("max_len", max_len)
        check_probability("dropout", dropout)
        self.d_model = d_model
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offset=0) -> torch.Tensor:
        """``offset``: an int, or one per row (a (B,) tensor: rows of different lengths)."""
        L = x.shape[1]
        if isinstance(offset, torch.Tensor):  # (B, L) positions -> (B, L, D) rows of the table
            check_offset(offset, x.shape[0])
            positions = offset_positions(offset.to(self.pe.device), L)
            if positions.numel() and int(positions.max()) >= self.pe.shape[0]:
                self.pe = sinusoidal_encoding(int(positions.max()) + 1, self.d_model).to(self.pe.device)
            return self.dropout(x + self.pe[positions].to(x.dtype))
        check_int("offset", offset, 0)
        if offset + L > self.pe.shape[0]:  # a fixed formula: extend rather than fail
            self.pe = sinusoidal_encoding(offset + L, self.d_model).to(self.pe.device)
        return self.dropout(x + self.pe[offset:offset + L].to(x.dtype))  # (B, L, D) + (L, D)


class LearnedPositionalEmbedding(nn.Module):
    """A trainable table of ``max_len`` position vectors (BERT, GPT-2). It has a hard length limit:
    position ``max_len`` has no row, so a longer input raises a ValueError."""

    def __init__(self, max_len: int, d_model: int, dropout: float = 0.0):
        super().__init__()
        check_int("max_len", max_len)
        check_int("d_model", d_model)
        check_probability("dropout", dropout)
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offset=0) -> torch.Tensor:
        """``offset``: an int, or one per row (a (B,) tensor: rows of different lengths)."""
        L = x.shape[1]
        if isinstance(offset, torch.Tensor):
            check_offset(offset, x.shape[0])
            positions = offset_positions(offset.to(x.device), L)  # (B, L)
            check_positions_fit(int(positions.max()) + 1 if positions.numel() else 0, self.max_len)
            return self.dropout(x + self.embedding(positions))  # (B, L, D) + (B, L, D)
        check_int("offset", offset, 0)
        check_positions_fit(offset + L, self.max_len)
        positions = torch.arange(offset, offset + L, device=x.device)
        return self.dropout(x + self.embedding(positions))  # (B, L, D) + (L, D)


ROTARY_STYLES = ("interleaved", "halves")


def rotary_angles(positions: torch.Tensor, d: int, base: float = 10000.0) -> torch.Tensor:
    """(L, d/2) angles ``pos * theta_i``, ``theta_i = 1 / base^(2i/d)`` (float32). Positions are
    integers >= 0: a fractional position is refused, not rounded."""
    check_positions(positions)
    check_int("d", d)
    check_number("base", base, 0, low_open=True)
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, device=positions.device, dtype=torch.float32) / d)  # (d/2,)
    return positions.to(torch.float32).unsqueeze(-1) * inv_freq  # (L, d/2)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str = "interleaved") -> torch.Tensor:
    """Rotate the feature pairs of ``x`` (..., L, d) by the angles whose cos/sin are (L, d/2).

    ``style="interleaved"``: pairs are neighbours (x[2i], x[2i+1]), as in the RoFormer paper and
    llama.cpp's GGUF layout (and Meta's original Llama code, which views neighbours as complex
    numbers). ``style="halves"``: pairs are (x[i], x[i + d/2]), as in Hugging Face's Llama /
    SmolLM2 checkpoints ("rotate_half"; the conversion to that format permutes W^Q and W^K).
    The two are the same rotation up to a fixed permutation of the features, which a model folds
    into its W^Q and W^K (chapter 17)."""
    check_choice("style", style, ROTARY_STYLES)
    if style == "interleaved":
        x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (..., L, d/2) each
        pairs = (x_even * cos - x_odd * sin, x_even * sin + x_odd * cos)  # (..., L, d/2) each
        return torch.stack(pairs, dim=-1).flatten(-2)  # (..., L, d/2, 2) -> (..., L, d): pairs side by side
    x1, x2 = x.chunk(2, dim=-1)  # "halves": (..., L, d/2) each
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (..., L, d)


def apply_rotary(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0,
                 style: str = "interleaved") -> torch.Tensor:
    """Rotate the feature pairs of ``x`` (..., L, d) by ``pos * theta_i``, ``theta_i = base^(-2i/d)``
    (pairs as ``style`` says: see :func:`rotate`). Because rotations compose,
    <R(m) q, R(n) k> = <q, R(n - m) k>."""
    check_positions(positions)
    check_rotary_positions(x, positions)
    d = x.shape[-1]
    angles = rotary_angles(positions, d, base)  # (L, d/2)
    return rotate(x, angles.cos().to(x.dtype), angles.sin().to(x.dtype), style)


class RotaryEmbedding(nn.Module):
    """RoPE (Su et al. 2021) as a module: ``rope(x, offset=0)`` rotates (..., L, head_dim) by positions
    ``offset .. offset + L - 1``. Plug it into :class:`MultiHeadAttention` via ``rotary=``."""

    def __init__(self, head_dim: int, base: float = 10000.0, style: str = "interleaved"):
        super().__init__()
        check_int("head_dim", head_dim)
        check_number("base", base, 0, low_open=True)
        check_divisible("head_dim", head_dim, 2, why=" (RoPE rotates pairs)")
        check_choice("style", style, ROTARY_STYLES)
        self.head_dim, self.base, self.style = head_dim, base, style
        self._table = None  # (cos, sin), each (L_max, d/2): decoding reuses it token after token

    def cos_sin(self, end: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of the angles of positions 0 .. end - 1, (end, d/2) each (a growing cache)."""
        if self._table is None or self._table[0].shape[0] < end or self._table[0].device != torch.device(device) \
                or self._table[0].dtype != dtype:
            angles = rotary_angles(torch.arange(max(end, 256), device=device), self.head_dim, self.base)
            self._table = (angles.cos().to(dtype), angles.sin().to(dtype))
        return self._table

    def forward(self, x: torch.Tensor, offset=0) -> torch.Tensor:
        """``offset``: an int, or one per row of a (B, H, L, d) ``x``, a (B,) tensor (rows of
        different lengths in one batch: each row's tokens rotate by their own positions)."""
        if isinstance(offset, torch.Tensor):
            check_offset(offset, x.shape[0] if x.dim() == 4 else None)
            L = x.shape[-2]
            positions = offset_positions(offset.to(x.device), L)  # (B, L)
            cos, sin = self.cos_sin(int(positions.max()) + 1 if positions.numel() else 1, x.device, x.dtype)
            return rotate(x, cos[positions][:, None], sin[positions][:, None], self.style)  # (B, 1, L, d/2) each
        check_int("offset", offset, 0)
        L = x.shape[-2]
        cos, sin = self.cos_sin(offset + L, x.device, x.dtype)
        return rotate(x, cos[offset:offset + L], sin[offset:offset + L], self.style)  # rows = positions


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes (Press et al. 2022): the geometric sequence 2^(-8/h), 2^(-16/h), ...
    For a head count that is not a power of two, the paper's interleaving rule is used."""
    check_int("num_heads", num_heads)

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(num_heads).is_integer():
        slopes = power_of_two(num_heads)
    else:
        closest = 2 ** math.floor(math.log2(num_heads))
        slopes = power_of_two(closest) + power_of_two(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes)


def alibi_bias(num_heads: int, L_q: int, L_k: int | None = None, device=None) -> torch.Tensor:
    """(1, H, L_q, L_k) additive bias ``-slope_h * |i - j|`` (queries aligned to the end of the keys)."""
    L_k = L_q if L_k is None else L_k
    check_int("L_q", L_q)
    check_int("L_k", L_k, L_q)  # queries are the last L_q of the keys' positions
    i = torch.arange(L_q, device=device).unsqueeze(1) + (L_k - L_q)  # (L_q, 1)
    j = torch.arange(L_k, device=device).unsqueeze(0)  # (1, L_k)
    distance = (i - j).abs().float()  # (L_q, L_k)
    slopes = alibi_slopes(num_heads).to(device)  # (H,)
    return -(slopes[:, None, None] * distance).unsqueeze(0)  # (1, H, L_q, L_k)


def position_modules(config) -> tuple[nn.Module | None, "RotaryEmbedding | None"]:
    """What a model's ``positional`` switch builds (a ModelConfig or a Seq2SeqConfig): the table
    added to the embeddings ('sinusoidal', 'learned'; None otherwise) and the rotation its
    attentions share ('rope': one RotaryEmbedding, no weights, only a table of angles; else None).
    ALiBi and 'none' build neither (ALiBi is a bias on the scores)."""
    table = None
    if config.positional == "sinusoidal":
        table = SinusoidalPositionalEncoding(config.d_model, config.max_len, config.dropout)
    elif config.positional == "learned":
        table = LearnedPositionalEmbedding(config.max_len, config.d_model, config.dropout)
    rotary = RotaryEmbedding(config.d_model // config.num_heads, base=config.rope_base, style=config.rotary_style) \
        if config.positional == "rope" else None
    return table, rotary
