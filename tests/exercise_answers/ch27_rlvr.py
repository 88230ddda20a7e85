"""Answers for the checkers of transformer_lib/exercises/ch27_rlvr.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import numpy as np
import torch

EOS = 12


def advantages_reference(rewards, group_size):
    g = rewards.view(-1, group_size)
    adv = (g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-4)
    same = (g == g[:, :1]).all(1, keepdim=True)
    return adv.masked_fill(same, 0.0).reshape(-1)


def _advantages_numpy(rewards, group_size):
    g = np.asarray(rewards, dtype=np.float64).reshape(-1, group_size)
    adv = (g - g.mean(1, keepdims=True)) / (g.std(1, ddof=1, keepdims=True) + 1e-4)
    return adv.reshape(-1)


def _advantages_biased_std(rewards, group_size):
    g = rewards.view(-1, group_size)
    return ((g - g.mean(1, keepdim=True)) / (g.std(1, unbiased=False, keepdim=True) + 1e-4)).reshape(-1)


def _advantages_no_centre(rewards, group_size):
    g = rewards.view(-1, group_size)
    return (g / (g.std(1, keepdim=True) + 1e-4)).reshape(-1)


def _advantages_batch_mean(rewards, group_size):
    return (rewards - rewards.mean()) / (rewards.std() + 1e-4)


def _advantages_wrong_grouping(rewards, group_size):  # groups interleaved instead of consecutive
    g = rewards.view(group_size, -1)
    return ((g - g.mean(0)) / (g.std(0) + 1e-4)).reshape(-1)


def _advantages_unscaled(rewards, group_size):
    g = rewards.view(-1, group_size)
    return (g - g.mean(1, keepdim=True)).reshape(-1)


def mask_reference(responses):
    ended = (responses == EOS).long()
    return (ended.cumsum(-1) - ended) == 0


def _mask_loop(responses):
    out = torch.zeros_like(responses, dtype=torch.bool)
    for i, row in enumerate(responses.tolist()):
        for t, tok in enumerate(row):
            out[i, t] = True
            if tok == EOS:
                break
    return out


def _mask_excludes_end(responses):
    return (responses == EOS).long().cumsum(-1) == 0


def _mask_not_eos(responses):
    return responses != EOS


def _mask_all(responses):
    return torch.ones_like(responses, dtype=torch.bool)


def _mask_until_last(responses):
    ended = (responses == EOS).long()
    after = ended.flip(-1).cumsum(-1).flip(-1)
    return (after > 0) | (ended.sum(-1, keepdim=True) == 0)


def grpo_reference(logp, old, ref, adv, mask, eps, beta):
    r = torch.exp(logp - old)
    a = adv[:, None]
    per = torch.min(r * a, torch.clamp(r, 1 - eps, 1 + eps) * a)
    d = ref - logp
    per = per - beta * (torch.exp(d) - d - 1)
    m = mask.double()
    return -((per * m).sum(1) / m.sum(1)).mean()


def _grpo_loop(logp, old, ref, adv, mask, eps, beta):
    rows = []
    for i in range(logp.shape[0]):
        vals = []
        for t in range(logp.shape[1]):
            if mask[i, t]:
                r = float(torch.exp(logp[i, t] - old[i, t]))
                a = float(adv[i])
                d = float(ref[i, t] - logp[i, t])
                vals.append(min(r * a, min(max(r, 1 - eps), 1 + eps) * a) - beta * (np.exp(d) - d - 1))
        rows.append(sum(vals) / len(vals))
    return -sum(rows) / len(rows)


def _grpo_token_mean(logp, old, ref, adv, mask, eps, beta):  # one mean over all tokens (BNPO/DAPO)
    r = torch.exp(logp - old)
    a = adv[:, None]
    d = ref - logp
    per = torch.min(r * a, torch.clamp(r, 1 - eps, 1 + eps) * a) - beta * (torch.exp(d) - d - 1)
    return -(per * mask).sum() / mask.sum()


def _grpo_no_min(logp, old, ref, adv, mask, eps, beta):
    r = torch.clamp(torch.exp(logp - old), 1 - eps, 1 + eps)
    d = ref - logp
    per = r * adv[:, None] - beta * (torch.exp(d) - d - 1)
    m = mask.double()
    return -((per * m).sum(1) / m.sum(1)).mean()


def _grpo_kl_plus(logp, old, ref, adv, mask, eps, beta):
    return grpo_reference(logp, old, ref, adv, mask, eps, -beta)


def _grpo_kl_wrong_direction(logp, old, ref, adv, mask, eps, beta):
    r = torch.exp(logp - old)
    a = adv[:, None]
    d = logp - ref
    per = torch.min(r * a, torch.clamp(r, 1 - eps, 1 + eps) * a) - beta * (torch.exp(d) - d - 1)
    m = mask.double()
    return -((per * m).sum(1) / m.sum(1)).mean()


def _grpo_ignores_mask(logp, old, ref, adv, mask, eps, beta):
    return grpo_reference(logp, old, ref, adv, torch.ones_like(mask), eps, beta)


def _grpo_positive(logp, old, ref, adv, mask, eps, beta):
    return -grpo_reference(logp, old, ref, adv, mask, eps, beta)


def _grpo_nan_from_padding(logp, old, ref, adv, mask, eps, beta):  # -inf log-probs where masked: 0 * nan is nan
    return grpo_reference(logp.masked_fill(~mask, float("-inf")), old, ref, adv, mask, eps, beta)


ANSWERS = {
    "reasoning.group_advantages": {
        "solution": lambda: advantages_reference,
        "alternatives": lambda: [_advantages_numpy],
        "wrong": lambda: [_advantages_biased_std, _advantages_no_centre, _advantages_batch_mean,
                          _advantages_wrong_grouping, _advantages_unscaled],
    },
    "reasoning.response_mask": {
        "solution": lambda: mask_reference,
        "alternatives": lambda: [_mask_loop],
        "wrong": lambda: [_mask_excludes_end, _mask_not_eos, _mask_all, _mask_until_last],
    },
    "reasoning.grpo_loss": {
        "solution": lambda: grpo_reference,
        "alternatives": lambda: [_grpo_loop],
        "wrong": lambda: [_grpo_token_mean, _grpo_no_min, _grpo_kl_plus, _grpo_kl_wrong_direction,
                          _grpo_ignores_mask, _grpo_positive, _grpo_nan_from_padding],
    },
}
