"""Chapter 27 (Reinforcement learning with verifiable rewards) exercises: GRPO's group advantages,
the response mask, and GRPO's loss. Each checker compares with the library's public functions
(:mod:`transformer_lib.reasoning`)."""
import torch

from ..reasoning import EOS, group_advantages, grpo_loss, response_mask
from ._core import NotYet, compare_arrays, compare_number_cases, exercise, require_function, seed_cpu


def _reward_cases():
    seed_cpu(27)
    return [(torch.tensor([1.0, 0, 0, 1, 1, 1, 1, 1]), 4), (torch.randint(0, 2, (12,)).float(), 3),
            (torch.rand(10), 5), (torch.tensor([0.0, 1.0]), 2)]


@exercise("reasoning.group_advantages", call="advantages(rewards, group_size)",
          hint="view the rewards as (groups, group_size); subtract each group's mean and divide by its standard "
               "deviation (torch.std, unbiased) plus 1e-4; a group whose rewards are all equal gets 0; flatten back")
def _check_advantages(answer):
    require_function(answer)
    for n, (rewards, g) in enumerate(_reward_cases(), 1):
        compare_arrays(answer(rewards.clone(), g), group_advantages(rewards, g), what=f"your advantages for case #{n}",
                       atol=1e-4)
    return "right on all 4 cases (a group of equal rewards included)."


def _mask_cases():
    seed_cpu(3)
    rows = torch.randint(0, EOS + 1, (6, 7))
    rows[0] = EOS
    rows[1, :] = 3
    return [rows, torch.tensor([[1, 2, EOS, EOS], [EOS, 1, EOS, 2]])]


@exercise("reasoning.response_mask", call="resp_mask(responses)",
          hint="True up to and including the first end token ('$', id reasoning.EOS) of each row, False after it; "
               "a row with no end token is True everywhere. A cumulative sum of (responses == EOS) helps")
def _check_mask(answer):
    require_function(answer)
    for n, rows in enumerate(_mask_cases(), 1):
        got = answer(rows.clone())
        compare_arrays(torch.as_tensor(got).bool().int(), response_mask(rows).int(), what=f"your mask for batch #{n}")
        if torch.as_tensor(got).shape != rows.shape:
            raise NotYet(f"batch #{n}: your mask should have the shape of the responses {tuple(rows.shape)}")
    return "right on both batches (rows that never end and rows that end at once included)."


def _loss_cases():
    seed_cpu(42)
    cases = []
    for B, T, beta, eps in [(4, 5, 0.04, 0.2), (6, 3, 0.0, 0.2), (3, 6, 0.5, 0.1)]:
        logp = -torch.rand(B, T, dtype=torch.float64) * 3
        old = logp + torch.randn(B, T, dtype=torch.float64) * 0.4
        ref = logp + torch.randn(B, T, dtype=torch.float64) * 0.4
        mask = torch.rand(B, T) < 0.7
        mask[:, 0] = True
        cases.append((logp, old, ref, torch.randn(B, dtype=torch.float64), mask, eps, beta))
    return cases


@exercise("reasoning.grpo_loss", call="grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, clip_eps, beta)",
          hint="r = exp(logprobs - old_logprobs); per token min(r * A, clamp(r, 1 - eps, 1 + eps) * A) with A the "
               "row's advantage; minus beta * (exp(ref - logprobs) - (ref - logprobs) - 1); average over each row's "
               "masked tokens, then over rows, and negate")
def _check_loss(answer):
    return compare_number_cases(answer, _loss_cases(), grpo_loss, what="your loss", rtol=1e-6, atol=1e-6,
                                wrong=_loss_wrong, summary="batches (short rows, no KL and a tight clip included).")


def _loss_wrong(n, got, want, logp, old, ref, adv, mask, eps, beta):
    return f"batch #{n} (clip_eps {eps}, beta {beta}): your loss is too {'high' if got > want else 'low'}"
