"""Circuits: which parts of a trained model compute an answer, found by reading and by intervening
(chapter 24, "A real model's circuits").

Every tool here works on a pre-norm :class:`~transformer_lib.model.DecoderOnlyLM` (the reader's
GPT, SmolLM2) through the module paths of
:mod:`transformer_lib.probes`: ``blocks.{i}`` (the residual stream after block i),
``blocks.{i}.hook_attn_out`` / ``hook_ffn_out`` (what attention and the FFN add to it) and
``blocks.{i}.hook_z`` (each head's output before W^O). Nothing here hooks a model by itself.

* :func:`logit_lens` (nostalgebraist 2020): read the residual stream after every block with the
  model's own final norm and unembedding, as if the model stopped there.
* :func:`logit_difference` and :func:`normalized_score`: the metric of every experiment,
  ``logit(right) - logit(wrong)`` at the last position, rescaled so the clean run scores 1 and
  the corrupted run 0.
* :func:`patch_residual_sweep` and :func:`patch_head_sweep` (activation patching, Meng et al.
  2022's causal tracing; Heimersheim & Nanda's guide): run the corrupted prompt, put back one
  clean activation, and measure how much of the clean answer returns.
* :func:`attribution_patching` (AtP: Nanda 2023; Kramár et al. 2024): the head sweep's scores
  estimated to first order from one clean forward pass and one corrupted forward and backward.
* :func:`direct_logit_attribution`: split the final residual stream into the pieces that wrote
  it (embedding, every head, every FFN) and project each on the logit-difference direction.
* :func:`ablated_logits` (:func:`ablated_logits_each` for several sets) and :func:`random_heads`:
  remove a set of heads (mean or zero ablation) and compare with as many heads drawn at random
  (defined in :mod:`transformer_lib.ablation`, which chapter 23 uses too; re-exported here).

Why batches everywhere: one patched run per (layer, position) or per head would cost thousands
of forward passes, each streaming all of the model's weights; stacking the patched copies into
one batch per layer does the same work in ``num_layers`` calls (the chapter's CPU budget)."""
from __future__ import annotations

import torch
import torch.nn as nn

from . import probes
from .ablation import _num_heads, _vocab, ablated_logits, ablated_logits_each, random_heads  # re-exported
from ._checks.circuits import (check_answers, check_decoder, check_final_logits, check_index_list, check_prompt_pair,
                               check_score_values)
from ._checks.scalars import check_int
from ._checks.tokens import check_token_ids
from .norms import RMSNorm
from .tasks import IOI_PROMPTS, IOI_TEMPLATE, ioi_batch  # the chapter's prompt pairs, re-exported

__all__ = ["IOI_TEMPLATE", "IOI_PROMPTS", "ioi_batch", "unembed", "logit_lens", "logit_difference", "normalized_score", "patch_residual_sweep",
           "patch_head_sweep", "attribution_patching", "direct_logit_attribution", "ablated_logits", "ablated_logits_each", "random_heads"]


def _answers(model, tokens, correct, wrong):
    B, V = tokens.shape[0], _vocab(model)
    return check_answers("correct", correct, B, V), check_answers("wrong", wrong, B, V)


@torch.no_grad()
def unembed(model: nn.Module, resid: torch.Tensor) -> torch.Tensor:
    """(..., D) residual stream -> (..., V) logits: the model's final norm, then its unembedding.

    Applied to the last block's output this is exactly the model's own output."""
    check_decoder(model)
    return model.head(model.norm(resid))  # (..., D) -> (..., V)


@torch.no_grad()
def logit_lens(model: nn.Module, tokens: torch.Tensor, position: int = -1) -> torch.Tensor:
    """(num_layers, B, V): the logits each block's residual stream would give at ``position``.

    Row i reads ``blocks.{i}`` through :func:`unembed`; the last row equals the model's logits.
    The lens is a reading, not an intervention: it assumes every layer writes in the basis the
    final unembedding reads, which holds better the later the layer (chapter 24, "The logit lens")."""
    check_decoder(model)
    check_token_ids(tokens, _vocab(model))
    check_int("position", position, -tokens.shape[1], tokens.shape[1] - 1)
    names = [f"blocks.{i}" for i in range(len(model.blocks))]
    with probes.record_activations(model, names) as seen:
        model(tokens)
    return unembed(model, torch.stack([seen[n][:, position] for n in names]))  # (num_layers, B, D) -> (.., V)


