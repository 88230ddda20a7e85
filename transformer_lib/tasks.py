"""Small synthetic data sets, generated on the fly (nothing is downloaded): every task of the book.

Token conventions shared by the sequence-to-sequence tasks: ``PAD = 0``, ``BOS = 1``,
``EOS = 2``; content tokens are ``FIRST_TOKEN .. vocab_size - 1``. Every function takes a
``torch.Generator`` so batches are reproducible.

* reversal (chapters 4, 12), recall-first (chapter 9);
* running sums and prompts for a decoder-only model (chapter 13);
* the three lookups of the multi-head chapter (3): at every position report the previous token,
  the first token and the running maximum. Each answer sits at a different key (one position
  back, always position 0, wherever the maximum is), and one softmax row cannot point at three
  places at once: a small laboratory in which heads specialize. These tokens are plain
  ``0 .. vocab_size - 1`` (the task needs no PAD/BOS/EOS).
* a random second-order Markov language whose entropy rate is known exactly (scaling laws,
  chapter 31): :func:`markov_language`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ._checks import check_generator, check_int, check_number, check_tokens
from ._checks.tokens import check_id_dtype
from ._checks.tasks import (check_equal_lengths, check_one_token, check_src_target,
                           check_task_vocab)

__all__ = ["IOI_TEMPLATE", "IOI_PROMPTS", "ioi_batch", "PAD", "BOS", "EOS", "FIRST_TOKEN", "random_tokens", "reversal_batch", "shift_right", "recall_first_batch", "running_sum_batch", "prompt_batch",
           "LOOKUP_TASKS", "three_lookups_batch", "answer_keys", "MarkovLanguage", "markov_language"]

PAD, BOS, EOS = 0, 1, 2
FIRST_TOKEN = 3


def random_tokens(batch_size: int, length: int, vocab_size: int, generator: torch.Generator | None = None):
    """(B, L) content tokens drawn uniformly from FIRST_TOKEN .. vocab_size - 1."""
    check_int("batch_size", batch_size)
    check_int("length", length)
    check_task_vocab(vocab_size, FIRST_TOKEN)
    check_generator("generator", generator)
    return torch.randint(FIRST_TOKEN, vocab_size, (batch_size, length), generator=generator)


def shift_right(target: torch.Tensor, bos: int = BOS) -> torch.Tensor:
    """Decoder input for teacher forcing: BOS followed by the target minus its last token."""
    check_tokens(target, "target")
    check_id_dtype("target", target)
    check_int("bos", bos, 0)
    start = torch.full_like(target[:, :1], bos)
    return torch.cat([start, target[:, :-1]], dim=1)  # (B, L)


def reversal_batch(batch_size: int, length: int, vocab_size: int, generator=None):
    """(src, target) with target = src reversed: the learned cross-attention is an anti-diagonal."""
    src = random_tokens(batch_size, length, vocab_size, generator)
    return src, src.flip(1)


def recall_first_batch(batch_size: int, length: int, vocab_size: int, num_classes: int | None = None,
                       generator=None):
    """(tokens, label): the label is the class of the *first* token; the rest is distractor noise.

    The signal sits ``length - 1`` steps before the end, so a recurrent model must carry it
    through every step, while attention can read it directly.
    """
    tokens = random_tokens(batch_size, length, vocab_size, generator)  # checks the sizes
    num_classes = vocab_size - FIRST_TOKEN if num_classes is None else num_classes
    check_int("num_classes", num_classes, 1, vocab_size - FIRST_TOKEN)
    label = torch.randint(0, num_classes, (batch_size,), generator=generator)
    tokens[:, 0] = FIRST_TOKEN + label
    return tokens, label


def running_sum_batch(batch_size: int, length: int, generator: torch.Generator | None = None,
                      base: int = 10):
    """(src, target): src is ``length`` random digits, target_t = (src_0 + ... + src_t) mod ``base``.

    Both use the token ids ``FIRST_TOKEN + digit`` (vocabulary ``FIRST_TOKEN + base``). Unlike
    reversal, the natural solution needs the decoder's *own* previous output:
    target_t = target_{t-1} + src_t, so an early mistake carries into every later position when
    the model generates freely.
    """
    check_int("batch_size", batch_size)
    check_int("length", length)
    check_int("base", base, 2)
    check_generator("generator", generator)
    digits = torch.randint(0, base, (batch_size, length), generator=generator)  # (B, L)
    sums = digits.cumsum(dim=1) % base  # (B, L)
    return digits + FIRST_TOKEN, sums + FIRST_TOKEN


def prompt_batch(src: torch.Tensor, target: torch.Tensor, sep: int = EOS) -> torch.Tensor:
    """One sequence per example for a decoder-only model: ``src, sep, target`` (B, L_s + 1 + L_t).

    A decoder-only model has no second input, so a sequence-to-sequence task is written as a
    prompt (the source and a separator) followed by the answer; the model is trained to predict
    the answer tokens and, at test time, continues the prompt.
    """
    check_tokens(src, "src")
    check_tokens(target, "target")
    check_int("sep", sep, 0)
    check_src_target(src, target)
    separator = torch.full_like(src[:, :1], sep)  # (B, 1)
    return torch.cat([src, separator, target], dim=1)  # (B, L_s + 1 + L_t)


# -- three lookups (chapter 3) --------------------------------------------------------------------

LOOKUP_TASKS = ("previous", "first", "max")


def three_lookups_batch(batch_size: int, length: int, vocab_size: int,
                        generator: torch.Generator | None = None):
    """Tokens (B, L) and the three targets ``{task: (B, L)}``: previous, first and max token so far.

    ``previous`` uses the extra class ``vocab_size`` at t = 0, where there is no previous token.
    """
    check_int("batch_size", batch_size)
    check_int("length", length, 2)
    check_int("vocab_size", vocab_size, 2)
    check_generator("generator", generator)
    tokens = torch.randint(0, vocab_size, (batch_size, length), generator=generator)  # (B, L)
    none = torch.full((batch_size, 1), vocab_size)  # (B, 1) "no previous token"
    targets = {
        "previous": torch.cat([none, tokens[:, :-1]], dim=1),  # (B, L)
        "first": tokens[:, :1].expand(batch_size, length).clone(),  # (B, 1) -> (B, L)
        "max": tokens.cummax(dim=1).values,  # (B, L)
    }
    return tokens, targets


def answer_keys(tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """For each lookup task, a boolean (B, L, L): ``[b, i, j]`` is True when key j holds query i's answer.

    ``max`` marks every earlier position that holds the running maximum (ties all count).
    """
    check_tokens(tokens)
    B, L = tokens.shape
    i = torch.arange(L, device=tokens.device)[:, None]  # (L, 1) query index
    j = torch.arange(L, device=tokens.device)[None, :]  # (1, L) key index
    running_max = tokens.cummax(dim=1).values  # (B, L)
    holds_max = tokens[:, None, :] == running_max[:, :, None]  # (B, L_q, L_k)
    return {
        "previous": (j == i - 1).expand(B, L, L),
        "first": (j == 0).expand(B, L, L),
        "max": holds_max & (j <= i),
    }


# -- the indirect-object task (Wang et al. 2022), the chapter's prompt pairs --------------------

IOI_TEMPLATE = "When {io} and {s} went to the {place}, {s2} gave a {thing} to"
# (indirect object, subject, place, thing): every name, place and thing is one SmolLM2 token,
# so all prompts have the same 14 tokens and line up position by position.
IOI_PROMPTS = [("Mary", "John", "store", "drink"), ("Tom", "James", "park", "ball"),
               ("Sarah", "Anna", "school", "book"), ("David", "Emma", "shop", "gift"),
               ("Kate", "Mark", "office", "pen"), ("John", "Mary", "market", "cake"),
               ("James", "Tom", "bank", "cup"), ("Anna", "Sarah", "library", "letter"),
               ("Emma", "David", "station", "ticket"), ("Paul", "Lucy", "beach", "towel"),
               ("Mark", "Kate", "farm", "hat"), ("Lucy", "Paul", "zoo", "map")]


def ioi_batch(tokenizer, prompts=IOI_PROMPTS):
    """Clean and corrupted token ids (B, L) and the answers (B,) of indirect-object prompts.

    Clean: "When Mary and John went to the store, John gave a drink to" (answer " Mary", the
    indirect object). Corrupted: the second "John" becomes "Mary", so the model should now say
    " John"; nothing else changes, so every difference between the runs starts at that one token.
    The metric is ``logit(" Mary") - logit(" John")``: positive on clean, negative on corrupted.
    Returns ``(clean, corrupted, io_ids, s_ids)``."""
    clean, corrupted, io_ids, s_ids = [], [], [], []
    for io, s, place, thing in prompts:
        clean.append(tokenizer.encode(IOI_TEMPLATE.format(io=io, s=s, s2=s, place=place, thing=thing)).ids)
        corrupted.append(tokenizer.encode(IOI_TEMPLATE.format(io=io, s=s, s2=io, place=place, thing=thing)).ids)
        for name, out in ((io, io_ids), (s, s_ids)):
            ids = tokenizer.encode(" " + name).ids
            check_one_token(name, ids)
            out.append(ids[0])
    check_equal_lengths(clean + corrupted)
    return torch.tensor(clean), torch.tensor(corrupted), torch.tensor(io_ids), torch.tensor(s_ids)


# -- a language with a known entropy rate (chapter 31) -------------------------------------------

@dataclass(frozen=True)
class MarkovLanguage:
    """A second-order Markov chain over tokens ``0 .. V - 1``: P(x_t | x_{t-2}, x_{t-1}) is
    ``transitions[x_{t-2}, x_{t-1}]``. Because the chain is known, so is the best loss any model can
    reach on it: :meth:`window_loss` (nats per predicted token), the irreducible term of a scaling law."""
    transitions: torch.Tensor  # (V, V, V) float64, rows sum to 1
    stationary: torch.Tensor  # (V, V) float64: P(x_{t-1} = a, x_t = b) in the long run

    @property
    def vocab_size(self) -> int:
        return self.transitions.shape[0]

    @property
    def entropy_rate(self) -> float:
        """H = sum_ab pi(a, b) H(next | a, b): the loss per token of the true distribution, in nats."""
        p = self.transitions
        row_entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)  # (V, V)
        return float((self.stationary * row_entropy).sum())

    def window_loss(self, context: int) -> float:
        """The least mean next-token loss on windows of ``context`` tokens started in the stationary
        state, as :func:`~transformer_lib.training.evaluate_lm` scores them: the first prediction
        sees one token (H(x_1 | x_0)), the other ``context - 2`` see the two they depend on (H)."""
        check_int("context", context, 2)
        pi = self.stationary
        first = pi.sum(1)  # (V,) P(x_0)
        h_pair = -(pi * torch.log(pi.clamp_min(1e-300))).sum()
        h_first = -(first * torch.log(first.clamp_min(1e-300))).sum()
        return float(((h_pair - h_first) + (context - 2) * self.entropy_rate) / (context - 1))

    def sample(self, batch_size: int, length: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """(B, length) token ids: independent windows, each started in the stationary state (so a
        window is a slice of an endless text) and continued by the chain."""
        check_int("batch_size", batch_size)
        check_int("length", length, 2)
        check_generator("generator", generator)
        V = self.vocab_size
        pair_cdf = self.stationary.reshape(-1).cumsum(0)  # (V*V,)
        cdf = self.transitions.cumsum(-1)  # (V, V, V)
        u = torch.rand(length - 1, batch_size, 1, generator=generator, dtype=torch.float64)  # (L - 1, B, 1)
        pair = torch.searchsorted(pair_cdf, u[0]).clamp_max(V * V - 1)[:, 0]  # (B,) index a * V + b
        out = [pair // V, pair % V]
        for t in range(2, length):
            rows = cdf[out[-2], out[-1]]  # (B, V)
            out.append(torch.searchsorted(rows, u[t - 1]).clamp_max(V - 1)[:, 0])
        return torch.stack(out, dim=1)  # (B, length)


def markov_language(vocab_size: int = 64, seed: int = 0, weights=(0.2, 0.4, 0.4),
                    concentration: float = 0.1) -> MarkovLanguage:
    """A seeded random second-order Markov language with three layers of structure:

    P(c | a, b) = w_0 zipf(c) + w_1 Q_1[b, c] + w_2 Q_2[a, b, c]

    a Zipfian unigram (ranks 1/k, shuffled), a bigram table and a trigram table whose rows are
    Dirichlet(``concentration``) draws (small: peaked rows, much to memorise). A small model or a
    short run learns the unigram and part of the bigram; the V^2 trigram rows, each seen about
    1/V^2 of the time, take both parameters and data, which is what makes the loss fall smoothly
    with both. The stationary distribution comes from power iteration, so the entropy rate is
    exact to float64 rounding. Built with NumPy's seeded generator: the same language everywhere.
    """
    check_int("vocab_size", vocab_size, 2)
    check_int("seed", seed, 0)
    check_number("concentration", concentration, 0, low_open=True)
    if len(weights) != 3 or any(not isinstance(w, (int, float)) or w < 0 for w in weights) or \
            not math.isclose(sum(weights), 1.0) or weights[0] <= 0:
        raise ValueError(f"weights must be three numbers >= 0 summing to 1, the first > 0, got {weights!r}")
    rng = np.random.default_rng(seed)
    V = vocab_size
    zipf = 1.0 / np.arange(1, V + 1)
    zipf = (zipf / zipf.sum())[rng.permutation(V)]
    bigram = rng.dirichlet(np.full(V, concentration), size=V)  # (V, V)
    trigram = rng.dirichlet(np.full(V, concentration), size=(V, V))  # (V, V, V)
    p = weights[0] * zipf + weights[1] * bigram[None, :, :] + weights[2] * trigram  # (V, V, V)
    p = torch.tensor(p / p.sum(-1, keepdims=True), dtype=torch.float64)
    pi = torch.full((V, V), 1.0 / (V * V), dtype=torch.float64)
    for _ in range(10_000):  # pi'(b, c) = sum_a pi(a, b) P(c | a, b)
        new = torch.einsum("ab,abc->bc", pi, p)
        if (new - pi).abs().max() < 1e-15:
            break
        pi = new
    return MarkovLanguage(p, new)
