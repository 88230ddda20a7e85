"""transformer_lib.induction: the repeated-token data, the head scores against patterns and
weights built by hand, and ablation through hook_z against a model whose head is cut out of W^O.
Tolerances: float32 sums of <= 24 x 32 products (1e-5), eigenvalues in float64 (1e-4)."""
import copy

import math

import pytest
import torch
from hypothesis import given, strategies as st

import transformer_lib as tl
from transformer_lib import induction as ind


def _model(layers=2, seed=0):
    torch.manual_seed(seed)
    return tl.DecoderOnlyLM(19, 16, 4, layers, max_len=24, ffn=False, init_std=0.3).eval()


@given(st.integers(1, 5), st.integers(2, 12), st.integers(2, 40), st.booleans(), st.integers(0, 2**16))
def test_repeated_random_tokens_repeat_a_block_and_mark_its_targets(B, half, V, vary, seed):
    L = 2 * half
    g = torch.Generator().manual_seed(seed)
    tokens, in_context = ind.repeated_random_tokens(B, L, V, min_repeat=2 if vary else None, generator=g)
    assert tokens.shape == (B, L) and in_context.shape == (B, L - 1)
    assert tokens.min() >= 0 and tokens.max() < V
    for b in range(B):
        marked = in_context[b].nonzero().flatten() + 1  # target positions in the repeat (not its first)
        start = int(marked[0]) - 1 if len(marked) else L - 1
        k = L - start  # block length
        assert 2 <= k <= half and (k == half or vary)
        assert torch.equal(tokens[b, start:], tokens[b, start - k:start]), "the repeat copies the block before it"
        assert torch.equal(marked, torch.arange(start + 1, L))


def test_repeated_random_tokens_rejects_bad_input():
    with pytest.raises(ValueError, match="length"):
        ind.repeated_random_tokens(2, 7, 10)
    with pytest.raises(ValueError, match="min_repeat"):
        ind.repeated_random_tokens(2, 8, 10, min_repeat=5)
    with pytest.raises(ValueError, match="vocab_size"):
        ind.repeated_random_tokens(2, 8, 1)
    with pytest.raises(TypeError, match="generator"):
        ind.repeated_random_tokens(2, 8, 10, generator=3)


def test_scores_of_hand_made_patterns():
    L, half = 10, 5
    prev = torch.zeros(1, 1, L, L)
    prev[0, 0, 0, 0] = 1.0
    prev[0, 0, torch.arange(1, L), torch.arange(L - 1)] = 1.0  # every query on its previous token
    induct = torch.zeros(1, 1, L, L)
    induct[0, 0, :, 0] = 1.0
    q = torch.arange(half, L)
    induct[0, 0, q] = 0.0
    induct[0, 0, q, q - half + 1] = 1.0  # the token after the earlier copy
    uniform = torch.tril(torch.ones(L, L)) / torch.arange(1, L + 1)[:, None]
    patterns = torch.cat([prev, induct, uniform[None, None]], dim=1)  # (1, 3, L, L)
    torch.testing.assert_close(ind.previous_token_scores(patterns), torch.tensor([1.0, 1 / 9 * 1, 1 / 9 * sum(1 / t for t in range(2, 11))]),
                               atol=1e-6, rtol=0)
    torch.testing.assert_close(ind.induction_scores(patterns, half)[:2], torch.tensor([0.0, 1.0]), atol=1e-6, rtol=0)
    assert ind.top_heads(ind.induction_scores(patterns, half)[None], 1)[0][0] == "0.1"
    with pytest.raises(ValueError, match="half"):
        ind.induction_scores(patterns, L)


def test_zero_ablation_through_hook_z_equals_cutting_the_head_out_of_W_O():
    model = _model()
    tokens, in_context = ind.repeated_random_tokens(3, 12, 19, generator=torch.Generator().manual_seed(1))
    zero = ind.ablated_losses(model, tokens, in_context, "zero")
    mean = ind.ablated_losses(model, tokens, in_context, "mean")
    assert zero.shape == mean.shape == (2, 4)
    for layer, head in [(0, 2), (1, 0)]:
        other = copy.deepcopy(model)
        w = other.blocks[layer].self_attn.out_proj.weight
        with torch.no_grad():
            w[:, head * 4:(head + 1) * 4] = 0.0
            expected = ind.in_context_loss(other(tokens), tokens, in_context)
        torch.testing.assert_close(zero[layer, head], expected, atol=1e-5, rtol=0)
    assert not torch.allclose(zero, mean)
    with pytest.raises(ValueError, match="kind"):
        ind.ablated_losses(model, tokens, in_context, "random")


def test_copying_score_is_the_eigenvalue_ratio_of_the_full_ov_circuit():
    model = _model()
    for layer in range(2):
        circuit = ind.ov_circuit(model, layer).double()  # (H, V, V)
        eig = torch.linalg.eigvals(circuit)  # the V x V eigenvalues, computed directly
        expected = eig.sum(-1).real / eig.abs().sum(-1)
        torch.testing.assert_close(ind.copying_scores(model, layer).double(), expected, atol=1e-4, rtol=0)
    scores = ind.copying_scores(model, 0)
    assert ((scores >= -1) & (scores <= 1)).all()