def logit_difference(logits: torch.Tensor, correct, wrong) -> torch.Tensor:
    """(B,) ``logit[correct] - logit[wrong]`` at the last position of logits (B, L, V) or (B, V).

    A difference of logits is the log of the odds between the two answers, and it ignores
    everything the model does to the other 49,150 tokens: the measure the IOI paper uses."""
    check_final_logits(logits)
    last = logits[:, -1] if logits.dim() == 3 else logits  # (B, V)
    B, V = last.shape
    c, w = check_answers("correct", correct, B, V), check_answers("wrong", wrong, B, V)
    rows = torch.arange(B)
    return last[rows, c.to(last.device)] - last[rows, w.to(last.device)]  # (B,)


def normalized_score(value, clean, corrupted):
    """``(value - corrupted) / (clean - corrupted)``: 1 where the clean answer is fully back, 0
    where the intervention did nothing to the corrupted run. Works on numbers and tensors."""
    check_score_values(value, clean, corrupted)
    return (value - corrupted) / (clean - corrupted)


def _first_difference(clean: torch.Tensor, corrupted: torch.Tensor) -> int:
    """The first position where any clean prompt differs from its corruption (there is one:
    ``check_prompt_pair`` refuses identical prompts)."""
    return int((clean != corrupted).any(0).nonzero()[0])


@torch.no_grad()
def _run_after_prefix(model, corrupted, f: int, copies: int):
    """A function ``patches -> (copies * B, L - f, V) logits``: the corrupted prompts, ``copies``
    times over, run on top of one KV cache of their first ``f`` tokens (chapter 17).

    Those tokens are the same in the clean and the corrupted prompts, so every patched run shares
    them: they are computed once, and each patched run only processes the positions from ``f`` on
    (4 of the 14 IOI tokens). After each run the cache forgets the new positions again."""
    B, L = corrupted.shape
    suffix = corrupted[:, f:].repeat(copies, 1)  # (copies * B, L - f)
    cache = None
    if f > 0:
        cache = model.new_cache(L)
        model(corrupted[:, :f], cache)  # (B, f) once
        cache.reorder(torch.arange(B, device=corrupted.device).repeat(copies))  # row k * B + b <- row b

    def run(patches: dict) -> torch.Tensor:
        with probes.patch_activations(model, patches):
            logits = model(suffix, cache)
        if cache is not None:
            cache.truncate(f)
        return logits
    return run


def _two_runs(model, clean, corrupted, c, w, names):
    """Both runs of a patching sweep: the clean one recording ``names``, and the logit differences
    of each (per pair, (B,), and their means)."""
    with probes.record_activations(model, names) as seen:
        clean_each = logit_difference(model(clean), c, w)  # (B,)
    corrupted_each = logit_difference(model(corrupted), c, w)  # (B,)
    return seen, clean_each, corrupted_each, float(clean_each.mean()), float(corrupted_each.mean())


@torch.no_grad()
def patch_residual_sweep(model: nn.Module, clean: torch.Tensor, corrupted: torch.Tensor, correct, wrong,
                         layers=None, positions=None) -> dict:
    """Patch the clean residual stream into the corrupted run at one (layer, position) at a time.

    For every layer i in ``layers`` and position p in ``positions``, the corrupted prompts run with
    ``blocks.{i}`` at position p replaced by the clean run's value, and the mean logit difference
    (over the B prompt pairs) is rescaled with :func:`normalized_score`. The patched copies of all
    positions run as one batch (B * P rows) per layer. Returns ``{"scores": (len(layers), P),
    "per_pair": (B, len(layers), P) (each pair normalised by its own clean and corrupted values),
    "clean": float, "corrupted": float, "layers": [...], "positions": [...], "first_difference": f}``.

    A position before the first token where the prompts differ (f) scores exactly 0 and is not
    run: in a causal model its clean and corrupted states are the same numbers, so the patch
    would put back what is already there."""
    check_decoder(model)
    check_prompt_pair(clean, corrupted, _vocab(model))
    c, w = _answers(model, clean, correct, wrong)
    B, L = clean.shape
    layers = check_index_list("layers", layers, len(model.blocks))
    positions = check_index_list("positions", positions, L)
    f = _first_difference(clean, corrupted)
    names = [f"blocks.{i}" for i in layers]
    seen, clean_each, corrupted_each, clean_value, corrupted_value = _two_runs(model, clean, corrupted, c, w, names)
    scores = torch.zeros(len(layers), len(positions))
    per_pair = torch.zeros(B, len(layers), len(positions))
    result = {"scores": scores, "per_pair": per_pair, "clean": clean_value, "corrupted": corrupted_value,
              "layers": layers, "positions": positions, "first_difference": f}
    late = [k for k, p in enumerate(positions) if p >= f]  # the columns that can change
    if not late:
        return result
    P = len(late)
    run = _run_after_prefix(model, corrupted, f, P)
    rows = torch.arange(P * B)  # row k * B + b: prompt b patched at positions[late[k]]
    at = (torch.tensor([positions[k] for k in late]) - f).repeat_interleave(B)  # (P * B,) within the suffix
    for j, name in enumerate(names):
        source = seen[name][:, f:].repeat(P, 1, 1)  # (B, L - f, D) -> (P * B, L - f, D)

        def put_back(out, source=source):
            out = out.clone()
            out[rows, at] = source[rows, at]  # one clean position per row
            return out

        diff = logit_difference(run({name: put_back}), c.repeat(P), w.repeat(P))  # (P * B,)
        scores[j, late] = normalized_score(diff.view(P, B).mean(1), clean_value, corrupted_value)
        per_pair[:, j, late] = normalized_score(diff.view(P, B), clean_each, corrupted_each).T  # (B, P)
    return result


