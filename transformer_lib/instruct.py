"""Instruction tuning: chat-formatted examples, the loss on answer tokens only, gradient accumulation (chapter 21).

An instruction-tuned model is trained on conversations rendered with *its own* chat template, the
exact text it will see at inference time. The prompt (system and user turns, and the
``<|im_start|>assistant`` header) is context, not something to learn: only the answer's tokens,
including the end-of-turn token that teaches the model to stop, count in the loss. Here that is a
boolean mask over the tokens; Hugging Face writes the same thing as labels of -100
(:func:`answer_labels`), the index ``cross_entropy`` ignores.

Gradient accumulation runs several small micro-batches before one optimizer step. To equal the
big batch exactly, each micro-batch's summed loss is divided by the number of answer tokens in
the *whole* batch, not by its own count (:func:`accumulate_gradients`): averaging per-micro-batch
means would weight a short answer's tokens more than a long one's.

The chapter's task (:func:`json_task`): answer every question as a one-key JSON object
``{"answer": ...}``, a format SmolLM2-135M-Instruct never uses by itself.
"""
from __future__ import annotations

import json
import random

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import lora as _lc
from ._checks.scalars import check_int, check_number
from ._checks.training import check_trainable
from .training import History, train_loop

IGNORE_INDEX = -100  # the label cross_entropy skips (Hugging Face's convention for prompt tokens)


