"""Chapter 30's follow-up checks to ``evaluation.py``: SmolLM2 on the capital questions with
lettered options, its chat answers to sums under two generation budgets, and which of chapter
27's five GRPO seeds the chapter's GRPO model is.

    .venv/bin/python benchmarks/evaluation_checks.py     # about 5 CPU minutes, one thread

Writes ``benchmarks/results/evaluation_checks.json``; the chapter computes every accuracy and
checker verdict from it.

* Lettered options (the multiple-choice formulation of MMLU in lm-evaluation-harness): each
  capital question followed by its four choices as ``A. Paris`` ... ``D. Rome`` and ``Answer:``;
  the model scores the letters `` A`` ... `` D`` (the cloze formulation of ``evaluation.py`` scores
  the capitals' names). Zero-shot and with three solved examples in front, drawn as
  ``to_items`` draws them (the same other questions as ``capitals/qa/3``). Per item: each
  letter's log-likelihood and its tokens.
* Generation: the 30 sum questions of ``evaluation.py`` (``arithmetic_questions(100, seed=1)[:30]``)
  in SmolLM2's chat template, greedy, with 16 new tokens (``evaluation.py``'s budget; the texts
  must equal the stored ones) and with 128; the texts are stored, the chapter scores them.
* GRPO: chapter 27's recipe with seed 0, trained by ``grpo.py``'s ``train_setting`` as
  ``grpo_seeds.py`` trains it. Stored: whether its greedy outcomes on ``evaluation.py``'s 2,000
  problems equal the stored ``grpo_seed0`` (the chapter's GRPO model), and its and the base
  model's greedy outcomes on ``grpo_seeds.py``'s 400 held-out problems (generator seed 1234).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _results import write_results  # noqa: E402
from grpo import train_setting  # noqa: E402
from grpo_seeds import SETTINGS  # noqa: E402

from transformer_lib.evaluation import Question, arithmetic_questions, capital_questions, score_items, to_items  # noqa: E402
from transformer_lib.pretrained import load_smollm2  # noqa: E402
from transformer_lib.reasoning import addition_problems, decode, load_addition_model, sample_responses, verify  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

LETTERS = "ABCD"
BUDGETS = (16, 128)


def lettered(questions) -> list[Question]:
    """Each question with its choices written out under letters; the choices become the letters."""
    return [Question(f"{q.question}\n" + "".join(f"{L}. {c}\n" for L, c in zip(LETTERS, q.choices)) + "Answer:",
                     tuple(LETTERS), q.gold) for q in questions]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.process_time()
    lm = load_smollm2("cpu")
    questions = lettered(capital_questions())
    if args.quick:
        questions = questions[:6]
    rows = {}
    for shots in (0, 3):
        t = time.process_time()
        scores = score_items(lm.model, lm.encode, to_items(questions, shots, "plain"))
        rows[f"capitals/lettered/{shots}"] = {
            "loglikelihoods": [[round(x, 4) for x in s.loglikelihoods] for s in scores],
            "tokens": [list(s.tokens) for s in scores], "cpu_seconds": round(time.process_time() - t, 1)}
        print(f"  capitals/lettered/{shots}: {len(scores)} items, {rows[f'capitals/lettered/{shots}']['cpu_seconds']} s",
              flush=True)
    sums = arithmetic_questions(100, seed=1)[:4 if args.quick else 30]
    texts = {}
    for budget in BUDGETS:
        t = time.process_time()
        texts[str(budget)] = [lm.generate_text([{"role": "user", "content": q.question}], max_new_tokens=budget)
                              for q in sums]
        print(f"  chat sums, {budget} tokens: {round(time.process_time() - t, 1)} s", flush=True)
    print("GRPO seed 0", flush=True)
    t = time.process_time()
    policy, _, _ = train_setting(SETTINGS, "grpo", 0, 5 if args.quick else 200, clock=time.process_time)
    policy.eval()
    base = load_addition_model()

    def greedy(model, count, seed):
        prompts, answers = addition_problems(count, 4, True, torch.Generator().manual_seed(seed))
        responses = sample_responses(model, prompts, 1, 7, 0.0, 0)  # as evaluation.py and reasoning.accuracy
        return [int(verify(decode(r), a)) for r, a in zip(responses.tolist(), answers)]

    stored = json.loads((ROOT / "benchmarks" / "results" / "evaluation.json").read_text())["addition"]["grpo_seed0"]
    grpo = {"equals_evaluation_grpo_seed0": greedy(policy, 2000, 4321) == stored,
            "grpo_seeds_problems": {"base": greedy(base, 400, 1234), "grpo_seed0": greedy(policy, 400, 1234)},
            "cpu_seconds": round(time.process_time() - t, 1)}
    print(f"  same as evaluation.json's grpo_seed0: {grpo['equals_evaluation_grpo_seed0']}; on chapter 27's 400:"
          f" base {sum(grpo['grpo_seeds_problems']['base']) / 400:.4f},"
          f" GRPO {sum(grpo['grpo_seeds_problems']['grpo_seed0']) / 400:.4f}", flush=True)
    write_results("evaluation_checks" if not args.quick else "evaluation_checks_quick", {
        "settings": {"quick": args.quick, "layout": "question, 'A. choice' lines, 'Answer:'; choices ' A'..' D'",
                     "shots": [0, 3], "generation_seed": 1, "generation_questions": len(sums),
                     "budgets": list(BUDGETS)},
        "multiple_choice": rows,
        "generation": {"texts": texts, "answers": [q.answer for q in sums]},
        "grpo": grpo,
        "cpu_seconds": round(time.process_time() - start, 1)})


if __name__ == "__main__":
    main()
