"""transformer_lib.lora against peft's LoRA (the reference; test-only, checked with peft 0.21.2).

Tolerances come from float32 rounding-error analysis: a dot product of n terms computed in
float32 is within gamma_n * sum_i |a_i b_i| of the exact value, gamma_n = n u / (1 - n u), u = 2^-24
(Higham, Accuracy and Stability of Numerical Algorithms, 3.1). Each implementation is within that
bound of the exact result, so two of them are within twice the bound of each other; the bound is
computed elementwise from |x|, |W|, |A|, |B| below (never a number copied from a run).
"""
import copy
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn

import transformer_lib as tl
from transformer_lib.lora import (LoRALinear, add_lora, count_parameters, load_lora, lora_disabled, lora_modules,
                                  lora_state_dict, merge_lora, save_lora)

peft = pytest.importorskip("peft")

U = 2.0 ** -24  # float32 unit roundoff


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


class Two(nn.Module):
    """The smallest model with two targets and one bystander."""

    def __init__(self, d_in, d_out, bias=True):
        super().__init__()
        self.q_proj = nn.Linear(d_in, d_out, bias=bias)
        self.other = nn.Linear(d_out, d_out, bias=bias)

    def forward(self, x):
        return self.other(self.q_proj(x))


def peft_layer(base: nn.Linear, ours: LoRALinear, dropout: float = 0.0):
    """peft's LoRA around a copy of ``base``, with ``ours``'s A and B copied in."""
    holder = nn.Sequential()
    holder.add_module("q_proj", copy.deepcopy(base))
    cfg = peft.LoraConfig(r=ours.rank, lora_alpha=ours.alpha, target_modules=["q_proj"], lora_dropout=dropout)
    wrapped = peft.get_peft_model(holder, cfg)
    layer = wrapped.base_model.model.q_proj
    with torch.no_grad():
        layer.lora_A["default"].weight.copy_(ours.lora_A)
        layer.lora_B["default"].weight.copy_(ours.lora_B)
    return wrapped, layer


def bounds(x, base, ours):
    """Elementwise float32 error bounds of the output and of the gradients of A and B for the loss
    sum(y * g): one implementation's distance to the exact value."""
    K, r, s = base.in_features, ours.rank, ours.scaling
    ax, aA, aB = x.abs().double(), ours.lora_A.detach().abs().double(), ours.lora_B.detach().abs().double()
    aW = base.weight.detach().abs().double()
    ab = base.bias.detach().abs().double() if base.bias is not None else 0.0
    low = ax @ aA.T  # (..., r): |x| |A|^T
    out = gamma(K + 1) * (ax @ aW.T + ab) + gamma(K + r + 3) * s * (low @ aB.T) + gamma(2) * (ax @ aW.T + ab)
    return out


def random_B(layer: LoRALinear, scale: float = 0.5):
    with torch.no_grad():
        layer.lora_B.copy_(torch.randn_like(layer.lora_B) * scale)  # B != 0: gradients reach A too


