"""The building blocks' own arguments (norms, feed-forward, positional encodings, RNN, mixture of
experts, latent attention) and the ``torch.nn`` modules ``from_torch`` copies."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .probes import check_module
from .scalars import check_divisible, check_int, check_number, check_tensor


def check_top_k(top_k, num_experts: int) -> int:
    """A router picks ``top_k`` of ``num_experts`` experts: an integer in [1, num_experts]."""
    return check_int("top_k", top_k, 1, num_experts)


def check_experts(shared_experts, capacity_factor) -> None:
    """A mixture of experts' extras: ``shared_experts`` an integer >= 0, ``capacity_factor`` None or
    a finite number > 0."""
    check_int("shared_experts", shared_experts, 0)
    if capacity_factor is not None:
        check_number("capacity_factor", capacity_factor, 0, low_open=True)


def check_router_logits(router_logits, num_experts: int | None = None) -> torch.Tensor:
    """Router logits (tokens, E), or a non-empty list of them (one per layer, all with the same E);
    ``num_experts`` (if given) must be their E. Returns one (tokens, E) tensor (the layers
    concatenated over tokens)."""
    if isinstance(router_logits, (tuple, list)):
        if len(router_logits) == 0:
            raise ValueError("router_logits must not be an empty sequence")
        shapes = {t.shape[-1] if isinstance(t, torch.Tensor) else None for t in router_logits}
        if len(shapes) != 1 or None in shapes:
            raise ValueError("router_logits: every layer's tensor must have the same number of experts")
        if any(t.dim() != 2 for t in router_logits):
            raise ValueError("router_logits: each layer's tensor must be (tokens, num_experts)")
        router_logits = torch.cat(list(router_logits), dim=0)  # (layers * N, E)
    if not isinstance(router_logits, torch.Tensor) or router_logits.dim() != 2:
        raise ValueError(f"router_logits must be a (tokens, num_experts) tensor, got "
                         f"{getattr(router_logits, 'shape', type(router_logits))}")
    E = router_logits.shape[-1]
    if num_experts is not None and num_experts != E:
        raise ValueError(f"router_logits has {E} experts in its last dim, num_experts says {num_experts}")
    return router_logits


def check_moe_decoder(model, copy_dense: bool, activations) -> None:
    """A decoder whose FFNs become experts: it has ``.blocks``; with ``copy_dense`` every dense FFN
    (``activations``, one per block) is SwiGLU, the experts' own shape."""
    if not hasattr(model, "blocks"):
        raise ValueError("model must have .blocks (a DecoderOnlyLM)")
    if copy_dense and any(a != "swiglu" for a in activations):
        raise ValueError("copy_dense needs a SwiGLU FFN (activation='swiglu')")


def check_expert_parallel(num_experts: int, world_size: int, capacity_factor, shared: int) -> None:
    """Expert parallelism splits the experts evenly over the ranks; capacity and shared experts
    are not part of its exchange."""
    check_divisible("num_experts", num_experts, world_size, "the world size")
    if capacity_factor is not None or shared:
        raise ValueError("moe: expert_parallel_forward supports neither capacity_factor nor shared experts")


def check_latent_sizes(num_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim) -> None:
    """MLA's sizes: RoPE's part of a head is even, and the latent rank is smaller than the key and
    value width it compresses (the sizes themselves already checked integers >= 1)."""
    check_divisible("qk_rope_head_dim", qk_rope_head_dim, 2, why=" (RoPE rotates pairs)")
    full = num_heads * (qk_nope_head_dim + v_head_dim)
    if kv_lora_rank >= full:
        raise ValueError(f"kv_lora_rank ({kv_lora_rank}) must be smaller than num_heads * (qk_nope_head_dim"
                         f" + v_head_dim) = {full}, the width it compresses")


def check_latent_call(query, key, value, mask, bias, causal) -> None:
    """Latent attention is causal self-attention over its own latents: no other key or value, no
    mask or score bias of the caller's (the model's switches refuse the rest by name)."""
    for name, given in (("key", key), ("value", value), ("mask", mask), ("bias", bias)):
        if given is not None and not (name in ("key", "value") and given is query):
            raise ValueError(f"{name}: latent attention (attention='mla') is causal self-attention over its "
                             f"own cached latent and takes no {name}")
    if causal is not True:
        raise ValueError("causal: latent attention (attention='mla') is always causal; got causal=False")


def check_positions_fit(length: int, max_len: int) -> None:
    """A learned position table has ``max_len`` rows: no vector for a later position."""
    if length > max_len:
        raise ValueError(
            f"sequence of length {length} is longer than the learned position table "
            f"(max_len={max_len}); a learned embedding has no vector for later positions")


def check_rotary_positions(x, positions) -> None:
    """RoPE's input: ``x`` (..., L, d) with d even, ``positions`` 1-D with one position per row."""
    check_tensor("x", x)
    check_divisible("x's last dimension", x.shape[-1], 2, why=" (RoPE rotates pairs)")
    if x.dim() < 2 or positions.dim() != 1 or positions.shape[0] != x.shape[-2]:
        raise ValueError(f"positions must be 1-D with one position per row of x (L = {x.shape[-2] if x.dim() > 1 else '?'}), "
                         f"got shape {tuple(positions.shape)}")


def check_torch_mha(mha) -> None:
    """An ``nn.MultiheadAttention`` the library's attention can copy: one width for q, k and v,
    no extra key/value bias rows or zero attention."""
    check_module(mha, "mha", nn.MultiheadAttention)
    if not mha._qkv_same_embed_dim:
        raise ValueError("mha: only nn.MultiheadAttention with kdim == vdim == embed_dim is supported")
    if mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError("mha: add_bias_kv / add_zero_attn are not supported")


def check_torch_layer_norm(ln) -> None:
    """An ``nn.LayerNorm`` over one (the last) dimension."""
    check_module(ln, "ln", nn.LayerNorm)
    if len(ln.normalized_shape) != 1:
        raise ValueError("ln: only LayerNorm over one (the last) dimension is supported")


def check_torch_rnn(rnn) -> None:
    """An ``nn.RNN`` the Elman RNN can copy: one layer, one direction, tanh, with bias."""
    check_module(rnn, "rnn", nn.RNN)
    if rnn.num_layers != 1 or rnn.bidirectional or rnn.nonlinearity != "tanh" or not rnn.bias:
        raise ValueError("rnn: only single-layer, unidirectional tanh nn.RNN with bias can be copied")


def check_torch_activation(name: str, act) -> str:
    """The activation of a torch Transformer layer that the library copies: ReLU or GELU (the
    function or the module). Returns "relu" or "gelu"."""
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or isinstance(act, nn.GELU):
        return "gelu"
    raise ValueError(f"{name}: only relu and gelu activations can be copied, got {act!r}")
