"""Induction heads over five seeds (chapter 23): the one- against the two-layer model, and the
circuit in every two-layer model.

    nice .venv/bin/python benchmarks/induction_seeds.py        # ~8 CPU-minutes, one thread

``benchmarks/induction.py`` trains seeds 0-2 of both models and analyses the heads of seed 0
only. This script uses its settings (read from ``benchmarks/results/induction.json``'s config:
rotary positions, context 20, blocks of 4..10, untied, torch's own initialisation, AdamW 3e-3
after a 100-step warmup, batch 64, 1500 steps) and the same code (``induction.train_induction``),
and adds:

* seeds 3 and 4 of both models (2 and 1 blocks), so that the comparison has five seeds;
* the two-layer models of seeds 1 and 2 again, to analyse their heads (their curves are compared
  with the stored ones: ``max_gap_to_stored``);
* for every two-layer model (seed 0 from the packaged weights, ``induction.load_induction_run``),
  on the chapter's 256 sequences whose second half repeats the first (seed 99): layer 0's
  previous-token scores, layer 1's induction scores, the in-context loss clean and with each
  head mean-ablated (over batch and positions, ``induction.ablated_losses``), the K-composition
  of the previous-token head (the best layer-0 score) with each layer-1 head, and that head's
  output replaced by its mean at each position in every path, or only in the stream layer 1
  computes its queries, keys or values from (the chapter's path removal); and, from the
  patterns stored during training (one sequence), that head's previous-token score 200 steps
  before and 100 steps after the steepest drop.

Writes ``benchmarks/results/induction_seeds.json`` after every run (a stopped run keeps what it
finished). Prints a table, asserts nothing.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_results  # noqa: E402

import transformer_lib as tl  # noqa: E402
from transformer_lib import induction as ind  # noqa: E402

STORED = Path(__file__).resolve().parent / "results" / "induction.json"


def make_model(cfg: dict, layers: int, seed: int) -> tl.DecoderOnlyLM:
    torch.manual_seed(seed)  # as benchmarks/induction.py: the seed sets the initialisation
    return tl.DecoderOnlyLM(cfg["vocab"], cfg["d_model"], cfg["heads"], layers, max_len=cfg["context"],
                           ffn=False, positional=cfg["positional"], init_std=cfg["init_std"],
                           tie_weights=cfg["tied"])


def path_removal(model, tokens, mask, head: int) -> dict:
    """In-context loss with layer-0 head ``head``'s output replaced by its mean at each position:
    everywhere, or only in the stream layer 1's q, k or v projection reads
    (``induction.remove_from_paths``, as chapter 23); and layer 1's induction scores in each case."""
    L = tokens.shape[1]
    removed = ind.remove_from_paths(model, tokens, 0, head)
    out = {"everywhere": float(ind.in_context_loss(removed["everywhere"], tokens, mask))}
    for path in ("q", "k", "v"):
        logits, pattern = removed[path]
        out[path] = float(ind.in_context_loss(logits, tokens, mask))
        out[f"{path}_induction"] = ind.induction_scores(pattern[None], L // 2)[0].tolist()
    return out


def head_analysis(model, record: dict, cfg: dict) -> dict:
    V, L = cfg["vocab"], cfg["context"]
    tokens, mask = ind.repeated_random_tokens(256, L, V, None, torch.Generator().manual_seed(99))
    patterns = ind.attention_patterns(model, tokens)  # (2, B, H, L, L)
    prev = ind.previous_token_scores(patterns)  # (2, H)
    induct = ind.induction_scores(patterns, L // 2)
    with torch.no_grad():
        clean = float(ind.in_context_loss(model(tokens), tokens, mask))
    best = int(prev[0].argmax())
    steps = list(record["steps"])
    drop = ind.phase_change_step(steps, record["in_context_loss"])
    stored = record["patterns"].float()  # (evals, layers, H, L, L), one sequence
    prev_over = torch.diagonal(stored, offset=-1, dim1=-2, dim2=-1).mean(-1)  # (evals, layers, H)
    at = lambda s: steps.index(min(steps, key=lambda t: abs(t - s)))  # noqa: E731 nearest evaluation
    return {"clean_in_context_loss": clean, "previous_token": prev[0].tolist(),
            "induction": induct[1].tolist(), "previous_token_head": best,
            "mean_ablation": ind.ablated_losses(model, tokens, mask, "mean").tolist(),
            "k_composition": ind.k_composition_scores(model, 0, 1)[best].tolist(),
            "k_composition_argmax": ind.k_composition_scores(model, 0, 1).argmax(0).tolist(),
            "composition_baseline": ind.composition_baseline(model),
            "path_removal": path_removal(model, tokens, mask, best),
            "phase_change_step": drop,
            "previous_token_before_drop": float(prev_over[at(drop - 200), 0, best]),
            "previous_token_after_drop": float(prev_over[at(drop + 100), 0, best])}


def main() -> None:
    torch.set_num_threads(1)
    stored = json.loads(STORED.read_text())
    cfg = stored["config"]
    stored_runs = {(r["layers"], r["seed"]): r for r in stored["runs"]}
    results = {"config": cfg, "runs": [], "seed0_heads": None}
    start = time.process_time()

    model, record = ind.load_induction_run(2)  # seed 0, trained by benchmarks/induction.py
    results["seed0_heads"] = head_analysis(model, record, cfg)
    write_results("induction_seeds", {**results, "cpu_s": time.process_time() - start})
    for seed, layers in ((3, 2), (3, 1), (4, 2), (4, 1), (1, 2), (2, 2)):
        model = make_model(cfg, layers, seed)
        t0 = time.process_time()
        rec = ind.train_induction(model, cfg["steps"], batch_size=cfg["batch"], min_repeat=cfg["min_repeat"],
                                  lr=cfg["lr"], seed=seed, warmup=cfg["warmup"], context=cfg["context"])
        cpu = time.process_time() - t0
        run = {"layers": layers, "seed": seed, "steps": rec["steps"], "in_context_loss": rec["in_context_loss"],
               "phase_change_step": ind.phase_change_step(rec["steps"], rec["in_context_loss"]),
               "final_in_context_loss": rec["in_context_loss"][-1], "cpu_s": cpu}
        if (layers, seed) in stored_runs:
            old = stored_runs[(layers, seed)]["in_context_loss"]
            run["max_gap_to_stored"] = max(abs(a - b) for a, b in zip(old, rec["in_context_loss"]))
        if layers == 2:
            run["heads"] = head_analysis(model.eval(), rec, cfg)
        results["runs"].append(run)
        heads = run.get("heads", {})
        print(f"seed {seed}, {layers} layer(s): final in-context loss {run['final_in_context_loss']:.3f},"
              f" drop at {run['phase_change_step']}, {cpu:.0f} s CPU"
              + (f"; previous-token head 0.{heads['previous_token_head']}"
                 f" {max(heads['previous_token']):.3f}, layer-1 induction {min(heads['induction']):.2f}-"
                 f"{max(heads['induction']):.2f}, keys-only {heads['path_removal']['k']:.3f}"
                 f" (everywhere {heads['path_removal']['everywhere']:.3f}, clean {heads['clean_in_context_loss']:.3f})"
                 if heads else "")
              + (f"; gap to stored {run['max_gap_to_stored']:.1e}" if "max_gap_to_stored" in run else ""),
              flush=True)
        write_results("induction_seeds", {**results, "cpu_s": time.process_time() - start})


if __name__ == "__main__":
    main()
