"""probes.record_attention on every model family of the library: the same records (weights
(B, H, L_q, L_k), rows summing to one where a key is visible), the same outputs as an unrecorded
run (to float rounding with weights=True, which switches to the readable path; exactly with
weights=False), and hooks removed afterwards; the hook points of both decoders; mask_kind, which
names a mask's pattern, and dependency_map against a loop of backward passes (chapter 13).

Tolerance 1e-5: the readable path and SDPA sum the same float32 products in another order; the
models are small (width <= 32, <= 3 blocks, O(1) activations).
"""
import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib import tasks
from transformer_lib.masks import prefix_lm_mask
from transformer_lib.pretrained import BertEncoder, MiniLMConfig
from transformer_lib.pretrained.llama import LlamaConfig, llama_decoder
from transformer_lib.probes import dependency_map, head_scores, input_gradient_norms, mask_kind, record_attention
from transformer_lib.rnn import RNNClassifier
from transformer_lib.tasks import LOOKUP_TASKS as TASKS
from transformer_lib.tasks import answer_keys, recall_first_batch, three_lookups_batch
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
        ("grouped-query (MultiHeadAttention, 2 key/value heads)", tl.MultiHeadAttention(16, 4, 2), (torch.randn(2, 7, 16),), 1, 4),
        ("the reader's GPT (DecoderOnlyLM, RoPE)", tl.DecoderOnlyLM(17, 16, 4, 3, positional="rope"), (tokens,), 3, 4),
        ("the reader's GPT (DecoderOnlyLM, ALiBi)", tl.DecoderOnlyLM(17, 16, 4, 2, positional="alibi"), (tokens,), 2, 4),
        ("encoder-decoder (Seq2SeqTransformer)", tl.Seq2SeqTransformer(17, 17, 16, 4, d_ff=32), (src, tgt), 2 + 2 * 2, 4),
        ("SmolLM2's configuration (DecoderOnlyLM)", llama_decoder(llama_cfg), (tokens,), 2, 4),
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
    model = llama_decoder(cfg).eval()
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
    return {"DecoderOnlyLM": gpt, "llama": llama_decoder(cfg).eval()}


@pytest.mark.parametrize("name", ["DecoderOnlyLM", "llama"])
def test_blocks_i_is_the_residual_stream_after_block_i_in_both_decoders(name):
    from transformer_lib.probes import patch_activations, record_activations
    model = _two_decoders()[name]
    tokens = torch.randint(0, 17, (2, 6))
    with torch.no_grad():
        with record_activations(model, ["blocks.0", "blocks.2"]) as acts:
            logits = model(tokens)
        x = model.embed(tokens)  # (B, L, D); both use RoPE inside attention, no added positions
        by_hand = model.blocks[0](x, mask=tl.causal_mask(6))
        torch.testing.assert_close(acts["blocks.0"], by_hand, atol=1e-6, rtol=0)  # (B, L, D) after block 0
        last = model.norm(acts["blocks.2"])  # the final norm, then the (tied) output matrix
        head = last @ model.embed.weight.T  # tied: the head is the embedding's transpose in both
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


# -- the hook points: the same names on both decoders (issue #29) --------------------------------------

HOOKS = ("hook_attn_out", "hook_ffn_out", "hook_z", "hook_pattern", "hook_resid_post")


def _copy_without_head(model, layer, head):
    """A deep copy of ``model`` whose head ``head`` of block ``layer`` has its W^O columns zeroed:
    the by-hand zero ablation to compare the hook_z patch with."""
    import copy
    other = copy.deepcopy(model)
    attn = other.blocks[layer].self_attn
    d = attn.out_proj.weight.shape[1] // attn.num_heads
    with torch.no_grad():
        attn.out_proj.weight[:, head * d:(head + 1) * d] = 0.0
    return other


