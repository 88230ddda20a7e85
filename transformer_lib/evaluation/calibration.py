"""Calibration: when the model says 70%, is it right 70% of the time? (chapter 30, "Calibration").

A multiple-choice scorer gives more than a prediction: a softmax over the choices' scores is a
probability for each choice, and the largest is the model's *confidence*. A model is calibrated
when, among the items it answers with confidence about c, the share it gets right is about c.
The reliability diagram bins items by confidence and plots each bin's accuracy against its mean
confidence; the expected calibration error (ECE, Naeini et al. 2015; Guo et al. 2017) is the
gap between the two, averaged over bins weighted by their items:

    ECE = sum_b (n_b / n) |accuracy_b - confidence_b|

Equal-width bins as Guo et al. use; with few items per bin the ECE is itself noisy (and biased
upwards: even a calibrated model shows gaps from sampling alone).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .._checks import check_int
from .._checks.evaluation import check_confidences, check_outcomes, check_real_values

__all__ = ["choice_probabilities", "Reliability", "reliability", "expected_calibration_error"]


def choice_probabilities(scores) -> list[float]:
    """Softmax over one item's choice scores (log-likelihoods): probabilities summing to 1."""
    xs = check_real_values("scores", scores)
    top = max(xs)
    e = [math.exp(x - top) for x in xs]  # subtract the max: no overflow
    total = sum(e)
    return [v / total for v in e]


@dataclass(frozen=True)
class Reliability:
    """Per bin ``[edges[b], edges[b + 1])``: items, mean confidence and accuracy (NaN when empty)."""
    edges: tuple[float, ...]
    counts: tuple[int, ...]
    confidence: tuple[float, ...]
    accuracy: tuple[float, ...]

    @property
    def ece(self) -> float:
        n = sum(self.counts)
        return sum(c / n * abs(a - f) for c, a, f in zip(self.counts, self.accuracy, self.confidence) if c)


def reliability(confidence, outcomes, bins: int = 10) -> Reliability:
    """Bin items by ``confidence`` into ``bins`` equal-width bins of [0, 1] (the last bin closed)."""
    conf = check_confidences(confidence)
    right = check_outcomes("outcomes", outcomes, len(conf))
    check_int("bins", bins)
    members = [[] for _ in range(bins)]
    for c, r in zip(conf, right):
        members[min(int(c * bins), bins - 1)].append((c, r))
    nan = float("nan")
    return Reliability(tuple(b / bins for b in range(bins + 1)), tuple(len(m) for m in members),
                       tuple(sum(c for c, _ in m) / len(m) if m else nan for m in members),
                       tuple(sum(r for _, r in m) / len(m) if m else nan for m in members))


def expected_calibration_error(confidence, outcomes, bins: int = 10) -> float:
    """ECE of :func:`reliability`: the item-weighted mean gap between accuracy and confidence."""
    return reliability(confidence, outcomes, bins).ece