def test_head_weights_and_k_composition_by_hand():
    model = _model()
    D, d = 16, 4
    a0, a1 = model.blocks[0].self_attn, model.blocks[1].self_attn
    scores = ind.k_composition_scores(model, 0, 1)
    assert scores.shape == (4, 4)
    for h1 in range(4):
        for h2 in range(4):
            rows, cols = slice(h1 * d, (h1 + 1) * d), slice(h2 * d, (h2 + 1) * d)
            ov = a0.v_proj.weight[rows].T @ a0.out_proj.weight[:, rows].T  # (D, D), x -> x W_V W_O
            qk = a1.q_proj.weight[cols].T @ a1.k_proj.weight[cols]  # (D, D), x_q W_Q W_K^T
            expected = (ov @ qk.T).norm() / (ov.norm() * qk.norm())
            torch.testing.assert_close(scores[h1, h2], expected, atol=1e-5, rtol=1e-4)
    x = torch.randn(5, D)
    w = ind.head_weights(model, 0)
    torch.testing.assert_close((x @ w["W_OV"][1]), (x @ a0.v_proj.weight[d:2 * d].T) @ a0.out_proj.weight[:, d:2 * d].T,
                               atol=1e-5, rtol=0)
    base = ind.composition_baseline(model)
    assert 0 < base < 1
    with pytest.raises(ValueError, match="earlier"):
        ind.k_composition_scores(model, 1, 0)
    with pytest.raises(ValueError, match="layer"):
        ind.k_composition_scores(model, 0, 2)


def test_phase_change_step_finds_the_steepest_drop():
    steps = list(range(0, 300, 10))
    losses = [4.0] * 12 + [3.0, 1.5, 0.5] + [0.1] * 15  # falls between steps 110 and 140
    assert 110 <= ind.phase_change_step(steps, losses) <= 140
    with pytest.raises(ValueError, match="steps and losses"):
        ind.phase_change_step([0, 1], [1.0])


def test_train_induction_records_a_reproducible_curve_and_patterns():
    runs = []
    for _ in range(2):
        torch.manual_seed(3)
        model = tl.DecoderOnlyLM(19, 16, 2, 2, max_len=12, ffn=False, init_std=0.02)
        runs.append(ind.train_induction(model, 20, batch_size=8, eval_every=10, seed=3, eval_size=16))
    rec = runs[0]
    assert rec["steps"] == [0, 10, 20] and len(rec["loss"]) == 20 and not model.training
    assert rec["patterns"].shape == (3, 2, 2, 12, 12) and rec["shown_tokens"].shape == (12,)
    assert rec["in_context_loss"] == runs[1]["in_context_loss"], "seeded: the same curve twice"
    assert abs(rec["in_context_loss"][0] - torch.log(torch.tensor(19.0)).item()) < 0.3  # starts near ln V
    assert not any(p.requires_grad for p in model.blocks[0].ffn.parameters())  # the FFN stays off


def test_train_induction_warmup_ramps_the_learning_rate_and_checks_it():
    torch.manual_seed(4)
    model = tl.DecoderOnlyLM(13, 16, 2, 1, max_len=8, ffn=False, init_std=0.02, tie_weights=False)
    before = model.embed.weight.detach().clone()
    ind.train_induction(model, 1, batch_size=4, eval_every=1, seed=0, eval_size=4, min_repeat=2, lr=1e-2,
                        warmup=1000)
    small = (model.embed.weight.detach() - before).abs().max()
    torch.manual_seed(4)
    model = tl.DecoderOnlyLM(13, 16, 2, 1, max_len=8, ffn=False, init_std=0.02, tie_weights=False)
    ind.train_induction(model, 1, batch_size=4, eval_every=1, seed=0, eval_size=4, min_repeat=2, lr=1e-2,
                        warmup=0)
    full = (model.embed.weight.detach() - before).abs().max()
    assert small < full / 100  # Adam's first step moves each weight by ~lr: 1/1000 of it in warmup
    with pytest.raises(ValueError, match="warmup"):
        ind.train_induction(model, 2, batch_size=4, eval_every=1, seed=0, eval_size=4, min_repeat=2, warmup=-1)


def test_train_induction_takes_the_context_from_the_table_or_the_argument():
    torch.manual_seed(5)
    rope = tl.DecoderOnlyLM(19, 16, 2, 2, max_len=64, ffn=False, positional="rope", init_std=0.02, tie_weights=False)
    with pytest.raises(ValueError, match="context"):  # rotary positions have no table to read a length from
        ind.train_induction(rope, 2, batch_size=4, eval_every=1, eval_size=4, min_repeat=2)
    rec = ind.train_induction(rope, 2, batch_size=4, eval_every=1, eval_size=4, min_repeat=2, context=10)
    assert rec["patterns"].shape == (3, 2, 2, 10, 10) and rec["shown_tokens"].shape == (10,)
    learned = tl.DecoderOnlyLM(19, 16, 2, 1, max_len=12, ffn=False, init_std=0.02)
    assert ind.train_induction(learned, 1, batch_size=4, eval_every=1, eval_size=4, min_repeat=2)["patterns"].shape[-1] == 12
    assert ind.train_induction(learned, 1, batch_size=4, eval_every=1, eval_size=4, min_repeat=2, context=8)["patterns"].shape[-1] == 8
    for bad in (16, 3, 8.0):  # longer than the position table, too short to repeat, not an int
        with pytest.raises(ValueError, match="context"):
            ind.train_induction(learned, 1, batch_size=4, eval_every=1, eval_size=4, min_repeat=2, context=bad)


