"""SmolLM2's induction heads (chapter 23) under two kinds of ablation, on every kind of target.

    nice .venv/bin/python benchmarks/induction_smollm2_ablations.py        # ~3 CPU-minutes

The setting is that of ``benchmarks/induction.py --part smollm2`` and
``benchmarks/induction_controls.py`` (both results files must exist): SmolLM2-135M (float32,
the packaged GGUF), 8 sequences of 2 x 50 random token ids (ids 1000 .. 49151, seed 23). The head
sets are theirs: the top 3 induction heads, the 3 lowest-scoring heads, and the 10 random and 10
same-block draws of 3 heads. Each set is removed

* by zero ablation (``ablation.ablated_logits(how="zero")``, as the stored tables), and
* by a per-position mean ablation (``how="mean"``): each head's output replaced, position by
  position, by its mean over a reference of 64 other sequences drawn the same way (seed 24);

and for each, per sequence: the in-context loss (the repeated half after its first token, as
``induction.in_context_loss``), the loss on the first half's targets, and the loss over every
target. Clean likewise. The zero-ablated in-context losses must match the stored ones.

Writes ``benchmarks/results/induction_smollm2_ablations.json``. Prints a table.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_results  # noqa: E402

from transformer_lib import induction as ind  # noqa: E402
from transformer_lib.ablation import ablated_logits  # noqa: E402
from transformer_lib.probes import patch_activations, record_activations  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    torch.set_num_threads(1)
    stored = json.loads((RESULTS / "induction.json").read_text())["smollm2"]
    controls = json.loads((RESULTS / "induction_controls.json").read_text())
    from transformer_lib.pretrained.smollm2 import load_smollm2, smollm2_gguf_path

    start = time.process_time()
    lm = load_smollm2(device="cpu")
    model = lm.model.eval()
    half, V = stored["half"], lm.config.vocab_size
    tokens, in_context = ind.repeated_random_tokens(stored["batch"], 2 * half, V, None,
                                                    torch.Generator().manual_seed(23), low=1000)
    reference, _ = ind.repeated_random_tokens(64, 2 * half, V, None, torch.Generator().manual_seed(24), low=1000)
    first = torch.zeros_like(in_context)  # (B, L - 1): targets 1 .. half - 1, the first half
    first[:, : half - 1] = True

    def per_sequence(logits) -> dict:  # (B, L, V) -> losses per sequence
        t = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")  # (B, L - 1)
        return {"in_context": ((t * in_context).sum(1) / in_context.sum(1)).tolist(),
                "first_half": ((t * first).sum(1) / first.sum(1)).tolist(),
                "every_target": t.mean(1).tolist()}

    parse = lambda name: tuple(map(int, name.split(".")))  # noqa: E731
    sets = {"top3": stored["top3"], "lowest3": stored["control3"]}
    sets |= {f"random_{k}": r["heads"] for k, r in enumerate(controls["random"])}
    sets |= {f"same_block_{k}": r["heads"] for k, r in enumerate(controls["layer_matched"])}
    stored_zero = {"top3": stored["top3_ablated_loss"], "lowest3": stored["control3_ablated_loss"]}
    stored_zero |= {f"random_{k}": r["ablated_loss"] for k, r in enumerate(controls["random"])}
    stored_zero |= {f"same_block_{k}": r["ablated_loss"] for k, r in enumerate(controls["layer_matched"])}
    head_sets = [[parse(n) for n in heads] for heads in sets.values()]
    H, layers = lm.config.num_heads, len(model.blocks)
    names = [f"blocks.{i}.hook_z" for i in range(layers)]

    def position_means(ref) -> dict:  # {name: (1, L, H, d)}: each head's mean output at each position
        sums = None
        for chunk in ref.split(16):  # 16 sequences at a time: the logits of 64 would take 1.3 GB
            with record_activations(model, names) as seen:
                model(chunk)
            part = {n: seen[n].sum(0, keepdim=True) for n in names}
            sums = part if sums is None else {n: sums[n] + part[n] for n in names}
        return {n: sums[n] / len(ref) for n in names}

    def mean_ablated(heads, means):  # (B, L, V): the heads replaced by their per-position means
        def remover(i, hs):
            keep = torch.ones(H, 1, dtype=torch.bool)
            keep[hs] = False
            return lambda z: torch.where(keep, z, means[f"blocks.{i}.hook_z"])
        layers_hit = {i for i, _ in heads}
        with patch_activations(model, {f"blocks.{i}.hook_z": remover(i, [h for j, h in heads if j == i])
                                       for i in layers_hit}):
            return model(tokens)

    mean = lambda d, key: sum(d[key]) / len(d[key])  # noqa: E731
    with torch.no_grad():
        clean = per_sequence(model(tokens))
        # the hand-written per-position mean is the library's (ablation.ablated_logits, how="mean")
        own = position_means(tokens)
        gap = (mean_ablated(head_sets[0], own) - ablated_logits(model, tokens, head_sets[0], how="mean")).abs().max()
        assert gap < 1e-3, float(gap)
        means = position_means(reference)
        out = {"setting": {"model": "SmolLM2-135M", "batch": stored["batch"], "half": half, "token_seed": 23,
                           "reference": len(reference), "reference_seed": 24,
                           "file": smollm2_gguf_path().name, "num_heads": H,
                           "num_kv_heads": lm.config.num_kv_heads},
               "clean": clean, "sets": {}}
        for name, heads in zip(sets, head_sets):
            zero_logits = ablated_logits(model, tokens, heads, how="zero")
            mean_logits = mean_ablated(heads, means)
            row = {"heads": sets[name], "zero": per_sequence(zero_logits), "mean": per_sequence(mean_logits),
                   "zero_in_context_loss": float(ind.in_context_loss(zero_logits, tokens, in_context)),
                   "mean_in_context_loss": float(ind.in_context_loss(mean_logits, tokens, in_context))}
            del zero_logits, mean_logits
            assert abs(row["zero_in_context_loss"] - stored_zero[name]) < 1e-3, (name, row, stored_zero[name])
            out["sets"][name] = row
            print(f"{name:13} {sets[name]}: in-context zero {row['zero_in_context_loss']:.3f} / per-position"
                  f" mean {row['mean_in_context_loss']:.3f}; first half {mean(row['zero'], 'first_half'):.2f} /"
                  f" {mean(row['mean'], 'first_half'):.2f}; every target {mean(row['zero'], 'every_target'):.2f}"
                  f" / {mean(row['mean'], 'every_target'):.2f}", flush=True)
    print(f"clean: in-context {sum(clean['in_context']) / len(clean['in_context']):.3f}, first half"
          f" {sum(clean['first_half']) / len(clean['first_half']):.2f}")
    write_results("induction_smollm2_ablations", {**out, "cpu_s": time.process_time() - start})


if __name__ == "__main__":
    main()
