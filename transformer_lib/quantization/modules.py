"""Weight-only quantized layers and :func:`quantize`, which puts them into a model in place (chapter 19).

*Weight-only* (the default): the weights are stored as int8 or int4 blocks (:mod:`.formats`), the
activations stay float32, and every product is float32 arithmetic on weights decoded in registers.
Decoding is bound by the bytes of weights it reads, so this keeps the bytes' speed-up and none of
the accuracy risk of quantizing activations (whose outliers are much larger); ``activations="int8"``
trades a little of that accuracy for fewer instructions per weight (llama.cpp's choice).

:class:`QuantizedLinear` replaces ``nn.Linear``: one row of x (or a few) goes through the compiled
kernel (:func:`~.kernels.matvec`), a long prompt's many rows through :func:`~.kernels.matmul`
(prefill is bound by arithmetic: each tile of W is unpacked once and reused for every row).
Its ``activations`` is ``"float32"`` (weight-only: x enters the kernel as it is; prefill tiles are
decoded to float32 and multiplied by BLAS) or ``"int8"`` (llama.cpp's way: x is quantized per block
of 32 inside the kernel, integer dot products, in decoding and in prefill (an int8 GEMM on AVX-512
VNNI); faster, and x's rounding adds its own small error).

:class:`QuantizedEmbedding` replaces a *tied* embedding: the same blocks are looked up row by row
for the input and multiplied as the output head (a tied ``DecoderOnlyLM`` head is that same
:class:`QuantizedLinear`, a module call like any other layer).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .._checks import check_matvec_input, check_quantization_args
from .._checks.quantization import check_activations, check_quantized_linear_args, check_widths
from .formats import FORMATS, dequantize_blocks, quantize_blocks
from .gptq import gptq_blocks, input_hessians
from .fused import FusedDecodeStep
from .kernels import matmul, matvec, vnni_available
from ..model import DecoderOnlyLM

__all__ = ["QuantizedLinear", "QuantizedEmbedding", "quantize", "weight_bytes",
           "KERNEL_MAX_ROWS", "KERNEL_MAX_ROWS_INT8", "TENSOR_GROUPS", "DEFAULT_WIDTHS", "tensor_group"]

# Up to this many rows of x go through the matrix-vector kernel (decoding, small batches); more
# rows go through kernels.matmul: W decoded once, tile by tile, and float32 BLAS (prefill: bound by
# arithmetic, not bytes).
KERNEL_MAX_ROWS = 16
# With int8 x on a CPU with AVX-512 VNNI, the int8 GEMM of kernels.matmul (each weight tile unpacked
# once, reused for every row) overtakes the matrix-vector kernel from 3 rows on.
KERNEL_MAX_ROWS_INT8 = 2


class QuantizedLinear(nn.Module):
    """``y = x W^T (+ b)`` with W (out, in) kept as blocks (``fmt`` 'q8_0' or 'q4_1', a buffer of
    uint8 (out, in / group_size * bytes per block)). Build one with :meth:`from_linear` or from a
    GGUF file's own blocks (:func:`~.gguf_blocks.load_smollm2_quantized`)."""

    def __init__(self, blocks: torch.Tensor, fmt: str, in_features: int, group_size: int = 32,
                 bias: torch.Tensor | None = None, activations: str = "float32"):
        super().__init__()
        self.activations = check_activations(activations)
        check_quantized_linear_args(blocks, fmt, in_features, group_size)
        self.fmt, self.in_features, self.group_size = fmt, in_features, group_size
        self.out_features = blocks.shape[0]
        self.register_buffer("blocks", blocks)
        self.register_buffer("bias", bias)

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bits: int, group_size: int = 32,
                    bias: torch.Tensor | None = None, activations: str = "float32",
                    hessian: torch.Tensor | None = None) -> "QuantizedLinear":
        """A float (out, in) weight quantized, each weight to its nearest code
        (:func:`~.formats.quantize_blocks`), or by GPTQ when the layer's input ``hessian`` is given
        (:func:`~.gptq.gptq_blocks`); the bias stays float32."""
        w = weight.detach()
        blocks = (quantize_blocks(w.cpu(), bits, group_size) if hessian is None
                  else gptq_blocks(w.cpu(), hessian.cpu(), bits, group_size)).to(w.device)
        bias = None if bias is None else bias.detach().float().clone()
        return cls(blocks, FORMATS[bits], w.shape[1], group_size, bias, activations)

    @classmethod
    def from_linear(cls, linear: nn.Linear, bits: int, group_size: int = 32,
                    activations: str = "float32", hessian: torch.Tensor | None = None) -> "QuantizedLinear":
        """An ``nn.Linear`` quantized: see :meth:`from_weight`."""
        return cls.from_weight(linear.weight, bits, group_size, linear.bias, activations, hessian)

    def dequantized_weight(self) -> torch.Tensor:
        """W as float32 (out, in), decoded from the blocks (for prefill, tests and plots)."""
        return dequantize_blocks(self.blocks, self.fmt, self.group_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_matvec_input(x, self.in_features)
        rows = x.numel() // self.in_features
        if rows <= (KERNEL_MAX_ROWS_INT8 if self.activations == "int8" and vnni_available() else KERNEL_MAX_ROWS):
            y = matvec(x, self.blocks, self.fmt, self.group_size, activations=self.activations)  # (..., in) -> (..., out)
        else:
            y = matmul(x, self.blocks, self.fmt, self.group_size, self.activations)  # prefill (..., out)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, fmt={self.fmt}, "
                f"group_size={self.group_size}, bias={self.bias is not None}, activations={self.activations}")


