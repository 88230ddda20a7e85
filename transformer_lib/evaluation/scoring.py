"""Scoring a language model on a task: the two families of chapter 30 ("Building it with the library").

**Log-likelihood over choices.** A question (the *context*) and a few candidate answers (the
*choices*); the model reads the context and we sum the log-probabilities of each choice's tokens:

    ll(c) = sum_t log p(c_t | context, c_<t)

The prediction is the choice with the largest score. The raw sum favours short choices (every
token costs log-probability), so harnesses also divide by a length: lm-evaluation-harness's
``acc`` is the raw sum, ``acc_norm`` divides by the choice's length in *characters*, ``acc_bytes``
by its UTF-8 bytes; dividing by *tokens* is the other common choice (it depends on the tokenizer,
so two models with different tokenizers are normalised differently). :data:`NORMALISATIONS`.

How the text becomes tokens follows lm-evaluation-harness exactly, so the two agree item by item
(tests/test_evaluation_lm_eval.py): each choice is scored as ``delimiter + choice`` after the
context; trailing spaces of the context move into the continuation; the context's tokens are
``encode(context)`` and the choice's are what ``encode(context + continuation)`` adds after as
many tokens. The context runs once and its cache is shared by all choices
(:func:`~transformer_lib.sampling.continuation_log_probs`).

**Generation with a verifier.** The model writes an answer and a program checks it. What the
program accepts is part of the metric: :func:`exact_match` compares strings after
:func:`normalise_answer` (case, punctuation, articles, spaces) or not at all, and
:func:`last_number` pulls a numeric answer out of a sentence.
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass

import torch

from .._checks import check_choice, check_str
from .._checks.evaluation import check_choice_item, check_encode
from ..sampling import continuation_log_probs

__all__ = ["ChoiceItem", "NORMALISATIONS", "ChoiceScores", "split_context", "score_choices", "score_items",
           "normalised_scores", "predictions", "correct", "few_shot_prompt", "normalise_answer",
           "last_number", "exact_match"]

NORMALISATIONS = ("sum", "token", "char", "byte")  # lm-eval: acc = "sum", acc_norm = "char", acc_bytes = "byte"


@dataclass(frozen=True)
class ChoiceItem:
    """One multiple-choice question: the ``context`` the choices continue, the ``choices`` (text
    without the delimiter), and ``gold``, the index of the right one."""
    context: str
    choices: tuple[str, ...]
    gold: int

    def __post_init__(self):
        check_choice_item(self.context, self.choices, self.gold)
        object.__setattr__(self, "choices", tuple(self.choices))


@dataclass(frozen=True)
class ChoiceScores:
    """A model's scores of one item: the summed log-likelihood of each choice, and each choice's
    length in tokens, characters and bytes (what the normalisations divide by)."""
    loglikelihoods: tuple[float, ...]
    tokens: tuple[int, ...]
    chars: tuple[int, ...]
    bytes: tuple[int, ...]
    gold: int


def split_context(encode, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """``(context_ids, continuation_ids)`` as lm-evaluation-harness splits them: trailing spaces
    of the context move to the continuation, the whole text is encoded once, and the
    continuation is whatever comes after ``len(encode(context))`` tokens. (Encoding the two
    halves separately would tokenize the word boundary differently from the text the model
    read in training: " Paris" is one token, " " + "Paris" may be two.)"""
    check_encode(encode)
    check_str("context", context)
    check_str("continuation", continuation)
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole, ctx = list(encode(context + continuation)), list(encode(context))
    if not ctx:
        raise ValueError("context: encodes to no tokens (a context of spaces only?)")
    return ctx, whole[len(ctx):]


@torch.no_grad()
def score_choices(model, encode, item: ChoiceItem, delimiter: str = " ") -> ChoiceScores:
    """The log-likelihood of every choice of ``item`` under ``model`` (a decoder:
    ``forward(tokens (B, L), cache) -> logits``), text to ids by ``encode``. A context longer
    than the model's ``max_len`` keeps its last tokens (lm-evaluation-harness truncates on the
    left the same way)."""
    check_encode(encode)
    if not isinstance(item, ChoiceItem):
        raise TypeError(f"item must be a ChoiceItem, got {type(item).__name__}")
    check_str("delimiter", delimiter)
    pairs = [split_context(encode, item.context, delimiter + c) for c in item.choices]
    context = pairs[0][0]  # the same for every choice
    rows = [cont for _, cont in pairs]
    if any(not r for r in rows):
        raise ValueError(f"item: a choice of {item.choices!r} adds no token after the context")
    limit = getattr(model, "max_len", None)
    if limit is not None and len(context) + max(map(len, rows)) > limit + 1:
        context = context[-(limit + 1 - max(map(len, rows))):]  # the model reads all but the last token
    was_training = model.training
    model.eval()
    logp, lengths = continuation_log_probs(model, torch.tensor(context), rows)  # (C,), (C,)
    model.train(was_training)
    return ChoiceScores(tuple(logp.tolist()), tuple(lengths.tolist()), tuple(len(c) for c in item.choices),
                        tuple(len(c.encode("utf-8")) for c in item.choices), item.gold)


def score_items(model, encode, items, delimiter: str = " ") -> list[ChoiceScores]:
    """:func:`score_choices` for every item of a task."""
    return [score_choices(model, encode, item, delimiter) for item in items]


def normalised_scores(scores: ChoiceScores, normalisation: str = "sum") -> list[float]:
    """Each choice's score under ``normalisation``: the raw sum, or the sum divided by the
    choice's tokens, characters or bytes (:data:`NORMALISATIONS`)."""
    check_choice("normalisation", normalisation, NORMALISATIONS)
    if normalisation == "sum":
        return list(scores.loglikelihoods)
    lengths = {"token": scores.tokens, "char": scores.chars, "byte": scores.bytes}[normalisation]
    return [ll / n for ll, n in zip(scores.loglikelihoods, lengths)]


