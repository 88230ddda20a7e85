"""Chapter 3's multi-head experiments over seeds: learning rates, ablations and timings.

    .venv/bin/python benchmarks/heads.py                # all three parts (about 5.5 CPU-minutes)
    .venv/bin/python benchmarks/heads.py --only lr      # one part: lr, ablation or timing

Each part answers a question the chapter's single runs cannot; the chapter prints the results
from ``benchmarks/results/heads.json`` and checks its sentences against them.

* ``lr``: is one head slower, or only trained at a rate chosen for four? The one-layer model with
  1, 2 and 4 heads (d_model 32, 300 steps, as in the chapter) at each learning rate of ``RATES``,
  seeds 0 to 4. One rule picks each head count's rate: the rate with the best mean worst-task
  accuracy on validation sequences (seed ``1000 + s``). Runs already in the results file at the
  same settings are kept (so a rate added to the grid costs only its own runs). The test accuracy (seed ``123 + s``, as
  ``benchmarks/seeds.py``) is reported at every rate and read at the chosen one.
* ``ablation``: does a pattern over-count roles in every seed, not only in seed 0? The two-layer,
  four-head model of every seed: each head's pattern role (the chapter's rule: the task with the
  largest head score, "mixed" below 0.5) and the accuracy with the head mean-ablated (its
  ``hook_z`` replaced by the mean over the 512 test sequences), one head at a time.
* ``timing``: what do more, narrower heads cost on a CPU? ``MultiHeadAttention(512, h)`` for
  h = 1, 8, 64 on 512 tokens, the readable path (weights materialised) and the fused one (SDPA),
  timed as the CPU time of one thread (``time_call(cpu_time=True)``: minimum of 3 after one
  warm-up), repeated 5 times with freshly initialised modules; the ratios to h = 1 are read within
  a repetition. Run under ``ATEN_CPU_CAPABILITY=default`` (PyTorch's unvectorized kernels, the
  setting the chapter's stored outputs are computed in) the part is stored as
  ``timing_unvectorized`` instead, so the two kernel settings can be compared:

      ATEN_CPU_CAPABILITY=default MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python benchmarks/heads.py --only timing
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_results  # noqa: E402

import transformer_lib as tl  # noqa: E402
from transformer_lib import probes, tasks, toy_models  # noqa: E402
from transformer_lib.profiling import time_call  # noqa: E402

SEEDS = list(range(5))
RATES = (1e-3, 3e-3, 1e-2, 3e-2)
HEADS = (1, 2, 4)
LENGTH, VOCAB, STEPS = 12, 16, 300
cpu = torch.device("cpu")


def _test(seed: int):
    return tasks.three_lookups_batch(512, LENGTH, VOCAB, torch.Generator().manual_seed(123 + seed))


def _valid(seed: int):
    return tasks.three_lookups_batch(512, LENGTH, VOCAB, torch.Generator().manual_seed(1000 + seed))


def lr_part(earlier: dict | None = None) -> dict:
    """``earlier``: this part's previous results; its runs at the same settings are kept, not rerun."""
    done = {(r["heads"], r["lr"], r["seed"]): r for r in (earlier or {}).get("runs", [])
            if (earlier or {}).get("steps") == STEPS}
    runs = []  # one row per (heads, rate, seed)
    for h in HEADS:
        for lr in RATES:
            for seed in SEEDS:
                if (h, lr, seed) in done:
                    runs.append(done[(h, lr, seed)])
                    continue
                model, _ = toy_models.train_lookup_model(num_heads=h, num_layers=1, steps=STEPS, lr=lr,
                                                         seed=seed, device=cpu)
                with torch.no_grad():
                    valid = toy_models.lookup_accuracy(model, _valid(seed))
                    test = toy_models.lookup_accuracy(model, _test(seed))
                runs.append({"heads": h, "lr": lr, "seed": seed, "valid_worst": min(valid.values()),
                             "test": test, "test_worst": min(test.values())})
            print(f"  lr: {h} heads, lr {lr:g} done", flush=True)
    chosen = {}
    for h in HEADS:
        mean_valid = {lr: sum(r["valid_worst"] for r in runs if r["heads"] == h and r["lr"] == lr) / len(SEEDS)
                      for lr in RATES}
        best = max(RATES, key=lambda lr: mean_valid[lr])
        chosen[str(h)] = {"lr": best, "mean_valid_worst": mean_valid,
                          "test_worst": [r["test_worst"] for r in runs if r["heads"] == h and r["lr"] == best]}
    return {"seeds": SEEDS, "rates": list(RATES), "steps": STEPS,
            "rule": "per head count, the rate with the best mean (over seeds) worst-task accuracy on "
                    "validation sequences (seed 1000 + s)",
            "runs": runs, "chosen": chosen}


