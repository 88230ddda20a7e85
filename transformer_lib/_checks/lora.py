"""LoRA adapters (chapter 21, transformer_lib.lora): the layer to wrap, rank, alpha, targets."""
from __future__ import annotations

import torch
from torch import nn

from .probes import check_module
from .scalars import check_choice, check_int, check_number, check_str_list


def _check_rank_alpha_dropout(rank, alpha, dropout) -> None:
    check_int("rank", rank)  # 0 would be no adapter at all, and alpha / rank a division by zero
    check_number("alpha", alpha, low=0.0, low_open=True)
    check_number("dropout", dropout, low=0.0, high=1.0, high_open=True)  # 1.0 would drop every input


def check_lora_linear(base, rank, alpha, dropout) -> None:
    """``base`` an ``nn.Linear`` (any other module is a ValueError: LoRA here adapts a matrix
    ``x W^T``; something that is not a module at all is a TypeError), ``rank`` an integer in
    ``[1, min(in_features, out_features)]``, ``alpha > 0`` and ``0 <= dropout < 1``."""
    if not isinstance(base, nn.Module):
        raise TypeError(f"base must be an nn.Linear, got {type(base).__name__}")
    if not isinstance(base, nn.Linear):
        raise ValueError(f"base must be an nn.Linear, got the module {type(base).__name__}")
    _check_rank_alpha_dropout(rank, alpha, dropout)
    limit = min(base.in_features, base.out_features)
    if rank > limit:
        raise ValueError(f"rank must be <= min(in_features, out_features) = {limit} for this layer "
                         f"({base.in_features} -> {base.out_features}), got {rank}: a larger rank adds "
                         "parameters but cannot add directions")


def check_add_lora(model, rank, alpha, targets, dropout) -> tuple[str, ...]:
    """``model`` an ``nn.Module`` without adapters yet, the adapter's numbers as for
    :class:`~transformer_lib.lora.LoRALinear`, and ``targets`` a non-empty list of module-name
    suffixes; returned as a tuple."""
    check_lora_model(model)
    # a LoRALinear is recognised by its two factors (``_checks`` imports nothing above it)
    wrapped = [n for n, m in model.named_modules() if hasattr(m, "lora_A") and hasattr(m, "lora_B")]
    if wrapped:
        raise ValueError(f"model already has LoRA adapters (at {', '.join(wrapped[:3])}"
                         f"{', ...' if len(wrapped) > 3 else ''}): merge_lora(model) first, or load into a fresh model")
    _check_rank_alpha_dropout(rank, alpha, dropout)
    targets = check_str_list("targets", targets)
    if not targets or any(not t or t.startswith(".") or t.endswith(".") for t in targets):
        raise ValueError(f"targets must be a non-empty list of module-name suffixes such as ['q_proj', 'v_proj'], "
                         f"got {list(targets)!r}")
    return targets


def check_lora_model(model) -> None:
    """``model`` must be an ``nn.Module`` (the model to adapt, merge, save or load into)."""
    check_module(model)


def check_chat_texts(**texts) -> None:
    """Each named text a str (``None`` allowed only for ``system``); the prompt and answer non-empty."""
    for name, value in texts.items():
        if value is None and name == "system":
            continue
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        if name != "system" and not value.strip():
            raise ValueError(f"{name} must be a non-empty string, got {value!r}")


def check_tokens_and_mask(tokens, mask) -> None:
    """``tokens`` an integer tensor (B, L) and ``mask`` a bool tensor of the same shape."""
    if not isinstance(tokens, torch.Tensor) or not isinstance(mask, torch.Tensor):
        raise TypeError(f"tokens and mask must be torch.Tensors, got {type(tokens).__name__} and "
                        f"{type(mask).__name__}")
    if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"tokens must be an integer tensor (B, L), got {tokens.dtype} of shape {tuple(tokens.shape)}")
    if mask.dtype != torch.bool or mask.shape != tokens.shape:
        raise ValueError(f"mask must be a bool tensor of the shape of tokens {tuple(tokens.shape)}, "
                         f"got {mask.dtype} of shape {tuple(mask.shape)}")


