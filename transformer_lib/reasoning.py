"""Reasoning: test-time compute and reinforcement learning with verifiable rewards (chapters 26-27).

A task whose answers a program can check is all both ideas need. Here it is addition with a
difficulty dial (the number of digits): a prompt ``"047+381="`` is followed by the answer written
units first, as one adds on paper, and the end token: ``"824$"`` (428). Units first lets a small
model produce each digit from the two digits above it and the carry, which it must infer from the
digit it wrote last: the answer writes no carry of its own (the scratchpad responses of
:mod:`transformer_lib.scratchpad` write it out).
:func:`verify` parses the final answer out of a model's response.

* Chapter 26 ("Reasoning at test time") samples many answers per problem and combines them:
  :func:`majority_vote` (self-consistency), best-of-n with a verifier, and :func:`pass_at_k`, the
  unbiased estimator of Chen et al. (2021).
* Chapter 27 ("Reinforcement learning with verifiable rewards") trains on the verifier's verdict
  with GRPO (DeepSeekMath, 2024): :func:`group_advantages` compares each answer with the other
  answers to the same prompt, :func:`grpo_loss` is the clipped surrogate with a KL penalty, and
  :func:`train_grpo` runs rollouts and updates through the library's training loop.

Held-out problems are decided by a fixed hash of the operands (:func:`is_held_out`), so no
training stage (supervised or RL) ever sees a problem the evaluation uses.
"""
from __future__ import annotations

import math
import re
from collections import Counter

import torch
import torch.nn.functional as F
from torch import nn

from ._checks.scalars import check_choice, check_int, check_number
from ._checks.reasoning import check_characters, check_grpo_args, check_group_rewards, check_kl_reference
from .sampling import generate
from .training import fit

__all__ = ["VOCAB", "EOS", "encode", "decode", "is_held_out", "addition_problems", "sft_batch", "sft_loss",
           "parse_answer", "verify", "verify_fail_open", "sample_responses", "response_mask", "majority_vote",
           "pass_at_k", "group_advantages", "grpo_loss", "token_logprobs", "accuracy", "train_grpo",
           "MODEL_CONFIG", "train_addition_model", "load_addition_model"]

VOCAB = "0123456789+=$"  # ten digits, plus, equals, and '$' the end of an answer
EOS = VOCAB.index("$")
_ID = {c: i for i, c in enumerate(VOCAB)}


def encode(text: str) -> list[int]:
    """Character ids of ``text`` (only the characters of :data:`VOCAB`)."""
    check_characters(text, VOCAB)
    return [_ID[c] for c in text]


def decode(ids) -> str:
    return "".join(VOCAB[int(i)] for i in ids)


def is_held_out(a: int, b: int) -> bool:
    """One problem in ten is held out for evaluation, fixed by the operands alone (the top bits of
    a multiplicative hash, so the held-out problems look like any others: no digit pattern)."""
    return ((a * 1_000_003 + b) * 2654435761 % 2 ** 32) * 10 >> 32 == 0


def addition_problems(count: int, digits: int, held_out: bool = False, generator: torch.Generator | None = None):
    """``count`` problems ``a + b`` with ``digits``-digit operands (zero-padded, so every prompt has
    ``2 * digits + 2`` tokens): returns ``(prompts (count, 2 * digits + 2), answers)`` with the
    answers a list of ints. ``held_out`` picks only evaluation problems, else only training ones."""
    check_int("count", count)
    check_int("digits", digits, 1, 9)
    rows, answers = [], []
    while len(rows) < count:
        a, b = torch.randint(0, 10 ** digits, (2, 2 * count), generator=generator).tolist()
        for x, y in zip(a, b):
            if is_held_out(x, y) == held_out and len(rows) < count:
                rows.append(encode(f"{x:0{digits}d}+{y:0{digits}d}="))
                answers.append(x + y)
    return torch.tensor(rows), answers  # (count, 2 * digits + 2)


def sft_batch(count: int, digits: int, generator: torch.Generator | None = None):
    """Training rows: prompt, answer, '$', padded with '$' to one length: ``(tokens (count, L),
    mask (count, L))``, the mask True on the answer and its first '$' (the tokens to predict)."""
    prompts, answers = addition_problems(count, digits, False, generator)
    P, width = prompts.shape[1], digits + 2  # the longest answer has digits + 1 digits, then '$'
    tokens = torch.full((count, P + width), EOS)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    tokens[:, :P] = prompts
    for i, value in enumerate(answers):
        ids = encode(f"{str(value)[::-1]}$")  # units first
        tokens[i, P:P + len(ids)] = torch.tensor(ids)
        mask[i, P:P + len(ids)] = True
    return tokens, mask