# -- the layer against peft --------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(d_in=st.integers(1, 24), d_out=st.integers(1, 24), rank_frac=st.floats(0, 1), alpha=st.floats(0.5, 64),
       lead=st.lists(st.integers(1, 4), min_size=0, max_size=2), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_outputs_and_gradients_equal_peft(d_in, d_out, rank_frac, alpha, lead, bias, seed):
    torch.manual_seed(seed)
    rank = 1 + int(rank_frac * (min(d_in, d_out) - 1))
    base = nn.Linear(d_in, d_out, bias=bias)
    ours = LoRALinear(copy.deepcopy(base), rank, alpha)
    random_B(ours)
    _, theirs = peft_layer(base, ours)
    x = torch.randn(*lead, d_in)
    g = torch.randn(*lead, d_out)  # the upstream gradient dL/dy
    y_ours, y_theirs = ours(x), theirs(x)
    tol = 2 * bounds(x, base, ours)
    assert ((y_ours.double() - y_theirs.double()).abs() <= tol).all()
    (y_ours * g).sum().backward()
    (y_theirs * g).sum().backward()
    # dL/dB = s * g^T (x A^T) and dL/dA = s * (g B)^T x, sums over the N rows of the batch
    N = max(1, math.prod(lead))
    ax, ag = x.abs().double().reshape(-1, d_in), g.abs().double().reshape(-1, d_out)
    aA, aB = ours.lora_A.detach().abs().double(), ours.lora_B.detach().abs().double()
    s = ours.scaling
    tol_B = 2 * gamma(N + d_in + 2) * s * ag.T @ (ax @ aA.T)  # (out, r)
    tol_A = 2 * gamma(N + d_out + 2) * s * (ag @ aB).T @ ax  # (r, in)
    assert ((ours.lora_B.grad.double() - theirs.lora_B["default"].weight.grad.double()).abs() <= tol_B).all()
    assert ((ours.lora_A.grad.double() - theirs.lora_A["default"].weight.grad.double()).abs() <= tol_A).all()
    assert base.weight.grad is None and ours.base.weight.grad is None  # the pretrained matrix is frozen


def test_dropout_equals_peft_with_the_same_random_mask():
    base = nn.Linear(32, 16)
    ours = LoRALinear(copy.deepcopy(base), 4, 8.0, dropout=0.3)
    random_B(ours)
    _, theirs = peft_layer(base, ours, dropout=0.3)
    ours.train(), theirs.train()
    x = torch.randn(5, 32)
    torch.manual_seed(7)
    y1 = ours(x)
    torch.manual_seed(7)
    y2 = theirs(x)
    tol = 2 * bounds(x, base, ours) / (1 - 0.3)  # kept inputs are scaled by 1 / (1 - p)
    assert ((y1.double() - y2.double()).abs() <= tol).all()
    torch.manual_seed(8)
    assert not torch.allclose(ours(x), y1)  # a different mask: dropout really acts in training
    ours.eval()  # and not in eval mode: the plain update
    d = ours(x) - ours.base(x)
    assert torch.allclose(d, ours.scaling * x @ ours.lora_A.T @ ours.lora_B.T, atol=1e-5)


def test_a_whole_model_equals_peft_logits_and_gradients():
    model = tl.DecoderOnlyLM(61, d_model=32, num_heads=4, num_layers=2, d_ff=64, max_len=16, init_std=0.02)
    ours_model, ref = copy.deepcopy(model), copy.deepcopy(model)
    paths = add_lora(ours_model, 4, 16.0, ["q_proj", "v_proj", "linear1"])
    assert paths == [f"blocks.{i}.{n}" for i in range(2) for n in ("self_attn.q_proj", "self_attn.v_proj",
                                                                   "ffn.linear1")]
    peft_model = peft.get_peft_model(ref, peft.LoraConfig(r=4, lora_alpha=16.0,
                                                          target_modules=["q_proj", "v_proj", "linear1"]))
    for path, m in lora_modules(ours_model).items():
        random_B(m, 0.1)
        theirs = peft_model.base_model.model.get_submodule(path)
        with torch.no_grad():
            theirs.lora_A["default"].weight.copy_(m.lora_A)
            theirs.lora_B["default"].weight.copy_(m.lora_B)
    tokens = torch.randint(0, 61, (3, 12))
    a, b = ours_model(tokens), peft_model(tokens)
    # two layers of d_ff = 64 products each: n ~ 2 * (32 + 64 + 32) terms, |error| <~ 2 gamma_n * max|logit|
    tol = 2 * gamma(2 * 128 + 16) * float(a.detach().abs().max())
    assert (a - b).abs().max() <= tol
    nn.functional.cross_entropy(a.flatten(0, 1), tokens.flatten()).backward()
    nn.functional.cross_entropy(b.flatten(0, 1), tokens.flatten()).backward()
    for path, m in lora_modules(ours_model).items():
        theirs = peft_model.base_model.model.get_submodule(path)
        for name in ("lora_A", "lora_B"):
            ga, gb = getattr(m, name).grad, getattr(theirs, name)["default"].weight.grad
            assert torch.allclose(ga, gb, rtol=1e-4, atol=1e-4 * float(gb.abs().max())), (path, name)
    trainable = [n for n, p in ours_model.named_parameters() if p.requires_grad]
    assert trainable and all(n.endswith(("lora_A", "lora_B")) for n in trainable)


