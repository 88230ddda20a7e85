"""Temperature against likelihood (chapter 17): twenty seeded samples of 12 tokens at each of four
temperatures, scored by the model itself at temperature 1.

    nice .venv/bin/python benchmarks/temperature.py            # about half a minute of one thread
    nice .venv/bin/python benchmarks/temperature.py --seeds 30

Setting: SmolLM2-135M-Instruct from the packaged GGUF (float32), the chapter's story prompt "Once
upon a time, in a small village by the sea, there lived a", 12 new tokens, temperatures 0.3, 0.7,
1.0 and 1.5, seeds 0 .. N-1 at every temperature (the same seed at every temperature: the
comparisons are paired by seed). All rows are decoded as one batch (``sampling.generate_each``, each
row with its own seeded generator) and scored in one pass (``sampling.continuation_log_probs``),
exactly as chapter 17's live cell does with seeds 0-4, so its five samples are the first five here.
Stored per row: the new ids, their text, and the log-probability of every new token under the
model at T = 1. It asserts nothing; chapter 17 prints the means and the paired steps with their
intervals. Torch on one thread.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from _results import seed_sweep, write_results  # noqa: E402

from transformer_lib.pretrained import load_smollm2  # noqa: E402
from transformer_lib.sampling import generate_each  # noqa: E402

STORY = "Once upon a time, in a small village by the sea, there lived a"
TEMPERATURES = (0.3, 0.7, 1.0, 1.5)
NEW_TOKENS = 12


def main(argv=None) -> None:
    args, elapsed = seed_sweep(__doc__, argv, seeds=20)
    lm = load_smollm2("cpu")
    model = lm.model
    prompt = lm.prompt_ids(STORY).tolist()
    settings = [dict(temperature=T, seed=s) for T in TEMPERATURES for s in range(args.seeds)]
    outs = generate_each(model, prompt, NEW_TOKENS, settings, eos_id=lm.eos_id)
    with torch.no_grad():  # every new token's log-probability: the chapter's sum, token by token
        rows = []
        for setting, new in zip(settings, outs):
            z = model(torch.tensor([prompt + new]))[0, len(prompt) - 1:-1].float().log_softmax(-1)
            token_lp = z[torch.arange(len(new)), torch.tensor(new)].tolist()
            rows.append({**setting, "ids": new, "text": lm.tokenizer.decode(new),
                         "token_log_probs": [round(x, 4) for x in token_lp]})
    for T in TEMPERATURES:
        per_token = [sum(r["token_log_probs"]) / len(r["token_log_probs"]) for r in rows if r["temperature"] == T]
        print(f"T = {T}: log p per token, mean over {len(per_token)} seeds {sum(per_token) / len(per_token):.2f}")
    write_results("temperature", {
        "setting": {"model": "SmolLM2-135M-Instruct (GGUF Q4_1 dequantized to float32)", "prompt": STORY,
                    "new_tokens": NEW_TOKENS, "temperatures": list(TEMPERATURES), "seeds": args.seeds,
                    "eos_id": lm.eos_id, "threads": 1},
        "rows": rows, **elapsed()})


if __name__ == "__main__":
    main()
