"""Appendix (random forests) exercises: the variance formula, the max_features defaults, the
out-of-bag fraction and the minority-class F1. Each checker compares with the library (or with
scikit-learn) on several inputs and never prints the expected value."""

import numpy as np

from ..forests import average_variance, default_max_features
from ._core import NotYet, compare_value, exercise, expected_values, to_int, to_number


_VARIANCE_CASES = [(0.0, 1.0, 10), (0.3, 2.0, 1), (0.3, 2.0, 25), (0.8, 0.5, 100), (1.0, 3.0, 7), (0.05, 4.0, 500)]


@exercise("forests.average_variance",
          hint="two parts: the correlated part rho * sigma2 stays, the independent part (1 - rho) * sigma2 "
               "is divided by the number of trees")
def _check_average_variance(answer):
    for rho, sigma2, B in _VARIANCE_CASES:
        compare_value(answer(rho, sigma2, B), average_variance(rho, sigma2, B),
                      what=f"the variance for rho={rho}, sigma2={sigma2}, B={B}", rtol=1e-6, atol=1e-12)
    return f"matches the formula on all {len(_VARIANCE_CASES)} settings."


@exercise("forests.default_max_features",
          hint="classification: the integer part of sqrt(p); regression: the integer part of p / 3; never below 1")
def _check_default_max_features(answer):
    cases = [(p, task) for p in (1, 2, 8, 10, 30, 99) for task in ("classification", "regression")]
    for p, task in cases:
        value = to_number(answer(p, task), f"m for p={p} ({task})")
        if not value.is_integer():
            raise NotYet(f"for p={p} ({task}) you returned {value:g}: m counts features, so it must be a whole number")
        got = to_int(value)
        expected = default_max_features(p, task)
        compare_value(got, expected, f"for p={p} ({task}) your m", rtol=0)
    return f"right for all {len(cases)} (p, task) pairs."


_OOB_SIZES = (1, 2, 3, 10, 569)  # the library has no out-of-bag formula: the checker compares with stored numbers


@exercise("forests.oob_fraction",
          hint="one draw misses a given row with probability 1 - 1/n; a bootstrap sample makes n independent draws")
def _check_oob_fraction(answer):
    for n, expected in zip(_OOB_SIZES, expected_values("forests.oob_fraction")):
        compare_value(answer(n), float(expected), what=f"the out-of-bag fraction for n={n}",
                      rtol=1e-6, atol=1e-12)
    return "right for n = 1, 2, 3, 10 and 569 (it tends to 1/e = 0.368)."


def _f1_cases():
    rng = np.random.default_rng(5)
    cases = []
    for n, minority, flip in ((200, 0.05, 0.02), (500, 0.1, 0.05), (60, 0.3, 0.2)):
        y_true = (rng.random(n) < minority).astype(int)
        y_true[:2] = [0, 1]  # both classes present
        y_pred = np.where(rng.random(n) < flip, 1 - y_true, y_true)  # a few errors each way
        cases.append((y_true, y_pred))
    return cases


@exercise("forests.minority_f1",
          hint="precision = TP / (TP + FP), recall = TP / (TP + FN) for class 1; F1 = 2 P R / (P + R)")
def _check_minority_f1(answer):
    from sklearn.metrics import f1_score

    for n, (y_true, y_pred) in enumerate(_f1_cases(), start=1):
        compare_value(answer(y_true.copy(), y_pred.copy()), f1_score(y_true, y_pred),
                      what=f"the minority-class F1 of test case #{n}", rtol=1e-6)
    return "matches sklearn.metrics.f1_score on all 3 test cases."


