"""A mixture-of-experts language model against dense ones on the book's prose (chapter 25).

    .venv/bin/python benchmarks/moe_lm.py            # 5 seeds, two processes
    nice -n 19 .venv/bin/python benchmarks/moe_lm.py --workers 1   # one process

Cost: about 150 CPU-seconds for 5 seeds (measured with --workers 1: 148 s user and 2 s system for
the whole run, 143 s of it training, 187 s wall; each run's training time is in the results).

Three character-level ``DecoderOnlyLM``s (d_model 64, 4 heads, 2 layers, RoPE, RMSNorm, SwiGLU,
context 64) that differ only in their FFNs:

* dense, active size: one SwiGLU FFN of width 128 (the FFN parameters and FLOPs one token sees in
  the mixture);
* mixture: 4 SwiGLU experts of width 64, top-2 (Mixtral's routing), the load-balancing loss at
  0.01 (Switch Transformer's coefficient): twice the dense model's FFN parameters,
  the same active ones;
* dense, total size: one SwiGLU FFN of width 256 (the mixture's FFN parameters, all active).

Corpus: ``data.load_corpus()`` (a frozen copy of the prose of the first chapters and appendix A), characters, split by
paragraph with ``data.split_paragraphs`` (every tenth paragraph held out). Every model gets the same
rule: AdamW lr 3e-3, 30 warmup steps, gradient clipping at 1, 300 steps of 16 windows of 64
characters drawn at random; seed ``s`` sets the initialisation and the batches. Measured: the
validation loss (nats per character) over every non-overlapping 64-character window of the held-out
text, parameters (all and active per token), and per run the training CPU seconds. Prints a
table, asserts nothing, writes benchmarks/results/moe_lm.json.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import runs_in_workers, seed_sweep  # noqa: E402

from transformer_lib.data import load_corpus, split_paragraphs  # noqa: E402
from transformer_lib.model import DecoderOnlyLM  # noqa: E402
from transformer_lib.moe import load_balancing_loss, router_logits  # noqa: E402
from transformer_lib.training import fit  # noqa: E402

STEPS, BATCH, CTX, LR, ALPHA = 300, 16, 64, 3e-3, 0.01
BASE = dict(d_model=64, num_heads=4, num_layers=2, max_len=CTX, positional="rope", norm="rms",
            activation="swiglu", bias=False)
SETTINGS = {"dense, active size (d_ff 128)": dict(d_ff=128),
            "mixture, 4 experts of 64, top-2": dict(d_ff=64, num_experts=4, top_k=2),
            "dense, total size (d_ff 256)": dict(d_ff=256)}


def data():
    train, val = split_paragraphs(load_corpus())
    chars = sorted(set(train) | set(val))
    index = {c: i for i, c in enumerate(chars)}
    encode = lambda text: torch.tensor([index[c] for c in text])  # noqa: E731
    return len(chars), encode(train), encode(val)


def ffn_params(model):
    """(all FFN parameters, those one token uses): routers count as active."""
    total = active = 0
    for block in model.blocks:
        ffn = block.ffn
        n = sum(p.numel() for p in ffn.parameters())
        total += n
        if hasattr(ffn, "experts"):
            per_expert = sum(p.numel() for p in ffn.experts[0].parameters())
            active += n - (len(ffn.experts) - ffn.top_k) * per_expert
        else:
            active += n
    return total, active


def run(job):
    name, seed = job
    torch.set_num_threads(1)
    vocab, train, val = data()
    torch.manual_seed(seed)
    model = DecoderOnlyLM(vocab, **BASE, **SETTINGS[name])
    generator = torch.Generator().manual_seed(seed)
    moe = "num_experts" in SETTINGS[name]

    def batch(step):
        starts = torch.randint(0, len(train) - CTX - 1, (BATCH,), generator=generator)
        return torch.stack([train[s:s + CTX + 1] for s in starts.tolist()])

    def loss_fn(m, seq):
        logits = m(seq[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), seq[:, 1:].flatten())
        if moe:
            loss = loss + ALPHA * load_balancing_loss(router_logits(m), 2)
        return loss

    start = time.process_time()
    fit(model, batch, loss_fn, STEPS, lr=LR, warmup_steps=30, progress=False)
    seconds = time.process_time() - start
    model.eval()
    windows = val[: (len(val) - 1) // CTX * CTX + 1]
    x = windows[:-1].view(-1, CTX)
    y = windows[1:].view(-1, CTX)
    with torch.no_grad():
        val_loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
        row = {"setting": name, "seed": seed, "val_loss": val_loss, "train_cpu_seconds": round(seconds, 1),
               "params": sum(p.numel() for p in model.parameters())}
        row["ffn_params"], row["ffn_active_params"] = ffn_params(model)
        if moe:
            logits = router_logits(model)
            row["aux_loss"] = load_balancing_loss(logits, 2).item()
            # assignments per token to each expert, per layer (balanced: 2 / 4 = 0.5)
            row["assignments"] = [F.one_hot(lg.topk(2, -1).indices, 4).float().mean(0).sum(0).tolist()
                                  for lg in logits]
    print(f"{name:34s} seed {seed}: val loss {val_loss:.4f} ({row['train_cpu_seconds']} CPU s)", flush=True)
    return row


def main(argv=None):
    import argparse

    workers = argparse.ArgumentParser(add_help=False)
    workers.add_argument("--workers", type=int, default=2, help="processes (one thread each)")
    known, rest = workers.parse_known_args(argv)
    args, elapsed = seed_sweep(__doc__, rest, seeds=5)
    jobs = [(name, s) for s in range(args.seeds) for name in SETTINGS]
    vocab, train, val = data()
    runs_in_workers("moe_lm", run, jobs, {
        "model": BASE, "ffn": SETTINGS, "steps": STEPS, "batch": BATCH, "context": CTX, "lr": LR,
        "warmup_steps": 30, "aux_loss_coefficient": ALPHA, "seeds": args.seeds,
        "vocab": vocab, "train_chars": len(train), "val_chars": len(val)}, elapsed, workers=known.workers)

if __name__ == "__main__":
    main()
