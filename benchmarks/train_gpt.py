"""Train the small GPT of chapter 16 on the book's prose, measure each part of the recipe, and
save the checkpoint the chapter loads.

    python benchmarks/train_gpt.py            # about 30 minutes on a busy CPU core (one thread)
    python benchmarks/train_gpt.py long grid  # only some phases (main, ablations, grid, long, seeds),
                                              # merged into the existing results file
    python benchmarks/train_gpt.py seeds      # the seed sweep alone: about 8 minutes of CPU (3 processes)
    python benchmarks/train_gpt.py seeds-missing  # only the (setting, seed) pairs the results file lacks
    python benchmarks/train_gpt.py plateau    # the plateau test: 13 runs of 150 steps, about 4 minutes of CPU

Writes ``transformer_lib/data/book_gpt.pt`` (the model in float16, < 1 MB, with its tokenizer)
and ``benchmarks/results/train_gpt.json``: the main run's curves, one short run per recipe
ablation (each changes one thing against the same baseline), the same ablations that change the
loss most re-run on four more seeds (the spread a one-seed table cannot show), and a
learning-rate x warmup grid of loss curves for the chapter's widget. Everything is seeded and runs on one CPU thread, so a
rerun gives the same numbers.
"""
from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import RESULTS, write_results  # noqa: E402

import transformer_lib as tl  # noqa: E402
from transformer_lib.data import GPT_CHECKPOINT, load_corpus, split_paragraphs  # noqa: E402
from transformer_lib.tokenization import BPETokenizer  # noqa: E402
from transformer_lib.sampling import generate  # noqa: E402
from transformer_lib.training import evaluate_lm, train_lm, warmup_cosine_schedule  # noqa: E402

VOCAB = 1024
# the checkpoint: the chapter's live model (2 layers of width 64, 64-token context, 0.17M
# parameters) trained 4 times longer (1,600 steps against 400). A 4-layer model of width 128 (0.94M) trained for 800 steps
# reached only 4.37 here: on 63K training tokens and one CPU thread, steps beat size.
MAIN_MODEL = dict(d_model=64, num_heads=4, num_layers=2, max_len=64, dropout=0.1, init_std=0.02)
MAIN_TRAIN = dict(steps=1600, batch_size=16, context=64, lr=3e-3, warmup_steps=50, min_lr_ratio=0.1,
                  weight_decay=0.1, grad_clip=1.0, label_smoothing=0.0, eval_every=100, eval_windows=64)
# the ablations and the grid: the chapter's live model (2 layers of width 64, 64-token context)
SMALL_MODEL = dict(d_model=64, num_heads=4, num_layers=2, max_len=64, dropout=0.1, init_std=0.02)
SMALL_TRAIN = dict(steps=400, batch_size=16, context=64, lr=3e-3, warmup_steps=50, min_lr_ratio=0.1,
                   weight_decay=0.1, grad_clip=1.0, label_smoothing=0.0, eval_every=50, eval_windows=64)
ABLATIONS = {  # name -> (what changes in the model, what changes in training)
    "full recipe": ({}, {}),
    "no warmup": ({}, {"warmup_steps": 0}),
    "constant learning rate (no cosine decay)": ({}, {"min_lr_ratio": 1.0}),
    "no gradient clipping": ({}, {"grad_clip": None}),
    "no weight decay": ({}, {"weight_decay": 0.0}),
    "no dropout": ({"dropout": 0.0}, {}),
    "label smoothing 0.1": ({}, {"label_smoothing": 0.1}),
    "torch's default init (N(0,1) tied embedding)": ({"init_std": None}, {}),
}
# the seed sweep: the ablations whose conclusions turn on a few tenths of a nat, and the default
# initialisation (the chapter's largest effect), again on seeds 1-4 (seed 0 is the "ablations"
# phase), final losses only; three worker processes of one thread each
SEED_ABLATIONS = ["full recipe", "constant learning rate (no cosine decay)", "no dropout", "no warmup",
                  "torch's default init (N(0,1) tied embedding)"]
