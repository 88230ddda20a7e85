"""Scaling laws: how the loss falls with parameters N and training tokens D, and how to split a
compute budget C between them (chapter 31).

The law of Hoffmann et al. (2022, "Chinchilla"), written as they fit it:

    L(N, D) = E + A / N^alpha + B / D^beta

E is the loss no model reaches below (the entropy of the text), A / N^alpha what a finite model
leaves on the table, B / D^beta what a finite run does. Three tools, in the order the chapter uses
them:

* **Counting compute** -- :func:`product_parameters` (N: the weights a token is multiplied by),
  :func:`flops_per_token` and :func:`training_flops`: 6N per token plus attention, chapter 10's
  per-block count (:func:`transformer_lib.cost.block_macs`) times 2 FLOPs per multiply-add times 3
  for the backward pass. It is the count ``profiling.count_flops`` measures (tests/test_scaling.py).
* **Approach 3, the parametric fit** -- :func:`fit_scaling_law`: minimise a Huber loss of the
  residuals ``log L_pred - log L`` over ``(log A, log B, log E, alpha, beta)`` with L-BFGS, started
  from many points of Hoffmann et al.'s grid, keeping the best optimum. The log makes every run
  count the same whatever its loss; Huber (delta = 1e-3) keeps one bad run from dragging the fit. The
  result's :meth:`ScalingFit.compute_optimal` is the split that minimises L under C = 6ND:
  N_opt = G (C/6)^(beta/(alpha+beta)), D_opt = (C/6)^(alpha/(alpha+beta)) / G with
  G = (alpha A / (beta B))^(1/(alpha+beta)).
* **Approach 2, IsoFLOP curves** -- :func:`isoflop_minimum`: at one compute budget, the loss of
  models of several sizes is close to a parabola in log N; its vertex is the best size for that
  budget. :func:`power_law` fits N_opt = k C^a through the vertices of several budgets.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ._checks import (check_countable_config, check_grid, check_instance, check_int, check_number,
                      check_positive_array)
from .config import ModelConfig
from .cost import block_macs

__all__ = ["product_parameters", "flops_per_token", "training_flops", "ScalingFit", "fit_scaling_law",
           "huber", "IsoFLOPMinimum", "isoflop_minimum", "power_law", "DEFAULT_GRID", "PUBLISHED"]

# Published fits of the same law, to print beside ours (losses in nats on each paper's own text).
PUBLISHED = {
    "Hoffmann et al. 2022 (approach 3)": dict(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28),
    "Besiroglu et al. 2024 (replication)": dict(E=1.82, A=482.01, B=2085.43, alpha=0.3478, beta=0.3658),
    # Kaplan et al. 2020 fit L(N, D) = ((N_c/N)^(alpha_N/alpha_D) + D_c/D)^alpha_D, another form:
    # only their exponents compare (alpha_N = 0.076, alpha_D = 0.095; no irreducible term).
    "Kaplan et al. 2020 (exponents only)": dict(E=None, A=None, B=None, alpha=0.076, beta=0.095),
}


def _config(model) -> ModelConfig:
    """A DecoderOnlyLM's configuration, or the configuration itself."""
    config = getattr(model, "config", model)
    check_instance("model", config, ModelConfig, "a DecoderOnlyLM or its ModelConfig")
    check_countable_config(config)
    return config


def product_parameters(model) -> int:
    """N, the weights every token is multiplied by in a forward pass: in each block the four
    attention projections (4 d^2) and the two FFN matrices (2 d d_ff), plus the output head (V d).

    Biases, norm gains and the position table are left out (they cost no multiply-add per token);
    the token embedding counts once, as the head that reads it (tied or not: the lookup is free).
    ``model``: a :class:`~transformer_lib.model.DecoderOnlyLM` or its ``ModelConfig``."""
    c = _config(model)
    block = block_macs(1, c.d_model, c.ffn_width / c.d_model)  # one token: projections + FFN MACs = weights
    return int(round(c.num_layers * (block.projections + block.ffn))) + c.vocab_size * c.d_model


def flops_per_token(model, context: int) -> float:
    """Training FLOPs per token at window length ``context``: 6N plus attention.

    Chapter 10's block count (:func:`~transformer_lib.cost.block_macs`) per token, for every block,
    plus the head's V d; times 2 (a multiply-add is 2 FLOPs) and 3 (the backward pass does two
    products for every product of the forward). The attention term, 12 n d per token and block,
    counts the full n x n score matrix, as the explicit path computes it (causal masking does not
    skip the masked half)."""
    c = _config(model)
    check_int("context", context)
    block = block_macs(context, c.d_model, c.ffn_width / c.d_model)  # one window of `context` tokens
    forward_macs = c.num_layers * block.total / context + c.vocab_size * c.d_model  # per token
    return 6.0 * forward_macs


