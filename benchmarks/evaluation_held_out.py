"""Chapter 30's contamination controls on the held-out paragraphs: SmolLM2, which was trained on
none of the book's prose, on the 38 cloze sentences of the paragraphs held out of the book GPT's
training, as ``cloze_questions`` builds them and with their wrong words redrawn from the training
text's vocabulary.

    .venv/bin/python benchmarks/evaluation_held_out.py     # about 40 CPU seconds, one thread

Writes ``benchmarks/results/evaluation_held_out.json``; the chapter computes every accuracy and
gap from it (and scores the book GPT on both versions itself, in under a second).

* ``cloze_held_out``: ``cloze_questions(held_out_text, 38)``, every usable sentence there. Its
  three wrong words are drawn from the held-out text's own vocabulary, a few hundred words, where
  the training sentences' come from the training text's, a few thousand; so the two sets differ
  in their choices as well as in whether the book GPT saw the sentence.
* ``cloze_held_out_seen_vocabulary``: the same 38 sentences and right words, the wrong words
  drawn (seeded) from the training text's vocabulary as ``cloze_questions`` draws them for the
  training sentences. Stored as questions, so the chapter scores exactly these.

Per item: each choice's summed log-likelihood and its tokens, zero-shot, the bare sentence.
"""
from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _results import write_results  # noqa: E402

from transformer_lib.data import load_corpus, split_paragraphs  # noqa: E402
from transformer_lib.evaluation import Question, cloze_questions, score_items, to_items  # noqa: E402
from transformer_lib.pretrained import load_smollm2  # noqa: E402


def vocabulary(text: str) -> list[str]:
    """The words ``cloze_questions`` draws wrong choices from: lower-case words of 4 or more
    letters of ``text``, after the same clean-up of MyST roles, links and bold."""
    text = re.sub(r"\{[a-z]+\}`[^`]*`", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text.replace("**", ""))
    return sorted({w for w in re.findall(r"\b[a-z]{4,}\b", text)})


def redrawn(questions, words, seed: int = 0) -> list[Question]:
    """The same sentences and right words, three wrong words drawn from ``words`` and the four
    shuffled, as ``cloze_questions`` does."""
    rng, out = random.Random(seed), []
    for q in questions:
        wrong = rng.sample([w for w in words if w != q.answer.lower()], 3)
        choices = [q.answer, *wrong]
        rng.shuffle(choices)
        out.append(Question(q.question, tuple(choices), choices.index(q.answer)))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.process_time()
    train, held_out = split_paragraphs(load_corpus())
    sets = {"cloze_held_out": cloze_questions(held_out, 38)}
    sets["cloze_held_out_seen_vocabulary"] = redrawn(sets["cloze_held_out"], vocabulary(train))
    lm = load_smollm2("cpu")
    rows = {}
    for name, questions in sets.items():
        t = time.process_time()
        scores = score_items(lm.model, lm.encode, to_items(questions, 0, "plain"))
        rows[name] = {"loglikelihoods": [[round(x, 4) for x in s.loglikelihoods] for s in scores],
                      "tokens": [list(s.tokens) for s in scores], "cpu_seconds": round(time.process_time() - t, 1)}
        right = sum(max(range(4), key=lambda k: s.loglikelihoods[k]) == s.gold for s in scores)
        print(f"  {name}: SmolLM2 right on {right} of {len(scores)}, {rows[name]['cpu_seconds']} s", flush=True)
    write_results("evaluation_held_out", {
        "settings": {"model": "SmolLM2-135M-Instruct", "layout": "plain", "shots": 0, "redraw_seed": 0,
                     "vocabulary_sizes": {"train": len(vocabulary(train)), "held_out": len(vocabulary(held_out))}},
        "questions": {name: [{"question": q.question, "choices": list(q.choices), "gold": q.gold} for q in qs]
                      for name, qs in sets.items()},
        "smollm2": rows,
        "cpu_seconds": round(time.process_time() - start, 1)})


if __name__ == "__main__":
    main()
