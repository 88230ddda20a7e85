"""Chapter 30's evaluation sweep: every model of the book on the book's evaluation sets.

    .venv/bin/python benchmarks/evaluation.py            # about 7.5 CPU minutes, one thread
    .venv/bin/python benchmarks/evaluation.py --quick    # a few items per setting (a smoke test)

Writes ``benchmarks/results/evaluation.json``; the chapter computes every accuracy, interval,
paired test and calibration number from it (per item), and re-scores a few items live to check
the stored numbers.

* Multiple choice (``transformer_lib.evaluation``): SmolLM2-135M-Instruct, the same with chapter
  21's JSON LoRA adapter (``smollm2_lora_json.pt``), and chapter 16's book GPT on the capital and
  sum questions (layout ``qa`` with 0 and 3 solved examples in front; the capitals also in the
  layouts ``q-a`` and ``plain``; the adapter zero-shot ``qa`` only, and not on the GPT's training text) and
  on cloze sentences of the book's prose (the GPT's training split, and chapters 18-27, which no
  model here was trained on). Per item: each choice's summed log-likelihood and its tokens.
* Generation with a verifier: SmolLM2 answers sum questions in its chat template (greedy, 16
  tokens; the texts are stored, the chapter scores them); chapter 26's addition model and one
  GRPO run of chapter 27's recipe (200 steps, seed 0), greedy on 2,000 held-out 4-digit
  problems: per-item right / wrong.
"""
from __future__ import annotations

import argparse
import copy
import glob
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _results import machine, write_results  # noqa: E402

from transformer_lib.data import extract_prose, load_corpus, load_gpt_checkpoint, split_paragraphs  # noqa: E402
from transformer_lib.evaluation import (arithmetic_questions, capital_questions, cloze_questions,  # noqa: E402
                                        score_items, to_items)
from transformer_lib.lora import load_lora, lora_disabled  # noqa: E402
from transformer_lib.pretrained import load_smollm2  # noqa: E402
from transformer_lib.reasoning import (addition_problems, decode, load_addition_model, sample_responses,  # noqa: E402
                                       train_grpo, verify)

ROOT = Path(__file__).resolve().parents[1]
LATER = range(18, 28)  # chapters whose prose no model here was trained on


def later_prose() -> str:
    paths = [p for p in sorted(glob.glob(str(ROOT / "chapters" / "[12][0-9]-*.md"))) if int(Path(p).name[:2]) in LATER]
    return "\n\n".join(extract_prose(Path(p).read_text(encoding="utf-8")) for p in paths)


def question_sets(quick: bool) -> dict:
    n = 6 if quick else None
    train, _ = split_paragraphs(load_corpus())
    sets = {"capitals": capital_questions(), "sums": arithmetic_questions(100),
            "cloze_train": cloze_questions(train, 100), "cloze_later": cloze_questions(later_prose(), 100)}
    return {k: v[:n] if n else v for k, v in sets.items()}


def settings(full: bool) -> list[tuple[str, str, int]]:
    """(question set, template, shots) to score: with ``full`` every shot count and template,
    else the zero-shot ``qa`` layout only."""
    shots = (0, 3) if full else (0,)
    out = [(s, "qa", k) for s in ("capitals", "sums") for k in shots]
    if full:
        out += [("capitals", t, 0) for t in ("q-a", "plain")]
    return out + [("cloze_train", "plain", 0)] * full + [("cloze_later", "plain", 0)]


def score_model(model, encode, sets, full) -> dict:
    rows = {}
    for name, template, shots in settings(full):
        start = time.process_time()
        scores = score_items(model, encode, to_items(sets[name], shots, template))
        rows[f"{name}/{template}/{shots}"] = {
            "loglikelihoods": [[round(x, 4) for x in s.loglikelihoods] for s in scores],
            "tokens": [list(s.tokens) for s in scores], "cpu_seconds": round(time.process_time() - start, 1)}
        print(f"  {name}/{template}/{shots}: {len(scores)} items, {rows[f'{name}/{template}/{shots}']['cpu_seconds']} s",
              flush=True)
    return rows


def chat_sums(lm, questions) -> list[str]:
    out = []
    for q in questions:
        out.append(lm.generate_text([{"role": "user", "content": q.question}], max_new_tokens=16))
    return out


def addition_outcomes(model, prompts, answers) -> list[int]:
    responses = sample_responses(model, prompts, 1, 7, 0.0, 0)  # greedy: 5 digits, '$', one spare
    return [int(verify(decode(r), a)) for r, a in zip(responses.tolist(), answers)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.process_time()
    sets = question_sets(args.quick)
    models = {}

    print("book GPT", flush=True)
    gpt, tok, _ = load_gpt_checkpoint()
    models["book_gpt"] = score_model(gpt, tok.encode, sets, True)

    lm = load_smollm2("cpu")
    load_lora(lm.model, ROOT / "transformer_lib" / "data" / "smollm2_lora_json.pt")
    print("SmolLM2", flush=True)
    with lora_disabled(lm.model):
        models["smollm2"] = score_model(lm.model, lm.encode, sets, True)
        generation_questions = arithmetic_questions(100 if not args.quick else 4, seed=1)
        texts = chat_sums(lm, generation_questions[:30 if not args.quick else 4])
    print("SmolLM2 + JSON LoRA", flush=True)
    models["smollm2_json"] = score_model(lm.model, lm.encode, sets, False)

    print("addition model and GRPO", flush=True)
    base = load_addition_model()
    count = 200 if args.quick else 2000
    prompts, answers = addition_problems(count, 4, True, torch.Generator().manual_seed(4321))
    addition = {"base": addition_outcomes(base, prompts, answers)}
    steps = 5 if args.quick else 200
    for seed in (0,):  # chapter 27's benchmark (grpo.json) has three seeds on 400 problems
        policy = copy.deepcopy(base)
        torch.manual_seed(seed)
        train_grpo(policy, base, 4, steps, lr=3e-4, beta=0.04, max_new_tokens=12, seed=seed)
        addition[f"grpo_seed{seed}"] = addition_outcomes(policy.eval(), prompts, answers)
        print(f"  seed {seed}: {sum(addition[f'grpo_seed{seed}']) / count:.3f} (base {sum(addition['base']) / count:.3f})",
              flush=True)

    write_results("evaluation" if not args.quick else "evaluation_quick", {
        "settings": {"quick": args.quick, "later_chapters": list(LATER), "grpo_steps": steps,
                     "addition_problems": count, "addition_generator_seed": 4321, "generation_seed": 1,
                     "generation_max_new_tokens": 16},
        "cloze_later_questions": [{"question": q.question, "choices": list(q.choices), "gold": q.gold}
                                  for q in sets["cloze_later"]],  # frozen: those chapters keep changing
        "multiple_choice": models,
        "generation": {"smollm2_chat_sums": texts,
                       "smollm2_chat_sums_answers": [q.answer for q in generation_questions[:len(texts)]]},
        "addition": addition,
        "cpu_seconds": round(time.process_time() - start, 1)})


if __name__ == "__main__":
    main()
