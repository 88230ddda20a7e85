"""Ablation: remove attention heads from a trained model and see what its output loses (chapter 23's
induction heads, chapter 24's circuits).

* :func:`ablated_logits` (:func:`ablated_logits_each` for several sets at the cost of one
  reference run): the model's logits with a set of ``(layer, head)`` pairs removed at
  ``blocks.{i}.hook_z`` (each head's output before W^O, a :mod:`transformer_lib.probes` path),
  by *mean* ablation (the head's output replaced by its mean over reference prompts) or *zero*
  ablation.
* :func:`random_heads`: as many heads drawn at random, the control every ablation needs (does
  removing *these* heads matter more than removing any?).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from . import probes
from ._checks.circuits import check_ablation, check_decoder, check_head_sets, check_heads, check_reference
from ._checks.scalars import check_int
from ._checks.tokens import check_token_ids

__all__ = ["ablated_logits", "ablated_logits_each", "random_heads"]


def _vocab(model: nn.Module) -> int:
    return model.embed.num_embeddings


def _num_heads(model: nn.Module) -> int:
    return model.blocks[0].self_attn.num_heads


@torch.no_grad()
def ablated_logits(model: nn.Module, tokens: torch.Tensor, heads, how: str = "mean",
                   reference: torch.Tensor | None = None) -> torch.Tensor:
    """(B, L, V) logits with the given ``(layer, head)`` pairs removed at ``blocks.{i}.hook_z``.

    ``how="mean"`` replaces each head's output, position by position, with its mean over the
    ``reference`` prompts (default: ``tokens`` themselves, which must then share one template):
    the head still adds its typical output, but nothing that depends on this prompt. ``"zero"``
    sets it to 0, which also removes the typical part and can hurt more than the head's
    information ever helped (Wang et al. 2022 use mean ablation for that reason)."""
    return ablated_logits_each(model, tokens, [heads], how, reference)[0]


@torch.no_grad()
def ablated_logits_each(model: nn.Module, tokens: torch.Tensor, head_sets, how: str = "mean",
                        reference: torch.Tensor | None = None) -> list[torch.Tensor]:
    """:func:`ablated_logits` for each set of heads in ``head_sets`` (a circuit and its random
    controls), one (B, L, V) each: the reference run that gives the means is made once, not once
    per set, since it does not depend on which heads are removed."""
    check_decoder(model)
    check_token_ids(tokens, _vocab(model))
    check_ablation(how)
    head_sets = check_head_sets(head_sets, len(model.blocks), _num_heads(model))
    means, out = {}, []
    if how == "mean":
        reference = tokens if reference is None else reference
        check_reference(reference, tokens, _vocab(model))
        names = [f"blocks.{i}.hook_z" for i in sorted({i for heads in head_sets for i, _ in heads})]
        with probes.record_activations(model, names) as seen:
            model(reference)
        means = {n: seen[n].mean(0, keepdim=True) for n in names}  # (1, L, H, d)

    def remover(i: int, hs: list[int]):  # a hook on blocks.{i}.hook_z (B, L, H, d): heads hs replaced
        keep = torch.ones(_num_heads(model), 1, dtype=torch.bool, device=tokens.device)  # (H, 1)
        keep[hs] = False
        fill = means[f"blocks.{i}.hook_z"] if how == "mean" else 0.0  # (1, L, H, d) or 0
        return lambda z: torch.where(keep, z, fill)
    for heads in head_sets:
        removers = {f"blocks.{i}.hook_z": remover(i, [h for j, h in heads if j == i]) for i in {i for i, _ in heads}}
        with probes.patch_activations(model, removers):
            out.append(model(tokens))
    return out


def random_heads(model: nn.Module, count: int, seed: int, exclude=()) -> list[tuple[int, int]]:
    """``count`` distinct ``(layer, head)`` pairs drawn uniformly (seeded), none of ``exclude``:
    the control for an ablation (does removing *these* heads matter more than removing any?)."""
    check_decoder(model)
    n, H = len(model.blocks), _num_heads(model)
    exclude = set(check_heads(exclude, n, H)) if len(list(exclude)) else set()
    pool = [(i, h) for i in range(n) for h in range(H) if (i, h) not in exclude]
    check_int("count", count, 1, len(pool))
    check_int("seed", seed, 0)
    order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))[:count]
    return sorted(pool[int(k)] for k in order)
