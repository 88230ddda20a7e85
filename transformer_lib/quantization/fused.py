"""One generated token in one compiled call: the fused decoding step of a quantized Llama (chapter 19).

With 4-bit weights a SmolLM2 token reads about 97 MB, a few milliseconds of memory traffic, and
the quantized products stop being most of a token's time: the rest of the block (two RMSNorms,
rotary positions, the cache write, attention over the cache, SiLU) is a few thousand flops, but as
PyTorch modules it is some thirty small operators a layer, each a few microseconds of Python and
dispatch, 30 layers a token. :class:`QuantizedLlamaDecoder` runs a one-token step with a cache as
one C++ call (``csrc/matvec.cpp``, ``decode_step``) that does the whole block for every layer:

* q, k and v are one matrix (their rows of blocks side by side), so one kernel pass reads the
  normed input once; gate and up likewise. The layers' own ``blocks`` become views into the fused
  matrices: no second copy, and the module path reads the same bytes;
* the new key and value are written into the :class:`~transformer_lib.kv_cache.KVCache`'s own
  preallocated buffers (no ``torch.cat``, no per-token tensors but a few scratch vectors).

Everything else (a prompt's prefill, batches, hooks being recorded, gradients on) takes the
modules' path, :class:`~transformer_lib.pretrained.llama.LlamaBlock`, unchanged.
:func:`decode_step_reference` is the same fused step written in PyTorch, readable, and the tests
hold kernel, reference and modules equal to float32 rounding.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .._checks import check_cache, check_token_ids
from ..pretrained.llama import LlamaDecoder
from .kernels import _ops, kernel_available
from .modules import QuantizedLinear

__all__ = ["QuantizedLlamaDecoder", "decode_step_reference", "fuse_rows"]


def fuse_rows(layers: list[QuantizedLinear]) -> torch.Tensor | None:
    """Stack the blocks of layers that read the same input (q, k, v; or gate, up) into one
    (sum of out_features, bytes) matrix, and make each layer's ``blocks`` a view of its rows.
    None when they differ in format, group size or input width, or have a bias (then not fused)."""
    first = layers[0]
    if any(not isinstance(m, QuantizedLinear) or m.bias is not None or m.fmt != first.fmt
           or m.group_size != first.group_size or m.in_features != first.in_features
           or m.activations != first.activations for m in layers):
        return None
    fused = torch.cat([m.blocks for m in layers])  # (N_1 + N_2 + ..., bytes)
    start = 0
    for m in layers:
        m.blocks = fused[start:start + m.out_features]  # a view: the same bytes, no copy
        start += m.out_features
    return fused


def decode_step_reference(model: LlamaDecoder, x: torch.Tensor, keys: list[torch.Tensor],
                          values: list[torch.Tensor], pos: int) -> torch.Tensor:
    """The fused step in PyTorch: the new token's residual stream x (1, D) through every block, its
    key and value written at ``pos`` into ``keys[l]`` / ``values[l]`` (1, H_kv, capacity, d), in
    place. Returns x after the last block (before the final norm). What ``decode_step`` computes."""
    cfg = model.cfg
    H, H_kv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    rotary = model.blocks[0].attn.rotary
    cos, sin = (t[pos] for t in rotary.cos_sin(pos + 1, x.device, x.dtype))  # (d/2,) each

    def rms(v, w):
        return w * (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + cfg.norm_eps))

    def rope(v):  # (heads, d), pairs (i, i + d/2)
        v1, v2 = v.chunk(2, dim=-1)
        return torch.cat((v1 * cos - v2 * sin, v1 * sin + v2 * cos), dim=-1)

    def product(layers, v):  # one pass over the layers' rows: (1, K) -> (1, sum of N)
        return torch.cat([m(v) for m in layers], dim=-1)

    for l, block in enumerate(model.blocks):
        attn, ffn = block.attn, block.ffn
        qkv = product([attn.q_proj, attn.k_proj, attn.v_proj], rms(x, block.attn_norm.weight))[0]
        q, k, v = qkv.split([H * d, H_kv * d, H_kv * d])
        q, k, v = rope(q.view(H, d)), rope(k.view(H_kv, d)), v.view(H_kv, d)
        keys[l][0, :, pos], values[l][0, :, pos] = k, v  # the cache's buffers, in place
        K, V = keys[l][0, :, :pos + 1], values[l][0, :, :pos + 1]  # (H_kv, pos + 1, d)
        j = torch.arange(H) // (H // H_kv)  # query head h reads key/value head h // g
        scores = (K[j] @ q[:, :, None])[..., 0] / math.sqrt(d)  # (H, pos + 1)
        a = (scores.softmax(-1)[:, None, :] @ V[j])[:, 0]  # (H, d)
        x = x + attn.out_proj(a.reshape(1, H * d))
        gate, up = product([ffn.linear1, ffn.linear3], rms(x, block.ffn_norm.weight)).chunk(2, dim=-1)
        x = x + ffn.linear2(F.silu(gate) * up)
    return x


class QuantizedLlamaDecoder(LlamaDecoder):
    """A :class:`~transformer_lib.pretrained.llama.LlamaDecoder` whose linear layers are
    :class:`~.modules.QuantizedLinear`: the same model, plus the fused one-call step for a single
    new token with a cache (batch 1, CPU, no gradients, no hooks). ``fused = False`` (on the
    instance) switches the step off, for comparisons. :func:`~.gguf_blocks.load_smollm2_quantized`
    builds one; :func:`~.modules.quantize` turns a ``LlamaDecoder`` into one in place."""

    fused = True

    def forward(self, tokens: torch.Tensor, cache=None) -> torch.Tensor:
        if cache is None or not self.fused or torch.is_grad_enabled() or tokens.shape != (1, 1) \
                or tokens.device.type != "cpu" or self._hooked():
            return super().forward(tokens, cache)
        plan = self._plan()
        pos = cache.lengths[0] if isinstance(getattr(cache, "lengths", None), list) and cache.lengths else None
        if plan is None or pos is None or any(n != pos for n in cache.lengths):
            return super().forward(tokens, cache)
        self._check(tokens, cache)
        return self._fused_step(tokens, cache, plan, pos)

    def _check(self, tokens, cache) -> None:  # LlamaDecoder.forward's checks
        check_token_ids(tokens, self.cfg.vocab_size)
        check_cache(cache, self.cfg.num_layers)
        if cache.length + 1 > self.cfg.context_length:
            raise ValueError(f"{cache.length + 1} positions exceed the context length {self.cfg.context_length}")

    def _hooked(self) -> bool:
        """Whether anyone records or patches a module (then the step must run module by module)."""
        from torch.nn.modules import module as torch_module
        if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
            return True
        return any(m._forward_hooks or m._forward_pre_hooks for m in self.modules())

    def _plan(self) -> dict | None:
        """The fused matrices and the step's arguments, built once (None: the step cannot be fused)."""
        plan = self.__dict__.get("_fused_plan")
        first = self.blocks[0].attn.q_proj
        if plan is not None and isinstance(first, QuantizedLinear) and plan["key"] == first.blocks.data_ptr():
            return plan
        self.__dict__["_fused_plan"] = None
        ok, _ = kernel_available()
        if not ok or self.cfg.rotary_style != "halves":
            return None
        weights, norms, fmt = [], [], set()
        for block in self.blocks:
            attn, ffn = block.attn, block.ffn
            qkv = fuse_rows([attn.q_proj, attn.k_proj, attn.v_proj])
            gate_up = fuse_rows([ffn.linear1, ffn.linear3]) if qkv is not None else None
            rest = [attn.out_proj, ffn.linear2]
            if gate_up is None or any(not isinstance(m, QuantizedLinear) or m.bias is not None for m in rest):
                return None
            layers = [attn.q_proj, ffn.linear1] + rest
            fmt |= {(m.fmt, m.group_size, m.activations) for m in layers}
            weights += [qkv, attn.out_proj.blocks, gate_up, ffn.linear2.blocks]
            norms += [block.attn_norm.weight.detach(), block.ffn_norm.weight.detach()]
        if len(fmt) != 1 or next(iter(fmt))[1] != 32 or any(w.device.type != "cpu" for w in weights):
            return None
        (name, _, activations), = fmt
        plan = {"key": self.blocks[0].attn.q_proj.blocks.data_ptr(), "weights": weights,
                "norms": [n.float().contiguous() for n in norms], "q4": name == "q4_1",
                "int8_x": activations == "int8", "op": _ops().decode_step}
        self.__dict__["_fused_plan"] = plan
        return plan

    def _fused_step(self, tokens: torch.Tensor, cache, plan: dict, pos: int) -> torch.Tensor:
        cfg = self.cfg
        if cache.keys[0] is None or pos + 1 > cache.keys[0].shape[2]:
            # let the cache allocate or grow its buffers the way it always does (rare: first step,
            # or capacity doubling); the zeros written at pos are overwritten by the step
            zero = torch.zeros(1, cfg.num_kv_heads, 1, cfg.head_dim)
            for layer in range(cfg.num_layers):
                cache.update(layer, zero, zero)
        x = self.embed(tokens).reshape(1, cfg.d_model).float().contiguous()  # (1, D), a new tensor
        cos, sin = (t[pos] for t in self.blocks[0].attn.rotary.cos_sin(pos + 1, x.device, x.dtype))  # (d/2,)
        plan["op"](x, plan["weights"], plan["norms"], cache.keys, cache.values, pos, cos.contiguous(),
                   sin.contiguous(), cfg.num_heads, cfg.num_kv_heads, cfg.norm_eps, plan["q4"], plan["int8_x"])
        cache.lengths = [pos + 1] * cfg.num_layers
        return self.norm(x.view(1, 1, cfg.d_model)) @ self.embed.weight.T  # (1, 1, D) @ (D, V) -> (1, 1, V)
