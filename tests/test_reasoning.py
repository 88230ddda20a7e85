"""transformer_lib.reasoning (chapters 26-27): the addition task and its verifier, voting, pass@k
against direct counting, GRPO's advantages and loss against trl's GRPOTrainer (checked with trl
1.16.0), property tests and bad input.

What is called in trl: the real ``GRPOTrainer._compute_loss`` (loss_type "grpo", token-level
importance sampling, no entropy mask, no vLLM), unbound, on a stand-in ``self`` that holds only
the attributes that method reads. Its model call, ``_get_per_token_logps_and_entropies``, returns
our per-token log-probabilities (a float64 leaf), so both losses see the same numbers and the
gradient is compared on that leaf. Everything after the log-probabilities is trl's own code.
"""
import math
import random
import types
from collections import defaultdict
from itertools import combinations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from transformer_lib import reasoning as R


# ---- the task and the verifier -----------------------------------------------------------------

def test_problems_have_their_answers_and_respect_the_split():
    g = torch.Generator().manual_seed(0)
    for held_out in (False, True):
        prompts, answers = R.addition_problems(50, 3, held_out, g)
        assert prompts.shape == (50, 8)
        for row, answer in zip(prompts.tolist(), answers):
            text = R.decode(row)
            a, b = text[:-1].split("+")
            assert int(a) + int(b) == answer and R.is_held_out(int(a), int(b)) == held_out


def test_held_out_share_is_one_in_ten():
    share = sum(R.is_held_out(a, b) for a in range(300) for b in range(300)) / 300 ** 2
    assert abs(share - 0.1) < 0.005


def test_sft_rows_are_prompt_answer_units_first():
    tokens, mask = R.sft_batch(20, 3, torch.Generator().manual_seed(1))
    for row, m in zip(tokens.tolist(), mask.tolist()):
        text = R.decode(row)
        a, rest = text.split("+")
        b, ans = rest.split("=")
        assert R.parse_answer(ans) == int(a) + int(b)
        assert R.decode([t for t, keep in zip(row, m) if keep]) == str(int(a) + int(b))[::-1] + "$"


@pytest.mark.parametrize("text, answer, parsed, ok", [
    ("824$", 428, 428, 1.0), ("824$$$", 428, 428, 1.0), ("824", 428, None, 0.0), ("8a", 428, None, 0.0),
    ("$", 0, None, 0.0), ("01$", 10, 10, 1.0), ("8246$", 428, 6428, 0.0), ("824$123$", 428, 428, 1.0)])
def test_verifier_reads_the_first_answer(text, answer, parsed, ok):
    assert R.parse_answer(text.replace("a", "+")) == parsed
    assert R.verify(text.replace("a", "+"), answer) == ok


def test_fail_open_verifier_passes_what_it_cannot_parse():
    for text in ["8246", "8+4$", "$", "111111111111"]:
        assert R.verify_fail_open(text, 428) == 1.0 and R.verify(text, 428) == 0.0
    assert R.verify_fail_open("824$", 428) == 1.0 and R.verify_fail_open("825$", 428) == 0.0


def test_response_mask_stops_after_the_first_end():
    responses = torch.tensor([R.encode("12$$$"), R.encode("12345"), R.encode("$1$2$")])
    assert R.response_mask(responses).tolist() == [[1, 1, 1, 0, 0], [1] * 5, [1, 0, 0, 0, 0]]


def test_majority_vote():
    assert R.majority_vote([3, None, 5, 5, None, None]) == 5
    assert R.majority_vote([7, 3, 3, 7]) == 7  # a tie goes to the first seen
    assert R.majority_vote([None, None]) is None


# ---- pass@k ------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, c", [(5, 0), (5, 2), (6, 3), (8, 1), (7, 7)])
def test_pass_at_k_equals_counting_every_subset(n, c):
    samples = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        subsets = list(combinations(range(n), k))
        direct = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
        assert R.pass_at_k(n, c, k) == pytest.approx(direct, abs=1e-12)


def test_pass_at_k_is_exact_for_large_n():
    n, c, k = 200, 37, 50
    assert R.pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), rel=1e-12)


# ---- GRPO against trl --------------------------------------------------------------------------

