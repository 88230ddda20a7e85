"""Chapter 30 (Evaluating a language model) exercises: a Wilson interval for an accuracy, McNemar's
exact test for two models on the same items, and how many items a difference needs. Each checker
compares with the library's public functions (:mod:`transformer_lib.evaluation`)."""
from ..evaluation import accuracy_interval, items_needed, paired_comparison
from ._core import NotYet, compare_number_cases, exercise, require_function, to_number

_INTERVAL_CASES = [(0, 10), (3, 10), (10, 10), (50, 64), (412, 1000), (1, 400), (199, 200)]


@exercise("evaluation.wilson_interval", call="wilson(k, n)",
          hint="with p = k / n and z = 1.96: centre (p + z^2 / 2n) / (1 + z^2 / n), half-width "
               "z sqrt(p (1 - p) / n + z^2 / 4n^2) / (1 + z^2 / n); return (low, high)")
def _check_wilson(answer):
    require_function(answer)
    for k, n in _INTERVAL_CASES:
        got = answer(k, n)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise NotYet(f"wilson({k}, {n}) must return two numbers (low, high), got {got!r}")
        low, high = (to_number(v, "your bound") for v in got)
        want = accuracy_interval([1] * k + [0] * (n - k))
        for name, mine, ref in (("low", low, want.low), ("high", high, want.high)):
            if abs(mine - ref) > 2e-4:
                raise NotYet(f"{k} right of {n}: your {name} end is too {'high' if mine > ref else 'low'}"
                             + (" (Wald's p +- z SE? it collapses at 0 and 1)" if k in (0, n) else ""))
    return f"right on all {len(_INTERVAL_CASES)} accuracies (0 and n right included)."


def _outcomes(only_a, only_b, both, neither):
    a = [1] * only_a + [0] * only_b + [1] * both + [0] * neither
    b = [0] * only_a + [1] * only_b + [1] * both + [0] * neither
    return a, b


_MCNEMAR_CASES = [(3, 9, 40, 8), (10, 10, 5, 5), (1, 20, 0, 0), (40, 25, 300, 35), (0, 0, 10, 2), (7, 0, 1, 1)]


@exercise("evaluation.mcnemar", call="mcnemar(a, b)",
          hint="count the items only A got right (n_a) and only B got right (n_b); under 'equally good' each "
               "such item is a fair coin: p = min(1, 2 P(X <= min(n_a, n_b))) with X ~ Binomial(n_a + n_b, 1/2) "
               "(math.comb); 1.0 when they never disagree")
def _check_mcnemar(answer):
    return compare_number_cases(
        answer, [_outcomes(*c) for c in _MCNEMAR_CASES], lambda a, b: paired_comparison(a, b).p_value,
        what="your p-value", rtol=1e-6, atol=1e-12,
        wrong=lambda n, got, want, a, b: f"case {n} ({len(a)} items): your p-value is too "
                                         f"{'high' if got > want else 'low'} (items both got right or both "
                                         f"got wrong carry no information)",
        summary="pairs of models (no disagreement and one-sided cases included).")


_NEEDED_CASES = [(0.05, 0.44), (0.02, 0.3), (0.10, 0.5), (0.03, 0.17), (0.2, 0.6)]


@exercise("evaluation.items_needed", call="needed(difference, sd)",
          hint="n = ((z_0.975 + z_0.8) * sd / difference)^2, rounded up: z_0.975 = 1.959964, z_0.8 = 0.841621 "
               "(statistics.NormalDist().inv_cdf)")
def _check_needed(answer):
    return compare_number_cases(
        answer, _NEEDED_CASES, items_needed, what="your number of items",
        wrong=lambda n, got, want, d, sd: f"difference {d}, sd {sd}: your count is too "
                                          f"{'high' if got > want else 'low'} (rounded up to a whole item?)",
        summary="differences (5% level, 80% power).")
