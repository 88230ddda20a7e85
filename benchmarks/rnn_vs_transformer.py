"""Forward time of one recurrent layer vs one Transformer encoder layer, against sequence length.

    python benchmarks/rnn_vs_transformer.py                      # width 512, batch 8, n = 64..4096
    python benchmarks/rnn_vs_transformer.py --device cuda --lengths 64 256 1024 4096 16384
    python benchmarks/rnn_vs_transformer.py --backward           # forward + backward (training step)
    python benchmarks/rnn_vs_transformer.py --cpu-time           # CPU time of one thread (a busy machine)

The chapter "RNN vs Transformer" runs the same sweep at a smaller size (width 256, n <= 1024) to
stay within its time budget; this script is the larger table. Each entry is the fastest of
``--repeats`` runs after one warm-up, the layers taking turns (on a shared machine the minimum
is the least disturbed run, and taking turns spreads bursts of load over all layers).
Alongside the times it prints each layer's critical path (``trace_ops``), which is a count and
does not vary between runs.
"""
from __future__ import annotations

import argparse
import time

import torch

import transformer_lib as tl
from _results import write_results
from transformer_lib.profiling import time_call, trace_ops
from transformer_lib.rnn import torch_rnn


def build_layers(d: int, heads: int, device: torch.device) -> dict[str, torch.nn.Module]:
    tl.seed_everything(0)
    layers = {
        "ElmanRNN (Python loop)": tl.ElmanRNN(d, d),
        "nn.RNN": torch_rnn("rnn", d, d),
        "nn.GRU": torch_rnn("gru", d, d),
        "TransformerBlock": tl.TransformerBlock(d, heads, 4 * d),
    }
    return {name: layer.to(device).eval() for name, layer in layers.items()}


def run(layer, x, backward: bool):
    if not backward:
        with torch.no_grad():
            return layer(x)
    out = layer(x)
    out = out[0] if isinstance(out, tuple) else out
    out.sum().backward()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="cpu, cuda or mps (default: tl.get_device())")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024, 4096])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backward", action="store_true", help="time forward + backward instead of forward only")
    parser.add_argument("--cpu-time", action="store_true",
                        help="CPU time of one thread (time_call(cpu_time=True)): waiting for a core does not count")
    args = parser.parse_args(argv)

    device = tl.get_device(args.device)
    layers = build_layers(args.width, args.heads, device)
    what = "forward + backward" if args.backward else "forward"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{device.type}, {torch.get_num_threads()} threads"
    print(f"# {what}, width {args.width}, {args.heads} heads, batch {args.batch}, on {name}, "
          f"torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    header = f"{'n':>6} | " + " | ".join(f"{k:>22}" for k in layers) + " | TransformerBlock vs nn.RNN"
    print(header)
    print("-" * len(header))
    rows = []
    for n in args.lengths:
        x = torch.randn(args.batch, n, args.width, device=device, requires_grad=args.backward)
        for layer in layers.values():  # warm-up
            run(layer, x, args.backward)
        rounds = {k: [] for k in layers}
        for _ in range(args.repeats):  # round-robin, so a burst of load elsewhere hits every layer alike
            for k, layer in layers.items():
                rounds[k].append(time_call(run, layer, x, args.backward, repeats=1, warmup=0, device=device,
                                           cpu_time=args.cpu_time))
        times = {k: min(ts) for k, ts in rounds.items()}
        ratio = times["TransformerBlock"] / times["nn.RNN"]
        verdict = f"{ratio:.1f}x slower" if ratio >= 1 else f"{1 / ratio:.1f}x faster"
        print(f"{n:>6} | " + " | ".join(f"{t * 1e3:>19.2f} ms" for t in times.values()) + f" | {verdict:>22}", flush=True)
        rows.append({"n": n, "seconds": times, "encoder_over_rnn": ratio, "rounds": rounds})

    print("\n# critical path (dependent operations dispatched, trace_ops; width-independent)")
    small = build_layers(16, 4, device)
    for n in args.lengths:
        x = torch.randn(2, n, 16, device=device)
        depths = {k: trace_ops(layer, x).depth for k, layer in small.items()}
        print(f"{n:>6} | " + " | ".join(f"{d:>22}" for d in depths.values()))
        next(r for r in rows if r["n"] == n)["critical_path"] = depths
    if device.type == "cpu" and not args.backward:
        write_results("rnn_vs_transformer", {"what": what, "width": args.width, "heads": args.heads,
                                             "batch": args.batch, "repeats": args.repeats,
                                             "clock": "cpu_1thread" if args.cpu_time else "wall", "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
