"""Chapter 22 (Preference tuning) exercises: an answer's log-probability with the shift, DPO's
loss (stable for large margins), the win rate with ties. Each checker compares with the library's
public functions (:mod:`transformer_lib.preference`)."""
import numpy as np
import torch

from ..preference import dpo_loss, sequence_logprobs, win_rate
from ._core import compare_arrays, compare_number_cases, exercise, seed_cpu


def _logprob_cases():
    seed_cpu(22)
    cases = []
    for B, L, V, start in [(1, 5, 7, 2), (3, 8, 11, 3), (2, 6, 5, 1)]:
        logits = torch.randn(B, L, V) * 3
        tokens = torch.randint(0, V, (B, L))
        mask = torch.zeros(B, L, dtype=torch.bool)
        mask[:, start:] = True
        cases.append((logits, tokens, mask))
    cases[1][2][1, 6:] = False  # a shorter answer (right padding)
    cases[1][2][2, :] = False  # a row whose mask selects nothing
    return cases


@exercise("preference.sequence_logprobs", call="seq_logprobs(logits, tokens, mask)",
          hint="log_softmax over the vocabulary; the logits at position t - 1 predict token t, so use "
               "logits[:, :-1] with tokens[:, 1:] and mask[:, 1:]; gather each token's log-probability, keep the "
               "masked ones (torch.where) and sum per row: one number per row, (B,)")
def _check_sequence_logprobs(answer):
    cases = _logprob_cases()
    for n, (logits, tokens, mask) in enumerate(cases, 1):
        got = answer(logits.clone(), tokens.clone(), mask.clone())
        compare_arrays(got, sequence_logprobs(logits, tokens, mask), what=f"your log-probabilities for batch #{n}",
                       atol=1e-4)
    return f"right on all {len(cases)} batches (a shorter answer and an empty mask included)."


def _dpo_cases():
    seed_cpu(7)
    cases = []
    for B, beta in [(4, 0.1), (6, 0.5), (3, 2.0)]:
        cases.append((*(torch.randn(B) * 4 - 30 for _ in range(4)), beta))
    big = torch.tensor([0.0, -400.0, 400.0])  # policy log-prob of the chosen answer: huge margins both ways
    zero = torch.zeros(3)
    cases.append((big, zero, zero.clone(), zero.clone(), 1.0))
    return cases


@exercise("preference.dpo_loss", call="dpo(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta)",
          hint="rewards r = beta * (policy - ref) for the chosen and for the rejected answers; the loss is the mean "
               "of -log sigmoid(r_chosen - r_rejected); use F.logsigmoid: log(sigmoid(-400)) is log(0) = -inf in "
               "float32")
def _check_dpo_loss(answer):
    return compare_number_cases(
        answer, _dpo_cases(),
        lambda pc, pr, rc, rr, beta: dpo_loss(pc.double(), pr.double(), rc.double(), rr.double(), beta)[0],  # float64
        what="your loss", rtol=1e-4, atol=1e-4, wrong=_dpo_wrong, summary="batches, margins of ±400 included.")


def _dpo_wrong(n, got, want, pc, pr, rc, rr, beta):
    if not np.isfinite(got):
        return (f"batch #{n} (margins of ±400 in the last one): your loss is {got}; compute "
                "-log sigmoid(m) without forming sigmoid(m) first")
    return f"batch #{n} (beta = {beta}): your loss is too {'high' if got > want else 'low'}"


@exercise("preference.win_rate", call="wins(scores, other_scores)",
          hint="compare the i-th score with the i-th other score: a higher score wins (1), a tie counts 1/2, a loss "
               "0; return the mean over all pairs")
def _check_win_rate(answer):
    seed_cpu(5)
    cases = [([0.3, 0.1, 0.2], [0.1, 0.1, 0.5]), ([1, 1, 1, 1], [1, 1, 1, 1]),
             (torch.randint(0, 4, (50,)).tolist(), torch.randint(0, 4, (50,)).tolist()),
             ((-torch.rand(40)).tolist(), (-torch.rand(40)).tolist())]
    return compare_number_cases(
        answer, cases, win_rate, what="your win rate", rtol=1e-5, atol=1e-9,  # np.isclose's default rtol
        wrong=lambda n, got, want, a, b: f"case #{n} ({len(a)} pairs{', with ties' if n in (1, 2, 3) else ''}): "
                                        f"your win rate is too {'high' if got > want else 'low'}",
        summary="cases, ties included.")
