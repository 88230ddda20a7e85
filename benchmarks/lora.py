"""LoRA instruction tuning of SmolLM2-135M-Instruct on the JSON-answer task, and our LoRA's step
time against peft's (chapter 21).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/lora.py   # the full run (9 min at load 16)
    .venv/bin/python benchmarks/lora.py --steps 4 --no-save    # a smoke run

Writes ``transformer_lib/data/smollm2_lora_json.pt`` (the adapter, < 2 MB) and
``benchmarks/results/lora.json``: held-out format and accuracy before/after, each prompt's
answers, the loss curve, perplexity on the book's prose with the adapter off/on (forgetting),
answers to ordinary prompts, parameter and memory counts, and step times (medians, ours vs peft,
the same model, batch and optimizer, interleaved so both see the same machine load).
"""
from __future__ import annotations

import argparse
import copy
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_results  # noqa: E402

from transformer_lib import instruct, lora  # noqa: E402
from transformer_lib.pretrained import load_smollm2  # noqa: E402

ADAPTER = Path(__file__).resolve().parents[1] / "transformer_lib" / "data" / "smollm2_lora_json.pt"
ORDINARY = ["Give me one tip for sleeping better.", "What is a transformer in machine learning?",
            "Write one sentence about the sea."]


def generate_all(smol, prompts, max_new_tokens):
    return [smol.generate([{"role": "user", "content": p}], max_new_tokens=max_new_tokens) for p in prompts]


def score(rows, answers):
    fmt = [instruct.follows_format(a) for a in answers]
    correct = [ok and str(v).strip().lower() == str(row[2]).lower() for (ok, v), row in zip(fmt, rows)]
    return sum(ok for ok, _ in fmt) / len(rows), sum(correct) / len(rows)


@torch.no_grad()
def prose_perplexity(smol, n_windows, length=128):
    from transformer_lib.data import CORPUS_PATH

    ids = smol.tokenizer.encode(Path(CORPUS_PATH).read_text()[:60_000]).ids
    stride = (len(ids) - length - 1) // n_windows
    nll, count = 0.0, 0
    for i in range(n_windows):
        x = torch.tensor(ids[i * stride:i * stride + length])[None]  # (1, length)
        logits = smol.model(x)
        nll += float(torch.nn.functional.cross_entropy(logits[0, :-1], x[0, 1:], reduction="sum"))
        count += length - 1
    return math.exp(nll / count)


def step_times(model_a, model_b, batch, repeats):
    """Median seconds of one optimizer step (forward, answer-only loss, backward, AdamW) of each."""
    tokens, mask = batch
    opts = [torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-4) for m in (model_a, model_b)]
    times = [[], []]
    for r in range(repeats + 1):
        for k, (m, opt) in enumerate(zip((model_a, model_b), opts)):
            t = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            instruct.answer_only_loss(m(tokens), tokens, mask).backward()
            opt.step()
            if r:  # the first round warms up
                times[k].append(time.perf_counter() - t)
    return [statistics.median(t) for t in times], times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--accumulation", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5, help="timed steps per implementation")
    ap.add_argument("--max-new-tokens", type=int, default=10)
    ap.add_argument("--no-save", action="store_true", help="do not write the adapter or the results")
    args = ap.parse_args()
    torch.manual_seed(0)
    t0 = time.perf_counter()
    smol = load_smollm2("cpu")
    targets = ["q_proj", "v_proj"]
    train, test = instruct.json_task(seed=0)
    examples = [instruct.chat_example(smol, p, a) for p, a, _ in train]
    before = generate_all(smol, [p for p, _, _ in test], args.max_new_tokens)
    ordinary_before = generate_all(smol, ORDINARY, 32)
    ppl_before = prose_perplexity(smol, 8)
    print(f"# before: format {score(test, before)[0]:.2f}, correct {score(test, before)[1]:.2f}, "
          f"prose ppl {ppl_before:.2f} ({time.perf_counter() - t0:.0f} s)", flush=True)

    base_copy = copy.deepcopy(smol.model)  # for peft's timing, untouched by our wrapping
    paths = lora.add_lora(smol.model, args.rank, args.alpha, targets)
    trainable, total = lora.count_parameters(smol.model)

    def log(step, loss):
        print(f"step {step:3d}  loss {loss:.4f}  ({time.perf_counter() - t0:.0f} s)", flush=True)

    t_train = time.perf_counter()
    losses = instruct.train_lora(smol.model, examples, args.steps, args.batch, args.accumulation, args.lr,
                                 pad_id=smol.eos_id, seed=0, log=log)
    train_s = time.perf_counter() - t_train
    after = generate_all(smol, [p for p, _, _ in test], args.max_new_tokens)
    ordinary_after = generate_all(smol, ORDINARY, 32)
    ppl_after = prose_perplexity(smol, 8)
    (fb, cb), (fa, ca) = score(test, before), score(test, after)
    print(f"# after: format {fa:.2f}, correct {ca:.2f}, prose ppl {ppl_after:.2f}", flush=True)

    # step time: ours vs peft on the same base weights, targets, rank, batch and optimizer
    import peft

    peft_model = peft.get_peft_model(base_copy, peft.LoraConfig(r=args.rank, lora_alpha=args.alpha,
                                                                target_modules=targets))
    timing_batch = instruct.pad_batch(examples[:args.batch // args.accumulation], smol.eos_id)
    (ours_s, peft_s), raw = step_times(smol.model, peft_model, timing_batch, args.repeats)
    print(f"# step ({timing_batch[0].shape[0]} x {timing_batch[0].shape[1]} tokens): ours {ours_s:.3f} s, "
          f"peft {peft_s:.3f} s, ratio ours/peft {ours_s / peft_s:.3f}", flush=True)

    full_params = total - trainable
    result = {
        "config": {"rank": args.rank, "alpha": args.alpha, "lr": args.lr, "steps": args.steps, "batch": args.batch,
                   "accumulation": args.accumulation, "targets": targets, "max_new_tokens": args.max_new_tokens,
                   "n_train": len(train), "n_test": len(test)},
        "wrapped": len(paths), "trainable_params": trainable, "total_params": total,
        # bytes for weights + gradients + AdamW's two moments, float32
        "memory_bytes": {"full_finetune": 16 * full_params, "lora": 4 * full_params + 16 * trainable},
        "losses": losses, "train_seconds": train_s,
        "before": {"format": fb, "correct": cb, "answers": before},
        "after": {"format": fa, "correct": ca, "answers": after},
        "test_prompts": [p for p, _, _ in test], "test_expected": [a for _, a, _ in test],
        "prose_perplexity": {"base": ppl_before, "lora": ppl_after},
        "ordinary": {"prompts": ORDINARY, "before": ordinary_before, "after": ordinary_after},
        "step_seconds": {"ours": ours_s, "peft": peft_s, "ratio": ours_s / peft_s, "raw": raw,
                         "batch_shape": list(timing_batch[0].shape)},
        "peft_version": peft.__version__,
    }
    if not args.no_save:
        size = lora.save_lora(smol.model, ADAPTER, base="SmolLM2-135M-Instruct", task="json_answer",
                              steps=args.steps, lr=args.lr)
        result["adapter_bytes"] = size
        print(f"# wrote {ADAPTER.name} ({size / 1e6:.2f} MB)")
        write_results("lora", result)
    print(f"# total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
