"""transformer_lib.forests: the variance formula, its simulation, measured tree correlation,
out-of-bag curves and the imbalanced data, against scikit-learn where it has an answer."""
import math
import sys

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import mean_squared_error

from transformer_lib import forests as F


@pytest.fixture(scope="module")
def cancer():
    return load_breast_cancer(return_X_y=True)


# -- the formula ---------------------------------------------------------------------------------

def test_formula_special_cases():
    assert F.average_variance(0.3, 2.0, 1) == pytest.approx(2.0)  # one tree: its own variance
    assert F.average_variance(1.0, 2.0, 50) == pytest.approx(2.0)  # identical trees: no gain
    assert F.average_variance(0.0, 2.0, 50) == pytest.approx(2.0 / 50)  # independent trees: sigma^2 / B
    assert F.average_variance(-0.25, 1.0, 5) == pytest.approx(0.0)  # the most negative correlation cancels


@settings(max_examples=60, deadline=None)
@given(rho=st.floats(0.0, 1.0), sigma2=st.floats(1e-3, 1e3), b=st.integers(1, 500))
def test_formula_decreases_in_b_towards_the_floor(rho, sigma2, b):
    v, v_next = F.average_variance(rho, sigma2, b), F.average_variance(rho, sigma2, b + 1)
    assert v_next <= v + 1e-12 * sigma2
    assert rho * sigma2 - 1e-12 * sigma2 <= v <= sigma2 + 1e-12 * sigma2
    # The part above the floor shrinks exactly like 1/B. `v - rho * sigma2` cancels two numbers
    # up to sigma2 in size, so its absolute error is about eps * sigma2 (one rounding of v, whose
    # size is <= sigma2), not eps times the (possibly tiny) difference; times b, plus a few
    # roundings of (1 - rho) * sigma2 / b. Bound: 2 * eps * sigma2 * (b + 4), no relative slack.
    bound = 2 * sys.float_info.epsilon * sigma2 * (b + 4)
    assert abs((v - rho * sigma2) * b - (1 - rho) * sigma2) <= bound


@settings(max_examples=40, deadline=None)
@given(rho=st.floats(0.0, 1.0), b=st.integers(2, 60))
def test_formula_equals_the_covariance_sum(rho, b):
    """Var(mean) = 1' C 1 / B^2 for the equicorrelated covariance matrix C."""
    cov = np.full((b, b), rho) + np.eye(b) * (1 - rho)  # sigma^2 = 1
    assert F.average_variance(rho, 1.0, b) == pytest.approx(cov.sum() / b ** 2, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("rho,b", [(0.0, 10), (0.3, 5), (0.3, 100), (0.8, 20)])
def test_simulation_matches_the_formula(rho, b):
    simulated = F.simulated_average_variance(rho, 2.0, b, n_draws=100_000, seed=1)
    assert simulated == pytest.approx(F.average_variance(rho, 2.0, b), rel=0.03)


def test_equicorrelated_draws_have_the_asked_correlation_and_variance():
    draws = F.equicorrelated_draws(50_000, 6, 0.4, sigma2=3.0, seed=0)  # (n_draws, B)
    assert draws.shape == (50_000, 6)
    corr = np.corrcoef(draws.T)
    off = corr[~np.eye(6, dtype=bool)]
    assert np.allclose(off, 0.4, atol=0.02)
    assert np.allclose(draws.var(axis=0), 3.0, rtol=0.03)
    assert np.array_equal(draws, F.equicorrelated_draws(50_000, 6, 0.4, sigma2=3.0, seed=0))  # seeded


@pytest.mark.parametrize("call", [
    lambda: F.average_variance(0.5, 1.0, 0),
    lambda: F.average_variance(0.5, 1.0, 2.5),
    lambda: F.average_variance(0.5, 1.0, True),
    lambda: F.average_variance(1.5, 1.0, 10),
    lambda: F.average_variance(-0.5, 1.0, 10),  # below -1/(B-1)
    lambda: F.average_variance(0.5, -1.0, 10),
    lambda: F.average_variance(float("nan"), 1.0, 10),
    lambda: F.equicorrelated_draws(100, 5, -0.1),
    lambda: F.equicorrelated_draws(1, 5, 0.5),
    lambda: F.default_max_features(0, "classification"),
    lambda: F.default_max_features(30, "clustering"),
    lambda: F.imbalanced_blobs(100, 0.0),
    lambda: F.imbalanced_blobs(100, 1.0),
    lambda: F.imbalanced_blobs(1, 0.1),
    lambda: F.imbalanced_blobs(100, 0.1, separation=-1.0),
])
def test_bad_inputs_raise_a_clear_value_error(call):
    with pytest.raises(ValueError):
        call()


# -- max_features ---------------------------------------------------------------------------------

def test_default_max_features_textbook_values():
    assert F.default_max_features(30, "classification") == 5  # sqrt(30) = 5.48
    assert F.default_max_features(30, "regression") == 10
    assert F.default_max_features(8, "classification") == 2  # floor, not round
    assert F.default_max_features(2, "regression") == 1  # never 0
    assert F.default_max_features(1, "classification") == 1


@pytest.mark.parametrize("p", [1, 2, 3, 8, 10, 30, 99])
def test_default_max_features_matches_scikit_learn_sqrt(p):
    rng = np.random.default_rng(p)
    X, y = rng.standard_normal((40, p)), np.arange(40) % 2
    forest = RandomForestClassifier(n_estimators=2, random_state=0).fit(X, y)  # max_features="sqrt"
    assert forest.estimators_[0].max_features_ == F.default_max_features(p, "classification")
    reg = RandomForestRegressor(n_estimators=2, max_features=1 / 3, random_state=0).fit(X, y.astype(float))
    assert reg.estimators_[0].max_features_ == F.default_max_features(p, "regression")


# -- reading a fitted forest ----------------------------------------------------------------------

def test_tree_predictions_average_to_the_forest(cancer):
    X, y = cancer
    clf = RandomForestClassifier(n_estimators=7, random_state=0).fit(X, y)
    per_tree = F.tree_predictions(clf, X[:50])  # (B, n)
    assert per_tree.shape == (7, 50)
    np.testing.assert_allclose(per_tree.mean(axis=0), clf.predict_proba(X[:50])[:, 1], atol=1e-12)
    Xd, yd = load_diabetes(return_X_y=True)
    reg = RandomForestRegressor(n_estimators=5, random_state=0).fit(Xd, yd)
    np.testing.assert_allclose(F.tree_predictions(reg, Xd[:30]).mean(axis=0), reg.predict(Xd[:30]), rtol=1e-10)
    with pytest.raises(ValueError, match="not fitted"):
        F.tree_predictions(RandomForestClassifier(), X)


def test_oob_curve_ends_at_scikit_learns_oob_score(cancer):
    X, y = cancer
    clf = RandomForestClassifier(n_estimators=40, oob_score=True, random_state=0).fit(X, y)
    curve = F.oob_error_curve(clf, X, y)
    assert curve.shape == (40,)
    assert curve[-1] == pytest.approx(1 - clf.oob_score_, abs=1e-12)
    assert np.all((curve >= 0) & (curve <= 1))
    Xd, yd = load_diabetes(return_X_y=True)
    reg = RandomForestRegressor(n_estimators=60, oob_score=True, random_state=0).fit(Xd, yd)
    assert F.oob_error_curve(reg, Xd, yd)[-1] == pytest.approx(mean_squared_error(yd, reg.oob_prediction_), rel=1e-9)


def test_oob_curve_rejects_what_it_cannot_score(cancer):
    X, y = cancer
    with pytest.raises(ValueError, match="bootstrap"):
        F.oob_error_curve(RandomForestClassifier(n_estimators=3, bootstrap=False).fit(X, y), X, y)
    fitted = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="fitted on"):
        F.oob_error_curve(fitted, X[:100], y[:100])


