"""transformer_lib.preference (chapter 22): answer log-probabilities with the shift, DPO's loss
against the paper's formula and against trl's DPOTrainer (checked with trl 1.16.0), gradients,
huge margins, empty masks, bad inputs, properties; the judge, the pairs and the training loops on
the book's own GPT."""
import collections
import copy
import math
import types

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from transformer_lib.data import load_gpt_checkpoint
from transformer_lib.preference import (RewardModel, dpo_loss, letter_share, make_pairs, preference_metrics,
                                        reward_accuracy, sentence_prompts, sequence_logprobs, train_dpo,
                                        train_reward_model, train_sft, win_rate)


def _batch(B=3, L=7, V=11, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, L, V, generator=g, dtype=dtype) * 2
    tokens = torch.randint(0, V, (B, L), generator=g)
    mask = torch.zeros(B, L, dtype=torch.bool)
    mask[:, 3:] = True
    mask[1, 5:] = False  # a shorter answer in row 1
    return logits, tokens, mask


def _sequence_logprobs_by_hand(logits, tokens, mask):
    """The definition, one token at a time: log softmax(logits[b, t - 1])[tokens[b, t]] summed over
    the masked t, with the log-softmax written as x - logsumexp(x)."""
    out = []
    for b in range(tokens.shape[0]):
        total = 0.0
        for t in range(1, tokens.shape[1]):
            if mask[b, t]:
                row = logits[b, t - 1].double()
                total += float(row[tokens[b, t]] - torch.logsumexp(row, 0))
        out.append(total)
    return torch.tensor(out, dtype=torch.float64)


# ---- sequence_logprobs -------------------------------------------------------------------------

def test_sequence_logprobs_equals_the_definition_token_by_token():
    logits, tokens, mask = _batch()
    got = sequence_logprobs(logits, tokens, mask)
    assert got.shape == (3,)
    torch.testing.assert_close(got, _sequence_logprobs_by_hand(logits, tokens, mask), rtol=0, atol=1e-12)


def test_sequence_logprobs_reads_the_position_before_each_token():
    # Logits that put all their mass on token t + 1 at position t: every answer token is certain
    # (log-probability 0) under the shifted reading, and far from certain without the shift.
    V, L = 9, 6
    tokens = torch.tensor([[1, 4, 2, 7, 3, 8]])
    logits = torch.full((1, L, V), -30.0, dtype=torch.float64)
    logits[0, torch.arange(L - 1), tokens[0, 1:]] = 30.0
    mask = torch.tensor([[False, False, True, True, True, True]])
    assert abs(float(sequence_logprobs(logits, tokens, mask))) < 1e-20
    unshifted = float(sum(F.log_softmax(logits[0, t], -1)[tokens[0, t]] for t in range(2, L)))
    assert unshifted < -150  # the same tokens read at their own position: the shift matters


def test_a_mask_that_selects_nothing_gives_zero_and_no_gradient():
    logits, tokens, _ = _batch()
    logits.requires_grad_(True)
    empty = torch.zeros(tokens.shape, dtype=torch.bool)
    out = sequence_logprobs(logits, tokens, empty)
    assert torch.equal(out, torch.zeros(3, dtype=torch.float64))
    out.sum().backward()
    assert torch.equal(logits.grad, torch.zeros_like(logits))


def test_a_masked_out_token_of_probability_zero_does_not_make_nan():
    logits, tokens, mask = _batch()
    logits[0, 0, tokens[0, 1]] = float("-inf")  # token 1 of row 0 impossible, but not in the answer
    out = sequence_logprobs(logits, tokens, mask)
    assert bool(torch.isfinite(out).all())


def test_sequence_logprobs_gradcheck():
    logits, tokens, mask = _batch(B=2, L=5, V=4)
    logits.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: sequence_logprobs(x, tokens, mask), (logits,))


def test_sequence_logprobs_of_a_real_model_equals_the_sum_of_next_token_losses():
    model, tok, _ = load_gpt_checkpoint()
    tokens = torch.tensor([tok.encode("The attention weights of one query sum to one.")[:12]])
    mask = torch.ones_like(tokens, dtype=torch.bool)
    mask[:, 0] = False  # everything but the first token: minus the summed cross-entropy
    with torch.no_grad():
        logits = model(tokens)
    ce = F.cross_entropy(logits[0, :-1], tokens[0, 1:], reduction="sum")
    torch.testing.assert_close(sequence_logprobs(logits, tokens, mask), -ce[None], rtol=1e-5, atol=1e-5)


# ---- dpo_loss ----------------------------------------------------------------------------------

