"""The cost model (chapter 10) and random forests (appendix A)."""
from __future__ import annotations

from .scalars import check_int, check_number


def check_sizes(n, d, expansion=4, batch=1) -> None:
    """The sizes of the cost model: sequence length n, width d and batch integers >= 1, the FFN's
    expansion a finite number > 0."""
    check_int("n", n)
    check_int("d", d)
    check_int("batch", batch)
    check_number("expansion", expansion, 0.0, low_open=True)


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
