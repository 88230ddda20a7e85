"""Chapter 7 (layer normalization) exercises.

Each checker runs the reader's function on several inputs, including ones built to expose the
usual slips: the unbiased variance (dividing by d - 1), statistics over the wrong axis, a
forgotten epsilon (a constant token has zero variance), padding counted in BatchNorm's
statistics, and the Post-LN order where Pre-LN was asked for.
"""
import numpy as np
import torch
import torch.nn.functional as F

from ..norms import LayerNorm, RMSNorm
from ._core import NotYet, compare_arrays, compare_function, exercise


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x1 = torch.randn(2, 5, 8, generator=g) * 3 + 1  # (B, L, D) shifted and scaled tokens
    x2 = torch.randn(3, 16, generator=g)  # (N, D): plain rows
    x3 = torch.randn(1, 4, 6, generator=g)
    x3[0, 0] = 2.5  # a constant token: zero variance, only epsilon keeps the division finite
    return [x1, x2, x3]


def _affine(d: int, seed: int):
    g = torch.Generator().manual_seed(100 + seed)
    return torch.randn(d, generator=g), torch.randn(d, generator=g)


def _reference_layer_norm(x, gamma, beta, eps):
    ln = LayerNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        ln.weight.copy_(gamma)
        ln.bias.copy_(beta)
        return ln(x)


def _layer_norm_cases():
    cases = []
    for k, x in enumerate(_inputs()):
        gamma, beta = _affine(x.shape[-1], k)
        cases.append((x, gamma, beta, 1e-5))
    return cases


def _layer_norm_numpy(x, gamma, beta, eps):
    """A right answer in NumPy (float64)."""
    x = x.double().numpy()
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # biased: divide by d
    return (x - mean) / np.sqrt(var + eps) * gamma.numpy() + beta.numpy()


@exercise("layernorm.layer_norm",
          hint="mean and biased variance over dim=-1 with keepdim=True; divide by sqrt(var + eps); "
               "then multiply by gamma and add beta",
          wrong_answers=lambda: [
              # unbiased variance (divides by d - 1)
              lambda x, g, b, eps: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) * g + b,
              # statistics over the batch axis: that is BatchNorm
              lambda x, g, b, eps: (x - x.mean(0, keepdim=True)) / torch.sqrt(
                  x.var(0, keepdim=True, unbiased=False) + eps) * g + b,
              # no epsilon: a constant token divides 0 by 0
              lambda x, g, b, eps: (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True, unbiased=False) * g + b,
              # forgets beta
              lambda x, g, b, eps: _reference_layer_norm(x, g, torch.zeros_like(b), eps),
              # gamma and beta swapped
              lambda x, g, b, eps: _reference_layer_norm(x, b, g, eps),
              # statistics over the last two axes (a whole sequence per mean)
              lambda x, g, b, eps: (x - x.mean((-2, -1), keepdim=True)) / torch.sqrt(
                  x.var((-2, -1), keepdim=True, unbiased=False) + eps) * g + b,
          ],
          solution=lambda: _reference_layer_norm,
          alternative_answers=lambda: [
              lambda x, g, b, eps: F.layer_norm(x, x.shape[-1:], g, b, eps),  # torch's functional form
              _layer_norm_numpy,
          ])
def _check_layer_norm(answer):
    with torch.no_grad():
        return compare_function(answer, _reference_layer_norm, _layer_norm_cases(), what="layer norm",
                                atol=1e-4, describe=lambda a: f"input of shape {tuple(a[0].shape)}")


def _reference_rms_norm(x, gamma, eps):
    rms = RMSNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        rms.weight.copy_(gamma)
        return rms(x)


@exercise("layernorm.rms_norm",
          hint="no mean subtraction and no beta: divide x by sqrt(mean(x**2) + eps) over the last dimension, "
               "then multiply by gamma",
          wrong_answers=lambda: [
              # that is LayerNorm without beta, not RMSNorm
              lambda x, g, eps: (x - x.mean(-1, keepdim=True)) / torch.sqrt(
                  x.var(-1, keepdim=True, unbiased=False) + eps) * g,
              # forgets the square root
              lambda x, g, eps: x / (x.pow(2).mean(-1, keepdim=True) + eps) * g,
              # the root of the sum, not of the mean
              lambda x, g, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * g,
              # the mean square over the batch axis
              lambda x, g, eps: x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * g,
              # the mean absolute value instead of the root mean square
              lambda x, g, eps: x / (x.abs().mean(-1, keepdim=True) + eps) * g,
          ],
          solution=lambda: _reference_rms_norm,
          alternative_answers=lambda: [
              lambda x, g, eps: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g,  # rsqrt
              lambda x, g, eps: x / torch.sqrt(x.norm(dim=-1, keepdim=True) ** 2 / x.shape[-1] + eps) * g,  # via the norm
          ])
def _check_rms_norm(answer):
    cases = [(x, _affine(x.shape[-1], k)[0], 1e-6) for k, x in enumerate(_inputs(1))]
    with torch.no_grad():
        return compare_function(answer, _reference_rms_norm, cases, what="RMS norm", atol=1e-4,
                                describe=lambda a: f"input of shape {tuple(a[0].shape)}")


def _reference_masked_batch_norm(x, real, eps):
    """Per-feature statistics over the real tokens only; padding positions come out as 0."""
    tokens = x[real]  # (N_real, D): padding dropped
    mean = tokens.mean(0)  # (D,)
    var = tokens.var(0, unbiased=False)  # (D,)
    out = (x - mean) / torch.sqrt(var + eps)  # (B, L, D)
    return out * real[..., None]


