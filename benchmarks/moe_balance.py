"""Chapter 25's toy mixture-of-experts task over ten seeds, and the load-balancing loss's weight
and budget (chapter 25).

    nice -n 19 .venv/bin/python benchmarks/moe_balance.py   # one thread: 102 CPU-s, 127 s wall (load 2.3)

The task, the layers and the rule are those of the chapter's "The load-balancing loss at work"
(copied here, so that seeds 0-4 of its six settings are the chapter's own runs): four sub-tasks in
one stream, each token's sub-task id a one-hot (times 2) in its first four of 16 features, its
target the sub-task's own map tanh(W_t x) of the other twelve; a mixture of 4 SwiGLU experts of
width 16, top-2, or a dense SwiGLU FFN; Adam, learning rate 0.01, 300 steps of 256 tokens from
one data stream (generator seed 1), the seed setting the initialisation; test MSE on 2000 tokens
(generator seed 9). A "collapsed start" adds 3.0 to the router's weights from the four id
features to expert 0 (6 logits of head start).

Settings: the chapter's six (a normal and a collapsed router start, each without and with the
loss at 0.1; dense FFNs of the mixture's active width 32 and total width 64); a dense FFN of one
expert's width (16); and from the collapsed start the loss at 0.01 (Switch Transformer's
coefficient) for 300 steps and at 0.1 for only 100 steps. Measured per run: the test MSE and, for
a mixture, the largest distance of an expert's assignments per token from the balanced 0.5 (both
slots), the share of first choices on expert 0, the second slot's mean routing weight and the
auxiliary loss's value. Prints one line per run, asserts nothing, writes
benchmarks/results/moe_balance.json.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import seed_sweep, write_results  # noqa: E402

from transformer_lib.feedforward import FeedForward  # noqa: E402
from transformer_lib.moe import MixtureOfExperts, load_balancing_loss, route  # noqa: E402

T, D = 4, 16
W_TASK = torch.randn(T, D - T, D, generator=torch.Generator().manual_seed(123)) / (D - T) ** 0.5
SETTINGS = {
    "no aux loss": {},
    "aux loss 0.1": {"alpha": 0.1},
    "collapsed start, no aux loss": {"collapse": True},
    "collapsed start, aux loss 0.1": {"collapse": True, "alpha": 0.1},
    "dense, active width (d_ff 32)": {"dense_ff": 32},
    "dense, total width (d_ff 64)": {"dense_ff": 64},
    "dense, one expert's width (d_ff 16)": {"dense_ff": 16},
    "collapsed start, aux loss 0.01": {"collapse": True, "alpha": 0.01},
    "collapsed start, aux loss 0.1, 100 steps": {"collapse": True, "alpha": 0.1, "steps": 100},
}


def task_batch(n, g):
    task = torch.randint(0, T, (n,), generator=g)
    feat = torch.randn(n, D - T, generator=g)
    x = torch.cat([F.one_hot(task, T).float() * 2, feat], 1)  # (n, D)
    y = torch.tanh(torch.einsum("nf,nfd->nd", feat, W_TASK[task]))  # (n, D)
    return x, y, task


def train(seed, alpha=0.0, collapse=False, dense_ff=None, steps=300):
    """The chapter's ``train``: one run of the 4-expert top-2 mixture or of a dense FFN."""
    torch.manual_seed(seed)
    if dense_ff is None:
        m = MixtureOfExperts(D, 16, 4, 2)
    else:
        m = FeedForward(D, dense_ff, activation="swiglu", bias=False)
    if collapse:
        with torch.no_grad():
            m.router.weight[0, :T] += 3.0
    opt = torch.optim.Adam(m.parameters(), 1e-2)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y, _ = task_batch(256, g)
        loss = F.mse_loss(m(x), y)
        if alpha:
            loss = loss + alpha * load_balancing_loss(m.last_router_logits, 2)
        loss.backward()
        opt.step()
        opt.zero_grad()
    x, y, _ = task_batch(2000, torch.Generator().manual_seed(9))
    with torch.no_grad():
        row = {"mse": F.mse_loss(m(x), y).item()}
        if dense_ff is None:
            logits = m.last_router_logits                                   # (2000, 4)
            f = F.one_hot(logits.topk(2, -1).indices, 4).float().mean(0).sum(0)  # (4,), sums to 2
            row["off_balance"] = (f - 0.5).abs().max().item()
            row["first_on_0"] = (logits.argmax(-1) == 0).float().mean().item()
            row["second_weight"] = route(logits, 2)[0][:, 1].mean().item()
            row["aux"] = load_balancing_loss(logits, 2).item()
    return row


def main(argv=None):
    args, elapsed = seed_sweep(__doc__, argv, seeds=10)
    runs = []
    for name, kw in SETTINGS.items():
        for seed in range(args.seeds):
            start = time.process_time()
            row = {"setting": name, "seed": seed, **train(seed, **kw)}
            row["train_cpu_seconds"] = round(time.process_time() - start, 2)
            runs.append(row)
            print(f"{name:42s} seed {seed}: " + ", ".join(
                f"{k} {v:.4f}" for k, v in row.items() if k not in ("setting", "seed")), flush=True)
    write_results("moe_balance", {
        "settings": {"settings": SETTINGS, "seeds": args.seeds, "optimizer": "Adam", "lr": 0.01,
                     "steps": 300, "batch": 256, "test_tokens": 2000, "threads": 1},
        "runs": runs, **elapsed()})


if __name__ == "__main__":
    main()