EXTRA_SEEDS = [1, 2, 3, 4]
SEED_WORKERS = 3
# the overfitting curve: the live model trained 4 times longer, with and without dropout
LONG_STEPS = 1600
GRID_LR = [1e-3, 3e-3, 1e-2, 3e-2]
GRID_WARMUP = [0, 30, 120]
GRID_STEPS = 150
# the plateau test: at the grid's peak rate 0.003 and length (150 steps), does a run leave the
# unigram plateau because its rate is still high after step 100 (the 120-step warmup's cosine
# starts at step 120) or because its warmup is long and gentle? Three schedules on seeds 0-4:
# the grid's 30- and 120-step warmups (seed 0 is the grid's own run) and a control that warms up
# over 30 steps, then holds the peak to step 120 and decays over the last 30 steps as the
# 120-step warmup does: the control's rate is at or above the 120-step warmup's at every step.
PLATEAU_LR = 3e-3
PLATEAU_SCHEDULES = {"warmup 30": (30, None), "warmup 120": (120, None),
                     "warmup 30, held to step 120": (30, 120)}  # name -> (warmup, hold until)
PLATEAU_SEEDS = [0, 1, 2, 3, 4]
RESULTS_FILE = RESULTS / "train_gpt.json"


def data():
    train_text, val_text = split_paragraphs(load_corpus())
    tok = BPETokenizer.train(train_text, VOCAB)
    return tok, torch.tensor(tok.encode(train_text)), torch.tensor(tok.encode(val_text))


def run(tok, train_ids, val_ids, model_kw, train_kw, seed=0, desc="run"):
    tl.seed_everything(seed)
    model = tl.DecoderOnlyLM(len(tok), **model_kw)
    start = time.perf_counter()
    history = train_lm(model, train_ids, val_ids, seed=seed, progress=False, desc=desc, **train_kw)
    history["seconds"] = time.perf_counter() - start
    best = min(history["eval_val"])
    print(f"{desc:<48} val {history['eval_val'][-1]:.3f} (best {best:.3f})  train {history['eval_train'][-1]:.3f}  "
          f"{history['tokens_per_s']:,.0f} tok/s  {history['seconds']:.0f} s", flush=True)
    return model, history


def curves(history):
    keep = ("eval_steps", "eval_train", "eval_val", "tokens_per_s", "seconds")
    out = {k: history[k] for k in keep}
    out["train_loss"] = [round(x, 4) for x in history["loss"]]
    return out


def save(results, new_machine=True):
    """Merge ``results`` into the existing results file (phases may be rerun one at a time). The
    file's ``machine`` is the one the main run's tokens/s was measured on: replaced only when the
    main phase runs (``new_machine``)."""
    path = RESULTS_FILE
    old = json.loads(path.read_text()) if path.exists() else {}
    if new_machine:
        old.pop("machine", None)
    write_results("train_gpt", {**old, **results})


def phase_main(tok, train_ids, val_ids, results):
    model, h = run(tok, train_ids, val_ids, MAIN_MODEL, MAIN_TRAIN, desc="main model (checkpoint)")
    results["main"] = curves(h)
    prompt = torch.tensor([tok.encode("The attention")])
    text = tok.decode(generate(model.eval(), prompt, 60, temperature=0.8, context=MAIN_MODEL["max_len"],
                               generator=torch.Generator().manual_seed(0))[0].tolist())
    print("sample:", text)
    config = {"vocab_size": len(tok), **MAIN_MODEL}
    info = {"val_loss": h["eval_val"][-1], "train_loss": h["eval_train"][-1], "tokens_per_s": h["tokens_per_s"],
            "seconds": h["seconds"], "eval_steps": h["eval_steps"], "eval_val": h["eval_val"],
            "eval_train": h["eval_train"], "train": MAIN_TRAIN}
    torch.save({"config": config, "tokenizer": tok.to_json(), "info": info,
                "state_dict": {k: v.half() for k, v in model.state_dict().items()}}, GPT_CHECKPOINT)
    print(f"# wrote {GPT_CHECKPOINT.name} ({GPT_CHECKPOINT.stat().st_size / 1e6:.1f} MB)")
    # the saved float16 weights, measured as the chapter will load them
    from transformer_lib.data import load_gpt_checkpoint
    loaded, _, _ = load_gpt_checkpoint()
    results["main"]["val_loss_float16"] = evaluate_lm(loaded, val_ids, MAIN_TRAIN["context"])
    results["main"]["val_loss_full"] = evaluate_lm(model, val_ids, MAIN_TRAIN["context"])


