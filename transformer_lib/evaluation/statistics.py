"""Is model A really better than model B? The statistics of an accuracy (chapter 30, "The math").

An evaluation set of ``n`` items is a sample: another ``n`` items of the same kind would give
another accuracy. Everything here treats the per-item outcomes (1 right, 0 wrong) as draws and
asks how much the accuracy would move.

* :func:`accuracy_interval` -- the accuracy, its standard error ``sqrt(p (1 - p) / n)`` and a 95%
  interval: Wald's ``p +- 1.96 SE`` (too narrow near 0 and 1, empty at 0 or 1) or Wilson's, the
  one to use (it inverts the score test, so it stays inside [0, 1] and covers near the edges).
* :func:`paired_comparison` -- A and B answered the *same* items, so compare them item by item:
  the mean of the differences ``a_i - b_i`` with its t-interval (the paired standard error of
  Miller 2024, from :func:`~transformer_lib.evidence.paired_difference`), and McNemar's exact
  test, which looks only at the items the two models disagree on.
* :func:`paired_bootstrap` -- the same question answered by resampling items.
* :func:`items_needed` / :func:`power` -- how many items a difference of a given size needs before
  a paired test will see it (the normal approximation of Connor 1987 / Miller 2024).

Standard library only (``math``, ``statistics.NormalDist``): every formula is a line to read.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from statistics import NormalDist

from .._checks import check_choice, check_int, check_number
from .._checks.evaluation import check_outcomes
from ..evidence import Spread, paired_difference

__all__ = ["AccuracyInterval", "accuracy_interval", "PairedComparison", "paired_comparison", "mcnemar_p_value",
           "paired_bootstrap", "items_needed", "power"]


def _z(confidence: float) -> float:
    """The two-sided normal quantile: 1.96 for 95%."""
    return NormalDist().inv_cdf(0.5 + confidence / 2)


@dataclass(frozen=True)
class AccuracyInterval:
    """An accuracy ``p`` over ``n`` items with its standard error and interval [low, high]."""
    p: float
    n: int
    se: float
    low: float
    high: float
    method: str

    def format(self, digits: int = 1) -> str:
        """``"71.3% [66.0, 76.1] (n=300)"``, in per cent."""
        return f"{100 * self.p:.{digits}f}% [{100 * self.low:.{digits}f}, {100 * self.high:.{digits}f}] (n={self.n})"


def accuracy_interval(outcomes, confidence: float = 0.95, method: str = "wilson") -> AccuracyInterval:
    """Accuracy of 0/1 ``outcomes`` with a ``confidence`` interval by ``method`` ("wilson" or "wald").

    Wald: ``p +- z SE`` with ``SE = sqrt(p (1 - p) / n)``. Wilson: the ``p0`` whose score test
    ``|p - p0| <= z sqrt(p0 (1 - p0) / n)`` accepts, solved for ``p0``:
    ``(p + z^2/2n +- z sqrt(p (1 - p)/n + z^2/4n^2)) / (1 + z^2/n)``."""
    xs = check_outcomes("outcomes", outcomes)
    check_number("confidence", confidence, 0, 1, low_open=True, high_open=True)
    check_choice("method", method, ("wilson", "wald"))
    n, z = len(xs), _z(confidence)
    p = sum(xs) / n
    se = math.sqrt(p * (1 - p) / n)
    if method == "wald":
        low, high = max(0.0, p - z * se), min(1.0, p + z * se)
    else:
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        # exactly p at p = 0 or 1; min / max keep rounding (1e-17) from putting p outside
        low, high = max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))
    return AccuracyInterval(p, n, se, low, high, method)


def mcnemar_p_value(only_a: int, only_b: int) -> float:
    """McNemar's exact two-sided p-value: of the ``only_a + only_b`` items on which exactly one
    model is right, how surprising is a split this uneven if each were equally likely to be
    A's (a fair coin)? ``min(1, 2 P(X <= min(only_a, only_b)))`` for ``X ~ Binomial(d, 1/2)``."""
    check_int("only_a", only_a, 0)
    check_int("only_b", only_b, 0)
    d, k = only_a + only_b, min(only_a, only_b)
    if d == 0:
        return 1.0
    tail = sum(math.comb(d, i) for i in range(k + 1)) / 2 ** d
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class PairedComparison:
    """A against B on the same items: the accuracy difference (a Spread of the per-item
    differences, with its 95% t-interval), the discordant counts and McNemar's exact p-value."""
    difference: Spread
    only_a: int
    only_b: int
    p_value: float

    @property
    def resolved(self) -> bool:
        """True when the 95% interval of the difference excludes 0 (the data tell A and B apart)."""
        return self.difference.excludes_zero

    def format(self, digits: int = 1) -> str:
        d = self.difference
        return (f"{100 * d.mean:+.{digits}f} points [{100 * d.low:+.{digits}f}, {100 * d.high:+.{digits}f}], "
                f"A alone right on {self.only_a}, B alone on {self.only_b}, McNemar p = {self.p_value:.3g}")


