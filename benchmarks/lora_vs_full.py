"""LoRA against full fine-tuning of SmolLM2-135M-Instruct on chapter 21's JSON-answer task, over seeds.

    OMP_NUM_THREADS=1 nice -n 19 .venv/bin/python benchmarks/lora_vs_full.py          # about 25 CPU-min
    # or the two methods side by side, then their union:
    OMP_NUM_THREADS=1 nice -n 19 .venv/bin/python benchmarks/lora_vs_full.py --methods lora --part &
    OMP_NUM_THREADS=1 nice -n 19 .venv/bin/python benchmarks/lora_vs_full.py --methods full --part --no-memory --no-base
    .venv/bin/python benchmarks/lora_vs_full.py --job full 3e-05 2 &     # or any single run
    .venv/bin/python benchmarks/lora_vs_full.py --merge
    .venv/bin/python benchmarks/lora_vs_full.py --steps 2 --seeds 1 --grid-lora 2e-3 \\
        --grid-full 3e-5 --no-memory --no-save                                         # a smoke run

Both methods get the main run's budget and recipe (``benchmarks/results/lora.json``'s config: 24
AdamW steps of 4 conversations in 2 micro-batches, answer-only loss, rank 8 and alpha 16 on q/v for
LoRA); with seed ``s`` both see the same batches in the same order (``instruct.train_lora``'s
shuffle), and LoRA's A is drawn after ``torch.manual_seed(s)``. Full fine-tuning trains every
weight (the tied embedding included); the model has no dropout, so its seeds differ only in the
data order.

**The learning-rate rule, the same for both methods.** A grid of three rates a factor of 3 apart,
centred on a usual rate for the method (LoRA: the chapter's 2e-3; full fine-tuning: 3e-5),
extended by further factors of 3 while the best rate is at an edge (at most twice). Each rate is
trained with seed 0; the best is the one with the lowest answer-token loss on a validation split:
24 more questions drawn like the held-out ones (``json_task(n_test=48)``'s last 24, so the same
held-out countries as the test questions but no question of the test set, and number pairs seen
nowhere else). Then seeds 1 to ``--seeds``-1 run at that rate; seed 0's grid run is the first seed.
The grid's other runs record only their losses and validation loss.

**What each run measures** (as the chapter's main run): on the 24 held-out test questions, the
share in the JSON format and the share right (``lora.score``, greedy answers of at most 10 tokens,
each question's result kept for paired intervals); the forgetting probe: perplexity on the book's
prose (``lora.prose_perplexity``, 8 windows) and how many of three ordinary prompts get a JSON
answer; the validation loss; CPU seconds per optimizer step (``time.process_time`` of the
training, one intra-op thread). Peak memory: ``lora.part_memory``, a fresh process per method.
Writes ``benchmarks/results/lora_vs_full.json`` after every run, so a cut sweep keeps its runs.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lora as bench  # noqa: E402  (benchmarks/lora.py: the chapter's main run, reused)
from _results import RESULTS, write_results  # noqa: E402

from transformer_lib import instruct  # noqa: E402
from transformer_lib import lora as tl_lora  # noqa: E402
from transformer_lib.pretrained import load_smollm2  # noqa: E402

METHODS = ("lora", "full")
CENTRE = {"lora": 2e-3, "full": 3e-5}
FACTOR = 3.0
MAX_EXTENSIONS = 2


def validation_split():
    """24 questions drawn like the held-out ones, none of them a test or training question."""
    train, test = instruct.json_task(seed=0)
    train48, test48 = instruct.json_task(n_test=48, seed=0)
    assert train48 == train and test48[:24] == test  # json_task draws its rows in order
    return test48[24:]


@torch.no_grad()
def answer_loss(model, examples, pad_id, size=6):
    """Mean answer-token cross-entropy over ``examples`` (teacher-forced, every answer token alike)."""
    total, count = 0.0, 0
    for i in range(0, len(examples), size):
        tokens, mask = instruct.pad_batch(examples[i:i + size], pad_id)
        total += float(instruct.answer_only_loss(model(tokens), tokens, mask, reduction="sum"))
        count += int(mask[:, 1:].sum())
    return total / count


def evaluate(smol, test, val_examples, cfg):
    answers = bench.generate_all(smol, [p for p, _, _ in test], cfg["max_new_tokens"])
    fmt = [instruct.follows_format(a) for a in answers]
    right = [ok and str(v).strip().lower() == str(row[2]).lower() for (ok, v), row in zip(fmt, test)]
    ordinary = bench.generate_all(smol, bench.ORDINARY, 32)
    fmt_rate, right_rate = bench.score(test, answers)
    out = {} if val_examples is None else {"val_loss": answer_loss(smol.model, val_examples, smol.eos_id)}
    return {**out, "format": fmt_rate, "correct": right_rate,
            "format_each": [bool(ok) for ok, _ in fmt], "correct_each": [bool(r) for r in right],
            "prose_ppl": bench.prose_perplexity(smol, 8),
            "ordinary_json": sum(t.strip().startswith('{"answer"') for t in ordinary),
            "answers": answers, "ordinary": ordinary}


def train_run(smol, base, method, lr, seed, examples, val_examples, cfg):
    """One training run from the untouched ``base``; returns its row (losses, CPU seconds per step,
    validation loss) and the trained model."""
    model = copy.deepcopy(base)
    if method == "lora":
        torch.manual_seed(seed)
        tl_lora.add_lora(model, cfg["rank"], cfg["alpha"], cfg["targets"])
    else:
        model.requires_grad_(True)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    losses = instruct.train_lora(model, examples, cfg["steps"], cfg["batch"], cfg["accumulation"], lr,
                                 pad_id=smol.eos_id, seed=seed)["loss"]
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    for p in model.parameters():  # the grid keeps its models until one is chosen: drop the gradients
        p.grad = None
    row = {"method": method, "lr": lr, "seed": seed, "trainable": trainable, "losses": losses,
           "cpu_s_per_step": cpu / cfg["steps"], "wall_s_per_step": wall / cfg["steps"],
           "val_loss": answer_loss(model, val_examples, smol.eos_id)}
    print(f"# {method:4s} lr {lr:.2g} seed {seed}: val loss {row['val_loss']:.3f}, "
          f"{row['cpu_s_per_step']:.2f} CPU-s/step", flush=True)
    return row, model


def measure(smol, model, row, test, cfg):
    """The chapter's measurements of a trained model, added to its row."""
    base, smol.model = smol.model, model
    row.update(evaluate(smol, test, None, cfg))
    smol.model = base
    print(f"#   held-out format {row['format']:.2f}, correct {row['correct']:.2f}, prose ppl "
          f"{row['prose_ppl']:.2f}, ordinary in JSON {row['ordinary_json']}/3", flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=None, help="default: the main run's (lora.json)")
    ap.add_argument("--grid-lora", type=float, nargs="+", default=None, help="fixed grid (no extension)")
    ap.add_argument("--grid-full", type=float, nargs="+", default=None, help="fixed grid (no extension)")
    ap.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    ap.add_argument("--chosen", type=float, nargs="+", default=None, metavar="LR",
                    help="skip the grid: each method's rate as chosen by an earlier part (in --methods order)")
    ap.add_argument("--seed-list", type=int, nargs="+", default=None, help="the seeds after 0 (default 1..seeds-1)")
    ap.add_argument("--tag", default="", help="added to the part file's name")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-base", action="store_true", help="do not measure the untrained model")
    ap.add_argument("--part", action="store_true", help="write lora_vs_full.<methods>.part.json, for --merge")
    ap.add_argument("--merge", action="store_true", help="merge the .part.json files into lora_vs_full.json")
    ap.add_argument("--keep-parts", action="store_true", help="with --merge: keep the .part.json files")
    ap.add_argument("--job", nargs=3, metavar=("METHOD", "LR", "SEED"),
                    help="one run, measured in full, as a part of its own (for running runs side by side)")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    if args.job:
        method, lr, seed = args.job
        args.methods, args.chosen, args.seed_list = [method], [float(lr)], [int(seed)]
        args.part, args.no_memory, args.no_base, args.tag = True, True, True, f"_{lr}_{seed}"
    if args.merge:
        merge_parts(keep=args.keep_parts)
        return
    torch.set_num_threads(1)
    cfg = dict(json.loads((RESULTS / "lora.json").read_text())["config"])
    if args.steps is not None:
        cfg["steps"] = args.steps
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = {"config": cfg, "rule": {"centre": CENTRE, "factor": FACTOR, "max_extensions": MAX_EXTENSIONS,
                                      "select": "lowest validation answer-token loss, seed 0"},
              "runs": []}

    def save():
        result["cpu_seconds"] = time.process_time() - cpu0
        result["wall_seconds"] = time.perf_counter() - wall0
        if not args.no_save:
            write_results(f"lora_vs_full.{'_'.join(args.methods)}{args.tag}.part" if args.part else "lora_vs_full", result)

    if not args.no_memory:  # first, before this process holds a model
        mem_args = argparse.Namespace(memory_steps=2, rank=cfg["rank"], alpha=cfg["alpha"], batch=cfg["batch"],
                                      accumulation=cfg["accumulation"])
        result["memory"] = bench.part_memory(mem_args)
    smol = load_smollm2("cpu")
    train, test, examples = bench.training_examples(smol)
    val = validation_split()
    val_examples = [instruct.chat_example(smol, p, a) for p, a, _ in val]
    result.update(n_train=len(train), n_test=len(test), n_val=len(val), val_prompts=[p for p, _, _ in val])
    base = smol.model
    if not args.no_base:
        result["base"] = evaluate(smol, test, val_examples, cfg)
        print(f"# base: val loss {result['base']['val_loss']:.3f}, format {result['base']['format']:.2f}, "
              f"prose ppl {result['base']['prose_ppl']:.2f}", flush=True)
        save()

    def run(method, lr, seed):
        row, model = train_run(smol, base, method, lr, seed, examples, val_examples, cfg)
        result["runs"].append(row)
        save()
        return row, model

    chosen = dict(zip(args.methods, args.chosen or []))
    if chosen:
        result["chosen_lr"] = dict(chosen)
    for method in [] if args.chosen else args.methods:  # the grid, seed 0: only the validation loss; the chosen run is measured
        fixed = getattr(args, f"grid_{method}")
        lrs = sorted(fixed) if fixed else [CENTRE[method] / FACTOR, CENTRE[method], CENTRE[method] * FACTOR]
        grid = {lr: run(method, lr, 0) for lr in lrs}

        def best():
            return min(grid, key=lambda lr: grid[lr][0]["val_loss"])

        for _ in range(0 if fixed else MAX_EXTENSIONS):
            if best() not in (min(grid), max(grid)) or len(grid) < 2:
                break
            new = best() / FACTOR if best() == min(grid) else best() * FACTOR
            grid[new] = run(method, new, 0)
        chosen[method] = best()
        print(f"# {method}: grid {sorted(grid)}, chosen lr {chosen[method]:.2g}", flush=True)
        measure(smol, grid[chosen[method]][1], grid[chosen[method]][0], test, cfg)
        del grid
        result["chosen_lr"] = dict(chosen)
        save()
    for seed in args.seed_list or range(1, args.seeds):
        for method in args.methods:
            row, model = run(method, chosen[method], seed)
            measure(smol, model, row, test, cfg)
            del model
            save()
    save()
    summarize(result)
    print(f"# total {time.process_time() - cpu0:.0f} CPU-s, {time.perf_counter() - wall0:.0f} s")