def phase_ablations(tok, train_ids, val_ids, results):
    results["ablations"] = {}
    for name, (model_kw, train_kw) in ABLATIONS.items():
        _, h = run(tok, train_ids, val_ids, {**SMALL_MODEL, **model_kw}, {**SMALL_TRAIN, **train_kw}, desc=name)
        results["ablations"][name] = curves(h)


def phase_grid(tok, train_ids, val_ids, results):
    results["grid"] = []
    for lr in GRID_LR:
        for warmup in GRID_WARMUP:
            kw = {**SMALL_TRAIN, "lr": lr, "warmup_steps": warmup, "steps": GRID_STEPS, "eval_every": 25, "eval_windows": 32}
            _, h = run(tok, train_ids, val_ids, SMALL_MODEL, kw, desc=f"grid lr={lr:g} warmup={warmup}")
            results["grid"].append({"lr": lr, "warmup": warmup, "train_loss": [round(x, 4) for x in h["loss"]],
                                    "eval_steps": h["eval_steps"], "eval_val": h["eval_val"]})


def held_schedule(warmup_steps, hold_until, total_steps, min_ratio):
    """Linear warmup over ``warmup_steps``, the peak held to step ``hold_until``, then
    :func:`warmup_cosine_schedule`'s cosine from ``hold_until`` to ``total_steps``."""
    cosine = warmup_cosine_schedule(hold_until, total_steps, min_ratio)
    return lambda s: (s + 1) / warmup_steps if s < warmup_steps else 1.0 if s < hold_until else cosine(s)


def phase_plateau(tok, train_ids, val_ids, results):
    """PLATEAU_SCHEDULES on PLATEAU_SEEDS, one process; seed 0 of the grid's two schedules is the
    grid's run (the same seeding), the rest run here. Saved after every run; the (schedule, seed)
    rows already in the results file are kept (every run is seeded on its own)."""
    from unittest import mock

    from _results import machine
    import transformer_lib.training as training
    old = json.loads(RESULTS_FILE.read_text())
    grid = {(g["lr"], g["warmup"]): g for g in old.get("grid", [])}
    kept = old.get("plateau", {})
    results["plateau"] = {"lr": PLATEAU_LR, "steps": GRID_STEPS, "seeds": PLATEAU_SEEDS, "runs": {},
                          **{k: kept[k] for k in ("machine", "cpu_seconds") if k in kept}}
    start_cpu = time.process_time() - kept.get("cpu_seconds", 0.0)
    for name, (warmup, hold) in PLATEAU_SCHEDULES.items():
        done = {r["seed"]: r for r in kept.get("runs", {}).get(name, [])}
        rows = results["plateau"]["runs"][name] = []
        for seed in PLATEAU_SEEDS:
            if seed in done:
                rows.append(done[seed])
                continue
            if hold is None and seed == 0 and (PLATEAU_LR, warmup) in grid:
                g = grid[(PLATEAU_LR, warmup)]
                rows.append({"seed": 0, "eval_steps": g["eval_steps"], "eval_val": g["eval_val"],
                             "train_loss": g["train_loss"]})
                continue
            kw = {**SMALL_TRAIN, "lr": PLATEAU_LR, "warmup_steps": warmup, "steps": GRID_STEPS, "eval_every": 25,
                  "eval_windows": 32}
            patch = (mock.patch.object(training, "warmup_cosine_schedule",
                                       lambda w, total, r, hold=hold: held_schedule(w, hold, total, r))
                     if hold is not None else contextlib.nullcontext())
            with patch:
                _, h = run(tok, train_ids, val_ids, SMALL_MODEL, kw, seed=seed, desc=f"plateau {name}, seed {seed}")
            rows.append({"seed": seed, "eval_steps": h["eval_steps"], "eval_val": h["eval_val"],
                         "train_loss": [round(x, 4) for x in h["loss"]], "lr": [round(x, 7) for x in h["lr"]]})
            results["plateau"]["machine"] = machine()
            results["plateau"]["cpu_seconds"] = round(time.process_time() - start_cpu, 1)
            save(results, new_machine=False)


