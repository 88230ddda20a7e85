"""Answers for the checkers of transformer_lib/exercises/ch29_speculative_decoding.py: the reference
solution, right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import numpy as np
import torch


def residual_reference(p, q):
    excess = (p - q).clamp(min=0)
    return excess / excess.sum()


def _residual_numpy(p, q):
    e = np.maximum(np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64), 0.0)
    return e / e.sum()


def _residual_loop(p, q):
    e = [max(a - b, 0.0) for a, b in zip(p.tolist(), q.tolist())]
    return [x / sum(e) for x in e]


def _residual_abs(p, q):  # |p - q|: counts where the draft gave too much as well
    e = (p - q).abs()
    return e / e.sum()


def _residual_unnormalized(p, q):
    return (p - q).clamp(min=0)


def _residual_p(p, q):  # resample from the target itself
    return p


def _residual_q_minus_p(p, q):  # the sides swapped
    e = (q - p).clamp(min=0)
    return e / e.sum()


def _residual_softmax(p, q):  # a softmax of the difference: never zero anywhere
    return (p - q).softmax(-1)


def keep_chance_reference(p, q):
    return torch.minimum(p, q).sum()


def _keep_chance_expectation(p, q):  # sum_x q(x) min(1, p(x)/q(x)), written as the expectation
    ratio = torch.where(q > 0, p / q.clamp(min=1e-30), torch.zeros_like(p)).clamp(max=1.0)
    return float((q * ratio).sum())


def _keep_chance_tv(p, q):  # one minus the total variation distance
    return np.float64(1 - 0.5 * np.abs(np.asarray(p) - np.asarray(q)).sum())


def _keep_chance_same_token(p, q):  # the chance two independent draws agree
    return (p * q).sum()


def _keep_chance_ratio_sum(p, q):  # min(1, p/q) summed, not weighted by q
    return torch.where(q > 0, (p / q.clamp(min=1e-30)).clamp(max=1.0), torch.zeros_like(p)).sum()


def _keep_chance_max(p, q):
    return torch.maximum(p, q).sum() - 1


def _keep_chance_bhattacharyya(p, q):
    return (p * q).sqrt().sum()


def tokens_per_pass_reference(alpha, k):
    return k + 1 if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def _tokens_per_pass_sum(alpha, k):
    return sum(alpha ** i for i in range(k + 1))


def _tokens_per_pass_numpy(alpha, k):
    return np.float64(np.sum(np.power(float(alpha), np.arange(k + 1))))


def _tokens_per_pass_no_bonus(alpha, k):  # forgets the target's own token
    return sum(alpha ** i for i in range(1, k + 1))


def _tokens_per_pass_linear(alpha, k):  # every draft kept independently: 1 + k alpha
    return 1 + k * alpha


def _tokens_per_pass_k(alpha, k):  # (1 - alpha^k) / (1 - alpha): one term short
    return k if alpha == 1 else (1 - alpha ** k) / (1 - alpha)


def _tokens_per_pass_geometric(alpha, k):  # the unbounded series, k forgotten
    return 1 / (1 - alpha) if alpha < 1 else float(k + 1)


def greedy_verify_reference(argmax, drafts):
    for i, x in enumerate(drafts):
        if x != argmax[i]:
            return i, argmax[i]
    return len(drafts), argmax[len(drafts)]


def _greedy_verify_tensor(argmax, drafts):
    a, d = torch.tensor(argmax), torch.tensor(drafts, dtype=torch.long)
    miss = (a[:len(d)] != d).nonzero()
    m = int(miss[0]) if miss.numel() else len(d)
    return torch.tensor(m), a[m]


def _greedy_verify_numpy(argmax, drafts):
    a, d = np.asarray(argmax), np.asarray(drafts, dtype=np.int64)
    same = np.cumprod(a[:len(d)] == d) if len(d) else np.zeros(0)
    m = int(same.sum())
    return np.int64(m), a[m]


def _greedy_verify_count_all(argmax, drafts):  # counts every match, not the first run of them
    m = sum(int(x == a) for x, a in zip(drafts, argmax))
    return m, argmax[m]


def _greedy_verify_draft_token(argmax, drafts):  # at the miss, keeps the draft's token
    for i, x in enumerate(drafts):
        if x != argmax[i]:
            return i, x
    return len(drafts), argmax[len(drafts)]


def _greedy_verify_no_bonus(argmax, drafts):  # all kept: the last draft again, not the target's token
    for i, x in enumerate(drafts):
        if x != argmax[i]:
            return i, argmax[i]
    return len(drafts), drafts[-1] if drafts else argmax[0]


def _greedy_verify_off_by_one(argmax, drafts):  # compares draft i with the argmax at i + 1
    for i, x in enumerate(drafts):
        if x != argmax[i + 1]:
            return i, argmax[i + 1]
    return len(drafts), argmax[len(drafts)]


ANSWERS = {
    "speculative.residual": {
        "solution": lambda: residual_reference,
        "alternatives": lambda: [_residual_numpy, _residual_loop],
        "wrong": lambda: [_residual_abs, _residual_unnormalized, _residual_p, _residual_q_minus_p,
                          _residual_softmax],
    },
    "speculative.acceptance": {
        "solution": lambda: keep_chance_reference,
        "alternatives": lambda: [_keep_chance_expectation, _keep_chance_tv],
        "wrong": lambda: [_keep_chance_same_token, _keep_chance_ratio_sum, _keep_chance_max,
                          _keep_chance_bhattacharyya],
    },
    "speculative.expected_tokens": {
        "solution": lambda: tokens_per_pass_reference,
        "alternatives": lambda: [_tokens_per_pass_sum, _tokens_per_pass_numpy],
        "wrong": lambda: [_tokens_per_pass_no_bonus, _tokens_per_pass_linear, _tokens_per_pass_k,
                          _tokens_per_pass_geometric],
    },
    "speculative.greedy_verify": {
        "solution": lambda: greedy_verify_reference,
        "alternatives": lambda: [_greedy_verify_tensor, _greedy_verify_numpy],
        "wrong": lambda: [_greedy_verify_count_all, _greedy_verify_draft_token, _greedy_verify_no_bonus,
                          _greedy_verify_off_by_one],
    },
}