class QuantizedEmbedding(nn.Module):
    """A tied embedding kept as blocks: ``forward(tokens)`` decodes the rows it looks up; ``.head``
    is the same blocks as a :class:`QuantizedLinear`, the model's output head (shared, not copied)."""

    def __init__(self, head: QuantizedLinear):
        super().__init__()
        self.head = head
        self.num_embeddings, self.embedding_dim = head.out_features, head.in_features

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.head
        rows = h.blocks[tokens.reshape(-1)]  # (B * L, bytes): only the rows looked up
        return dequantize_blocks(rows, h.fmt, h.group_size).reshape(*tokens.shape, h.in_features)  # (B, L, D)


def _parent(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    parent_name, _, child = name.rpartition(".")
    return (model.get_submodule(parent_name) if parent_name else model), child


# The groups of tensors that :func:`quantize`'s ``widths`` names: the embedding with the output
# head (tied or not), attention's input projections (q, k, v) and output projection, the
# feed-forward's input (gate and up, or the one input layer) and output (down) layers; "other" is
# any other linear layer.
TENSOR_GROUPS = ("embedding", "attn_in", "attn_out", "ffn_in", "ffn_out", "other")
# llama.cpp's mixture, and the packaged SmolLM2 GGUF's own (its token_embd, the tied embedding and
# output head, is Q8_0; every other matrix Q4_1): the embedding and head stay at 8 bits. They hurt
# most at 4 bits (chapter 19 measures each group): the head's rounding errors go straight into
# every logit, with no later layer or normalization to average them out.
DEFAULT_WIDTHS = {"embedding": 8}
# The one place that knows the blocks' attribute names (the last part of a linear layer's name).
_GROUP_OF_LAYER = {"q_proj": "attn_in", "k_proj": "attn_in", "v_proj": "attn_in", "out_proj": "attn_out",
                   "linear1": "ffn_in", "linear3": "ffn_in", "linear2": "ffn_out", "head": "embedding",
                   "lm_head": "embedding",
                   # latent attention (DeepSeek's names): the query and latent projections, the output
                   "q_a_proj": "attn_in", "q_b_proj": "attn_in", "kv_a_proj_with_mqa": "attn_in", "kv_b_proj": "attn_in",
                   "o_proj": "attn_out"}


def tensor_group(name: str) -> str:
    """The group of :data:`TENSOR_GROUPS` a linear layer belongs to, from its name in the model
    (``"blocks.3.self_attn.q_proj"`` -> ``"attn_in"``); embeddings are ``"embedding"``."""
    return _GROUP_OF_LAYER.get(name.rpartition(".")[2], "other")


def quantize(model: nn.Module, bits: int, group_size: int = 32, activations: str = "float32",
             widths: dict[str, int] | None = None, calibration: torch.Tensor | None = None) -> nn.Module:
    """Replace ``model``'s linear layers by :class:`QuantizedLinear` with ``bits`` 8 (absmax, q8_0)
    or 4 (asymmetric, q4_1), in place, and return the model.

    Mixed precision, as llama.cpp does it: ``widths`` maps a tensor group (:data:`TENSOR_GROUPS`)
    or a layer's own name (``"blocks.0.ffn.linear2"``; it wins over its group) to 4 or 8 bits; the
    rest get ``bits``. The default, :data:`DEFAULT_WIDTHS`, keeps the embedding and output head at
    8 bits (the packaged SmolLM2 file's own mixture); ``widths={}`` is uniform ``bits``.

    The embedding is quantized too when it is tied to the output head, a linear layer sharing its
    weight (``DecoderOnlyLM``). Untied embeddings, norms and biases stay float32. Layers whose input width ``group_size`` does not divide raise a ValueError before
    anything is replaced, as do unknown names in ``widths``. ``activations``: see
    :class:`QuantizedLinear` ('float32', weight-only, or 'int8').

    ``calibration``: token ids (B, L) or (L,) of text the model reads first, in float32; then each
    linear layer is rounded by GPTQ (:mod:`.gptq`) against its inputs on that text instead of to the
    nearest codes, in the same format. A head tied to the embedding stays rounded to nearest: its
    weights are the embedding's rows too, which GPTQ's objective (the head's outputs) does not
    see. A
    :class:`~transformer_lib.model.DecoderOnlyLM` also gets the fused one-token decoding step as
    its ``decode_step`` (:class:`~.fused.FusedDecodeStep`; it runs for Llama's configuration)."""
    check_activations(activations)
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    embeddings = {name: m for name, m in model.named_modules() if isinstance(m, nn.Embedding)}
    widths = check_widths(DEFAULT_WIDTHS if widths is None else widths, TENSOR_GROUPS, set(linears) | set(embeddings))
    for name, m in linears.items():  # check everything first: all or nothing
        check_quantization_args(m.weight, bits, group_size)
    tied = {}  # embedding name -> the linear head sharing its weight
    for e_name, emb in embeddings.items():
        sharing = [n for n, m in linears.items() if m.weight is emb.weight]
        if sharing:
            tied[e_name] = sharing[0]

    def width(name: str, group: str) -> int:
        return widths.get(name, widths.get(group, bits))

    gptq_layers = [n for n in linears if n not in tied.values()]
    hessians = {} if calibration is None else input_hessians(model, calibration, gptq_layers)
    shared: dict[str, QuantizedLinear] = {}
    for e_name, head_name in tied.items():
        emb, b = embeddings[e_name], width(e_name, "embedding")
        q = QuantizedLinear.from_linear(linears[head_name], b, group_size, activations)  # (V, D), as the head reads it
        parent, child = _parent(model, e_name)
        setattr(parent, child, QuantizedEmbedding(q))
        shared[head_name] = q
    for name, m in linears.items():
        parent, child = _parent(model, name)
        setattr(parent, child, shared.get(name) or
                QuantizedLinear.from_linear(m, width(name, tensor_group(name)), group_size, activations,
                                            hessians.get(name)))
    if isinstance(model, DecoderOnlyLM):  # offered each cached one-token step; runs when the configuration fits
        model.decode_step = FusedDecodeStep()
    return model


def weight_bytes(model: nn.Module) -> int:
    """Bytes of a model's weights as stored: parameters plus quantized blocks, tied ones once."""
    seen, total = set(), 0
    for t in list(model.parameters()) + [b for n, b in model.named_buffers() if n.endswith("blocks")]:
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total