def _paper_loss(pc, pr, rc, rr, beta):
    """Rafailov et al. (2023), eq. 7, term by term in float64 (for moderate margins):
    -log sigma(beta log(pi(y_w)/pi_ref(y_w)) - beta log(pi(y_l)/pi_ref(y_l)))."""
    terms = [-math.log(1.0 / (1.0 + math.exp(-(beta * (a - c) - beta * (b - d)))))
             for a, b, c, d in zip(pc.tolist(), pr.tolist(), rc.tolist(), rr.tolist())]
    return sum(terms) / len(terms)


def test_dpo_loss_equals_the_paper_formula_and_returns_the_rewards():
    g = torch.Generator().manual_seed(3)
    pc, pr, rc, rr = (torch.randn(8, generator=g, dtype=torch.float64) * 5 - 20 for _ in range(4))
    for beta in (0.05, 0.1, 0.5, 2.0):
        loss, chosen, rejected = dpo_loss(pc, pr, rc, rr, beta)
        assert math.isclose(loss.item(), _paper_loss(pc, pr, rc, rr, beta), rel_tol=1e-12)
        torch.testing.assert_close(chosen, beta * (pc - rc), rtol=0, atol=1e-14)
        torch.testing.assert_close(rejected, beta * (pr - rr), rtol=0, atol=1e-14)


def test_policy_equal_to_reference_gives_log_two_whatever_the_answers():
    lp = torch.tensor([-3.0, -40.0, -7.5])
    other = torch.tensor([-9.0, -1.0, -2.0])
    loss, chosen, rejected = dpo_loss(lp, other, lp.clone(), other.clone(), 0.1)
    assert math.isclose(loss.item(), math.log(2), rel_tol=1e-6)
    assert torch.equal(chosen, torch.zeros(3)) and torch.equal(rejected, torch.zeros(3))


def test_dpo_gradient_is_minus_beta_sigmoid_of_minus_margin():
    g = torch.Generator().manual_seed(4)
    pc, pr, rc, rr = (torch.randn(5, generator=g, dtype=torch.float64) for _ in range(4))
    pc.requires_grad_(True), pr.requires_grad_(True)
    beta = 0.7
    loss, chosen, rejected = dpo_loss(pc, pr, rc, rr, beta)
    loss.backward()
    weight = torch.sigmoid(-(chosen - rejected)).detach()  # how wrong each pair still is
    torch.testing.assert_close(pc.grad, -beta * weight / 5, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(pr.grad, beta * weight / 5, rtol=1e-12, atol=1e-14)
    assert torch.autograd.gradcheck(lambda a, b: dpo_loss(a, b, rc, rr, beta)[0], (pc, pr))


@pytest.mark.parametrize("margin", [1e4, -1e4, 1e6, -1e6])
def test_huge_margins_stay_finite(margin):
    pc = torch.tensor([margin], requires_grad=True)
    zero = torch.zeros(1)
    loss, _, _ = dpo_loss(pc, zero, zero, zero, 1.0)
    loss.backward()
    assert math.isfinite(loss.item()) and bool(torch.isfinite(pc.grad).all())
    if margin > 0:
        assert loss.item() == 0.0  # certain preference: nothing to learn
        assert float(pc.grad) == 0.0
    else:
        assert math.isclose(loss.item(), -margin, rel_tol=1e-6)  # -log sigmoid(m) ~ -m for m << 0
        assert math.isclose(float(pc.grad), -1.0, rel_tol=1e-6)  # the gradient saturates at -beta
    naive = -torch.log(torch.sigmoid(torch.tensor(margin)))
    assert margin > 0 or not math.isfinite(naive.item())  # what logsigmoid protects against


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(*[st.floats(-200, 0, allow_nan=False)] * 4), min_size=1, max_size=6),
       st.floats(0.01, 5.0), st.floats(0.01, 20.0))
def test_loss_falls_as_the_chosen_logprob_rises(rows, beta, step):
    pc, pr, rc, rr = (torch.tensor(col, dtype=torch.float64) for col in zip(*rows))
    before = dpo_loss(pc, pr, rc, rr, beta)[0].item()
    after = dpo_loss(pc + step, pr, rc, rr, beta)[0].item()
    lower = dpo_loss(pc, pr - step, rc, rr, beta)[0].item()
    assert after <= before and lower <= before
    assert after < before or before < 1e-12  # strictly, unless the loss is already (numerically) 0