# -- properties ---------------------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(d_in=st.integers(1, 32), d_out=st.integers(1, 32), rank_frac=st.floats(0, 1), alpha=st.floats(0.5, 64),
       rows=st.integers(1, 6), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_merged_equals_unmerged_and_b_zero_equals_base(d_in, d_out, rank_frac, alpha, rows, bias, seed):
    torch.manual_seed(seed)
    rank = 1 + int(rank_frac * (min(d_in, d_out) - 1))
    base = nn.Linear(d_in, d_out, bias=bias)
    layer = LoRALinear(base, rank, alpha)
    x = torch.randn(rows, d_in)
    assert torch.equal(layer.lora_B, torch.zeros(d_out, rank))
    assert torch.equal(layer(x), base(x))  # B = 0: adding an exact zero, bit for bit
    assert layer.lora_A.abs().max() <= 1 / math.sqrt(d_in)  # Kaiming-uniform bound with a = sqrt(5)
    random_B(layer)
    merged = layer.merged()
    assert type(merged) is nn.Linear and merged.weight.shape == base.weight.shape
    # merged: x (W + s B A)^T with W + s B A rounded once per entry (r + 2 terms); unmerged as bounds()
    aW = base.weight.abs().double() + layer.scaling * layer.lora_B.detach().abs().double() @ \
        layer.lora_A.detach().abs().double()
    tol = bounds(x, base, layer) + gamma(d_in + rank + 3) * (x.abs().double() @ aW.T + (
        base.bias.abs().double() if bias else 0))
    with torch.no_grad():
        assert ((merged(x).double() - layer(x).double()).abs() <= tol).all()
    assert layer.lora_B.abs().sum() > 0  # merged() left the layer as it was
    assert count_parameters(layer) == (rank * (d_in + d_out), rank * (d_in + d_out) + d_in * d_out + d_out * bias)


def test_add_lora_freezes_the_rest_and_merge_lora_restores_plain_linears():
    model = Two(8, 6)
    before = copy.deepcopy(model)
    paths = add_lora(model, 2, 4.0, ["q_proj"])
    assert paths == ["q_proj"] and isinstance(model.q_proj, LoRALinear) and type(model.other) is nn.Linear
    assert count_parameters(model) == (2 * (8 + 6), 2 * (8 + 6) + 8 * 6 + 6 + 6 * 6 + 6)
    x = torch.randn(4, 8)
    assert torch.equal(model(x), before(x))
    random_B(model.q_proj)
    with lora_disabled(model):
        assert torch.equal(model(x), before(x))
    assert model.q_proj.enabled
    y = model(x)
    assert not torch.allclose(y, before(x))
    assert merge_lora(model) == ["q_proj"] and type(model.q_proj) is nn.Linear
    assert torch.allclose(model(x), y, atol=1e-5)
    assert lora_modules(model) == {}


def test_targets_match_whole_name_components():
    model = nn.Sequential()
    model.add_module("q_proj", nn.Linear(4, 4))
    model.add_module("xq_proj", nn.Linear(4, 4))
    assert add_lora(model, 1, 1.0, ["q_proj"]) == ["q_proj"]
    assert type(model.xq_proj) is nn.Linear


