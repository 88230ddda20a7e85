"""Answers for the checkers of transformer_lib/exercises/ch31_scaling_laws.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data)."""
import math

import numpy as np
import torch


def _vertex(n, loss):
    c2, c1, _ = np.polyfit(np.log(n), loss, 2)
    return math.exp(-c1 / (2 * c2))


def _vertex_lstsq(n, loss):
    """The same least-squares parabola through the normal equations, in torch float64."""
    x = torch.log(torch.as_tensor(n, dtype=torch.float64))
    X = torch.stack([x * x, x, torch.ones_like(x)], 1)  # (k, 3)
    c = torch.linalg.lstsq(X, torch.as_tensor(loss, dtype=torch.float64)[:, None]).solution[:, 0]
    return torch.exp(-c[1] / (2 * c[0]))


def _vertex_in_n(n, loss):  # the parabola in N, not log N
    c2, c1, _ = np.polyfit(n, loss, 2)
    return -c1 / (2 * c2)


def _vertex_best_run(n, loss):  # the best run, not the parabola's minimum
    return n[int(np.argmin(loss))]


def _vertex_log10(n, loss):  # log10 for the fit, exp for the way back
    c2, c1, _ = np.polyfit(np.log10(n), loss, 2)
    return math.exp(-c1 / (2 * c2))


def _vertex_sign(n, loss):
    c2, c1, _ = np.polyfit(np.log(n), loss, 2)
    return math.exp(c1 / (2 * c2))


def _flops(vocab, d, layers, d_ff, context, tokens):
    n = layers * (4 * d * d + 2 * d * d_ff) + vocab * d
    return tokens * (6 * n + 12 * context * d * layers)


def _flops_by_parts(vocab, d, layers, d_ff, context, tokens):
    forward_macs = layers * (4 * d * d + 2 * context * d + 2 * d * d_ff) + d * vocab  # per token
    return np.float64(tokens) * 2 * 3 * forward_macs


def _optimal(E, A, B, alpha, beta, C):
    g = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
    return g * (C / 6) ** (beta / (alpha + beta))


def _optimal_numeric(E, A, B, alpha, beta, C):
    from scipy.optimize import minimize_scalar
    f = lambda x: A / math.exp(alpha * x) + B / (C / (6 * math.exp(x))) ** beta  # noqa: E731
    return math.exp(minimize_scalar(f, bounds=(0, 80), method="bounded", options={"xatol": 1e-10}).x)


ANSWERS = {
    "scaling.isoflop_vertex": {
        "solution": lambda: _vertex,
        "alternatives": lambda: [_vertex_lstsq, lambda n, loss: np.float64(_vertex(list(n), list(loss)))],
        "wrong": lambda: [_vertex_in_n, _vertex_best_run, _vertex_log10, _vertex_sign,
                          lambda n, loss: math.log(_vertex(n, loss))],  # log N instead of N
    },
    "scaling.training_flops": {
        "solution": lambda: _flops,
        "alternatives": lambda: [_flops_by_parts, lambda *a: torch.tensor(float(_flops(*a)), dtype=torch.float64)],
        "wrong": lambda: [lambda v, d, l, f, c, t: t * 6 * (l * (4 * d * d + 2 * d * f) + v * d),  # no attention
                          lambda v, d, l, f, c, t: t * 6 * l * (4 * d * d + 2 * d * f),  # no head
                          lambda v, d, l, f, c, t: _flops(v, d, l, f, c, t) / 3,  # forward only
                          lambda v, d, l, f, c, t: t * (6 * (l * (4 * d * d + 2 * d * f) + v * d) + 6 * c * d * l),  # half the attention
                          lambda v, d, l, f, c, t: _flops(v, d, l, f, c, t) / 2],  # MACs, not FLOPs
    },
    "scaling.compute_optimal": {
        "solution": lambda: _optimal,
        "alternatives": lambda: [_optimal_numeric],
        "wrong": lambda: [lambda E, A, B, a, b, C: _optimal(E, A, B, a, b, C * 6),  # C = N D
                          lambda E, A, B, a, b, C: _optimal(E, A, B, b, a, C),  # exponents swapped
                          lambda E, A, B, a, b, C: (C / 6) ** 0.5,  # N = D
                          lambda E, A, B, a, b, C: (C / 120) ** 0.5,  # the 20 tokens per parameter rule
                          lambda E, A, B, a, b, C: C / 6 / _optimal(E, A, B, a, b, C)],  # D_opt, not N_opt
    },
}
