"""Answers for the checkers of transformer_lib/exercises/ch30_evaluation.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import math
from statistics import NormalDist

Z = 1.959964


def wilson_reference(k, n):
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _wilson_quadratic(k, n):  # the roots of (p - p0)^2 = z^2 p0 (1 - p0) / n
    p, z2 = k / n, Z * Z
    a, b, c = 1 + z2 / n, -(2 * p + z2 / n), p * p
    root = math.sqrt(b * b - 4 * a * c)
    return [(-b - root) / (2 * a), (-b + root) / (2 * a)]


def _wald(k, n):
    p = k / n
    half = Z * math.sqrt(p * (1 - p) / n)
    return max(0.0, p - half), min(1.0, p + half)


def _wilson_no_shift(k, n):  # the centre left at p
    p = k / n
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return max(0.0, p - half), min(1.0, p + half)


def _wilson_one_sided_z(k, n):
    z = 1.645
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def _wilson_swapped(k, n):
    low, high = wilson_reference(k, n)
    return high, low


def mcnemar_reference(a, b):
    na = sum(1 for x, y in zip(a, b) if x and not y)
    nb = sum(1 for x, y in zip(a, b) if y and not x)
    d = na + nb
    if d == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(d, i) for i in range(min(na, nb) + 1)) / 2 ** d)


def _mcnemar_scipy(a, b):
    from scipy.stats import binomtest
    na = sum(x > y for x, y in zip(a, b))
    nb = sum(y > x for x, y in zip(a, b))
    return 1.0 if na + nb == 0 else binomtest(na, na + nb, 0.5).pvalue


def _mcnemar_one_sided(a, b):
    na = sum(x > y for x, y in zip(a, b))
    nb = sum(y > x for x, y in zip(a, b))
    d = na + nb
    return 1.0 if d == 0 else sum(math.comb(d, i) for i in range(min(na, nb) + 1)) / 2 ** d


def _mcnemar_chi2(a, b):  # the large-sample statistic: wrong for few disagreements
    na = sum(x > y for x, y in zip(a, b))
    nb = sum(y > x for x, y in zip(a, b))
    if na + nb == 0:
        return 1.0
    chi2 = (na - nb) ** 2 / (na + nb)
    return math.erfc(math.sqrt(chi2 / 2))


def _mcnemar_all_items(a, b):  # counts every item, not only the disagreements
    n = len(a)
    k = min(sum(a), sum(b))
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def _mcnemar_unclipped(a, b):
    na = sum(x > y for x, y in zip(a, b))
    nb = sum(y > x for x, y in zip(a, b))
    d = na + nb
    return 1.0 if d == 0 else 2 * sum(math.comb(d, i) for i in range(min(na, nb) + 1)) / 2 ** d


def needed_reference(difference, sd):
    return math.ceil(((1.959964 + 0.841621) * sd / difference) ** 2)


def _needed_normaldist(difference, sd):
    z = NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8)
    return math.ceil((z * sd / difference) ** 2)


def _needed_rounded(difference, sd):
    return round(((1.959964 + 0.841621) * sd / difference) ** 2)


def _needed_one_sided(difference, sd):
    return math.ceil(((1.644854 + 0.841621) * sd / difference) ** 2)


def _needed_no_power(difference, sd):
    return math.ceil((1.959964 * sd / difference) ** 2)


def _needed_not_squared(difference, sd):
    return math.ceil((1.959964 + 0.841621) * sd / difference)


ANSWERS = {
    "evaluation.wilson_interval": {
        "solution": lambda: wilson_reference,
        "alternatives": lambda: [_wilson_quadratic],
        "wrong": lambda: [_wald, _wilson_no_shift, _wilson_one_sided_z, _wilson_swapped],
    },
    "evaluation.mcnemar": {
        "solution": lambda: mcnemar_reference,
        "alternatives": lambda: [_mcnemar_scipy],
        "wrong": lambda: [_mcnemar_one_sided, _mcnemar_chi2, _mcnemar_all_items, _mcnemar_unclipped],
    },
    "evaluation.items_needed": {
        "solution": lambda: needed_reference,
        "alternatives": lambda: [_needed_normaldist],
        "wrong": lambda: [_needed_rounded, _needed_one_sided, _needed_no_power, _needed_not_squared],
    },
}
