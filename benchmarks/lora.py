"""LoRA instruction tuning of SmolLM2-135M-Instruct on the JSON-answer task, and our LoRA's step
time against peft's (chapter 21).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/lora.py   # every part (about 30 min at load 16)
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/lora.py --only steps memory sweep
    .venv/bin/python benchmarks/lora.py --steps 4 --no-save    # a smoke run

Writes ``transformer_lib/data/smollm2_lora_json.pt`` (the adapter, < 2 MB) and
``benchmarks/results/lora.json``. Its parts (``--only`` runs some of them and merges them into
the existing file, each with the machine and load it ran under):

* main   - held-out format and accuracy before/after, each prompt's answers, the loss curve,
           perplexity on the book's prose with the adapter off/on (forgetting), answers to
           ordinary prompts, parameter counts and the computed memory of weights, gradients and
           AdamW's moments; writes the adapter;
* steps  - step times (medians, ours vs peft, the same model, batch and optimizer, interleaved in
           alternating order so both see the same machine load);
* sweep  - ``--sweep`` (rank, alpha) pairs, each trained like the main run from the same start
           and scored on the same held-out prompts, with its trainable parameters;
* memory - the measured peak memory of ``--memory-steps`` training steps, full fine-tuning and
           LoRA, each in its own fresh process (``profiling.peak_memory``: the peak resident set
           size during the steps, its high-water mark reset after loading, minus the resident size
           then), so one configuration's freed buffers cannot hide or inflate the other's peak.
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
from _results import RESULTS, machine, write_results  # noqa: E402

from transformer_lib import instruct, lora  # noqa: E402
from transformer_lib.pretrained import load_smollm2  # noqa: E402
from transformer_lib.profiling import peak_memory  # noqa: E402

ADAPTER = Path(__file__).resolve().parents[1] / "transformer_lib" / "data" / "smollm2_lora_json.pt"
PARTS = ("main", "steps", "sweep", "memory")
TARGETS = ["q_proj", "v_proj"]
ORDINARY = ["Give me one tip for sleeping better.", "What is a transformer in machine learning?",
            "Write one sentence about the sea."]


def generate_all(smol, prompts, max_new_tokens):
    return [smol.generate_text([{"role": "user", "content": p}], max_new_tokens=max_new_tokens) for p in prompts]


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
    """Median seconds of one optimizer step (forward, answer-only loss, backward, AdamW) of each.

    One warm-up round, then ``repeats`` rounds; the order alternates (a b, b a, ...) so a drift in
    the machine's load falls on both alike. Also returns the per-round ratios a/b and their median:
    a ratio of two steps taken seconds apart survives a busy machine far better than either time."""
    tokens, mask = batch
    opts = [torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-4) for m in (model_a, model_b)]
    times = [[], []]
    for r in range(repeats + 1):
        for k in ((0, 1) if r % 2 == 0 else (1, 0)):
            m, opt = (model_a, model_b)[k], opts[k]
            t = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            instruct.answer_only_loss(m(tokens), tokens, mask).backward()
            opt.step()
            if r:  # the first round warms up
                times[k].append(time.perf_counter() - t)
    ratios = [a / b for a, b in zip(*times)]
    return [statistics.median(t) for t in times], times, ratios


def training_examples(smol):
    train, test = instruct.json_task(seed=0)
    return train, test, [instruct.chat_example(smol, p, a) for p, a, _ in train]


def part_steps(args, smol, examples):
    """Ours vs peft: the same base weights, targets, rank, batch and optimizer."""
    import peft

    ours, base_copy = copy.deepcopy(smol.model), copy.deepcopy(smol.model)  # smol.model stays untouched
    torch.manual_seed(0)
    lora.add_lora(ours, args.rank, args.alpha, TARGETS)
    peft_model = peft.get_peft_model(base_copy, peft.LoraConfig(r=args.rank, lora_alpha=args.alpha,
                                                                target_modules=TARGETS))
    timing_batch = instruct.pad_batch(examples[:args.batch // args.accumulation], smol.eos_id)
    load_before = machine().get("load_1min")
    (ours_s, peft_s), raw, ratios = step_times(ours, peft_model, timing_batch, args.repeats)
    ratio = statistics.median(ratios)
    print(f"# step ({timing_batch[0].shape[0]} x {timing_batch[0].shape[1]} tokens, {args.repeats} rounds): "
          f"ours {ours_s:.3f} s, peft {peft_s:.3f} s, median ratio ours/peft {ratio:.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f}), load {load_before} -> {machine().get('load_1min')}",
          flush=True)
    return {"ours": ours_s, "peft": peft_s, "ratio": ratio, "ratio_min": min(ratios), "ratio_max": max(ratios),
            "ratios": ratios, "raw": raw, "repeats": args.repeats, "batch_shape": list(timing_batch[0].shape),
            "load_1min_before": load_before, "peft_version": peft.__version__, "machine": machine()}


def part_sweep(args, smol, examples, test, save=None):
    """Each (rank, alpha): the main run's recipe (steps, batch, lr, data order, seed) from the same
    untouched base weights; held-out format and correctness, trainable parameters. ``save(part)``
    is called after each pair, so a stopped run keeps the pairs it finished."""
    base = smol.model
    rows = []
    part = {"rows": rows, "steps": args.steps, "lr": args.lr, "n_test": len(test)}
    for pair in args.sweep:
        rank, alpha = int(pair.split(":")[0]), float(pair.split(":")[1])
        t = time.perf_counter()
        smol.model = copy.deepcopy(base)
        torch.manual_seed(0)
        lora.add_lora(smol.model, rank, alpha, TARGETS)
        trainable, _ = lora.count_parameters(smol.model)
        losses = instruct.train_lora(smol.model, examples, args.steps, args.batch, args.accumulation, args.lr,
                                     pad_id=smol.eos_id, seed=0)["loss"]
        answers = generate_all(smol, [p for p, _, _ in test], args.max_new_tokens)
        fmt, correct = score(test, answers)
        rows.append({"rank": rank, "alpha": alpha, "scale": alpha / rank, "trainable": trainable,
                     "format": fmt, "correct": correct, "final_loss": statistics.mean(losses[-4:]),
                     "losses": losses, "answers": answers})
        print(f"# sweep rank {rank:3d} alpha {alpha:5g} (scale {alpha / rank:g}): trainable {trainable:,}, "
              f"format {fmt:.2f}, correct {correct:.2f}, loss (last 4) {rows[-1]['final_loss']:.3f} "
              f"({time.perf_counter() - t:.0f} s)", flush=True)
        part["machine"] = machine()
        if save is not None:
            save(part)
    smol.model = base
    return part


def memory_child(args):
    """Run in a fresh process: load, set up one configuration, then measure its training steps."""
    import json
    import resource

    torch.set_num_threads(1)
    smol = load_smollm2("cpu")
    _, _, examples = training_examples(smol)
    model = smol.model
    if args.memory_child == "lora":
        torch.manual_seed(0)
        lora.add_lora(model, args.rank, args.alpha, TARGETS)
    else:
        model.requires_grad_(True)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    batch = instruct.pad_batch(examples[:args.batch // args.accumulation], smol.eos_id)
    model.train()

    def steps():
        for _ in range(args.memory_steps):
            opt.zero_grad(set_to_none=True)
            instruct.answer_only_loss(model(batch[0]), *batch).backward()
            opt.step()

    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) * 1024
    extra = peak_memory(steps)
    print(json.dumps({"config": args.memory_child, "trainable": sum(p.numel() for p in params),
                      "rss_after_load_bytes": rss, "peak_extra_bytes": extra,
                      "ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "steps": args.memory_steps, "batch_shape": list(batch[0].shape)}))


def part_memory(args):
    """One subprocess per configuration; each prints one JSON line."""
    import json
    import subprocess

    rows = {}
    for config in ("full", "lora"):
        cmd = [sys.executable, __file__, "--memory-child", config, "--memory-steps", str(args.memory_steps),
               "--rank", str(args.rank), "--alpha", str(args.alpha), "--batch", str(args.batch),
               "--accumulation", str(args.accumulation)]
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        rows[config] = json.loads(out.strip().splitlines()[-1])
        r = rows[config]
        print(f"# memory {config}: {r['trainable']:,} trainable, after loading {r['rss_after_load_bytes'] / 1e9:.2f} GB,"
              f" peak extra over {r['steps']} steps {r['peak_extra_bytes'] / 1e9:.3f} GB", flush=True)
    return {"rows": rows, "method": "profiling.peak_memory in a fresh process per configuration", "machine": machine()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--accumulation", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=12, help="timed steps per implementation")
    ap.add_argument("--max-new-tokens", type=int, default=10)
    ap.add_argument("--sweep", nargs="*", default=["2:4", "8:16", "32:64", "8:4", "8:64"], metavar="RANK:ALPHA")
    ap.add_argument("--memory-steps", type=int, default=2)
    ap.add_argument("--memory-child", choices=["full", "lora"], help=argparse.SUPPRESS)
    ap.add_argument("--only", nargs="+", choices=PARTS, default=None,
                    help="run only these parts and merge them into the existing results file")
    ap.add_argument("--no-save", action="store_true", help="do not write the adapter or the results")
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args)
        return
    for pair in args.sweep:
        if len(pair.split(":")) != 2:
            ap.error(f"--sweep takes RANK:ALPHA pairs, got {pair!r}")
    parts = args.only or PARTS
    torch.manual_seed(0)
    t0 = time.perf_counter()
    if args.only and "main" not in parts:
        import json

        result = json.loads((RESULTS / "lora.json").read_text())
        # write_results puts this run's machine under "machine"; the main run's is kept apart
        result.setdefault("main_machine", result.pop("machine"))
    else:
        result = None
    if "memory" in parts:  # first, before this process holds a model
        memory = part_memory(args)
    smol = load_smollm2("cpu")
    train, test, examples = training_examples(smol)

    def save(key=None, value=None):  # after each part: a stopped run keeps what it measured
        if key is not None:
            result[key] = value
        if not args.no_save:
            write_results("lora", result)

    if "main" in parts:
        result = main_run(args, smol, train, test, examples, t0)
    if "memory" in parts:
        save("memory_measured", memory)
    if "steps" in parts:
        result["peft_version"] = (steps := part_steps(args, smol, examples))["peft_version"]
        save("step_seconds", steps)
    if "sweep" in parts:
        part_sweep(args, smol, examples, test, save=lambda part: save("sweep", part))
    save()
    print(f"# total {time.perf_counter() - t0:.0f} s")


def main_run(args, smol, train, test, examples, t0):
    before = generate_all(smol, [p for p, _, _ in test], args.max_new_tokens)
    ordinary_before = generate_all(smol, ORDINARY, 32)
    ppl_before = prose_perplexity(smol, 8)
    print(f"# before: format {score(test, before)[0]:.2f}, correct {score(test, before)[1]:.2f}, "
          f"prose ppl {ppl_before:.2f} ({time.perf_counter() - t0:.0f} s)", flush=True)

    base = smol.model
    smol.model = copy.deepcopy(base)  # the later parts start from the untouched weights
    paths = lora.add_lora(smol.model, args.rank, args.alpha, TARGETS)
    trainable, total = lora.count_parameters(smol.model)

    def log(step, history):
        print(f"step {step:3d}  loss {history['loss'][-1]:.4f}  ({time.perf_counter() - t0:.0f} s)", flush=True)

    t_train = time.perf_counter()
    losses = instruct.train_lora(smol.model, examples, args.steps, args.batch, args.accumulation, args.lr,
                                 pad_id=smol.eos_id, seed=0, callback=log)["loss"]
    train_s = time.perf_counter() - t_train
    after = generate_all(smol, [p for p, _, _ in test], args.max_new_tokens)
    ordinary_after = generate_all(smol, ORDINARY, 32)
    ppl_after = prose_perplexity(smol, 8)
    (fb, cb), (fa, ca) = score(test, before), score(test, after)
    print(f"# after: format {fa:.2f}, correct {ca:.2f}, prose ppl {ppl_after:.2f}", flush=True)

    full_params = total - trainable
    result = {
        "config": {"rank": args.rank, "alpha": args.alpha, "lr": args.lr, "steps": args.steps, "batch": args.batch,
                   "accumulation": args.accumulation, "targets": TARGETS, "max_new_tokens": args.max_new_tokens,
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
    }
    if not args.no_save:
        size = lora.save_lora(smol.model, ADAPTER, base="SmolLM2-135M-Instruct", task="json_answer",
                              steps=args.steps, lr=args.lr)
        result["adapter_bytes"] = size
        print(f"# wrote {ADAPTER.name} ({size / 1e6:.2f} MB)")
    smol.model = base
    return result


if __name__ == "__main__":
    main()
