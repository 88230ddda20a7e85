"""Controls for SmolLM2's induction heads (chapter 23): how much zero-ablating 3 random heads
raises the in-context loss, against the top 3 induction heads.

    nice .venv/bin/python benchmarks/induction_controls.py        # ~2 CPU-minutes

The setting is the one of ``benchmarks/induction.py --part smollm2`` (its results file must
exist): SmolLM2-135M (float32, the packaged GGUF), 8 sequences of 2 x 50 random token ids (ids
1000 .. 49151, seed 23), the in-context loss on the repeated half. The top 3 induction heads
and every head's scores are read from ``benchmarks/results/induction.json``; the clean and top-3
losses are recomputed here and must match it. Two controls, ``--draws`` each, none of the 10
highest-scoring induction heads:

* random: 3 heads drawn from all 270;
* layer-matched: one head drawn from the block of each of the top 3 (the same blocks, other heads).

Writes benchmarks/results/induction_controls.json. Prints a table, asserts only that the
recomputed losses match the stored ones.

    nice .venv/bin/python benchmarks/induction_controls.py --split-costliest   # ~1 CPU-minute

keeps the stored draws and zeroes the heads of the costliest random draw one at a time and in
pairs (``costliest_random_split``), to see which of them makes it costly.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_results  # noqa: E402

import transformer_lib as tl  # noqa: E402
from transformer_lib.ablation import ablated_logits  # noqa: E402
from transformer_lib import induction as ind  # noqa: E402

STORED = Path(__file__).resolve().parent / "results" / "induction.json"
OUT = Path(__file__).resolve().parent / "results" / "induction_controls.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--split-costliest", action="store_true",
                        help="keep the stored draws; zero the costliest random draw's heads in parts")
    args = parser.parse_args()
    torch.set_num_threads(1)
    stored = json.loads(STORED.read_text())["smollm2"]
    from transformer_lib.pretrained.smollm2 import load_smollm2

    start = time.process_time()
    lm = load_smollm2(device="cpu")
    model = lm.model.eval()
    half, n_heads = stored["half"], lm.config.num_heads
    tokens, in_context = ind.repeated_random_tokens(stored["batch"], 2 * half, lm.config.vocab_size, None,
                                                    torch.Generator().manual_seed(23), low=1000)

    def zero_ablated(heads: list[tuple[int, int]]) -> float:  # in-context loss, the heads zeroed
        return float(ind.in_context_loss(ablated_logits(model, tokens, heads, how="zero"),
                                         tokens, in_context))

    with torch.no_grad():
        clean = float(ind.in_context_loss(model(tokens), tokens, in_context))
    parse = lambda name: tuple(map(int, name.split(".")))  # noqa: E731
    top3 = [parse(n) for n in stored["top3"]]
    top3_loss = zero_ablated(top3)
    assert abs(clean - stored["clean_in_context_loss"]) < 1e-3, (clean, stored["clean_in_context_loss"])
    assert abs(top3_loss - stored["top3_ablated_loss"]) < 1e-3, (top3_loss, stored["top3_ablated_loss"])
    if args.split_costliest:
        from itertools import combinations
        old = json.loads(OUT.read_text())
        worst = max(old["random"], key=lambda r: r["ablated_loss"])
        heads = [parse(n) for n in worst["heads"]]
        assert abs(zero_ablated(heads) - worst["ablated_loss"]) < 1e-3, worst
        parts = []
        for k in (1, 2):
            for part in combinations(heads, k):
                loss = zero_ablated(list(part))
                parts.append({"heads": [f"{i}.{h}" for i, h in part], "ablated_loss": loss})
                print(f"{[f'{i}.{h}' for i, h in part]}: in-context loss {loss:.3f}", flush=True)
        kept = {k: v for k, v in old.items() if k != "machine"}
        write_results("induction_controls", {**kept, "machine_of_the_draws": old["machine"],
                                             "costliest_random_split": {"draw": worst["heads"],
                                                                        "draw_loss": worst["ablated_loss"],
                                                                        "parts": parts}})
        return
    scores = torch.tensor(stored["induction"])  # (layers, H)
    excluded = {(int(i) // n_heads, int(i) % n_heads) for i in scores.flatten().topk(10).indices}
    pool = [(i, h) for i in range(scores.shape[0]) for h in range(n_heads) if (i, h) not in excluded]
    g = torch.Generator().manual_seed(0)
    random_sets, matched_sets = [], []
    for _ in range(args.draws):
        random_sets.append(sorted(pool[int(k)] for k in torch.randperm(len(pool), generator=g)[:3]))
        matched: list[tuple[int, int]] = []
        for layer, _h in top3:  # one other head of each top head's block
            same = [p for p in pool if p[0] == layer and p not in matched]
            matched.append(same[int(torch.randint(len(same), (1,), generator=g))])
        matched_sets.append(sorted(matched))
    rows = {"random": [], "layer_matched": []}
    for kind, sets in (("random", random_sets), ("layer_matched", matched_sets)):
        for heads in sets:
            loss = zero_ablated(heads)
            rows[kind].append({"heads": [f"{i}.{h}" for i, h in heads], "ablated_loss": loss,
                               "induction": [float(scores[i, h]) for i, h in heads]})
            print(f"{kind:13} {[f'{i}.{h}' for i, h in heads]}: in-context loss {loss:.3f}", flush=True)
    print(f"clean {clean:.3f}; top 3 {stored['top3']} zeroed {top3_loss:.3f}")
    write_results("induction_controls", {
        "setting": {"model": "SmolLM2-135M", "batch": stored["batch"], "half": half, "token_seed": 23,
                    "draw_seed": 0, "draws": args.draws, "excluded_top_induction_heads": 10},
        "clean_in_context_loss": clean, "top3": stored["top3"], "top3_ablated_loss": top3_loss, **rows,
        "cpu_s": time.process_time() - start})


if __name__ == "__main__":
    main()