@pytest.mark.parametrize("name", ["DecoderOnlyLM", "llama"])
def test_hook_points_have_their_shapes_and_add_up_to_the_residual_stream(name):
    from transformer_lib.probes import head_contributions, hook_points, record_activations
    model = _two_decoders()[name]
    B, L, D, H = 2, 6, 16, 4
    tokens = torch.randint(0, 17, (B, L))
    names = hook_points(model)
    assert names == [f"blocks.{i}" + s for i in range(3) for s in ("", *(f".{h}" for h in HOOKS))]
    assert not any("hook" in k for k in model.state_dict()), "hook points must add no state-dict key"
    with torch.no_grad():
        plain = model(tokens)
        with record_activations(model, [n for n in names if not n.endswith("hook_pattern")]) as acts:
            same = model(tokens)
        assert torch.equal(same, plain), "recording (without the pattern) must change nothing"
        x = model.embed(tokens)  # the stream before block 0 (RoPE: no added positions)
        for i in range(3):
            a, f, z = acts[f"blocks.{i}.hook_attn_out"], acts[f"blocks.{i}.hook_ffn_out"], acts[f"blocks.{i}.hook_z"]
            assert a.shape == f.shape == (B, L, D) and z.shape == (B, L, H, D // H)
            # pre-norm: the block adds its two contributions to the stream it received
            torch.testing.assert_close(x + a + f, acts[f"blocks.{i}"], atol=1e-6, rtol=0)
            per_head = head_contributions(model, i, z)  # (B, L, H, D)
            bias = model.blocks[i].self_attn.out_proj.bias if name == "DecoderOnlyLM" else None
            total = per_head.sum(2) + (0 if bias is None else bias)
            torch.testing.assert_close(total, a, atol=1e-6, rtol=0)
            x = acts[f"blocks.{i}"]


@pytest.mark.parametrize("name", ["DecoderOnlyLM", "llama"])
def test_hook_pattern_is_what_record_attention_sees(name):
    from transformer_lib.probes import record_activations
    model = _two_decoders()[name]
    tokens = torch.randint(0, 17, (2, 6))
    with torch.no_grad():
        plain = model(tokens)
        with record_attention(model, weights=True) as calls:
            model(tokens)
        with record_activations(model, [f"blocks.{i}.hook_pattern" for i in range(3)]) as acts:
            patterned = model(tokens)
        assert torch.equal(model(tokens), plain)  # the readable path is switched off again
    torch.testing.assert_close(patterned, plain, atol=ATOL, rtol=0)  # readable path: float rounding only
    for i, call in enumerate(calls):
        p = acts[f"blocks.{i}.hook_pattern"]
        assert p.shape == (2, 4, 6, 6)
        torch.testing.assert_close(p, call.weights, atol=1e-6, rtol=0)
        assert (p.triu(1) == 0).all(), "causal: no weight on later tokens"
        torch.testing.assert_close(p.sum(-1), torch.ones(2, 4, 6), atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", ["DecoderOnlyLM", "llama"])
@pytest.mark.parametrize("layer, head", [(0, 1), (2, 3)])
def test_zeroing_a_head_in_hook_z_is_zeroing_its_columns_of_W_O(name, layer, head):
    from transformer_lib.probes import patch_activations

    def ablate(z):  # (B, L, H, d_head)
        z = z.clone()
        z[..., head, :] = 0.0
        return z

    model = _two_decoders()[name]
    tokens = torch.randint(0, 17, (2, 6))
    with torch.no_grad():
        clean = model(tokens)
        with patch_activations(model, {f"blocks.{layer}.hook_z": ablate}):
            ablated = model(tokens)
        by_hand = _copy_without_head(model, layer, head)(tokens)
        assert torch.equal(model(tokens), clean)
    torch.testing.assert_close(ablated, by_hand, atol=1e-5, rtol=0)
    assert (ablated - clean).abs().max() > 1e-3, "ablating a head of a random model changes its logits"


@pytest.mark.parametrize("name", ["DecoderOnlyLM", "llama"])
def test_patching_any_hook_point_with_its_clean_value_gives_the_clean_logits(name):
    from transformer_lib.probes import hook_points, patch_activations, record_activations
    model = _two_decoders()[name]
    clean_tokens, corrupt_tokens = torch.randint(0, 17, (2, 6)), torch.randint(0, 17, (2, 6))
    names = [n for n in hook_points(model) if not n.endswith("hook_pattern")]
    with torch.no_grad():
        with record_activations(model, names) as clean:
            clean_logits = model(clean_tokens)
        corrupt_logits = model(corrupt_tokens)
        assert not torch.allclose(clean_logits, corrupt_logits)
        for i in range(3):  # the later blocks see only the stream: a corrupted run becomes the clean one
            with patch_activations(model, {f"blocks.{i}": clean[f"blocks.{i}"]}):
                patched = model(corrupt_tokens)
            torch.testing.assert_close(patched, clean_logits, atol=1e-5, rtol=0)
        with patch_activations(model, {f"blocks.{i}.hook_z": clean[f"blocks.{i}.hook_z"] for i in range(3)}):
            patched = model(corrupt_tokens)  # every head clean, the FFNs still see the corrupted stream
        assert not torch.allclose(patched, clean_logits) and not torch.allclose(patched, corrupt_logits)
        with patch_activations(model, {"blocks.1": clean["blocks.1"]}):
            assert torch.equal(model(clean_tokens), clean_logits)  # its own value: the clean logits, exactly
        assert torch.equal(model(corrupt_tokens), corrupt_logits), "nothing stays hooked"


@pytest.mark.parametrize("name", ["DecoderOnlyLM", "llama"])
def test_nothing_stays_hooked_after_an_exception_and_bad_names_are_named(name):
    from transformer_lib.probes import patch_activations, record_activations
    model = _two_decoders()[name]
    tokens = torch.randint(0, 17, (1, 5))
    with torch.no_grad():
        plain = model(tokens)
        with pytest.raises(RuntimeError, match="inside"):
            with record_activations(model, ["blocks.0.hook_z", "blocks.1.hook_pattern"]):
                model(tokens)
                raise RuntimeError("raised inside the with block")
        with pytest.raises(RuntimeError, match="inside"):
            with patch_activations(model, {"blocks.0.hook_z": torch.zeros_like}):
                raise RuntimeError("raised inside the with block")
        assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
        assert torch.equal(model(tokens), plain)
    with pytest.raises(ValueError, match="'blocks.0.hook_q'"):
        with record_activations(model, ["blocks.0", "blocks.0.hook_q"]):
            pass
    with pytest.raises(ValueError, match="'blocks.7.hook_z'"):
        with patch_activations(model, {"blocks.7.hook_z": torch.zeros_like}):
            pass
    with pytest.raises(ValueError, match="recorded only"):
        with patch_activations(model, {"blocks.0.hook_pattern": torch.zeros_like}):
            pass
    with pytest.raises(TypeError, match="patches"):
        with patch_activations(model, {"blocks.0.hook_z": 3.0}):
            pass
    with pytest.raises(TypeError, match="names"):
        with record_activations(model, ["blocks.0", 1]):
            pass


@pytest.mark.parametrize("name", ["DecoderOnlyLM", "llama"])
def test_hook_points_work_with_and_without_the_kv_cache(name):
    from transformer_lib.probes import record_activations
    model = _two_decoders()[name]
    tokens = torch.randint(0, 17, (1, 6))
    with torch.no_grad():
        with record_activations(model, ["blocks.1.hook_z", "blocks.1.hook_attn_out"]) as full:
            model(tokens)
        cache = model.new_cache()
        model(tokens[:, :5], cache=cache)
        with record_activations(model, ["blocks.1.hook_z", "blocks.1.hook_attn_out"]) as step:
            model(tokens[:, 5:], cache=cache)  # one new token
    assert step["blocks.1.hook_z"].shape == (1, 1, 4, 4)
    torch.testing.assert_close(step["blocks.1.hook_z"][:, 0], full["blocks.1.hook_z"][:, -1], atol=1e-5, rtol=0)
    torch.testing.assert_close(step["blocks.1.hook_attn_out"][:, 0], full["blocks.1.hook_attn_out"][:, -1],
                               atol=1e-5, rtol=0)


def test_head_contributions_checks_its_input():
    from transformer_lib.probes import head_contributions
    model = _two_decoders()["DecoderOnlyLM"]
    with pytest.raises(ValueError, match="layer"):
        head_contributions(model, 3, torch.zeros(1, 2, 4, 4))
    with pytest.raises(ValueError, match="z must be"):
        head_contributions(model, 0, torch.zeros(1, 2, 16))
    with pytest.raises(TypeError, match="z must be"):
        head_contributions(model, 0, [[0.0]])
    with pytest.raises(TypeError, match="model"):
        head_contributions("gpt", 0, torch.zeros(1, 2, 4, 4))


def _hooked_transformer_like(model):
    """A TransformerLens HookedTransformer (attention only, LayerNorm, learned positions) holding
    ``model``'s weights, written out name by name (TransformerLens keeps per-head weight tensors)."""
    tlens = pytest.importorskip("transformer_lens", reason="test extra: transformer-lens>=3,<4")
    D, H = model.embed.embedding_dim, model.num_heads
    d = D // H
    cfg = tlens.HookedTransformerConfig(
        n_layers=len(model.blocks), d_model=D, n_ctx=model.pos.max_len, d_head=d, n_heads=H,
        d_vocab=model.embed.num_embeddings, attn_only=True, normalization_type="LN", eps=1e-5,
        positional_embedding_type="standard", act_fn="gelu", default_prepend_bos=False, device="cpu", seed=0)
    ref = tlens.HookedTransformer(cfg).eval()
    state = {"embed.W_E": model.embed.weight, "pos_embed.W_pos": model.pos.embedding.weight,
             "ln_final.w": model.norm.weight, "ln_final.b": model.norm.bias,
             "unembed.W_U": model.head.weight.T, "unembed.b_U": torch.zeros(cfg.d_vocab)}
    for i, block in enumerate(model.blocks):
        a = block.self_attn
        for ours, theirs in ((a.q_proj, "Q"), (a.k_proj, "K"), (a.v_proj, "V")):
            state[f"blocks.{i}.attn.W_{theirs}"] = ours.weight.view(H, d, D).transpose(1, 2)  # (H, D, d)
            state[f"blocks.{i}.attn.b_{theirs}"] = ours.bias.view(H, d)
        state[f"blocks.{i}.attn.W_O"] = a.out_proj.weight.T.reshape(H, d, D)  # rows of W_O^T per head
        state[f"blocks.{i}.attn.b_O"] = a.out_proj.bias
        state[f"blocks.{i}.ln1.w"], state[f"blocks.{i}.ln1.b"] = block.norm1.weight, block.norm1.bias
    missing, unexpected = ref.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=False)
    assert not unexpected and all(k.endswith(("IGNORE", "mask")) for k in missing), (missing, unexpected)
    return ref


@pytest.mark.filterwarnings("ignore:HookedTransformer is deprecated:DeprecationWarning")
def test_hook_z_and_hook_pattern_match_transformer_lens():
    """Reference: TransformerLens's own attention-only model with the same weights (float32)."""
    from transformer_lib.probes import record_activations
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(23, 32, 4, 2, max_len=16, ffn=False, positional="learned").eval()
    ref = _hooked_transformer_like(model)
    tokens = torch.randint(0, 23, (3, 12))
    names = [f"blocks.{i}.{h}" for i in range(2) for h in ("hook_z", "hook_pattern", "hook_attn_out")]
    with torch.no_grad():
        with record_activations(model, names) as ours:
            logits = model(tokens)
        theirs_logits, cache = ref.run_with_cache(tokens)
    torch.testing.assert_close(logits, theirs_logits, atol=1e-4, rtol=1e-4)
    for i in range(2):
        torch.testing.assert_close(ours[f"blocks.{i}.hook_z"], cache[f"blocks.{i}.attn.hook_z"], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(ours[f"blocks.{i}.hook_pattern"], cache[f"blocks.{i}.attn.hook_pattern"],
                                   atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(ours[f"blocks.{i}.hook_attn_out"], cache[f"blocks.{i}.hook_attn_out"],
                                   atol=1e-5, rtol=1e-4)


def test_every_block_family_has_the_same_hook_points():
    """Issue 39: the reader's GPT, SmolLM2's configuration, MiniLM's encoder and both stacks of the
    encoder-decoder name their hook points alike, and each sees its (B, L, ...) tensor."""
    from transformer_lib.layers import HOOK_POINTS
    families = [(name, model, inputs) for name, model, inputs, _, _ in _families()
                if name.split(" (")[0] in ("the reader's GPT", "encoder-decoder", "SmolLM2's configuration",
                                           "MiniLM's encoder")]
    assert len(families) == 5
    for name, model, inputs in families:
        seen = {}
        handles = [getattr(block, h).register_forward_hook(
            lambda m, args, out, key=(i, h): seen.__setitem__(key, out)) for i, block in enumerate(model.blocks)
            for h in HOOK_POINTS]
        try:
            with torch.no_grad():
                model.eval()(*inputs)
        finally:
            for handle in handles:
                handle.remove()
        assert set(seen) == {(i, h) for i in range(len(model.blocks)) for h in HOOK_POINTS}, name
        for i in range(len(model.blocks)):
            assert seen[i, "hook_z"].shape[2] == 4 and seen[i, "hook_pattern"].shape[1] == 4, name
            assert seen[i, "hook_attn_out"].shape == seen[i, "hook_resid_post"].shape, name


# -- mask_kind, record_attention's three calls of an encoder-decoder (chapter 13) ------------------

def test_mask_kind_names_each_pattern():
    L = 6
    assert mask_kind(None) == "full"
    assert mask_kind(torch.ones(3, 5, dtype=torch.bool)) == "full"
    assert mask_kind(tl.causal_mask(L)) == "causal"
    assert mask_kind(tl.causal_mask(3, 5)) == "causal"  # aligned to the end, as with a KV cache
    pad = tl.padding_mask([4], L)[0, 0].expand(L, L)  # (L, L): keys 4, 5 are padding
    assert mask_kind(pad) == "padding"
    assert mask_kind(pad & tl.causal_mask(L)) == "causal + padding"
    assert mask_kind(prefix_lm_mask(3, L)) == "prefix LM (3)"
    assert mask_kind(tl.sliding_window_mask(L, 3)) == "custom"
    with pytest.raises(ValueError, match="2-D boolean"):
        mask_kind(torch.ones(2, L, L, dtype=torch.bool))
    with pytest.raises(ValueError, match="2-D boolean"):
        mask_kind(torch.ones(L, L))


def test_record_attention_sees_the_three_calls_of_an_encoder_decoder():
    model = tl.Seq2SeqTransformer(13, 13, d_model=16, num_heads=2, num_encoder_layers=2,
                                  num_decoder_layers=1, d_ff=32).eval()
    src, tgt = torch.randint(3, 13, (2, 7)), torch.randint(3, 13, (2, 4))
    with record_attention(model) as calls, torch.no_grad():
        model(src, tasks.shift_right(tgt), src_lengths=[7, 5])
    summary = [(c.name, c.kind, c.mask_kind, c.shapes) for c in calls]
    assert summary == [
        ("transformer.encoder.blocks.0.self_attn", "self", "padding", "7 x 7"),
        ("transformer.encoder.blocks.1.self_attn", "self", "padding", "7 x 7"),
        ("transformer.decoder.blocks.0.self_attn", "self", "causal", "4 x 4"),
        ("transformer.decoder.blocks.0.cross_attn", "cross", "padding", "4 x 7"),
    ]
    cross = calls[-1]
    assert cross.masks.shape == (2, 4, 7) and cross.mask_given
    assert cross.mask.all() and not cross.masks[1, :, 5:].any()  # sequence 1 has 2 pads
    assert cross.query.shape == (2, 4, 16) and cross.key.shape == (2, 7, 16)
    with torch.no_grad():
        memory = model.encode(src, [7, 5])
    assert torch.equal(cross.key, memory) and torch.equal(cross.value, memory)
    assert calls[0].mask_given and calls[2].mask_given  # padding in the encoder, causal in the decoder


def test_record_attention_weights_are_the_modules_own_and_the_fast_path_agrees():
    torch.manual_seed(0)
    layer = tl.DecoderLayer(16, 4, 32).eval()
    x, memory, causal = torch.randn(2, 5, 16), torch.randn(2, 7, 16), tl.causal_mask(5)
    with torch.no_grad():
        fast = layer(x, memory, causal)
        with record_attention(layer) as calls:
            assert torch.equal(layer(x, memory, causal), fast)  # recording without weights changes nothing
        assert [c.weights for c in calls] == [None, None]
        with record_attention(layer, weights=True) as calls:
            readable = layer(x, memory, causal)
        self_call, cross_call = calls
        _, expected = layer.cross_attn(cross_call.query, memory, memory, need_weights=True)
    assert torch.equal(cross_call.weights, expected) and cross_call.weights.shape == (2, 4, 5, 7)
    assert self_call.weights.shape == (2, 4, 5, 5) and not self_call.weights.triu(1).any()  # causal
    assert torch.allclose(readable, fast, atol=1e-5)  # readable and fused paths agree (float32 rounding)


def test_record_attention_removes_its_hooks_and_checks_its_input():
    model = tl.DecoderOnlyLM(11, d_model=16, num_heads=2, num_layers=1)
    with record_attention(model) as calls:
        model(torch.randint(0, 11, (1, 5)))
    assert [c.mask_kind for c in calls] == ["causal"]
    model(torch.randint(0, 11, (1, 5)))
    assert len(calls) == 1, "hooks must be removed when the block ends"
    with pytest.raises(ValueError, match="no attention module"):
        with record_attention(torch.nn.Linear(2, 2)):
            pass
    with pytest.raises(TypeError, match="nn.Module"):
        with record_attention("model"):
            pass


# -- dependency_map (chapter 13) -------------------------------------------------------------------

def test_dependency_map_equals_a_loop_of_backward_passes_and_is_zero_exactly_where_masked():
    torch.manual_seed(2)
    block = tl.TransformerBlock(16, 2, 32).eval()
    x = torch.randn(6, 16)
    fn = lambda z: block(z[None], tl.causal_mask(6))[0]  # (6, 16)
    dep = dependency_map(fn, x)
    reference = torch.zeros(6, 6)
    for t in range(6):
        for f in range(16):
            z = x.clone().requires_grad_(True)
            fn(z)[t, f].backward()
            reference[t] = torch.maximum(reference[t], z.grad.abs().amax(dim=1))
    torch.testing.assert_close(dep, reference, atol=1e-6, rtol=1e-5)
    assert torch.equal(dep > 0, tl.causal_mask(6))


def test_dependency_map_rejects_bad_shapes():
    with pytest.raises(ValueError, match="one sequence"):
        dependency_map(lambda z: z, torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="L_out, D_out"):
        dependency_map(lambda z: z.sum(), torch.randn(3, 4))


# -- input_gradient_norms: the gradient reaching each input position (chapter 9) -------------------

@pytest.mark.parametrize("kind", ["tf", "rnn", "elman"])
def test_input_gradient_norms_match_manual_autograd(kind):
    tl.seed_everything(0)
    V, C, L = 11, 8, 9
    model = (TransformerClassifier(V, 16, C, max_len=L) if kind == "tf" else RNNClassifier(V, 16, C, kind=kind))
    tokens, labels = recall_first_batch(4, L, V, C, generator=torch.Generator().manual_seed(1))
    got = input_gradient_norms(model, tokens, labels)
    assert all(p.grad is None for p in model.parameters())  # parameter gradients untouched
    # by hand: embed, detach into a leaf, run the rest of the model on it
    e = model.embed(tokens).detach().requires_grad_(True)
    if kind == "tf":
        x = model.pos(e)
        for layer in model.blocks:
            x = layer(x)
        logits = model.head(model.norm(x[:, -1]))
    else:
        logits = model.head(model.rnn(e)[0][:, -1])
    F.cross_entropy(logits, labels).backward()
    torch.testing.assert_close(got, e.grad.norm(dim=-1).mean(0), atol=1e-6, rtol=1e-5)


def test_rnn_gradient_vanishes_with_distance_attention_does_not():
    tl.seed_everything(0)
    V, C, L = 11, 8, 40
    tokens, labels = recall_first_batch(32, L, V, C, generator=torch.Generator().manual_seed(1))
    g_rnn = input_gradient_norms(RNNClassifier(V, 32, C, kind="rnn"), tokens, labels)
    g_tf = input_gradient_norms(TransformerClassifier(V, 32, C, max_len=L), tokens, labels)
    assert g_rnn[0] / g_rnn[-2] < 1e-6
    assert 0.2 < g_tf[0] / g_tf[-2] < 5


def test_input_gradient_norms_errors():
    with pytest.raises(ValueError, match="embed"):
        input_gradient_norms(torch.nn.Linear(3, 3), torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, dtype=torch.long))
    model = RNNClassifier(11, 8, 4, kind="rnn")
    with pytest.raises(ValueError, match="labels"):
        input_gradient_norms(model, torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, dtype=torch.long))


# -- head_scores (chapter 3) -----------------------------------------------------------------------

def test_head_scores_are_one_for_perfect_heads_and_uniform_heads_score_lower():
    tokens, _ = three_lookups_batch(8, 10, 5, torch.Generator().manual_seed(0))
    keys = answer_keys(tokens)
    perfect = torch.stack([keys[t].float() / keys[t].float().sum(-1, keepdim=True).clamp_min(1) for t in TASKS],
                          dim=1)  # (B, 3, L, L): head h attends evenly to task h's answer keys
    scores = head_scores(perfect, tokens)
    for h, task in enumerate(TASKS):
        assert scores[task][h].item() == pytest.approx(1.0, abs=1e-6)
    uniform = torch.tril(torch.ones(10, 10))
    uniform = (uniform / uniform.sum(-1, keepdim=True)).expand(8, 1, 10, 10)
    assert head_scores(uniform, tokens)["previous"].item() < 0.5
