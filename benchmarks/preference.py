"""Preference tuning: DPO's beta sweep over seeds, and plain fine-tuning on the chosen answers
(SFT) beside it, on the book's own GPT (chapter 22).

    nice -n 10 .venv/bin/python benchmarks/preference.py --seeds 5  # 4 betas + SFT, 5 seeds (~7 CPU-minutes)
    nice -n 10 .venv/bin/python benchmarks/preference.py --seeds 5 --extend  # only the seeds the file lacks
    .venv/bin/python benchmarks/preference.py --quick               # 2 betas + SFT, 1 seed, 40 steps
    nice -n 10 .venv/bin/python benchmarks/preference.py --trajectories  # the file's runs again, measured along (~8 CPU-minutes)

Setting: the reference is chapter 16's GPT (``load_gpt_checkpoint``, 170k parameters, trained on
the book's prose), frozen. Prompts: the first 4 tokens of every sentence of the training prose
(``sentence_prompts``); held-out prompts from the validation prose. Pairs: for each prompt the
reference samples two 16-token answers at temperature 1; the judge prefers the one in which a
smaller share of the letters is "e" (``letter_share``), ties dropped. Each seed draws its own
pairs and batches. Training: ``train_dpo`` (or ``train_sft``) from the reference's weights,
``--steps`` steps of 16 pairs, AdamW lr 1e-3, dropout off.

Measured per run: the DPO loss, reward margin and preference accuracy on the training pairs and
on held-out pairs every 10 steps; after training, on the held-out prompts (each answered twice):
the win rate of the tuned model's samples over the reference's (same judge, ties half), the mean
e-share of its samples, the KL to the reference estimated on its own samples (mean of
log pi - log pi_ref per 16-token answer, in nats) and the perplexity on the held-out prose (the
cost on what the model could do). Also per run: the mean e-share of its training pairs' chosen
answers and of both of the reference's answers on the training prompts (the scale the chosen share
is read on). Per seed, ``sft_curve``: SFT trained for twice the steps, its held-out e-share, KL and
win rate every 20 steps (does SFT stop at the chosen answers' share, or only pass through it?).
``--extend`` keeps the runs already in the results file and adds the seeds it lacks (the curves and
the training-pair shares are recomputed for every seed: they are cheap). It prints a table,
asserts nothing, and writes benchmarks/results/preference.json for chapter 22.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from _results import describe, machine, write_results  # noqa: E402

from transformer_lib.data import load_corpus, load_gpt_checkpoint, split_paragraphs  # noqa: E402
from transformer_lib.preference import (letter_share, make_pairs, sentence_prompts, sequence_logprobs,  # noqa: E402
                                        train_dpo, train_sft, win_rate)
from transformer_lib.sampling import generate  # noqa: E402
from transformer_lib.training import evaluate_lm, perplexity  # noqa: E402

PROMPT_TOKENS, ANSWER_TOKENS, BATCH, LR, EVAL_EVERY = 4, 16, 16, 1e-3, 10


def judge(text: str) -> float:
    """Higher is preferred: minus the share of the letters that are e."""
    return -letter_share(text)


_REFERENCE_SCORES = {}  # (seed, prompts' size) -> the reference's judged samples: the same at every call


def _judged(model, prompts, decode, seed: int):
    tokens = generate(model.eval(), prompts, ANSWER_TOKENS, temperature=1.0, seed=seed)  # (N, P + n)
    return tokens, [judge(decode(r[PROMPT_TOKENS:].tolist())) for r in tokens]


@torch.no_grad()
def evaluate_samples(policy, reference, prompts, decode, seed: int) -> dict:
    """Win rate, e-share and KL (on the policy's own samples) over held-out prompts, each twice."""
    both = torch.cat([prompts, prompts])  # (2N, P)
    ours, ours_s = _judged(policy, both, decode, seed)
    key = (seed, tuple(both.shape), int(both.sum()))
    if key not in _REFERENCE_SCORES:
        _REFERENCE_SCORES[key] = _judged(reference, both, decode, seed)[1]
    theirs_s = _REFERENCE_SCORES[key]
    mask = torch.zeros_like(ours, dtype=torch.bool)
    mask[:, PROMPT_TOKENS:] = True
    kl = (sequence_logprobs(policy(ours), ours, mask) - sequence_logprobs(reference(ours), ours, mask)).mean()
    return {"win_rate": win_rate(ours_s, theirs_s), "e_share": -statistics.fmean(ours_s),
            "reference_e_share": -statistics.fmean(theirs_s), "kl": kl.item()}


def run(method: str, beta: float | None, seed: int, steps: int, data: dict) -> dict:
    reference, tok = data["reference"], data["tok"]
    pairs = make_pairs(reference, data["train_prompts"], ANSWER_TOKENS, judge, tok.decode, seed=seed)
    eval_pairs = make_pairs(reference, data["val_prompts"], ANSWER_TOKENS, judge, tok.decode, seed=1000 + seed)
    policy = copy.deepcopy(reference)
    start = time.perf_counter()
    if method == "dpo":
        history = train_dpo(policy, reference, pairs, beta, steps, BATCH, LR, seed, eval_pairs, EVAL_EVERY)
    else:
        history = train_sft(policy, pairs, steps, BATCH, LR, seed)
    seconds = time.perf_counter() - start
    out = {"method": method, "beta": beta, "seed": seed, "pairs": len(pairs), "eval_pairs": len(eval_pairs),
           "seconds": seconds, "history": {k: v for k, v in history.items() if k != "loss"}}
    if method == "sft":  # the preference metrics of the SFT model, read with DPO's beta = 0.1
        from transformer_lib.preference import preference_metrics
        out["eval_accuracy"] = preference_metrics(policy, reference, eval_pairs, 0.1)["accuracy"]
    else:
        out["eval_accuracy"] = history["eval_accuracy"][-1]
    out.update(evaluate_samples(policy, reference, data["val_prompts"], tok.decode, seed=2000 + seed))
    out["val_perplexity"] = perplexity(evaluate_lm(policy, data["val_ids"], 64))
    out.update(pair_shares(pairs))
    return out


def pair_shares(pairs) -> dict:
    """The e-share of the chosen answers, and of all the reference's answers, on the training prompts."""
    chosen, rejected = -pairs.chosen_score, -pairs.rejected_score
    return {"chosen_e_share": float(chosen.mean()), "reference_train_e_share": float(torch.cat([chosen, rejected]).mean())}


def sft_curve(seed: int, steps: int, data: dict, every: int = 20) -> dict:
    """SFT on seed ``seed``'s chosen answers for ``steps`` steps, evaluated every ``every`` steps."""
    reference, tok = data["reference"], data["tok"]
    pairs = make_pairs(reference, data["train_prompts"], ANSWER_TOKENS, judge, tok.decode, seed=seed)
    policy = copy.deepcopy(reference)
    points = []

    def callback(step, history):
        if (step + 1) % every == 0:
            points.append({"step": step + 1, **evaluate_samples(policy, reference, data["val_prompts"], tok.decode,
                                                                seed=2000 + seed)})

    train_sft(policy, pairs, steps, BATCH, LR, seed, callback=callback)
    return {"seed": seed, **pair_shares(pairs), "points": points}


def train_prompt_share(model, data: dict, seed: int) -> float:
    """The mean e-share of ``model``'s answers to every training prompt, each answered once (seed 3000 + seed)."""
    return statistics.fmean(-s for s in _judged(model, data["train_prompts"], data["tok"].decode, 3000 + seed)[1])


def trajectories(old: dict, data: dict, every: int = EVAL_EVERY) -> dict:
    """The runs of ``old`` (a complete results file) again, training only: each DPO run with the win rate,
    e-share and KL on the held-out prompts every ``every`` steps, and every ``every // 2`` up to step
    2 * ``every`` where the KL moves fastest (the reward-KL frontier) and, at its end,
    the mean gradient weight sigmoid(r_l - r_w) and the mean implicit rewards of the chosen and the rejected
    answers on the training pairs; each seed's SFT curve again with the e-share of its answers on the
    training prompts at the DPO runs' length and at the curve's end (and the reference's there).
    Training is deterministic (one thread, seeded batches), so each run's final numbers must equal the
    stored ones: the largest difference is recorded."""
    reference, tok = data["reference"], data["tok"]
    steps, betas = old["settings"]["steps"], old["settings"]["betas"]
    dpo_runs, sft_points, worst = [], [], 0.0
    for seed in old["settings"]["seeds"]:
        pairs = make_pairs(reference, data["train_prompts"], ANSWER_TOKENS, judge, tok.decode, seed=seed)
        for beta in betas:
            stored = next(r for r in old["runs"] if (r["method"], r["beta"], r["seed"]) == ("dpo", beta, seed))
            policy, points = copy.deepcopy(reference), []

            def callback(step, history):
                n = step + 1
                if n < steps and (n % every == 0 or (n <= 2 * every and n % (every // 2) == 0)):
                    points.append({"step": step + 1, **evaluate_samples(policy, reference, data["val_prompts"],
                                                                        tok.decode, seed=2000 + seed)})

            history = train_dpo(policy, reference, pairs, beta, steps, BATCH, LR, seed, eval_every=steps,
                                callback=callback)
            points.append({"step": steps, **evaluate_samples(policy, reference, data["val_prompts"], tok.decode,
                                                             seed=2000 + seed)})
            worst = max(worst, abs(points[-1]["win_rate"] - stored["win_rate"]), abs(points[-1]["kl"] - stored["kl"]),
                        abs(history["train_margin"][-1] - stored["history"]["train_margin"][-1]))
            dpo_runs.append({"beta": beta, "seed": seed, "points": points,
                             **{k: history["train_" + k][-1] for k in ("weight", "chosen", "rejected", "margin")}})
            print(f"trajectory dpo beta={beta:<5} seed={seed}: weight {dpo_runs[-1]['weight']:.3f}, chosen "
                  f"{dpo_runs[-1]['chosen'] / beta:+.1f}, rejected {dpo_runs[-1]['rejected'] / beta:+.1f} nats; "
                  f"KL by step " + ", ".join(f"{p['kl']:.1f}" for p in points) + f" (largest change {worst:.1e})",
                  flush=True)
        policy, shares = copy.deepcopy(reference), {}

        def sft_callback(step, history):
            if (step + 1) % steps == 0:
                shares[step + 1] = train_prompt_share(policy, data, seed)

        train_sft(policy, pairs, 2 * steps, BATCH, LR, seed, callback=sft_callback)
        stored = next(c for c in old["sft_curve"] if c["seed"] == seed)["points"][-1]
        end = evaluate_samples(policy, reference, data["val_prompts"], tok.decode, seed=2000 + seed)
        worst = max(worst, abs(end["e_share"] - stored["e_share"]), abs(end["kl"] - stored["kl"]))
        sft_points.append({"seed": seed, "train_e_share": shares,
                           "reference_train_e_share": train_prompt_share(reference, data, seed)})
        print(f"trajectory sft seed={seed}: training-prompt e-share {shares}, reference "
              f"{sft_points[-1]['reference_train_e_share']:.3f} (largest change {worst:.1e})", flush=True)
    return {"every": every, "dpo": dpo_runs, "sft": sft_points, "largest_change_from_runs": worst}


def summarize(runs: list[dict]) -> list[dict]:
    rows = []
    for key in dict.fromkeys((r["method"], r["beta"]) for r in runs):
        group = [r for r in runs if (r["method"], r["beta"]) == key]
        row = {"method": key[0], "beta": key[1], "seeds": len(group)}
        for name in ("win_rate", "e_share", "kl", "val_perplexity", "eval_accuracy", "seconds"):
            values = [r[name] for r in group]
            row[name] = statistics.fmean(values)
            row[name + "_sd"] = statistics.stdev(values) if len(values) > 1 else 0.0
        rows.append(row)
    return rows


def save(args, steps, betas, seeds, reference_ppl, data, runs, complete: bool, curves=()) -> list[dict]:
    rows = summarize(runs)
    write_results("preference", {
        "settings": {"steps": steps, "batch_size": BATCH, "lr": LR, "prompt_tokens": PROMPT_TOKENS,
                     "answer_tokens": ANSWER_TOKENS, "eval_every": EVAL_EVERY, "betas": betas,
                     "seeds": list(seeds), "quick": args.quick, "threads": args.threads, "complete": complete},
        "reference": {"val_perplexity": reference_ppl,
                      "train_prompts": len(data["train_prompts"]), "val_prompts": len(data["val_prompts"])},
        "rows": rows, "runs": runs, "sft_curve": list(curves)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 betas, 1 seed, 40 steps")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--trajectories", action="store_true",
                        help="keep the results file's runs; add what trajectories() measures along them")
    parser.add_argument("--extend", action="store_true",
                        help="keep the runs of the existing results file; run only the seeds it lacks")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    betas = [0.1, 1.0] if args.quick else [0.03, 0.1, 0.3, 1.0]
    seeds = list(range(1 if args.quick else args.seeds))
    steps = 40 if args.quick else args.steps

    reference, tok, _ = load_gpt_checkpoint()
    train_text, val_text = split_paragraphs(load_corpus())
    data = {"reference": reference, "tok": tok,
            "train_prompts": sentence_prompts(train_text, tok.encode, PROMPT_TOKENS),
            "val_prompts": sentence_prompts(val_text, tok.encode, PROMPT_TOKENS),
            "val_ids": torch.tensor(tok.encode(val_text), dtype=torch.long)}
    if args.trajectories:
        import json
        path = ROOT / "results" / "preference.json"
        old = json.loads(path.read_text())
        start = time.process_time()
        old["trajectories"] = trajectories(old, data)
        old["trajectories"].update(cpu_seconds=time.process_time() - start, machine=machine())
        path.write_text(json.dumps(old, indent=1) + "\n")  # the runs' own machine line is kept
        print(f"trajectories: {old['trajectories']['cpu_seconds']:.0f} s of CPU")
        return
    reference_ppl = perplexity(evaluate_lm(reference, data["val_ids"], 64))
    runs, done = [], set()
    if args.extend:
        import json
        old = json.loads((ROOT / "results" / "preference.json").read_text())
        if (old["settings"]["steps"], old["settings"]["betas"]) != (steps, betas):
            raise SystemExit("--extend: the results file has other steps or betas; run without --extend")
        runs = old["runs"]
        done = {r["seed"] for r in runs}
    for seed in seeds:
        if seed in done:
            continue
        for beta in betas:
            runs.append(run("dpo", beta, seed, steps, data))
            print(f"dpo beta={beta:<5} seed={seed}: win {runs[-1]['win_rate']:.3f}, kl {runs[-1]['kl']:.2f}, "
                  f"ppl {runs[-1]['val_perplexity']:.1f} ({runs[-1]['seconds']:.0f} s)", flush=True)
        runs.append(run("sft", None, seed, steps, data))
        print(f"sft            seed={seed}: win {runs[-1]['win_rate']:.3f}, kl {runs[-1]['kl']:.2f}, "
              f"ppl {runs[-1]['val_perplexity']:.1f}", flush=True)
        if seed != seeds[-1]:  # a partial file after each seed, so an interrupted run leaves its seeds
            save(args, steps, betas, seeds[: seed + 1], reference_ppl, data, runs, complete=False)
    shares = {}
    for r in runs:  # runs kept from the file lack the training-pair shares: the pairs are cheap to redraw
        if "chosen_e_share" not in r:
            if r["seed"] not in shares:
                pairs = make_pairs(reference, data["train_prompts"], ANSWER_TOKENS, judge, tok.decode, seed=r["seed"])
                shares[r["seed"]] = pair_shares(pairs)
            r.update(shares[r["seed"]])
    curves = []
    for seed in seeds:
        curves.append(sft_curve(seed, 2 * steps, data))
        print(f"sft curve seed={seed}: chosen share {curves[-1]['chosen_e_share']:.3f}; e-share by step "
              + ", ".join(f"{p['step']}: {p['e_share']:.3f}" for p in curves[-1]["points"]), flush=True)
    rows = save(args, steps, betas, seeds, reference_ppl, data, runs, complete=True, curves=curves)
    info = machine()
    print(f"\nPreference tuning of the book GPT, {steps} steps of {BATCH} pairs ({describe(info)}); "
          f"reference: held-out perplexity {reference_ppl:.1f}")
    print(f"{'method':<8}{'beta':>6}{'win rate':>16}{'e share':>10}{'KL (nats)':>16}{'perplexity':>16}"
          f"{'held-out acc':>14}")
    for r in rows:
        beta = "" if r["beta"] is None else f"{r['beta']:g}"
        print(f"{r['method']:<8}{beta:>6}{r['win_rate']:>9.3f} ± {r['win_rate_sd']:.3f}{r['e_share']:>10.3f}"
              f"{r['kl']:>9.2f} ± {r['kl_sd']:.2f}{r['val_perplexity']:>9.1f} ± {r['val_perplexity_sd']:.1f}"
              f"{r['eval_accuracy']:>14.3f}")


if __name__ == "__main__":
    main()