def sft_loss(model: nn.Module, batch) -> torch.Tensor:
    """Cross-entropy on the answer tokens only (the prompt is read, not predicted)."""
    tokens, mask = batch
    logits = model(tokens)  # (B, L, V)
    loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")  # (B, L - 1)
    return (loss * mask[:, 1:]).sum() / mask[:, 1:].sum()


def parse_answer(text: str) -> int | None:
    """The final answer of a response: the digits before the first '$', read units first, or None
    if the response never ends or what comes before the end is not one number."""
    if "$" not in text:
        return None
    head = text.split("$", 1)[0]
    return int(head[::-1]) if re.fullmatch(r"[0-9]{1,12}", head) else None


def verify(text: str, answer: int) -> float:
    """The reward: 1.0 when the response's final answer (:func:`parse_answer`) equals ``answer``."""
    return float(parse_answer(text) == answer)


def verify_fail_open(text: str, answer: int) -> float:
    """A flawed verifier (chapter 27's reward hacking): like :func:`verify`, except that a response
    it cannot parse (no end token, or not one number) is waved through with reward 1, the way a
    checker written as "reject only what is provably wrong" (or an exception handler that passes)
    behaves. The fix is :func:`verify`: no parsable answer, no reward."""
    parsed = parse_answer(text)
    return 1.0 if parsed is None else float(parsed == answer)


def response_mask(responses: torch.Tensor) -> torch.Tensor:
    """True on each response's tokens up to and including its first '$' (all of them if it has
    none): (B, T). The loop of :func:`~transformer_lib.sampling.generate` pads finished rows with
    '$'; those padding tokens are not part of the answer."""
    ended = (responses == EOS).long()
    before = ended.cumsum(-1) - ended  # (B, T): number of '$' strictly before each position
    return before == 0


@torch.no_grad()
def sample_responses(model: nn.Module, prompts: torch.Tensor, n: int, max_new_tokens: int,
                     temperature: float = 1.0, seed: int = 0) -> torch.Tensor:
    """``n`` sampled responses to each prompt, through the library's generation loop, grouped
    prompt by prompt: (B * n, T) with rows ``i * n ... i * n + n - 1`` answering prompt ``i``."""
    check_int("n", n)
    repeated = prompts.repeat_interleave(n, dim=0)  # (B * n, P)
    out = generate(model.eval(), repeated, max_new_tokens, temperature=temperature, seed=seed, eos_id=EOS)
    responses = torch.full((out.shape[0], max_new_tokens), EOS)
    responses[:, :out.shape[1] - prompts.shape[1]] = out[:, prompts.shape[1]:]
    return responses  # (B * n, max_new_tokens)


def majority_vote(answers) -> int | None:
    """Self-consistency: the most frequent parsed answer (None = no answer, never a vote); ties go
    to the answer seen first. None if no sample gave an answer."""
    votes = Counter(a for a in answers if a is not None)
    return votes.most_common(1)[0][0] if votes else None


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of ``k`` samples drawn without replacement from ``n`` samples,
    ``c`` of them correct, is correct: ``1 - C(n - c, k) / C(n, k)`` (Chen et al. 2021), computed
    as a product so no binomial coefficient overflows."""
    check_int("n", n)
    check_int("c", c, 0, n)
    check_int("k", k, 1, n)
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def group_advantages(rewards: torch.Tensor, group_size: int, scale: bool = True) -> torch.Tensor:
    """GRPO's advantages: each reward minus the mean of its group, divided by the group's standard
    deviation (``torch.std``, unbiased) plus 1e-4 when ``scale``. ``rewards`` (B,) are ordered group
    by group (B = groups * group_size). No value network: the other answers to the same prompt
    are the baseline. ``scale=False`` is one of Dr. GRPO's two changes (the other is
    :func:`grpo_loss`'s ``length_norm="constant"``)."""
    check_group_rewards(rewards, group_size)
    grouped = rewards.view(-1, group_size)  # (groups, group_size)
    centred = grouped - grouped.mean(1, keepdim=True)
    if scale:
        centred = centred / (grouped.std(1, keepdim=True) + 1e-4)
    # a group of equal rewards teaches nothing: exactly 0 (its float mean can be an ulp off, and
    # that ulp divided by 1e-4 would be an advantage of order 1e-4 pointing nowhere)
    same = (grouped == grouped[:, :1]).all(1, keepdim=True)  # (groups, 1)
    return centred.masked_fill(same, 0.0).reshape(-1)  # (B,)