@settings(max_examples=60, deadline=None)
@given(st.floats(-200, 0), st.floats(-200, 0), st.floats(-200, 0), st.floats(-200, 0), st.floats(0.01, 5.0))
def test_swapping_chosen_and_rejected_gives_the_loss_of_minus_the_margin(pc, pr, rc, rr, beta):
    t = lambda x: torch.tensor([x], dtype=torch.float64)  # noqa: E731
    loss, chosen, rejected = dpo_loss(t(pc), t(pr), t(rc), t(rr), beta)
    swapped, _, _ = dpo_loss(t(pr), t(pc), t(rr), t(rc), beta)
    m = float(chosen - rejected)
    assert math.isclose(swapped.item(), float(F.softplus(torch.tensor(m, dtype=torch.float64))), rel_tol=1e-9,
                        abs_tol=1e-12)  # -log sigmoid(-m) = log(1 + e^m)
    assert math.isclose(swapped.item() - loss.item(), m, rel_tol=1e-9, abs_tol=1e-9)


# ---- against trl -------------------------------------------------------------------------------

def _trl_parts():
    trl = pytest.importorskip("trl")
    transformers = pytest.importorskip("transformers")
    accelerate = pytest.importorskip("accelerate")
    from trl.trainer.dpo_trainer import DPOTrainer
    from trl.trainer.utils import add_fused_lm_head
    return trl, transformers, accelerate, DPOTrainer, add_fused_lm_head


def _tiny_llama(transformers, add_fused_lm_head):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    model = transformers.LlamaForCausalLM(config).double().eval()
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "mean_logits", "is_top1"))
    return model


def _trl_trainer_state(model, accelerate, beta):
    """The attributes DPOTrainer._compute_loss reads, for the standard ("sigmoid", reverse-KL)
    DPO loss with precomputed reference log-probabilities; a real CPU Accelerator."""
    return types.SimpleNamespace(
        model=model, accelerator=accelerate.Accelerator(cpu=True), aux_loss_enabled=False, ld_alpha=None,
        precompute_ref_logps=True, f_divergence_type="reverse_kl", loss_types=["sigmoid"], loss_weights=[1.0],
        beta=beta, label_smoothing=0.0, use_weighting=False, _total_train_tokens=0, _tp_size=1,
        _metrics={"train": collections.defaultdict(list), "eval": collections.defaultdict(list)})


@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_loss_rewards_and_gradients_equal_trls_dpo_trainer(beta):
    """trl's DPOTrainer computes the loss from a batch [chosen; rejected] with a completion mask;
    the same batch through sequence_logprobs + dpo_loss gives the same loss, reward metrics and
    parameter gradients."""
    trl, transformers, accelerate, DPOTrainer, add_fused_lm_head = _trl_parts()
    model = _tiny_llama(transformers, add_fused_lm_head)
    B, L = 4, 10
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 50, (2 * B, L), generator=g)
    completion = torch.zeros(2 * B, L, dtype=torch.long)
    completion[:, 4:] = 1
    completion[1, 8:] = 0  # answers of different lengths, right-padded as trl pads them
    completion[6, 6:] = 0
    ref = torch.randn(2 * B, generator=g, dtype=torch.float64) * 3 - 25
    state = _trl_trainer_state(model, accelerate, beta)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "completion_mask": completion,
              "ref_chosen_logps": ref[:B], "ref_rejected_logps": ref[B:]}
    trl_loss = DPOTrainer._compute_loss(state, model, inputs, False)
    trl_loss.backward()
    trl_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    logprobs = sequence_logprobs(model(input_ids=ids).logits, ids, completion.bool())  # (2B,)
    loss, chosen, rejected = dpo_loss(logprobs[:B], logprobs[B:], ref[:B], ref[B:], beta)
    loss.backward()
    metrics = state._metrics["eval"]
    # trl's fused LM head computes its log-probabilities in float32 tiles, so agreement is to
    # float32 rounding (a relative 5e-8 on the loss), not float64's
    assert math.isclose(loss.item(), trl_loss.item(), rel_tol=1e-6)
    assert math.isclose(chosen.mean().item(), metrics["rewards/chosen"][0], rel_tol=1e-6)
    assert math.isclose(rejected.mean().item(), metrics["rewards/rejected"][0], rel_tol=1e-6)
    assert math.isclose((chosen - rejected).mean().item(), metrics["rewards/margins"][0], rel_tol=1e-6)
    assert math.isclose((chosen > rejected).double().mean().item(), metrics["rewards/accuracies"][0], rel_tol=1e-6)
    assert math.isclose(logprobs[:B].mean().item(), metrics["logps/chosen"][0], rel_tol=1e-6)
    for ours, theirs in zip((p.grad for p in model.parameters()), trl_grads):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)


# ---- bad input ---------------------------------------------------------------------------------