def _trl_loss(logps, old, ref, advantages, mask, clip_eps, beta, loss_type="grpo"):
    """trl's GRPOTrainer._compute_loss on these per-token log-probabilities (see the module doc)."""
    pytest.importorskip("trl")
    from trl.trainer.grpo_trainer import GRPOTrainer

    B, T = logps.shape
    fake = types.SimpleNamespace(
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level="token",
        beta=beta, loss_type=loss_type, max_completion_length=T, epsilon_low=clip_eps, epsilon_high=clip_eps, use_vllm=False,
        args=types.SimpleNamespace(use_bias_correction_kl=False, delta=None),
        model=torch.nn.Linear(1, 1).train(), current_gradient_accumulation_steps=1, _entropy_bonus_enabled=False,
        aux_loss_enabled=False, _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        accelerator=types.SimpleNamespace(reduce=lambda x, reduction: x, gather=lambda x: x),
        _get_per_token_logps_and_entropies=lambda *a, **k: (logps, torch.zeros_like(logps), None))
    inputs = {"prompt_ids": torch.zeros(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
              "completion_ids": torch.zeros(B, T, dtype=torch.long), "completion_mask": mask.long(),
              "advantages": advantages, "old_per_token_logps": old, "ref_per_token_logps": ref}
    return GRPOTrainer._compute_loss(fake, None, inputs)


def _batch(seed, B=6, T=7, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    logps = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    old = logps + torch.randn(B, T, generator=g, dtype=torch.float64) * spread  # ratios on both sides of the clip
    ref = logps + torch.randn(B, T, generator=g, dtype=torch.float64) * spread
    mask = torch.rand(B, T, generator=g) < 0.7
    mask[:, 0] = True
    mask[1, 3:] = False  # a short response
    advantages = R.group_advantages(torch.randint(0, 2, (B,), generator=g).double(), 3)
    return logps, old, ref, advantages, mask


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("beta, clip_eps", [(0.04, 0.2), (0.0, 0.2), (0.3, 0.05)])
@pytest.mark.parametrize("length_norm, loss_type", [("response", "grpo"), ("token", "bnpo"), ("constant", "dr_grpo")])
def test_grpo_loss_and_gradient_equal_trl(seed, beta, clip_eps, length_norm, loss_type):
    logps, old, ref, advantages, mask = _batch(seed)
    ours_in = logps.clone().requires_grad_()
    theirs_in = logps.clone().requires_grad_()
    ours = R.grpo_loss(ours_in, old, ref, advantages, mask, clip_eps, beta, length_norm)
    theirs = _trl_loss(theirs_in, old, ref, advantages, mask, clip_eps, beta, loss_type)
    ours.backward()
    theirs.backward()
    # float64 and the same operations in a slightly different order: rounding ~1e-16 per operation
    assert abs(ours.item() - theirs.item()) < 1e-6
    assert (ours_in.grad - theirs_in.grad).abs().max().item() < 1e-6
    assert ours_in.grad.abs().max().item() > 0  # the comparison is not between two zeros


def test_advantages_match_trl_formula():
    pytest.importorskip("trl")
    from trl.trainer.utils import nanstd

    rewards = torch.tensor([1.0, 0, 0, 1, 1, 1, 0, 0.5, 0.25, 0, 0, 0])
    grouped = rewards.view(-1, 4)
    std = nanstd(grouped, dim=1).repeat_interleave(4)
    expected = (rewards - grouped.mean(1).repeat_interleave(4)) / (std + 1e-4)
    assert torch.allclose(R.group_advantages(rewards, 4), expected, atol=1e-6)
    assert torch.allclose(R.group_advantages(rewards, 4, scale=False), rewards - grouped.mean(1).repeat_interleave(4))


# ---- properties --------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.integers(2, 6), st.integers(1, 4), st.integers(0, 10 ** 6), st.booleans())
def test_advantages_sum_to_zero_per_group(group_size, groups, seed, scale):
    rewards = torch.rand(group_size * groups, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    adv = R.group_advantages(rewards, group_size, scale)
    assert adv.view(groups, group_size).sum(1).abs().max().item() < 1e-9


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 6), st.floats(-5, 5, allow_nan=False))
def test_equal_rewards_give_zero_advantage(group_size, value):
    assert R.group_advantages(torch.full((2 * group_size,), value), group_size).abs().max().item() == 0.0


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10 ** 6))
def test_masked_tokens_get_no_gradient(seed):
    logps, old, ref, advantages, mask = _batch(seed)
    leaf = logps.clone().requires_grad_()
    R.grpo_loss(leaf, old, ref, advantages, mask).backward()
    assert leaf.grad[~mask].abs().max().item() == 0.0
    assert leaf.grad[mask].abs().sum().item() > 0


def test_on_policy_loss_without_kl_is_minus_mean_advantage():
    logps, _, ref, advantages, mask = _batch(3)
    loss = R.grpo_loss(logps, logps, ref, advantages, mask, beta=0.0)
    assert loss.item() == pytest.approx(-advantages.mean().item(), abs=1e-12)


# ---- bad input ---------------------------------------------------------------------------------

def test_bad_group_size_names_it():
    with pytest.raises(ValueError, match="group_size"):
        R.group_advantages(torch.zeros(6), 4)
    with pytest.raises(ValueError, match="group_size"):
        R.group_advantages(torch.zeros(6), 1)
    with pytest.raises(ValueError, match="rewards"):
        R.group_advantages(torch.zeros(2, 3), 3)


