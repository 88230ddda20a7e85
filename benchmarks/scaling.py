"""A scaling-law sweep on one CPU thread: small GPTs trained on a language whose entropy rate is
known, at four compute budgets spanning 33x, the law fitted to them, a prediction written down,
then a larger held-out run (4x the largest budget) that checks it. Chapter 31 reads the results.

    OMP_NUM_THREADS=1 nice python benchmarks/scaling.py sweep --workers 4  # ~8 minutes of CPU (44 runs)
    OMP_NUM_THREADS=1 nice python benchmarks/scaling.py predict   # fit, choose and predict the held-out run
    OMP_NUM_THREADS=1 nice python benchmarks/scaling.py heldout   # ~1.5 minutes: train it, record the loss

Each phase merges into ``benchmarks/results/scaling.json``; the sweep skips runs already there
(it can be stopped and resumed). ``predict`` refuses to overwrite a prediction, and ``heldout``
refuses to run without one: the prediction is made, stamped with its time and committed first.

The design. The text is :func:`transformer_lib.tasks.markov_language` (64 tokens, a Zipfian
unigram, a bigram and a 4,096-context trigram table): its entropy rate is exact, so the fitted E
can be compared with the true irreducible loss. Every run draws fresh windows (no token is seen
twice: D is the number of distinct tokens, as in Chinchilla's one-epoch runs). The models are
``DecoderOnlyLM``s of 2 blocks, width 16 to 128 (head width 16), trained with the chapter-16
recipe (AdamW with decay on matrices, warmup, cosine decay to 10% over exactly the run's length,
clipping). At each budget C three to five widths around the expected optimum are trained for
C / flops_per_token tokens; the two smallest budgets are run on five seeds.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import RESULTS, write_results  # noqa: E402

import transformer_lib as tl  # noqa: E402
from transformer_lib.scaling import fit_scaling_law, flops_per_token, product_parameters  # noqa: E402
from transformer_lib.tasks import markov_language  # noqa: E402
from transformer_lib.training import (causal_lm_loss, evaluate_lm, make_adamw, train_loop,  # noqa: E402
                                      warmup_cosine_schedule)

LANGUAGE = dict(vocab_size=64, seed=0, weights=(0.2, 0.4, 0.4), concentration=0.1)
CONTEXT, BATCH = 32, 32  # 1,024 tokens per step
TRAIN = dict(lr=2e-3, weight_decay=0.1, warmup_frac=0.05, min_lr_ratio=0.1, grad_clip=1.0)
WIDTHS = [16, 24, 32, 48, 64, 96, 128]
BUDGETS = [6e10 * 3.2 ** i for i in range(-1, 3)]  # FLOPs: 1.9e10 .. 6.1e11 (32.8x)
SIZES_AT = {0: WIDTHS[:3], 1: WIDTHS[:4], 2: WIDTHS[:5], 3: WIDTHS[2:6]}  # widths trained at each budget
SMALL_SEEDS = {0: [0, 1, 2, 3, 4], 1: [0, 1, 2, 3, 4]}  # the two smallest budgets, on five seeds
HELDOUT_FACTOR = 4.0  # the held-out run's compute / the largest budget's
HELDOUT_WIDTHS = [48, 64, 96, 128, 160]  # candidates for it (the best predicted one is trained)
VAL_WINDOWS, VAL_SEED = 2048, 10_000  # 65,536 validation tokens, the same for every run
PATH = RESULTS / "scaling.json"


def model_config(width: int) -> tl.ModelConfig:
    return tl.ModelConfig(LANGUAGE["vocab_size"], d_model=width, num_heads=width // 16, num_layers=2,
                          max_len=CONTEXT, init_std=0.02)


def validation(lang):
    ids = lang.sample(VAL_WINDOWS, CONTEXT, torch.Generator().manual_seed(VAL_SEED))  # (W, CONTEXT)
    return ids.reshape(-1)


def true_loss(lang, ids) -> float:
    """The chain's own mean loss on the validation windows (what a perfect model would score)."""
    w = ids.view(-1, CONTEXT)  # (W, CONTEXT)
    pi = lang.stationary
    first = pi.sum(1)
    logp = torch.log(pi[w[:, 0], w[:, 1]] / first[w[:, 0]])  # (W,) log P(x1 | x0)
    rest = torch.log(lang.transitions[w[:, :-2], w[:, 1:-1], w[:, 2:]])  # (W, CONTEXT - 2)
    return float(-(logp.sum() + rest.sum()) / (w.shape[0] * (CONTEXT - 1)))


def train_run(lang, val_ids, width: int, budget: float, seed: int) -> dict:
    config = model_config(width)
    per_token = flops_per_token(config, CONTEXT)
    steps = max(1, round(budget / per_token / (BATCH * CONTEXT)))
    tl.seed_everything(seed)
    model = tl.DecoderOnlyLM(config)
    optimizer = make_adamw(model, TRAIN["lr"], TRAIN["weight_decay"])
    schedule = warmup_cosine_schedule(max(1, round(TRAIN["warmup_frac"] * steps)), steps, TRAIN["min_lr_ratio"])
    data = torch.Generator().manual_seed(1000 + seed)

    def step_fn(step):
        batch = lang.sample(BATCH, CONTEXT, data)  # (B, CONTEXT), never seen before
        return causal_lm_loss(model(batch), batch)

    start = time.process_time()
    history = train_loop(model, optimizer, steps, step_fn, schedule=schedule, grad_clip=TRAIN["grad_clip"])
    train_cpu = time.process_time() - start
    tokens = steps * BATCH * CONTEXT
    loss = evaluate_lm(model, val_ids, CONTEXT, batch_size=256)
    row = {"width": width, "seed": seed, "budget": budget, "n": product_parameters(config),
           "parameters": tl.count_parameters(model), "tokens": tokens, "steps": steps,
           "flops": tokens * per_token, "loss": round(loss, 5),
           "train_loss_last100": round(float(np.mean(history["loss"][-100:])), 5), "cpu_s": round(train_cpu, 1)}
    print(f"C={budget:.2e} d={width:>3} seed {seed}: N={row['n']:>7,} D={tokens:>10,} steps {steps:>6} "
          f"loss {loss:.4f}  ({train_cpu:.0f} s CPU)", flush=True)
    return row