def test_tree_correlation_identity_and_ordering(cancer):
    X, y = cancer
    points = X[::4]
    few = F.tree_correlation(RandomForestClassifier(12, max_features=1), X, y, points, n_fits=6, seed=0)
    all_ = F.tree_correlation(RandomForestClassifier(12, max_features=None), X, y, points, n_fits=6, seed=0)
    for tc in (few, all_):
        assert -1.0 <= tc.rho <= 1.0 and tc.sigma2 > 0
        assert tc.deviations.shape[:2] == (6, 12)
        # forests of all B trees: the formula holds by construction (same sums)
        assert tc.forest_variance(12) == pytest.approx(F.average_variance(tc.rho, tc.sigma2, 12), rel=1e-9)
        assert tc.floor == pytest.approx(tc.rho * tc.sigma2)
        assert tc.forest_variance(1) > tc.forest_variance(12)
        # every evaluation point counts, unanimous ones with variance 0 (the same points for every m)
        assert tc.deviations.shape[2] == len(points)
        assert tc.sigma2 == pytest.approx(float((tc.deviations ** 2).mean()), rel=1e-12)
    assert len(all_.rho_per_point) < len(points)  # with all features, the trees agree at some points
    assert few.rho < all_.rho  # fewer features per split -> less correlated trees
    with pytest.raises(ValueError):
        few.forest_variance(13)
    with pytest.raises(ValueError):
        F.tree_correlation(RandomForestClassifier(3), X, y, points, n_fits=1)
    with pytest.raises(ValueError):
        F.tree_correlation(RandomForestClassifier(3), X, y[:-1], points)


# -- the imbalanced data and the plot -------------------------------------------------------------

def test_imbalanced_blobs_shape_balance_and_seed():
    X, y = F.imbalanced_blobs(20_000, 0.04, separation=3.0, seed=0)
    assert X.shape == (20_000, 2) and set(np.unique(y)) == {0, 1}
    assert y.mean() == pytest.approx(0.04, abs=0.005)
    gap = X[y == 1].mean(axis=0) - X[y == 0].mean(axis=0)
    assert np.linalg.norm(gap) == pytest.approx(3.0, abs=0.15)
    X2, y2 = F.imbalanced_blobs(20_000, 0.04, separation=3.0, seed=0)
    assert np.array_equal(X, X2) and np.array_equal(y, y2)


def test_plot_decision_regions():
    X, y = F.imbalanced_blobs(300, 0.2, seed=1)
    model = LogisticRegression().fit(X, y)
    ax = F.plot_decision_regions(model, X, y, title="regions", resolution=30)
    assert ax.get_title() == "regions" and ax.get_xlabel() == "feature 1"
    with pytest.raises(ValueError, match="2-D"):
        F.plot_decision_regions(model, np.zeros((5, 3)), np.zeros(5))
    matplotlib.pyplot.close("all")
