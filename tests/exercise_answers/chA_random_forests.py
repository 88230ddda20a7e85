"""Answers for the checkers of transformer_lib/exercises/chA_random_forests.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import math

import numpy as np

from transformer_lib.forests import average_variance, default_max_features


def _oob_fraction(n):
    return (1.0 - 1.0 / n) ** n


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


ANSWERS = {
    'forests.average_variance': {
        'solution': lambda: average_variance,
        'alternatives': lambda: [
            lambda rho, sigma2, B: sigma2 * (1 + (B - 1) * rho) / B,  # (B sigma2 + B (B - 1) rho sigma2) / B^2
            lambda rho, sigma2, B: np.full((B, B), rho * sigma2)[~np.eye(B, dtype=bool)].sum() / B ** 2
            + B * sigma2 / B ** 2,  # the covariance matrix of the B trees, summed, over B^2
        ],
        'wrong': lambda: [
            lambda rho, sigma2, B: sigma2 / B,  # ignores the correlation
            lambda rho, sigma2, B: rho * sigma2 + sigma2 / B,  # forgets the (1 - rho)
            lambda rho, sigma2, B: rho + (1 - rho) * sigma2 / B,  # floor without sigma2
            lambda rho, sigma2, B: (1 - rho) * sigma2 / B,  # no floor at all
            lambda rho, sigma2, B: rho * sigma2 / B + (1 - rho) * sigma2,  # the two parts swapped
            lambda rho, sigma2, B: rho * sigma2 + (1 - rho) * sigma2 / (B - 1) if B > 1 else sigma2,  # B - 1
        ],
    },
    'forests.default_max_features': {
        'solution': lambda: default_max_features,
        'alternatives': lambda: [
            lambda p, task: np.int64(max(1, math.isqrt(p) if task == "classification" else p // 3)),
            lambda p, task: float(max(1, int(p ** 0.5))) if task == "classification" else _floor_third_tensor(p),
        ],
        'wrong': lambda: [
            lambda p, task: round(math.sqrt(p)) if task == "classification" else max(1, p // 3),  # rounds
            lambda p, task: max(1, int(math.sqrt(p))) if task == "classification" else p // 3,  # can be 0
            lambda p, task: max(1, p // 3) if task == "classification" else max(1, int(math.sqrt(p))),  # swapped
            lambda p, task: math.sqrt(p) if task == "classification" else p / 3,  # not an integer count
            lambda p, task: math.ceil(math.sqrt(p)) if task == "classification" else max(1, math.ceil(p / 3)),  # ceil
            lambda p, task: int(math.log2(p)) + 1,  # Breiman's other rule, log2(p) + 1
        ],
    },
    'forests.oob_fraction': {
        'solution': lambda: _oob_fraction,
        'alternatives': lambda: [
            lambda n: math.exp(n * math.log1p(-1.0 / n)) if n > 1 else 0.0,  # through the logarithm
            lambda n: np.float64((n - 1) / n) ** n,  # a NumPy float
        ],
        'wrong': lambda: [
            lambda n: math.exp(-1),  # the limit, not the value at finite n
            lambda n: 1.0 / n,
            lambda n: (1.0 - 1.0 / n) ** (n - 1),
            lambda n: 1.0 - (1.0 - 1.0 / n) ** n,  # the fraction that is *in* the sample
            lambda n: (1.0 - 1.0 / n) ** (n + 1),  # one draw too many
            lambda n: 1.0 - 1.0 / n,  # a single draw
        ],
    },
    'forests.minority_f1': {
        'solution': lambda: _f1_reference,
        'alternatives': lambda: [_f1_by_loop, _f1_by_counts],
        'wrong': lambda: [
            lambda t, p: float(np.mean(np.asarray(t) == np.asarray(p))),  # accuracy
            lambda t, p: _f1_of_class(t, p, 0),  # F1 of the majority class
            lambda t, p: (_f1_of_class(t, p, 0) + _f1_of_class(t, p, 1)) / 2,  # macro average
            lambda t, p: float(np.sum((np.asarray(t) == 1) & (np.asarray(p) == 1)) / max(1, np.sum(np.asarray(t) == 1))),  # recall
            lambda t, p: float(np.sum((t == 1) & (p == 1)) / max(1, np.sum(p == 1))),  # precision
            lambda t, p: (lambda tp, fp, fn: tp / (tp + fp + fn))(  # the Jaccard index, not F1
                np.sum((t == 1) & (p == 1)), np.sum((t == 0) & (p == 1)), np.sum((t == 1) & (p == 0))),
        ],
    },
}
