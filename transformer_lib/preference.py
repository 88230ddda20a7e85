"""Preference tuning with DPO (chapter 22, "Preference tuning").

RLHF asks for a policy that earns a high reward while staying close, in KL, to a frozen reference
model:  max_pi E[r(x, y)] - beta KL(pi || pi_ref).  Its optimum is pi*(y|x) ∝ pi_ref(y|x)
exp(r(x, y) / beta), so the reward is beta log(pi*/pi_ref) up to a term that depends on the
prompt alone. Put that into the Bradley-Terry model of a judge preferring y_w over y_l,
P = sigmoid(r_w - r_l), and the prompt's term cancels: Direct Preference Optimization (Rafailov
et al. 2023) trains the policy on pairs with

    loss = -log sigmoid( beta [ (log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l)) ] )

no reward model and no sampling during training: four sequence log-probabilities per pair.

The pieces, in the order the chapter builds them: :func:`sequence_logprobs` (log pi(y|x) of an
answer from a model's logits), :func:`dpo_loss`, a visible judge (:func:`letter_share`) and the
pairs it decides (:func:`make_pairs`), RLHF's first stage for comparison (:class:`RewardModel`,
:func:`train_reward_model`, :func:`reward_accuracy`), :func:`train_dpo` against :func:`train_sft`
(plain fine-tuning on the chosen answers), and :func:`win_rate`.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._checks.preference import (check_dpo_args, check_judged, check_letter, check_pair_sampling, check_paired_scores,
                                 check_scores, check_sentence_prompts, check_sequence_logprobs_args,
                                 check_training_args)
from ._checks.scalars import check_int, check_number
from ._checks.training import check_trainable
from .training import History, train_loop

__all__ = ["sequence_logprobs", "dpo_loss", "letter_share", "win_rate", "sentence_prompts", "PreferencePairs",
           "make_pairs",
           "pair_logprobs", "preference_metrics", "train_dpo", "train_sft", "RewardModel", "train_reward_model",
           "reward_accuracy"]


def sequence_logprobs(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log pi(answer | prompt) per row: the sum, over the tokens where ``mask`` is True, of each
    token's log-probability under the logits of the position *before* it.

    ``logits`` (B, L, V) are the model's output on ``tokens`` (B, L); position t's logits predict
    token t + 1 (the same shift as :func:`~transformer_lib.training.causal_lm_loss`). ``mask``
    (B, L) marks the answer's tokens, so the prompt is read but not scored; a row whose mask
    selects nothing has log-probability 0 (the empty answer is certain). Returns (B,).
    """
    check_sequence_logprobs_args(logits, tokens, mask)
    logits = logits if logits.dtype == torch.float64 else logits.float()
    logp = F.log_softmax(logits[:, :-1], dim=-1)  # (B, L-1, V): position t predicts token t+1
    picked = logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)  # (B, L-1, 1) -> (B, L-1)
    # where, not a product: a masked-out token of probability 0 would give 0 * -inf = NaN
    return torch.where(mask[:, 1:], picked, torch.zeros_like(picked)).sum(-1)  # (B,)


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DPO's loss on a batch of pairs, from the four (B,) sequence log-probabilities.

    Returns ``(loss, chosen_rewards, rejected_rewards)``: the implicit rewards
    ``beta * (policy - ref)`` of each answer (B,) and the mean of
    ``-log sigmoid(chosen_reward - rejected_reward)``. ``F.logsigmoid`` computes it stably: for a
    margin m of -1e4, ``log(sigmoid(m))`` would underflow to log(0) = -inf, while logsigmoid
    returns m itself (and its gradient, sigmoid(-m), stays finite).
    """
    check_dpo_args(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta)
    chosen_rewards = beta * (policy_chosen - ref_chosen)  # (B,)
    rejected_rewards = beta * (policy_rejected - ref_rejected)  # (B,)
    loss = -F.logsigmoid(chosen_rewards - rejected_rewards).mean()
    return loss, chosen_rewards, rejected_rewards


def letter_share(text: str, letter: str = "e") -> float:
    """The chapter's judge: the share of the letters in ``text`` that are ``letter`` (either case).

    A rule anyone can check by eye, and one the model can learn from its own samples: English
    prose has about 12% e's, and avoiding them means avoiding "the", "be", "we" ... The judge
    prefers the answer with the *smaller* share. A text with no letters scores 0."""
    check_letter(text, letter)
    letters = [c for c in text.lower() if c.isalpha()]
    return sum(c == letter.lower() for c in letters) / len(letters) if letters else 0.0


def win_rate(scores, other_scores) -> float:
    """The share of pairs (i-th score against the i-th other score) that ``scores`` win, a tie
    counting one half; higher scores win. 0.5 means no better than the other side."""
    a, b = check_scores("scores", scores), check_scores("other_scores", other_scores)
    check_paired_scores(a, b)
    return float(((a > b).double() + 0.5 * (a == b).double()).mean())


def sentence_prompts(text: str, encode, prompt_tokens: int = 4) -> torch.Tensor:
    """The first ``prompt_tokens`` tokens of every sentence of ``text`` that has that many: (N, P).

    Sentences end at '.', '!', '?' or a blank line; equal lengths let one batched call of the
    generation loop answer every prompt at once."""
    check_sentence_prompts(text, encode, prompt_tokens)
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n\s*\n", text) if s.strip()]
    rows = [ids[:prompt_tokens] for ids in map(list, map(encode, sentences)) if len(ids) >= prompt_tokens]
    check_sentence_prompts(text, encode, prompt_tokens, len(rows))
    return torch.tensor(rows, dtype=torch.long)  # (N, P)


@dataclass
class PreferencePairs:
    """Pairs of answers to the same prompts. ``chosen`` and ``rejected`` (N, L) hold prompt then
    answer; ``mask`` (N, L) is True on the answer's tokens (the same for both: all prompts and
    answers have the same lengths); ``chosen_score`` / ``rejected_score`` (N,) the judge's scores."""
    chosen: torch.Tensor
    rejected: torch.Tensor
    mask: torch.Tensor
    chosen_score: torch.Tensor
    rejected_score: torch.Tensor

    def __len__(self) -> int:
        return self.chosen.shape[0]

    def subset(self, index) -> "PreferencePairs":
        return PreferencePairs(self.chosen[index], self.rejected[index], self.mask[index],
                               self.chosen_score[index], self.rejected_score[index])


