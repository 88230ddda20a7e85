"""One generated token in one compiled call: the fused decoding step of a quantized Llama (chapter 19).

With 4-bit weights a SmolLM2 token reads about 97 MB, a few milliseconds of memory traffic, and
the quantized products stop being most of a token's time: the rest of the block (two RMSNorms,
rotary positions, the cache write, attention over the cache, SiLU) is a few thousand flops, but as
PyTorch modules it is some thirty small operators a layer, each a few microseconds of Python and
dispatch, 30 layers a token. :class:`FusedDecodeStep` runs a one-token step with a cache as
one C++ call (``csrc/matvec.cpp``, ``decode_step``) that does the whole block for every layer:

* q, k and v are one matrix (their rows of blocks side by side), so one kernel pass reads the
  normed input once; gate and up likewise. The layers' own ``blocks`` become views into the fused
  matrices: no second copy, and the module path reads the same bytes;
* the new key and value are written into the :class:`~transformer_lib.kv_cache.KVCache`'s own
  preallocated buffers (no ``torch.cat``, no per-token tensors but a few scratch vectors).

It plugs into any :class:`~transformer_lib.model.DecoderOnlyLM` through the model's
``decode_step`` attribute (:func:`~.modules.quantize` sets it): the model offers it each cached
step, and the step runs only when the model's configuration (``model.config``, a
:class:`~transformer_lib.config.ModelConfig`) is one the kernel computes, field by field
(:data:`FUSED_VALUES`, :func:`fused_refusal`: RoPE with the 'halves' layout, RMSNorm, Pre-LN,
SwiGLU, no biases, no experts, and every other switch at its default), and its linear layers are
quantized in one format; otherwise it returns None. Everything else (a prompt's prefill, batches, hooks being recorded, gradients on)
takes the modules' path, the model's own blocks, unchanged.
:func:`decode_step_reference` is the same fused step written in PyTorch, readable, and the tests
hold kernel, reference and modules equal to float32 rounding.
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from .._checks import check_cache, check_token_ids
from ..multihead import is_hooked
from .kernels import _ops, kernel_available

__all__ = ["FusedDecodeStep", "decode_step_reference", "fuse_rows", "FUSED_VALUES", "FUSED_ANY", "fused_refusal"]

# What the compiled step computes, by field of ModelConfig. A field in FUSED_ANY may hold any value
# (sizes, and what acts only in training); a field in FUSED_VALUES must hold one of the values
# listed; every other field must hold its default: a switch added after the kernel was written,
# left off, changes nothing the kernel computes, and switched on it sends the step to the modules.
FUSED_VALUES = {"positional": ("rope",), "rotary_style": ("halves",), "norm": ("rms",), "activation": ("swiglu",),
                "norm_first": (True,), "bias": (False,), "ffn": (True,), "num_experts": (None,)}
FUSED_ANY = {"vocab_size", "d_model", "num_heads", "num_layers", "d_ff", "max_len", "dropout", "tie_weights",
             "init_std", "num_kv_heads", "rope_base", "norm_eps", "strict_length", "top_k",
             # sizes of latent attention, read only with attention='mla' (which the step does not compute)
             "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"}


def fused_refusal(config) -> str | None:
    """None when the fused step computes the model of ``config`` (a ModelConfig); otherwise the first
    switch it does not compute, as ``"name=value"``."""
    for field in dataclasses.fields(config):
        if field.name in FUSED_ANY:
            continue
        value = getattr(config, field.name)
        if value not in FUSED_VALUES.get(field.name, (field.default,)):
            return f"{field.name}={value!r}"
    return None


def _quantized(m) -> bool:
    """A :class:`~.modules.QuantizedLinear` (read by its attributes: this module sits below
    :mod:`.modules`, which imports it)."""
    return hasattr(m, "blocks") and hasattr(m, "fmt") and hasattr(m, "group_size")


def fuse_rows(layers: list) -> torch.Tensor | None:
    """Stack the blocks of layers that read the same input (q, k, v; or gate, up) into one
    (sum of out_features, bytes) matrix, and make each layer's ``blocks`` a view of its rows.
    None when they differ in format, group size or input width, or have a bias (then not fused)."""
    first = layers[0]
    if any(not _quantized(m) or m.bias is not None or m.fmt != first.fmt
           or m.group_size != first.group_size or m.in_features != first.in_features
           or m.activations != first.activations for m in layers):
        return None
    fused = torch.cat([m.blocks for m in layers])  # (N_1 + N_2 + ..., bytes)
    start = 0
    for m in layers:
        m.blocks = fused[start:start + m.out_features]  # a view: the same bytes, no copy
        start += m.out_features
    return fused


def decode_step_reference(model, x: torch.Tensor, keys: list[torch.Tensor],
                          values: list[torch.Tensor], pos: int) -> torch.Tensor:
    """The fused step in PyTorch: the new token's residual stream x (1, D) through every block, its
    key and value written at ``pos`` into ``keys[l]`` / ``values[l]`` (1, H_kv, capacity, d), in
    place. Returns x after the last block (before the final norm). What ``decode_step`` computes."""
    attn0 = model.blocks[0].self_attn
    H, H_kv, d, eps = attn0.num_heads, attn0.num_kv_heads, attn0.head_dim, model.norm.eps

    def rms(v, w):
        return w * (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps))

    def rope(v):  # (heads, d): the model's own RotaryEmbedding at position pos (one position, L = 1)
        return attn0.rotary(v[:, None], offset=pos)[:, 0]

    def product(layers, v):  # one pass over the layers' rows: (1, K) -> (1, sum of N)
        return torch.cat([m(v) for m in layers], dim=-1)

    for l, block in enumerate(model.blocks):
        attn, ffn = block.self_attn, block.ffn
        qkv = product([attn.q_proj, attn.k_proj, attn.v_proj], rms(x, block.norm1.weight))[0]
        q, k, v = qkv.split([H * d, H_kv * d, H_kv * d])
        q, k, v = rope(q.view(H, d)), rope(k.view(H_kv, d)), v.view(H_kv, d)
        keys[l][0, :, pos], values[l][0, :, pos] = k, v  # the cache's buffers, in place
        K, V = keys[l][0, :, :pos + 1], values[l][0, :, :pos + 1]  # (H_kv, pos + 1, d)
        j = torch.arange(H) // (H // H_kv)  # query head h reads key/value head h // g
        scores = (K[j] @ q[:, :, None])[..., 0] / math.sqrt(d)  # (H, pos + 1)
        a = (scores.softmax(-1)[:, None, :] @ V[j])[:, 0]  # (H, d)
        x = x + attn.out_proj(a.reshape(1, H * d))
        gate, up = product([ffn.linear1, ffn.linear3], rms(x, block.norm2.weight)).chunk(2, dim=-1)
        x = x + ffn.linear2(F.silu(gate) * up)
    return x


class FusedDecodeStep:
    """The fused one-token step of a quantized :class:`~transformer_lib.model.DecoderOnlyLM`,
    offered to the model as its ``decode_step``: ``step(model, tokens, cache)`` returns the
    logits (1, 1, V) of one new token with a cache (batch 1, CPU, no gradients, no hook on any of
    the model's modules), or None when the step cannot be fused (then the model runs its modules).
    ``enabled = False`` switches it off, for comparisons. :meth:`plan` says whether the model's
    configuration is the one the kernel computes."""

    def __init__(self):
        self.enabled = True
        self._plan = None

    def __call__(self, model, tokens: torch.Tensor, cache) -> torch.Tensor | None:
        if not self.enabled or torch.is_grad_enabled() or tokens.shape != (1, 1) or tokens.device.type != "cpu":
            return None
        if getattr(cache, "ragged", False):  # rows of their own lengths (chapter 28): one shared position it is not
            return None
        pos = cache.lengths[0] if isinstance(getattr(cache, "lengths", None), list) and cache.lengths else None
        if pos is None or any(n != pos for n in cache.lengths):
            return None
        plan = self.plan(model)
        if plan is None or any(is_hooked(m) for m in plan["modules"]):  # the model's modules, listed once
            return None
        check_token_ids(tokens, model.embed.num_embeddings)  # DecoderOnlyLM.forward's checks
        check_cache(cache, len(model.blocks))
        return self._step(model, tokens, cache, plan, pos)

    def plan(self, model) -> dict | None:
        """The fused matrices and the step's arguments, built once (None: the step cannot be fused)."""
        plan = self._plan
        first = model.blocks[0].self_attn.q_proj
        if plan is not None and _quantized(first) and plan["key"] == first.blocks.data_ptr():
            return plan
        self._plan = None
        ok, _ = kernel_available()
        config = getattr(model, "config", None)
        if not ok or config is None or fused_refusal(config) is not None or not _quantized(model.head):
            return None
        weights, norms, fmt = [], [], set()
        for block in model.blocks:
            attn, ffn = block.self_attn, block.ffn
            if not all(hasattr(ffn, name) for name in ("linear1", "linear3", "linear2")):
                return None  # not one SwiGLU FFN (e.g. experts put in by hand, the configuration unchanged)
            qkv = fuse_rows([attn.q_proj, attn.k_proj, attn.v_proj])
            gate_up = fuse_rows([ffn.linear1, ffn.linear3]) if qkv is not None else None
            rest = [attn.out_proj, ffn.linear2]
            if gate_up is None or any(not _quantized(m) or m.bias is not None for m in rest):
                return None
            layers = [attn.q_proj, ffn.linear1] + rest
            fmt |= {(m.fmt, m.group_size, m.activations) for m in layers}
            weights += [qkv, attn.out_proj.blocks, gate_up, ffn.linear2.blocks]
            norms += [block.norm1.weight.detach(), block.norm2.weight.detach()]
        if len(fmt) != 1 or next(iter(fmt))[1] != 32 or any(w.device.type != "cpu" for w in weights):
            return None
        (name, _, activations), = fmt
        attn0 = model.blocks[0].self_attn
        self._plan = {"key": first.blocks.data_ptr(), "weights": weights, "modules": list(model.modules()),
                      "norms": [n.float().contiguous() for n in norms], "q4": name == "q4_1",
                      "int8_x": activations == "int8", "op": _ops().decode_step,
                      "sizes": (attn0.num_heads, attn0.num_kv_heads, attn0.head_dim, model.norm.eps)}
        return self._plan

    @staticmethod
    def _step(model, tokens: torch.Tensor, cache, plan: dict, pos: int) -> torch.Tensor:
        H, H_kv, d, eps = plan["sizes"]
        num_layers, D = len(model.blocks), model.embed.embedding_dim
        if cache.keys[0] is None or pos + 1 > cache.keys[0].shape[2]:
            # let the cache allocate or grow its buffers the way it always does (rare: first step,
            # or capacity doubling); the zeros written at pos are overwritten by the step
            zero = torch.zeros(1, H_kv, 1, d)
            for layer in range(num_layers):
                cache.update(layer, zero, zero)
        x = model.embed(tokens).reshape(1, D).float().contiguous()  # (1, D), a new tensor
        cos, sin = (t[pos] for t in model.blocks[0].self_attn.rotary.cos_sin(pos + 1, x.device, x.dtype))  # (d/2,)
        plan["op"](x, plan["weights"], plan["norms"], cache.keys, cache.values, pos, cos.contiguous(),
                   sin.contiguous(), H, H_kv, eps, plan["q4"], plan["int8_x"])
        cache.lengths = [pos + 1] * num_layers
        return model.head(model.norm(x.view(1, 1, D)))  # (1, 1, D) -> (1, 1, V)
