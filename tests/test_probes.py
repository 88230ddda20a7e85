"""probes.record_attention on every model family of the library: the same records (weights
(B, H, L_q, L_k), rows summing to one where a key is visible), the same outputs as an unrecorded
run (to float rounding with weights=True, which switches to the readable path; exactly with
weights=False), and hooks removed afterwards.

Tolerance 1e-5: the readable path and SDPA sum the same float32 products in another order; the
models are small (width <= 32, <= 3 blocks, O(1) activations).
"""
import pytest
import torch

import transformer_lib as tl
from transformer_lib.pretrained import BertEncoder, MiniLMConfig
from transformer_lib.pretrained.llama import LlamaConfig, LlamaDecoder
from transformer_lib.probes import record_attention
from transformer_lib.toy_models import LookupModel, TokenClassifier, TransformerClassifier

ATOL = 1e-5


def _families():
    """(name, model, inputs, expected number of attention calls, heads) for every family."""
    torch.manual_seed(0)
    llama_cfg = LlamaConfig(vocab_size=17, d_model=16, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=24,
                            context_length=32)
    bert_cfg = MiniLMConfig(vocab_size=17, d_model=16, num_layers=2, num_heads=4, d_ff=32, max_positions=16)
    tokens = torch.randint(0, 17, (2, 7))
    src, tgt = torch.randint(3, 17, (2, 6)), torch.randint(3, 17, (2, 5))
    return [
        ("multi-head (MultiHeadAttention)", tl.MultiHeadAttention(16, 4), (torch.randn(2, 7, 16),), 1, 4),
        ("grouped-query (GroupedQueryAttention)", tl.GroupedQueryAttention(16, 4, 2), (torch.randn(2, 7, 16),), 1, 4),
        ("the reader's GPT (DecoderOnlyLM, RoPE)", tl.DecoderOnlyLM(17, 16, 4, 3, positional="rope"), (tokens,), 3, 4),
        ("the reader's GPT (DecoderOnlyLM, ALiBi)", tl.DecoderOnlyLM(17, 16, 4, 2, positional="alibi"), (tokens,), 2, 4),
        ("encoder-decoder (Seq2SeqTransformer)", tl.Seq2SeqTransformer(17, 17, 16, 4, d_ff=32), (src, tgt), 2 + 2 * 2, 4),
        ("SmolLM2's blocks (LlamaDecoder)", LlamaDecoder(llama_cfg), (tokens,), 2, 4),
        ("MiniLM's encoder (BertEncoder)", BertEncoder(bert_cfg), (tokens, torch.ones(2, 7)), 2, 4),
        ("toy model (LookupModel)", LookupModel(vocab_size=17, max_len=12, d_model=16), (tokens,), 2, 4),
        ("toy model (TokenClassifier)", TokenClassifier(17, 3, d_model=16), (tokens,), 2, 4),
        ("toy model (TransformerClassifier)", TransformerClassifier(17, 16, 3), (tokens,), 1, 4),
    ]


def _outputs(out):
    if isinstance(out, dict):
        return list(out.values())
    return list(out) if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("name, model, inputs, n_calls, heads", _families(), ids=lambda v: v if isinstance(v, str) else "")
def test_record_attention_sees_every_family_the_same_way(name, model, inputs, n_calls, heads):
    model.eval()
    with torch.no_grad():
        plain = _outputs(model(*inputs))
        with record_attention(model, weights=False) as unweighted:
            same = _outputs(model(*inputs))
        with record_attention(model, weights=True) as calls:
            recorded = _outputs(model(*inputs))
        after = _outputs(model(*inputs))
    for a, b, c, d in zip(plain, same, recorded, after):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b), "recording without weights must not change anything"
            torch.testing.assert_close(c, a, atol=ATOL, rtol=0)  # the readable path
            assert torch.equal(d, a), "the hooks must be gone after the block"
    assert len(calls) == len(unweighted) == n_calls, name
    for call in calls:
        B, L_q, L_k = call.masks.shape
        assert call.weights.shape == (B, heads, L_q, L_k)
        visible = call.masks.any(-1)  # (B, L_q) rows with a key to look at
        sums = call.weights.sum(-1)  # (B, H, L_q)
        torch.testing.assert_close(sums, visible[:, None].expand_as(sums).float(), atol=1e-5, rtol=0)
        assert (call.weights[~call.masks[:, None].expand_as(call.weights)] == 0).all()  # blocked keys get 0
        assert call.output.shape[:2] == (B, L_q)


