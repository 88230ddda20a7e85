"""Checkers for chapter 12, the Transformer architecture."""
import numpy as np
import torch

from ..cost import count_parameters
from ..layers import EncoderLayer
from ..model import Seq2SeqTransformer
from ._core import NotYet, compare_function, exercise, seed_cpu, to_int


def _random_layers():
    seed_cpu(0)  # the init draws from the global CPU generator (restored after every check)
    layers = [EncoderLayer(d, h, f).eval() for d, h, f in ((8, 2, 16), (16, 4, 24), (32, 4, 64))]
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # norms that differ from each other and from the identity, so a swapped one shows
        for layer in layers:
            for norm in (layer.norm1, layer.norm2):
                norm.weight.copy_(1 + 0.5 * torch.randn(norm.weight.shape, generator=g))
                norm.bias.copy_(0.3 * torch.randn(norm.bias.shape, generator=g))
    return layers


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


@exercise("architecture.encoder_layer", hint="each sub-layer is z = LayerNorm(x + Sublayer(x)); "
          "self_attn returns (output, weights)",
          wrong_answers=lambda: [_post_ln_wrong_order, _no_residual, _ffn_without_residual, _norm_inside_residual,
                                 _norms_swapped],
          solution=lambda: lambda layer, x: layer(x),
          alternative_answers=lambda: [_post_ln_by_hand,
                                       lambda layer, x: (lambda z: layer.norm2(z + layer.ffn(z)))(
                                           layer.norm1(x + layer.self_attn(x)[0])).numpy()])
def _check_encoder_layer(answer):
    g = torch.Generator().manual_seed(1)
    cases = []
    for layer in _random_layers():
        x = torch.randn(2, 5, layer.self_attn.d_model, generator=g)
        cases.append((layer, x))
    with torch.no_grad():
        return compare_function(answer, lambda layer, x: layer(x), cases, what="encoder layer output",
                                describe=lambda a: f"d_model={a[0].self_attn.d_model}")


@exercise("architecture.layer_parameters", hint="four d x d projections with biases, two FFN matrices "
          "with biases, and two LayerNorms with a scale and a shift each",
          wrong_answers=lambda: [lambda d, f: 4 * d * d + 2 * d * f,  # no biases, no norms
                                 lambda d, f: 4 * (d * d + d) + 2 * d * f + f + d,  # no norms
                                 lambda d, f: 4 * (d * d + d) + 2 * d * f + f + d + 2 * d,  # one norm
                                 lambda d, f: 4 * (d * d + d) + 2 * d * f + 4 * d],  # no FFN biases
          solution=lambda: lambda d, f: count_parameters(EncoderLayer(d, 2, f)),
          alternative_answers=lambda: [
              lambda d, f: np.int64(4 * d * d + 4 * d) + (d * f + f) + (f * d + d) + 2 * (2 * d),  # NumPy
              lambda d, f: float(sum(n_in * n_out + n_out for n_in, n_out in  # every Linear, then the norms
                                     ((d, d),) * 4 + ((d, f), (f, d))) + 4 * d),
          ])
def _check_parameters(answer):
    for d, f in ((8, 32), (64, 256), (512, 2048), (30, 7)):
        expected = count_parameters(EncoderLayer(d, 2, f))
        got = to_int(answer(d, f), f"your count for d_model={d}, d_ff={f}")
        if got != expected:
            raise NotYet(f"for d_model={d}, d_ff={f} your count is too {'high' if got > expected else 'low'}")
    return "matches count_parameters on all 4 sizes."


def _greedy_no_feedback(model, src, bos_id, max_len):
    memory = model.encode(src)
    ys = torch.full((src.shape[0], max_len), bos_id, dtype=torch.long)
    return model.decode(ys, memory).argmax(-1)  # predicts every position from BOS-only input


def _greedy_keeps_bos(model, src, bos_id, max_len):
    ys = model.greedy_decode(src, bos_id, max_len)
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


@exercise("architecture.greedy_decode", hint="start from a column of BOS, decode, append the argmax "
          "of the last position, repeat; drop the BOS at the end",
          wrong_answers=lambda: [_greedy_no_feedback,
                                 lambda model, src, bos_id, max_len: model.greedy_decode(src, bos_id, max_len + 1),
                                 _greedy_keeps_bos, _greedy_first_position],
          solution=lambda: lambda model, src, bos_id, max_len: model.greedy_decode(src, bos_id, max_len),
          alternative_answers=lambda: [_greedy_loop])
def _check_greedy(answer):
    seed_cpu(0)  # the model's init draws from the global CPU generator (restored after every check)
    model = Seq2SeqTransformer(11, 11, d_model=16, num_heads=2, num_encoder_layers=1,
                               num_decoder_layers=1, d_ff=32).eval()
    g = torch.Generator().manual_seed(2)
    cases = [(model, torch.randint(3, 11, (b, n), generator=g), 1, m) for b, n, m in ((1, 4, 4), (3, 6, 5))]
    with torch.no_grad():
        return compare_function(answer, lambda m, s, b, n: m.greedy_decode(s, b, n), cases,
                                what="decoded tokens", atol=0)