def test_sequence_logprobs_bad_inputs_name_the_argument():
    logits, tokens, mask = _batch()
    with pytest.raises(TypeError, match="logits"):
        sequence_logprobs(logits.tolist(), tokens, mask)
    with pytest.raises(ValueError, match="logits"):
        sequence_logprobs(logits[0], tokens, mask)
    with pytest.raises(ValueError, match="logits"):
        sequence_logprobs(logits.masked_fill(torch.zeros_like(logits, dtype=torch.bool).index_fill(0, torch.tensor([1]), True), float("nan")), tokens, mask)
    with pytest.raises(TypeError, match="tokens"):
        sequence_logprobs(logits, tokens.tolist(), mask)
    with pytest.raises(ValueError, match="tokens"):
        sequence_logprobs(logits, tokens.double(), mask)
    with pytest.raises(ValueError, match="tokens"):
        sequence_logprobs(logits, tokens[:, :-1], mask)
    with pytest.raises(ValueError, match="tokens"):
        sequence_logprobs(logits, tokens + 11, mask)  # ids outside the logits' vocabulary of 11
    with pytest.raises(TypeError, match="mask"):
        sequence_logprobs(logits, tokens, mask.long())
    with pytest.raises(ValueError, match="mask"):
        sequence_logprobs(logits, tokens, mask[:, :-1])
    first = mask.clone()
    first[0, 0] = True
    with pytest.raises(ValueError, match="mask must be False in position 0"):
        sequence_logprobs(logits, tokens, first)


def test_dpo_loss_bad_inputs_name_the_argument():
    x = torch.zeros(3)
    args = {"policy_chosen": x, "policy_rejected": x, "ref_chosen": x, "ref_rejected": x}
    for name in args:
        with pytest.raises(TypeError, match=name):
            dpo_loss(**{**args, name: [0.0, 0.0, 0.0]}, beta=0.1)
        with pytest.raises(ValueError, match=name):
            dpo_loss(**{**args, name: torch.zeros(3, dtype=torch.long)}, beta=0.1)
        with pytest.raises(ValueError, match=name):
            dpo_loss(**{**args, name: torch.tensor([0.0, float("nan"), 0.0])}, beta=0.1)
        with pytest.raises(ValueError, match=name):
            dpo_loss(**{**args, name: torch.zeros(3, 1)}, beta=0.1)
    with pytest.raises(ValueError, match="ref_rejected"):
        dpo_loss(x, x, x, torch.zeros(4), beta=0.1)
    for beta in (0, -0.1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="beta"):
            dpo_loss(x, x, x, x, beta=beta)
    with pytest.raises(TypeError, match="beta"):
        dpo_loss(x, x, x, x, beta="0.1")


# ---- judge, win rate, pairs, training ----------------------------------------------------------

def test_letter_share_counts_by_hand():
    assert letter_share("eel") == pytest.approx(2 / 3)
    assert letter_share("The Tree, 3 e's!") == pytest.approx(4 / 9)  # t h e t r e e e s: 9 letters, 4 e
    assert letter_share("a cat") == 0.0 and letter_share("123 ...") == 0.0
    assert letter_share("Aardvark", "a") == pytest.approx(3 / 8)
    with pytest.raises(ValueError, match="letter"):
        letter_share("x", "ab")
    with pytest.raises(TypeError, match="text"):
        letter_share(5)


def test_win_rate_counts_ties_as_half():
    assert win_rate([3, 1, 2, 5], [1, 1, 4, 0]) == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    assert win_rate(torch.ones(7), torch.ones(7)) == 0.5
    with pytest.raises(ValueError, match="other_scores"):
        win_rate([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="scores"):
        win_rate([], [])
    with pytest.raises(TypeError, match="scores"):
        win_rate("ab", "cd")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 5), st.integers(-5, 5)), min_size=1, max_size=20))
def test_win_rates_of_the_two_sides_sum_to_one(pairs):
    a, b = zip(*pairs)
    assert win_rate(a, b) + win_rate(b, a) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def book_gpt():
    from transformer_lib.data import load_corpus, split_paragraphs
    model, tok, _ = load_gpt_checkpoint()
    train_text, _ = split_paragraphs(load_corpus())
    prompts = sentence_prompts(train_text, tok.encode, 4)[:96]
    judge = lambda text: -letter_share(text)  # noqa: E731  (fewer e's preferred)
    pairs = make_pairs(model, prompts, 10, judge, tok.decode, seed=0)
    return model, tok, prompts, judge, pairs


