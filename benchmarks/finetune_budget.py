"""Fine-tuning MiniLM as a spam classifier: the methods of chapter 20 at one budget and one rule.

    nice .venv/bin/python benchmarks/finetune_budget.py            # writes results/finetune_budget.json

Every method takes the same number of optimizer steps (``--steps``, batches of 32 of the first
``--train`` training texts, each cut to ``--max-tokens`` tokens), with AdamW at the rate
``finetune.train_classifier`` schedules: a linear warm-up over a tenth of the steps (at least one)
and then a constant rate, so at 16 steps there is no warm-up (its one step already runs at the
full rate). Its
learning rate comes from one rule, the same for every method: the rate of the grid ``--lrs``
with the best accuracy on the first ``--val`` validation texts at seed 0 (ties: the smaller
rate); while the best is at an edge of the rates tried (and beats the worst), the grid grows by
one rate ten times further out on that side. Then ``--seeds`` seeds at that rate (seed 0's run is the one the rule chose), each scored
on the first ``--test`` test texts. Seeds change the head's initialisation, dropout and batch
order, not the data. Methods:

* logistic regression  - scikit-learn on the frozen, normalized sentence embeddings; its C from
                         ``--cs`` by the same validation rule (convex: no seeds);
* head                 - the linear head on the frozen encoder (cached last-layer states);
* top 2 layers         - a fresh head and the top two blocks (the lower four run once, cached);
* top 2, head first    - linear probing, then fine-tuning (LP-FT): the head of the "head" run
                         of the same seed, then the top two blocks and that head for ``--steps``
                         more steps (the head's own steps run on cached features);
* full                 - every parameter, embeddings included, a fresh head;
* LoRA                 - ``transformer_lib.lora.add_lora`` rank 8, alpha 16 on every block's
                         query and value projections, and a fresh head.

Per method and seed: test accuracy, and forgetting as ``finetune.similarity_agreement`` between
the pretrained and the tuned encoder's pairwise cosines of the first ``--sim`` validation texts
(1 = the ranking kept). Then one training step of each method on the same batch, in turn, for
``--rounds`` rounds after a warm-up round, on one thread, timed in CPU seconds of this process
(``time.process_time``: other processes on the machine do not count in it).

The file on record was made by two processes side by side (the machine was shared with other
work), then merged; its ``parts`` say which process measured which method:

    nice .venv/bin/python benchmarks/finetune_budget.py --methods "logistic regression" head \
        "top 2 layers" "top 2, head first" full LoRA        # stopped after "full"
    nice .venv/bin/python benchmarks/finetune_budget.py --methods LoRA \
        --time-methods head "top 2 layers" full LoRA --out finetune_budget_lora
    .venv/bin/python benchmarks/finetune_budget.py --merge finetune_budget_lora

Logistic regression was re-run alone after its C grid was given the edge rule above (C 100 had
been chosen at the edge of 0.1 .. 100 without a decade further out), and merged:

    nice -n 19 .venv/bin/python benchmarks/finetune_budget.py --methods "logistic regression" \
        --out finetune_budget_lr
    .venv/bin/python benchmarks/finetune_budget.py --merge finetune_budget_lr

It prints tables, asserts nothing, writes benchmarks/results/finetune_budget.json after every
method (a stopped run keeps what it measured) and records its own wall and CPU time.
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from _results import write_results  # noqa: E402

from transformer_lib import finetune as ft  # noqa: E402
from transformer_lib.data.classification import load_spam  # noqa: E402
from transformer_lib.pretrained import load_minilm  # noqa: E402

# name: (top blocks trained or "lora", embeddings, start from the "head" run's head)
METHODS = {
    "head": (0, False, False),
    "top 2 layers": (2, False, False),
    "top 2, head first": (2, False, True),
    "full": (6, True, False),
    "LoRA": ("lora", False, False),
}


def frozen_cache(lm, data):
    """The frozen encoder's states of every split of ``data`` ({split: (ids, mask, labels)}),
    computed once: ``{split: {4: block 4's input, 6: the last layer's output}}``."""
    probe = ft.SentenceClassifier(lm.model)
    cache = {}
    for split, (x, m, _) in data.items():
        h4 = ft.frozen_states(probe, x, m, 4)
        with torch.no_grad():
            h6 = h4
            for block in lm.model.blocks[4:]:
                h6 = block(h6, m.bool()[:, None, None, :])
        cache[split] = {4: h4, 6: h6}
    return cache


def make_model(lm, method, seed, heads):
    torch.manual_seed(seed)
    model = ft.SentenceClassifier(copy.deepcopy(lm.model))
    top, emb, head_first = METHODS[method]
    if top == "lora":
        from transformer_lib.lora import add_lora

        add_lora(model.encoder, rank=8, alpha=16, targets=["q_proj", "v_proj"])
        model.head.requires_grad_(True)
        return model, None
    if head_first:
        model.head.load_state_dict(heads[seed])
    ft.set_trainable(model, top, emb)
    return model, (None if top == 6 else 6 - top)  # frozen lower blocks run once


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--train", type=int, default=256)
    p.add_argument("--val", type=int, default=200)
    p.add_argument("--test", type=int, default=600)
    p.add_argument("--sim", type=int, default=60)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--lrs", type=float, nargs="*", default=[1e-4, 1e-3, 1e-2])
    p.add_argument("--cs", type=float, nargs="*", default=[0.1, 1.0, 10.0, 100.0])
    p.add_argument("--methods", nargs="*", default=["logistic regression", *METHODS])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--time-methods", nargs="*", default=None,
                   help="the methods whose steps are timed (default: those run, head first aside)")
    p.add_argument("--out", default="finetune_budget")
    p.add_argument("--merge", default=None, metavar="NAME",
                   help="add the methods (and step times) of results/NAME.json to results/<out>.json; "
                        "nothing is trained")
    a = p.parse_args(argv)
    if a.merge:
        import json

        from _results import RESULTS

        into, part = (json.loads((RESULTS / f"{n}.json").read_text()) for n in (a.out, a.merge))
        into["methods"].update(part["methods"])
        if part["step_cpu_s"] and part["step_cpu_s"]["raw"]:
            into["step_cpu_s"] = part["step_cpu_s"]
        into["cpu_seconds"] = round(into["cpu_seconds"] + part["cpu_seconds"], 1)
        into["seconds"] = max(into["seconds"], part["seconds"])  # the two ran side by side
        if "parts" in into:  # merged before: the part's methods move to a new entry
            for q in into["parts"]:
                q["methods"] = [k for k in q["methods"] if k not in part["methods"]]
            into["parts"].append({"methods": list(part["methods"]), "machine": part["machine"]})
        else:
            into["parts"] = [{"methods": list(m), "machine": d["machine"]} for d, m in
                             ((into, [k for k in into["methods"] if k not in part["methods"]]),
                              (part, part["methods"]))]
            del into["machine"]
        write_results(a.out, into)
        return
    torch.set_num_threads(a.threads)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    batch = 32
    if (a.steps * batch) % a.train:
        raise SystemExit("--steps * 32 must be a whole number of epochs over --train texts")
    epochs = a.steps * batch // a.train

    lm = load_minilm("cpu")
    parts = {"train": load_spam("train"), "val": load_spam("validation"), "test": load_spam("test")}
    n = {"train": a.train, "val": a.val, "test": a.test}
    data = {}
    for split, part in parts.items():
        x, m = ft.tokenize(lm, part.texts[:n[split]], a.max_tokens)
        data[split] = (x, m, part.labels[:n[split]])
    sim_x, sim_m = data["val"][0][:a.sim], data["val"][1][:a.sim]
    base_emb = ft.sentence_embeddings(lm.model, sim_x, sim_m)

    cache = frozen_cache(lm, data)

    def inputs(split, start):
        x, m, y = data[split]
        return (x if start is None else cache[split][start]), m, y

    out = {"settings": vars(a), "epochs": epochs, "batch": batch,
           "data": {s: len(d[2]) for s, d in data.items()} | {"test_spam": int(data["test"][2].sum())},
           "methods": {}, "step_cpu_s": None}

    def save():
        out["seconds"] = round(time.perf_counter() - wall0, 1)
        out["cpu_seconds"] = round(time.process_time() - cpu0, 1)
        write_results(a.out, out)

    if "logistic regression" in a.methods:
        from sklearn.linear_model import LogisticRegression

        def emb(split):
            return torch.nn.functional.normalize(ft.mean_pool(cache[split][6], data[split][1]), dim=-1).numpy()

        scores, todo = [], list(a.cs)
        while todo:  # the same rule as the rates below: a decade further out while the best is at an edge
            c = todo.pop(0)
            clf = LogisticRegression(C=c, max_iter=2000).fit(emb("train"), data["train"][2].numpy())
            scores.append((float((clf.predict(emb("val")) == data["val"][2].numpy()).mean()), c, clf))
            if not todo:
                best, worst = max(scores, key=lambda s: (s[0], -s[1])), min(s[0] for s in scores)
                cs = [s[1] for s in scores]
                if best[1] == max(cs) and best[0] > worst:
                    todo.append(round(max(cs) * 10, 12))
                elif best[1] == min(cs) and best[0] > worst:
                    todo.append(round(min(cs) / 10, 12))
        scores.sort(key=lambda s: s[1])
        best_val, c, clf = max(scores, key=lambda s: (s[0], -s[1]))
        acc = float((clf.predict(emb("test")) == data["test"][2].numpy()).mean())
        out["methods"]["logistic regression"] = {
            "grid": {"values": [s[1] for s in scores], "val_accuracy": [s[0] for s in scores]}, "chosen": c,
            "accuracy": [acc], "agreement": [1.0], "trainable": 385, "seeds": [None]}
        print(f"logistic regression: C {c:g} (val {best_val:.3f}), test accuracy {acc:.3f}", flush=True)
        save()

    heads = {}  # seed -> the trained head of the "head" method (for "head first")
    for method in [m for m in a.methods if m in METHODS]:
        if METHODS[method][2] and "head" not in out["methods"]:
            raise SystemExit(f"{method} needs the 'head' method run first")

        def run(lr, seed, score_val):
            model, start = make_model(lm, method, seed, heads)
            x, m, y = inputs("train", start)
            ft.train_classifier(model, x, m, y, lr=lr, epochs=epochs, batch_size=batch, seed=seed,
                                start_layer=start)
            vx, vm, vy = inputs("val", start)
            val = ft.accuracy(ft.predict(model, vx, vm, start_layer=start), vy) if score_val else None
            return model, start, val

        def score(model, start, seed):
            tx, tm, ty = inputs("test", start)
            acc = ft.accuracy(ft.predict(model, tx, tm, start_layer=start), ty)
            if method == "head":
                agree = 1.0  # the encoder is untouched
                heads[seed] = copy.deepcopy(model.head.state_dict())
            else:
                agree = ft.similarity_agreement(base_emb, ft.sentence_embeddings(model.encoder, sim_x, sim_m))
            return acc, agree

        tried, best = {}, None
        todo = list(a.lrs)
        while todo:
            lr = todo.pop(0)
            model, start, val = run(lr, 0, True)
            tried[lr] = val
            print(f"{method:>18} lr {lr:g}: validation {val:.3f}  ({time.process_time() - cpu0:.0f} CPU-s)",
                  flush=True)
            if best is None or val > best[0] or (val == best[0] and lr < best[1]):
                best = (val, lr, model, start)
            if not todo:  # the best at an edge of the rates tried: one step of 10 further out
                if best[1] == max(tried) and best[0] > min(tried.values()):
                    todo.append(round(max(tried) * 10, 12))
                elif best[1] == min(tried) and best[0] > min(tried.values()):
                    todo.append(round(min(tried) / 10, 12))
        _, lr, model, start = best
        vals = [tried[k] for k in sorted(tried)]
        accs, agrees = [], []
        for seed in range(a.seeds):
            if seed:
                model, start, _ = run(lr, seed, False)
            acc, agree = score(model, start, seed)
            accs.append(acc)
            agrees.append(agree)
            print(f"{method:>18} lr {lr:g} seed {seed}: test {acc:.3f}, similarity kept {agree:.3f}", flush=True)
        out["methods"][method] = {"grid": {"values": sorted(tried), "val_accuracy": vals}, "chosen": lr,
                                  "accuracy": accs, "agreement": agrees, "trainable": ft.count_trainable(model),
                                  "seeds": list(range(a.seeds))}
        save()

    # one step of each method on the same batch, in turn, CPU seconds on one thread
    torch.set_num_threads(1)
    runs = {}
    timed = a.time_methods or [m for m in a.methods if m in METHODS and not METHODS[m][2]]
    if not timed:  # e.g. logistic regression alone
        save()
        print(f"# {out['seconds']} s wall, {out['cpu_seconds']} CPU-s")
        return
    for method in timed:
        model, start = make_model(lm, method, 0, heads)
        x, m, y = inputs("train", start)
        width = int(m[:batch].sum(-1).max())
        opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-4)
        runs[method] = (model, start, x[:batch, :width], m[:batch, :width], y[:batch], opt)
    names = list(runs)
    times = {k: [] for k in names}
    for r in range(a.rounds + 1):
        for method in names[r % len(names):] + names[:r % len(names)]:  # rotate the order
            model, start, x, m, y, opt = runs[method]
            model.train()
            t0 = time.process_time()
            loss = torch.nn.functional.cross_entropy(ft._logits(model, x, m, start), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if r:  # round 0 warms up
                times[method].append(time.process_time() - t0)
    out["step_cpu_s"] = {"rounds": a.rounds, "batch": batch, "threads": 1, "raw": times}
    for k in names:
        print(f"step {k:>13}: median {sorted(times[k])[len(times[k]) // 2]:.3f} CPU-s", flush=True)
    save()
    print(f"# {out['seconds']} s wall, {out['cpu_seconds']} CPU-s")


if __name__ == "__main__":
    main()
