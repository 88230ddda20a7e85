"""Chapter 24's slow sweeps on SmolLM2-135M: activation patching of the residual stream over
layers x positions and of every head, for each of the 12 indirect-object prompt pairs of
``transformer_lib.circuits.IOI_PROMPTS``; direct logit attribution per head; the ablation of the
found heads against as many random heads (5 draws). Prints tables and writes
``benchmarks/results/circuits.json``, which the chapter prints and plots.

    nice .venv/bin/python benchmarks/circuits.py            # about 2-4 min on 2 idle cores
    nice .venv/bin/python benchmarks/circuits.py --quick    # the first 4 pairs

No timing here is asserted anywhere; the numbers are scores (normalized logit differences), which
do not depend on the machine beyond float rounding.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_results  # noqa: E402

from transformer_lib import circuits as C  # noqa: E402
from transformer_lib.pretrained import load_smollm2  # noqa: E402

TOP_HEADS = 6  # how many heads (by patching score) form the candidate circuit
RANDOM_DRAWS = 5


def rounded(t: torch.Tensor, digits: int = 4):
    return [[round(float(v), digits) for v in row] for row in t] if t.dim() == 2 else [round(float(v), digits)
                                                                                      for v in t]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the first 4 prompt pairs")
    args = parser.parse_args()
    torch.manual_seed(0)
    start_cpu, start = time.process_time(), time.perf_counter()
    lm = load_smollm2("cpu")
    model, tok = lm.model, lm.tokenizer
    prompts = C.IOI_PROMPTS[:4] if args.quick else C.IOI_PROMPTS
    clean, corrupted, io, s = C.ioi_batch(tok, prompts)
    B, L = clean.shape
    n, H = len(model.blocks), lm.config.num_heads

    with torch.no_grad():
        clean_ld = C.logit_difference(model(clean), io, s)
        corrupted_ld = C.logit_difference(model(corrupted), io, s)
    print(f"{B} pairs, {L} tokens; clean logit difference {clean_ld.mean():.2f}, corrupted {corrupted_ld.mean():.2f}")

    # residual stream: over all pairs (the chapter's figure) and per pair (the widget's picker)
    resid = C.patch_residual_sweep(model, clean, corrupted, io, s)
    print(f"residual sweep done ({time.perf_counter() - start:.0f} s)", flush=True)
    print("residual patching, all pairs (rows: every 5th layer; columns: positions from the corruption on)")
    f = resid["first_difference"]
    for i in range(0, n, 5):
        print(f"  layer {i:2d}: " + " ".join(f"{v:6.2f}" for v in resid["scores"][i, f:]))

    heads = C.patch_head_sweep(model, clean, corrupted, io, s)
    order = torch.argsort(heads["scores"].flatten(), descending=True)
    top = [(int(k) // H, int(k) % H) for k in order[:TOP_HEADS]]
    print("heads by patching score:", [(i, h, round(float(heads["scores"][i, h]), 3)) for i, h in top])

    dla = C.direct_logit_attribution(model, clean, io, s)
    dla_heads = dla["heads"].mean(-1)  # (n, H)

    with torch.no_grad():
        found = C.logit_difference(C.ablated_logits(model, clean, top, "mean"), io, s)
        random_runs = []
        for seed in range(RANDOM_DRAWS):
            pick = C.random_heads(model, len(top), seed=seed, exclude=top)
            ld = C.logit_difference(C.ablated_logits(model, clean, pick, "mean"), io, s)
            random_runs.append({"heads": pick, "logit_difference": rounded(ld, 3), "mean": round(float(ld.mean()), 4)})
    print(f"mean-ablating the {len(top)} found heads: logit difference {clean_ld.mean():.2f} -> {found.mean():.2f}; "
          f"{len(top)} random heads: " + ", ".join(f"{r['mean']:.2f}" for r in random_runs))

    cpu, wall = time.process_time() - start_cpu, time.perf_counter() - start
    print(f"# {cpu:.0f} s CPU, {wall:.0f} s wall")
    write_results("circuits", {
        "quick": args.quick, "prompts": [list(p) for p in prompts], "template": C.IOI_TEMPLATE,
        "tokens": [tok.decode([int(t)]) for t in clean[0]],
        "clean_logit_difference": rounded(clean_ld, 4), "corrupted_logit_difference": rounded(corrupted_ld, 4),
        "residual": {"scores": rounded(resid["scores"], 4), "first_difference": f,
                     "per_pair": [rounded(p, 3) for p in resid["per_pair"]]},
        "heads": {"scores": rounded(heads["scores"], 4), "top": top,
                  "per_pair": [rounded(p, 3) for p in heads["per_pair"]],
                  "clean": round(heads["clean"], 4), "corrupted": round(heads["corrupted"], 4)},
        "dla_heads": rounded(dla_heads, 4),
        "ablation": {"found": top, "logit_difference": rounded(found, 4), "mean": round(float(found.mean()), 4),
                     "random": random_runs},
        "seconds": {"cpu": round(cpu, 1), "wall": round(wall, 1)},
    })


if __name__ == "__main__":
    main()