def _masked_cases():
    g = torch.Generator().manual_seed(7)
    cases = []
    for B, L, D, lengths in ((2, 5, 4, (5, 2)), (3, 6, 8, (6, 1, 3)), (1, 4, 3, (4,))):
        x = torch.randn(B, L, D, generator=g) * 2 + 0.5
        real = torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]  # (B, L) True = real token
        x = x * real[..., None]  # padding embedded as zero vectors, as a PAD embedding often is
        cases.append((x, real, 1e-5))
    return cases


def _masked_per_sequence(x, real, eps):  # a wrong answer: one mean and variance per sequence
    m = real[..., None].to(x.dtype)  # (B, L, 1)
    count = m.sum(1, keepdim=True)  # (B, 1, 1)
    mean = (x * m).sum(1, keepdim=True) / count
    var = (((x - mean) * m) ** 2).sum(1, keepdim=True) / count
    return (x - mean) / torch.sqrt(var + eps) * m


def _masked_by_weights(x, real, eps):
    """A right answer without boolean indexing: the mask as 0/1 weights in the sums."""
    m = real[..., None].to(x.dtype)  # (B, L, 1)
    count = m.sum()  # number of real tokens
    mean = (x * m).sum(dim=(0, 1)) / count  # (D,)
    var = (((x - mean) * m) ** 2).sum(dim=(0, 1)) / count  # (D,) biased
    return (x - mean) / torch.sqrt(var + eps) * m


def _masked_numpy_loop(x, real, eps):
    """A right answer in NumPy, collecting the real tokens in a loop."""
    xs, keep = x.double().numpy(), real.numpy()
    tokens = np.array([xs[b, t] for b in range(xs.shape[0]) for t in range(xs.shape[1]) if keep[b, t]])
    out = (xs - tokens.mean(0)) / np.sqrt(tokens.var(0) + eps)  # np.var is the biased variance
    return out * keep[..., None]


@exercise("layernorm.masked_batch_norm",
          hint="select the real tokens with x[real] (shape (N, D)), take mean and biased variance over dim 0, "
               "normalize every position with them, then zero the padding positions",
          wrong_answers=lambda: [
              # padding counted in the statistics: the bug the chapter measures
              lambda x, real, eps: ((x - x.reshape(-1, x.shape[-1]).mean(0)) / torch.sqrt(
                  x.reshape(-1, x.shape[-1]).var(0, unbiased=False) + eps)) * real[..., None],
              # padding not zeroed
              lambda x, real, eps: (x - x[real].mean(0)) / torch.sqrt(x[real].var(0, unbiased=False) + eps),
              # statistics per token (that is LayerNorm)
              lambda x, real, eps: ((x - x.mean(-1, keepdim=True)) / torch.sqrt(
                  x.var(-1, keepdim=True, unbiased=False) + eps)) * real[..., None],
              # unbiased variance of the real tokens (divides by N - 1)
              lambda x, real, eps: (x - x[real].mean(0)) / torch.sqrt(x[real].var(0) + eps) * real[..., None],
              # statistics per sequence instead of over the whole batch
              _masked_per_sequence,
          ],
          solution=lambda: _reference_masked_batch_norm,
          alternative_answers=lambda: [_masked_by_weights, _masked_numpy_loop])
def _check_masked_batch_norm(answer):
    if not callable(answer):
        raise NotYet(f"expected a function, got {type(answer).__name__}")
    for n, (x, real, eps) in enumerate(_masked_cases(), start=1):
        got = answer(x.clone(), real.clone(), eps)
        compare_arrays(got, _reference_masked_batch_norm(x, real, eps),
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


def _pre_ln_reference(x, sublayer, norm):
    return x + sublayer(norm(x))


def _pre_ln_by_hand(x, sublayer, norm):
    """A right answer that writes the LayerNorm out from the module's own gamma, beta and eps."""
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    normed = (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias
    return x + sublayer(normed)


@exercise("layernorm.pre_ln",
          hint="Pre-LN normalizes the sub-layer's input and leaves the residual path untouched: "
               "x + sublayer(norm(x))",
          wrong_answers=lambda: [
              lambda x, sublayer, norm: norm(x + sublayer(x)),  # Post-LN, the paper's order
              lambda x, sublayer, norm: norm(x + sublayer(norm(x))),  # normalizes the residual stream too
              lambda x, sublayer, norm: sublayer(norm(x)),  # drops the residual
              lambda x, sublayer, norm: x + norm(sublayer(x)),  # normalizes the sub-layer's output
              lambda x, sublayer, norm: x + sublayer(x),  # no normalization at all
          ],
          solution=lambda: _pre_ln_reference,
          alternative_answers=lambda: [
              lambda x, sublayer, norm: torch.add(sublayer(norm(x)), x),  # the two terms the other way round
              _pre_ln_by_hand,
          ])
def _check_pre_ln(answer):
    g = torch.Generator().manual_seed(3)
    cases = []
    for k, (B, L, D) in enumerate(((2, 3, 8), (1, 5, 16))):
        x = torch.randn(B, L, D, generator=g) * 4 + 1
        norm = LayerNorm(D)
        with torch.no_grad():
            norm.weight.copy_(torch.rand(D, generator=g) + 0.5)
            norm.bias.copy_(torch.randn(D, generator=g) * 0.1)
        cases.append((x, _Doubler(D, k), norm))
    with torch.no_grad():
        return compare_function(answer, _pre_ln_reference, cases, what="Pre-LN residual block",
                                describe=lambda a: f"input of shape {tuple(a[0].shape)}")