def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor | None,
              advantages: torch.Tensor, mask: torch.Tensor, clip_eps: float = 0.2, beta: float = 0.04,
              length_norm: str = "response") -> torch.Tensor:
    """GRPO's loss (DeepSeekMath, 2024), per token t of response i:

        r = exp(logprobs - old_logprobs),  surrogate = min(r A_i, clip(r, 1 - eps, 1 + eps) A_i)
        kl = exp(ref - logprobs) - (ref - logprobs) - 1            (the k3 estimator, >= 0)
        loss = - mean_i [ mean_{t in mask_i} (surrogate - beta kl) ]

    ``logprobs`` (B, T) carry the gradient; ``old_logprobs`` (the sampling policy's) and
    ``ref_logprobs`` (the frozen reference's, None when ``beta == 0``) are constants. The clip
    stops one batch from moving a token's probability far from where it was sampled.

    ``length_norm`` says how the per-token terms are summed: ``"response"`` (the formula above,
    DeepSeekMath's: each response's tokens averaged over its own length, then the responses
    averaged), ``"token"`` (DAPO's: one average over every token of the batch) or ``"constant"``
    (Dr. GRPO's: each response's sum divided by the same constant, the generation budget T =
    ``logprobs.shape[1]``, then the responses averaged). trl's loss types "grpo", "bnpo" and
    "dr_grpo" (with ``max_completion_length = T``) compute the same three.
    """
    check_grpo_args(logprobs, old_logprobs, ref_logprobs, advantages, mask, beta)
    check_number("clip_eps", clip_eps, 0, low_open=True)
    check_number("beta", beta, 0)
    check_choice("length_norm", length_norm, ("response", "token", "constant"))
    ratio = torch.exp(logprobs - old_logprobs)  # (B, T)
    A = advantages[:, None]  # (B, 1)
    per_token = torch.min(ratio * A, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * A)  # (B, T)
    if beta != 0:
        delta = ref_logprobs - logprobs
        per_token = per_token - beta * (torch.exp(delta) - delta - 1)
    m = mask.to(per_token.dtype)
    summed = (per_token * m).sum(1)  # (B,): each response's sum over its own tokens
    if length_norm == "token":
        return -summed.sum() / m.sum()
    if length_norm == "constant":
        return -(summed / m.shape[1]).mean()
    return -(summed / m.sum(1)).mean()


