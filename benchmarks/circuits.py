"""Chapter 24's slow sweeps on SmolLM2-135M: activation patching of the residual stream over
layers x positions and of every head, for each of the 12 indirect-object prompt pairs of
``transformer_lib.circuits.IOI_PROMPTS``; direct logit attribution per head; the ablation of the
found heads against as many random heads, 20 draws from all heads and 20 from the blocks the
found heads sit in (17 to 29), on the 12 pairs and on 12 held-out prompts of the other word
order (BABA), per prompt. Prints tables and writes
``benchmarks/results/circuits.json``, which the chapter prints and plots.

    nice .venv/bin/python benchmarks/circuits.py            # about 4-6 min on 2 idle cores
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
RANDOM_DRAWS = 20  # per control: random heads from all blocks, and from the late blocks only
LATE_FROM = 17  # the late-block control draws from blocks LATE_FROM .. 29 (the found heads' range)

# the held-out prompts (the chapter builds the same list and checks it against this file): the
# other word order (subject first), another verb, new names; every name, place, object one token
HELD_TEMPLATE = "When {s} and {io} went to the {place}, {s} handed a {thing} to"
_NEW_NAMES = [("Alice", "Peter"), ("Laura", "Simon"), ("Helen", "George"), ("Rachel", "Daniel"),
              ("Julia", "Robert"), ("Sophie", "Oliver")]
_PLACES = "garden church river kitchen hotel station market park bank farm zoo shop".split()
_THINGS = "plate coin note key card box book cup hat map pen ball".split()
HELD_PROMPTS = [(io, s, _PLACES[k], _THINGS[k])
                for k, (io, s) in enumerate(_NEW_NAMES + [(b, a) for a, b in _NEW_NAMES])]


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

    # controls: 20 seeded draws of as many heads from all 270 (the found ones excluded), and 20
    # from blocks LATE_FROM..29 only (random_heads with the early blocks excluded as well)
    early = [(i, h) for i in range(LATE_FROM) for h in range(H)]
    all_picks = [C.random_heads(model, len(top), seed=seed, exclude=top) for seed in range(RANDOM_DRAWS)]
    late_picks = [C.random_heads(model, len(top), seed=seed, exclude=top + early) for seed in range(RANDOM_DRAWS)]
    held = torch.tensor([tok.encode(HELD_TEMPLATE.format(io=io, s=s_, place=p, thing=t)).ids
                         for io, s_, p, t in HELD_PROMPTS])
    held_io = torch.tensor([tok.encode(" " + io).ids[0] for io, *_ in HELD_PROMPTS])
    held_s = torch.tensor([tok.encode(" " + s_).ids[0] for _, s_, *_ in HELD_PROMPTS])

    def ablation(tokens, c, w, name):
        with torch.no_grad():
            base = C.logit_difference(model(tokens), c, w)
            sets = [top, *all_picks, *late_picks]
            lds = [C.logit_difference(logits, c, w)  # ten sets at a time: (B, L, V) logits each
                   for k in range(0, len(sets), 10)
                   for logits in C.ablated_logits_each(model, tokens, sets[k:k + 10], "mean")]
        found, rand, late = lds[0], lds[1:1 + RANDOM_DRAWS], lds[1 + RANDOM_DRAWS:]
        loss = lambda ld: 100 * (1 - float(ld.mean()) / float(base.mean()))  # noqa: E731
        print(f"{name}: logit difference {base.mean():.2f}; {len(top)} found heads ablated {found.mean():.2f} "
              f"({loss(found):.0f}% lost); random heads, all blocks: at most {max(map(loss, rand)):.1f}% lost; "
              f"blocks {LATE_FROM}-{n - 1}: at most {max(map(loss, late)):.1f}% lost")
        return {"clean": rounded(base, 4), "found": rounded(found, 4), "mean": round(float(found.mean()), 4),
                "random": [{"heads": pick, "logit_difference": rounded(ld, 4), "mean": round(float(ld.mean()), 4)}
                           for pick, ld in zip(all_picks, rand)],
                "late": [{"heads": pick, "logit_difference": rounded(ld, 4), "mean": round(float(ld.mean()), 4)}
                         for pick, ld in zip(late_picks, late)]}

    abl = ablation(clean, io, s, "the 12 pairs (ABBA)")
    held_abl = ablation(held, held_io, held_s, "the 12 held-out prompts (BABA)")
    held_abl.update({"template": HELD_TEMPLATE, "prompts": [list(p) for p in HELD_PROMPTS]})

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
        "ablation": {"found": top, "draws": RANDOM_DRAWS, "late_from": LATE_FROM,
                     "logit_difference": abl.pop("found"), **abl},
        "held_out": {"logit_difference": held_abl.pop("found"), **held_abl},
        "seconds": {"cpu": round(cpu, 1), "wall": round(wall, 1)},
    })


if __name__ == "__main__":
    main()