def test_grouped_query_records_its_causal_mask_and_its_cached_keys():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=17, d_model=16, num_layers=2, num_heads=4, num_kv_heads=2, d_ff=24,
                      context_length=32)
    model = LlamaDecoder(cfg).eval()
    tokens = torch.randint(0, 17, (1, 6))
    cache = model.new_cache()
    with torch.no_grad(), record_attention(model, weights=True) as calls:
        model(tokens[:, :5], cache=cache)
        model(tokens[:, 5:], cache=cache)  # one new query, six keys
    assert [c.mask_kind for c in calls[:2]] == ["causal", "causal"]
    assert [c.shapes for c in calls] == ["5 x 5"] * 2 + ["1 x 6"] * 2
    with torch.no_grad(), record_attention(model, weights=True) as full:
        model(tokens)
    for step, whole in zip(calls[2:], full):  # the cached step's weights are the full pass's last row
        torch.testing.assert_close(step.weights[:, :, 0], whole.weights[:, :, -1], atol=1e-6, rtol=0)


def _two_decoders():
    torch.manual_seed(0)
    gpt = tl.DecoderOnlyLM(17, 16, 4, 3, positional="rope").eval()
    cfg = LlamaConfig(vocab_size=17, d_model=16, num_layers=3, num_heads=4, num_kv_heads=2, d_ff=24,
                      context_length=32)
    return {"DecoderOnlyLM": gpt, "LlamaDecoder": LlamaDecoder(cfg).eval()}


@pytest.mark.parametrize("name", ["DecoderOnlyLM", "LlamaDecoder"])
def test_blocks_i_is_the_residual_stream_after_block_i_in_both_decoders(name):
    from transformer_lib.probes import patch_activations, record_activations
    model = _two_decoders()[name]
    tokens = torch.randint(0, 17, (2, 6))
    with torch.no_grad():
        with record_activations(model, ["blocks.0", "blocks.2"]) as acts:
            logits = model(tokens)
        x = model.embed(tokens)  # (B, L, D); both use RoPE inside attention, no added positions
        by_hand = model.blocks[0](x, mask=tl.causal_mask(6)) if name == "DecoderOnlyLM" else model.blocks[0](x)
        torch.testing.assert_close(acts["blocks.0"], by_hand, atol=1e-6, rtol=0)  # (B, L, D) after block 0
        last = model.norm(acts["blocks.2"])  # the final norm, then the (tied) output matrix
        head = model.head(last) if name == "DecoderOnlyLM" else last @ model.embed.weight.T
        torch.testing.assert_close(head, logits, atol=1e-5, rtol=0)
        with patch_activations(model, {"blocks.0": acts["blocks.0"]}):  # patching in its own value
            assert torch.equal(model(tokens), logits)
        with patch_activations(model, {"blocks.0": lambda out: torch.zeros_like(out)}):
            zeroed = model(tokens)
        assert not torch.allclose(zeroed, logits)
        assert torch.equal(model(tokens), logits)  # hooks gone
        with pytest.raises(ValueError, match="shape"):
            with patch_activations(model, {"blocks.1": torch.zeros(1, 2)}):
                model(tokens)
    with pytest.raises(ValueError, match="no module 'blocks.9'"):
        with record_activations(model, ["blocks.9"]):
            pass
    with pytest.raises(ValueError, match="names"):
        with record_activations(model, "blocks.0"):
            pass