@torch.no_grad()
def make_pairs(model: nn.Module, prompts: torch.Tensor, new_tokens: int, score, decode, seed: int = 0,
               temperature: float = 1.0) -> PreferencePairs:
    """Offline preference data: two sampled answers per prompt, the judge picks one.

    For each prompt (rows of ``prompts``, (N, P) token ids) the model samples two answers of
    ``new_tokens`` tokens; ``score(decode(answer_ids))`` rates each (higher preferred) and the
    better one becomes ``chosen``. Ties carry no preference and are dropped, so fewer than N pairs
    may come back. The answers come from the model that will be tuned, as in the DPO paper: the
    pairs say which of *its own* habits the judge likes.
    """
    from .sampling import generate

    check_pair_sampling(prompts, new_tokens, temperature, seed, score, decode)
    P = prompts.shape[1]
    model.eval()
    both = torch.cat([prompts, prompts])  # (2N, P): each prompt twice
    answers = generate(model, both, new_tokens, temperature=temperature, seed=seed)  # (2N, P + n)
    scores = torch.tensor([float(score(decode(row[P:].tolist()))) for row in answers], dtype=torch.float64)
    check_judged(scores)
    first, second = answers.chunk(2)  # (N, P + n) each
    s1, s2 = scores.chunk(2)
    keep = s1 != s2
    first_wins = (s1 > s2)[:, None]  # (N, 1)
    chosen = torch.where(first_wins, first, second)[keep]
    rejected = torch.where(first_wins, second, first)[keep]
    mask = torch.zeros_like(chosen, dtype=torch.bool)
    mask[:, P:] = True
    return PreferencePairs(chosen, rejected, mask, torch.maximum(s1, s2)[keep], torch.minimum(s1, s2)[keep])


