"""Reading a GGUF file: metadata, dequantized float32 tensors, and its byte-level BPE tokenizer.

GGUF is llama.cpp's single-file format: a header of typed key/value metadata (architecture,
sizes, the tokenizer's vocabulary and merges, a chat template) followed by tensors, most of them
quantized in blocks (Q4_1: 32 weights share a float16 scale and minimum, 4 bits each). The
header is read by :class:`~.gguf_file.GGUFFile` (plain parsing and a memory map: no pickle, no
code execution; the ``gguf`` package's own reader, maintained with llama.cpp, is the reference it is
tested against), and :func:`gguf.quants.dequantize` turns each block format back into float32.

We keep the file's tensor layout: an (out, in) matrix as ``nn.Linear`` stores it, and GGUF's
names (``blk.0.attn_q.weight``). One quirk matters for attention (chapter 17, "Grouped-query
attention and RoPE in a real model"): llama.cpp's converter permutes the rows of W^Q and W^K inside each head so that its
rotary kernel can rotate *adjacent pairs* (x0, x1), (x2, x3), ... while the original checkpoint
rotates *halves* (x_i, x_{i + d/2}). :func:`unpermute_rotary_rows` undoes that permutation.

Used by :mod:`transformer_lib.pretrained.smollm2`; general to any llama-architecture GGUF.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._checks.pretrained import check_bpe_metadata, check_gguf_file, check_rotary_rows

__all__ = ["GGUF_INSTALL_HINT", "read_gguf", "read_gguf_metadata", "read_gguf_tensors", "unpermute_rotary_rows",
           "bpe_tokenizer_from_gguf", "PRE_TOKENIZERS"]

GGUF_INSTALL_HINT = "pip install gguf tokenizers"

# GGUF's tokenizer.ggml.token_type codes (llama.cpp's llama_token_type)
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3
# The big tokenizer arrays (49,152 strings each), left out by include_tokenizer=False.
_LARGE_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
               "tokenizer.ggml.scores")


def _require(module: str, what: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ImportError(f"{what} needs the package '{module}', which is not installed. "
                          f"Install it with:\n    {GGUF_INSTALL_HINT}")


def _reader(path: str | Path):
    _require("gguf", "reading a GGUF file")
    from .gguf_file import GGUFFile
    return GGUFFile(check_gguf_file(path))  # the header parsed, the tensors a memory map


def read_gguf(path: str | Path, dtype: torch.dtype = torch.float32) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(metadata, tensors)`` of a GGUF file from one parse: see :func:`read_gguf_metadata` and
    :func:`read_gguf_tensors`."""
    reader = _reader(path)
    return _metadata(reader, True), _tensors(reader, dtype)


def read_gguf_metadata(path: str | Path, include_tokenizer: bool = True) -> dict[str, Any]:
    """All key/value metadata of a GGUF file as plain Python values (str, int, float, bool, list).

    ``include_tokenizer=False`` skips the large vocabulary/merges arrays (faster)."""
    return _metadata(_reader(path), include_tokenizer)


def _metadata(reader, include_tokenizer: bool) -> dict[str, Any]:
    return {key: value for key, value in reader.metadata.items() if include_tokenizer or key not in _LARGE_KEYS}