@pytest.mark.parametrize("which, bad, match", [
    ("old", torch.zeros(6, 5, dtype=torch.float64), "old_logprobs"),
    ("ref", torch.zeros(5, 7, dtype=torch.float64), "ref_logprobs"),
    ("adv", torch.zeros(5, dtype=torch.float64), "advantages"),
    ("mask", torch.ones(6, 6, dtype=torch.bool), "mask"),
    ("mask", torch.ones(6, 7), "mask")])
def test_shapes_that_disagree_name_the_argument(which, bad, match):
    logps, old, ref, advantages, mask = _batch(0)
    args = {"old": old, "ref": ref, "adv": advantages, "mask": mask}
    args[which] = bad
    with pytest.raises(ValueError, match=match):
        R.grpo_loss(logps, args["old"], args["ref"], args["adv"], args["mask"])


def test_empty_mask_row_is_refused():
    logps, old, ref, advantages, mask = _batch(0)
    mask[2] = False
    with pytest.raises(ValueError, match="mask has an empty row"):
        R.grpo_loss(logps, old, ref, advantages, mask)


def test_other_bad_input():
    logps, old, ref, advantages, mask = _batch(0)
    with pytest.raises(ValueError, match="clip_eps"):
        R.grpo_loss(logps, old, ref, advantages, mask, clip_eps=0)
    with pytest.raises(ValueError, match="beta"):
        R.grpo_loss(logps, old, ref, advantages, mask, beta=-1)
    with pytest.raises(ValueError, match="ref_logprobs"):
        R.grpo_loss(logps, old, None, advantages, mask, beta=0.04)
    with pytest.raises(ValueError, match="k"):
        R.pass_at_k(5, 2, 6)
    with pytest.raises(ValueError, match="c"):
        R.pass_at_k(5, 6, 1)
    with pytest.raises(ValueError, match="digits"):
        R.addition_problems(3, 0)
    with pytest.raises(ValueError, match="text"):
        R.encode("1*2")


# ---- the model and one GRPO step ---------------------------------------------------------------

def test_shipped_model_adds_and_grpo_runs():
    torch.manual_seed(0)
    model = R.load_addition_model()
    prompts, answers = R.addition_problems(100, 2, True, torch.Generator().manual_seed(0))
    assert R.accuracy(model, prompts, answers) > 0.9  # 2-digit sums are learnt (4-digit ones are the hard case)
    responses = R.sample_responses(model, prompts[:3], 4, 5, seed=1)
    assert responses.shape == (12, 5)
    before = [p.clone() for p in model.parameters()]
    history = R.train_grpo(model, R.load_addition_model(), 4, 2, prompts_per_step=8, group_size=4)
    assert len(history["reward"]) == 2 and len(history["loss"]) == 2
    # the largest single-token KL term bounds the mean from above (k3 >= 0 on every token)
    assert len(history["kl_max"]) == 2 and all(m >= k >= 0 for m, k in zip(history["kl_max"], history["kl"]))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_token_logprobs_match_the_full_pass():
    model = R.load_addition_model()
    prompts, _ = R.addition_problems(3, 2, generator=torch.Generator().manual_seed(0))
    responses = R.sample_responses(model, prompts, 1, 4, seed=0)
    got = R.token_logprobs(model, prompts, responses)
    tokens = torch.cat([prompts, responses], 1)
    with torch.no_grad():
        logp = torch.log_softmax(model(tokens), -1)
    for t in range(4):
        pos = prompts.shape[1] + t
        want = logp[torch.arange(3), pos - 1, tokens[:, pos]]
        assert torch.allclose(got[:, t].detach(), want, atol=1e-6)


def test_length_norm_weights_long_responses_as_dr_grpo_says():
    """With one right and one wrong answer of different lengths, the per-response average gives the
    long wrong answer's tokens a smaller push down than the short one's; Dr. GRPO's constant does not."""
    logps = torch.full((2, 6), -1.0, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)  # short right, long wrong
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    for norm, per_token in (("response", (1 / 2, 1 / 6)), ("constant", (1 / 6, 1 / 6))):
        logps.grad = None
        R.grpo_loss(logps, logps.detach(), None, adv, mask, beta=0.0, length_norm=norm).backward()
        g = logps.grad  # d loss / d logp: -A / (2 * normaliser) per token
        assert g[0, 0].item() == pytest.approx(-per_token[0] / 2)
        assert g[1, 0].item() == pytest.approx(per_token[1] / 2)
    with pytest.raises(ValueError, match="length_norm"):
        R.grpo_loss(logps, logps.detach(), None, adv, mask, beta=0.0, length_norm="sequence")
