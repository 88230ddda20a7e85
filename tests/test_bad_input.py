"""A sweep of the public constructors and functions with the inputs a new user gets wrong: zero or
negative sizes, probabilities outside [0, 1], non-integer sizes, wrong dtypes, strings that are not
valid Unicode. Each must raise a ValueError whose message names the argument, never a RuntimeError
or TypeError from deep inside torch, and never be silently accepted."""
import pytest
import torch

import transformer_lib as tl

SIZES = [0, -16, 2.5, True]


def _cases():
    cases = []
    for bad in SIZES:
        cases += [
            (f"MultiHeadAttention(d_model={bad!r})", lambda b=bad: tl.MultiHeadAttention(b, 4), "d_model"),
            (f"MultiHeadAttention(num_heads={bad!r})", lambda b=bad: tl.MultiHeadAttention(16, b), "num_heads"),
            (f"EncoderLayer(d_ff={bad!r})", lambda b=bad: tl.EncoderLayer(16, 4, b), "d_ff"),
            (f"DecoderLayer(d_model={bad!r})", lambda b=bad: tl.DecoderLayer(b, 4, 32), "d_model"),
            (f"FeedForward(d_model={bad!r})", lambda b=bad: tl.FeedForward(b, 32), "d_model"),
            (f"LayerNorm(d_model={bad!r})", lambda b=bad: tl.LayerNorm(b), "d_model"),
            (f"RMSNorm(d_model={bad!r})", lambda b=bad: tl.RMSNorm(b), "d_model"),
            (f"sinusoidal_encoding(length={bad!r})", lambda b=bad: tl.sinusoidal_encoding(b, 8), "length"),
            (f"causal_mask({bad!r})", lambda b=bad: tl.causal_mask(b), "L"),
            (f"DecoderOnlyLM(vocab_size={bad!r})", lambda b=bad: tl.DecoderOnlyLM(b), "vocab_size"),
            (f"ElmanRNN(hidden_size={bad!r})", lambda b=bad: tl.ElmanRNN(3, b), "hidden_size"),
        ]
    for p in [1.5, -0.1, float("nan")]:
        cases += [
            (f"MultiHeadAttention(dropout={p})", lambda p=p: tl.MultiHeadAttention(16, 4, dropout=p), "dropout"),
            (f"EncoderLayer(dropout={p})", lambda p=p: tl.EncoderLayer(16, 4, 32, dropout=p), "dropout"),
            (f"DecoderLayer(dropout={p})", lambda p=p: tl.DecoderLayer(16, 4, 32, dropout=p), "dropout"),
            (f"FeedForward(dropout={p})", lambda p=p: tl.FeedForward(16, 32, dropout=p), "dropout"),
            (f"SinusoidalPositionalEncoding(dropout={p})",
             lambda p=p: tl.SinusoidalPositionalEncoding(16, dropout=p), "dropout"),
        ]
    for eps in [0.0, -1e-5]:
        cases += [(f"LayerNorm(eps={eps})", lambda e=eps: tl.LayerNorm(8, eps=e), "eps"),
                  (f"RMSNorm(eps={eps})", lambda e=eps: tl.RMSNorm(8, eps=e), "eps")]
    cases += [
        ("MultiHeadAttention on integer input", lambda: tl.MultiHeadAttention(8, 2)(torch.ones(1, 3, 8, dtype=torch.long)),
         "floating"),
        ("attention with int q", lambda: tl.scaled_dot_product_attention(torch.ones(3, 4, dtype=torch.long),
                                                                         torch.randn(3, 4), torch.randn(3, 4)), "floating"),
    ]
    return cases


CASES = _cases()


@pytest.mark.parametrize("call, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("text", ["\ud83d x", "ok \udc00", ["fine", "\ud800"]])
def test_minilm_rejects_text_that_is_not_valid_unicode(text):
    pretrained = pytest.importorskip("transformer_lib.pretrained")
    try:
        lm = pretrained.load_minilm(device="cpu")
    except (ImportError, ModuleNotFoundError) as err:  # the weights package is optional
        pytest.skip(str(err))
    with pytest.raises(ValueError, match="surrogate|Unicode"):
        lm.encode(text if isinstance(text, list) else [text])