def pair_logprobs(model: nn.Module, pairs: PreferencePairs) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(chosen) and log pi(rejected), each (N,), in one forward pass over both."""
    tokens = torch.cat([pairs.chosen, pairs.rejected])  # (2N, L)
    logprobs = sequence_logprobs(model(tokens), tokens, torch.cat([pairs.mask, pairs.mask]))  # (2N,)
    return logprobs.chunk(2)


@torch.no_grad()
def preference_metrics(policy: nn.Module, reference: nn.Module, pairs: PreferencePairs, beta: float) -> dict:
    """DPO's loss, the mean reward margin and the preference accuracy (share of pairs whose chosen
    answer has the strictly larger implicit reward, as trl counts it) of ``policy`` on ``pairs``;
    also ``weight``, the mean of each pair's weight in the gradient, sigmoid(r_rejected - r_chosen),
    and ``chosen`` / ``rejected``, the mean implicit rewards (trl's ``rewards/chosen`` and
    ``rewards/rejected``: beta times the log-ratio to the reference)."""
    check_number("beta", beta, 0, low_open=True)
    return _metrics(policy, pairs, *pair_logprobs(reference, pairs), beta)


@torch.no_grad()
def _metrics(policy, pairs, ref_chosen, ref_rejected, beta) -> dict:
    loss, chosen, rejected = dpo_loss(*pair_logprobs(policy, pairs), ref_chosen, ref_rejected, beta)
    return {"loss": loss.item(), "margin": (chosen - rejected).mean().item(),
            "accuracy": (chosen > rejected).double().mean().item(),
            "weight": torch.sigmoid(rejected - chosen).mean().item(),
            "chosen": chosen.mean().item(), "rejected": rejected.mean().item()}


def _optimizer_and_batches(model: nn.Module, pairs: PreferencePairs, batch_size: int, lr: float, seed: int):
    """What the three trainers below share: AdamW without weight decay on ``model``'s parameters,
    and a draw of ``batch_size`` pair indices (uniform, with replacement, from a generator of its
    own seeded by ``seed``, so the batches do not depend on the global random state)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    return optimizer, lambda: torch.randint(0, len(pairs), (batch_size,), generator=generator)


def train_dpo(policy: nn.Module, reference: nn.Module, pairs: PreferencePairs, beta: float, steps: int,
              batch_size: int = 16, lr: float = 1e-3, seed: int = 0, eval_pairs: PreferencePairs | None = None,
              eval_every: int = 10, callback=None) -> History:
    """Train ``policy`` in place with DPO on ``pairs`` against the frozen ``reference``, on the loop
    core (:func:`~transformer_lib.training.train_loop`).

    The reference's log-probabilities never change, so they are computed once, before training
    (what trl calls precomputing the reference). Dropout is off (the policy stays in eval mode):
    at step 0 the policy equals the reference exactly, every reward is 0 and the loss is log 2.
    Returns the :class:`~transformer_lib.training.History`: ``loss`` (every step's batch loss) and,
    every ``eval_every`` steps and at the end, ``steps`` and the metrics of
    :func:`preference_metrics` on the training pairs (``train_*``) and on ``eval_pairs``
    (``eval_*``, held-out prompts, if given). ``callback(step, history)`` runs after every step.
    """
    check_training_args(steps, batch_size, lr, seed)
    check_number("beta", beta, 0, low_open=True)
    check_int("eval_every", eval_every, 1)
    check_trainable("policy", policy, "nothing to train")
    reference.eval()  # frozen: read under no_grad only, and not given to the optimizer
    with torch.no_grad():
        ref_chosen, ref_rejected = pair_logprobs(reference, pairs)  # (N,) each, fixed
        ref_eval = None if eval_pairs is None else pair_logprobs(reference, eval_pairs)
    optimizer, draw = _optimizer_and_batches(policy, pairs, batch_size, lr, seed)

    def evaluate(step):
        metrics = {"steps": step, **{f"train_{k}": v for k, v in _metrics(policy, pairs, ref_chosen, ref_rejected,
                                                                        beta).items()}}
        if eval_pairs is not None:
            metrics.update({f"eval_{k}": v for k, v in _metrics(policy, eval_pairs, *ref_eval, beta).items()})
        return metrics

    def step_fn(step):
        index = draw()
        chosen, rejected = pair_logprobs(policy, pairs.subset(index))
        return dpo_loss(chosen, rejected, ref_chosen[index], ref_rejected[index], beta)[0]

    return train_loop(policy, optimizer, steps, step_fn, evaluate=evaluate, eval_every=eval_every,
                      callback=callback, train_mode=False)


