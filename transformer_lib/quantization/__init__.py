"""Quantized decoding (chapter 19): int8 and int4 weights, a kernel that reads them, and SmolLM2
with its GGUF file's own 4-bit blocks.

- :mod:`.formats`: absmax int8 (q8_0) and group-wise asymmetric int4 (q4_1), from scratch, and
  ``round_trip`` to measure the error of any width and granularity.
- :mod:`.gptq`: GPTQ, rounding that sees the data: ``gptq_codes`` picks a layer's codes against the
  sum of its inputs' outer products (``input_hessians``), so that its outputs, not its weights, stay
  close to float's; ``quantize(model, bits, calibration=ids)`` uses it, in the same formats.
- :mod:`.kernels`: the weight-only matrix-vector product, readable (``matvec_reference``) and
  compiled (``matvec``: C++, AVX-512 or AVX2 code paths chosen when it runs (``kernel_paths``),
  threads with ``at::parallel_for``), and ``matmul`` for prefill (tiles decoded once, then BLAS;
  with int8 activations an int8 GEMM on AVX-512 VNNI).
- :mod:`.modules`: ``QuantizedLinear``, ``QuantizedEmbedding`` and ``quantize(model, bits, widths=...)``,
  which swaps them into a model in place (the embedding and head at 8 bits by default, as
  llama.cpp does); :func:`transformer_lib.sampling.generate_ids` drives it.
- :mod:`.roofline`: the bandwidth ceiling of decoding, and prefill's arithmetic intensity.
- :mod:`.gguf_blocks`: ``load_smollm2_quantized``, no dequantization at load; ``gguf_widths``, a
  file's own mixture of widths per tensor group.
- :mod:`.fused`: ``FusedDecodeStep``, one compiled call per generated token (q/k/v and
  gate/up fused into one pass each, the KV cache written in place), and its readable reference.
"""
from .formats import (FORMATS, absmax_int8, bytes_per_block, dequantize_blocks, minmax_int4, quantize_blocks,
                      round_trip)
from .gptq import gptq_blocks, gptq_codes, input_hessians, output_error
from .fused import FUSED_ANY, FUSED_VALUES, FusedDecodeStep, decode_step_reference, fuse_rows, fused_refusal
from .gguf_blocks import gguf_widths, load_smollm2_quantized, read_gguf_blocks
from .kernels import (ACTIVATIONS, PATHS, kernel_available, kernel_paths, matmul, matvec, matvec_reference,
                      quantize_activations, simd_available, vnni_available)
from .roofline import decode_ceiling, flops_per_byte
from .modules import (DEFAULT_WIDTHS, TENSOR_GROUPS, QuantizedEmbedding, QuantizedLinear, quantize,
                      tensor_group, weight_bytes)

__all__ = ["FORMATS", "absmax_int8", "minmax_int4", "bytes_per_block", "quantize_blocks", "dequantize_blocks",
           "round_trip", "kernel_available", "kernel_paths", "PATHS", "simd_available", "vnni_available", "matvec", "matmul",
           "matvec_reference",
           "quantize_activations", "ACTIVATIONS", "QuantizedLinear",
           "QuantizedEmbedding", "quantize", "weight_bytes", "DEFAULT_WIDTHS", "TENSOR_GROUPS",
           "tensor_group", "gguf_widths", "load_smollm2_quantized",
           "read_gguf_blocks", "decode_ceiling", "flops_per_byte", "FusedDecodeStep", "decode_step_reference", "fused_refusal", "FUSED_VALUES", "FUSED_ANY",
           "fuse_rows", "gptq_codes", "gptq_blocks", "input_hessians", "output_error"]