def test_pairs_follow_the_judge_and_share_their_prompt(book_gpt):
    model, tok, prompts, judge, pairs = book_gpt
    assert 0 < len(pairs) <= 96
    assert pairs.chosen.shape == pairs.rejected.shape == pairs.mask.shape == (len(pairs), 14)
    assert torch.equal(pairs.chosen[:, :4], pairs.rejected[:, :4])  # same prompt
    assert bool(pairs.mask[:, 4:].all()) and not bool(pairs.mask[:, :4].any())
    for c, r, cs, rs in zip(pairs.chosen, pairs.rejected, pairs.chosen_score, pairs.rejected_score):
        assert judge(tok.decode(c[4:].tolist())) == pytest.approx(float(cs))  # the judge, recomputed
        assert judge(tok.decode(r[4:].tolist())) == pytest.approx(float(rs))
        assert cs > rs  # ties were dropped
    with pytest.raises(ValueError, match="prompts"):
        make_pairs(model, prompts.float(), 10, judge, tok.decode)
    with pytest.raises(ValueError, match="new_tokens"):
        make_pairs(model, prompts, 0, judge, tok.decode)
    with pytest.raises(ValueError, match="score"):
        make_pairs(model, prompts[:4], 3, lambda text: float("nan"), tok.decode)
    with pytest.raises(TypeError, match="score"):
        make_pairs(model, prompts[:4], 3, "fewer e's", tok.decode)


def test_sentence_prompts_take_the_first_tokens_of_each_sentence():
    encode = lambda s: [ord(c) for c in s]  # noqa: E731  one token per character
    out = sentence_prompts("Hello there. Hi. Bye now!\n\nAnother one", encode, 3)
    assert out.tolist() == [[72, 101, 108], [72, 105, 46], [66, 121, 101], [65, 110, 111]]
    with pytest.raises(ValueError, match="prompt_tokens"):
        sentence_prompts("Hi.", encode, 9)


def test_dpo_training_raises_the_margin_and_leaves_the_reference_alone(book_gpt):
    reference, _, _, _, pairs = book_gpt
    before = copy.deepcopy(reference.state_dict())
    policy = copy.deepcopy(reference)
    history = train_dpo(policy, reference, pairs, beta=0.5, steps=12, batch_size=16, lr=2e-3, eval_every=6)
    assert history["steps"] == [0, 6, 12]
    assert history["train_loss"][0] == pytest.approx(math.log(2), abs=1e-5)  # policy = reference at step 0
    assert history["train_margin"][0] == pytest.approx(0.0, abs=1e-5)
    assert history["train_margin"][-1] > 0.05 and history["train_loss"][-1] < math.log(2) - 0.01
    assert history["train_accuracy"][-1] > 0.6
    for name, value in reference.state_dict().items():
        assert torch.equal(value, before[name]), name
    again = preference_metrics(policy, reference, pairs, 0.5)
    assert again["loss"] == pytest.approx(history["train_loss"][-1], rel=1e-6)


def test_sft_raises_the_chosen_answers_likelihood(book_gpt):
    reference, _, _, _, pairs = book_gpt
    policy = copy.deepcopy(reference)
    history = train_sft(policy, pairs, steps=12, batch_size=16, lr=2e-3)
    tokens = pairs.chosen
    with torch.no_grad():
        start = sequence_logprobs(reference(tokens), tokens, pairs.mask).mean()
        end = sequence_logprobs(policy(tokens), tokens, pairs.mask).mean()
    assert end > start + 1.0
    assert len(history["loss"]) == 12 and not policy.training
    with pytest.raises(ValueError, match="steps"):
        train_sft(policy, pairs, steps=0)
    with pytest.raises(ValueError, match="lr"):
        train_dpo(policy, reference, pairs, beta=0.1, steps=1, lr=0)


def test_reward_model_learns_the_judges_order_and_leaves_the_model_alone(book_gpt):
    reference, _, _, _, pairs = book_gpt
    before = copy.deepcopy(reference.state_dict())
    torch.manual_seed(0)
    reward_model = RewardModel(reference)
    assert reward_model(pairs.chosen[:5]).shape == (5,)
    history = train_reward_model(reward_model, pairs, steps=30, batch_size=16, lr=3e-3)
    assert len(history["loss"]) == 30 and not reward_model.training
    assert sum(history["loss"][-5:]) / 5 < sum(history["loss"][:5]) / 5
    assert reward_accuracy(reward_model, pairs) > 0.7
    for name, value in reference.state_dict().items():
        assert torch.equal(value, before[name]), name
    with pytest.raises(ValueError, match="steps"):
        train_reward_model(reward_model, pairs, steps=0)
