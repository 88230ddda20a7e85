"""Answers for the checkers of transformer_lib/exercises/ch07_layernorm.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import numpy as np
import torch
import torch.nn.functional as F

from transformer_lib.norms import LayerNorm, RMSNorm


def _reference_layer_norm(x, gamma, beta, eps):
    ln = LayerNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        ln.weight.copy_(gamma)
        ln.bias.copy_(beta)
        return ln(x)


def _reference_rms_norm(x, gamma, eps):
    rms = RMSNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        rms.weight.copy_(gamma)
        return rms(x)


def _reference_masked_batch_norm(x, real, eps):
    """Per-feature statistics over the real tokens only; padding positions come out as 0."""
    tokens = x[real]  # (N_real, D): padding dropped
    mean = tokens.mean(0)  # (D,)
    var = tokens.var(0, unbiased=False)  # (D,)
    out = (x - mean) / torch.sqrt(var + eps)  # (B, L, D)
    return out * real[..., None]


def _pre_ln_reference(x, sublayer, norm):
    return x + sublayer(norm(x))


def _layer_norm_numpy(x, gamma, beta, eps):
    """A right answer in NumPy (float64)."""
    x = x.double().numpy()
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # biased: divide by d
    return (x - mean) / np.sqrt(var + eps) * gamma.numpy() + beta.numpy()


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


def _pre_ln_by_hand(x, sublayer, norm):
    """A right answer that writes the LayerNorm out from the module's own gamma, beta and eps."""
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    normed = (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias
    return x + sublayer(normed)


ANSWERS = {
    'layernorm.layer_norm': {
        'solution': lambda: _reference_layer_norm,
        'alternatives': lambda: [
            lambda x, g, b, eps: F.layer_norm(x, x.shape[-1:], g, b, eps),  # torch's functional form
            _layer_norm_numpy,
        ],
        'wrong': lambda: [
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
            # the variance as E[x^2] - E[x]^2: equal in exact arithmetic, but it cancels away in
            # float32 when the mean is large next to the spread
            lambda x, g, b, eps: (x - x.mean(-1, keepdim=True)) / torch.sqrt(
                x.pow(2).mean(-1, keepdim=True) - x.mean(-1, keepdim=True) ** 2 + eps) * g + b,
        ],
    },
    'layernorm.rms_norm': {
        'solution': lambda: _reference_rms_norm,
        'alternatives': lambda: [
            lambda x, g, eps: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g,  # rsqrt
            lambda x, g, eps: x / torch.sqrt(x.norm(dim=-1, keepdim=True) ** 2 / x.shape[-1] + eps) * g,  # via the norm
        ],
        'wrong': lambda: [
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
    },
    'layernorm.masked_batch_norm': {
        'solution': lambda: _reference_masked_batch_norm,
        'alternatives': lambda: [_masked_by_weights, _masked_numpy_loop],
        'wrong': lambda: [
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
            # the variance as E[x^2] - E[x]^2 over the real tokens: cancels in float32 far from 0
            lambda x, real, eps: (x - x[real].mean(0)) / torch.sqrt(
                x[real].pow(2).mean(0) - x[real].mean(0) ** 2 + eps) * real[..., None],
        ],
    },
    'layernorm.pre_ln': {
        'solution': lambda: _pre_ln_reference,
        'alternatives': lambda: [
            lambda x, sublayer, norm: torch.add(sublayer(norm(x)), x),  # the two terms the other way round
            _pre_ln_by_hand,
        ],
        'wrong': lambda: [
            lambda x, sublayer, norm: norm(x + sublayer(x)),  # Post-LN, the paper's order
            lambda x, sublayer, norm: norm(x + sublayer(norm(x))),  # normalizes the residual stream too
            lambda x, sublayer, norm: sublayer(norm(x)),  # drops the residual
            lambda x, sublayer, norm: x + norm(sublayer(x)),  # normalizes the sub-layer's output
            lambda x, sublayer, norm: x + sublayer(x),  # no normalization at all
        ],
    },
}
