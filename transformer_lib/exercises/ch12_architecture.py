"""Checkers for chapter 12, the Transformer architecture."""
import torch

from ..cost import count_parameters
from ..layers import TransformerBlock
from ..model import Seq2SeqTransformer
from ..sampling import generate
from ._core import compare_function, compare_value, exercise, seed_cpu, to_int


def _random_layers():
    seed_cpu(0)  # the init draws from the global CPU generator (restored after every check)
    layers = [TransformerBlock(d, h, f).eval() for d, h, f in ((8, 2, 16), (16, 4, 24), (32, 4, 64))]
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # norms that differ from each other and from the identity, so a swapped one shows
        for layer in layers:
            for norm in (layer.norm1, layer.norm2):
                norm.weight.copy_(1 + 0.5 * torch.randn(norm.weight.shape, generator=g))
                norm.bias.copy_(0.3 * torch.randn(norm.bias.shape, generator=g))
    return layers


@exercise("architecture.encoder_layer",
          hint="each sub-layer is z = LayerNorm(x + Sublayer(x)); "
          "self_attn returns (output, weights)")
def _check_encoder_layer(answer):
    g = torch.Generator().manual_seed(1)
    cases = []
    for layer in _random_layers():
        x = torch.randn(2, 5, layer.self_attn.d_model, generator=g)
        cases.append((layer, x))
    with torch.no_grad():
        return compare_function(answer, lambda layer, x: layer(x), cases, what="encoder layer output",
                                describe=lambda a: f"d_model={a[0].self_attn.d_model}")


@exercise("architecture.layer_parameters",
          hint="four d x d projections with biases, two FFN matrices "
          "with biases, and two LayerNorms with a scale and a shift each")
def _check_parameters(answer):
    for d, f in ((8, 32), (64, 256), (512, 2048), (30, 7)):
        expected = count_parameters(TransformerBlock(d, 2, f))
        got = to_int(answer(d, f), f"your count for d_model={d}, d_ff={f}")
        compare_value(got, expected, f"for d_model={d}, d_ff={f} your count", rtol=0)
    return "matches count_parameters on all 4 sizes."


@exercise("architecture.greedy_decode",
          hint="start from a column of BOS, decode, append the argmax "
          "of the last position, repeat; drop the BOS at the end")
def _check_greedy(answer):
    seed_cpu(0)  # the model's init draws from the global CPU generator (restored after every check)
    model = Seq2SeqTransformer(11, 11, d_model=16, num_heads=2, num_encoder_layers=1,
                               num_decoder_layers=1, d_ff=32).eval()
    g = torch.Generator().manual_seed(2)
    cases = [(model, torch.randint(3, 11, (b, n), generator=g), 1, m) for b, n, m in ((1, 4, 4), (3, 6, 5))]
    with torch.no_grad():
        return compare_function(answer, lambda m, s, b, n: generate(m.conditioned_on(s), torch.full((len(s), 1), b), n)[:, 1:], cases,
                                what="decoded tokens", atol=0)