@torch.no_grad()
def patch_head_sweep(model: nn.Module, clean: torch.Tensor, corrupted: torch.Tensor, correct, wrong,
                     layers=None) -> dict:
    """Patch one head's clean output (``blocks.{i}.hook_z``, every position) into the corrupted run.

    Same metric as :func:`patch_residual_sweep`; the H patched copies of a layer run as one batch,
    on one cache of the shared prefix. Returns ``{"scores": (len(layers), H), "per_pair": (B, len(layers), H),
    "clean", "corrupted", "layers"}``. A head that scores near 1 carries the difference by itself; heads that
    each score a little may carry it together."""
    check_decoder(model)
    check_prompt_pair(clean, corrupted, _vocab(model))
    c, w = _answers(model, clean, correct, wrong)
    B, H = clean.shape[0], _num_heads(model)
    layers = check_index_list("layers", layers, len(model.blocks))
    f = _first_difference(clean, corrupted)
    names = [f"blocks.{i}.hook_z" for i in layers]
    seen, clean_each, corrupted_each, clean_value, corrupted_value = _two_runs(model, clean, corrupted, c, w, names)
    run = _run_after_prefix(model, corrupted, f, H)
    head_of_row = torch.arange(H).repeat_interleave(B)  # row h * B + b patches head h
    rows = torch.arange(H * B)
    scores, per_pair = torch.zeros(len(layers), H), torch.zeros(B, len(layers), H)
    for j, name in enumerate(names):
        source = seen[name][:, f:].repeat(H, 1, 1, 1)  # (B, L - f, H, d) -> (H * B, L - f, H, d)

        def put_back(z, source=source):
            z = z.clone()
            z[rows, :, head_of_row] = source[rows, :, head_of_row]  # (H * B, L - f, d): one head per row
            return z

        diff = logit_difference(run({name: put_back}), c.repeat(H), w.repeat(H))  # (H * B,)
        scores[j] = normalized_score(diff.view(H, B).mean(1), clean_value, corrupted_value)
        per_pair[:, j] = normalized_score(diff.view(H, B), clean_each, corrupted_each).T  # (B, H)
    return {"scores": scores, "per_pair": per_pair, "clean": clean_value, "corrupted": corrupted_value,
            "layers": layers}


def attribution_patching(model: nn.Module, clean: torch.Tensor, corrupted: torch.Tensor, correct, wrong,
                         layers=None) -> dict:
    """Attribution patching (AtP): :func:`patch_head_sweep`'s scores, estimated to first order.

    Patching head h of block i changes its output from ``z_corr`` to ``z_clean``. Near the
    corrupted run the logit difference is linear in that change, so

        LD(patched) - LD(corrupted) ~ sum over positions and d_head of (z_clean - z_corr) * dLD/dz

    with the gradient taken at the corrupted run. One backward pass gives dLD/dz for every head of
    every block at once: two forward passes and one backward in all, instead of one patched run
    per head. The estimate is exact where the metric is linear in the head's output (a head that
    writes straight to the logits through a frozen norm) and can be far off where a later
    nonlinearity is not: an attention softmax that is saturated in the corrupted run has a
    gradient near 0 even if the clean input would move its weights completely (Kramár et al. 2024).

    Returns ``{"scores": (len(layers), H), "per_pair": (B, len(layers), H), "clean", "corrupted",
    "layers"}``, rescaled by :func:`normalized_score` like :func:`patch_head_sweep`'s."""
    check_decoder(model)
    check_prompt_pair(clean, corrupted, _vocab(model))
    c, w = _answers(model, clean, correct, wrong)
    layers = check_index_list("layers", layers, len(model.blocks))
    names = [f"blocks.{i}.hook_z" for i in layers]
    with torch.no_grad(), probes.record_activations(model, names) as seen:
        clean_each = logit_difference(model(clean), c, w)  # (B,): forward 1, clean, recording z
    # Forward 2 on the corrupted prompts adds a zero "nudge" to every recorded z: the run is
    # unchanged, and d LD / d nudge = d LD / d z, whether or not the weights require gradients.
    nudges, kept = {}, {}

    def nudged(name):
        def add(z):  # (B, L, H, d)
            kept[name] = z.detach()
            nudges[name] = torch.zeros_like(z, requires_grad=True)
            return z + nudges[name]
        return add
    with torch.enable_grad(), probes.patch_activations(model, {n: nudged(n) for n in names}):
        corrupted_each = logit_difference(model(corrupted), c, w)  # (B,)
        # pairs do not interact in a batch, so the gradient of the sum gives each pair its own
        grads = torch.autograd.grad(corrupted_each.sum(), [nudges[n] for n in names])  # each (B, L, H, d)
    corrupted_each = corrupted_each.detach()
    estimate = torch.stack([((seen[n] - kept[n]) * g).sum((1, 3))  # (B, L, H, d) -> (B, H)
                            for n, g in zip(names, grads)], 1)  # (B, len(layers), H): est. change of LD
    clean_value, corrupted_value = float(clean_each.mean()), float(corrupted_each.mean())
    per_clean, per_corrupted = clean_each[:, None, None], corrupted_each[:, None, None]  # (B, 1, 1)
    return {"scores": normalized_score(corrupted_value + estimate.mean(0), clean_value, corrupted_value),
            "per_pair": normalized_score(per_corrupted + estimate, per_clean, per_corrupted),
            "clean": clean_value, "corrupted": corrupted_value, "layers": layers}


