"""Appendix (random forests) exercises: the variance formula, the max_features defaults, the
out-of-bag fraction and the minority-class F1. Each checker compares with the library (or with
scikit-learn) on several inputs and never prints the expected value."""
import math

import numpy as np

from ..forests import average_variance, default_max_features
from ._core import NotYet, compare_value, exercise, to_int, to_number


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
              lambda rho, sigma2, B: rho * sigma2 / B + (1 - rho) * sigma2,  # the two parts swapped
              lambda rho, sigma2, B: rho * sigma2 + (1 - rho) * sigma2 / (B - 1) if B > 1 else sigma2,  # B - 1
          ],
          solution=lambda: average_variance,
          alternative_answers=lambda: [
              lambda rho, sigma2, B: sigma2 * (1 + (B - 1) * rho) / B,  # (B sigma2 + B (B - 1) rho sigma2) / B^2
              lambda rho, sigma2, B: np.full((B, B), rho * sigma2)[~np.eye(B, dtype=bool)].sum() / B ** 2
              + B * sigma2 / B ** 2,  # the covariance matrix of the B trees, summed, over B^2
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
              lambda p, task: math.ceil(math.sqrt(p)) if task == "classification" else max(1, math.ceil(p / 3)),  # ceil
              lambda p, task: int(math.log2(p)) + 1,  # Breiman's other rule, log2(p) + 1
          ],
          solution=lambda: default_max_features,
          alternative_answers=lambda: [
              lambda p, task: np.int64(max(1, math.isqrt(p) if task == "classification" else p // 3)),
              lambda p, task: float(max(1, int(p ** 0.5))) if task == "classification" else _floor_third_tensor(p),
          ])
def _check_default_max_features(answer):
    cases = [(p, task) for p in (1, 2, 8, 10, 30, 99) for task in ("classification", "regression")]
    for p, task in cases:
        value = to_number(_call(answer, p, task), f"m for p={p} ({task})")
        if not value.is_integer():
            raise NotYet(f"for p={p} ({task}) you returned {value:g}: m counts features, so it must be a whole number")
        got = to_int(value)
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
              lambda n: (1.0 - 1.0 / n) ** (n + 1),  # one draw too many
              lambda n: 1.0 - 1.0 / n,  # a single draw
          ],
          solution=lambda: _oob_fraction,
          alternative_answers=lambda: [
              lambda n: math.exp(n * math.log1p(-1.0 / n)) if n > 1 else 0.0,  # through the logarithm
              lambda n: np.float64((n - 1) / n) ** n,  # a NumPy float
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
              lambda t, p: float(np.sum((t == 1) & (p == 1)) / max(1, np.sum(p == 1))),  # precision
              lambda t, p: (lambda tp, fp, fn: tp / (tp + fp + fn))(  # the Jaccard index, not F1
                  np.sum((t == 1) & (p == 1)), np.sum((t == 0) & (p == 1)), np.sum((t == 1) & (p == 0))),
          ],
          solution=lambda: _f1_reference,
          alternative_answers=lambda: [_f1_by_loop, _f1_by_counts])
def _check_minority_f1(answer):
    from sklearn.metrics import f1_score

    for n, (y_true, y_pred) in enumerate(_f1_cases(), start=1):
        compare_value(_call(answer, y_true.copy(), y_pred.copy()), f1_score(y_true, y_pred),
                      what=f"the minority-class F1 of test case #{n}", rtol=1e-6)
    return "matches sklearn.metrics.f1_score on all 3 test cases."


def _f1_reference(y_true, y_pred):
    from sklearn.metrics import f1_score
    return f1_score(y_true, y_pred)


def _f1_by_counts(y_true, y_pred):
    """A right answer: 2 TP / (2 TP + FP + FN), the harmonic mean written with counts (a NumPy float)."""
    tp = np.sum((y_true == 1) & (y_pred == 1))
    fp = np.sum((y_true == 0) & (y_pred == 1))
    fn = np.sum((y_true == 1) & (y_pred == 0))
    return 2 * tp / (2 * tp + fp + fn)


def _f1_by_loop(y_true, y_pred):
    """A right answer: count in a Python loop, then precision and recall, returned in a list."""
    tp = fp = fn = 0
    for t, p in zip(y_true.tolist(), y_pred.tolist()):
        tp += t == 1 and p == 1
        fp += t == 0 and p == 1
        fn += t == 1 and p == 0
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    return [2 * precision * recall / (precision + recall)]


def _floor_third_tensor(p):
    """p // 3, at least 1, as a one-element tensor (an answer computed with torch)."""
    import torch
    return torch.clamp(torch.tensor([p]) // 3, min=1)


def _f1_of_class(y_true, y_pred, cls):
    t, p = np.asarray(y_true) == cls, np.asarray(y_pred) == cls
    tp = np.sum(t & p)
    return float(2 * tp / (np.sum(t) + np.sum(p)))
