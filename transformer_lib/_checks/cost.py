"""The cost model (chapter 10) and random forests (appendix A)."""
from __future__ import annotations

from .scalars import check_divisible, check_int, check_number


def check_sizes(n, d, expansion=4, batch=1) -> None:
    """The sizes of the cost model: sequence length n, width d and batch integers >= 1, the FFN's
    expansion a finite number > 0."""
    check_int("n", n)
    check_int("d", d)
    check_int("batch", batch)
    check_number("expansion", expansion, 0.0, low_open=True)


def check_lengths(ns) -> None:
    """A list (any iterable but a string) of sequence lengths for the cost table."""
    if isinstance(ns, (str, bytes)) or not hasattr(ns, "__iter__"):
        raise TypeError(f"ns must be a list of sequence lengths, got {type(ns).__name__}")


def check_heads_divide(d_model, num_heads) -> None:
    """Positive ``d_model`` and ``num_heads``, the first a multiple of the second."""
    check_int("d_model", d_model)
    check_int("num_heads", num_heads)
    check_divisible("d_model", d_model, num_heads, "num_heads")


def check_levels(levels, level_type: type) -> None:
    """A list of ``level_type`` (``cost.Level``, passed in: ``_checks`` imports nothing above it)."""
    if isinstance(levels, (str, bytes)) or not isinstance(levels, (list, tuple)) or \
            not all(isinstance(level, level_type) for level in levels):
        raise TypeError("levels must be a list of cost.Level (from rnn_levels or encoder_levels)")


def check_trees(n_trees) -> int:
    """The number of trees B of a forest: an integer >= 1."""
    return check_int("n_trees (the number of trees B)", n_trees)


def check_rho_sigma2(rho, sigma2, n_trees: int) -> None:
    """A variance ``sigma2 >= 0`` and an average pairwise correlation ``rho`` that B predictors can
    have: ``-1/(B-1) <= rho <= 1`` (their covariance matrix must be positive semi-definite)."""
    check_number("sigma2 (a variance)", sigma2, 0.0)
    lowest = -1.0 / (n_trees - 1) if n_trees > 1 else -1.0
    r = check_number("rho", rho)
    if r > 1 or r < lowest - 1e-12:
        raise ValueError(f"rho must lie in [{lowest:.4g}, 1] for B = {n_trees} (B predictors cannot all be "
                         f"more negatively correlated than -1/(B-1)), got {rho!r}")