def phase_long(tok, train_ids, val_ids, results):
    results["long"] = {}
    for dropout in (0.0, 0.1):
        kw = {**SMALL_TRAIN, "steps": LONG_STEPS, "eval_every": 100}
        _, h = run(tok, train_ids, val_ids, {**SMALL_MODEL, "dropout": dropout}, kw,
                   desc=f"{LONG_STEPS} steps, dropout {dropout}")
        results["long"][f"dropout {dropout}"] = curves(h)


def _seed_job(job):
    name, seed = job
    torch.set_num_threads(1)
    tok, train_ids, val_ids = data()
    model_kw, train_kw = ABLATIONS[name]
    _, h = run(tok, train_ids, val_ids, {**SMALL_MODEL, **model_kw}, {**SMALL_TRAIN, **train_kw}, seed=seed,
               desc=f"{name}, seed {seed}")
    return name, {"seed": seed, "eval_val": h["eval_val"][-1], "eval_train": h["eval_train"][-1],
                  "best_val": min(h["eval_val"])}


def phase_seeds(tok, train_ids, val_ids, results, only_missing=False):
    """SEED_ABLATIONS on EXTRA_SEEDS: final validation and training loss of each run, per setting.
    Each finished run is saved at once (one writer), so a sweep cut short keeps what it ran. With
    ``only_missing`` (phase ``seeds-missing``) the rows already in the results file are kept and
    only the missing (setting, seed) pairs run (every run is seeded on its own, so the rows are
    the ones a whole sweep would give)."""
    import multiprocessing
    from _results import machine
    old = json.loads(RESULTS_FILE.read_text()).get("seeds", {}) if only_missing and RESULTS_FILE.exists() else {}
    results["seeds"] = {"seeds": EXTRA_SEEDS, "runs": {name: list(old.get("runs", {}).get(name, []))
                                                       for name in SEED_ABLATIONS}}
    if "machine" in old:
        results["seeds"]["machine"] = old["machine"]
    done = {(name, r["seed"]) for name, rows in results["seeds"]["runs"].items() for r in rows}
    jobs = [(name, seed) for name in SEED_ABLATIONS for seed in EXTRA_SEEDS if (name, seed) not in done]
    if not jobs:
        return
    with multiprocessing.get_context("spawn").Pool(min(SEED_WORKERS, len(jobs))) as pool:
        for name, row in pool.imap_unordered(_seed_job, jobs):
            rows = results["seeds"]["runs"][name]
            rows.append(row)
            rows.sort(key=lambda r: r["seed"])
            results["seeds"]["machine"] = machine()
            save(results, new_machine=False)


PHASES = {"main": phase_main, "ablations": phase_ablations, "grid": phase_grid, "long": phase_long,
          "seeds": phase_seeds, "plateau": phase_plateau,
          "seeds-missing": lambda *args: phase_seeds(*args, only_missing=True)}


def main(phases):
    torch.set_num_threads(1)  # small models gain nothing from threads; one thread is reproducible
    tok, train_ids, val_ids = data()
    print(f"corpus: {len(train_ids):,} training and {len(val_ids):,} validation tokens, vocabulary {len(tok)}")
    results = {"vocab_size": len(tok), "train_tokens": len(train_ids), "val_tokens": len(val_ids),
               "small_model": SMALL_MODEL, "small_train": SMALL_TRAIN, "main_model": MAIN_MODEL,
               "main_train": MAIN_TRAIN, "long_steps": LONG_STEPS}
    for name in phases:
        PHASES[name](tok, train_ids, val_ids, results)
        save(results, new_machine="main" in phases)


if __name__ == "__main__":
    unknown = set(sys.argv[1:]) - set(PHASES)
    if unknown:
        sys.exit(f"unknown phases {sorted(unknown)}; choose from {list(PHASES)}")
    main(sys.argv[1:] or list(PHASES))
