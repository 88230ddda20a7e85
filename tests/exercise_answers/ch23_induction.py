"""Answers for the checkers of transformer_lib/exercises/ch23_induction.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import numpy as np
import torch


def previous_reference(pattern):
    return torch.diagonal(pattern, offset=-1, dim1=-2, dim2=-1).mean(-1)


def _previous_loop(pattern):
    H, L, _ = pattern.shape
    return [sum(float(pattern[h, i, i - 1]) for i in range(1, L)) / (L - 1) for h in range(H)]


def _previous_numpy(pattern):
    p = np.asarray(pattern)
    L = p.shape[-1]
    return p[:, np.arange(1, L), np.arange(L - 1)].mean(-1)


def induction_reference(pattern, half):
    return torch.diagonal(pattern, offset=-(half - 1), dim1=-2, dim2=-1)[..., 1:].mean(-1)


def _induction_loop(pattern, half):
    H, L, _ = pattern.shape
    return [sum(float(pattern[h, i, i - half + 1]) for i in range(half, L)) / (L - half) for h in range(H)]


def _induction_numpy(pattern, half):
    p = np.asarray(pattern)
    q = np.arange(half, p.shape[-1])
    return p[:, q, q - half + 1].mean(-1)


def k_reference(W_OV, W_QK):
    return torch.linalg.norm(W_OV @ W_QK.T) / (torch.linalg.norm(W_OV) * torch.linalg.norm(W_QK))


def _k_numpy(W_OV, W_QK):
    a, b = np.asarray(W_OV, dtype=np.float64), np.asarray(W_QK, dtype=np.float64)
    return np.sqrt(((a @ b.T) ** 2).sum()) / np.sqrt((a ** 2).sum() * (b ** 2).sum())


def _k_transposed(W_OV, W_QK):  # the same norm: ||(A B^T)^T|| = ||B A^T||
    return float(torch.linalg.norm(W_QK @ W_OV.T) / (W_OV.norm() * W_QK.norm()))


ANSWERS = {
    "induction.previous_token_score": {
        "solution": lambda: previous_reference,
        "alternatives": lambda: [_previous_loop, _previous_numpy],
        "wrong": lambda: [
            lambda p: torch.diagonal(p, offset=1, dim1=-2, dim2=-1).mean(-1),  # next token (always 0)
            lambda p: torch.diagonal(p, offset=0, dim1=-2, dim2=-1).mean(-1),  # the token itself
            lambda p: torch.diagonal(p, offset=-1, dim1=-2, dim2=-1).sum(-1),  # a sum, not a mean
            lambda p: torch.diagonal(p, offset=-1, dim1=-2, dim2=-1).mean(),  # one number for all heads
            lambda p: torch.diagonal(p, offset=-1, dim1=-2, dim2=-1).sum(-1) / p.shape[-1],  # / L
        ],
    },
    "induction.induction_score": {
        "solution": lambda: induction_reference,
        "alternatives": lambda: [_induction_loop, _induction_numpy],
        "wrong": lambda: [
            lambda p, h: torch.diagonal(p, offset=-h, dim1=-2, dim2=-1).mean(-1),  # the copy itself, not the next
            lambda p, h: torch.diagonal(p, offset=-(h - 1), dim1=-2, dim2=-1).mean(-1),  # includes query h-1
            lambda p, h: torch.diagonal(p, offset=-(h + 1), dim1=-2, dim2=-1).mean(-1),  # the token before it
            lambda p, h: torch.diagonal(p, offset=-1, dim1=-2, dim2=-1).mean(-1),  # previous token
            lambda p, h: torch.diagonal(p, offset=-(h - 1), dim1=-2, dim2=-1)[..., 1:].sum(-1),  # a sum
        ],
    },
    "induction.k_composition": {
        "solution": lambda: k_reference,
        "alternatives": lambda: [_k_numpy, _k_transposed],
        "wrong": lambda: [
            lambda a, b: torch.linalg.norm(a @ b) / (a.norm() * b.norm()),  # Q-composition's product
            lambda a, b: torch.linalg.norm(a @ b.T),  # not normalized
            lambda a, b: torch.linalg.norm(a @ b.T) / (a.norm() + b.norm()),  # sum of norms
            lambda a, b: (a * b).sum() / (a.norm() * b.norm()),  # cosine of the matrices
            lambda a, b: torch.linalg.matrix_norm(a @ b.T, ord=2) / (a.norm() * b.norm()),  # spectral
        ],
    },
}


def position_mean_reference(model, tokens, in_context, layer, head):
    from transformer_lib.induction import in_context_loss
    from transformer_lib.probes import patch_activations

    def fill(z):
        z = z.clone()
        z[:, :, head] = z[:, :, head].mean(0, keepdim=True)
        return z

    with torch.no_grad(), patch_activations(model, {f"blocks.{layer}.hook_z": fill}):
        return in_context_loss(model(tokens), tokens, in_context)


def _position_mean_where(model, tokens, in_context, layer, head):  # a mask, a float out
    from transformer_lib.induction import in_context_loss
    from transformer_lib.probes import patch_activations

    def fill(z):
        pick = torch.zeros(z.shape[2], dtype=torch.bool)
        pick[head] = True
        return torch.where(pick[:, None], z.mean(0, keepdim=True).expand_as(z), z)

    with torch.no_grad(), patch_activations(model, {f"blocks.{layer}.hook_z": fill}):
        return float(in_context_loss(model(tokens), tokens, in_context))


def _ablation_variant(how):
    def ablated(model, tokens, in_context, layer, head):
        from transformer_lib.induction import in_context_loss
        from transformer_lib.probes import patch_activations
        heads = slice(None) if how == "all_heads" else (head + 1) % 4 if how == "wrong_head" else head

        def fill(z):
            z = z.clone()
            if how == "zero":
                z[:, :, heads] = 0.0
            elif how == "global_mean":
                z[:, :, heads] = z[:, :, heads].mean((0, 1), keepdim=True)
            else:
                z[:, :, heads] = z[:, :, heads].mean(0, keepdim=True)
            return z

        with torch.no_grad(), patch_activations(model, {f"blocks.{layer}.hook_z": fill}):
            logits = model(tokens)
        if how == "every_target":
            V = logits.shape[-1]
            return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))
        return in_context_loss(logits, tokens, in_context)
    return ablated


def _ablation_clean(model, tokens, in_context, layer, head):
    from transformer_lib.induction import in_context_loss
    with torch.no_grad():
        return in_context_loss(model(tokens), tokens, in_context)


ANSWERS["induction.position_mean_ablation"] = {
    "solution": lambda: position_mean_reference,
    "alternatives": lambda: [_position_mean_where],
    "wrong": lambda: [_ablation_variant("zero"), _ablation_variant("global_mean"), _ablation_variant("all_heads"),
                      _ablation_variant("wrong_head"), _ablation_variant("every_target"), _ablation_clean],
}
