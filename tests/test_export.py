"""transformer_lib.export: a DecoderOnlyLM as ONNX through its own forward, checked against torch
with onnxruntime, for every positional scheme.

Tolerances from float32 error analysis. Torch and onnxruntime compute the same operations but sum
in different orders (blocked matmuls, fused softmax/norms). Each length-n dot product then differs
by at most ~n u sum|a_i b_i| (u = 2^-24 ~ 6e-8 the unit roundoff), and on average by ~sqrt(n) u
times it. Here n <= 4 d_model = 256 and the |a_i b_i| sums stay below ~50 for these small models,
so one matmul differs by ~1e-6 typically and ~1e-4 at the very worst; through a few layers the
typical differences grow to ~1e-5 on logits of size ~10, which the tests bound by 1e-4 (logits).
The attention weights are softmax outputs in [0, 1] whose error is their score error (bounded as
above, ~1e-6) times the weight itself, so they are held to 1e-5. The reference attention maps are
recomputed here from the blocks' own projections (softmax(QK^T / sqrt(d_k) + positions) under a
causal mask), not read from the exported graph or from the hooks it uses.
"""
from __future__ import annotations

import json
import math

import pytest
import torch

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from hypothesis import given, settings, strategies as st  # noqa: E402

import transformer_lib as tl  # noqa: E402
from transformer_lib.data import load_gpt_checkpoint  # noqa: E402
from transformer_lib.export import ExportGraph, export_config, export_onnx, pattern_points, read_config  # noqa: E402
from transformer_lib.tokenization import BPETokenizer  # noqa: E402

PROMPTS = ["T", "The model", "Attention is a weighted average of the values,",
           "Über café naïve — 東京 🙂\tend\n\nnew  paragraph   with spaces",
           "the " * 100]  # the last one is longer than the 64-token context: its tail is used


@pytest.fixture(scope="module")
def book_gpt():
    return load_gpt_checkpoint()


@pytest.fixture(scope="module")
def exported(book_gpt, tmp_path_factory):
    model, tok, _ = book_gpt
    path = export_onnx(model, tmp_path_factory.mktemp("onnx") / "book_gpt.onnx", tok)
    return path, ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def reference_attention(model, tokens: torch.Tensor) -> torch.Tensor:
    """(B, N, H, L, L) attention weights recomputed from each block's Q and K projections (rotated
    for RoPE, biased by distance for ALiBi), following the residual stream with the model's own
    blocks. Grouped-query models repeat each key head over its group of query heads."""
    L = tokens.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    x = model.pos(model.embed(tokens)) if model.pos is not None else model.embed(tokens)
    bias = tl.alibi_bias(model.num_heads, L) if model.positional == "alibi" else 0.0  # (1, H, L, L)
    maps = []
    for block in model.blocks:
        h = block.norm1(x) if block.norm_first else x
        attn = block.self_attn
        d, kv_heads = attn.head_dim, attn.num_kv_heads
        q = attn.q_proj(h).view(*h.shape[:2], attn.num_heads, d).transpose(1, 2)  # (B, H, L, d)
        k = attn.k_proj(h).view(*h.shape[:2], kv_heads, d).transpose(1, 2)  # (B, H_kv, L, d)
        k = k.repeat_interleave(attn.num_heads // kv_heads, dim=1)  # (B, H, L, d)
        if getattr(attn, "q_norm", None) is not None:  # QK-norm: each head's query and key normalised first
            q, k = attn.q_norm(q), attn.k_norm(k)
        if attn.rotary is not None:
            q, k = attn.rotary(q), attn.rotary(k)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d) + bias  # (B, H, L, L)
        maps.append(torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1))
        x = block(x, causal, bias=bias if model.positional == "alibi" else None)  # the block moves the stream on
    return torch.stack(maps, dim=1)  # (B, N, H, L, L)


def run(session, tokens: torch.Tensor):
    logits, attention = session.run(["logits", "attention"], {"tokens": tokens.numpy()})
    return torch.from_numpy(logits), torch.from_numpy(attention)