def check_answer_loss(logits, tokens, mask, reduction) -> None:
    """``logits`` (B, L, V) float, ``tokens``/``mask`` as :func:`check_tokens_and_mask` with the same
    (B, L), at least one answer token after position 0, and ``reduction`` 'mean' or 'sum'."""
    check_tokens_and_mask(tokens, mask)
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dim() != 3 or not logits.is_floating_point() or logits.shape[:2] != tokens.shape:
        raise ValueError(f"logits must be a float tensor (B, L, V) with (B, L) = {tuple(tokens.shape)}, "
                         f"got {logits.dtype} of shape {tuple(logits.shape)}")
    check_choice("reduction", reduction, ("mean", "sum"))
    if not bool(mask[:, 1:].any()):
        raise ValueError("mask must mark at least one answer token after position 0 (the first token has "
                         "no position before it to predict it)")


def check_template_prefix(prompt_text: str, full: str) -> None:
    """A chat template must render the prompt the same with an answer after it (the answer mask
    starts where the prompt ends)."""
    if not full.startswith(prompt_text):
        raise ValueError("the chat template renders the prompt differently with an answer after it")


def check_examples(examples, batch_size: int = 1) -> None:
    """Training examples, ``(ids, mask)`` pairs: at least ``batch_size`` of them (one to pad)."""
    if batch_size == 1 and not examples:
        raise ValueError("examples must hold at least one (ids, mask) pair")
    if len(examples) < batch_size:
        raise ValueError(f"examples must hold at least batch_size = {batch_size} examples, got {len(examples)}")


def check_micro_batches(micro_batches: list) -> int:
    """At least one ``(tokens, mask)`` pair, with at least one answer token after position 0 in
    all of them together; returns that count of answer tokens."""
    if not micro_batches:
        raise ValueError("micro_batches must hold at least one (tokens, mask) pair")
    total = sum(int(m[:, 1:].sum()) for _, m in micro_batches)  # answer tokens that get a loss
    if total == 0:
        raise ValueError("micro_batches hold no answer tokens (mask is False everywhere after position 0)")
    return total


def check_targets_found(model, missing: list[str]) -> None:
    """Every target suffix must match at least one ``nn.Linear`` (a misspelt one would train nothing)."""
    if missing:
        linears = [p for p, m in model.named_modules() if isinstance(m, nn.Linear)]
        example = ", ".join(linears[:4]) + (", ..." if len(linears) > 4 else "") if linears else "none"
        raise ValueError(f"targets {missing!r} match no nn.Linear in the model (its nn.Linear paths: {example})")


def check_has_adapters(modules: dict) -> None:
    """A model to save adapters from must have some."""
    if not modules:
        raise ValueError("model has no LoRA adapters to save: call add_lora(model, ...) first")


def check_adapter_record(record, path, format_name: str) -> None:
    """What ``torch.load(path)`` read must be a record of ``format_name`` (written by save_lora)."""
    if not isinstance(record, dict) or record.get("format") != format_name:
        raise ValueError(f"path {str(path)!r} is not a LoRA adapter file written by save_lora ({format_name})")


def check_adapter_targets(names: dict, stored, path) -> None:
    """Every path stored in the adapter file must be an ``nn.Linear`` of the model (``names``:
    the model's ``named_modules()``)."""
    bad = [p for p in stored if not isinstance(names.get(p), nn.Linear)]
    if bad:
        raise ValueError(f"model has no nn.Linear at {bad[:3]} named in the adapter file {str(path)!r}")


def check_adapters_match(have: dict, stored: dict, path) -> None:
    """A model's adapters must be exactly the stored ones: the same paths, ranks and alphas."""
    if set(have) != set(stored) or any(have[p].rank != c["rank"] or have[p].alpha != c["alpha"]
                                       for p, c in stored.items()):
        raise ValueError(f"model's adapters differ from those in {str(path)!r} (paths, rank or alpha)")


def check_adapter_shape(name: str, stored: torch.Tensor, param: torch.Tensor, path) -> None:
    """A stored factor must have the shape of the model's."""
    if stored.shape != param.shape:
        raise ValueError(f"{name} has shape {tuple(stored.shape)} in {str(path)!r}, "
                         f"the model's is {tuple(param.shape)}")
