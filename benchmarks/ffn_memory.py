"""Chapter 6's fact-memorisation experiment over seeds: benchmarks/results/ffn_memory.json.

    python benchmarks/ffn_memory.py              # 5 seeds, about a minute of CPU per seed
    python benchmarks/ffn_memory.py --seeds 3

Seed ``s`` draws new facts (attributes), new training batches, a new order of the entities and a
new initialisation; seed 0 is exactly the chapter's run. For each seed it records:

* the accuracy on all 1,024 facts after 400 steps (Adam, lr 3e-3, the same for every model) of
  one block with its FFN, one attention-only block and four attention-only blocks;
* for the model with the FFN, the accuracy when each entity's k strongest hidden units are
  switched off, and when k of its *active* units, drawn at random, are (k = 1, 3, 10);
* the values test: the share of entities whose 10 strongest units' value vectors (rows of W_2,
  weighted by their activations, read through the final norm's gain and the output head) vote
  for the entity's own attribute.
"""
from __future__ import annotations


import torch
import torch.nn as nn
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib.training import fit
from _results import seed_sweep, write_results

N_ENTITIES, N_CLASSES, SEQ_LEN, STEPS, LR = 1024, 8, 8, 400, 3e-3
KS = (1, 3, 10)
MODELS = (("1 block with FFN", 1, True), ("1 block, attention only", 1, False),
          ("4 blocks, attention only", 4, False))


def data(seed: int):
    g = lambda k: torch.Generator().manual_seed(3 * seed + k)  # noqa: E731  seed 0: 0, 1, 2 as in the chapter
    attribute = torch.randint(0, N_CLASSES, (N_ENTITIES,), generator=g(0))
    train = torch.randint(0, N_ENTITIES, (STEPS, 32, SEQ_LEN), generator=g(1))
    every = torch.randperm(N_ENTITIES, generator=g(2)).view(-1, SEQ_LEN)
    return attribute, train, every


def fact_model(num_layers: int, with_ffn: bool, seed: int):
    tl.seed_everything(seed)
    model = tl.DecoderOnlyLM(N_ENTITIES, d_model=32, num_heads=4, num_layers=num_layers, max_len=SEQ_LEN,
                             positional="none", activation="relu", tie_weights=False, ffn=with_ffn)
    model.head = nn.Linear(32, N_CLASSES, bias=False)
    model.embed.weight.requires_grad_(False)
    return model


def hidden(model, every):
    out = {}
    h = model.blocks[0].ffn.linear2.register_forward_pre_hook(lambda m, i: out.setdefault("h", i[0]))
    with torch.no_grad():
        model(every)
    h.remove()
    return out["h"]  # (128, 8, d_ff)


def ablated_accuracy(model, every, attribute, k: int, strongest: bool, seed: int = 0) -> float:
    g = torch.Generator().manual_seed(seed)

    def switch_off(module, inputs):
        h = inputs[0].clone()
        # random *active* units: random scores on the units that fire, -1 on those already zero
        scores = h if strongest else torch.where(h > 0, torch.rand(h.shape, generator=g), -1.0)
        return (h.scatter(-1, scores.topk(k, dim=-1).indices, 0.0),)

    handle = model.blocks[0].ffn.linear2.register_forward_pre_hook(switch_off)
    try:
        with torch.no_grad():
            return (model(every).argmax(-1) == attribute[every]).float().mean().item()
    finally:
        handle.remove()


def value_votes(model, every, attribute, k: int = 10) -> float:
    """Share of entities whose k strongest units' values, read through the output, name its attribute."""
    h = hidden(model, every)  # (128, 8, d_ff)
    W2 = model.blocks[0].ffn.linear2.weight.T  # (d_ff, d): row j is unit j's value
    gain = model.norm.weight if model.norm is not None else torch.ones(W2.shape[1])
    with torch.no_grad():
        unit_logits = model.head((W2 - W2.mean(-1, keepdim=True)) * gain)  # (d_ff, classes)
        top = h.topk(k, dim=-1)
        weights = torch.zeros_like(h).scatter(-1, top.indices, top.values)  # (128, 8, d_ff)
        votes = weights @ unit_logits  # (128, 8, classes)
    return (votes.argmax(-1) == attribute[every]).float().mean().item()


def one_seed(seed: int) -> dict:
    attribute, train, every = data(seed)
    row = {"accuracy": {}}
    for name, layers, with_ffn in MODELS:
        model = fact_model(layers, with_ffn, seed)
        loss = lambda m, seqs: F.cross_entropy(m(seqs).reshape(-1, N_CLASSES),  # noqa: E731
                                               attribute[seqs].reshape(-1))
        fit(model, lambda step: train[step], loss, steps=STEPS, lr=LR, progress=False)
        with torch.no_grad():
            row["accuracy"][name] = (model(every).argmax(-1) == attribute[every]).float().mean().item()
        if with_ffn:
            memory = model
    row["active_units"] = (hidden(memory, every) > 0).sum(-1).float().mean().item()
    row["strongest"] = {str(k): ablated_accuracy(memory, every, attribute, k, True) for k in KS}
    row["random_active"] = {str(k): ablated_accuracy(memory, every, attribute, k, False) for k in KS}
    row["value_votes_top10"] = value_votes(memory, every, attribute)
    return row


def main(argv=None) -> int:
    args, elapsed = seed_sweep(__doc__, argv)
    rows = []
    for seed in range(args.seeds):
        rows.append(one_seed(seed))
        print(f"seed {seed}: {rows[-1]}", flush=True)
    payload = {"seeds": list(range(args.seeds)), "steps": STEPS, "lr": LR, "ks": list(KS),
               "models": [m[0] for m in MODELS], "rows": rows, **elapsed()}
    write_results("ffn_memory", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
