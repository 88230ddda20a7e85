"""Answers for the checkers of transformer_lib/exercises/ch12_architecture.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import numpy as np
import torch

from transformer_lib.cost import count_parameters
from transformer_lib.sampling import generate
from transformer_lib.layers import TransformerBlock


def greedy_decode(model, src, bos_id, max_len):  # the library's greedy decoding, BOS dropped
    return generate(model.conditioned_on(src), torch.full((len(src), 1), bos_id), max_len)[:, 1:]


def _post_ln_wrong_order(layer, x):  # Pre-LN instead of the paper's Post-LN
    x = x + layer.self_attn(layer.norm1(x))[0]
    return x + layer.ffn(layer.norm2(x))


def _no_residual(layer, x):
    x = layer.norm1(layer.self_attn(x)[0])
    return layer.norm2(layer.ffn(x))


def _ffn_without_residual(layer, x):
    x = layer.norm1(x + layer.self_attn(x)[0])
    return layer.norm2(layer.ffn(x))


def _norm_inside_residual(layer, x):  # x + LayerNorm(Sublayer(x)): the norm on the branch only
    x = x + layer.norm1(layer.self_attn(x)[0])
    return x + layer.norm2(layer.ffn(x))


def _norms_swapped(layer, x):
    x = layer.norm2(x + layer.self_attn(x)[0])
    return layer.norm1(x + layer.ffn(x))


def _post_ln_by_hand(layer, x):
    """A right answer: the attention called with explicit (query, key, value) and the norms written out."""
    def norm(module, t):
        mean, var = t.mean(-1, keepdim=True), t.var(-1, keepdim=True, unbiased=False)
        return (t - mean) / torch.sqrt(var + module.eps) * module.weight + module.bias
    attended, _ = layer.self_attn(x, x, x)
    x = norm(layer.norm1, x + attended)
    return norm(layer.norm2, x + layer.ffn.linear2(torch.relu(layer.ffn.linear1(x))))


def _greedy_no_feedback(model, src, bos_id, max_len):
    memory = model.encode(src)
    ys = torch.full((src.shape[0], max_len), bos_id, dtype=torch.long)
    return model.decode(ys, memory).argmax(-1)  # predicts every position from BOS-only input


def _greedy_keeps_bos(model, src, bos_id, max_len):
    ys = greedy_decode(model, src, bos_id, max_len)
    return torch.cat([torch.full_like(ys[:, :1], bos_id), ys], dim=1)  # (B, max_len + 1): BOS not dropped


def _greedy_first_position(model, src, bos_id, max_len):  # always reads the logits of position 0
    memory = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat([ys, model.decode(ys, memory)[:, 0].argmax(-1, keepdim=True)], dim=1)
    return ys[:, 1:]


def _greedy_loop(model, src, bos_id, max_len):
    """A right answer: the loop written out, sequence by sequence, tokens kept in a Python list."""
    rows = []
    for b in range(src.shape[0]):
        memory = model.encode(src[b:b + 1])  # (1, n_src, d)
        tokens = [bos_id]
        for _ in range(max_len):
            logits = model.decode(torch.tensor([tokens]), memory)  # (1, t, V)
            tokens.append(int(logits[0, -1].argmax()))
        rows.append(tokens[1:])
    return rows  # a list of lists: (B, max_len)


ANSWERS = {
    'architecture.encoder_layer': {
        'solution': lambda: lambda layer, x: layer(x),
        'alternatives': lambda: [_post_ln_by_hand,
                                 lambda layer, x: (lambda z: layer.norm2(z + layer.ffn(z)))(
                                     layer.norm1(x + layer.self_attn(x)[0])).numpy()],
        'wrong': lambda: [_post_ln_wrong_order, _no_residual, _ffn_without_residual, _norm_inside_residual,
                          _norms_swapped],
    },
    'architecture.layer_parameters': {
        'solution': lambda: lambda d, f: count_parameters(TransformerBlock(d, 2, f)),
        'alternatives': lambda: [
            lambda d, f: np.int64(4 * d * d + 4 * d) + (d * f + f) + (f * d + d) + 2 * (2 * d),  # NumPy
            lambda d, f: float(sum(n_in * n_out + n_out for n_in, n_out in  # every Linear, then the norms
                                   ((d, d),) * 4 + ((d, f), (f, d))) + 4 * d),
        ],
        'wrong': lambda: [lambda d, f: 4 * d * d + 2 * d * f,  # no biases, no norms
                          lambda d, f: 4 * (d * d + d) + 2 * d * f + f + d,  # no norms
                          lambda d, f: 4 * (d * d + d) + 2 * d * f + f + d + 2 * d,  # one norm
                          lambda d, f: 4 * (d * d + d) + 2 * d * f + 4 * d],  # no FFN biases
    },
    'architecture.greedy_decode': {
        'solution': lambda: greedy_decode,
        'alternatives': lambda: [_greedy_loop],
        'wrong': lambda: [_greedy_no_feedback,
                          lambda model, src, bos_id, max_len: greedy_decode(model, src, bos_id, max_len + 1),
                          _greedy_keeps_bos, _greedy_first_position],
    },
}