def paired_comparison(a, b) -> PairedComparison:
    """Compare per-item outcomes ``a`` and ``b`` of two models on the same items (same order)."""
    xs = check_outcomes("a", a)
    ys = check_outcomes("b", b, len(xs))
    only_a = sum(1 for x, y in zip(xs, ys) if x > y)
    only_b = sum(1 for x, y in zip(xs, ys) if y > x)
    return PairedComparison(paired_difference(xs, ys), only_a, only_b, mcnemar_p_value(only_a, only_b))


def paired_bootstrap(a, b, resamples: int = 2000, seed: int = 0, confidence: float = 0.95) -> tuple[float, float]:
    """A percentile interval of ``mean(a) - mean(b)`` from ``resamples`` resamplings of the items
    (the same items for both models in each resample: the pairing is kept)."""
    xs = check_outcomes("a", a)
    ys = check_outcomes("b", b, len(xs))
    check_int("resamples", resamples, 10)
    check_int("seed", seed, 0)
    check_number("confidence", confidence, 0, 1, low_open=True, high_open=True)
    diffs = [x - y for x, y in zip(xs, ys)]
    rng, n = random.Random(seed), len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (1 - confidence) / 2
    return means[int(math.floor(tail * (resamples - 1)))], means[int(math.ceil((1 - tail) * (resamples - 1)))]


def items_needed(difference: float, sd_difference: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Items a paired comparison needs to detect a true accuracy difference ``difference`` with
    probability ``power`` at two-sided level ``alpha``, when the per-item differences have
    standard deviation ``sd_difference``: ``n = ((z_{1-alpha/2} + z_{power}) sd / difference)^2``.
    For 0/1 outcomes ``sd^2 = q - difference^2`` with ``q`` the share of items the models
    disagree on: models that disagree rarely are cheap to tell apart."""
    check_number("difference", difference, 0, low_open=True)
    check_number("sd_difference", sd_difference, 0, low_open=True)
    check_number("alpha", alpha, 0, 1, low_open=True, high_open=True)
    check_number("power", power, 0, 1, low_open=True, high_open=True)
    z = _z(1 - alpha) + NormalDist().inv_cdf(power)
    return math.ceil((z * sd_difference / difference) ** 2)


def power(n: int, difference: float, sd_difference: float, alpha: float = 0.05) -> float:
    """The chance that a paired test on ``n`` items finds a true difference ``difference``
    significant at level ``alpha`` (the inverse of :func:`items_needed`; the far tail ignored)."""
    check_int("n", n)
    check_number("difference", difference, 0, low_open=True)
    check_number("sd_difference", sd_difference, 0, low_open=True)
    check_number("alpha", alpha, 0, 1, low_open=True, high_open=True)
    shift = difference * math.sqrt(n) / sd_difference
    return NormalDist().cdf(shift - _z(1 - alpha))
