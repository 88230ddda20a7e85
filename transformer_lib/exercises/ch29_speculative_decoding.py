"""Chapter 29 (Speculative decoding) exercises: the residual distribution, the chance a draft token is
kept, the expected tokens per target pass, and greedy verification. Each checker compares with the
library's public functions (:mod:`transformer_lib.speculative`)."""
import numpy as np
import torch

from ..speculative import acceptance_probability, expected_tokens, residual_distribution, verify
from ._core import NotYet, compare_number_cases, exercise, seed_cpu, to_int, to_numpy


def _pairs():
    """(p, q) pairs over small vocabularies: overlapping, disjoint supports, a point-mass draft, a
    draft that covers p (so p - q < 0 somewhere), and p = q."""
    seed_cpu(29)
    pairs = []
    for V in (3, 5, 8):
        p, q = torch.rand(V).softmax(-1) ** 2, torch.rand(V).softmax(-1)
        pairs.append((p / p.sum(), q))
    pairs.append((torch.tensor([0.6, 0.4, 0.0, 0.0]), torch.tensor([0.0, 0.1, 0.5, 0.4])))  # p gives 0 where q likes
    pairs.append((torch.tensor([0.2, 0.5, 0.3]), torch.tensor([0.0, 1.0, 0.0])))  # a deterministic draft
    pairs.append((torch.tensor([0.1, 0.7, 0.2]), torch.tensor([0.3, 0.3, 0.4])))
    return pairs


@exercise("speculative.residual", call="residual(p, q)",
          hint="keep only where the target wants more than the draft gave: max(0, p - q) token by token, "
               "then divide by its sum so that it is a distribution")
def _check_residual(answer):
    for n, (p, q) in enumerate(_pairs()):
        got = to_numpy(answer(p.clone(), q.clone()), "your residual").astype(np.float64).reshape(-1)
        want = residual_distribution(p, q).double().numpy()
        if got.shape != want.shape:
            raise NotYet(f"pair #{n + 1}: expected {want.shape[0]} probabilities, got {got.shape[0]}")
        if (got < -1e-7).any():
            raise NotYet(f"pair #{n + 1}: a probability is negative: clip p - q at 0 before normalizing")
        if abs(got.sum() - 1) > 1e-5:
            raise NotYet(f"pair #{n + 1}: your residual sums to {got.sum():.4f}; divide by the sum of max(0, p - q)")
        if not np.allclose(got, want, atol=1e-6):
            raise NotYet(f"pair #{n + 1}: token {int(np.argmax(np.abs(got - want)))} has the wrong probability")
    return f"right on all {len(_pairs())} pairs, including disjoint supports and a point-mass draft."


@exercise("speculative.acceptance", call="keep_chance(p, q)",
          hint="a draft token x ~ q is kept with probability min(1, p(x) / q(x)): sum over x of q(x) times that")
def _check_acceptance(answer):
    for n, (p, q) in enumerate(_pairs()):
        got = to_numpy(answer(p.clone(), q.clone()), "your probability").astype(np.float64).reshape(-1)
        if got.size != 1:
            raise NotYet(f"pair #{n + 1}: return one number (the chance that the draft's token is kept)")
        want = float(acceptance_probability(p, q))
        if abs(got[0] - want) > 1e-5:
            hint = " (it is not the chance that the two distributions pick the same token)" \
                if abs(got[0] - float((p * q).sum())) < 1e-6 else ""
            raise NotYet(f"pair #{n + 1}: expected {want:.4f}, got {got[0]:.4f}{hint}")
    return f"right on all {len(_pairs())} pairs: sum of min(p, q), one minus their total variation distance."


@exercise("speculative.expected_tokens", call="tokens_per_pass(alpha, k)",
          hint="token i + 1 of a pass needs the first i drafts kept (alpha^i); add 1 + alpha + ... + alpha^k "
               "(at alpha = 1 every draft is kept: k + 1)")
def _check_expected_tokens(answer):
    cases = [(0.0, 4), (0.5, 1), (0.8, 4), (0.9, 8), (1.0, 5), (0.6, 0), (0.97, 3)]
    return compare_number_cases(
        answer, cases, expected_tokens, what="your expected tokens", rtol=1e-6, atol=1e-9,
        wrong=lambda n, got, want, alpha, k: f"alpha = {alpha}, k = {k}: expected {want:.4f} tokens per pass, "
                                             f"got {got:.4g}",
        summary="(alpha, k) cases, from a useless draft to a perfect one.")


def _greedy_cases():
    seed_cpu(2929)
    cases = []
    for k, agree in ((4, 4), (4, 2), (3, 0), (0, 0), (6, 5), (2, 2)):
        argmax = torch.randint(0, 50, (k + 1,))
        drafts = argmax[:k].clone()
        if agree < k:
            drafts[agree] = (argmax[agree] + 1 + torch.randint(0, 48, ())) % 50  # the first miss
            drafts[agree + 1:] = torch.randint(0, 50, (k - agree - 1,))
        cases.append((argmax.tolist(), drafts.tolist()))
    cases.append(([3, 7, 5, 9, 2], [3, 8, 5, 9]))  # drafts after the miss agree again: they are dropped all the same
    return cases


@exercise("speculative.greedy_verify", call="greedy_verify(argmax, drafts)",
          hint="walk the drafts: keep draft i while it equals the target's argmax at position i; at the first miss "
               "the next token is the argmax there; if every draft is kept, the next token is the last argmax")
def _check_greedy_verify(answer):
    for n, (argmax, drafts) in enumerate(_greedy_cases()):
        out = answer(list(argmax), list(drafts))
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise NotYet("return a pair (m, token): how many drafts are kept and the token after them")
        m, token = to_int(out[0], "your m"), to_int(out[1], "your token")
        p = torch.zeros(len(argmax), 50)
        p[torch.arange(len(argmax)), torch.tensor(argmax)] = 1.0
        want = verify(p, None, torch.tensor(drafts, dtype=torch.long))
        if (m, token) != want:
            raise NotYet(f"case #{n + 1} (k = {len(drafts)}): expected {want[0]} drafts kept, then a token, got "
                         f"({m}, {token})")
    return f"right on all {len(_greedy_cases())} cases, from every draft kept to none (and k = 0)."