@torch.no_grad()
def direct_logit_attribution(model: nn.Module, tokens: torch.Tensor, correct, wrong) -> dict:
    """Each component's direct share of the logit difference at the last position.

    The final residual stream is a sum: ``x = x_0 + sum_i (attn_i + ffn_i)`` and each ``attn_i``
    is a sum over heads (``probes.head_contributions``). The logits read ``norm(x) @ W_U^T``. The
    norm is not linear, so we freeze its scale: ``norm(x) ~ g * x / s`` with s the final norm's
    root mean square (LayerNorm: standard deviation, after centring) *taken from this run*. With
    s frozen every piece projects on the direction ``d = g * (W_U[correct] - W_U[wrong]) / s``,
    and the pieces add up to the run's logit difference (LayerNorm's bias adds a constant,
    returned as ``"bias"``). It measures what a piece writes straight to the answer, not what it
    does through later layers: a head that only moves information scores ~0 here.

    Returns ``{"embed": (B,), "attn": (layers, B), "ffn": (layers, B), "heads": (layers, H, B),
    "bias": (B,), "logit_difference": (B,)}``."""
    check_decoder(model)
    check_token_ids(tokens, _vocab(model))
    c, w = _answers(model, tokens, correct, wrong)
    n = len(model.blocks)
    names = [f"blocks.{i}.{part}" for i in range(n) for part in ("hook_attn_out", "hook_ffn_out", "hook_z")]
    names.append(f"blocks.{n - 1}")
    with probes.record_activations(model, names) as seen:
        logits = model(tokens)
    x = seen[f"blocks.{n - 1}"][:, -1]  # (B, D) the final residual stream
    norm, W_U = model.norm, model.head.weight
    d = W_U[c.to(W_U.device)] - W_U[w.to(W_U.device)]  # (B, D): the logit-difference direction
    g = norm.weight if norm.weight is not None else torch.ones_like(x[0])
    if not isinstance(norm, RMSNorm):  # LayerNorm (the library's or torch's)
        scale = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + norm.eps)  # (B, 1)

        def project(part):  # part (..., B, D): centring is linear, the scale is frozen
            return ((part - part.mean(-1, keepdim=True)) * g / scale * d).sum(-1)
        bias = (norm.bias * d).sum(-1) if getattr(norm, "bias", None) is not None else torch.zeros(len(c))
    else:  # RMSNorm
        scale = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps)  # (B, 1)

        def project(part):
            return (part * g / scale * d).sum(-1)  # (..., B, D) -> (..., B)
        bias = torch.zeros(len(c))
    attn = torch.stack([seen[f"blocks.{i}.hook_attn_out"][:, -1] for i in range(n)])  # (n, B, D)
    ffn = torch.stack([seen[f"blocks.{i}.hook_ffn_out"][:, -1] for i in range(n)])  # (n, B, D)
    heads = torch.stack([probes.head_contributions(model, i, seen[f"blocks.{i}.hook_z"])[:, -1]
                         for i in range(n)])  # (n, B, H, D)
    x0 = x - attn.sum(0) - ffn.sum(0)  # (B, D): what entered block 0 (token and position embeddings)
    return {"embed": project(x0), "attn": project(attn), "ffn": project(ffn),
            "heads": project(heads.transpose(1, 2)),  # (n, H, B, D) -> (n, H, B)
            "bias": bias, "logit_difference": logit_difference(logits, c, w)}
