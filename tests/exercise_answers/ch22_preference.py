"""Answers for the checkers of transformer_lib/exercises/ch22_preference.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import numpy as np
import torch
import torch.nn.functional as F


def seq_logprobs_reference(logits, tokens, mask):
    logp = F.log_softmax(logits[:, :-1], dim=-1)
    picked = logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)
    return torch.where(mask[:, 1:], picked, torch.zeros_like(picked)).sum(-1)


def _seq_logprobs_loop(logits, tokens, mask):
    out = []
    for b in range(tokens.shape[0]):
        total = 0.0
        for t in range(1, tokens.shape[1]):
            if mask[b, t]:
                row = logits[b, t - 1].double()
                total += float(row[tokens[b, t]] - torch.logsumexp(row, 0))
        out.append(total)
    return out


def _seq_logprobs_numpy(logits, tokens, mask):
    x = logits.numpy().astype(np.float64)[:, :-1]
    x = x - x.max(-1, keepdims=True)
    logp = x - np.log(np.exp(x).sum(-1, keepdims=True))
    picked = np.take_along_axis(logp, tokens.numpy()[:, 1:, None], -1)[..., 0]
    return (picked * mask.numpy()[:, 1:]).sum(-1)


def _seq_no_shift(logits, tokens, mask):  # reads each token at its own position
    picked = F.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)
    return (picked * mask).sum(-1)


def _seq_probabilities(logits, tokens, mask):  # softmax instead of log_softmax
    picked = F.softmax(logits[:, :-1], -1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
    return (picked * mask[:, 1:]).sum(-1)


def _seq_raw_logits(logits, tokens, mask):  # forgets to normalize
    picked = logits[:, :-1].gather(-1, tokens[:, 1:, None]).squeeze(-1)
    return (picked * mask[:, 1:]).sum(-1)


def _seq_mean(logits, tokens, mask):  # the mean per token, not the sum
    picked = F.log_softmax(logits[:, :-1], -1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
    return (picked * mask[:, 1:]).sum(-1) / mask[:, 1:].sum(-1).clamp_min(1)


def _seq_ignores_mask(logits, tokens, mask):  # scores the prompt too
    return F.log_softmax(logits[:, :-1], -1).gather(-1, tokens[:, 1:, None]).squeeze(-1).sum(-1)


def _seq_mask_shifted_wrong(logits, tokens, mask):  # mask[:, :-1]: one token too early
    picked = F.log_softmax(logits[:, :-1], -1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
    return (picked * mask[:, :-1]).sum(-1)


def dpo_reference(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    margin = beta * (policy_chosen - ref_chosen) - beta * (policy_rejected - ref_rejected)
    return -F.logsigmoid(margin).mean()


def _dpo_softplus(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    # -log sigmoid(m) = log(1 + e^-m) = softplus(-m)
    return F.softplus(-beta * ((policy_chosen - policy_rejected) - (ref_chosen - ref_rejected))).mean()


def _dpo_numpy_logaddexp(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    m = beta * ((policy_chosen.numpy() - ref_chosen.numpy()) - (policy_rejected.numpy() - ref_rejected.numpy()))
    return float(np.mean(np.logaddexp(0.0, -m.astype(np.float64))))


def _dpo_naive_log_sigmoid(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):  # -inf at -400
    margin = beta * (policy_chosen - ref_chosen) - beta * (policy_rejected - ref_rejected)
    return -torch.log(torch.sigmoid(margin)).mean()


def _dpo_no_reference(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    return -F.logsigmoid(beta * (policy_chosen - policy_rejected)).mean()


def _dpo_sign_flipped(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    margin = beta * (policy_chosen - ref_chosen) - beta * (policy_rejected - ref_rejected)
    return -F.logsigmoid(-margin).mean()


def _dpo_no_beta(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    return -F.logsigmoid((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)).mean()


def _dpo_sum(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):  # sum, not mean
    margin = beta * (policy_chosen - ref_chosen) - beta * (policy_rejected - ref_rejected)
    return -F.logsigmoid(margin).sum()


def _dpo_ratio_swapped(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):  # ref - policy
    margin = beta * (ref_chosen - policy_chosen) - beta * (ref_rejected - policy_rejected)
    return -F.logsigmoid(margin).mean()


def wins_reference(scores, other_scores):
    a, b = np.asarray(scores, dtype=float), np.asarray(other_scores, dtype=float)
    return float(np.mean((a > b) + 0.5 * (a == b)))


def _wins_loop(scores, other_scores):
    total = 0.0
    for x, y in zip(scores, other_scores):
        total += 1.0 if x > y else 0.5 if x == y else 0.0
    return total / len(scores)


def _wins_torch(scores, other_scores):
    a, b = torch.tensor(scores, dtype=torch.float64), torch.tensor(other_scores, dtype=torch.float64)
    return (torch.sign(a - b) + 1).mean() / 2


ANSWERS = {
    "preference.sequence_logprobs": {
        "solution": lambda: seq_logprobs_reference,
        "alternatives": lambda: [_seq_logprobs_loop, _seq_logprobs_numpy],
        "wrong": lambda: [_seq_no_shift, _seq_probabilities, _seq_raw_logits, _seq_mean, _seq_ignores_mask,
                          _seq_mask_shifted_wrong],
    },
    "preference.dpo_loss": {
        "solution": lambda: dpo_reference,
        "alternatives": lambda: [_dpo_softplus, _dpo_numpy_logaddexp],
        "wrong": lambda: [_dpo_naive_log_sigmoid, _dpo_no_reference, _dpo_sign_flipped, _dpo_no_beta, _dpo_sum,
                          _dpo_ratio_swapped],
    },
    "preference.win_rate": {
        "solution": lambda: wins_reference,
        "alternatives": lambda: [_wins_loop, _wins_torch],
        "wrong": lambda: [lambda a, b: float(np.mean(np.asarray(a) > np.asarray(b))),  # ties count 0
                          lambda a, b: float(np.mean(np.asarray(a) >= np.asarray(b))),  # ties count 1
                          lambda a, b: float(np.mean(np.asarray(a) < np.asarray(b))),  # lower wins
                          lambda a, b: float(np.mean(a) > np.mean(b)),  # compares the means
                          lambda a, b: float(np.sum(np.asarray(a) > np.asarray(b)))],  # a count, not a share
    },
}