def summarize(result):
    chosen = result.get("chosen_lr", {})
    at = {m: [r for r in result["runs"] if r["method"] == m and "format" in r and r["lr"] == chosen.get(m, r["lr"])]
          for m in METHODS}
    for key in ("format", "correct", "prose_ppl", "ordinary_json", "val_loss", "cpu_s_per_step"):
        print(f"# {key:14s} " + ", ".join(f"{m} {statistics.mean(r[key] for r in rows):.3f}"
                                           for m, rows in at.items() if rows))


def merge_parts(keep=False):
    """The runs can be spread over processes (``--methods lora --part``, ``--methods full --part
    --no-memory --no-base``, ``--job METHOD LR SEED``); this writes their union as
    ``lora_vs_full.json`` and removes the parts. The rule is applied here, to the union: each
    method's chosen rate is the seed-0 run with the lowest validation loss, and the grid must hold
    the three centre rates and, where the best is at an edge, the next rate out (else it stops).
    A run found twice (a seed-0 grid run measured again) must have the same validation loss
    (the runs are deterministic); the measured copy is kept. CPU seconds are summed, wall seconds
    are the longest part's."""
    paths = sorted(RESULTS.glob("lora_vs_full.*.part.json"))
    parts = [json.loads(p.read_text()) for p in paths]
    assert len({json.dumps(p["config"], sort_keys=True) for p in parts}) == 1, "the parts ran different configs"
    result = {k: v for p in parts for k, v in p.items() if k not in ("machine", "runs", "chosen_lr")}
    runs = {}
    for r in (r for p in parts for r in p["runs"]):
        key = (r["method"], r["lr"], r["seed"])
        if key in runs:
            assert abs(runs[key]["val_loss"] - r["val_loss"]) < 1e-6, f"{key} ran twice with different results"
            r = {**runs[key], **r, "repeat_val_losses": [runs[key]["val_loss"], r["val_loss"]]}
        runs[key] = r
    result["runs"] = sorted(runs.values(), key=lambda r: (r["method"], r["seed"], r["lr"]))
    chosen = {}
    for m in METHODS:
        grid = {r["lr"]: r["val_loss"] for r in result["runs"] if r["method"] == m and r["seed"] == 0}
        centre = [CENTRE[m] / FACTOR, CENTRE[m], CENTRE[m] * FACTOR]
        assert all(any(math.isclose(lr, c) for lr in grid) for c in centre), f"{m}: the grid is incomplete"
        best = min(grid, key=grid.get)
        assert best not in (min(grid), max(grid)), f"{m}: the best rate {best} is at the grid's edge: extend it"
        chosen[m] = best
    result["chosen_lr"] = chosen
    result["cpu_seconds"] = sum(p["cpu_seconds"] for p in parts)
    result["wall_seconds"] = max(p["wall_seconds"] for p in parts)
    result["parts"] = {p_path.name: {"machine": p["machine"], "cpu_seconds": p["cpu_seconds"],
                                     "wall_seconds": p["wall_seconds"]} for p_path, p in zip(paths, parts)}
    write_results("lora_vs_full", result)
    summarize(result)
    for p in [] if keep else paths:
        p.unlink()


if __name__ == "__main__":
    main()