def test_save_and_load_only_the_adapters(tmp_path):
    torch.manual_seed(1)
    model = tl.DecoderOnlyLM(40, d_model=16, num_heads=2, num_layers=2, d_ff=32, max_len=8)
    fresh = copy.deepcopy(model)
    add_lora(model, 2, 4.0, ["q_proj", "v_proj"])
    for m in lora_modules(model).values():
        random_B(m)
    size = save_lora(model, tmp_path / "a.pt", task="test")
    state = lora_state_dict(model)
    assert len(state) == 8 and sum(t.numel() for t in state.values()) == count_parameters(model)[0]
    assert size < 4 * count_parameters(model)[0] + 20_000  # the adapters only, not the 16k-weight model
    meta = load_lora(fresh, tmp_path / "a.pt")
    assert meta == {"task": "test"}
    tokens = torch.randint(0, 40, (2, 8))
    assert torch.equal(fresh(tokens), model(tokens))
    assert count_parameters(fresh) == count_parameters(model)
    with pytest.raises(ValueError, match="differ"):
        other = copy.deepcopy(fresh)
        merge_lora(other)
        add_lora(other, 2, 4.0, ["q_proj"])
        load_lora(other, tmp_path / "a.pt")
    with pytest.raises(ValueError, match="no nn.Linear"):
        load_lora(Two(4, 4), tmp_path / "a.pt")


class _Payload:
    def __reduce__(self):
        return (print, ("code ran",))


def test_load_refuses_pickled_code(tmp_path):
    torch.save({"format": "transformer_lib.lora/1", "x": _Payload()}, tmp_path / "evil.pt")
    with pytest.raises(Exception, match="[Ww]eights only|Unsupported|global"):
        load_lora(Two(4, 4), tmp_path / "evil.pt")
    torch.save({"not": "an adapter"}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="path"):
        load_lora(Two(4, 4), tmp_path / "other.pt")


# -- bad input ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, name", [
    (lambda: LoRALinear(nn.Linear(4, 4), 0, 1.0), ValueError, "rank"),
    (lambda: LoRALinear(nn.Linear(4, 4), -2, 1.0), ValueError, "rank"),
    (lambda: LoRALinear(nn.Linear(4, 4), 2.5, 1.0), ValueError, "rank"),
    (lambda: LoRALinear(nn.Linear(4, 4), True, 1.0), ValueError, "rank"),
    (lambda: LoRALinear(nn.Linear(4, 3), 4, 1.0), ValueError, "rank"),
    (lambda: LoRALinear(nn.Linear(4, 4), "2", 1.0), TypeError, "rank"),
    (lambda: LoRALinear(nn.Conv1d(4, 4, 1), 2, 1.0), ValueError, "base"),
    (lambda: LoRALinear(nn.Embedding(4, 4), 2, 1.0), ValueError, "base"),
    (lambda: LoRALinear(torch.ones(4, 4), 2, 1.0), TypeError, "base"),
    (lambda: LoRALinear(nn.Linear(4, 4), 2, 0.0), ValueError, "alpha"),
    (lambda: LoRALinear(nn.Linear(4, 4), 2, float("nan")), ValueError, "alpha"),
    (lambda: LoRALinear(nn.Linear(4, 4), 2, 1.0, dropout=1.0), ValueError, "dropout"),
    (lambda: LoRALinear(nn.Linear(4, 4), 2, 1.0, dropout=-0.1), ValueError, "dropout"),
    (lambda: add_lora(Two(4, 4), 2, 1.0, ["k_proj"]), ValueError, "targets"),
    (lambda: add_lora(Two(4, 4), 2, 1.0, ["q_proj", "nope"]), ValueError, "targets"),
    (lambda: add_lora(Two(4, 4), 2, 1.0, []), ValueError, "targets"),
    (lambda: add_lora(Two(4, 4), 2, 1.0, "q_proj"), TypeError, "targets"),
    (lambda: add_lora(Two(4, 4), 0, 1.0, ["q_proj"]), ValueError, "rank"),
    (lambda: add_lora("model", 2, 1.0, ["q_proj"]), TypeError, "model"),
    (lambda: save_lora(Two(4, 4), "/nonexistent/x.pt"), ValueError, "model"),
])
def test_bad_input_names_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_a_model_cannot_be_wrapped_twice():
    model = Two(4, 4)
    add_lora(model, 2, 1.0, ["q_proj"])
    with pytest.raises(ValueError, match="model already has LoRA"):
        add_lora(model, 2, 1.0, ["other"])
