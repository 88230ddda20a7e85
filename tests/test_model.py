"""Encoder, decoder, Transformer, Seq2SeqTransformer and DecoderOnlyLM: causality, incremental decoding, stacks, bad input, parity with torch.nn.Transformer (the KV cache: test_kv_cache.py; generation: test_sampling.py)."""

import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings, strategies as st

import transformer_lib as tl
from conftest import CONFIGS, DEVICES, to_bf
from transformer_lib import tasks
from transformer_lib.sampling import generate

ATOL = 1e-5


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope", "alibi", "none"])
@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_decoder_only_lm_is_causal(positional, norm):
    torch.manual_seed(0)
    lm = tl.DecoderOnlyLM(30, 16, 2, 2, max_len=16, positional=positional, norm=norm, activation="swiglu").eval()
    x = torch.randint(0, 30, (2, 10))
    y = x.clone()
    y[:, 6:] = torch.randint(0, 30, (2, 4))
    a, b = lm(x), lm(y)
    assert torch.allclose(a[:, :6], b[:, :6], atol=ATOL)
    assert not torch.allclose(a[:, 6:], b[:, 6:], atol=ATOL)
    assert generate(lm, x[:, :3], 4).shape == (2, 7)


def test_seq2seq_parallel_and_incremental_decoding_agree():
    torch.manual_seed(0)
    model = tl.Seq2SeqTransformer(12, 12, d_model=32, num_heads=4, d_ff=64).eval()
    src = torch.randint(3, 12, (2, 6))
    tgt_in = torch.randint(3, 12, (2, 5))
    full = model(src, tgt_in)
    memory = model.encode(src)
    for t in range(1, 6):
        prefix_logits = model.decode(tgt_in[:, :t], memory)
        assert torch.allclose(prefix_logits[:, -1], full[:, t - 1], atol=1e-5)
    out = generate(model.conditioned_on(src), torch.full((2, 1), 1), 4)  # BOS, then 4 greedy tokens
    assert out.shape == (2, 5)


def test_seq2seq_blocks_list_both_stacks_encoder_first():
    model = tl.Seq2SeqTransformer(10, 10, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=3)
    kinds = [type(b).__name__ for b in model.blocks]
    assert kinds == ["TransformerBlock"] * 2 + ["DecoderLayer"] * 3
    assert model.blocks[0] is model.transformer.encoder.blocks[0]


def _weights(block):
    return [p.detach().clone() for p in block.parameters()]


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(_weights(a), _weights(b)))


def test_each_cloned_layer_gets_its_own_initial_weights():
    torch.manual_seed(0)
    model = tl.Transformer(16, 2, 3, 3, 32)
    for stack in (model.encoder.blocks, model.decoder.blocks):
        for i in range(len(stack)):
            for j in range(i + 1, len(stack)):
                assert not _same(stack[i], stack[j]), (i, j)
        for a, b in zip(stack[0].modules(), stack[1].modules()):  # every Linear re-drawn ...
            if isinstance(a, nn.Linear):
                assert not torch.equal(a.weight, b.weight)
        for name, p in stack[1].named_parameters():  # ... and every norm still ones and zeros
            if "norm" in name:
                assert torch.equal(p, torch.ones_like(p) if name.endswith("weight") else torch.zeros_like(p))
    seq2seq = tl.Seq2SeqTransformer(10, 10, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=2)
    assert not _same(seq2seq.blocks[0], seq2seq.blocks[1]) and not _same(seq2seq.blocks[2], seq2seq.blocks[3])


def test_clones_keeps_the_first_copy_and_frozen_weights():
    torch.manual_seed(0)
    layer = tl.TransformerBlock(16, 2, 32, ffn=False)  # the FFN switched off: W_2 zero and frozen
    copies = tl.model.clones(layer, 3)
    assert _same(copies[0], layer) and copies[0] is not layer
    for block in copies[1:]:
        assert not torch.equal(block.self_attn.q_proj.weight, layer.self_attn.q_proj.weight)
        assert torch.equal(block.ffn.linear2.weight, torch.zeros_like(block.ffn.linear2.weight))
    torch.manual_seed(1)
    a = tl.Encoder(layer, 3)
    torch.manual_seed(1)
    b = tl.Encoder(layer, 3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))  # seeded: reproducible


