"""Appendix (random forests) exercises: the variance formula, the max_features defaults, the
out-of-bag fraction and the minority-class F1. Each checker compares with the library (or with
scikit-learn) on several inputs and never prints the expected value."""
import math

import numpy as np

from ..forests import average_variance, default_max_features
from ._core import NotYet, compare_value, exercise


def _call(answer, *args):
    if not callable(answer):
        raise NotYet(f"expected a function, got {type(answer).__name__}")
    return answer(*args)


@exercise("forests.average_variance",
          hint="two parts: the correlated part rho * sigma2 stays, the independent part (1 - rho) * sigma2 "
               "is divided by the number of trees",
          wrong_answers=lambda: [
              lambda rho, sigma2, B: sigma2 / B,  # ignores the correlation
              lambda rho, sigma2, B: rho * sigma2 + sigma2 / B,  # forgets the (1 - rho)
              lambda rho, sigma2, B: rho + (1 - rho) * sigma2 / B,  # floor without sigma2
              lambda rho, sigma2, B: (1 - rho) * sigma2 / B,  # no floor at all
          ])
def _check_average_variance(answer):
    cases = [(0.0, 1.0, 10), (0.3, 2.0, 1), (0.3, 2.0, 25), (0.8, 0.5, 100), (1.0, 3.0, 7), (0.05, 4.0, 500)]
    for rho, sigma2, B in cases:
        compare_value(_call(answer, rho, sigma2, B), average_variance(rho, sigma2, B),
                      what=f"the variance for rho={rho}, sigma2={sigma2}, B={B}", rtol=1e-6, atol=1e-12)
    return f"matches the formula on all {len(cases)} settings."


@exercise("forests.default_max_features",
          hint="classification: the integer part of sqrt(p); regression: the integer part of p / 3; never below 1",
          wrong_answers=lambda: [
              lambda p, task: round(math.sqrt(p)) if task == "classification" else max(1, p // 3),  # rounds
              lambda p, task: max(1, int(math.sqrt(p))) if task == "classification" else p // 3,  # can be 0
              lambda p, task: max(1, p // 3) if task == "classification" else max(1, int(math.sqrt(p))),  # swapped
              lambda p, task: math.sqrt(p) if task == "classification" else p / 3,  # not an integer count
          ])
def _check_default_max_features(answer):
    cases = [(p, task) for p in (1, 2, 8, 10, 30, 99) for task in ("classification", "regression")]
    for p, task in cases:
        got = _call(answer, p, task)
        if isinstance(got, float) and not float(got).is_integer():
            raise NotYet(f"for p={p} ({task}) you returned {got}: m counts features, so it must be a whole number")
        expected = default_max_features(p, task)
        if got != expected:
            raise NotYet(f"for p={p} ({task}) your m is too {'high' if got > expected else 'low'}")
    return f"right for all {len(cases)} (p, task) pairs."


def _oob_fraction(n):
    return (1.0 - 1.0 / n) ** n


@exercise("forests.oob_fraction",
          hint="one draw misses a given row with probability 1 - 1/n; a bootstrap sample makes n independent draws",
          wrong_answers=lambda: [
              lambda n: math.exp(-1),  # the limit, not the value at finite n
              lambda n: 1.0 / n,
              lambda n: (1.0 - 1.0 / n) ** (n - 1),
              lambda n: 1.0 - (1.0 - 1.0 / n) ** n,  # the fraction that is *in* the sample
          ])
def _check_oob_fraction(answer):
    for n in (1, 2, 3, 10, 569):
        compare_value(_call(answer, n), _oob_fraction(n), what=f"the out-of-bag fraction for n={n}",
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
          hint="precision = TP / (TP + FP), recall = TP / (TP + FN) for class 1; F1 = 2 P R / (P + R)",
          wrong_answers=lambda: [
              lambda t, p: float(np.mean(np.asarray(t) == np.asarray(p))),  # accuracy
              lambda t, p: _f1_of_class(t, p, 0),  # F1 of the majority class
              lambda t, p: (_f1_of_class(t, p, 0) + _f1_of_class(t, p, 1)) / 2,  # macro average
              lambda t, p: float(np.sum((np.asarray(t) == 1) & (np.asarray(p) == 1)) / max(1, np.sum(np.asarray(t) == 1))),  # recall
          ])
def _check_minority_f1(answer):
    from sklearn.metrics import f1_score

    for n, (y_true, y_pred) in enumerate(_f1_cases(), start=1):
        compare_value(_call(answer, y_true.copy(), y_pred.copy()), f1_score(y_true, y_pred),
                      what=f"the minority-class F1 of test case #{n}", rtol=1e-6)
    return "matches sklearn.metrics.f1_score on all 3 test cases."


def _f1_of_class(y_true, y_pred, cls):
    t, p = np.asarray(y_true) == cls, np.asarray(y_pred) == cls
    tp = np.sum(t & p)
    return float(2 * tp / (np.sum(t) + np.sum(p)))
