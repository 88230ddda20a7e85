"""SmolLM2 loaded once per test process, each test module getting a copy of its own.

Seven test modules (circuits, the lm-eval parity, instruct, quantization, serving, the SmolLM2
parity, speculative decoding) each loaded SmolLM2 from its GGUF file: ~3 s of CPU each (the
header, the dequantized weights, the tokenizer; ~11 s before the library read the header itself). :func:`smollm2` runs the library's own ``load_smollm2`` once per device
and hands each caller a ``copy.deepcopy`` of that model (~0.6 s): the same weights, tied
embedding and head, eval mode, frozen parameters and tokenizer as a fresh load, in tensors of its
own, so that a module that changes its model (LoRA merged into the weights, hooks, caches) leaves
the others' untouched, as when each loaded its own. The loaded original is never handed out.

:func:`one_gguf_reader` is the context in which ``gguf.GGUFReader`` (the reference reader, ~5 s of
CPU per parse of this file) parses each file once for the whole process (the reader only
memory-maps the file read-only, and gguf's tensor-name table depends on the architecture and layer
count alone): transformers' tokenizer and model, the references of the parity tests, share it.
"""
from __future__ import annotations

import copy
import functools
from unittest import mock

import torch

_LOADED: dict = {}


@functools.lru_cache(maxsize=None)
def _cached_reader_and_table():
    import gguf
    return functools.lru_cache(maxsize=None)(gguf.GGUFReader), functools.lru_cache(maxsize=None)(gguf.get_tensor_name_map)


def one_gguf_reader():
    """A context in which ``gguf.GGUFReader`` and ``gguf.get_tensor_name_map`` return the process's
    one parse of each file (and one table per architecture)."""
    import gguf
    reader, table = _cached_reader_and_table()
    return mock.patch.multiple(gguf, GGUFReader=reader, get_tensor_name_map=table)


def smollm2(device: str | torch.device = "cpu"):
    """A private copy of ``load_smollm2(device)``, loaded once per process and device."""
    key = str(torch.device(device))
    if key not in _LOADED:
        from transformer_lib.pretrained import load_smollm2
        with one_gguf_reader():
            _LOADED[key] = load_smollm2(device)
    return copy.deepcopy(_LOADED[key])
