"""transformer_lib.scaling: the FLOP count equals torch's FLOP counter on the library's GPT (to the
FLOP); approach 3 recovers a known law from noisy losses within five standard errors (computed from
the noise and the design by Gauss-Newton, so the tolerance follows from the data, not from the fit);
the IsoFLOP vertex of an exact parabola; the compute-optimal split against a numerical minimum; bad
input names its argument."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

import transformer_lib as tl
from transformer_lib.probes import record_attention
from transformer_lib.profiling import count_flops
from transformer_lib.scaling import (PUBLISHED, ScalingFit, fit_scaling_law, flops_per_token, isoflop_minimum,
                                     power_law, product_parameters, training_flops)
from transformer_lib.training import causal_lm_loss

SMALL_GRID = dict(alpha=[0.0, 0.5, 1.0], beta=[0.0, 0.5, 1.0], e=[-1.0, 0.0, 1.0], a=[0.0, 5.0, 10.0], b=[0.0, 5.0, 10.0])


# -- counting compute -------------------------------------------------------------------------------

@pytest.mark.parametrize("vocab, d, heads, layers, d_ff, context", [(64, 32, 2, 2, None, 16), (50, 24, 3, 3, 40, 9),
                                                                    (17, 16, 1, 1, None, 32)])
def test_flops_equal_torch_flop_counter(vocab, d, heads, layers, d_ff, context):
    """Tolerance 0: both count 2 FLOPs per multiply-add of every matrix product, in integers."""
    tl.seed_everything(0)
    model = tl.DecoderOnlyLM(vocab, d_model=d, num_heads=heads, num_layers=layers, d_ff=d_ff, max_len=context)
    x = torch.randint(0, vocab, (3, context))
    with record_attention(model, weights=True):  # explicit Q K^T and A V, which the counter sees
        forward = count_flops(model, x)
    assert 3 * forward.total == training_flops(model, 3 * context, context)
    model.train()
    with record_attention(model, weights=True), FlopCounterMode(display=False) as counter:
        causal_lm_loss(model(x), x).backward()  # the embedding needs a gradient: the full backward runs
    assert counter.get_total_flops() == training_flops(model, 3 * context, context)


def test_product_parameters_are_the_matrices_a_token_meets():
    model = tl.DecoderOnlyLM(40, d_model=32, num_heads=4, num_layers=3, d_ff=48, max_len=8, tie_weights=False)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))  # head included
    assert product_parameters(model) == linear
    tied = tl.DecoderOnlyLM(40, d_model=32, num_heads=4, num_layers=3, d_ff=48, max_len=8)
    assert product_parameters(tied) == linear  # the tied head still multiplies every token
    # 6N per token plus attention: 12 n d per block
    assert flops_per_token(tied.config, 8) == 6 * linear + 12 * 8 * 32 * 3


# -- approach 3 ------------------------------------------------------------------------------------

def _design():
    n = np.geomspace(1e4, 1e6, 5)
    d = np.geomspace(1e5, 1e7, 5)
    return np.repeat(n, 5), np.tile(d, 5)


def _log_law(theta, n, d):
    a, b, e, alpha, beta = theta
    return np.log(np.exp(a) / n ** alpha + np.exp(b) / d ** beta + np.exp(e))


def _standard_errors(theta, n, d, sigma):
    """Gauss-Newton standard errors of theta = (log A, log B, log E, alpha, beta) for log-losses
    with Gaussian noise sigma: sqrt(diag(sigma^2 (J^T J)^-1)), J the Jacobian of log L."""
    eps = 1e-6
    jac = np.stack([(_log_law(theta + eps * np.eye(5)[i], n, d) - _log_law(theta - eps * np.eye(5)[i], n, d))
                    / (2 * eps) for i in range(5)], axis=1)  # (runs, 5)
    return np.sqrt(np.diag(sigma ** 2 * np.linalg.inv(jac.T @ jac)))


def test_fit_recovers_an_exact_law():
    n, d = _design()
    theta = np.array([math.log(40.0), math.log(300.0), math.log(2.0), 0.4, 0.35])
    fit = fit_scaling_law(n, d, np.exp(_log_law(theta, n, d)), grid=SMALL_GRID, starts=8)
    got = np.array([math.log(fit.A), math.log(fit.B), math.log(fit.E), fit.alpha, fit.beta])
    np.testing.assert_allclose(got, theta, atol=1e-4)
    assert fit.objective < 1e-12


@settings(max_examples=6, deadline=None, derandomize=True)
@given(alpha=st.floats(0.25, 0.6), beta=st.floats(0.25, 0.6), E=st.floats(1.0, 3.5),
       n_share=st.floats(0.1, 0.4), d_share=st.floats(0.1, 0.4), seed=st.integers(0, 2**31 - 1))
def test_fit_recovers_known_parameters_from_noisy_losses(alpha, beta, E, n_share, d_share, seed):
    """The law's two terms are n_share E and d_share E at the design's middle; the losses get 0.1%
    log-normal noise; every fitted parameter lies within 5 Gauss-Newton standard errors of the truth
    (Huber is less efficient than least squares at residuals near delta; 5 SE leaves room for it)."""
    n, d = _design()
    A = n_share * E * 1e5 ** alpha  # A / N^alpha = n_share E at N = 1e5
    B = d_share * E * 1e6 ** beta
    theta = np.array([math.log(A), math.log(B), math.log(E), alpha, beta])
    sigma = 1e-3
    noisy = np.exp(_log_law(theta, n, d) + np.random.default_rng(seed).normal(0, sigma, len(n)))
    fit = fit_scaling_law(n, d, noisy, grid=SMALL_GRID, starts=8)
    got = np.array([math.log(fit.A), math.log(fit.B), math.log(fit.E), fit.alpha, fit.beta])
    se = _standard_errors(theta, n, d, sigma)
    assert np.all(np.abs(got - theta) <= 5 * se), (got - theta) / se


def test_compute_optimal_is_the_constrained_minimum():
    from scipy.optimize import minimize_scalar
    fit = ScalingFit(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28, objective=0.0, starts=1)
    for compute in (1e18, 1e21, 1e24):
        best = minimize_scalar(lambda x: float(fit.predict(math.exp(x), compute / (6 * math.exp(x)))),
                               bounds=(math.log(1e3), math.log(1e14)), method="bounded", options={"xatol": 1e-9})
        n_opt, d_opt = fit.compute_optimal(compute)
        assert math.isclose(math.log(n_opt), best.x, abs_tol=1e-5)
        assert math.isclose(6 * n_opt * d_opt, compute, rel_tol=1e-12)
    n, _ = fit.compute_optimal(np.array([1e20, 1e22]))  # N_opt grows as C^(beta / (alpha + beta))
    assert math.isclose(math.log(n[1] / n[0]) / math.log(100), 0.28 / 0.62, rel_tol=1e-9)
    assert set(PUBLISHED["Hoffmann et al. 2022 (approach 3)"]) == {"E", "A", "B", "alpha", "beta"}


# -- approach 2 ------------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None, derandomize=True)
@given(c2=st.floats(0.01, 1.0), log_opt=st.floats(5.0, 15.0), c0=st.floats(1.0, 5.0), k=st.integers(3, 7))
def test_isoflop_minimum_of_an_exact_parabola(c2, log_opt, c0, k):
    n = np.exp(log_opt + np.linspace(-2.0, 1.5, k))
    loss = c0 + c2 * (np.log(n) - log_opt) ** 2
    vertex = isoflop_minimum(n, loss)
    assert math.isclose(math.log(vertex.n_opt), log_opt, abs_tol=1e-6)
    assert math.isclose(vertex.loss_min, c0, rel_tol=1e-8)
    np.testing.assert_allclose(vertex.loss_at(n), loss, rtol=1e-8)


def test_power_law_recovers_an_exact_one():
    x = np.array([1e18, 1e19, 1e20, 3e21])
    k, a = power_law(x, 0.1 * x ** 0.45)
    assert math.isclose(a, 0.45, rel_tol=1e-9) and math.isclose(k, 0.1, rel_tol=1e-6)


# -- bad input -------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, name", [
    (lambda: fit_scaling_law([1e4] * 5, [1e5] * 4, [3.0] * 5), "d"),
    (lambda: fit_scaling_law([1e4] * 5, [1e5] * 5, [3.0, 3.0, -1.0, 3.0, 3.0]), "loss"),
    (lambda: fit_scaling_law([1e4, 0, 1, 2, 3], [1e5] * 5, [3.0] * 5), "n"),
    (lambda: fit_scaling_law([1e4] * 4, [1e5] * 4, [3.0] * 4), "n"),
    (lambda: fit_scaling_law([1e4] * 5, [1e5] * 5, [3.0] * 5, delta=0), "delta"),
    (lambda: fit_scaling_law([1e4] * 5, [1e5] * 5, [3.0] * 5, starts=0), "starts"),
    (lambda: fit_scaling_law([1e4] * 5, [1e5] * 5, [3.0] * 5, grid={"alpha": [1]}), "grid"),
    (lambda: fit_scaling_law([1e4] * 5, [1e5] * 5, [3.0] * 5, grid={**SMALL_GRID, "e": []}), "grid['e']"),
    (lambda: isoflop_minimum([1e4, 1e4, 2e4], [3.0, 2.9, 3.0]), "n"),
    (lambda: isoflop_minimum([1e4, 2e4, 4e4], [3.0, 3.1]), "loss"),
    (lambda: isoflop_minimum([1e4, 2e4, 4e4], [3.0, 3.2, 3.0]), "loss"),  # opens downward
    (lambda: power_law([1.0, 1.0], [2.0, 3.0]), "x"),
    (lambda: training_flops(tl.ModelConfig(10), 0, 8), "tokens"),
    (lambda: flops_per_token(tl.ModelConfig(10), 0), "context"),
    (lambda: flops_per_token(tl.ModelConfig(10, num_kv_heads=2), 8), "num_kv_heads"),
    (lambda: flops_per_token(tl.ModelConfig(10, activation="swiglu"), 8), "activation"),
    (lambda: flops_per_token(tl.ModelConfig(10, ffn=False), 8), "ffn"),
    (lambda: ScalingFit(1, 1, 1, 0.3, 0.3, 0, 1).compute_optimal(-1.0), "compute"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name.replace("[", r"\[").replace("]", r"\]")):
        call()


def test_wrong_types():
    with pytest.raises(TypeError, match="model"):
        flops_per_token("gpt", 8)
    with pytest.raises(TypeError, match="n"):
        fit_scaling_law("12345", [1e5] * 5, [3.0] * 5)