def training_flops(model, tokens: int, context: int) -> float:
    """FLOPs of training on ``tokens`` tokens in windows of ``context``: tokens x :func:`flops_per_token`."""
    check_int("tokens", tokens)
    return tokens * flops_per_token(model, context)


# -- approach 3: the parametric fit -----------------------------------------------------------------

@dataclass(frozen=True)
class ScalingFit:
    """A fitted L(N, D) = E + A / N^alpha + B / D^beta (losses in nats)."""
    E: float
    A: float
    B: float
    alpha: float
    beta: float
    objective: float  # the Huber loss summed over the runs at the optimum
    starts: int  # L-BFGS runs started (the best grid points)

    def predict(self, n, d):
        """L(N, D) for parameter counts ``n`` and token counts ``d`` (numbers or arrays)."""
        n, d = np.asarray(n, dtype=np.float64), np.asarray(d, dtype=np.float64)
        return self.E + self.A / n ** self.alpha + self.B / d ** self.beta

    def compute_optimal(self, compute):
        """(N_opt, D_opt) that minimise L(N, D) subject to 6 N D = ``compute`` (the Lagrangian's
        solution; see the module's docstring). Works on numbers or arrays of budgets."""
        c = check_positive_array("compute", np.atleast_1d(compute)) / 6.0
        a, b = self.alpha, self.beta
        g = (a * self.A / (b * self.B)) ** (1.0 / (a + b))
        n, d = g * c ** (b / (a + b)), c ** (a / (a + b)) / g
        return (n, d) if np.ndim(compute) else (float(n[0]), float(d[0]))


def huber(r: np.ndarray, delta: float) -> np.ndarray:
    """Huber's loss: r^2 / 2 inside [-delta, delta], linear outside (delta (|r| - delta / 2))."""
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


def _objective(theta, log_n, log_d, log_l, delta):
    """Huber loss of log-space residuals and its gradient, theta = (log A, log B, log E, alpha, beta)."""
    a, b, e, alpha, beta = theta
    terms = np.stack([a - alpha * log_n, b - beta * log_d, np.full_like(log_n, e)])  # (3, runs)
    top = terms.max(0)
    w = np.exp(np.maximum(terms - top, -60.0))  # (3, runs); the floor keeps exp out of slow subnormals
    lse = top + np.log(w.sum(0))  # log(A/N^alpha + B/D^beta + E)
    w /= w.sum(0)  # softmax: d lse / d terms
    r = lse - log_l
    g = np.clip(r, -delta, delta)  # Huber'(r)
    grad = np.array([(g * w[0]).sum(), (g * w[1]).sum(), (g * w[2]).sum(),
                     -(g * w[0] * log_n).sum(), -(g * w[1] * log_d).sum()])
    return float(huber(r, delta).sum()), grad


# Hoffmann et al.'s grid: alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5, ..., 1}, a, b in {0, 5, ..., 25}
DEFAULT_GRID = dict(alpha=np.arange(0.0, 2.01, 0.5), beta=np.arange(0.0, 2.01, 0.5), e=np.arange(-1.0, 1.01, 0.5),
                    a=np.arange(0.0, 25.1, 5.0), b=np.arange(0.0, 25.1, 5.0))


def _grid_objective(points, log_n, log_d, log_l, delta):
    """The Huber objective at every row of ``points`` (G, 5) at once: which starts are worth running."""
    a, b, e, alpha, beta = (points[:, i:i + 1] for i in range(5))  # each (G, 1)
    terms = np.stack([a - alpha * log_n, b - beta * log_d, np.broadcast_to(e, (len(points), len(log_n)))])  # (3, G, runs)
    top = terms.max(0)
    lse = top + np.log(np.exp(np.maximum(terms - top, -60.0)).sum(0))  # (G, runs)
    return huber(lse - log_l, delta).sum(1)  # (G,)


