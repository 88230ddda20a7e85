"""Induction heads (chapter 23): the data, the scores and the interventions.

An induction head completes a pattern it has seen earlier in the context: at a token A it looks
back at the token that *followed* the previous A, and copies it (``... A B ... A -> B``). It
needs two heads in two layers (Elhage et al. 2021): a *previous-token* head in layer 0 writes
"my previous token was A" into each position, and the layer-1 head's keys read that (its W^K
composes with the layer-0 head's W^OV: K-composition), so that the query "I am A" matches the
key "my previous token was A". One layer cannot build that, which is why a one-layer model fails
at in-context copying of random tokens, and why the two-layer model learns it in a sudden drop
of the loss (Olsson et al. 2022, the phase change).

* data: :func:`repeated_random_tokens` (random tokens, then the same tokens again) and
  :func:`in_context_loss` (the loss on the repeated part only, where copying is the answer);
* scores per head, from weights or from recorded patterns: :func:`previous_token_scores`,
  :func:`induction_scores` (prefix matching), :func:`copying_scores` (the OV circuit's
  eigenvalues) and :func:`k_composition_scores` (with :func:`composition_baseline`);
* interventions: :func:`ablated_losses` (each head zero- or mean-ablated through ``hook_z``) and
  :func:`remove_from_paths` (one head's output removed from one input of the next layer).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import check_choice, check_divisible, check_generator, check_int, check_square_maps
from ._checks.probes import (check_block_index, check_block_order, check_context, check_in_context, check_loss_curve,
                             check_module, check_score_table)
from .probes import patch_activations, record_activations
from .training import causal_lm_loss, train_loop, warmup_schedule

__all__ = ["repeated_random_tokens", "in_context_loss", "train_induction", "phase_change_step", "attention_patterns",
           "previous_token_scores", "induction_scores", "head_weights", "ov_circuit", "copying_scores",
           "k_composition_scores", "composition_baseline", "ablated_losses", "remove_from_paths", "top_heads",
           "load_induction_run"]


# -- data --------------------------------------------------------------------------------------------

def repeated_random_tokens(batch_size: int, length: int, vocab_size: int, min_repeat: int | None = None,
                           generator: torch.Generator | None = None, low: int = 0):
    """Random tokens whose end repeats an earlier block: ``(tokens (B, L), in_context (B, L - 1))``.

    With ``min_repeat=None`` the second half repeats the first (L even): ``x_0 .. x_{n-1} x_0 ..
    x_{n-1}``, n = L / 2. With ``min_repeat`` each sequence draws its own block length n in
    ``[min_repeat, L / 2]`` and starts with ``L - 2n`` random lead-in tokens, so that *where* the
    repeat starts is not a fixed position: a model with learned positions could otherwise copy
    from position i - n + 1 by position alone, in one layer, without reading a single token.

    ``in_context[b, t]`` is True when the target ``tokens[b, t + 1]`` lies in the repeat after its
    first token: the targets a model can only get right by copying from context. Token ids are
    drawn uniformly from ``[low, vocab_size)`` (``low`` skips special tokens of a real vocabulary).
    """
    check_int("batch_size", batch_size)
    check_int("length", length, 4)
    check_int("vocab_size", vocab_size, 2)
    check_int("low", low, 0, vocab_size - 2)
    if min_repeat is None:
        check_divisible("length", length, 2, why=" (the second half repeats the first)")
    else:
        check_int("min_repeat", min_repeat, 2, length // 2)
    check_generator("generator", generator)
    half = length // 2
    tokens = torch.randint(low, vocab_size, (batch_size, length), generator=generator)  # (B, L)
    if min_repeat is None:
        n = torch.full((batch_size,), half)
    else:
        n = torch.randint(min_repeat, half + 1, (batch_size,), generator=generator)  # (B,) block lengths
    pos = torch.arange(length)  # (L,)
    start = length - n  # (B,) where the repeat starts
    source = torch.where(pos >= start[:, None], pos - n[:, None], pos)  # (B, L): copy from n back
    tokens = torch.gather(tokens, 1, source)  # (B, L)
    in_context = pos[None, 1:] > start[:, None]  # (B, L - 1): target t + 1 after the repeat's first
    return tokens, in_context


def in_context_loss(logits: torch.Tensor, tokens: torch.Tensor, in_context: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the targets marked in ``in_context`` (B, L - 1).

    On random tokens there are two levels to compare with: ln(V) for a model that guesses (the
    first half can never be better) and 0 for perfect copying."""
    check_in_context(logits, tokens, in_context)
    B, L, V = logits.shape
    losses = F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1), reduction="none")
    return losses.view(B, L - 1)[in_context].mean()  # (B * (L-1),) -> (B, L-1) -> mean over marked


