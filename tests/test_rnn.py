"""The recurrent baseline's bad input (its parity with torch.nn.RNN is in test_parity.py, its
sequential depth in test_work_and_depth.py)."""

import pytest
import torch

import transformer_lib as tl



@pytest.mark.parametrize("call, message", [
    (lambda: tl.ElmanRNN(3, 4)(torch.randn(2, 5, 2)), "expected"),
    (lambda: tl.torch_rnn("transformer", 3, 4), "kind"),
])
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
