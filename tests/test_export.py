"""transformer_lib.export: the chapter-16 GPT as ONNX, checked against torch with onnxruntime.

Tolerances: onnxruntime and torch sum in different orders in float32; on these models the
largest difference seen was ~1e-5 on logits of size ~10 and ~1e-6 on attention weights, so the
tests allow 1e-4 (logits) and 1e-5 (weights). The reference attention maps are recomputed here
from the blocks' own projections (softmax(QK^T / sqrt(d_k)) under a causal mask), not taken
from the exported graph.
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
from transformer_lib.export import ExportGraph, export_config, export_onnx, read_config  # noqa: E402
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
    """(B, N, H, L, L) attention weights recomputed from each block's Q and K projections,
    following the residual stream with the model's own blocks."""
    L = tokens.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    x = model.pos(model.embed(tokens)) if model.pos is not None else model.embed(tokens)
    maps = []
    for block in model.blocks:
        h = block.norm1(x) if block.norm_first else x
        attn = block.self_attn
        q = attn.q_proj(h).view(*h.shape[:2], attn.num_heads, attn.head_dim).transpose(1, 2)  # (B, H, L, d_k)
        k = attn.k_proj(h).view(*h.shape[:2], attn.num_heads, attn.head_dim).transpose(1, 2)  # (B, H, L, d_k)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(attn.head_dim)  # (B, H, L, L)
        maps.append(torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1))
        x = block(x, causal)  # the library's block moves the stream on
    return torch.stack(maps, dim=1)  # (B, N, H, L, L)


def run(session, tokens: torch.Tensor):
    logits, attention = session.run(["logits", "attention"], {"tokens": tokens.numpy()})
    return torch.from_numpy(logits), torch.from_numpy(attention)


@torch.no_grad()
def test_graph_equals_the_model_in_torch(book_gpt):
    model, tok, _ = book_gpt
    graph = ExportGraph(model, export_config(model, tok)).eval()
    tokens = torch.tensor([tok.encode(PROMPTS[2])])
    logits, attention, _ = graph(tokens)
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


@torch.no_grad()
def test_a_post_ln_model_with_sinusoidal_positions_exports_too(tmp_path):
    tok = BPETokenizer.train("the cat sat on the mat; the dog sat on the log. " * 20, 300)
    torch.manual_seed(1)
    model = tl.DecoderOnlyLM(len(tok), d_model=32, num_heads=2, num_layers=3, max_len=16,
                             positional="sinusoidal", norm_first=False).eval()
    session = ort.InferenceSession(str(export_onnx(model, tmp_path / "post_ln.onnx", tok)))
    for text in ["the cat", "the dog sat on the log."]:
        tokens = torch.tensor([tok.encode(text)])
        logits, attention = run(session, tokens)
        torch.testing.assert_close(logits, model(tokens)[:, -1], rtol=0, atol=1e-4)
        torch.testing.assert_close(attention, reference_attention(model, tokens), rtol=0, atol=1e-5)
    assert model.training is False


def test_bad_input_is_named(book_gpt, tmp_path):
    model, tok, _ = book_gpt
    with pytest.raises(TypeError, match="model"):
        export_onnx(torch.nn.Linear(2, 2), tmp_path / "a.onnx", tok)
    rope = tl.DecoderOnlyLM(1024, d_model=16, num_heads=2, num_layers=1, positional="rope")
    with pytest.raises(ValueError, match="positional"):
        export_onnx(rope, tmp_path / "a.onnx", tok)
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