def phase_change_step(steps, losses, window: int = 5) -> int:
    """The step at which a loss curve falls fastest: the centre of the ``window`` consecutive
    points (after smoothing each point with its neighbours) with the largest drop per step."""
    steps, losses = check_loss_curve(steps, losses, window)
    smooth = F.avg_pool1d(losses[None, None], 3, stride=1, padding=1, count_include_pad=False)[0, 0]
    drop = (smooth[:-window] - smooth[window:]) / (steps[window:] - steps[:-window])  # per step
    i = int(torch.argmax(drop))
    return int(steps[i + window // 2 + (window % 2 == 0)] if window > 1 else steps[i + 1])


def train_induction(model: nn.Module, steps: int, batch_size: int = 64, min_repeat: int | None = 6,
                    lr: float = 3e-3, eval_every: int = 25, seed: int = 0, eval_size: int = 128,
                    warmup: int = 100, context: int | None = None, callback=None):
    """Train ``model`` (a decoder-only LM) on :func:`repeated_random_tokens` of length ``context``
    with the ordinary next-token loss on every position, and follow the in-context loss.

    ``context`` defaults to the length of the model's learned position table; a model without
    one (rotary or ALiBi positions, which have no table) needs it given.

    Every ``eval_every`` steps it measures the in-context loss on a fixed evaluation batch (drawn
    like the training data, from seed ``seed + 1``) and keeps every head's pattern on one fixed
    sequence whose second half repeats the first (for the chapter's step slider). Runs on the loop
    core (:func:`~transformer_lib.training.train_loop`, with its :func:`~transformer_lib.training.causal_lm_loss`
    and :func:`~transformer_lib.training.warmup_schedule`) and returns its
    :class:`~transformer_lib.training.History`: ``loss`` (every step), per evaluation ``steps``,
    ``in_context_loss`` and ``patterns`` (stacked: evals, layers, H, L, L), and ``shown_tokens``;
    ``callback(step, history)`` runs after every step. AdamW without weight decay, the learning
    rate rising linearly over ``warmup`` steps and then constant, gradients clipped at 1. Use an
    *untied* model (``tie_weights=False``): in our runs (benchmarks/induction.py) the tied
    two-layer model stayed on the one-layer plateau (in-context loss ~2.9) for 2000 steps, the
    untied one dropped to ~0.45."""
    check_module(model)
    check_int("steps", steps)
    check_int("eval_every", eval_every, 1, steps)
    check_int("warmup", warmup, 0)
    table = getattr(getattr(model, "pos", None), "max_len", None)  # a learned / sinusoidal table's length
    L = check_context(context, table)
    V = model.embed.num_embeddings
    g = torch.Generator().manual_seed(seed)
    eval_tokens, eval_mask = repeated_random_tokens(eval_size, L, V, min_repeat, torch.Generator().manual_seed(seed + 1))
    shown, _ = repeated_random_tokens(1, L, V, None, torch.Generator().manual_seed(seed + 2))

    def evaluate(step):
        with torch.no_grad():
            loss = float(in_context_loss(model(eval_tokens), eval_tokens, eval_mask))
            return {"steps": step, "in_context_loss": loss,
                    "patterns": attention_patterns(model, shown)[:, 0]}  # (layers, H, L, L)

    def step_fn(step):
        tokens, _ = repeated_random_tokens(batch_size, L, V, min_repeat, g)
        return causal_lm_loss(model(tokens), tokens)  # (B, L, V) logits, every position's next token

    params = [p for p in model.parameters() if p.requires_grad]  # a switched-off FFN is frozen
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    record = train_loop(model, optimizer, steps, step_fn, schedule=warmup_schedule(warmup), grad_clip=1.0,
                        params=params, evaluate=evaluate, eval_every=eval_every, callback=callback)
    record["patterns"] = torch.stack(record["patterns"])  # (evals, layers, H, L, L)
    record["shown_tokens"] = shown[0]
    return record


# -- scores from attention patterns -----------------------------------------------------------------

def attention_patterns(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """(layers, B, H, L, L): every block's ``hook_pattern`` on ``tokens`` (recorded, no gradient)."""
    check_module(model)
    names = [f"blocks.{i}.hook_pattern" for i in range(len(model.blocks))]
    with torch.no_grad(), record_activations(model, names) as acts:
        model(tokens)
    return torch.stack([acts[n] for n in names])  # layers x (B, H, L, L)


def previous_token_scores(patterns: torch.Tensor) -> torch.Tensor:
    """(..., B, H, L, L) -> (..., H): mean weight of query i on key i - 1 (over queries and batch).
    A perfect previous-token head scores 1."""
    check_square_maps(patterns)
    return torch.diagonal(patterns, offset=-1, dim1=-2, dim2=-1).mean(dim=-1).mean(dim=-2)  # (..., B, H) -> (..., H)


def induction_scores(patterns: torch.Tensor, half: int) -> torch.Tensor:
    """(..., B, H, L, L) -> (..., H): the prefix-matching score on sequences whose second half
    (from position ``half``) repeats the first.

    Query i in the repeat attends to key ``i - half + 1``: the token *after* the earlier copy of
    its own token. The score is the mean weight there over the repeat's queries and the batch;
    a perfect induction head scores 1, one that ignores the tokens about 1 / i."""
    L = check_square_maps(patterns)
    check_int("half", half, 1, L - 1)
    stripe = torch.diagonal(patterns, offset=-(half - 1), dim1=-2, dim2=-1)  # (..., B, H, L - half + 1)
    return stripe[..., 1:].mean(dim=-1).mean(dim=-2)  # queries half .. L - 1 -> (..., H)


def top_heads(scores: torch.Tensor, k: int = 5) -> list[tuple[str, float]]:
    """The ``k`` best heads of a (layers, H) score table as ``("layer.head", score)``, best first."""
    check_score_table(scores, k)
    values, flat = scores.flatten().topk(k)
    H = scores.shape[1]
    return [(f"{int(i) // H}.{int(i) % H}", float(v)) for v, i in zip(values, flat)]


# -- scores from the weights (Elhage et al. 2021) -----------------------------------------------------

def head_weights(model: nn.Module, layer: int) -> dict[str, torch.Tensor]:
    """Block ``layer``'s per-head matrices in the row-vector convention of the paper (x is a row):
    ``W_Q, W_K, W_V`` (H, D, d_head), ``W_O`` (H, d_head, D), and the two circuits
    ``W_QK = W_Q W_K^T`` and ``W_OV = W_V W_O``, each (H, D, D).

    ``nn.Linear`` computes x @ weight.T, so head h's W_Q is the transpose of rows h*d .. (h+1)*d
    of ``q_proj.weight``, and its W_O the transpose of columns h*d .. (h+1)*d of ``out_proj``'s.
    Grouped-query heads use their key/value head's W_K, W_V. LayerNorm and biases are left out,
    as in the paper."""
    check_block_index(model, layer)
    attn = model.blocks[layer].self_attn
    H, d = attn.num_heads, attn.head_dim
    D = attn.out_proj.weight.shape[0]

    def per_head(linear):  # (H_x * d, D) -> (H, D, d), each kv head repeated for its query heads
        w = linear.weight.detach().view(-1, d, D).transpose(1, 2)  # (H_x, D, d)
        return w.repeat_interleave(H // w.shape[0], dim=0)  # (H, D, d)

    W_Q, W_K, W_V = per_head(attn.q_proj), per_head(attn.k_proj), per_head(attn.v_proj)
    W_O = attn.out_proj.weight.detach().T.reshape(H, d, D)  # (H*d, D) -> (H, d, D)
    return {"W_Q": W_Q, "W_K": W_K, "W_V": W_V, "W_O": W_O,
            "W_QK": W_Q @ W_K.transpose(1, 2), "W_OV": W_V @ W_O}  # (H, D, D) each


def ov_circuit(model: nn.Module, layer: int) -> torch.Tensor:
    """(H, V, V): the full OV circuit ``W_E W_OV W_U`` of each head of block ``layer``: row a is
    how attending to token a raises every output logit, through this head alone."""
    W_E = model.embed.weight.detach()  # (V, D)
    W_U = model.head.weight.detach().T  # (D, V)
    return W_E @ head_weights(model, layer)["W_OV"] @ W_U  # (V, D) @ (H, D, D) @ (D, V) -> (H, V, V)


def copying_scores(model: nn.Module, layer: int) -> torch.Tensor:
    """(H,): sum(eigenvalues) / sum(|eigenvalues|) of each head's OV circuit (Elhage et al.).

    A head that copies (attending to token a raises the logit of a itself) has a circuit close to
    a positive multiple of the identity, whose eigenvalues are all positive: score near +1. A
    head whose circuit is random scores near 0, one that suppresses what it sees near -1. The
    eigenvalues of the (V, V) circuit are those of the smaller (D, D) ``W_OV W_U W_E`` (plus
    zeros), which is what is computed."""
    W_E = model.embed.weight.detach().double()  # (V, D)
    W_U = model.head.weight.detach().double().T  # (D, V)
    W_OV = head_weights(model, layer)["W_OV"].double()  # (H, D, D)
    eig = torch.linalg.eigvals(W_OV @ W_U @ W_E)  # (H, D): same non-zero eigenvalues as W_E W_OV W_U
    return (eig.sum(-1).real / eig.abs().sum(-1)).float()  # (H,)


def _composition(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """||left @ right||_F / (||left||_F ||right||_F) for every pair: (H1, D, D), (H2, D, D) -> (H1, H2)."""
    product = torch.einsum("aij,bjk->abik", left, right)  # (H1, H2, D, D)
    norms = left.flatten(1).norm(dim=-1)[:, None] * right.flatten(1).norm(dim=-1)[None]  # (H1, H2)
    return product.flatten(2).norm(dim=-1) / norms


def k_composition_scores(model: nn.Module, earlier: int = 0, later: int = 1) -> torch.Tensor:
    """(H_earlier, H_later): how much each later head's keys read what each earlier head wrote.

    The earlier head adds ``x W_OV`` to the residual stream; the later head's attention score is
    ``x_q W_QK x_k^T``, so the part of its keys that comes from the earlier head is governed by
    ``W_OV W_QK^T``. The score is that product's Frobenius norm relative to the two norms
    (Elhage et al. 2021): 1 when the earlier head writes exactly where the later head's keys read,
    and about :func:`composition_baseline` for unrelated matrices."""
    check_block_order(model, earlier, later)
    W_OV = head_weights(model, earlier)["W_OV"]  # (H1, D, D)
    W_QK = head_weights(model, later)["W_QK"]  # (H2, D, D)
    return _composition(W_OV, W_QK.transpose(1, 2))  # (H1, H2)


def composition_baseline(model: nn.Module, earlier: int = 0, later: int = 1, samples: int = 20,
                         seed: int = 0) -> float:
    """The mean composition score of Gaussian matrices with the ranks of W_OV and W_QK (products of
    (D, d_head) and (d_head, D) factors): the level that means "no composition"."""
    check_int("samples", samples)
    check_block_index(model, later)
    W_V = head_weights(model, earlier)["W_V"]  # (H, D, d_head)
    D, d = W_V.shape[1], W_V.shape[2]
    g = torch.Generator().manual_seed(seed)
    draw = lambda: torch.randn(samples, D, d, generator=g) @ torch.randn(samples, d, D, generator=g)  # noqa: E731
    left, right = draw(), draw()
    return float(torch.diagonal(_composition(left, right)).mean())  # pairs (left_s, right_s)


# -- interventions ----------------------------------------------------------------------------------

def ablated_losses(model: nn.Module, tokens: torch.Tensor, in_context: torch.Tensor, kind: str = "zero",
                   reference: torch.Tensor | None = None) -> torch.Tensor:
    """(layers, H): the in-context loss with each head ablated on its own, through ``hook_z``.

    ``kind="zero"`` sets the head's output z to 0; ``kind="mean"`` replaces it by its mean over
    the batch and positions of ``reference`` tokens (``tokens`` when None), which keeps the
    constant the head contributes on average and removes what depends on the input and on the
    position. Both move the residual stream off the distribution the later layers saw (zero
    ablation also removes the constant; mean ablation leaves a constant where the head wrote
    something else), so read the result per position and beside other evidence (chapter 23).
    Compare with ``in_context_loss`` of the unablated model."""
    check_module(model)
    check_choice("kind", kind, ("zero", "mean"))
    layers = len(model.blocks)
    names = [f"blocks.{i}.hook_z" for i in range(layers)]
    with torch.no_grad():
        with record_activations(model, names) as acts:
            model(tokens if reference is None else reference)
        means = {n: acts[n].mean(dim=(0, 1)) for n in names}  # (H, d_head) each
        H = means[names[0]].shape[0]
        out = torch.zeros(layers, H)
        for i, name in enumerate(names):
            for h in range(H):
                def ablate(z, h=h, name=name):  # (B, L, H, d_head)
                    z = z.clone()
                    z[..., h, :] = 0.0 if kind == "zero" else means[name][h]
                    return z
                with patch_activations(model, {name: ablate}):
                    out[i, h] = in_context_loss(model(tokens), tokens, in_context)
    return out


def remove_from_paths(model: nn.Module, tokens: torch.Tensor, layer: int, head: int) -> dict:
    """Path patching in its simplest form (chapter 23): head ``layer.head``'s output replaced by its
    mean over the batch at each position, everywhere or in one path only.

    Returns ``{"everywhere": logits}`` (the head removed from every later reader) and, for ``path``
    in ``"q"``, ``"k"``, ``"v"``, ``{path: (logits, pattern)}``: the head removed only from the
    stream block ``layer + 1`` computes its queries, keys or values from (that projection reads
    the stream as it is without the head, after the block's first norm; everything else reads the
    clean stream), with that block's attention pattern (B, H, L, L). A path-specific mean ablation:
    an intervention on one path from one head to another, not on the head everywhere."""
    check_module(model)
    check_int("layer", layer, 0, len(model.blocks) - 2)
    block = model.blocks[layer + 1]
    check_int("head", head, 0, block.self_attn.num_heads - 1)

    def removed(z):  # (B, L, H, d_head): the head's output replaced by its mean at each position
        z = z.clone()
        z[:, :, head] = z[:, :, head].mean(0, keepdim=True)
        return z

    resid = f"blocks.{layer}.hook_resid_post"
    with torch.no_grad():
        with patch_activations(model, {f"blocks.{layer}.hook_z": removed}):
            with record_activations(model, [resid]) as r:
                out = {"everywhere": model(tokens)}
        stream = block.norm1(r[resid])  # the stream the next block reads, without the head
    for path in ("q", "k", "v"):
        handle = getattr(block.self_attn, f"{path}_proj").register_forward_hook(
            lambda m, inputs, output: F.linear(stream, m.weight, m.bias))  # only this projection
        try:
            with torch.no_grad(), record_activations(model, [f"blocks.{layer + 1}.hook_pattern"]) as a:
                out[path] = (model(tokens), a[f"blocks.{layer + 1}.hook_pattern"])
        finally:
            handle.remove()
    return out


# -- the benchmark's trained models (benchmarks/induction.py) ----------------------------------------

def load_induction_run(layers: int = 2, path=None):
    """``(model, record)``: the seed-0 model with ``layers`` blocks that ``benchmarks/induction.py``
    trained, and its record (``steps``, ``in_context_loss``, ``patterns`` (evals, layers, H, L, L)
    in float16, ``shown_tokens``). ``path`` defaults to the packaged ``data/induction_runs.pt``.
    Loaded with ``weights_only=True`` (tensors, numbers, strings and lists).

    A run saved with a ``config`` (vocabulary, width, heads, context, positional scheme) is rebuilt
    from it; one without is a learned-position run, whose sizes are read off its weights."""
    from pathlib import Path

    from .model import DecoderOnlyLM
    check_int("layers", layers, 1, 2)
    path = Path(__file__).resolve().parent / "data" / "induction_runs.pt" if path is None else Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run benchmarks/induction.py")
    run = torch.load(path, weights_only=True)[f"{layers}_layer"]
    state = run["state_dict"]
    V, D = state["embed.weight"].shape
    cfg = run.get("config") or {"positional": "learned", "context": state["pos.embedding.weight"].shape[0],
                                "heads": run["patterns"].shape[2]}
    model = DecoderOnlyLM(V, D, cfg["heads"], layers, max_len=cfg["context"], ffn=False,
                          positional=cfg["positional"], tie_weights=False)
    model.load_state_dict(state)
    return model.eval(), {k: v for k, v in run.items() if k != "state_dict"}
