"""A trained GPT as one ONNX file: what the book's explainer page runs in the browser (chapter 16,
"Explore").

The page (``explainer.html`` at the root of the built book) has no Python: onnxruntime-web runs
the model as WebAssembly. So the file must hold everything the page shows, and the reader's own
model from chapter 16 must be able to replace the book's:

* ``tokens`` (B, L) int64 in, L from 1 to the model's context length;
* ``logits`` (B, V): the next-token logits, of the last position only (all the page needs, and
  a V-fold smaller output than every position's);
* ``attention`` (B, N, H, L, L): every layer's attention weights, N layers of H heads;
* ``config`` (C,) uint8: the UTF-8 JSON of the tokenizer's merges and the model's sizes, a
  constant. A reader's model brings its own tokenizer this way (chapter 16 trains one per run),
  and the page can never pair a model with the wrong vocabulary.

:class:`ExportGraph` runs the model's own forward, unchanged, so every configuration the
model has (learned, sinusoidal, RoPE, ALiBi or no positions; grouped-query attention; Pre- or
Post-LN) exports the same way. The attention weights leave through the blocks' ``hook_pattern``
hook points: while the graph runs, a forward hook on each records what the block's attention
passes it (a hooked point makes the attention form its weights, chapter 23), and the recorded maps
become outputs. One forward pass, no copy of the model's code. ``tests/test_export.py`` holds the
ONNX file equal to torch in onnxruntime for each positional scheme.

The graph comes from ``torch.onnx.export(..., dynamo=True)``: ``torch.export`` traces the
module with a symbolic length, so one file serves every prompt length.
"""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import torch
import torch.nn as nn

from ._checks.export import check_export_args, check_exported, check_onnx_path
from .model import DecoderOnlyLM

__all__ = ["ExportGraph", "export_onnx", "read_config", "pattern_points", "EXPORT_OUTPUTS"]

EXPORT_OUTPUTS = ("logits", "attention", "config")


def pattern_points(model: DecoderOnlyLM) -> list[nn.Module]:
    """Each block's ``hook_pattern`` hook point, first block first: where the weights are read."""
    return [block.hook_pattern for block in model.blocks]


class ExportGraph(nn.Module):
    """``DecoderOnlyLM``'s own forward with the attention weights as outputs.

    ``graph(tokens (B, L))`` -> ``(logits (B, V) of the last position, attention (B, N, H, L, L),
    config (C,) uint8)``. The model must be in eval mode (no dropout); it is not copied, and the
    hooks that record the weights are registered only while ``forward`` runs.
    """

    def __init__(self, model: DecoderOnlyLM, config: dict):
        super().__init__()
        self.model = model
        blob = torch.tensor(list(json.dumps(config, ensure_ascii=False).encode("utf-8")), dtype=torch.uint8)
        self.register_buffer("config", blob, persistent=False)  # (C,)

    def forward(self, tokens: torch.Tensor):
        maps = []  # one (B, H, L, L) per block, in the order the blocks run
        handles = [point.register_forward_hook(lambda module, args, out: maps.append(out))
                   for point in pattern_points(self.model)]
        try:
            logits = self.model(tokens)  # (B, L, V)
        finally:
            for handle in handles:
                handle.remove()
        return logits[:, -1], torch.stack(maps, dim=1), self.config  # (B, V), (B, N, H, L, L), (C,)


def export_config(model: DecoderOnlyLM, tokenizer) -> dict:
    """What the page needs besides the weights: sizes, and the tokenizer as ``to_json`` writes it."""
    return {"format": "transformer_lib.export/1", "vocab_size": model.embed.num_embeddings,
            "context": _context_length(model), "num_layers": len(model.blocks),
            "num_heads": model.blocks[0].self_attn.num_heads,  # query heads: one map each
            "d_model": model.embed.embedding_dim, "tokenizer": json.loads(tokenizer.to_json())}


def _context_length(model: DecoderOnlyLM) -> int:
    """The longest input: the model's ``max_len`` where it keeps one, else a learned or sinusoidal
    table's rows; 256 for a model without a table (RoPE, ALiBi, none)."""
    if isinstance(getattr(model, "max_len", None), int):
        return model.max_len
    if model.pos is None:
        return 256
    return model.pos.max_len if hasattr(model.pos, "max_len") else model.pos.pe.shape[-2]


def export_onnx(model: DecoderOnlyLM, path, tokenizer, opset: int = 18) -> Path:
    """Write ``model`` (with its ``tokenizer``) to the ONNX file ``path`` for the explainer page.

    Inputs and outputs are described in the module docstring. The model is exported in eval mode
    on the CPU and left as it was (mode and device). Returns the path. Takes ~10-20 s (tracing).
    """
    path = check_export_args(model, path, tokenizer, opset)
    config = export_config(model, tokenizer)
    was_training, device = model.training, next(model.parameters()).device
    model.eval().cpu()
    try:
        graph = ExportGraph(model, config).eval()
        with torch.no_grad():  # one eager call at the full context fills any cached table (RoPE's
            model(torch.zeros(1, config["context"], dtype=torch.long))  # cos/sin) for every length
        example = torch.zeros(1, 2, dtype=torch.long)  # (1, 2): any ids; the length is symbolic
        batch, length = torch.export.Dim("batch", max=64), torch.export.Dim("length", max=config["context"])
        # the exporter reports each of its steps on stdout: kept out of the chapter's output
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(graph, (example,), str(path), input_names=["tokens"],
                              output_names=list(EXPORT_OUTPUTS), opset_version=opset, dynamo=True,
                              dynamic_shapes=({0: batch, 1: length},), external_data=False, verbose=False)
    finally:
        model.train(was_training).to(device)
    return path


def read_config(path) -> dict:
    """The ``config`` JSON an exported file carries (read with onnxruntime, as the page does)."""
    import onnxruntime as ort

    path = check_onnx_path(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    check_exported(path, [o.name for o in session.get_outputs()])
    blob = session.run(["config"], {"tokens": [[0]]})[0]
    return json.loads(bytes(blob).decode("utf-8"))