def read_gguf_tensors(path: str | Path, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Every tensor of the file, dequantized to ``dtype``, by GGUF name.

    Shapes are PyTorch's: GGUF lists dimensions fastest-first ([576, 49152] for the embedding),
    the arrays ``gguf`` returns are already row-major (49152, 576) = (vocab, d_model)."""
    return _tensors(_reader(path), dtype)


def _tensors(reader, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Each tensor dequantized: the block formats the library writes itself (Q4_1 and Q8_0,
    SmolLM2's; ``quantization.formats.FORMATS``) by its own decoder,
    :func:`transformer_lib.quantization.formats.dequantize_blocks`, in one pass over a whole tensor
    (the same float32 arithmetic as ``gguf.quants.dequantize``, which walks 16 rows at a time and
    takes ~2 s of CPU for SmolLM2; tests/test_gguf_file.py holds them equal), any other block
    format by ``gguf.quants.dequantize``."""
    from gguf.quants import dequantize

    from ..quantization.formats import FORMATS, dequantize_blocks
    tensors = {}
    for t in reader.tensors:
        rows = tuple(reversed(t.shape))  # GGUF lists dimensions fastest first
        fmt = t.tensor_type.name.lower()
        if fmt in FORMATS.values():  # (rows ..., bytes per row) of whole 32-weight blocks
            blocks = torch.from_numpy(np.array(t.data, dtype=np.uint8)).reshape(-1, t.data.shape[-1])
            tensor = dequantize_blocks(blocks, fmt, 32).reshape(rows)
        else:
            array = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)  # row-major, shape = rows
            tensor = torch.from_numpy(array.copy() if not array.flags.writeable else array)  # F32: a view of the map
        tensors[t.name] = tensor.to(dtype)
    return tensors


def unpermute_rotary_rows(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's row permutation of W^Q / W^K (``num_heads`` = heads of that projection).

    The converter regrouped each head's d rows from halves [a_0..a_{d/2-1} | b_0..b_{d/2-1}] into
    pairs [a_0, b_0, a_1, b_1, ...]; this puts them back, so the "halves" rotary convention of the
    original checkpoint applies. (Keeping the file's order and rotating adjacent pairs instead
    gives the same scores: q . k is unchanged when q and k are permuted the same way.)"""
    check_rotary_rows(weight, num_heads)
    rows = weight.shape[0]
    d_half = rows // num_heads // 2
    w = weight.reshape(num_heads, d_half, 2, *weight.shape[1:])  # (H, d/2, pair, ...)
    return w.transpose(1, 2).reshape(weight.shape)  # (H, pair, d/2, ...) -> (H * d, ...)


def _smollm_pre_tokenizer():
    # llama.cpp's "smollm" pre-tokenizer (and the original tokenizer.json): every digit on its
    # own, then GPT-2's byte-level split (words with their leading space, numbers, punctuation).
    from tokenizers import pre_tokenizers
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])


def _gpt2_pre_tokenizer():
    from tokenizers import pre_tokenizers
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


# tokenizer.ggml.pre -> the pre-tokenizer its merges were learned with
PRE_TOKENIZERS = {"smollm": _smollm_pre_tokenizer, "gpt2": _gpt2_pre_tokenizer, "default": _gpt2_pre_tokenizer}


def bpe_tokenizer_from_gguf(meta: dict[str, Any]):
    """A ``tokenizers.Tokenizer`` from a GGUF's byte-level BPE (``tokenizer.ggml.model == 'gpt2'``).

    Vocabulary: token string -> id in file order; merges in priority order ("Ġ t" = merge 'Ġ' and
    't'); tokens typed CONTROL (``<|im_start|>`` ...) become special tokens that are never split.
    ``encode(text)`` adds nothing (no BOS/EOS): the caller decides, from ``tokenizer.ggml.add_bos_token``."""
    _require("tokenizers", "the GGUF tokenizer")
    from tokenizers import AddedToken, Tokenizer, decoders, models

    check_bpe_metadata(meta, PRE_TOKENIZERS)
    pre = meta.get("tokenizer.ggml.pre", "default")
    tokens = list(meta["tokenizer.ggml.tokens"])
    vocab = {token: i for i, token in enumerate(tokens)}
    merges = [tuple(m.split(" ")) for m in meta["tokenizer.ggml.merges"]]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tokenizer.pre_tokenizer = PRE_TOKENIZERS[pre]()
    tokenizer.decoder = decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type", [TOKEN_NORMAL] * len(tokens))
    control = [AddedToken(t, special=True, normalized=False) for t, kind in zip(tokens, types) if kind == TOKEN_CONTROL]
    tokenizer.add_special_tokens(control)  # already in the vocabulary: ids do not change
    return tokenizer