@torch.no_grad()
def test_graph_equals_the_model_in_torch(book_gpt):
    model, tok, _ = book_gpt
    graph = ExportGraph(model, export_config(model, tok)).eval()
    tokens = torch.tensor([tok.encode(PROMPTS[2])])
    calls = []  # the graph is one pass of the model's own forward: each block runs once
    handles = [b.register_forward_hook(lambda m, a, o: calls.append(m)) for b in model.blocks]
    try:
        logits, attention, _ = graph(tokens)
    finally:
        for h in handles:
            h.remove()
    assert calls == list(model.blocks)
    torch.testing.assert_close(logits, model(tokens)[:, -1], rtol=0, atol=1e-5)
    torch.testing.assert_close(attention, reference_attention(model, tokens), rtol=0, atol=1e-6)


@torch.no_grad()
@pytest.mark.parametrize("prompt", PROMPTS)
def test_onnxruntime_equals_torch_on_prompts(book_gpt, exported, prompt):
    model, tok, _ = book_gpt
    _, session = exported
    tokens = torch.tensor([tok.encode(prompt)[-64:]])  # (1, L), L <= the context of 64
    logits, attention = run(session, tokens)
    assert logits.shape == (1, 1024) and attention.shape == (1, 2, 4, tokens.shape[1], tokens.shape[1])
    torch.testing.assert_close(logits, model(tokens)[:, -1], rtol=0, atol=1e-4)
    torch.testing.assert_close(attention, reference_attention(model, tokens), rtol=0, atol=1e-5)
    assert torch.equal(logits.topk(10).indices, model(tokens)[:, -1].topk(10).indices)