@pytest.mark.parametrize("call, message", [
    (lambda: tl.Transformer(8, 2, 1, 1, 16)(torch.randn(2, 3, 8), torch.randn(3, 3, 8)), "batch sizes differ"),
    (lambda: tl.DecoderOnlyLM(10, positional="xyz"), "positional"),
    (lambda: tl.DecoderOnlyLM(10, init_std=-0.02), "init_std"),  # issue 40: was torch's RuntimeError
    (lambda: tl.DecoderOnlyLM(10, init_std=0.0), "init_std"),
    (lambda: tl.DecoderOnlyLM(10, norm_eps=0.0), "norm_eps"),
    (lambda: tl.DecoderOnlyLM(10, num_heads=4, num_kv_heads=3), "num_kv_heads"),
])
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("kwargs, name", [
    ({"d_model": -16}, "d_model"), ({"num_layers": -1}, "num_layers"), ({"num_layers": 0}, "num_layers"),
    ({"num_heads": 0}, "num_heads"), ({"d_ff": -4}, "d_ff"), ({"max_len": 0}, "max_len"),
])
def test_a_negative_width_or_layer_count_does_not_build_an_empty_model(kwargs, name):
    with pytest.raises(ValueError, match=name):
        tl.DecoderOnlyLM(10, **kwargs)


@pytest.mark.parametrize("tokens, error, message", [
    (torch.tensor([[1.0, 2.0]]), ValueError, "integer token ids"),  # floats used to fail inside nn.Embedding
    (torch.tensor([[1, 10]]), ValueError, r"\[0, 10\)"),
    (torch.tensor([[-1, 2]]), ValueError, r"\[0, 10\)"),
    (torch.tensor([1, 2]), ValueError, r"\(B, L\)"),
    ([[1, 2]], TypeError, "torch.Tensor"),
])
def test_decoder_only_lm_checks_its_tokens(tokens, error, message):
    lm = tl.DecoderOnlyLM(10, 16, 2, 1)
    with pytest.raises(error, match=message):
        lm(tokens)


@settings(max_examples=25, deadline=None)
@given(vocab=st.integers(2, 40), L=st.integers(1, 12), bad=st.integers(-5, 5), seed=st.integers(0, 1000))
def test_any_id_outside_the_vocabulary_is_named(vocab, L, bad, seed):
    lm = tl.DecoderOnlyLM(vocab, 8, 2, 1, max_len=16)
    tokens = torch.randint(0, vocab, (1, L), generator=torch.Generator().manual_seed(seed))
    tokens[0, seed % L] = bad if bad < 0 else vocab + bad  # one id out of range
    with pytest.raises(ValueError, match="tokens must lie in"):
        lm(tokens)


def test_state_dict_keys_of_the_shipped_checkpoint_still_load():
    from transformer_lib.data import load_gpt_checkpoint
    model, _, _ = load_gpt_checkpoint()  # load_state_dict is strict: every key must match
    assert len(model.blocks) >= 1 and model.new_cache().num_layers == len(model.blocks)


# -- Seq2SeqTransformer: one parallel pass equals prefix-by-prefix decoding (chapter 13) -----------

def test_one_parallel_pass_equals_prefix_by_prefix_decoding():
    torch.manual_seed(3)
    model = tl.Seq2SeqTransformer(13, 13, d_model=32, num_heads=4, num_encoder_layers=1,
                                  num_decoder_layers=2, d_ff=64).eval()
    src, tgt = torch.randint(3, 13, (3, 7)), torch.randint(3, 13, (3, 6))
    tgt_in = tasks.shift_right(tgt)
    with torch.no_grad():
        parallel = model(src, tgt_in)
        memory = model.encode(src)
        incremental = torch.stack([model.decode(tgt_in[:, :t + 1], memory)[:, -1] for t in range(6)], dim=1)
    torch.testing.assert_close(parallel, incremental, atol=1e-5, rtol=1e-5)


# -- parity with torch.nn.Transformer (float32, 1e-5) ----------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch_first, norm_first, activation", CONFIGS)
def test_transformer_matches_torch(device, batch_first, norm_first, activation):
    B, Ls, Lt, D, H, F = 2, 6, 5, 32, 4, 64
    ref = nn.Transformer(D, H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=F, dropout=0.0,
                         activation=activation, batch_first=batch_first, norm_first=norm_first).to(device).eval()
    ours = tl.Transformer.from_torch(ref).eval()
    src, tgt = torch.randn(B, Ls, D, device=device), torch.randn(B, Lt, D, device=device)
    src_mask = tl.padding_mask([Ls, 4], Ls, device=device)
    src_kpm = ~src_mask[:, 0, 0, :]
    causal = tl.causal_mask(Lt, device=device)
    expected = ref(to_bf(src, batch_first), to_bf(tgt, batch_first), tgt_mask=tl.to_torch_mha_mask(causal),
                   src_key_padding_mask=src_kpm, memory_key_padding_mask=src_kpm)
    out = ours(src, tgt, src_mask=src_mask, tgt_mask=causal, memory_mask=src_mask)
    assert torch.allclose(out, to_bf(expected, batch_first), atol=ATOL)
    assert tl.count_parameters(ours) == sum(p.numel() for p in ref.parameters())


