"""transformer_lib.evidence against scipy's Student t and the statistics module."""
from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, strategies as st
from scipy import stats

from transformer_lib.evidence import ClaimError, benchmark_results, claim, paired_difference, rounded, spread

finite = st.floats(-1e3, 1e3, allow_nan=False)


@given(st.lists(finite, min_size=2, max_size=40))
def test_spread_equals_scipy_t_interval(xs):
    s = spread(xs)
    assert s.n == len(xs)
    assert s.mean == pytest.approx(statistics.fmean(xs), abs=1e-9)
    assert s.std == pytest.approx(statistics.stdev(xs), rel=1e-9, abs=1e-9)
    if s.std > 1e-6:
        # the table holds t to 3 decimals (relative error <= 0.0005 / 2.04) for n <= 31; beyond that 1.96 stands in for t (<= 2.04 / 1.96)
        low, high = stats.t.interval(0.95, len(xs) - 1, loc=s.mean, scale=s.std / math.sqrt(len(xs)))
        rel = 3e-4 if len(xs) <= 31 else 0.04
        assert s.half_width == pytest.approx((high - low) / 2, rel=rel)


def test_one_value_has_no_spread():
    s = spread([0.5])
    assert (s.std, s.low, s.high, s.n) == (0.0, 0.5, 0.5, 1)


def test_paired_difference_cancels_a_shared_offset():
    a = [1.0, 2.0, 3.0, 4.0, 5.0]
    b = [x - 0.1 for x in a]  # every seed 0.1 better: unpaired intervals overlap, the paired one excludes 0
    assert not (spread(b).high < spread(a).low)
    d = paired_difference(a, b)
    assert d.excludes_zero and d.mean == pytest.approx(0.1)


def test_interval_that_straddles_zero():
    assert not spread([-1.0, 1.0, -0.5, 0.5]).excludes_zero


def test_rounded_keeps_the_digit_the_uncertainty_supports():
    assert rounded(0.51234, 0.013) == 0.51
    assert rounded(123.456, 2.0) == 123.0
    assert rounded(1.2345e-7, 3e-9) == pytest.approx(1.23e-7)


def test_format_shows_mean_std_and_n():
    assert spread([0.50, 0.52, 0.51, 0.53, 0.49]).format(3) == "0.510 +- 0.016 (n=5)"


def test_claim_passes_and_fails():
    claim(1 < 2, "one is less than two")
    with pytest.raises(ClaimError, match="two is less than one"):
        claim(2 < 1, "two is less than one")
    import numpy as np
    import torch
    claim(np.float32(1) > 0, "numpy bools count")
    claim(torch.tensor(1.0) > 0, "one-element tensors count")


@pytest.mark.parametrize("call, arg", [
    (lambda: claim(1, "x"), "holds"),
    (lambda: claim(True, ""), "statement"),
])
def test_claim_bad_arguments(call, arg):
    with pytest.raises((TypeError, ValueError), match=arg):
        call()


@pytest.mark.parametrize("call, arg", [
    (lambda: spread([]), "values"),
    (lambda: spread([1.0, float("nan")]), "values"),
    (lambda: paired_difference([1.0], [1.0, 2.0]), "a, b"),
    (lambda: rounded(1.0, 0.0), "uncertainty"),
    (lambda: benchmark_results("no_such_benchmark"), "name"),
])
def test_bad_inputs_name_the_argument(call, arg):
    with pytest.raises(ValueError, match=arg):
        call()


def test_benchmark_results_reads_the_results_file():
    assert "machine" in benchmark_results("seeds") or benchmark_results("seeds")