@torch.no_grad()
@settings(max_examples=12, deadline=None)
@given(st.integers(1, 64), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_onnxruntime_equals_torch_any_length_and_batch(book_gpt, exported, length, batch, seed):
    model, _, _ = book_gpt
    _, session = exported
    tokens = torch.randint(0, 1024, (batch, length), generator=torch.Generator().manual_seed(seed))
    logits, attention = run(session, tokens)
    torch.testing.assert_close(logits, model(tokens)[:, -1], rtol=0, atol=1e-4)
    torch.testing.assert_close(attention, reference_attention(model, tokens), rtol=0, atol=1e-5)
    # each row of weights is a distribution over the keys at or before it
    torch.testing.assert_close(attention.sum(-1), torch.ones(batch, 2, 4, length), rtol=0, atol=1e-5)
    assert float(attention.triu(1).abs().max()) == 0.0


def test_the_file_carries_the_tokenizer_and_sizes(book_gpt, exported):
    model, tok, _ = book_gpt
    config = read_config(exported[0])
    assert (config["vocab_size"], config["context"], config["num_layers"], config["num_heads"]) == (1024, 64, 2, 4)
    again = BPETokenizer.from_json(json.dumps(config["tokenizer"]))
    for text in PROMPTS:
        assert again.encode(text) == tok.encode(text)


# Every positional scheme, both norm placements, RMSNorm and SwiGLU, grouped-query attention, both
# rotary layouts, QK-norm, latent attention, an untied head: each switch in at least one model,
# combined so that each export (10-20 s of tracing) covers several (tests/test_config.py runs the
# other tools over the same switches). Two blocks: the exporter unrolls the blocks, so each one more
# costs 2-5 s of CPU per export, and nothing in the export depends on a block's index; two already
# check that the maps of the blocks are stacked in the order they run, the second block's computed
# from the first's output. A batch of three rows keeps the batch axis apart from the layer axis.
CONFIGS = {
    "learned": dict(positional="learned"),
    "sinusoidal-post-ln": dict(positional="sinusoidal", norm_first=False),
    "none": dict(positional="none"),
    "alibi-rms-swiglu-post-ln-untied": dict(positional="alibi", norm="rms", activation="swiglu", bias=False,
                                            norm_first=False, tie_weights=False),
    "rope-qk-norm": dict(positional="rope", qk_norm=True),
    "llama-switches": dict(positional="rope", num_heads=4, num_kv_heads=2, norm="rms", activation="swiglu",
                           bias=False, rotary_style="halves", rope_base=100000.0),
    "latent-attention": dict(positional="rope", attention="mla", kv_lora_rank=16, qk_rope_head_dim=4),
}


@pytest.fixture(scope="module")
def small_tokenizer():
    return BPETokenizer.train("the cat sat on the mat; the dog sat on the log. " * 20, 300)


@torch.no_grad()
@pytest.mark.parametrize("name", CONFIGS)
def test_every_configuration_exports_and_equals_torch(small_tokenizer, tmp_path, name):
    """Exported from training mode: the model comes back in training mode with its weights and no
    hook left behind; through onnxruntime its logits and attention maps equal torch's."""
    tok = small_tokenizer
    torch.manual_seed(1)
    kwargs = dict(d_model=32, num_heads=2, num_layers=2, max_len=16) | CONFIGS[name]
    model = tl.DecoderOnlyLM(len(tok), **kwargs).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    session = ort.InferenceSession(str(export_onnx(model, tmp_path / f"{name}.onnx", tok)),
                                   providers=["CPUExecutionProvider"])
    assert model.training is True
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(not point._forward_hooks for point in pattern_points(model)), "export left a hook behind"
    model.eval()
    H = kwargs["num_heads"]
    for text in ["the", "the cat", "the dog sat on the log."]:
        tokens = torch.tensor([tok.encode(text)] * 3)  # (3, L): a batch
        L = tokens.shape[1]
        logits, attention = run(session, tokens)
        assert attention.shape == (3, 2, H, L, L)
        torch.testing.assert_close(logits, model(tokens)[:, -1], rtol=0, atol=1e-4)
        if kwargs.get("attention") == "mla":  # its maps come from compressed keys: rows and mask only
            torch.testing.assert_close(attention.sum(-1), torch.ones(3, 2, H, L), rtol=0, atol=1e-5)
            assert not attention.masked_select(~torch.ones(L, L, dtype=torch.bool).tril()).any()  # nothing ahead
        else:
            torch.testing.assert_close(attention, reference_attention(model, tokens), rtol=0, atol=1e-5)


def test_bad_input_is_named(book_gpt, tmp_path):
    model, tok, _ = book_gpt
    with pytest.raises(TypeError, match="model"):
        export_onnx(torch.nn.Linear(2, 2), tmp_path / "a.onnx", tok)
    with pytest.raises(ValueError, match="path"):
        export_onnx(model, tmp_path / "a.pt", tok)
    with pytest.raises(ValueError, match="path"):
        export_onnx(model, tmp_path / "missing" / "a.onnx", tok)
    with pytest.raises(TypeError, match="path"):
        export_onnx(model, 3, tok)
    with pytest.raises(TypeError, match="tokenizer"):
        export_onnx(model, tmp_path / "a.onnx", "merges")
    with pytest.raises(ValueError, match="tokenizer"):
        export_onnx(model, tmp_path / "a.onnx", BPETokenizer())
    with pytest.raises(TypeError, match="opset"):
        export_onnx(model, tmp_path / "a.onnx", tok, opset=True)
    with pytest.raises(ValueError, match="opset"):
        export_onnx(model, tmp_path / "a.onnx", tok, opset=9)
    with pytest.raises(ValueError, match="path"):
        read_config(tmp_path / "none.onnx")
    with pytest.raises(TypeError, match="path"):
        read_config(None)


def test_a_mixture_of_experts_is_refused_by_name(book_gpt, tmp_path):
    _, tok, _ = book_gpt
    with pytest.raises(ValueError, match="num_experts=4"):
        export_onnx(tl.DecoderOnlyLM(len(tok), 32, 4, 1, num_experts=4), tmp_path / "m.onnx", tok)
