"""A scratchpad for the addition task of :mod:`transformer_lib.reasoning` (chapter 26).

The answer-only model of chapters 26-27 writes the sum's digits, units first, and must carry in its
head: each digit depends on every column to its right through the carries it never writes. A
*scratchpad* (Nye et al. 2021, "Show your work") writes the work out before the answer. Here, for
each column, units first: the two digits of the column, the sum digit and the carry out,

    "047+381="  ->  "7180" "4821" "0340" "=" "824" "$"        (columns, then '=', the answer, '$')

so that every token depends on the prompt's two digits of its column and the three tokens just
written, and the final answer (after '=') is a copy of the sum digits (and a last carry of 1).
The vocabulary is the task's own (:data:`~transformer_lib.reasoning.VOCAB`). :func:`parse_scratchpad`
reads the final answer only; the work before it earns nothing by itself.

:func:`train_scratchpad_model` trains the same model as
:func:`~transformer_lib.reasoning.train_addition_model` (the same problems in the same order, the
same steps and optimiser) on these longer responses, with the loss on every response token.
"""
from __future__ import annotations

import torch
from torch import nn

from ._checks.scalars import check_int
from .reasoning import EOS, MODEL_CONFIG, VOCAB, addition_problems, decode, encode, parse_answer, sft_loss
from .training import fit

__all__ = ["scratchpad", "parse_scratchpad", "scratchpad_length", "scratchpad_batch", "SCRATCHPAD_MAX_LEN",
           "train_scratchpad_model"]

SCRATCHPAD_MAX_LEN = 64  # the position table: a 5-digit problem with its work is 12 + 28 tokens


def scratchpad(a: int, b: int, digits: int) -> str:
    """The response for ``a + b`` with ``digits``-digit operands: per column (units first) its two
    digits, the sum digit and the carry out; then '=', the answer units first, and '$'."""
    check_int("digits", digits, 1, 9)
    xs, ys = f"{a:0{digits}d}"[::-1], f"{b:0{digits}d}"[::-1]
    work, carry = [], 0
    for x, y in zip(xs, ys):
        total = int(x) + int(y) + carry
        carry = total // 10
        work.append(f"{x}{y}{total % 10}{carry}")
    return "".join(work) + "=" + str(a + b)[::-1] + "$"


def scratchpad_length(digits: int) -> int:
    """The longest response at ``digits`` digits: 4 per column, '=', digits + 1 answer digits, '$'."""
    return 4 * digits + digits + 3


def parse_scratchpad(text: str) -> int | None:
    """The final answer of a scratchpad response: the digits between the last '=' before the first
    '$' and that '$', read units first (as :func:`~transformer_lib.reasoning.parse_answer`); None if
    there is no '=' before the end, or no number after it."""
    if "$" not in text:
        return None
    head = text.split("$", 1)[0]
    if "=" not in head:
        return None
    return parse_answer(head.rsplit("=", 1)[1] + "$")


def scratchpad_batch(count: int, digits: int, generator: torch.Generator | None = None):
    """Training rows as :func:`~transformer_lib.reasoning.sft_batch` (the same problems for the same
    generator state), with the scratchpad response: ``(tokens (count, L), mask (count, L))``, the
    mask True on the whole response up to its '$'."""
    prompts, answers = addition_problems(count, digits, False, generator)
    P, width = prompts.shape[1], scratchpad_length(digits)
    tokens = torch.full((count, P + width), EOS)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    tokens[:, :P] = prompts
    for i, row in enumerate(prompts.tolist()):
        a, b = (int(s) for s in decode(row)[:-1].split("+"))
        ids = encode(scratchpad(a, b, digits))
        tokens[i, P:P + len(ids)] = torch.tensor(ids)
        mask[i, P:P + len(ids)] = True
    return tokens, mask


def train_scratchpad_model(steps: int, max_digits: int = 4, batch_size: int = 64, lr: float = 3e-3,
                           seed: int = 0) -> tuple[nn.Module, list[float]]:
    """:func:`~transformer_lib.reasoning.train_addition_model` with scratchpad responses: the same
    model (its position table ``SCRATCHPAD_MAX_LEN`` long), problems, steps and optimiser."""
    from .model import DecoderOnlyLM

    check_int("steps", steps)
    torch.manual_seed(seed)
    model = DecoderOnlyLM(len(VOCAB), **{**MODEL_CONFIG, "max_len": SCRATCHPAD_MAX_LEN})
    generator = torch.Generator().manual_seed(seed)
    losses = fit(model, lambda step: scratchpad_batch(batch_size, 1 + step % max_digits, generator), sft_loss,
                 steps, lr=lr, warmup_steps=20, progress=False)["loss"]
    return model.eval(), losses