def predictions(scores, normalisation: str = "sum") -> list[int]:
    """The chosen index of each item: the first choice with the largest normalised score (ties
    go to the earlier choice, as ``numpy.argmax`` does in lm-evaluation-harness)."""
    out = []
    for s in scores:
        values = normalised_scores(s, normalisation)
        out.append(values.index(max(values)))
    return out


def correct(scores, normalisation: str = "sum") -> list[int]:
    """1 where the chosen choice is the gold one, else 0: the per-item outcomes every statistic
    of :mod:`.statistics` reads (their mean is the accuracy)."""
    return [int(p == s.gold) for p, s in zip(predictions(scores, normalisation), scores)]


def few_shot_prompt(question: str, shots=(), template: str = "Question: {question}\nAnswer:",
                    delimiter: str = " ", separator: str = "\n\n") -> str:
    """A k-shot prompt in lm-evaluation-harness's layout: each solved example ``(question,
    answer)`` written as ``template + delimiter + answer``, joined by ``separator``, then the
    question in the same ``template`` (the model continues with ``delimiter + choice``)."""
    check_str("question", question)
    check_str("template", template)
    if "{question}" not in template:
        raise ValueError(f"template must contain '{{question}}', got {template!r}")
    parts = []
    for shot in shots:
        if not (isinstance(shot, (tuple, list)) and len(shot) == 2 and all(isinstance(s, str) for s in shot)):
            raise ValueError(f"shots must be (question, answer) pairs of str, got {shot!r}")
        parts.append(template.format(question=shot[0]) + delimiter + shot[1])
    return separator.join(parts + [template.format(question=question)])


_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalise_answer(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles (a, an, the), single
    spaces. "The Eiffel Tower." and "eiffel tower" become the same string."""
    check_str("text", text)
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


def last_number(text: str) -> str | None:
    """The last number written in ``text`` (digits, an optional sign and decimals; thousands
    commas removed), or None: "23 + 45 = 68." -> "68". GSM8K-style answer extraction."""
    check_str("text", text)
    found = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    return found[-1].replace(",", "").rstrip(".") if found else None


def exact_match(prediction: str, reference: str, normalise: bool = True) -> int:
    """1 if the two answers are the same string (after :func:`normalise_answer` when
    ``normalise``), else 0."""
    check_str("prediction", prediction)
    check_str("reference", reference)
    if normalise:
        prediction, reference = normalise_answer(prediction), normalise_answer(reference)
    return int(prediction == reference)