def test_qk_norm_equals_qwen3_with_copied_weights():
    """QK-norm (qk_norm=True: RMSNorm of each head's q and k over head_dim, before RoPE) is Qwen3's
    attention: a small Qwen3 from transformers with random weights, copied into a DecoderOnlyLM with
    Llama's switches plus qk_norm, gives the same logits (float32 up to summation order: 1e-5)."""
    transformers = pytest.importorskip("transformers")
    from transformer_lib.model import LLAMA_SWITCHES
    cfg = transformers.Qwen3Config(vocab_size=53, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-6,
                                   tie_word_embeddings=True, max_position_embeddings=64,
                                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    torch.manual_seed(0)
    ref = transformers.Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in ref.parameters():
            if p.dim() == 1:  # the norms' gains start at one: draw them, so that each one is checked
                p.normal_(1.0, 0.2)
    ours = tl.DecoderOnlyLM(53, 32, 4, 2, d_ff=64, max_len=64, num_kv_heads=2, norm_eps=1e-6, qk_norm=True,
                         **LLAMA_SWITCHES).eval()
    names = {"input_layernorm": "norm1", "post_attention_layernorm": "norm2", "self_attn.q_proj": "self_attn.q_proj",
             "self_attn.k_proj": "self_attn.k_proj", "self_attn.v_proj": "self_attn.v_proj",
             "self_attn.o_proj": "self_attn.out_proj", "self_attn.q_norm": "self_attn.q_norm",
             "self_attn.k_norm": "self_attn.k_norm", "mlp.gate_proj": "ffn.linear1", "mlp.up_proj": "ffn.linear3",
             "mlp.down_proj": "ffn.linear2"}
    state = {"embed.weight": ref.model.embed_tokens.weight, "norm.weight": ref.model.norm.weight,
             "head.weight": ref.model.embed_tokens.weight}
    for i in range(2):
        for theirs, mine in names.items():
            state[f"blocks.{i}.{mine}.weight"] = ref.state_dict()[f"model.layers.{i}.{theirs}.weight"]
    ours.load_state_dict(state)
    tokens = torch.randint(0, 53, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(ours(tokens), ref(tokens).logits, atol=1e-5)
        q_norm = ours.blocks[0].self_attn.q_norm
        q_norm.weight.mul_(3.0)  # the switch matters: a changed gain changes the logits
        assert not torch.allclose(ours(tokens), ref(tokens).logits, atol=1e-3)


@pytest.mark.parametrize("switches", [dict(positional="rope"), dict(positional="rope", num_kv_heads=1, norm="rms",
                                                                    activation="swiglu", bias=False, norm_first=True),
                                      dict(positional="learned", num_kv_heads=2), dict(positional="none")])
def test_the_encoder_decoder_takes_the_decoders_switches(switches):
    """Seq2SeqTransformer with RoPE (self-attention only), grouped-query attention, RMSNorm, SwiGLU:
    cached decoding equals the full forward (greedy generation with and without the cache), and RoPE
    makes the model depend on position even with no position table."""
    torch.manual_seed(0)
    model = tl.Seq2SeqTransformer(13, 17, d_model=32, num_heads=4, d_ff=64, **switches).eval()
    attn = model.transformer.decoder.blocks[0].self_attn
    assert attn.num_kv_heads == switches.get("num_kv_heads", 4)
    assert (attn.rotary is not None) == (switches["positional"] == "rope")
    assert model.transformer.decoder.blocks[0].cross_attn.rotary is None
    src = torch.randint(0, 13, (2, 7), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(0, 17, (2, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(src, tgt)
        dec = model.conditioned_on(src)
        cache = dec.new_cache()
        steps = torch.cat([dec(tgt[:, :2], cache=cache)] + [dec(tgt[:, t:t + 1], cache=cache) for t in range(2, 6)], 1)
        torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)
        assert torch.equal(generate(dec, tgt[:, :1], 5), generate(dec, tgt[:, :1], 5, use_cache=False))
        if switches["positional"] == "rope":  # the same tokens in another order: other outputs
            assert not torch.allclose(model(src.flip(1), tgt), full, atol=1e-3)
