"""Answers for the checkers of transformer_lib/exercises/ch21_lora.py: the reference solution, right
answers written differently, and wrong answers each checker must reject (test data: nothing here is
importable from the package a student uses)."""
import numpy as np
import torch
import torch.nn.functional as F


# -- lora.forward ------------------------------------------------------------------------------------------

def forward_reference(x, W, b, A, B, alpha):
    return x @ W.T + b + (alpha / A.shape[0]) * (x @ A.T) @ B.T


def _forward_merged_first(x, W, b, A, B, alpha):  # right, if slower: forms W + s B A
    return F.linear(x, W + alpha / A.shape[0] * B @ A, b)


def _forward_numpy(x, W, b, A, B, alpha):
    x, W, b, A, B = (np.asarray(t, dtype=np.float64) for t in (x, W, b, A, B))
    return x @ W.T + b + alpha / A.shape[0] * np.einsum("ni,ri,or->no", x, A, B)


def _forward_no_scaling(x, W, b, A, B, alpha):
    return x @ W.T + b + (x @ A.T) @ B.T


def _forward_alpha_only(x, W, b, A, B, alpha):  # forgets the division by the rank
    return x @ W.T + b + alpha * (x @ A.T) @ B.T


def _forward_no_base(x, W, b, A, B, alpha):
    return (alpha / A.shape[0]) * (x @ A.T) @ B.T


def _forward_no_bias(x, W, b, A, B, alpha):
    return x @ W.T + (alpha / A.shape[0]) * (x @ A.T) @ B.T


def _forward_rank_from_B(x, W, b, A, B, alpha):  # B.shape[0] is out_features, not the rank
    return x @ W.T + b + (alpha / B.shape[0]) * (x @ A.T) @ B.T


# -- lora.merge --------------------------------------------------------------------------------------------

def merge_reference(W, A, B, alpha):
    return W + (alpha / A.shape[0]) * B @ A


def _merge_einsum(W, A, B, alpha):
    return W + torch.einsum("or,ri->oi", B, A) * alpha / A.shape[0]


def _merge_list(W, A, B, alpha):
    return (np.asarray(W) + alpha / len(A) * np.asarray(B) @ np.asarray(A)).tolist()


def _merge_no_scaling(W, A, B, alpha):
    return W + B @ A


def _merge_transposed(W, A, B, alpha):  # A^T B^T: the (in, out) matrix
    return W + (alpha / A.shape[0]) * (A.T @ B.T)


def _merge_only_update(W, A, B, alpha):
    return (alpha / A.shape[0]) * B @ A


def _merge_subtracts(W, A, B, alpha):
    return W - (alpha / A.shape[0]) * B @ A


# -- lora.answer_loss --------------------------------------------------------------------------------------

def answer_loss_reference(logits, tokens, mask):
    labels = torch.where(mask, tokens, torch.full_like(tokens, -100))[:, 1:]
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels.flatten(), ignore_index=-100)


def _answer_loss_boolean_index(logits, tokens, mask):
    keep = mask[:, 1:]
    return F.cross_entropy(logits[:, :-1][keep], tokens[:, 1:][keep])


def _answer_loss_loop(logits, tokens, mask):
    total, count = 0.0, 0
    for i in range(tokens.shape[0]):
        for t in range(1, tokens.shape[1]):
            if mask[i, t]:
                total -= float(torch.log_softmax(logits[i, t - 1], -1)[tokens[i, t]])
                count += 1
    return total / count


def _answer_loss_no_shift(logits, tokens, mask):
    return F.cross_entropy(logits[mask], tokens[mask])


def _answer_loss_all_tokens(logits, tokens, mask):  # the prompt counts too
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())


def _answer_loss_mask_unshifted(logits, tokens, mask):  # mask[:, :-1]: one token early
    keep = mask[:, :-1]
    return F.cross_entropy(logits[:, :-1][keep], tokens[:, 1:][keep])


def _answer_loss_per_row_mean(logits, tokens, mask):
    rows = [answer_loss_reference(logits[i:i + 1], tokens[i:i + 1], mask[i:i + 1]) for i in range(len(tokens))]
    return torch.stack(rows).mean()


def _answer_loss_sum(logits, tokens, mask):
    keep = mask[:, 1:]
    return F.cross_entropy(logits[:, :-1][keep], tokens[:, 1:][keep], reduction="sum")


ANSWERS = {
    "lora.forward": {
        "solution": lambda: forward_reference,
        "alternatives": lambda: [_forward_merged_first, _forward_numpy],
        "wrong": lambda: [_forward_no_scaling, _forward_alpha_only, _forward_no_base, _forward_no_bias,
                          _forward_rank_from_B],
    },
    "lora.merge": {
        "solution": lambda: merge_reference,
        "alternatives": lambda: [_merge_einsum, _merge_list],
        "wrong": lambda: [_merge_no_scaling, _merge_transposed, _merge_only_update, _merge_subtracts],
    },
    "lora.answer_loss": {
        "solution": lambda: answer_loss_reference,
        "alternatives": lambda: [_answer_loss_boolean_index, _answer_loss_loop],
        "wrong": lambda: [_answer_loss_no_shift, _answer_loss_all_tokens, _answer_loss_mask_unshifted,
                          _answer_loss_per_row_mean, _answer_loss_sum],
    },
}
