"""Fine-tuning MiniLM as a spam classifier, five ways side by side (issue 28, chapter 20).

    nice .venv/bin/python benchmarks/finetune.py                 # the full run (idle machine, an hour or more)
    nice .venv/bin/python benchmarks/finetune.py --train 256 --test 600 --max-tokens 32   # the run on file

Data: the SpamAssassin split that ships with the library (transformer_lib/data/spam_assassin, PDDL /
CC0): the first ``--train`` texts of the train split, the first ``--test`` of the test split, the
first ``--val`` of the validation split (for the learning-rate grid only), each cut to
``--max-tokens`` WordPiece tokens. Methods, all on all-MiniLM-L6-v2 (chapter 14):

* logistic regression - scikit-learn on the frozen, normalized sentence embeddings (seed-free);
* head                - ``SentenceClassifier``'s linear head on the frozen encoder (cached features);
* top 2 layers        - the head plus the top two blocks (the lower four run once, cached);
* full                - every parameter, embeddings included;
* LoRA                - ``transformer_lib.lora.add_lora`` rank 8, alpha 16 on every block's query and
                        value projections, plus the head.

Per method and seed: test accuracy, trainable parameters, median seconds per training step
(batch 32), peak extra memory of the training run (``profiling.peak_memory``: RSS on a CPU), and
forgetting: ``finetune.similarity_agreement`` between the pretrained and the tuned encoder's
cosine similarities of ``--sim`` validation sentences (1.0 = the similarity ranking is kept).
Seeds change the head's initialisation, dropout and the batch order, not the data. Then the
learning-rate x epochs grid (``--grid-method``: top 2 layers by default, or the head; seed 0;
validation accuracy after each epoch).

With ``--step-rounds N``: the step times side by side. One model per method (seed 0) takes one
training step on the same batch of 32 in turn, the order rotating each round, N rounds after a
warm-up round; medians per method, and per round each method's time over the head's. On a
machine shared with other work a ratio of steps taken seconds apart survives the load far better
than either time (the per-seed step times above come from runs at different loads, and seed 0's
runs under ``peak_memory``, whose small malloc thresholds slow every large allocation).

It prints tables, asserts nothing, and writes benchmarks/results/finetune.json after each method
(a run that is stopped still leaves what it measured). Only some rows again, then one file:

    nice -n 10 .venv/bin/python benchmarks/finetune.py --train 256 --test 600 --max-tokens 32 --val 200 \
        --sim 60 --epochs 2 --methods full --grid-lrs --out finetune_full
    nice -n 10 .venv/bin/python benchmarks/finetune.py --train 256 --max-tokens 32 --methods head \
        "top 2 layers" full LoRA --seeds 0 --grid-lrs --step-rounds 10 --out finetune_steps
    .venv/bin/python benchmarks/finetune.py --merge finetune finetune_full finetune_steps --out finetune

The file on record merges seven such runs (its "parts" name each, with its settings and load); the
last one added a third seed of full fine-tuning to the two before it:

    nice -n 5 .venv/bin/python benchmarks/finetune.py --train 256 --test 600 --max-tokens 32 --val 200 \
        --sim 60 --epochs 2 --methods full --grid-lrs --first-seed 2 --seeds 1 --out finetune_full_c
    .venv/bin/python benchmarks/finetune.py --merge finetune finetune_full_c --out finetune
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

from transformer_lib import finetune as ft  # noqa: E402
from transformer_lib.data.classification import load_spam  # noqa: E402
from transformer_lib.pretrained import load_minilm  # noqa: E402
from transformer_lib.profiling import peak_memory  # noqa: E402

METHODS = {  # name: (top_layers, embeddings, lr, epochs multiplier)
    "head": (0, False, 3e-3, 10),
    "top 2 layers": (2, False, 1e-4, 1),
    "full": (6, True, 5e-5, 1),
    "LoRA": (None, False, 3e-3, 4),  # the new head learns with the adapters: the head's rate, longer
}


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def make_model(lm, method: str, seed: int):
    torch.manual_seed(seed)
    model = ft.SentenceClassifier(copy.deepcopy(lm.model))
    top, emb, _, _ = METHODS[method]
    if top is None:
        from transformer_lib.lora import add_lora

        add_lora(model.encoder, rank=8, alpha=16, targets=["q_proj", "v_proj"])
        model.head.requires_grad_(True)
    else:
        ft.set_trainable(model, top, emb)
    start = None if top is None or top == 6 else 6 - top  # frozen lower blocks run once
    return model, start


def side_by_side_steps(lm, methods: list[str], train, inputs, rounds: int, batch_size: int = 32) -> dict:
    """Seconds of one training step of each method on the same batch, interleaved (see the module
    docstring): medians, and the median over rounds of each method's time / the head's."""
    from _results import machine

    y_all = train[2]
    runs = {}
    for method in methods:
        model, start = make_model(lm, method, 0)
        x, m = inputs("train", start)
        x, m, y = x[:batch_size], m[:batch_size], y_all[:batch_size]
        width = int(m.sum(-1).max())
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=METHODS[method][2])
        runs[method] = (model, start, x[:, :width], m[:, :width], y, opt)
    load_before = machine().get("load_1min")
    times = {method: [] for method in methods}
    for r in range(rounds + 1):
        order = methods[r % len(methods):] + methods[:r % len(methods)]  # rotate: no method always first
        for method in order:
            model, start, x, m, y, opt = runs[method]
            model.train()
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(ft._logits(model, x, m, start), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if r:  # round 0 warms up
                times[method].append(time.perf_counter() - t0)
    ref = methods[0]
    out = {"rounds": rounds, "batch": batch_size, "reference": ref, "load_1min_before": load_before,
           "load_1min_after": machine().get("load_1min"), "median_s": {}, "ratio": {}, "raw": times}
    for method in methods:
        out["median_s"][method] = statistics.median(times[method])
        out["ratio"][method] = statistics.median(a / b for a, b in zip(times[method], times[ref]))
        print(f"# step {method:>13}: median {out['median_s'][method]:.4f} s, "
              f"x{out['ratio'][method]:.1f} the {ref}'s (per-round median)", flush=True)
    return out


def merge(names: list[str], target: str) -> None:
    """One results file from several partial runs; each part's machine and settings are kept."""
    import json

    from _results import RESULTS

    out = {"methods": {}, "grid": None, "step_times": None, "parts": []}
    for name in names:
        part = json.loads((RESULTS / f"{name}.json").read_text())
        extended = []
        for method, row in part["methods"].items():  # other seeds of a row, same settings: added to it
            old = out["methods"].get(method)
            old_seeds = None if old is None else old.get("seeds", list(range(len(old["accuracy"]["values"]))))
            if old is not None and not set(old_seeds) & set(row["seeds"]) and \
                    (old["lr"], old["epochs"]) == (row["lr"], row["epochs"]):
                for key in ("accuracy", "step_s", "agreement"):
                    row[key] = summary(old[key]["values"] + row[key]["values"])
                row["seeds"] = old_seeds + row["seeds"]
                row["peak_mb"] = old["peak_mb"] if row["peak_mb"] is None else row["peak_mb"]
                extended.append(method)
        for earlier in out["parts"]:  # a method measured again replaces the earlier rows
            earlier["methods"] = [m for m in earlier["methods"] if m not in part["methods"] or m in extended]
        out["methods"].update(part["methods"])
        if part.get("grid") is not None:
            for earlier in out["parts"]:
                earlier["grid"] = False
        out["grid"] = part.get("grid") or out["grid"]
        if part.get("step_times") is not None:
            for earlier in out["parts"]:
                earlier["step_times"] = False
        out["step_times"] = part.get("step_times") or out["step_times"]
        if "parts" in part:  # an earlier merge: keep the runs it was made of
            kept = [q for q in part["parts"] if q["methods"] or q["grid"] or q.get("step_times")]
            out["parts"] += [{**q, "methods": [m for m in q["methods"] if m in part["methods"]]} for q in kept]
        else:
            out["parts"].append({"name": name, "machine": part["machine"], "settings": part["settings"],
                                 "methods": list(part["methods"]), "grid": part.get("grid") is not None,
                                 "step_times": part.get("step_times") is not None})
        out["parts"] = [q for q in out["parts"] if q["methods"] or q["grid"] or q.get("step_times")]
        out.setdefault("settings", part["settings"])
        out.setdefault("data", part["data"])
    write_results(target, out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--train", type=int, default=3510)
    p.add_argument("--test", type=int, default=1170)
    p.add_argument("--val", type=int, default=300)
    p.add_argument("--sim", type=int, default=100)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--first-seed", type=int, default=0,
                   help="seeds first-seed .. first-seed + seeds - 1 (more seeds of a row: merge adds them to it)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--grid-lrs", type=float, nargs="*", default=[3e-5, 3e-4, 3e-3])
    p.add_argument("--grid-method", default="top 2 layers", choices=["head", "top 2 layers"])
    p.add_argument("--methods", nargs="*", default=["logistic regression", *METHODS])
    p.add_argument("--step-rounds", type=int, default=0,
                   help="time one step of each method in turn, this many rounds (0: no side-by-side timing)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="finetune", help="results name: benchmarks/results/<out>.json")
    p.add_argument("--merge", nargs="*", default=None, metavar="NAME",
                   help="combine the methods and grids of results/<NAME>.json files into results/<out>.json "
                        "(runs split across processes on a busy machine); nothing is trained")
    a = p.parse_args(argv)
    if a.merge:
        merge(a.merge, a.out)
        return
    torch.set_num_threads(a.threads)
    t_start = time.time()
    lm = load_minilm("cpu")
    tr, va, te = load_spam("train"), load_spam("validation"), load_spam("test")
    tr_x, tr_m = ft.tokenize(lm, tr.texts[:a.train], a.max_tokens)
    va_x, va_m = ft.tokenize(lm, va.texts[:a.val], a.max_tokens)
    te_x, te_m = ft.tokenize(lm, te.texts[:a.test], a.max_tokens)
    tr_y, va_y, te_y = tr.labels[:a.train], va.labels[:a.val], te.labels[:a.test]
    sim_x, sim_m = va_x[:a.sim], va_m[:a.sim]
    base_emb = ft.sentence_embeddings(lm.model, sim_x, sim_m)
    print(f"# {describe(machine())}")
    print(f"# train {len(tr_y)} ({int(tr_y.sum())} spam), test {len(te_y)}, val {len(va_y)}, "
          f"max {a.max_tokens} tokens, seeds {a.seeds}, epochs {a.epochs}")

    # the frozen encoder, once: the input of block 4 (for "top 2 layers") and the last layer
    probe = ft.SentenceClassifier(lm.model)
    cache = {}
    cached = [m for m in a.methods if m in ("logistic regression", "head", "top 2 layers")]
    needed = (["train", "test"] if cached else []) + (["train", "val"] if a.grid_lrs else [])
    for name, (x, m) in {"train": (tr_x, tr_m), "test": (te_x, te_m), "val": (va_x, va_m)}.items():
        if name not in needed:
            continue
        h4 = ft.frozen_states(probe, x, m, 4)
        key = m.bool()[:, None, None, :]  # (N, 1, 1, L): True = a real key
        with torch.no_grad():
            h6 = h4
            for block in lm.model.blocks[4:]:
                h6 = block(h6, key)  # (N, L, D)
        cache[name] = {4: h4, 6: h6}
    print(f"# frozen features computed in {time.time() - t_start:.0f} s")

    out = {"settings": vars(a), "data": {"train": len(tr_y), "test": len(te_y), "val": len(va_y),
                                         "train_spam": int(tr_y.sum()), "test_spam": int(te_y.sum())},
           "methods": {}, "grid": None, "step_times": None}
    data = {"train": (tr_x, tr_m, tr_y), "test": (te_x, te_m, te_y), "val": (va_x, va_m, va_y)}

    def inputs(split, start):
        x, m, _ = data[split]
        return (x if start is None else cache[split][start]), m

    if "logistic regression" in a.methods:
        from sklearn.linear_model import LogisticRegression

        def emb(split):
            return torch.nn.functional.normalize(ft.mean_pool(cache[split][6], data[split][1]), dim=-1).numpy()

        t0 = time.time()
        clf = LogisticRegression(C=10.0, max_iter=2000).fit(emb("train"), tr_y.numpy())
        fit_s = time.time() - t0
        acc = float((clf.predict(emb("test")) == te_y.numpy()).mean())
        out["methods"]["logistic regression"] = {
            "accuracy": summary([acc]), "trainable": 384 + 1, "step_s": None, "fit_s": fit_s,
            "peak_mb": None, "agreement": summary([1.0]), "lr": None, "epochs": None}
        print(f"logistic regression: test accuracy {acc:.3f} (fit {fit_s:.1f} s)")
        write_results(a.out, out)

    for method in [m for m in a.methods if m in METHODS]:
        _, _, lr, mult = METHODS[method]
        epochs = a.epochs * mult
        accs, steps, agree, peak, trainable = [], [], [], None, None
        for seed in range(a.first_seed, a.first_seed + a.seeds):
            model, start = make_model(lm, method, seed)
            trainable = ft.count_trainable(model)
            x, m = inputs("train", start)
            run = {}

            def train():
                run["history"] = ft.train_classifier(model, x, m, tr_y, lr=lr, epochs=epochs, seed=seed,
                                                     start_layer=start)

            mem = peak_memory(train)
            if seed == 0:
                peak = None if mem is None else mem / 2**20
            steps.append(statistics.median(run["history"]["step_s"]))
            accs.append(ft.accuracy(ft.predict(model, *inputs("test", start), start_layer=start), te_y))
            if method == "head":
                agree.append(1.0)  # the encoder is untouched
            else:  # the tuned encoder (its frozen lower blocks are the original ones)
                agree.append(ft.similarity_agreement(base_emb, ft.sentence_embeddings(model.encoder, sim_x, sim_m)))
            out["methods"][method] = {"accuracy": summary(accs), "trainable": trainable, "step_s": summary(steps),
                                      "peak_mb": peak, "agreement": summary(agree), "lr": lr, "epochs": epochs,
                                      "seeds": list(range(a.first_seed, seed + 1))}
            write_results(a.out, out)  # after every seed: a stopped run keeps what it measured
            print(f"{method:>13} seed {seed}: accuracy {accs[-1]:.3f}, step {steps[-1]:.3f} s, "
                  f"agreement {agree[-1]:.3f}, loss {run['history']['epoch_loss'][-1]:.3f}  ({time.time() - t_start:.0f} s)")

    if a.step_rounds:
        out["step_times"] = side_by_side_steps(lm, [m for m in a.methods if m in METHODS], data["train"],
                                               lambda split, start: inputs(split, start), a.step_rounds)
        write_results(a.out, out)

    if a.grid_lrs:
        grid = {"method": a.grid_method, "lrs": a.grid_lrs, "epochs": list(range(1, a.epochs + 2)), "val_accuracy": []}
        for lr in a.grid_lrs:
            model, start = make_model(lm, a.grid_method, 0)
            hist = ft.train_classifier(model, cache["train"][start], tr_m, tr_y, lr=lr, epochs=a.epochs + 1,
                                       seed=0, start_layer=start,
                                       evaluate=lambda mdl: ft.accuracy(ft.predict(mdl, cache["val"][start], va_m,
                                                                                   start_layer=start), va_y))
            grid["val_accuracy"].append(hist["eval"])
            print(f"grid lr {lr:g}: " + " ".join(f"{h['eval']:.3f}" for h in hist))
            out["grid"] = grid
            write_results(a.out, out)

    out["total_s"] = time.time() - t_start
    print(f"\n{'method':>20} {'accuracy (min-max)':>22} {'trainable':>11} {'s/step':>8} {'peak MB':>8} {'agreement':>9}")
    for name, r in out["methods"].items():
        acc = r["accuracy"]
        step = "-" if r["step_s"] is None else f"{r['step_s']['median']:.3f}"
        peak = "-" if r["peak_mb"] is None else f"{r['peak_mb']:.0f}"
        print(f"{name:>20} {acc['median']:.3f} ({acc['min']:.3f}-{acc['max']:.3f}) {r['trainable']:>11,} "
              f"{step:>8} {peak:>8} {r['agreement']['median']:>9.3f}")
    write_results(a.out, out)


if __name__ == "__main__":
    main()
