"""Random forests, measured: the helpers behind the appendix chapter.

The chapter's one formula is the variance of an average of B identically distributed predictors
with variance sigma^2 and pairwise correlation rho:

    Var(mean of B) = rho * sigma^2 + (1 - rho) * sigma^2 / B

More trees shrink only the second term; the first, rho * sigma^2, is a floor that only
decorrelating the trees (bootstrap samples, a random subset of ``max_features`` features per
split) can lower. This module

* evaluates the formula and checks it by simulation (:func:`average_variance`,
  :func:`equicorrelated_draws`, :func:`simulated_average_variance`);
* measures rho and sigma^2 of a real scikit-learn forest (:func:`tree_correlation`): the
  correlation that matters is over *training sets*, so it refits the forest on many random
  subsamples and looks at how pairs of trees from the same fit co-vary at fixed test points;
* reads out per-tree predictions and the out-of-bag error as a function of the number of trees
  from *one* fitted forest (:func:`tree_predictions`, :func:`oob_error_curve`), so a chapter can
  draw a whole curve for the price of one fit;
* generates the chapter's imbalanced 2-D data and draws decision regions.

scikit-learn is imported lazily: the rest of ``transformer_lib`` does not need it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._checks import check_choice, check_int, check_number, check_rho_sigma2, check_trees
from ._checks.forests import (check_feature_matrix, check_fitted, check_forest_size, check_grown, check_oob_forest,
                             check_same_features, check_targets, check_train_rows, check_two_features)

__all__ = ["average_variance", "equicorrelated_draws", "simulated_average_variance",
           "default_max_features", "tree_predictions", "TreeCorrelation", "tree_correlation",
           "oob_error_curve", "imbalanced_blobs", "plot_decision_regions"]


def average_variance(rho: float, sigma2: float, n_trees: int) -> float:
    """Variance of the mean of ``n_trees`` predictors, each of variance ``sigma2``, with average
    pairwise correlation ``rho``: ``rho * sigma2 + (1 - rho) * sigma2 / n_trees``.

    Exact for any joint distribution whose average pairwise covariance is ``rho * sigma2``.
    """
    check_trees(n_trees)
    check_rho_sigma2(rho, sigma2, n_trees)
    return rho * sigma2 + (1.0 - rho) * sigma2 / n_trees


def equicorrelated_draws(n_draws: int, n_trees: int, rho: float, sigma2: float = 1.0,
                         seed: int = 0) -> np.ndarray:
    """(n_draws, n_trees) Gaussian 'tree predictions' with variance ``sigma2`` and every pairwise
    correlation equal to ``rho`` (0 <= rho <= 1).

    Built as ``sigma * (sqrt(rho) * shared + sqrt(1 - rho) * own)``: each row shares one draw
    (the part of the error all trees have in common, e.g. from the training set) and each tree
    adds its own independent part (bootstrap and feature sampling).
    """
    check_trees(n_trees)
    check_int("n_draws", n_draws, 2)
    check_number("rho (this construction needs 0 <= rho <= 1)", rho, 0.0, 1.0)
    check_rho_sigma2(rho, sigma2, n_trees)
    check_int("seed", seed, 0)
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal((n_draws, 1))  # (n_draws, 1): common to every tree of a draw
    own = rng.standard_normal((n_draws, n_trees))  # (n_draws, B): independent per tree
    return math.sqrt(sigma2) * (math.sqrt(rho) * shared + math.sqrt(1.0 - rho) * own)


def simulated_average_variance(rho: float, sigma2: float, n_trees: int, n_draws: int = 20_000,
                               seed: int = 0) -> float:
    """Empirical variance, over ``n_draws`` simulated forests, of the mean of ``n_trees``
    equicorrelated predictions: the Monte-Carlo check of :func:`average_variance`."""
    draws = equicorrelated_draws(n_draws, n_trees, rho, sigma2, seed)  # (n_draws, B)
    return float(draws.mean(axis=1).var(ddof=1))


def default_max_features(p: int, task: str) -> int:
    """The textbook defaults for m, the features tried per split: floor(sqrt(p)) for
    classification and floor(p / 3) for regression, at least 1 (Breiman; R's randomForest).

    scikit-learn's classifier uses ``max_features="sqrt"`` (the same number); its regressor
    defaults to ``1.0``, all p features, which makes it plain bagging unless you set it.
    """
    p = check_int("p (the number of features)", p)
    if check_choice("task", task, ("classification", "regression")) == "classification":
        return max(1, math.isqrt(p))
    return max(1, p // 3)


def tree_predictions(forest, X) -> np.ndarray:
    """(B, n) predictions of every tree of a fitted forest: the probability of the last class
    (class 1 of a binary problem) for a classifier, the predicted value for a regressor.

    The forest's own prediction is the mean over the first axis.
    """
    X = check_feature_matrix("X", X)
    check_fitted(forest)
    if hasattr(forest, "predict_proba"):
        rows = [tree.predict_proba(X)[:, -1] for tree in forest.estimators_]  # each (n,)
    else:
        rows = [tree.predict(X) for tree in forest.estimators_]
    return np.stack(rows)  # (B, n)


@dataclass
class TreeCorrelation:
    """What :func:`tree_correlation` measured.

    ``rho``: average correlation between two trees of the same forest; ``sigma2``: variance of
    one tree's prediction (both averaged over all the evaluation points, a point where every tree
    agrees counting with variance 0); ``rho_per_point``: the correlation at each evaluation point
    where the trees disagree (for box plots; undefined elsewhere); ``deviations``: the
    (n_fits, B, n_eval) tree predictions minus their mean at each point, kept so that
    :meth:`forest_variance` can measure forests of any size up to B.
    """
    rho: float
    sigma2: float
    n_trees: int
    rho_per_point: np.ndarray
    deviations: np.ndarray

    def forest_variance(self, n_trees: int) -> float:
        """Measured variance, across the refits, of a forest made of the first ``n_trees`` trees,
        averaged over the evaluation points.

        At ``n_trees = B`` this equals ``average_variance(rho, sigma2, B)`` by construction (the
        same sums). At smaller sizes it equals the formula in expectation, because the trees of a
        forest are exchangeable (grown alike from the same training set, each with its own random
        draws): the two differ only by the sampling noise of the refits and of which trees are taken.
        """
        check_trees(n_trees)
        check_grown(n_trees, self.n_trees)
        sub = self.deviations[:, :n_trees].mean(axis=1)  # (n_fits, n_eval): forests of n_trees trees
        return float((sub ** 2).mean())

    @property
    def floor(self) -> float:
        """rho * sigma^2: what infinitely many trees would still leave."""
        return self.rho * self.sigma2


def tree_correlation(estimator, X, y, X_eval, n_fits: int = 10, train_size: int | float = 0.7,
                     seed: int = 0) -> TreeCorrelation:
    """Measure rho and sigma^2 of a forest by refitting it on ``n_fits`` random training subsets.

    A tree's prediction at a point x is random through the training set Z and through the
    forest's own sampling Theta (bootstrap, feature subsets). Two trees of one forest share Z,
    and that is what correlates them. So: draw ``n_fits`` subsamples (without replacement) of
    ``train_size`` rows from (X, y), fit a clone of ``estimator`` on each (``random_state`` =
    seed + fit), and collect the (n_fits, B, n_eval) tree predictions on ``X_eval``. At each
    point, with m(x) the mean over all fits and trees,

        sigma^2(x) = mean of (T - m)^2 over all trees of all fits
        rho(x)     = mean over pairs b != b' of the same fit of (T_b - m)(T_b' - m) / sigma^2(x)

    ``rho`` and ``sigma2`` in the result are averages over all the evaluation points (``rho``
    weighted by sigma^2(x): the average covariance over the average variance, which is what the
    variance formula, averaged over points, needs). A point where every tree of every fit gives
    the same prediction counts with sigma^2(x) = 0: dropping such points would average sigma^2
    over a different set of points for each estimator, and more of them for the estimators whose
    trees agree more. ``rho_per_point`` is kept only where sigma^2(x) > 0.

    ``X_eval`` should not overlap the rows the fits draw from: a point that a fit trained on is
    predicted as its own label by that fit's in-bag trees, a component all of its trees share,
    and rho would count it.
    """
    from sklearn.base import clone

    X, X_eval = check_feature_matrix("X", X), check_feature_matrix("X_eval", X_eval)
    y = check_targets(y, len(X))
    check_same_features(X, X_eval)
    check_int("n_fits (a correlation over training sets needs several)", n_fits, 2)
    check_int("seed", seed, 0)
    if isinstance(train_size, float):  # a fraction of the rows
        check_number("train_size", train_size, 0.0, 1.0, low_open=True)
        n_train = int(round(train_size * len(X)))
    else:
        n_train = check_int("train_size", train_size)
    check_train_rows(n_train, len(X), train_size)
    rng = np.random.default_rng(seed)
    preds = []
    for k in range(n_fits):
        rows = rng.choice(len(X), size=n_train, replace=False)
        forest = clone(estimator).set_params(random_state=seed + k)
        forest.fit(X[rows], y[rows])
        preds.append(tree_predictions(forest, X_eval))  # (B, n_eval)
    T = np.stack(preds)  # (n_fits, B, n_eval)
    n_trees = T.shape[1]
    check_forest_size(n_trees)
    dev = T - T.mean(axis=(0, 1), keepdims=True)  # (n_fits, B, n_eval)
    sigma2_x = (dev ** 2).mean(axis=(0, 1))  # (n_eval,)
    s = dev.sum(axis=1)  # (n_fits, n_eval): sum over trees of one fit
    pair_cov_x = ((s ** 2 - (dev ** 2).sum(axis=1)) / (n_trees * (n_trees - 1))).mean(axis=0)  # (n_eval,)
    keep = sigma2_x > 1e-12  # points where some tree disagrees with the others
    if not keep.any():
        raise ValueError("every tree predicts the same value at every evaluation point: nothing to correlate")
    sigma2 = float(sigma2_x.mean())  # over all points: those where every tree agrees add 0
    return TreeCorrelation(rho=float(pair_cov_x.mean() / sigma2), sigma2=sigma2, n_trees=n_trees,
                           rho_per_point=pair_cov_x[keep] / sigma2_x[keep], deviations=dev)


def oob_error_curve(forest, X, y) -> np.ndarray:
    """Out-of-bag error of the first b trees, for b = 1 .. B, from one fitted forest.

    Each training row is scored only by the trees whose bootstrap sample missed it (about
    e^-1 = 37% of them); the error at b counts the rows that have at least one such tree among
    the first b. Classifiers: misclassification rate of the averaged probabilities (as
    scikit-learn's ``oob_score_``); regressors: mean squared error. The forest must have been
    fitted on exactly (X, y) with ``bootstrap=True``.
    """
    X = check_feature_matrix("X", X)
    y = check_targets(y, len(X))
    check_oob_forest(forest, X, y)
    samples = forest.estimators_samples_
    classifier = hasattr(forest, "predict_proba")
    n = len(X)
    total = np.zeros((n, len(forest.classes_))) if classifier else np.zeros(n)
    votes = np.zeros(n)
    errors = np.empty(len(forest.estimators_))
    for b, (tree, in_bag) in enumerate(zip(forest.estimators_, samples)):
        oob = np.ones(n, dtype=bool)
        oob[in_bag] = False  # rows this tree never saw
        if oob.any():
            total[oob] += tree.predict_proba(X[oob]) if classifier else tree.predict(X[oob])
            votes[oob] += 1
        scored = votes > 0
        if classifier:
            predicted = forest.classes_[total[scored].argmax(axis=1)]
            errors[b] = np.mean(predicted != y[scored])
        else:
            errors[b] = np.mean((total[scored] / votes[scored] - y[scored]) ** 2)
    return errors


def imbalanced_blobs(n: int, minority_fraction: float = 0.04, separation: float = 3.0, seed: int = 0):
    """Two round Gaussian classes in 2-D (unit variance), their means ``separation`` apart along
    the diagonal; each point is in the minority class (label 1) with probability
    ``minority_fraction``. Returns (X (n, 2), y (n,)).

    With equal covariances the best boundary is a straight line, so logistic regression is the
    right model and a forest has to approximate the line with axis-aligned steps from few
    minority points: the setting of the imbalance trap.
    """
    check_int("n", n, 2)
    check_number("minority_fraction", minority_fraction, 0.0, 1.0, low_open=True, high_open=True)
    check_number("separation", separation, 0.0)
    check_int("seed", seed, 0)
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < minority_fraction).astype(int)  # (n,)
    X = rng.standard_normal((n, 2)) + y[:, None] * (separation / math.sqrt(2.0))  # (n, 2)
    return X, y


def plot_decision_regions(model, X, y, ax=None, title: str | None = None, resolution: int = 150,
                          margin: float = 0.5):
    """Shade the classes a fitted 2-D classifier predicts over the data's bounding box and
    scatter the points on top (class 0 grey dots, class 1 dark crosses). Returns the axes."""
    import matplotlib.pyplot as plt

    X = check_feature_matrix("X", X)
    y = check_targets(y, len(X))
    check_two_features(X)
    check_int("resolution", resolution, 2)
    check_number("margin", margin, 0.0)
    if ax is None:
        _, ax = plt.subplots(figsize=(4, 4))
    lo, hi = X.min(axis=0) - margin, X.max(axis=0) + margin
    g0, g1 = np.meshgrid(np.linspace(lo[0], hi[0], resolution), np.linspace(lo[1], hi[1], resolution))
    grid = np.column_stack([g0.ravel(), g1.ravel()])  # (resolution**2, 2)
    regions = model.predict(grid).reshape(g0.shape)  # (resolution, resolution)
    ax.contourf(g0, g1, regions, levels=[-0.5, 0.5, 1.5], colors=["#f0f0f0", "#a0da39"], alpha=0.9)
    ax.scatter(*X[y == 0].T, s=4, c="#808080", label="class 0 (majority)")
    ax.scatter(*X[y == 1].T, s=14, c="#440154", marker="x", label="class 1 (minority)")
    ax.set_xlabel("feature 1")
    ax.set_ylabel("feature 2")
    if title:
        ax.set_title(title)
    return ax