def fit_scaling_law(n, d, loss, delta: float = 1e-3, grid: dict | None = None, starts: int | None = 16) -> ScalingFit:
    """Fit L(N, D) = E + A/N^alpha + B/D^beta to runs (``n[i]`` parameters, ``d[i]`` tokens, final
    ``loss[i]``) by Hoffmann et al.'s approach 3: L-BFGS (scipy) on the Huber loss (``delta``) of
    ``log(A/N^alpha + B/D^beta + E) - log L`` over theta = (a, b, e, alpha, beta), a = log A, b = log B,
    e = log E, from many starting points; the best optimum is kept.

    The starts are the points of ``grid`` (keys alpha, beta, e, a, b; default :data:`DEFAULT_GRID`,
    Hoffmann et al.'s 4,500 points). Hoffmann et al. run L-BFGS from every one; here the objective
    is first evaluated at every grid point (one vectorised pass) and L-BFGS runs from the ``starts``
    best (``starts=None``: from all of them, the paper's way, about a minute). The surface has long
    flat valleys (A and alpha trade against each other), so a single start often stops in the wrong
    one: the many starts are what make the fit reproducible. The objective is divided by delta^2
    for the optimiser (the same minimiser; its tiny gradients otherwise stop L-BFGS early, one of
    the problems Besiroglu et al. 2024 found in the original fit)."""
    from scipy.optimize import minimize

    n = check_positive_array("n", n)
    d = check_positive_array("d", d, len(n), "n")
    loss = check_positive_array("loss", loss, len(n), "n")
    check_number("delta", delta, 0, low_open=True)
    if starts is not None:
        check_int("starts", starts)
    grid = DEFAULT_GRID if grid is None else grid
    if not isinstance(grid, dict) or set(grid) != {"alpha", "beta", "e", "a", "b"}:
        raise ValueError("grid: expected a dict with the keys alpha, beta, e, a, b (lists of starting values)")
    axes = [check_grid(f"grid['{k}']", grid[k]) for k in ("a", "b", "e", "alpha", "beta")]
    if len(n) < 5:
        raise ValueError(f"n: five parameters need at least 5 runs, got {len(n)}")
    log_n, log_d, log_l = np.log(n), np.log(d), np.log(loss)
    points = np.array(list(itertools.product(*axes)))  # (G, 5)
    order = np.argsort(_grid_objective(points, log_n, log_d, log_l, delta), kind="stable")
    chosen = points[order if starts is None else order[:starts]]

    def scaled(theta):
        value, grad = _objective(theta, log_n, log_d, log_l, delta)
        return value / delta ** 2, grad / delta ** 2

    best = None
    for theta0 in chosen:
        result = minimize(scaled, theta0, jac=True, method="L-BFGS-B", options={"ftol": 1e-14, "gtol": 1e-10})
        if best is None or result.fun < best.fun:
            best = result
    a, b, e, alpha, beta = best.x
    return ScalingFit(E=float(np.exp(e)), A=float(np.exp(a)), B=float(np.exp(b)), alpha=float(alpha),
                      beta=float(beta), objective=float(best.fun * delta ** 2), starts=len(chosen))


# -- approach 2: IsoFLOP curves ---------------------------------------------------------------------

@dataclass(frozen=True)
class IsoFLOPMinimum:
    """The vertex of loss = c2 (log N)^2 + c1 log N + c0 fitted to one budget's runs."""
    n_opt: float  # exp(-c1 / (2 c2)): the best parameter count at this budget
    loss_min: float  # the parabola's value there
    coefficients: tuple  # (c2, c1, c0), natural log of N

    def loss_at(self, n):
        """The parabola's loss at parameter counts ``n``."""
        x = np.log(np.asarray(n, dtype=np.float64))
        c2, c1, c0 = self.coefficients
        return c2 * x * x + c1 * x + c0


def isoflop_minimum(n, loss) -> IsoFLOPMinimum:
    """Approach 2 at one budget: a parabola in log N through the runs' losses (least squares, at
    least 3 runs of different sizes), and its minimum. A parabola that opens downward has no
    minimum: a ValueError (the budget's runs do not bracket the best size)."""
    n = check_positive_array("n", n)
    loss = check_positive_array("loss", loss, len(n), "n")
    if len(np.unique(n)) < 3:
        raise ValueError(f"n: a parabola needs at least 3 different model sizes, got {len(np.unique(n))}")
    c2, c1, c0 = np.polyfit(np.log(n), loss, 2)
    if not c2 > 0:
        raise ValueError("loss: the parabola through these runs opens downward (no minimum): "
                         "the sizes do not bracket the best one")
    x = -c1 / (2 * c2)
    return IsoFLOPMinimum(n_opt=float(np.exp(x)), loss_min=float(c2 * x * x + c1 * x + c0),
                          coefficients=(float(c2), float(c1), float(c0)))


def power_law(x, y) -> tuple[float, float]:
    """(k, a) of y = k x^a by least squares on log y = log k + a log x (at least 2 points)."""
    x = check_positive_array("x", x)
    y = check_positive_array("y", y, len(x), "x")
    if len(np.unique(x)) < 2:
        raise ValueError("x: a power law needs at least 2 different values")
    a, log_k = np.polyfit(np.log(x), np.log(y), 1)
    return float(np.exp(log_k)), float(a)
