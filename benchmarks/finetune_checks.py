"""Fine-tuning MiniLM as a spam classifier: four follow-up measurements for chapter 20.

    nice .venv/bin/python benchmarks/finetune_checks.py        # writes results/finetune_checks.json

On the data and settings of ``finetune_budget.py`` (read from ``results/finetune_budget.json``:
the first 256 training, 200 validation and 600 test texts, 32 tokens, batches of 32, AdamW as
``finetune.train_classifier`` runs it, one thread) and with its ``make_model``:

* ``head_steps``: is the head's shortfall against logistic regression a matter of steps? The
  budget's head again (16 steps at its chosen rate, seeds 0-4), and the head given 15 times the
  steps (240), its rate chosen by the budget's rule (the best validation accuracy at seed 0 among
  1e-4, 1e-3 and 1e-2, one rate ten times further out while the best sits at an edge), seeds 0-4.
* ``paired``: full fine-tuning and LoRA at the budget's chosen rates, seeds 0-4: the budget's own
  runs again (their test accuracies are stored beside the budget file's, to show they are the
  same runs).
* ``grid``: the head's learning-rate x epochs grid of ``finetune.py`` (rates 1e-3, 3e-3, 1e-2,
  3e-2; 30 epochs; validation accuracy after each epoch) over seeds 0-4 instead of seed 0 alone.
* ``drift``: what keeps the chapter's live run's similarity ranking. Its setting (the first 320
  training texts, the top block for 2 epochs from the cached input of block 5), started from the
  head trained as the chapter trains it (15 epochs at 3e-3, same seed) or from a fresh head, each
  at 1e-4 (the live run's rate) and 1e-3, seeds 0-4: similarity agreement on the first 60
  validation texts (``finetune.similarity_agreement``) and accuracy on the first 240 test texts.

Every test prediction is stored as a string of 0/1 per run (1 = that test text classified
right), logistic regression's (C from the budget file) too, so that a chapter can resample the
test texts as well as the seeds. It prints a line per run, asserts nothing, and writes
benchmarks/results/finetune_checks.json after every part (a stopped run keeps what it measured).
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from _results import RESULTS, write_results  # noqa: E402
from finetune_budget import frozen_cache, make_model  # noqa: E402

from transformer_lib import finetune as ft  # noqa: E402
from transformer_lib.data.classification import load_spam  # noqa: E402
from transformer_lib.pretrained import load_minilm  # noqa: E402

PARTS = ["head_steps", "drift", "grid", "paired"]


def bits(correct: torch.Tensor) -> str:
    """A (N,) bool tensor as a string of 0/1."""
    return "".join("1" if c else "0" for c in correct.tolist())


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--parts", nargs="*", default=PARTS, choices=PARTS)
    p.add_argument("--out", default="finetune_checks")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    budget = json.loads((RESULTS / "finetune_budget.json").read_text())
    s, batch, epochs = budget["settings"], budget["batch"], budget["epochs"]
    seeds = list(range(a.seeds))

    lm = load_minilm("cpu")
    splits = {"train": load_spam("train"), "val": load_spam("validation"), "test": load_spam("test")}
    n = {"train": s["train"], "val": s["val"], "test": s["test"]}
    data = {}
    for split, part in splits.items():
        x, m = ft.tokenize(lm, part.texts[:n[split]], s["max_tokens"])
        data[split] = (x, m, part.labels[:n[split]])
    cache = frozen_cache(lm, data)  # as finetune_budget.py: block 4's input, and the last layer

    def inputs(split, start):
        x, m, y = data[split]
        return (x if start is None else cache[split][start]), m, y

    def train(method, lr, seed, n_epochs, score_val=False):
        model, start = make_model(lm, method, seed, {})
        x, m, y = inputs("train", start)
        ft.train_classifier(model, x, m, y, lr=lr, epochs=n_epochs, batch_size=batch, seed=seed,
                            start_layer=start)
        tx, tm, ty = inputs("test", start)
        correct = ft.predict(model, tx, tm, start_layer=start).argmax(-1) == ty
        val = None
        if score_val:
            vx, vm, vy = inputs("val", start)
            val = ft.accuracy(ft.predict(model, vx, vm, start_layer=start), vy)
        return correct, val

    from sklearn.linear_model import LogisticRegression

    def emb(split):
        return F.normalize(ft.mean_pool(cache[split][6], data[split][1]), dim=-1).numpy()

    c = budget["methods"]["logistic regression"]["chosen"]
    clf = LogisticRegression(C=c, max_iter=2000).fit(emb("train"), data["train"][2].numpy())
    lr_correct = torch.from_numpy(clf.predict(emb("test")) == data["test"][2].numpy())
    out = {"settings": vars(a), "budget_settings": {k: s[k] for k in ("train", "val", "test", "max_tokens", "steps")},
           "batch": batch, "logistic_regression": {"C": c, "accuracy": float(lr_correct.float().mean()),
                                                   "correct": bits(lr_correct)}, "parts": {}}
    print(f"logistic regression C {c:g}: test {lr_correct.float().mean():.3f}", flush=True)

    def save():
        out["seconds"] = round(time.perf_counter() - wall0, 1)
        out["cpu_seconds"] = round(time.process_time() - cpu0, 1)
        write_results(a.out, out)

    def seed_runs(method, lr, n_epochs):
        runs = [train(method, lr, seed, n_epochs)[0] for seed in seeds]
        accs = [float(r.float().mean()) for r in runs]
        print(f"{method:>10} lr {lr:g}, {n_epochs * n['train'] // batch} steps: test "
              + " ".join(f"{v:.3f}" for v in accs) + f"  ({time.process_time() - cpu0:.0f} CPU-s)", flush=True)
        return {"lr": lr, "steps": n_epochs * n["train"] // batch, "accuracy": accs, "correct": [bits(r) for r in runs]}

    for part in a.parts:
        if part == "head_steps":
            row = {"budget": seed_runs("head", budget["methods"]["head"]["chosen"], epochs)}
            row["budget"]["budget_file_accuracy"] = budget["methods"]["head"]["accuracy"]
            long_epochs = 15 * epochs
            tried, best, todo = {}, None, list(s["lrs"])
            while todo:  # finetune_budget.py's rule, at 15 times the steps
                lr = todo.pop(0)
                _, val = train("head", lr, 0, long_epochs, score_val=True)
                tried[lr] = val
                print(f"      head lr {lr:g}, {long_epochs * n['train'] // batch} steps: validation {val:.3f}", flush=True)
                if best is None or val > best[0] or (val == best[0] and lr < best[1]):
                    best = (val, lr)
                if not todo:
                    if best[1] == max(tried) and best[0] > min(tried.values()):
                        todo.append(round(max(tried) * 10, 12))
                    elif best[1] == min(tried) and best[0] > min(tried.values()):
                        todo.append(round(min(tried) / 10, 12))
            row["long"] = seed_runs("head", best[1], long_epochs)
            row["long"]["grid"] = {"values": sorted(tried), "val_accuracy": [tried[k] for k in sorted(tried)]}
            out["parts"]["head_steps"] = row
        elif part == "paired":
            row = {}
            for method in ("full", "LoRA"):
                row[method] = seed_runs(method, budget["methods"][method]["chosen"], epochs)
                row[method]["budget_file_accuracy"] = budget["methods"][method]["accuracy"]
            out["parts"]["paired"] = row
        elif part == "grid":
            lrs, n_epochs = [1e-3, 3e-3, 1e-2, 3e-2], 30
            vx, vm, vy = inputs("val", 6)
            val_acc = []
            for lr in lrs:
                per_seed = []
                for seed in seeds:
                    model, start = make_model(lm, "head", seed, {})
                    hist = ft.train_classifier(
                        model, cache["train"][6], data["train"][1], data["train"][2], lr=lr, epochs=n_epochs,
                        batch_size=batch, seed=seed, start_layer=6,
                        evaluate=lambda mdl: ft.accuracy(ft.predict(mdl, vx, vm, start_layer=6), vy))
                    per_seed.append(hist["eval"])
                val_acc.append(per_seed)
                print(f"grid lr {lr:g}: best per seed " + " ".join(f"{max(v):.3f}" for v in per_seed)
                      + f"  ({time.process_time() - cpu0:.0f} CPU-s)", flush=True)
            out["parts"]["grid"] = {"method": "head", "lrs": lrs, "epochs": list(range(1, n_epochs + 1)),
                                    "seeds": seeds, "val_accuracy": val_acc}
        elif part == "drift":
            n_live, n_test, n_sim, lr_head, head_epochs, block_epochs = 320, 240, 60, 3e-3, 15, 2
            tx, tm = ft.tokenize(lm, splits["train"].texts[:n_live], s["max_tokens"])
            ty = splits["train"].labels[:n_live]
            ex, em = ft.tokenize(lm, splits["test"].texts[:n_test], s["max_tokens"])
            ey = splits["test"].labels[:n_test]
            sx, sm = ft.tokenize(lm, splits["val"].texts[:n_sim], s["max_tokens"])
            h5_tr, h5_te = ft.frozen_states(probe, tx, tm, 5), ft.frozen_states(probe, ex, em, 5)
            with torch.no_grad():
                h6_tr = lm.model.blocks[5](h5_tr, tm.bool()[:, None, None, :])
            before = ft.sentence_embeddings(lm.model, sx, sm)
            arms = [(start, lr) for start in ("trained head", "fresh head") for lr in (1e-4, 1e-3)]
            rows = {f"{start}, lr {lr:g}": {"start": start, "lr": lr, "agreement": [], "accuracy": []}
                    for start, lr in arms}
            for seed in seeds:
                torch.manual_seed(seed)  # the chapter's live head, at this seed
                head_model = ft.SentenceClassifier(copy.deepcopy(lm.model))
                ft.set_trainable(head_model, 0)
                ft.train_classifier(head_model, h6_tr, tm, ty, lr=lr_head, epochs=head_epochs, batch_size=batch,
                                    seed=seed, start_layer=6)
                for start, lr in arms:
                    torch.manual_seed(seed)
                    top1 = ft.SentenceClassifier(copy.deepcopy(lm.model))
                    if start == "trained head":
                        top1.head.load_state_dict(head_model.head.state_dict())
                    ft.set_trainable(top1, 1)
                    ft.train_classifier(top1, h5_tr, tm, ty, lr=lr, epochs=block_epochs, batch_size=batch,
                                        seed=seed, start_layer=5)
                    r = rows[f"{start}, lr {lr:g}"]
                    r["accuracy"].append(ft.accuracy(ft.predict(top1, h5_te, em, start_layer=5), ey))
                    r["agreement"].append(ft.similarity_agreement(before, ft.sentence_embeddings(top1.encoder, sx, sm)))
                    print(f"drift seed {seed} {start}, lr {lr:g}: agreement {r['agreement'][-1]:.3f}, "
                          f"test {r['accuracy'][-1]:.3f}  ({time.process_time() - cpu0:.0f} CPU-s)", flush=True)
            out["parts"]["drift"] = {"train": n_live, "test": n_test, "sim": n_sim, "head_lr": lr_head,
                                     "head_epochs": head_epochs, "block_epochs": block_epochs, "rows": rows}
        save()
    print(f"# {out['seconds']} s wall, {out['cpu_seconds']} CPU-s")


if __name__ == "__main__":
    main()
