"""Evidence: how the book checks what its prose says about its own results.

A chapter prints numbers, and its prose draws conclusions from them ("RoPE extrapolates worse
than ALiBi", "the loss is larger when the router collapses"). A printed number can be compared
with a baseline; a *conclusion* needs a check of its own, or a re-run on another machine can
quietly contradict the sentence beside it. This module holds the few tools every chapter uses
for that, written to be read:

* :func:`claim` -- ``claim(ppl_int8 < 1.005 * ppl_float, "int8 costs under 0.5% perplexity")``:
  raises :class:`ClaimError` (an ``AssertionError``) naming the sentence when the premise fails.
  Chapters put their claims in cells tagged ``claim``: the static book hides them, every
  notebook copy keeps them, and nbval fails the chapter when one no longer holds.
* :func:`spread` -- mean, standard deviation and a 95% confidence interval of a few numbers
  (one per seed). A difference between two settings measured on one seed is not evidence.
* :func:`paired_difference` -- the same for the differences ``a[i] - b[i]`` of two settings run
  on the same seeds (paired: the seed's own luck cancels); :attr:`Spread.excludes_zero` says
  whether the data can tell the two apart at all.
* :func:`rounded` -- a number printed only to the digits its spread supports, so the printed
  text survives another CPU, thread count or operating system.
* :func:`benchmark_results` -- a benchmark's results file (``benchmarks/results/NAME.json``),
  from which chapters read sweeps too heavy to run in their 60 s.

The interval is Student's t: ``mean +- t(0.975, n-1) * std / sqrt(n)``. With five seeds t is
2.78, so the half-width is 1.24 standard deviations: a seed-to-seed spread is not a small thing.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ._checks import check_str

__all__ = ["ClaimError", "claim", "Spread", "spread", "paired_difference", "rounded", "benchmark_results"]

# Student's t, two-sided 95% (the 0.975 quantile), for 1..30 degrees of freedom; 1.96 beyond.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042)


class ClaimError(AssertionError):
    """A sentence of the book that its own re-run contradicts."""


def claim(holds, statement: str) -> None:
    """Check one claim of the prose: do nothing when ``holds`` is true, raise otherwise.

    ``holds`` is the premise computed from the chapter's own results (a bool, a numpy bool or a
    one-element tensor); ``statement`` is the sentence it supports, quoted in the error.
    """
    if not check_str("statement", statement, " (the sentence the claim supports)").strip():
        raise ValueError("statement: expected the sentence the claim supports, got an empty string")
    if hasattr(holds, "item"):
        holds = holds.item()
    if not isinstance(holds, bool):
        raise TypeError(f"holds: expected a bool (a comparison of results), got {type(holds).__name__}")
    if not holds:
        raise ClaimError(f"the book says: {statement!r}, but this run contradicts it")


@dataclass(frozen=True)
class Spread:
    """Summary of ``n`` measurements: mean, sample standard deviation, 95% t-interval of the mean."""
    mean: float
    std: float
    n: int
    low: float
    high: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def excludes_zero(self) -> bool:
        """True when the interval lies wholly on one side of 0 (for a difference: the two differ)."""
        return self.low > 0 or self.high < 0

    def format(self, digits: int | None = None) -> str:
        """``"0.512 +- 0.013 (n=5)"``: mean +- standard deviation, each to ``digits`` decimals
        (by default the digits the interval supports, see :func:`rounded`)."""
        if digits is None:
            digits = _digits(self.half_width if self.n > 1 else abs(self.mean) * 1e-3)
        return f"{self.mean:.{digits}f} +- {self.std:.{digits}f} (n={self.n})"

    def __str__(self) -> str:
        return self.format()


def spread(values) -> Spread:
    """Mean, standard deviation (n - 1) and 95% interval of the mean of ``values`` (>= 1 numbers;
    with one number the interval is that number: one seed says nothing about the spread)."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("values: expected at least one number (one per seed)")
    if any(math.isnan(x) for x in xs):
        raise ValueError("values: contains NaN")
    n = len(xs)
    mean = sum(xs) / n
    if n == 1:
        return Spread(mean, 0.0, 1, mean, mean)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    half = t * std / math.sqrt(n)
    return Spread(mean, std, n, mean - half, mean + half)


def paired_difference(a, b) -> Spread:
    """The spread of ``a[i] - b[i]``: two settings measured on the same seeds (or items)."""
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"a, b: expected one value per seed in each, got {len(a)} and {len(b)}")
    return spread(x - y for x, y in zip(a, b))


def _digits(uncertainty: float) -> int:
    """Decimals that keep one significant digit of ``uncertainty`` (at least 0)."""
    if not uncertainty > 0 or math.isinf(uncertainty):
        return 0
    return max(0, -math.floor(math.log10(uncertainty)))


def rounded(value: float, uncertainty: float) -> float:
    """``value`` rounded to the first significant digit of ``uncertainty`` (a spread, a tolerance):
    ``rounded(0.51234, 0.013) == 0.51``. Print what this returns and the printed text is the same
    on any machine whose result lies within the uncertainty (and away from a rounding edge)."""
    if not uncertainty > 0:
        raise ValueError(f"uncertainty: expected a positive number, got {uncertainty!r}")
    return round(float(value), _digits(uncertainty))


def benchmark_results(name: str) -> dict:
    """The results a benchmark script wrote, ``benchmarks/results/<name>.json`` (repository root)."""
    check_str("name", name, " (a benchmark's name, e.g. 'seeds')")
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / f"{name}.json"
    if not path.exists():
        raise ValueError(f"name: no results file {path} (run benchmarks/{name}.py first)")
    return json.loads(path.read_text())