def chat_example(smol, prompt: str, answer: str, system: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (L,) of one conversation in ``smol``'s chat template and the answer mask (L,).

    The prompt is rendered as at inference (ending with the assistant header) and tokenized on its
    own, then the answer with its end-of-turn token: training sees the same prompt tokens that
    :meth:`~transformer_lib.pretrained.smollm2.SmolLM2.generate` will. ``mask`` is True on the
    answer's tokens and on the end-of-turn token, False on the prompt."""
    _lc.check_chat_texts(prompt=prompt, answer=answer, system=system)
    messages = ([{"role": "system", "content": system}] if system is not None else []) + \
        [{"role": "user", "content": prompt}]
    prompt_text = smol.chat(messages, add_generation_prompt=True)
    full = smol.chat(messages + [{"role": "assistant", "content": answer}], add_generation_prompt=False)
    _lc.check_template_prefix(prompt_text, full)
    prompt_ids = smol.tokenizer.encode(prompt_text).ids
    answer_ids = smol.tokenizer.encode(answer).ids + [smol.eos_id]  # stop after the answer
    ids = torch.tensor(prompt_ids + answer_ids, dtype=torch.long)
    mask = torch.tensor([False] * len(prompt_ids) + [True] * len(answer_ids))
    return ids, mask


def pad_batch(examples, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad ``(ids, mask)`` pairs to (B, L) tensors; padding is masked out. A causal model's
    outputs at real positions never see the pads that come after them."""
    _lc.check_examples(examples)
    L = max(len(ids) for ids, _ in examples)
    tokens = torch.full((len(examples), L), pad_id, dtype=torch.long)
    mask = torch.zeros(len(examples), L, dtype=torch.bool)
    for i, (ids, m) in enumerate(examples):
        tokens[i, :len(ids)], mask[i, :len(ids)] = ids, m
    return tokens, mask


def answer_labels(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The same mask in Hugging Face's form: labels equal to ``tokens`` where ``mask``, else -100."""
    _lc.check_tokens_and_mask(tokens, mask)
    return torch.where(mask, tokens, torch.full_like(tokens, IGNORE_INDEX))


def answer_only_loss(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor,
                     reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of the answer tokens only: the logits at position t-1 predict token t.

    ``logits`` (B, L, V), ``tokens`` and ``mask`` (B, L). ``reduction="mean"`` averages over the
    answer tokens of the batch; ``"sum"`` adds them (for :func:`accumulate_gradients`)."""
    _lc.check_answer_loss(logits, tokens, mask, reduction)
    labels = answer_labels(tokens, mask)[:, 1:]  # (B, L-1): what each position must predict
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels.flatten(),  # (B (L-1), V)
                           ignore_index=IGNORE_INDEX, reduction=reduction)


def accumulate_gradients(model: nn.Module, micro_batches) -> float:
    """Backpropagate a batch given as micro-batches ``[(tokens, mask), ...]``; returns its mean loss.

    Each micro-batch's summed loss is divided by the answer tokens of *all* micro-batches, so the
    gradients that pile up in ``.grad`` equal one backward pass over the whole batch (up to
    rounding), with only one micro-batch's activations in memory at a time."""
    micro_batches = list(micro_batches)
    total = _lc.check_micro_batches(micro_batches)  # answer tokens that get a loss
    loss_sum = 0.0
    for tokens, mask in micro_batches:
        loss = answer_only_loss(model(tokens), tokens, mask, reduction="sum") / total
        loss.backward()
        loss_sum += float(loss.detach())
    return loss_sum


def train_lora(model: nn.Module, examples, steps: int, batch_size: int = 8, accumulation: int = 1,
               lr: float = 1e-3, pad_id: int = 0, seed: int = 0, callback=None) -> History:
    """A short instruction-tuning loop on the loop core (:func:`~transformer_lib.training.train_loop`):
    AdamW on the trainable parameters (the adapters, after :func:`~transformer_lib.lora.add_lora`),
    ``steps`` optimizer steps of ``batch_size`` examples drawn without replacement per epoch, each
    split into ``accumulation`` micro-batches (:func:`accumulate_gradients`). Returns the
    :class:`~transformer_lib.training.History` (``history["loss"]``: the loss of each step);
    ``callback(step, history)`` is called after each step. Leaves the model in eval mode."""
    _lc.check_lora_model(model)
    steps, batch_size, accumulation = (check_int("steps", steps), check_int("batch_size", batch_size),
                                       check_int("accumulation", accumulation, high=batch_size))
    check_number("lr", lr, low=0.0, low_open=True)
    examples = list(examples)
    _lc.check_examples(examples, batch_size)
    params = check_trainable("model", model, "call add_lora(model, ...) first")
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    rng, state = random.Random(seed), {"order": []}

    def step_fn(step) -> float:  # back-propagates itself, micro-batch by micro-batch
        order = state["order"]
        if len(order) < batch_size:  # a new epoch: shuffle again
            order = list(range(len(examples)))
            rng.shuffle(order)
        batch, state["order"] = [examples[i] for i in order[:batch_size]], order[batch_size:]
        size = -(-batch_size // accumulation)
        return accumulate_gradients(model, [pad_batch(batch[i:i + size], pad_id) for i in range(0, batch_size, size)])

    return train_loop(model, opt, steps, step_fn, params=params, callback=callback)


# -- the chapter's task: answers as {"answer": ...} ----------------------------------------------------------

# Written for this book (no outside source): countries and their capitals (public facts), and
# number questions generated from a seed. Some countries are held out of training.
CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
    ("Egypt", "Cairo"), ("Canada", "Ottawa"), ("Russia", "Moscow"), ("China", "Beijing"), ("India", "New Delhi"),
    ("Greece", "Athens"), ("Portugal", "Lisbon"), ("Ireland", "Dublin"), ("Norway", "Oslo"),
    ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Poland", "Warsaw"), ("Austria", "Vienna"),
    ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Cuba", "Havana"), ("Chile", "Santiago"), ("Thailand", "Bangkok"),
    ("Belgium", "Brussels"), ("Denmark", "Copenhagen"), ("Hungary", "Budapest"), ("Mexico", "Mexico City"),
    ("Argentina", "Buenos Aires"), ("South Korea", "Seoul"), ("Turkey", "Ankara"), ("Iran", "Tehran"),
    ("Vietnam", "Hanoi"),
]
QUESTION_FORMS = ["What is the capital of {}?", "Name the capital city of {}.", "Which city is the capital of {}?"]
NUMBER_FORMS = [("What is {} + {}?", lambda a, b: a + b), ("What is {} minus {}?", lambda a, b: a - b),
                ("What is {} times {}?", lambda a, b: a * b)]


def json_answer(value) -> str:
    """The target format: a one-key JSON object, e.g. ``{"answer": "Paris"}`` or ``{"answer": 42}``."""
    return json.dumps({"answer": value})


def follows_format(text: str):
    """``(ok, value)``: is ``text`` exactly a JSON object with the one key ``"answer"``, and its value."""
    try:
        obj = json.loads(text.strip())
    except ValueError:
        return False, None
    if isinstance(obj, dict) and list(obj) == ["answer"]:
        return True, obj["answer"]
    return False, None


def json_task(n_train: int = 96, n_test: int = 24, seed: int = 0) -> tuple[list, list]:
    """``(train, test)`` lists of ``(prompt, target_answer, expected_value)``: capital and arithmetic
    questions. The test split uses countries and number pairs that training never shows, and the
    split is made before anything is trained or looked at."""
    check_int("n_train", n_train)
    check_int("n_test", n_test)
    rng = random.Random(seed)
    countries = CAPITALS[:]
    rng.shuffle(countries)
    held = len(countries) // 4  # a quarter of the countries only ever appear in the test split
    splits = {"train": countries[held:], "test": countries[:held]}
    seen, out = set(), {}
    for name, n in (("train", n_train), ("test", n_test)):
        rows = []
        while len(rows) < n:
            if rng.random() < 0.5:
                country, capital = rng.choice(splits[name])
                form = rng.choice(QUESTION_FORMS)
                key, value = (name, country, form), capital
                prompt = form.format(country)
            else:
                (form, f), a, b = rng.choice(NUMBER_FORMS), rng.randint(2, 60), rng.randint(2, 30)
                key, value, prompt = (form, a, b), f(a, b), form.format(a, b)
            if key in seen:
                continue
            seen.add(key)
            rows.append((prompt, json_answer(value), value))
        out[name] = rows
    return out["train"], out["test"]