def _roles(model, tokens) -> list[list[str]]:
    with torch.no_grad(), probes.record_attention(model, weights=True) as calls:
        model(tokens)
    roles = []
    for call in calls:
        scores = probes.head_scores(call.weights, tokens)
        layer = []
        for head in range(call.weights.shape[1]):
            best = max(tasks.LOOKUP_TASKS, key=lambda t: scores[t][head].item())
            layer.append(best if scores[best][head].item() > 0.5 else "mixed")
        roles.append(layer)
    return roles


def ablation_part() -> dict:
    per_seed = []
    for seed in SEEDS:
        test = _test(seed)
        model, _ = toy_models.train_lookup_model(num_heads=4, num_layers=2, steps=STEPS, seed=seed, device=cpu)
        names = [f"blocks.{layer}.hook_z" for layer in range(2)]
        with torch.no_grad(), probes.record_activations(model, names) as seen:
            full = toy_models.lookup_accuracy(model, test)
        means = {name: seen[name].mean(dim=0, keepdim=True) for name in names}  # (1, L, h, d_k)
        drops = []  # [layer][head] -> {task: accuracy lost}
        for layer in range(2):
            row = []
            for head in range(4):
                keep = torch.arange(4).view(4, 1) != head  # (h, 1): False for the removed head
                fill = means[names[layer]]
                with torch.no_grad(), probes.patch_activations(
                        model, {names[layer]: lambda z, keep=keep, fill=fill: torch.where(keep, z, fill)}):
                    acc = toy_models.lookup_accuracy(model, test)
                row.append({t: full[t] - acc[t] for t in tasks.LOOKUP_TASKS})
            drops.append(row)
        roles = _roles(model, test[0])
        # heads whose pattern names a task but whose removal costs that task under one point
        unused = sum(1 for layer in range(2) for head in range(4)
                     if roles[layer][head] != "mixed" and drops[layer][head][roles[layer][head]] < 0.01)
        per_seed.append({"seed": seed, "accuracy": full, "roles": roles, "drops": drops,
                         "pattern_roles_not_used": unused})
        print(f"  ablation: seed {seed} done", flush=True)
    return {"seeds": SEEDS, "steps": STEPS, "per_seed": per_seed}


def timing_part(repeats: int = 5, n: int = 512, d_model: int = 512) -> dict:
    runs = []
    for rep in range(repeats):
        torch.manual_seed(rep)
        x = torch.randn(1, n, d_model)  # (1, n, d_model)
        row = {"repetition": rep}
        with torch.no_grad():
            for h in (1, 8, 64):
                module = tl.MultiHeadAttention(d_model, h).eval()
                row[f"readable_{h}"] = time_call(lambda: module(x, need_weights=True), repeats=3, warmup=1,
                                                 cpu_time=True)
                row[f"fused_{h}"] = time_call(lambda: module(x), repeats=3, warmup=1, cpu_time=True)
        for path in ("readable", "fused"):
            for h in (8, 64):
                row[f"{path}_{h}_over_1"] = row[f"{path}_{h}"] / row[f"{path}_1"]
        print(f"  timing: repetition {rep}: " + ", ".join(f"{k} {v:.3g}" for k, v in row.items()
                                                         if k.endswith("over_1")), flush=True)
        runs.append(row)
    return {"tokens": n, "d_model": d_model, "repetitions": repeats,
            "clock": "thread CPU time of one forward pass, one thread, minimum of 3 after one warm-up",
            "kernels": torch.backends.cpu.get_cpu_capability(), "runs": runs}


PARTS = {"lr": lr_part, "ablation": ablation_part, "timing": timing_part}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=list(PARTS), action="append")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results_file = Path(__file__).resolve().parent / "results" / "heads.json"
    import json
    out = json.loads(results_file.read_text()) if results_file.exists() else {}
    out.pop("machine", None)
    unvectorized = torch.backends.cpu.get_cpu_capability() == "DEFAULT"
    for name in args.only or list(PARTS):
        key = "timing_unvectorized" if name == "timing" and unvectorized else name
        start, start_cpu = time.perf_counter(), time.process_time()
        out[key] = PARTS[name](out.get(name)) if name == "lr" else PARTS[name]()
        out[key]["seconds"] = round(time.perf_counter() - start, 1)
        out[key]["cpu_seconds"] = round(time.process_time() - start_cpu, 1)
    write_results("heads", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
