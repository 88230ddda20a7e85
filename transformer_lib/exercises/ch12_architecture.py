"""Checkers for chapter 12, the Transformer architecture."""
import torch

from ..cost import count_parameters
from ..layers import EncoderLayer
from ..model import Seq2SeqTransformer
from ._core import NotYet, compare_function, exercise


def _random_layers():
    torch.manual_seed(0)
    return [EncoderLayer(d, h, f).eval() for d, h, f in ((8, 2, 16), (16, 4, 24), (32, 4, 64))]


def _post_ln_wrong_order(layer, x):  # Pre-LN instead of the paper's Post-LN
    x = x + layer.self_attn(layer.norm1(x))[0]
    return x + layer.ffn(layer.norm2(x))


def _no_residual(layer, x):
    x = layer.norm1(layer.self_attn(x)[0])
    return layer.norm2(layer.ffn(x))


@exercise("architecture.encoder_layer", hint="each sub-layer is z = LayerNorm(x + Sublayer(x)); "
          "self_attn returns (output, weights)", wrong_answers=lambda: [_post_ln_wrong_order, _no_residual])
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
                                 lambda d, f: 4 * (d * d + d) + 2 * d * f + f + d])  # no norms
def _check_parameters(answer):
    for d, f in ((8, 32), (64, 256), (512, 2048), (30, 7)):
        expected = count_parameters(EncoderLayer(d, 2, f))
        got = answer(d, f)
        if got != expected:
            raise NotYet(f"for d_model={d}, d_ff={f} your count is too {'high' if got > expected else 'low'}")
    return "matches count_parameters on all 4 sizes."


def _greedy_no_feedback(model, src, bos_id, max_len):
    memory = model.encode(src)
    ys = torch.full((src.shape[0], max_len), bos_id, dtype=torch.long)
    return model.decode(ys, memory).argmax(-1)  # predicts every position from BOS-only input


@exercise("architecture.greedy_decode", hint="start from a column of BOS, decode, append the argmax "
          "of the last position, repeat; drop the BOS at the end",
          wrong_answers=lambda: [_greedy_no_feedback,
                                 lambda model, src, bos_id, max_len: model.greedy_decode(src, bos_id, max_len + 1)])
def _check_greedy(answer):
    torch.manual_seed(0)
    model = Seq2SeqTransformer(11, 11, d_model=16, num_heads=2, num_encoder_layers=1,
                               num_decoder_layers=1, d_ff=32).eval()
    g = torch.Generator().manual_seed(2)
    cases = [(model, torch.randint(3, 11, (b, n), generator=g), 1, m) for b, n, m in ((1, 4, 4), (3, 6, 5))]
    with torch.no_grad():
        return compare_function(answer, lambda m, s, b, n: m.greedy_decode(s, b, n), cases,
                                what="decoded tokens", atol=0)
