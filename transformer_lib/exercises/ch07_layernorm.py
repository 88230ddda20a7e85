"""Chapter 7 (layer normalization) exercises.

Each checker runs the reader's function on several inputs, including ones built to expose the
usual slips: the unbiased variance (dividing by d - 1), statistics over the wrong axis, a
forgotten epsilon (a constant token has zero variance), padding counted in BatchNorm's
statistics, and the Post-LN order where Pre-LN was asked for. The expected values come from the
library's LayerNorm, RMSNorm and TokenBatchNorm (run on the real tokens alone); the library has
no Pre-LN function of a sub-layer, so that checker compares with stored numbers.
"""
import torch

from ..norms import LayerNorm, RMSNorm, TokenBatchNorm
from ._core import compare_arrays, compare_function, exercise, expected_values, module_with


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x1 = torch.randn(2, 5, 8, generator=g) * 3 + 1  # (B, L, D) shifted and scaled tokens
    x2 = torch.randn(3, 16, generator=g) + 200.0  # (N, D): rows far from 0, where E[x^2] - E[x]^2 cancels badly
    x3 = torch.randn(1, 4, 6, generator=g)
    x3[0, 0] = 2.5  # a constant token: zero variance, only epsilon keeps the division finite
    return [x1, x2, x3]


def _affine(d: int, seed: int):
    g = torch.Generator().manual_seed(100 + seed)
    return torch.randn(d, generator=g), torch.randn(d, generator=g)


def _layer_norm_cases():
    cases = []
    for k, x in enumerate(_inputs()):
        gamma, beta = _affine(x.shape[-1], k)
        cases.append((x, gamma, beta, 1e-5))
    return cases


@exercise("layernorm.layer_norm",
          hint="mean and biased variance over dim=-1 with keepdim=True; divide by sqrt(var + eps); "
               "then multiply by gamma and add beta")
def _check_layer_norm(answer):
    cases = _layer_norm_cases()
    with torch.no_grad():
        expected = [module_with(LayerNorm, x.shape[-1], eps=eps, weights={"weight": gamma, "bias": beta})(x)
                    for x, gamma, beta, eps in cases]
        return compare_function(answer, expected, cases, what="layer norm",
                                atol=1e-4, describe=lambda a: f"input of shape {tuple(a[0].shape)}")


@exercise("layernorm.rms_norm",
          hint="no mean subtraction and no beta: divide x by sqrt(mean(x**2) + eps) over the last dimension, "
               "then multiply by gamma")
def _check_rms_norm(answer):
    cases = [(x, _affine(x.shape[-1], k)[0], 1e-6) for k, x in enumerate(_inputs(1))]
    with torch.no_grad():
        expected = [module_with(RMSNorm, x.shape[-1], eps=eps, weights={"weight": gamma})(x) for x, gamma, eps in cases]
        return compare_function(answer, expected, cases, what="RMS norm", atol=1e-4,
                                describe=lambda a: f"input of shape {tuple(a[0].shape)}")


def _masked_cases():
    g = torch.Generator().manual_seed(7)
    cases = []
    for B, L, D, lengths in ((2, 5, 4, (5, 2)), (3, 6, 8, (6, 1, 3)), (1, 4, 3, (4,))):
        x = torch.randn(B, L, D, generator=g) * 2 + (0.5 if B > 1 else 300.0)  # one batch far from 0
        real = torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]  # (B, L) True = real token
        x = x * real[..., None]  # padding embedded as zero vectors, as a PAD embedding often is
        cases.append((x, real, 1e-5))
    return cases


@exercise("layernorm.masked_batch_norm",
          hint="select the real tokens with x[real] (shape (N, D)), take mean and biased variance over dim 0, "
               "normalize every position with them, then zero the padding positions")
def _check_masked_batch_norm(answer):
    for n, (x, real, eps) in enumerate(_masked_cases(), start=1):
        got = answer(x.clone(), real.clone(), eps)
        # the library's TokenBatchNorm (training mode: the batch's own statistics, gamma 1, beta 0)
        # on a batch of the real tokens alone; padding positions stay 0
        with torch.no_grad():
            normed = TokenBatchNorm(x.shape[-1], eps=eps).train()(x[real][None])  # (1, N_real, D)
        expected = torch.zeros_like(x)
        expected[real] = normed[0]
        compare_arrays(got, expected,
                       what=f"masked batch norm for test batch #{n} (lengths {real.sum(1).tolist()})", atol=1e-4)
    return "matches on all 3 padded batches: padding no longer moves the statistics."


class _Doubler(torch.nn.Module):
    """A stand-in sub-layer whose output is easy to tell apart from its input."""

    def __init__(self, d, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.weight = torch.randn(d, d, generator=g) / d ** 0.5

    def forward(self, x):
        return torch.tanh(x @ self.weight) * 2


def _pre_ln_cases() -> list[tuple]:
    """(x, sublayer, norm) triples: a LayerNorm with its own gamma and beta, a sub-layer unlike the identity."""
    g = torch.Generator().manual_seed(3)
    cases = []
    for k, (B, L, D) in enumerate(((2, 3, 8), (1, 5, 16))):
        x = torch.randn(B, L, D, generator=g) * 4 + 1
        norm = LayerNorm(D)
        with torch.no_grad():
            norm.weight.copy_(torch.rand(D, generator=g) + 0.5)
            norm.bias.copy_(torch.randn(D, generator=g) * 0.1)
        cases.append((x, _Doubler(D, k), norm))
    return cases


@exercise("layernorm.pre_ln",
          hint="Pre-LN normalizes the sub-layer's input and leaves the residual path untouched: "
               "x + sublayer(norm(x))")
def _check_pre_ln(answer):
    with torch.no_grad():
        return compare_function(answer, expected_values("layernorm.pre_ln"), _pre_ln_cases(),
                                what="Pre-LN residual block", describe=lambda a: f"input of shape {tuple(a[0].shape)}")