def train_sft(policy: nn.Module, pairs: PreferencePairs, steps: int, batch_size: int = 16, lr: float = 1e-3,
              seed: int = 0, callback=None) -> History:
    """The baseline: plain fine-tuning on the chosen answers only (cross-entropy on the answer's
    tokens, the prompt masked), the rejected ones ignored. Same optimizer, batches and mode (eval:
    dropout off) as :func:`train_dpo`; returns the :class:`~transformer_lib.training.History`
    whose ``loss`` is the per-step loss (mean negative log-probability per answer token)."""
    check_training_args(steps, batch_size, lr, seed)
    check_trainable("policy", policy, "nothing to train")
    optimizer, draw = _optimizer_and_batches(policy, pairs, batch_size, lr, seed)
    n_answer = pairs.mask[:, 1:].sum(-1).clamp_min(1)  # (N,) scored tokens per answer

    def step_fn(step):
        index = draw()
        tokens, mask = pairs.chosen[index], pairs.mask[index]
        return -(sequence_logprobs(policy(tokens), tokens, mask) / n_answer[index]).mean()

    return train_loop(policy, optimizer, steps, step_fn, callback=callback, train_mode=False)


class RewardModel(nn.Module):
    """RLHF's first stage: a reward model r(x, y), the body of a language model (a copy: the model
    given is left alone) with a scalar head read at the last position, the end of the answer (every
    answer of :class:`PreferencePairs` has the same length). Fitted to pairs by
    :func:`train_reward_model`, as in InstructGPT (Ouyang et al. 2022), which also started its
    reward model from a language model."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.body = copy.deepcopy(lm)
        self.body.head = nn.Identity()  # the final norm's output (B, L, D) instead of the logits
        self.score = nn.Linear(lm.embed.embedding_dim, 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.score(self.body(tokens)[:, -1]).squeeze(-1)  # (B,): one reward per sequence


def train_reward_model(model: RewardModel, pairs: PreferencePairs, steps: int, batch_size: int = 16,
                       lr: float = 1e-3, seed: int = 0, callback=None) -> History:
    """Fit ``model`` to ``pairs`` by Bradley-Terry's likelihood, ``-log sigmoid(r(chosen) - r(rejected))``,
    with the batches and optimizer of :func:`train_dpo` (dropout off). Returns the per-step ``loss``."""
    check_training_args(steps, batch_size, lr, seed)
    check_trainable("model", model, "nothing to train")
    optimizer, draw = _optimizer_and_batches(model, pairs, batch_size, lr, seed)

    def step_fn(step):
        index = draw()
        return -F.logsigmoid(model(pairs.chosen[index]) - model(pairs.rejected[index])).mean()

    return train_loop(model, optimizer, steps, step_fn, callback=callback, train_mode=False)


@torch.no_grad()
def reward_accuracy(model: nn.Module, pairs: PreferencePairs) -> float:
    """The share of ``pairs`` whose chosen answer gets the strictly larger reward from ``model``."""
    model.eval()
    return (model(pairs.chosen) > model(pairs.rejected)).double().mean().item()
