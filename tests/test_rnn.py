"""transformer_lib.rnn, the recurrent baseline of chapter 9: parity with torch.nn.RNN, bad input
(its sequential depth is in test_cost.py, its input gradients in test_probes.py)."""

import pytest
import torch
import torch.nn as nn

import transformer_lib as tl
from transformer_lib.rnn import torch_rnn

ATOL = 1e-5


@pytest.mark.parametrize("call, message", [
    (lambda: tl.ElmanRNN(3, 4)(torch.randn(2, 5, 2)), "expected"),
    (lambda: tl.torch_rnn("transformer", 3, 4), "kind"),
])
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# -- the recurrent baseline against torch.nn.RNN (chapter 9) ---------------------------------------

@pytest.mark.parametrize("B,L,I,H", [(1, 1, 3, 5), (3, 7, 4, 6), (2, 20, 8, 8)])
def test_elman_matches_torch_rnn(B, L, I, H):
    tl.seed_everything(0)
    ref = torch.nn.RNN(I, H, batch_first=True)
    ours = tl.ElmanRNN.from_torch(ref)
    x, h0 = torch.randn(B, L, I), torch.randn(1, B, H)
    out_ref, h_ref = ref(x, h0)
    out, h = ours(x, h0[0])
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(h, h_ref[0], atol=1e-5, rtol=1e-5)


def test_elman_rejects_bad_input():
    rnn = tl.ElmanRNN(4, 6)
    with pytest.raises(ValueError, match=r"\(B, L, 4\)"):
        rnn(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="single-layer"):
        tl.ElmanRNN.from_torch(torch.nn.RNN(4, 6, num_layers=2))
    with pytest.raises(ValueError, match="kind"):
        torch_rnn("transformer", 4, 4)


def test_elman_rnn_matches_torch():
    ref = nn.RNN(5, 7, batch_first=True)
    ours = tl.ElmanRNN.from_torch(ref)
    x = torch.randn(3, 9, 5)
    exp_out, exp_h = ref(x)
    out, h = ours(x)
    assert torch.allclose(out, exp_out, atol=ATOL) and torch.allclose(h, exp_h[0], atol=ATOL)
    for kind in ("rnn", "gru"):
        out, _ = tl.torch_rnn(kind, 5, 7)(x)
        assert out.shape == (3, 9, 7)
