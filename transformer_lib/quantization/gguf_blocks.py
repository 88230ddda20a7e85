"""SmolLM2 with the GGUF file's own 4-bit blocks kept as they are (chapter 19).

:func:`~transformer_lib.pretrained.load_smollm2` dequantizes every tensor of the file to float32
(540 MB) and so reads eight times the bytes it needs for each token. Here the file's Q4_1
matrices (and its Q8_0 embedding, which is also the output head) go into
:class:`~.modules.QuantizedLinear` / :class:`~.modules.QuantizedEmbedding` byte for byte, the
float32 tensors (the norms) as they are. The only change to the bytes is a permutation of whole
rows of W^Q and W^K (llama.cpp's rotary order, :func:`~transformer_lib.pretrained.gguf.unpermute_rotary_rows`):
a block lies inside one row, so rows move with their blocks. The model's logits then equal the
dequantized float32 model's up to float32 rounding (tests/test_quantization.py).

The file is parsed by :class:`~transformer_lib.pretrained.gguf_file.GGUFFile` (a memory map, no code execution).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..device import get_device
from ..pretrained.gguf import _metadata, _reader, bpe_tokenizer_from_gguf
from ..pretrained.llama import LlamaConfig, llama_decoder, llama_state_from_gguf
from ..pretrained.smollm2 import SmolLM2, smollm2_gguf_path
from .._checks.quantization import check_activations
from .formats import bytes_per_block
from .fused import FusedDecodeStep
from .modules import QuantizedEmbedding, QuantizedLinear

__all__ = ["read_gguf_blocks", "load_smollm2_quantized", "gguf_widths"]

# GGUF tensor type name -> our block format
_KEPT = {"Q4_1": "q4_1", "Q8_0": "q8_0"}


def read_gguf_blocks(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Every tensor of a GGUF file undecoded: ``(tensors, formats)``. A Q4_1 / Q8_0 tensor is its
    raw blocks, uint8 (rows, bytes per row); an F32 tensor is float32; ``formats`` names each
    tensor's block format ('q4_1', 'q8_0' or 'f32'). Other block types raise a ValueError."""
    return _blocks(_reader(path))


def _blocks(reader) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    tensors, formats = {}, {}
    for t in reader.tensors:
        kind = t.tensor_type.name
        if kind == "F32":
            rows = [int(n) for n in reversed(t.shape)]  # GGUF lists dimensions fastest first
            tensors[t.name] = torch.from_numpy(np.array(t.data, dtype=np.float32)).reshape(rows)
            formats[t.name] = "f32"
        elif kind in _KEPT:
            tensors[t.name] = torch.from_numpy(np.array(t.data, dtype=np.uint8))  # (rows, bytes): a copy of the bytes
            formats[t.name] = _KEPT[kind]
        else:
            raise ValueError(f"tensor {t.name} is {kind}; only F32, Q4_1 and Q8_0 are kept as blocks")
    return tensors, formats


# GGUF tensor name (its part after "blk.N.") -> the tensor group of modules.TENSOR_GROUPS
_GGUF_GROUP = {"token_embd": "embedding", "output": "embedding", "attn_q": "attn_in", "attn_k": "attn_in",
               "attn_v": "attn_in", "attn_output": "attn_out", "ffn_gate": "ffn_in", "ffn_up": "ffn_in",
               "ffn_down": "ffn_out"}
_GGUF_BITS = {"Q4_1": 4, "Q4_0": 4, "Q8_0": 8}


def gguf_widths(path: str | Path | None = None) -> dict[str, int]:
    """A GGUF file's own mixture: ``{tensor group: bits}`` over its quantized matrices (the packaged
    SmolLM2 by default), in the form :func:`~.modules.quantize`'s ``widths`` takes. A group whose
    tensors have different widths is a ValueError (it has no one width to give)."""
    path = smollm2_gguf_path() if path is None else Path(path)
    widths: dict[str, int] = {}
    for t in _reader(path).tensors:
        bits = _GGUF_BITS.get(t.tensor_type.name)
        if bits is None:  # float tensors: the norms
            continue
        key = t.name.removesuffix(".weight").split(".")[-1]  # "blk.3.attn_q.weight" -> "attn_q"
        group = _GGUF_GROUP.get(key, "other")
        if widths.setdefault(group, bits) != bits:
            raise ValueError(f"path: {path.name} mixes widths inside the tensor group {group!r}")
    return widths


def _format_of(blocks: torch.Tensor, in_features: int) -> str:
    """Which block format a row of ``blocks`` bytes holds, from its length (groups of 32)."""
    for fmt in _KEPT.values():
        if blocks.shape[1] == in_features // 32 * bytes_per_block(fmt, 32):
            return fmt
    raise ValueError(f"rows of {blocks.shape[1]} bytes are neither q4_1 nor q8_0 for {in_features} weights")


def load_smollm2_quantized(device: torch.device | str | None = None, path: str | Path | None = None,
                           activations: str = "float32") -> SmolLM2:
    """SmolLM2-135M-Instruct with its linear layers and tied embedding as the file's own blocks
    (about 98 MB of weights instead of 540 MB). The same :class:`~transformer_lib.pretrained.smollm2.SmolLM2`
    wrapper as :func:`~transformer_lib.pretrained.load_smollm2`: ``generate``, ``logits``, ``model``.
    ``activations="int8"`` gives the layers llama.cpp's int8 activations (:class:`~.modules.QuantizedLinear`)."""
    check_activations(activations)
    path = smollm2_gguf_path() if path is None else Path(path)
    reader = _reader(path)  # one parse of the file for its metadata and its blocks (each takes seconds)
    meta = _metadata(reader, include_tokenizer=True)
    cfg = LlamaConfig.from_gguf(meta)
    raw, _ = _blocks(reader)
    state = llama_state_from_gguf(raw, cfg)  # GGUF names -> the module's names, W^Q / W^K rows un-permuted
    with torch.device("meta"):  # no random initialization: every weight comes from the file
        model = llama_decoder(cfg)
    model.decode_step = FusedDecodeStep()  # the fused one-token step
    floats = {}
    for name, tensor in state.items():
        if name == "head.weight":
            continue  # tied: the head is the embedding's own blocks (below)
        if tensor.dtype != torch.uint8:  # the norms' float32 weights
            floats[name] = tensor
            continue
        module_name = name.removesuffix(".weight")
        in_features = model.get_submodule(module_name).weight.shape[1]
        fmt = _format_of(tensor, in_features)
        layer = QuantizedLinear(tensor.contiguous(), fmt, in_features, group_size=32, activations=activations)
        parent_name, _, child = module_name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, QuantizedEmbedding(layer) if module_name == "embed" else layer)
    model.head = model.embed.head  # the tied output head: the same QuantizedLinear
    model.load_state_dict(floats, strict=False, assign=True)
    left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
    if left:
        raise ValueError(f"the file has no weights for {left[:3]}")
    device = get_device() if device is None else torch.device(device)
    model = model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return SmolLM2(model, bpe_tokenizer_from_gguf(meta), meta, device, cfg)
