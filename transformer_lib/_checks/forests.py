"""Random forests (appendix A, transformer_lib.forests): feature matrices, targets, fitted forests."""
from __future__ import annotations

import numpy as np


def check_feature_matrix(name: str, X) -> np.ndarray:
    """A finite (n, p) feature matrix with n, p >= 1 (NaN would reach scikit-learn's trees);
    returned as an array."""
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"{name} must be a 2-D (n, p) array with n, p >= 1, got shape {X.shape}")
    if not np.issubdtype(X.dtype, np.number) or np.issubdtype(X.dtype, np.complexfloating):
        raise ValueError(f"{name} must hold real numbers, got dtype {X.dtype}")
    if not np.isfinite(X).all():
        raise ValueError(f"{name} must be finite, got NaN or inf")
    return X


def check_targets(y, n: int) -> np.ndarray:
    """Targets y (n,), one per row of X; returned as an array."""
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != n:
        raise ValueError(f"y must be 1-D with one entry per row of X ({n}), got shape {y.shape}")
    return y


def check_same_features(X: np.ndarray, X_eval: np.ndarray) -> None:
    """``X_eval`` must have the features (columns) of ``X``."""
    if X_eval.shape[1] != X.shape[1]:
        raise ValueError(f"X_eval must have the {X.shape[1]} features of X, got {X_eval.shape[1]}")


def check_two_features(X: np.ndarray) -> None:
    """Inputs that can be drawn as a plane: X of shape (n, 2)."""
    if X.shape[1] != 2:
        raise ValueError(f"decision regions need 2-D inputs, X of shape (n, 2); got {X.shape}")


def check_train_rows(n_train: int, n: int, train_size) -> None:
    """A training subset of between 2 and all ``n`` rows (``train_size`` as the caller gave it)."""
    if not 2 <= n_train <= n:
        raise ValueError(f"train_size must give between 2 and {n} rows, got {train_size!r}")


def check_fitted(forest) -> None:
    """A fitted scikit-learn forest (it has ``estimators_``)."""
    if not hasattr(forest, "estimators_"):
        raise ValueError("the forest is not fitted yet: call fit(X, y) first")


def check_forest_size(n_trees: int) -> None:
    """A correlation between trees needs at least two of them."""
    if n_trees < 2:
        raise ValueError("a correlation between trees needs a forest of at least 2 trees")


def check_grown(n_trees: int, grown: int) -> None:
    """At most the ``grown`` trees measured can be asked for."""
    if n_trees > grown:
        raise ValueError(f"only {grown} trees were grown, asked for {n_trees}")


def check_oob_forest(forest, X: np.ndarray, y: np.ndarray) -> None:
    """A forest fitted with ``bootstrap=True`` on exactly (X, y) (its bootstrap rows index X)."""
    if not getattr(forest, "bootstrap", False):
        raise ValueError("out-of-bag error needs a forest fitted with bootstrap=True")
    check_fitted(forest)
    if len(X) != len(y) or max(int(s.max()) for s in forest.estimators_samples_) >= len(X):
        raise ValueError("X, y must be the data the forest was fitted on")