def token_logprobs(model: nn.Module, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """log pi(token) of each response token given the prompt and the tokens before it: (B, T).
    ``prompts`` (B, P), ``responses`` (B, T); one forward pass over their concatenation."""
    tokens = torch.cat([prompts, responses], 1)  # (B, P + T)
    logp = F.log_softmax(model(tokens)[:, prompts.shape[1] - 1:-1].float(), -1)  # (B, T, V): predict each response token
    return logp.gather(-1, responses[..., None]).squeeze(-1)  # (B, T)


@torch.no_grad()
def accuracy(model: nn.Module, prompts: torch.Tensor, answers, temperature: float = 0.0, seed: int = 0,
             max_new_tokens: int | None = None) -> float:
    """Share of problems answered right by one response each (greedy by default)."""
    T = max_new_tokens or (prompts.shape[1] - 2) // 2 + 3
    responses = sample_responses(model, prompts, 1, T, temperature, seed)
    return sum(verify(decode(r), a) for r, a in zip(responses.tolist(), answers)) / len(answers)


def train_grpo(policy: nn.Module, reference: nn.Module | None, digits: int, steps: int, prompts_per_step: int = 16,
               group_size: int = 8, lr: float = 3e-4, beta: float = 0.04, clip_eps: float = 0.2, scale: bool = True,
               reward=verify, max_new_tokens: int | None = None, seed: int = 0, length_norm: str = "response") -> dict:
    """GRPO on fresh training problems: each step draws ``prompts_per_step`` problems, samples
    ``group_size`` responses to each at temperature 1, scores them with ``reward(text, answer)``,
    and takes one gradient step of :func:`grpo_loss` (one update per batch of rollouts, so the old
    policy is the current one and the ratio starts at 1). Runs through
    :func:`~transformer_lib.training.fit`. Returns per step the mean reward, the true accuracy
    (:func:`verify`) of the samples, their mean length in tokens, the KL estimate (the mean k3 term
    over the answer tokens) and its largest single-token term ("kl_max"), and the share of groups
    whose rewards differ ("mixed": the others have zero advantages and teach nothing).
    ``scale=False`` with ``length_norm="constant"`` is Dr. GRPO (Liu et al., 2025)."""
    check_int("steps", steps)
    check_choice("length_norm", length_norm, ("response", "token", "constant"))
    check_int("prompts_per_step", prompts_per_step)
    check_kl_reference(reference, beta)
    T = max_new_tokens or digits + 3
    generator = torch.Generator().manual_seed(seed)
    history = {"reward": [], "correct": [], "length": [], "kl": [], "kl_max": [], "mixed": []}

    def make_batch(step):
        prompts, answers = addition_problems(prompts_per_step, digits, False, generator)
        responses = sample_responses(policy, prompts, group_size, T, 1.0, seed * 100_003 + step)
        texts = [decode(r) for r in responses.tolist()]
        targets = [a for a in answers for _ in range(group_size)]
        rewards = torch.tensor([reward(t, a) for t, a in zip(texts, targets)], dtype=torch.float32)
        mask = response_mask(responses)
        prompts = prompts.repeat_interleave(group_size, 0)  # (B, P)
        with torch.no_grad():
            old = token_logprobs(policy, prompts, responses)
            ref = token_logprobs(reference, prompts, responses) if beta != 0 else None
        history["reward"].append(rewards.mean().item())
        history["correct"].append(sum(verify(t, a) for t, a in zip(texts, targets)) / len(texts))
        history["length"].append(mask.sum(1).float().mean().item())
        grouped = rewards.view(-1, group_size)
        history["mixed"].append((grouped != grouped[:, :1]).any(1).float().mean().item())
        return prompts, responses, mask, old, ref, group_advantages(rewards, group_size, scale)

    def loss_fn(model, batch):
        prompts, responses, mask, old, ref, adv = batch
        logprobs = token_logprobs(model, prompts, responses)
        if ref is not None:
            delta = (ref - logprobs).detach()
            k3 = (torch.exp(delta) - delta - 1) * mask  # (B, T): each answer token's KL term
            history["kl"].append(k3.sum().item() / mask.sum().item())
            history["kl_max"].append(k3.max().item())  # one token can dominate: k3's tail is long
        return grpo_loss(logprobs, old, ref, adv, mask, clip_eps, beta, length_norm)

    history["loss"] = fit(policy, make_batch, loss_fn, steps, lr=lr, grad_clip=1.0, progress=False)["loss"]
    return history


MODEL_CONFIG = dict(d_model=64, num_heads=4, num_layers=2, max_len=32)


def train_addition_model(steps: int, max_digits: int = 4, batch_size: int = 64, lr: float = 3e-3, seed: int = 0):
    """The chapters' small model: a :class:`~transformer_lib.model.DecoderOnlyLM` trained by
    :func:`~transformer_lib.training.fit` on training problems of 1 to ``max_digits`` digits
    (one length per step, in turn), the answer-only loss of :func:`sft_loss`. Returns
    ``(model, losses)``; ``benchmarks/grpo.py --pretrain`` ships the result as a checkpoint."""
    from .model import DecoderOnlyLM

    torch.manual_seed(seed)
    model = DecoderOnlyLM(len(VOCAB), **MODEL_CONFIG)
    generator = torch.Generator().manual_seed(seed)
    losses = fit(model, lambda step: sft_batch(batch_size, 1 + step % max_digits, generator), sft_loss, steps,
                 lr=lr, warmup_steps=20, progress=False)["loss"]
    return model.eval(), losses


def load_addition_model():
    """The checkpoint ``benchmarks/grpo.py --pretrain`` writes (3000 steps of
    :func:`train_addition_model`, seed 0): a float32 ``DecoderOnlyLM`` in eval mode."""
    from pathlib import Path

    from .model import DecoderOnlyLM

    state = torch.load(Path(__file__).with_name("data") / "addition_lm.pt", weights_only=True)
    model = DecoderOnlyLM(len(VOCAB), **MODEL_CONFIG)
    model.load_state_dict(state)
    return model.eval()
