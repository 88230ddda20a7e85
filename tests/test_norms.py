"""LayerNorm from scratch, RMSNorm and BatchNorm over tokens: definitions, bad input, parity with
torch.nn.LayerNorm and torch.nn.RMSNorm."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import transformer_lib as tl
from conftest import DEVICES

ATOL = 1e-5


def test_layer_norm_uses_biased_variance_per_token():
    x = torch.randn(2, 3, 8)
    y = tl.LayerNorm(8, elementwise_affine=False)(x)
    assert torch.allclose(y.mean(-1), torch.zeros(2, 3), atol=1e-6)
    assert torch.allclose(y.var(-1, unbiased=False), torch.ones(2, 3), atol=1e-4)
    assert torch.allclose(y, F.layer_norm(x, (8,)), atol=ATOL)


def test_layer_norm_is_batch_independent_batchnorm_is_not():
    x = torch.randn(4, 5, 8)
    ln, bn = tl.LayerNorm(8), tl.TokenBatchNorm(8)
    assert torch.allclose(ln(x)[0], ln(x[:1])[0], atol=ATOL)
    assert not torch.allclose(bn(x)[0], bn(x[:1] * 1.0)[0], atol=1e-3)


@pytest.mark.parametrize("call, message", [
    (lambda: tl.LayerNorm(8)(torch.randn(2, 7)), "last dim 8"),
])
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# -- parity with torch.nn.LayerNorm and torch.nn.RMSNorm (float32, 1e-5) ---------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_and_rms_norm_match_torch(device):
    x = torch.randn(4, 5, 16, device=device) * 3 + 1
    ref = nn.LayerNorm(16).to(device)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    assert torch.allclose(tl.LayerNorm.from_torch(ref)(x), ref(x), atol=ATOL)
    rms_ref = nn.RMSNorm(16, eps=1e-6).to(device)
    ours = tl.RMSNorm(16, eps=1e-6).to(device)
    assert torch.allclose(ours(x), rms_ref(x), atol=ATOL)
