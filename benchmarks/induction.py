"""Induction heads: the phase change of a two-layer attention-only model, the one-layer control,
every head's scores and ablations, and SmolLM2's induction heads (chapter 23).

    nice .venv/bin/python benchmarks/induction.py                 # the full run (minutes)
    .venv/bin/python benchmarks/induction.py --part smollm2        # SmolLM2's heads only
    nice .venv/bin/python benchmarks/induction.py --part toy       # the toy models only (~7 CPU-min)

Setting (the defaults; the results file and chapter 23): ``DecoderOnlyLM(64 tokens, d_model 64,
4 heads, 2 or 1 blocks, rotary positions, ffn=False, untied embedding and unembedding, torch's
own initialisation)``, context 20, trained by ``induction.train_induction`` (AdamW 3e-3 after a
100-step warmup, batch 64, next-token loss on every position, 1500 steps) on
``repeated_random_tokens`` with ``--min-repeat`` 4: each sequence draws its own block length n in
4..10, starts with 20 - 2n random lead-in tokens, then the block twice, so no fixed offset holds
the answer. The in-context loss (targets inside the repeat, after its first token) is measured
every 25 steps on a fixed batch of 128; the phase-change step is where it falls fastest. Seeds
0.. ``--seeds`` - 1 give the spread of that step. Scores on 256 sequences whose second half
repeats the first. Run with these defaults (load ~2-5, one thread): phase change at steps
1025 / 950 / 675 (seeds 0-2), 2 layers 0.314 / 0.303 / 0.277, 1 layer 2.688 / 2.639 / 2.625;
seed 0's heads: previous-token head 0.1 (0.909), layer-1 induction scores 0.68-0.76.

Why, and what was tried (in-context loss of the 2-layer model, seed 0; "plateau" = what a model
that spreads its guess uniformly over the distinct tokens seen so far pays on the evaluation
batch: 2.83 for context 32 / n 6..16, 2.41 for context 20 / n 4..10). With learned absolute
positions the model can copy without a previous-token head: a layer-0 head attends to the
earlier copy of the current token and moves that copy's *position* into the stream, and a
layer-1 head attends one position later (Q-composition on positions). Rotary positions
(``--positional rope``) put no absolute position in the residual stream, which leaves the
classic K-composition circuit as the way to copy. Settings (untied, d_model 64, 4 heads, batch 64,
warmup 100, AdamW without weight decay), runs taken at load 15-23 on 2 shared cores, so short:
  learned, context 32, n 6..16, lr 3e-3, 1500 steps: 0.45 / 0.71 / 0.45 (seeds 0-2), but best
    previous-token score 0.095, best induction score 0.034 (the earlier results file; the shortcut above);
  learned, tied embedding: plateau ~2.9 for 2000 steps; learned, d_model 32 or context 24:
    plateau 2.9-3.2 for 2000-6000 steps; sinusoidal: stayed at ln V = 4.16;
  rope, context 32, n 6..16, lr 3e-3: 2.86 at 1200 steps (on the plateau);
  rope, context 32, n 6..16, lr 1e-2: 3.85 at 750 steps (stopped: far above the plateau);
  rope, context 32, d_model 128, lr 1e-3: stopped before its first report (CPU);
  rope, context 20, n 4..10, lr 3e-3: 3.55 / 2.75 / 2.55 / 2.48 / 2.46 / 2.41 / 2.42 / 2.33 / 2.32 /
    2.30 at steps 250 .. 2500 (its plateau 2.41): a slow drift, no phase change; layer-0
    previous-token scores stayed 0.07-0.08, one layer-1 head's induction score rose to 0.22;
  rope, context 16, n 4..8, lr 3e-3: 3.42 / 2.51 at steps 250 / 500 (stopped for CPU);
  rope, context 20, n 4..10, lr 3e-3, torch's own initialisation (``--init-std 0``: embeddings
    N(0, 1), linear weights uniform with std ~0.07 at width 64, instead of N(0, 0.02^2)): 3.38 / 2.60 / 2.24 / 1.28 at steps 250 / 500 / 750 / 1000, and between
    steps 750 and 1000 head 0.1's previous-token score rose 0.11 -> 0.39 and the layer-1 induction
    scores 0.21-0.27 -> 0.32-0.46: the phase change, with the classic pair forming. At step 1250:
    in-context loss 0.38 / 0.32 / 0.30 (seeds 0 / 1 / 2; seeds 1, 2: 2.20 / 0.64 at step 750,
    0.86 / 0.42 at 1000), one previous-token head per seed (0.1: 0.86, 0.0: 0.92, 0.1: 0.97), all
    four layer-1 heads inducting (0.58-0.74, 0.67-0.75, 0.65-0.89); the 1-layer control, seed 0:
    2.72 at step 1250. Seed 0's model at step 1250 on 256 half/half sequences (context 20): loss
    0.728; head 0.1 zero/mean-ablated 2.995 / 3.006 vs 0.61-1.02 for the other layer-0 heads;
    layer-1 heads mean-ablated 1.34-2.35 (redundant induction heads, copying scores 0.998-1.0);
    K-composition of 0.1 with the layer-1 heads 0.22-0.25 vs 0.15-0.20 for the other layer-0
    heads and a 0.124 random baseline.
Probably why the small initialisation stalls: a head's score is x W_Q W_K^T x^T, and the gradient
of either factor is proportional to the other, so with both at 0.02 the QK circuit starts at a
saddle it leaves slowly.

SmolLM2-135M (float32, the packaged GGUF): 8 sequences of 2 x 50 random token ids (ids 1000 ..
49151, no special tokens), every head's induction and previous-token score, the top heads, and
the in-context loss with the top 3 induction heads zero-ablated against 3 other heads.

Writes benchmarks/results/induction.json (numbers) and transformer_lib/data/induction_runs.pt
(the seed-0 weights and curves and the patterns over training, float16: the chapter's widget).
Prints tables, asserts nothing. Run it on a quiet machine; the numbers do not depend on load.
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

DATA = Path(tl.__file__).resolve().parent / "data" / "induction_runs.pt"
RESULTS_FILE = Path(__file__).resolve().parent / "results" / "induction.json"
V, D, H, L = 64, 64, 4, 32
BATCH, WARMUP = 64, 100


def make_model(layers: int, seed: int, positional: str = "learned", context: int = L,
               init_std: float | None = 0.02) -> tl.DecoderOnlyLM:
    torch.manual_seed(seed)
    return tl.DecoderOnlyLM(V, D, H, layers, max_len=context, ffn=False, positional=positional, init_std=init_std,
                           tie_weights=False)


def head_table(model, L: int = L) -> dict:
    tokens, in_context = ind.repeated_random_tokens(256, L, V, None, torch.Generator().manual_seed(99))
    patterns = ind.attention_patterns(model, tokens)  # (layers, B, H, L, L)
    with torch.no_grad():
        clean = float(ind.in_context_loss(model(tokens), tokens, in_context))
    layers = len(model.blocks)
    out = {"clean_in_context_loss": clean,
           "previous_token": ind.previous_token_scores(patterns).tolist(),
           "induction": ind.induction_scores(patterns, L // 2).tolist(),
           "copying": [ind.copying_scores(model, i).tolist() for i in range(layers)],
           "zero_ablation": ind.ablated_losses(model, tokens, in_context, "zero").tolist(),
           "mean_ablation": ind.ablated_losses(model, tokens, in_context, "mean").tolist()}
    if layers > 1:
        out["k_composition"] = ind.k_composition_scores(model, 0, 1).tolist()
        out["composition_baseline"] = ind.composition_baseline(model)
    return out


def smollm2_table(top: int = 10) -> dict:
    from transformer_lib.pretrained.smollm2 import load_smollm2
    start = time.perf_counter()
    lm = load_smollm2(device="cpu")
    model = lm.model.eval()
    half = 50
    tokens, in_context = ind.repeated_random_tokens(8, 2 * half, lm.config.vocab_size, None,
                                                    torch.Generator().manual_seed(23), low=1000)
    patterns = ind.attention_patterns(model, tokens)  # (30, B, 9, L, L)
    scores = ind.induction_scores(patterns, half)  # (30, 9)
    prev = ind.previous_token_scores(patterns)
    best = ind.top_heads(scores, top)
    with torch.no_grad():
        clean = float(ind.in_context_loss(model(tokens), tokens, in_context))
        first_half = float(torch.nn.functional.cross_entropy(
            model(tokens)[:, :half - 1].reshape(-1, lm.config.vocab_size), tokens[:, 1:half].reshape(-1)))

    def ablate(heads):  # in-context loss with the heads ("layer.head") zeroed
        pairs = [tuple(map(int, name.split("."))) for name in heads]
        return float(ind.in_context_loss(ablated_logits(model, tokens, pairs, how="zero"),
                                         tokens, in_context))

    top3 = [name for name, _ in best[:3]]
    order = scores.flatten().argsort()  # lowest induction scores first: heads that are surely not
    others = [f"{int(i) // 9}.{int(i) % 9}" for i in order[:3]]
    return {"half": half, "batch": 8, "induction": scores.tolist(), "previous_token": prev.tolist(),
            "top_heads": best, "clean_in_context_loss": clean, "first_half_loss": first_half,
            "top3_ablated_loss": ablate(top3), "top3": top3,
            "control3_ablated_loss": ablate(others), "control3": others,
            "heads_above_0.3": int((scores > 0.3).sum()), "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--min-repeat", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--positional", choices=("learned", "rope"), default="rope")
    parser.add_argument("--context", type=int, default=20)
    parser.add_argument("--init-std", type=float, default=0.0, help="0: torch's own initialisation")
    parser.add_argument("--part", choices=("all", "toy", "smollm2"), default="all",
                        help="run one part and keep the other's numbers from the existing results file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model_config = {"vocab": V, "d_model": D, "heads": H, "context": args.context, "positional": args.positional}
    init_std = args.init_std or None
    results = {"config": {**model_config, "steps": args.steps,
                          "min_repeat": args.min_repeat, "batch": BATCH, "lr": args.lr,
                          "warmup": WARMUP, "tied": False, "init_std": init_std}, "runs": []}
    old = RESULTS_FILE.exists() and json.loads(RESULTS_FILE.read_text())
    if args.part == "smollm2" and old:
        results = {k: v for k, v in old.items() if k != "machine"}
    saved = {}
    for seed in range(args.seeds if args.part != "smollm2" else 0):
        for layers in (2, 1):
            model = make_model(layers, seed, args.positional, args.context, init_std)
            t0 = time.process_time()
            rec = ind.train_induction(model, args.steps, batch_size=BATCH, min_repeat=args.min_repeat, lr=args.lr,
                                      seed=seed, warmup=WARMUP, context=args.context)
            cpu = time.process_time() - t0
            step = ind.phase_change_step(rec["steps"], rec["in_context_loss"])
            run = {"layers": layers, "seed": seed, "steps": rec["steps"], "in_context_loss": rec["in_context_loss"],
                   "phase_change_step": step, "final_in_context_loss": rec["in_context_loss"][-1], "cpu_s": cpu}
            print(f"{layers} layer(s), seed {seed}: in-context loss {rec['in_context_loss'][0]:.2f} -> "
                  f"{rec['in_context_loss'][-1]:.3f}, steepest drop at step {step}, {cpu:.0f} s CPU", flush=True)
            if seed == 0:
                run["heads"] = head_table(model, args.context)
                saved[f"{layers}_layer"] = {"state_dict": model.state_dict(), "config": model_config,
                                            "steps": rec["steps"],
                                            "in_context_loss": rec["in_context_loss"],
                                            "patterns": rec["patterns"].half(), "shown_tokens": rec["shown_tokens"]}
            results["runs"].append(run)
    two = [r["phase_change_step"] for r in results["runs"] if r["layers"] == 2]
    print(f"phase change (2 layers) over {len(two)} seeds: steps {two}")
    if args.part == "toy" and old and "smollm2" in old:
        results["smollm2"] = old["smollm2"]
    if args.part != "toy":
        sm = smollm2_table()
        results["smollm2"] = sm
        print("SmolLM2 top induction heads (layer.head, score):", [(n, round(s, 3)) for n, s in sm["top_heads"]])
        print(f"in-context loss {sm['clean_in_context_loss']:.3f}; top 3 ablated {sm['top3_ablated_loss']:.3f}; "
              f"3 control heads ablated {sm['control3_ablated_loss']:.3f}; first half {sm['first_half_loss']:.2f}")
    if saved:
        torch.save(saved, DATA)
        print(f"# wrote {DATA} ({DATA.stat().st_size / 1e6:.2f} MB)")
    write_results("induction", results)


if __name__ == "__main__":
    main()