def test_a_saved_rotary_run_loads_from_its_config(tmp_path):
    torch.manual_seed(6)
    model = tl.DecoderOnlyLM(19, 16, 2, 2, max_len=10, ffn=False, positional="rope", init_std=0.3, tie_weights=False)
    config = {"vocab": 19, "d_model": 16, "heads": 2, "context": 10, "positional": "rope"}
    torch.save({"2_layer": {"state_dict": model.state_dict(), "config": config, "steps": [0],
                            "patterns": torch.zeros(1, 2, 2, 10, 10).half()}}, tmp_path / "runs.pt")
    loaded, record = ind.load_induction_run(2, tmp_path / "runs.pt")
    assert loaded.positional == "rope" and loaded.pos is None and record["config"] == config
    tokens = torch.randint(0, 19, (3, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens), model.eval()(tokens), atol=0, rtol=0)  # the same weights
    with pytest.raises(FileNotFoundError):
        ind.load_induction_run(2, tmp_path / "missing.pt")


def test_train_induction_trains_on_the_loop_core():
    """A badly scaled start (init_std 0.5: confident wrong logits, loss ~4.4 nats) falls to the
    guessing level ln V within 40 steps; the per-step loss is training's causal_lm_loss."""
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(19, 16, 2, 1, max_len=12, ffn=False, init_std=0.5, tie_weights=False)
    rec = ind.train_induction(model, 40, batch_size=16, eval_every=20, seed=0, eval_size=32, warmup=0, lr=1e-2)
    assert rec["steps"] == [0, 20, 40] and len(rec["loss"]) == 40 and not model.training
    assert rec["loss"][0] > math.log(19) + 1.0 and rec["loss"][-1] < math.log(19) + 0.2
    assert rec["in_context_loss"][-1] < rec["in_context_loss"][0] - 1.0


def test_the_stored_runs_load_untied_and_two_layers_copy_where_one_cannot():
    from transformer_lib.induction import load_induction_run
    losses = {}
    for layers in (1, 2):
        model, record = load_induction_run(layers)
        cfg = record["config"]  # the packaged runs are saved with their model config
        tokens, in_context = ind.repeated_random_tokens(64, cfg["context"], cfg["vocab"], 6,
                                                        torch.Generator().manual_seed(7))
        assert model.head.weight is not model.embed.weight  # trained untied
        assert len(model.blocks) == layers and record["patterns"].shape[1] == layers
        with torch.no_grad():
            losses[layers] = float(ind.in_context_loss(model(tokens), tokens, in_context))
    assert losses[2] < 0.5 * losses[1], losses  # the induction circuit: one layer stays on its plateau


def test_remove_from_paths_touches_only_the_path_it_names():
    """Values do not enter the attention pattern, so removing the head from the values' stream
    leaves layer 1's pattern as it is clean, while the keys' and queries' streams change it; removal
    everywhere equals a mean ablation of the head written with the hooks; with one sequence the
    mean over the batch is the sequence itself, so nothing changes."""
    from transformer_lib.probes import patch_activations, record_activations
    model = _model(2, seed=3).eval()
    tokens, _ = ind.repeated_random_tokens(8, 12, 16, None, torch.Generator().manual_seed(0))
    with torch.no_grad(), record_activations(model, ["blocks.1.hook_pattern"]) as a:
        clean = model(tokens)
    clean_pattern = a["blocks.1.hook_pattern"]
    out = ind.remove_from_paths(model, tokens, 0, 1)
    assert torch.equal(out["v"][1], clean_pattern)
    assert not torch.allclose(out["k"][1], clean_pattern) and not torch.allclose(out["q"][1], clean_pattern)
    assert not torch.allclose(out["v"][0], clean)

    def mean_of_head_1(z):
        z = z.clone()
        z[:, :, 1] = z[:, :, 1].mean(0, keepdim=True)
        return z
    with torch.no_grad(), patch_activations(model, {"blocks.0.hook_z": mean_of_head_1}):
        assert torch.equal(out["everywhere"], model(tokens))
    one = ind.remove_from_paths(model, tokens[:1], 0, 1)
    for path in ("q", "k", "v"):
        torch.testing.assert_close(one[path][0], clean[:1], rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="layer"):
        ind.remove_from_paths(model, tokens, 1, 0)  # no layer after the last
    with pytest.raises(ValueError, match="head"):
        ind.remove_from_paths(model, tokens, 0, 9)
