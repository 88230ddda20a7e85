"""Chapter 31 (Scaling laws) exercises."""
import numpy as np

from ..config import ModelConfig
from ..scaling import ScalingFit, isoflop_minimum, training_flops
from ._core import NotYet, exercise, to_number


@exercise("scaling.isoflop_vertex",
          hint="np.polyfit(np.log(n), loss, 2) gives (c2, c1, c0); the vertex of c2 x^2 + c1 x + c0 is at "
               "x = -c1 / (2 c2), and N = exp(x)")
def _check_vertex(answer):
    rng = np.random.default_rng(0)
    cases = []
    for k, center, width in [(5, 10.0, 0.3), (3, 8.0, 1.0), (7, 12.5, 0.05), (4, 9.0, 0.6)]:
        n = np.exp(center + np.linspace(-1.5, 1.2, k))
        loss = 3.0 + width * (np.log(n) - center - 0.2) ** 2 + rng.normal(0, 0.002, k)  # not exact: least squares
        cases.append((n, loss))
    for i, (n, loss) in enumerate(cases, 1):
        got = to_number(answer(n.copy(), loss.copy()), "your N_opt")
        want = isoflop_minimum(n, loss).n_opt
        if not np.isclose(got, want, rtol=1e-6):
            raise NotYet(f"budget #{i} ({len(n)} runs): your N_opt is too {'high' if got > want else 'low'}"
                         " (fit the parabola in log N, not in N)")
    return f"right on all {len(cases)} budgets, noisy ones included."


@exercise("scaling.training_flops",
          hint="N = layers * (4 d^2 + 2 d d_ff) + V d (every matrix a token meets, the head included); "
               "per token 6 N + 12 * context * d * layers; times the tokens")
def _check_flops(answer):
    cases = [(64, 32, 2, 128, 32, 1024), (100, 48, 3, 192, 16, 5000), (17, 16, 1, 40, 64, 64), (64, 128, 4, 512, 128, 10**6)]
    for vocab, d, layers, d_ff, context, tokens in cases:
        got = to_number(answer(vocab, d, layers, d_ff, context, tokens), "your FLOP count")
        config = ModelConfig(vocab, d_model=d, num_heads=1, num_layers=layers, d_ff=d_ff, max_len=context)
        want = training_flops(config, tokens, context)
        if not np.isclose(got, want, rtol=1e-9):
            raise NotYet(f"V={vocab}, d={d}, layers={layers}, d_ff={d_ff}, context={context}: your count is too "
                         f"{'high' if got > want else 'low'} ({got / want:.3f}x the right one)")
    return f"right for all {len(cases)} models (6N per token plus attention, the head included)."


@exercise("scaling.compute_optimal",
          hint="minimise E + A/N^alpha + B/D^beta with D = C / (6N): set the derivative in N to zero, "
               "alpha A / N^alpha = beta B / D^beta, and solve; N_opt = G (C/6)^(beta/(alpha+beta)), "
               "G = (alpha A / (beta B))^(1/(alpha+beta))")
def _check_optimal(answer):
    laws = [(1.69, 406.4, 410.7, 0.34, 0.28), (1.82, 482.01, 2085.43, 0.3478, 0.3658), (3.3, 20.0, 50.0, 0.5, 0.3)]
    budgets = [1e15, 1e19, 1e23]
    for law in laws:
        fit = ScalingFit(*law, objective=0.0, starts=1)
        for c in budgets:
            got = to_number(answer(*law, c), "your N_opt")
            want, _ = fit.compute_optimal(c)
            if not np.isclose(got, want, rtol=1e-6):
                raise NotYet(f"law E={law[0]}, alpha={law[3]}, beta={law[4]} at C={c:.0e}: your N_opt is too "
                             f"{'high' if got > want else 'low'}")
    return f"right for {len(laws)} laws at {len(budgets)} budgets each."
