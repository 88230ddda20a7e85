"""Preference tuning (chapter 22): answer log-probabilities, DPO's four log-probabilities and beta,
the judge's scores and the training loops' settings."""
from __future__ import annotations

import torch

from .scalars import check_int, check_number
from .tokens import check_token_ids
from .scalars import check_callable


def _tensor(name: str, value, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {what}, got {type(value).__name__}")
    return value


def check_sequence_logprobs_args(logits, tokens, mask) -> None:
    """``logits`` (B, L, V) floating and free of NaN/+inf, ``tokens`` (B, L) integer ids in
    ``[0, V)``, ``mask`` (B, L) bool that selects no token in position 0 (no position before it
    predicts it)."""
    _tensor("logits", logits, "(B, L, V)")
    _tensor("tokens", tokens, "(B, L) of token ids")
    _tensor("mask", mask, "(B, L) of bools")
    if logits.dim() != 3 or not logits.is_floating_point():
        raise ValueError(f"logits must be a float tensor (B, L, V), got {logits.dtype} of shape {tuple(logits.shape)}")
    if logits.shape[-1] == 0 or logits.shape[1] == 0:
        raise ValueError(f"logits must have at least one position and one vocabulary entry, got {tuple(logits.shape)}")
    if torch.isnan(logits).any() or torch.isposinf(logits).any():
        raise ValueError("logits contain NaN or +inf: no log-probability can be read from them")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must hold integer token ids, got dtype {tokens.dtype}")
    if tuple(tokens.shape) != tuple(logits.shape[:2]):
        raise ValueError(f"tokens must be (B, L) = {tuple(logits.shape[:2])} like logits, got {tuple(tokens.shape)}")
    vocab = logits.shape[-1]
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab):
        raise ValueError(f"tokens must lie in [0, {vocab}) (the logits' vocabulary), "
                         f"got ids from {int(tokens.min())} to {int(tokens.max())}")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True on the answer's tokens), got dtype {mask.dtype}")
    if tuple(mask.shape) != tuple(tokens.shape):
        raise ValueError(f"mask must have the shape of tokens {tuple(tokens.shape)}, got {tuple(mask.shape)}")
    if bool(mask[:, 0].any()):
        raise ValueError("mask must be False in position 0: the first token has no position before it to "
                         "predict it (an answer follows a prompt of at least one token)")


def check_dpo_args(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta) -> None:
    """Four floating (B,) tensors of summed log-probabilities, same shape, finite; beta > 0."""
    named = {"policy_chosen": policy_chosen, "policy_rejected": policy_rejected,
             "ref_chosen": ref_chosen, "ref_rejected": ref_rejected}
    for name, value in named.items():
        _tensor(name, value, "(B,) of sequence log-probabilities")
        if not value.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {value.dtype}")
        if value.dim() != 1 or value.shape[0] == 0:
            raise ValueError(f"{name} must be (B,) with B >= 1 (one log-probability per pair), got shape "
                             f"{tuple(value.shape)}")
        if value.shape != policy_chosen.shape:
            raise ValueError(f"{name} must have the shape of policy_chosen {tuple(policy_chosen.shape)}, "
                             f"got {tuple(value.shape)}")
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{name} must be finite, got NaN or inf")
    check_number("beta", beta, 0, low_open=True)


def check_scores(name: str, scores) -> torch.Tensor:
    """The judge's scores: a non-empty 1-D sequence of finite numbers; returned as float64."""
    if isinstance(scores, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(scores).__name__}")
    try:
        t = torch.as_tensor(scores, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(f"{name} must be a sequence of numbers, got {type(scores).__name__}") from error
    if t.dim() != 1 or t.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of scores, got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be finite, got NaN or inf")
    return t


def check_training_args(steps, batch_size, lr, seed) -> None:
    """A preference or SFT run: steps and batch size positive integers, a positive learning rate."""
    check_int("steps", steps, 1)
    check_int("batch_size", batch_size, 1)
    check_number("lr", lr, 0, low_open=True)
    check_int("seed", seed, 0)


def check_letter(text, letter) -> None:
    """The letter judge's input: ``text`` a str, ``letter`` one alphabetic character."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not isinstance(letter, str) or len(letter) != 1 or not letter.isalpha():
        raise ValueError(f"letter must be a single letter, got {letter!r}")


def check_paired_scores(a: torch.Tensor, b: torch.Tensor) -> None:
    """Two score vectors compared pair by pair: one ``other_scores`` entry per ``scores`` entry."""
    if a.shape != b.shape:
        raise ValueError(f"other_scores must have one score per entry of scores ({a.numel()}), got {b.numel()}")


def check_sentence_prompts(text, encode, prompt_tokens, found: int | None = None) -> None:
    """``text`` a str, ``encode(text) -> ids`` callable, ``prompt_tokens >= 1``; once the sentences
    are cut (``found`` of them long enough), at least one."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    check_callable("encode", encode, "encode(text) -> token ids")
    check_int("prompt_tokens", prompt_tokens, 1)
    if found == 0:
        raise ValueError(f"text has no sentence of at least prompt_tokens={prompt_tokens} tokens")


def check_pair_sampling(prompts, new_tokens, temperature, seed, score, decode) -> None:
    """``prompts`` (N, P) token ids with N, P >= 1; ``new_tokens >= 1``, ``temperature > 0``, a seed,
    and two callables ``score(text) -> number``, ``decode(ids) -> text``."""
    check_token_ids(prompts, torch.iinfo(torch.long).max, "prompts")
    if prompts.shape[0] == 0 or prompts.shape[1] == 0:
        raise ValueError(f"prompts must hold at least one prompt of at least one token, got {tuple(prompts.shape)}")
    check_int("new_tokens", new_tokens, 1)
    check_number("temperature", temperature, 0, low_open=True)
    check_int("seed", seed, 0)
    if not callable(score) or not callable(decode):
        raise TypeError("score and decode must be callables: score(text) -> number, decode(ids) -> text")


def check_judged(scores: torch.Tensor) -> None:
    """What the judge ``score`` returned: a finite number for every answer."""
    if not bool(torch.isfinite(scores).all()):
        raise ValueError("score must return a finite number for every answer, got NaN or inf")
