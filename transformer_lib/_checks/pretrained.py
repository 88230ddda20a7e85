"""Real weights (transformer_lib.pretrained): checkpoint folders, configs and GGUF metadata that the
library's models can hold, and the inputs of the loaded models' helpers."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch


# -- MiniLM (a BERT encoder) --------------------------------------------------------------------

def check_bert_config(cfg: dict) -> None:
    """A Hugging Face ``config.json`` of a plain BERT: GELU, absolute (learned) positions."""
    if cfg.get("hidden_act", "gelu") != "gelu":
        raise ValueError(f"only hidden_act 'gelu' is supported, got {cfg['hidden_act']!r}")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError("only absolute (learned) position embeddings are supported")


def check_model_dir(folder: Path, names) -> None:
    """A checkpoint folder must hold each of ``names``."""
    for name in names:
        if not (folder / name).is_file():
            raise ValueError(f"{folder} has no {name}; expected a BERT checkpoint folder")


def check_bert_state(mapping: dict, own: dict, state: dict) -> None:
    """A BERT state dict that fills every parameter (``own``, through ``mapping`` ours -> BERT's
    name) with a tensor of its shape; extra tensors are allowed."""
    missing = [b for b in mapping.values() if b not in state]
    if missing:
        raise ValueError(f"the checkpoint lacks {len(missing)} BERT tensors, e.g. {missing[:3]}")
    for ours, bert in mapping.items():
        if own[ours].shape != state[bert].shape:
            raise ValueError(f"{bert} has shape {tuple(state[bert].shape)}, "
                             f"expected {tuple(own[ours].shape)} for {ours}")


def check_position_table(length: int, table: int) -> None:
    """A sequence no longer than a learned position table."""
    if length > table:
        raise ValueError(f"sequence of {length} tokens is longer than the learned position table "
                         f"({table} positions)")


def check_mask_like(attention_mask: torch.Tensor, tokens: torch.Tensor) -> None:
    """An attention mask of the shape of its tokens (B, L)."""
    if attention_mask.shape != tokens.shape:
        raise ValueError(f"attention_mask must have the shape of tokens {tuple(tokens.shape)}, "
                         f"got {tuple(attention_mask.shape)}")


def check_embedding_matrix(embeddings: torch.Tensor) -> None:
    """Embeddings (N, D)."""
    if embeddings.dim() != 2:
        raise ValueError(f"embeddings must be (N, D), got shape {tuple(embeddings.shape)}")


def check_text_list(texts, allow_empty: bool = False) -> None:
    """A list (or other sequence) of strings, not one bare string; non-empty unless ``allow_empty``."""
    if isinstance(texts, str) and allow_empty:
        raise ValueError("encode takes a list of strings; wrap a single sentence as [text]")
    if isinstance(texts, str) or not isinstance(texts, Sequence) or (len(texts) == 0 and not allow_empty):
        raise ValueError("texts must be a non-empty list of strings, e.g. ['a sentence', 'another']")


# -- GGUF files and Llama's configuration --------------------------------------------------------

def check_gguf_file(path) -> Path:
    """An existing file; returned as a Path."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"expected a .gguf file, got {path} (no such file)")
    return path


def check_rotary_rows(weight: torch.Tensor, num_heads: int) -> None:
    """A W^Q / W^K whose rows split into ``num_heads`` heads of an even size."""
    if weight.shape[0] % (2 * num_heads):
        raise ValueError(f"expected rows divisible by 2 * num_heads = {2 * num_heads}, got shape {tuple(weight.shape)}")


def check_bpe_metadata(meta: dict, pre_tokenizers) -> None:
    """A GGUF's tokenizer: byte-level BPE (``tokenizer.ggml.model == 'gpt2'``) with a known
    pre-tokenizer, every merge written ``'left right'``."""
    model = meta.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(f"expected a byte-level BPE vocabulary (tokenizer.ggml.model 'gpt2'), got {model!r}")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in pre_tokenizers:
        raise ValueError(f"unknown pre-tokenizer {pre!r}; known: {sorted(pre_tokenizers)}")
    if any(m.count(" ") != 1 for m in meta["tokenizer.ggml.merges"]):
        raise ValueError("expected every merge as 'left right' (one space)")


def check_llama_metadata(meta: dict) -> None:
    """A GGUF of the llama architecture."""
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"expected a GGUF with general.architecture 'llama', got {arch!r}")


def check_full_rotary(rope_dims: int, head_dim: int) -> None:
    """RoPE on every dimension of a head (partial rotary is not built)."""
    if rope_dims != head_dim:
        raise ValueError(f"partial rotary ({rope_dims} of {head_dim} dims) is not supported")


def check_tied_head(tensors: dict) -> None:
    """A GGUF whose output head is the embedding (no separate ``output.weight``)."""
    if "output.weight" in tensors:
        raise ValueError("this GGUF has a separate output matrix; the model ties it to the embedding")


# -- SmolLM2's helpers ---------------------------------------------------------------------------

def check_ids_input(ids: torch.Tensor | None) -> None:
    """Ids given instead of text: 1-D integer (int64 or int32), at least one."""
    if ids.dim() != 1 or ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"expected a string or a 1-D list/tensor of token ids, got {ids.dtype} "
                         f"of shape {tuple(ids.shape)}")


def check_nonempty_ids(ids: torch.Tensor) -> None:
    """At least one token."""
    if ids.numel() == 0:
        raise ValueError("expected at least one token")


def check_chat_template(template) -> None:
    """A model file with a chat template."""
    if not template:
        raise ValueError("this model file has no chat template")
