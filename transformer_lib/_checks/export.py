"""Exporting a model to a file another runtime reads (ONNX for the book's explainer page,
transformer_lib.export)."""
from __future__ import annotations

from pathlib import Path

from .scalars import check_folder, check_int


def check_export_args(model, path, tokenizer, opset: int) -> Path:
    """A ``DecoderOnlyLM`` (any configuration: the graph is its own forward), a path ending in
    ``.onnx`` whose folder exists, the model's own ``BPETokenizer`` (one token per row of the embedding) and an
    ONNX opset in [18, 23]. Returns the path as a ``Path``.

    The model and the tokenizer are recognised by what the export reads from them (a positional
    scheme and an embedding; ``to_json`` and a length), not by their classes: ``_checks`` imports
    nothing above it."""
    if not (hasattr(model, "positional") and hasattr(model, "embed") and hasattr(model, "blocks")):
        raise TypeError(f"model must be a DecoderOnlyLM (chapter 16's GPT), got {type(model).__name__}")
    experts = getattr(getattr(model, "config", None), "num_experts", None)
    if experts is not None:
        raise ValueError(f"model: a mixture of experts (num_experts={experts}) sends each token to the experts its "
                         f"values choose, a data-dependent shape that torch.export cannot trace; export a dense model")
    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or Path ending in .onnx, got {type(path).__name__}")
    path = Path(path)
    if path.suffix != ".onnx":
        raise ValueError(f"path must end in .onnx, got {str(path)!r}")
    check_folder("path", path)
    if not (callable(getattr(tokenizer, "to_json", None)) and hasattr(tokenizer, "__len__")):
        raise TypeError(f"tokenizer must be the model's BPETokenizer, got {type(tokenizer).__name__}")
    if len(tokenizer) != model.embed.num_embeddings:
        raise ValueError(f"tokenizer has {len(tokenizer)} tokens but the model's embedding has "
                         f"{model.embed.num_embeddings} rows: it is not this model's tokenizer")
    if isinstance(opset, bool) or not isinstance(opset, int):
        raise TypeError(f"opset must be an int, got {type(opset).__name__}")
    check_int("opset", opset, 18, 23)
    return path


def check_onnx_path(path) -> Path:
    """An existing ``.onnx`` file."""
    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or Path to an .onnx file, got {type(path).__name__}")
    path = Path(path)
    if path.suffix != ".onnx" or not path.is_file():
        raise ValueError(f"path must be an existing .onnx file, got {str(path)!r}")
    return path


def check_exported(path, output_names) -> None:
    """A file written by ``export_onnx``: its graph has the ``config`` output (``output_names``)."""
    if "config" not in output_names:
        raise ValueError(f"{path} was not written by export_onnx: it has no 'config' output")