def load() -> dict:
    return json.loads(PATH.read_text()) if PATH.exists() else {}


def save(results: dict) -> None:
    results.pop("machine", None)
    write_results("scaling", results)


def _job(job):
    """One sweep run in a worker process (one thread): (width, budget, seed) -> its row."""
    torch.set_num_threads(1)
    lang = markov_language(**LANGUAGE)
    return train_run(lang, validation(lang), *job)


def phase_sweep(lang, val_ids, results, workers: int = 1):
    """Every (width, budget, seed) not yet in the results, longest first, on ``workers`` processes
    of one thread each (a run's numbers do not depend on which process ran it)."""
    import multiprocessing
    runs = results.setdefault("runs", [])
    done = {(r["width"], r["budget"], r["seed"]) for r in runs}
    jobs = [(width, budget, seed) for i, budget in enumerate(BUDGETS) for seed in SMALL_SEEDS.get(i, [0])
            for width in SIZES_AT[i] if (width, budget, seed) not in done]
    jobs.sort(key=lambda j: -j[1] / (flops_per_token(model_config(j[0]), CONTEXT) * j[0] ** -0.5))  # ~ CPU time
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        for row in pool.imap_unordered(_job, jobs):
            runs.append(row)
            runs.sort(key=lambda r: (r["budget"], r["width"], r["seed"]))
            save(results)


def sweep_fit(results):
    runs = [r for r in results["runs"] if r["seed"] == 0]  # one seed per point: every point weighs the same
    return fit_scaling_law([r["n"] for r in runs], [r["tokens"] for r in runs], [r["loss"] for r in runs])


def phase_predict(lang, val_ids, results):
    if "prediction" in results:
        sys.exit("a prediction is already recorded; delete it by hand to make a new one")
    fit = sweep_fit(results)
    budget = HELDOUT_FACTOR * max(BUDGETS)
    candidates = []
    for width in HELDOUT_WIDTHS:
        config = model_config(width)
        tokens = round(budget / flops_per_token(config, CONTEXT) / (BATCH * CONTEXT)) * BATCH * CONTEXT
        candidates.append({"width": width, "n": product_parameters(config), "tokens": tokens,
                           "predicted_loss": float(fit.predict(product_parameters(config), tokens))})
    best = min(candidates, key=lambda c: c["predicted_loss"])
    results["prediction"] = {"made_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "budget": budget,
                             "fit": {k: getattr(fit, k) for k in ("E", "A", "B", "alpha", "beta", "objective", "starts")},
                             "candidates": candidates, "chosen": best}
    print(f"fit: E={fit.E:.3f} A={fit.A:.1f} B={fit.B:.1f} alpha={fit.alpha:.3f} beta={fit.beta:.3f}")
    print(f"predicted: d={best['width']} N={best['n']:,} D={best['tokens']:,} loss {best['predicted_loss']:.4f}")
    save(results)


def phase_heldout(lang, val_ids, results):
    if "prediction" not in results:
        sys.exit("no prediction recorded: run the predict phase (and commit it) first")
    chosen = results["prediction"]["chosen"]
    row = train_run(lang, val_ids, chosen["width"], results["prediction"]["budget"], 0)
    row["measured_at"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    row["error"] = round((chosen["predicted_loss"] - row["loss"]) / row["loss"], 5)
    results["heldout"] = row
    print(f"held-out: predicted {chosen['predicted_loss']:.4f}, measured {row['loss']:.4f} "
          f"({100 * row['error']:+.2f}%)")
    save(results)


PHASES = {"sweep": phase_sweep, "predict": phase_predict, "heldout": phase_heldout}


def main(phases, workers: int = 1):
    torch.set_num_threads(1)  # small models gain nothing from threads; one thread is reproducible
    lang = markov_language(**LANGUAGE)
    val_ids = validation(lang)
    results = load()
    results.update({"language": {**LANGUAGE, "weights": list(LANGUAGE["weights"])},
                    "entropy_rate": lang.entropy_rate, "window_loss": lang.window_loss(CONTEXT),
                    "val_true_loss": true_loss(lang, val_ids), "context": CONTEXT, "batch": BATCH,
                    "train": TRAIN, "budgets": BUDGETS, "val_tokens": int(val_ids.numel())})
    for name in phases:
        if name == "sweep":
            phase_sweep(lang, val_ids, results, workers)
        else:
            PHASES[name](lang, val_ids, results)
    save(results)


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phases", nargs="+", choices=list(PHASES))
    parser.add_argument("--workers", type=int, default=1, help="processes for the sweep (one thread each)")
    args = parser.parse_args()
    main(args.phases, args.workers)
