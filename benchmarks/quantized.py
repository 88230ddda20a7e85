"""Quantized decoding: tokens/s and perplexity of SmolLM2 in float32, int8 and int4, with
transformers and llama.cpp beside them (issues 31 and 41, chapter 19).

    nice .venv/bin/python benchmarks/quantized.py            # the full table (a few minutes)
    .venv/bin/python benchmarks/quantized.py --quick         # 16 new tokens, one round, short text
    nice .venv/bin/python benchmarks/quantized.py --only reference   # llama.cpp's own Q8_0 only (below)

Setting: SmolLM2-135M-Instruct from the packaged GGUF, batch 1, CPU, greedy, 64 new tokens after
a 64-token prompt, ``--threads`` threads (2). Generators, all on the same file:

* float32     - ``load_smollm2`` (every tensor dequantized to float32) + ``sampling.generate_ids``;
* int8        - the float32 model after ``quantize(model, 8)`` (q8_0 blocks, the compiled kernel):
                each weight rounded to its nearest code;
* int8 GPTQ   - ``quantize(model, 8, calibration=ids)``: the same q8_0 blocks and kernels, the codes
                chosen by GPTQ (``quantization.gptq``) against each layer's inputs on
                ``CALIBRATION_TOKENS`` tokens of the book's *training* prose (windows of 256), so
                that the layers' outputs, not their weights, stay close to float32's; the tied
                embedding/head stays rounded to nearest (it is exactly the file's Q8_0 anyway);
* int4        - the float32 model after ``quantize(model, 4)``: the default mixture (q4_1 blocks, the
                tied embedding/head q8_0: the packaged file's own widths, ``gguf_widths``);
* int4 uniform - ``quantize(model, 4, widths={})``: the head at 4 bits too;
* int4 (file) - ``load_smollm2_quantized``: the file's own Q4_1 blocks (and Q8_0 embedding), kept;
* int4 (file) modules - the same model with its fused one-token step switched off
                (``decode_step.enabled = False``): every step runs the PyTorch modules of each block, the
                quantized products through the kernel one by one (what the fused step saves);
  (every quantized row above decodes with the model's fused step (``FusedDecodeStep``): one C++ call
  per token, q/k/v and gate/up fused into one kernel pass each, the cache written in place)
* int8 x8, int4 (file) x8 - the same weights with ``activations="int8"``: x quantized per block of
                32 inside the kernel (llama.cpp's Q8_0 activations), integer dot products (VNNI;
                on AVX2, vpmaddubsw + vpmaddwd), in decoding and in prefill (kernels.matmul's int8
                GEMM on AVX-512 VNNI); their perplexity is measured too (x's rounding is theirs);
* transformers - its ``generate`` on the model it reads from the same GGUF (float32);
* llama.cpp   - ``llama-cpp-python`` on the same GGUF file (skipped when it is not installed:
                PyPI has no CPU wheel, ``pip install llama-cpp-python`` builds llama.cpp from
                source, about 13 minutes on two idle cores). On a CPU with AMX (Intel Sapphire
                Rapids and later) in a virtual machine, a native build segfaulted in its first
                decode (its AMX path); this build works there:
                  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
                  -DGGML_F16C=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON
                  -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
                  pip install --no-cache-dir llama-cpp-python==0.3.36

Method: one warm-up each, then ``--rounds`` rounds taking turns, median tokens/s (prefill
included, as a user sees it). Perplexity: non-overlapping windows of 256 tokens of the book's
own validation prose (written after SmolLM2 was trained: held out), and the same for the book's
small float32 GPT (chapter 16) quantized the same way, whose float32 weights were never 4-bit.
Teacher-forced agreement: the share of positions of that text where the model, reading the true
text, picks float32's next token (argmax). Greedy agreement: the share of the 64 greedy tokens
equal to float32's. Caveat: SmolLM2's float32 weights are the file's 4-bit weights decoded, and
re-quantizing them with the same groups gives back (almost) the same grid (the share left
unchanged is recorded as ``requantization_unchanged``), so its int4 rows measure the head's width,
not rounding; the book GPT rows are the true float-to-int measurement.

GPTQ's calibration: the int8 GPTQ row again with the first 1,024 and 16,384 training tokens
(``CALIBRATION_SIZES``), perplexity change and teacher-forced agreement per size (the key
``gptq_calibration``), and the seconds ``quantize`` took with calibration. The book GPT gets
int8 and int4 GPTQ rows too (calibrated on its own tokenizer's training tokens, windows of its
context).

Sensitivity: each tensor group (``TENSOR_GROUPS``) alone at 4 bits, the rest int8, on both models:
perplexity change and teacher-forced agreement against float32. Prefill: one forward pass over a
prompt of 16 to 512 tokens, float32, int8, int4 (file) and their x8 rows in turns, median tokens/s
per length; the prefill target is read on the int4 row that decodes fastest (as the speed target).

One matrix-vector product per SmolLM2 shape (the tied 49,152 x 576 head and each layer's
matrices), float32 BLAS beside each kernel on each of its code paths that this CPU runs (avx512,
avx2, portable: ``kernel_paths``), medians taken in turns in one run: microseconds and GB/s of
weights read, the roofline numbers of each kernel. The avx2 rows are what a laptop without
AVX-512 gets; the decoding rows above run the path "auto" picks (recorded as ``decoding_path``).

Reference point for int8 quality (``--only reference``, and in the full run where llama.cpp is
installed; the key ``llama_cpp_reference``): what llama.cpp's own Q8_0 keeps of its own float32 on
the same file, text and protocol. In a child process (a crash there cannot take the benchmark down),
``llama_cpp.llama_model_quantize`` (``allow_requantize``) rewrites the packaged GGUF into a temporary
folder twice: ``LLAMA_FTYPE_ALL_F32`` (every tensor dequantized to float32: llama.cpp's decoding of
the same file our float32 model is) and ``LLAMA_FTYPE_MOSTLY_Q8_0`` (the Q4_1 tensors dequantized and
re-quantized to Q8_0 blocks of 32, as our int8; the Q8_0 embedding/head copied as it is). Each is
loaded with ``logits_all=True``, ``n_ctx`` = the window, a float32 KV cache (so only the weights
differ from our float32), and fed the very token windows of the perplexity above: the same ids from
the same tokenizer, no BOS added, non-overlapping windows of 256, each from an empty cache
(``reset``, ``eval``, ``scores``). Recorded: perplexity of each llama.cpp model; argmax agreement of
llama.cpp Q8_0 with llama.cpp F32 (its own int8-vs-float32 number), of llama.cpp F32 with our
float32 (the sanity check: the same weights in two implementations), of llama.cpp Q8_0 with our
float32, our int8 and our int8 x8. llama.cpp's Q8_0 products also round x to Q8_0 blocks, so its
counterpart here is our "int8 x8" row, not the weight-only "int8". Why flips happen: the top-1
minus top-2 logit margin (nats) of each float32 model at every position, the share of positions
below a few thresholds (``MARGINS``), and the share of each int8's disagreements whose float32
margin is below them (near-ties, which a small rounding error in a logit can flip). That explains
the agreement; it is not a new target.
``--only reference`` measures no timing and rewrites only that key of the json.

It prints, asserts nothing, and writes benchmarks/results/quantized.json (with the machine and
its load average before and after) for chapter 19. Run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import copy
import importlib.metadata
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from _results import RESULTS, describe, machine, write_results  # noqa: E402

from transformer_lib.data import load_corpus, load_gpt_checkpoint, split_paragraphs  # noqa: E402
from transformer_lib.pretrained import load_smollm2, smollm2_gguf_path  # noqa: E402
from transformer_lib.quantization import (TENSOR_GROUPS, gguf_widths, kernel_available, kernel_paths,  # noqa: E402
                                          load_smollm2_quantized, matvec, quantize, quantize_blocks, simd_available,
                                          weight_bytes)
from transformer_lib.quantization.modules import QuantizedLinear  # noqa: E402
from transformer_lib.training import causal_lm_loss  # noqa: E402
from transformer_lib.sampling import generate_ids  # noqa: E402
from transformer_lib.training import evaluate_lm  # noqa: E402

from generate import TEXT, timed  # noqa: E402  (the same prompt and timer as the float32 benchmark)


CALIBRATION_TOKENS = 4096  # GPTQ's calibration text: 16 windows of 256 (the GPT: 64 windows of 64)
CALIBRATION_SIZES = (1024, 4096, 16384)


def held_out_ids(encode, tokens: int) -> torch.Tensor:
    _, val = split_paragraphs(load_corpus())
    return torch.tensor(encode(val)[:tokens], dtype=torch.long)


def calibration_ids(encode, tokens: int, context: int) -> torch.Tensor:
    """GPTQ's calibration: the first ``tokens`` of the book's training prose (never the held-out
    text the quality is read on), as (tokens / context, context) windows."""
    train, _ = split_paragraphs(load_corpus())
    return torch.tensor(encode(train)[:tokens], dtype=torch.long).view(-1, context)


@torch.no_grad()
def perplexity(model, ids: torch.Tensor, context: int) -> float:
    return math.exp(evaluate_lm(model, ids, context, batch_size=1))


def read_window(logits: torch.Tensor, w: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
    """One window's reading: its mean next-token loss, the choice (argmax) at every position, and
    how near a tie that choice was (top-1 minus top-2 logit, nats). ``logits`` (1, context, V), ``w``
    (1, context); our models and llama.cpp's (in its child process) are read by this one function."""
    top2 = logits.double().topk(2, dim=-1).values.reshape(-1, 2)  # (context, 2)
    return causal_lm_loss(logits, w).item(), logits.argmax(-1).reshape(-1), top2[:, 0] - top2[:, 1]


@torch.no_grad()
def quality(model, ids: torch.Tensor, context: int) -> tuple[float, torch.Tensor, torch.Tensor]:
    """Perplexity over non-overlapping windows of ``context`` tokens (as ``evaluate_lm``), and the
    model's next-token choice (argmax) at every position, reading the true text (teacher forced),
    with each choice's margin (``read_window``)."""
    n = len(ids) // context
    windows = ids[: n * context].view(n, context)  # (n, context)
    losses, choices, margins = zip(*(read_window(model(w), w) for w in windows.split(1)))  # model(w): (1, context, V)
    return math.exp(sum(losses) / n), torch.cat(choices), torch.cat(margins)


def agreement(choices: torch.Tensor, reference: torch.Tensor) -> float:
    """Share of positions where two models chose the same next token (4 decimals)."""
    return round(float((choices == reference).float().mean()), 4)


def versus(reading: tuple, reference: tuple) -> dict:
    """A model's ``quality`` reading beside the float32 one's: its perplexity, the change, and its
    teacher-forced agreement (the columns of every quality table here)."""
    return {"perplexity": round(reading[0], 4), "perplexity_change_pct": round(100 * (reading[0] / reference[0] - 1), 3),
            "teacher_forced_agreement": agreement(reading[1], reference[1])}


def requantization_unchanged(dense, requantized) -> float:
    """Share of SmolLM2's 4-bit body weights that re-quantizing their float32 decoding leaves exactly
    as they were: the file's grid is reproduced, so those layers measure nothing about rounding."""
    same = total = 0
    for name, m in requantized.named_modules():
        if isinstance(m, QuantizedLinear) and m.fmt == "q4_1" and "blocks." in name:
            w = dense.get_submodule(name).weight
            same += int((m.dequantized_weight() == w).sum())
            total += w.numel()
    return same / max(total, 1)


def llama_cpp_generator(path: Path, threads: int):
    """A function prompt ids -> 64 greedy ids from llama.cpp, or None when it is not installed."""
    if importlib.util.find_spec("llama_cpp") is None:
        return None, None
    # a build of llama.cpp can crash in its first decode (a native 0.3.36 build did on an AMX CPU
    # in a VM: a segmentation fault), which no try/except catches: probe it in a child process first
    probe = ("import llama_cpp; llm = llama_cpp.Llama(model_path=%r, n_threads=%d, n_ctx=64, verbose=False); "
             "llm.eval([1, 2, 3])" % (str(path), threads))
    child = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=300)
    version = importlib.metadata.version("llama-cpp-python")
    if child.returncode != 0:
        print(f"# llama.cpp {version}: its first decode failed here (exit {child.returncode}); row skipped")
        return None, f"{version} (its first decode crashed here, exit {child.returncode}: row skipped)"
    import llama_cpp
    llm = llama_cpp.Llama(model_path=str(path), n_threads=threads, n_threads_batch=threads, n_ctx=512,
                          n_batch=512, verbose=False, seed=0)

    def run(prompt: list[int], new_tokens: int) -> list[int]:
        llm.reset()
        out = []
        for token in llm.generate(prompt, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
            out.append(int(token))
            if len(out) == new_tokens:
                break
        return out

    return run, llama_cpp.__version__

MARGINS = (0.01, 0.05, 0.1, 0.5)  # nats: top-1 minus top-2 logit, thresholds of a "near-tie"


def _llama_cpp_child(job_path: str) -> None:
    """Runs in a child process (``--llama-cpp-child JOB``): requantize the GGUF to F32 and Q8_0 with
    llama.cpp, feed each the job's windows, write per position the argmax and top-2 margin, and per
    window the mean next-token loss, to the job's ``out`` file."""
    import ctypes

    import gguf
    import llama_cpp
    job = json.loads(Path(job_path).read_text())
    ctx, out = job["context"], {}
    windows = [job["ids"][i:i + ctx] for i in range(0, len(job["ids"]) - ctx + 1, ctx)]
    with tempfile.TemporaryDirectory(prefix="q8ref-") as tmp:
        for name, ftype in (("F32", llama_cpp.LLAMA_FTYPE_ALL_F32), ("Q8_0", llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0)):
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype, params.allow_requantize, params.nthread = ftype, True, job["threads"]
            target = os.path.join(tmp, f"{name}.gguf")
            rc = llama_cpp.llama_model_quantize(job["gguf"].encode(), target.encode(), ctypes.byref(params))
            if rc != 0:
                raise RuntimeError(f"llama_model_quantize to {name} returned {rc}")
            types: dict[str, int] = {}
            for t in gguf.GGUFReader(target).tensors:
                types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
            llm = llama_cpp.Llama(model_path=target, logits_all=True, n_ctx=ctx, n_batch=ctx, n_ubatch=ctx,
                                  n_threads=job["threads"], n_threads_batch=job["threads"], verbose=False,
                                  type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
            argmax, margin, losses = [], [], []
            for w in windows:
                llm.reset()
                llm.eval(w)
                logits = torch.from_numpy(llm.scores[:ctx]).double()[None]  # (1, ctx, V)
                loss, choice, near = read_window(logits, torch.tensor([w]))
                argmax += choice.tolist()
                margin += near.tolist()
                losses.append(loss)
            out[name] = {"argmax": argmax, "margin": margin, "window_loss": losses, "tensor_types": types}
            del llm
            os.remove(target)
    Path(job["out"]).write_text(json.dumps(out))


def llama_cpp_reference(path: Path, ours: dict, ids: torch.Tensor, context: int, threads: int) -> dict | None:
    """llama.cpp's own Q8_0 against its own F32 on the same windows (module docstring), beside ours
    (``ours``: ``quality`` of "float32", "int8" and "int8 x8" on ``ids``); None when llama.cpp is not
    installed or its child process fails (then said on stdout)."""
    if importlib.util.find_spec("llama_cpp") is None:
        print("# llama.cpp reference: llama-cpp-python is not installed (skipped)")
        return None
    version = importlib.metadata.version("llama-cpp-python")
    with tempfile.TemporaryDirectory(prefix="q8ref-job-") as tmp:
        job, out = Path(tmp) / "job.json", Path(tmp) / "out.json"
        job.write_text(json.dumps({"gguf": str(path), "ids": ids.tolist(), "context": context,
                                   "threads": threads, "out": str(out)}))
        child = subprocess.run([sys.executable, __file__, "--llama-cpp-child", str(job)], capture_output=True,
                               timeout=3600)
        if child.returncode != 0 or not out.exists():
            print(f"# llama.cpp reference: its child process failed (exit {child.returncode}); skipped\n"
                  + child.stderr.decode(errors="replace")[-2000:])
            return None
        got = json.loads(out.read_text())
    llama = {name: (math.exp(statistics.fmean(r["window_loss"])), torch.tensor(r["argmax"]),
                    torch.tensor(r["margin"], dtype=torch.float64)) for name, r in got.items()}

    def near_ties(margin: torch.Tensor) -> dict:
        return {str(t): round(float((margin < t).float().mean()), 4) if len(margin) else None for t in MARGINS}

    def flips(model_choice, ref_choice, ref_margin) -> dict:
        flipped = model_choice != ref_choice
        return {"count": int(flipped.sum()), "share_with_margin_below": near_ties(ref_margin[flipped]),
                "median_margin": round(float(ref_margin[flipped].median()), 4) if flipped.any() else None}

    f32, q8 = llama["F32"], llama["Q8_0"]
    return {
        "llama_cpp": version, "tokens": len(ids), "context": context, "threads": threads, "bos": False,
        "kv_cache": "f32", "float32_from": "llama_model_quantize, LLAMA_FTYPE_ALL_F32",
        "q8_0_from": "llama_model_quantize, LLAMA_FTYPE_MOSTLY_Q8_0, allow_requantize",
        "tensor_types": {name: r["tensor_types"] for name, r in got.items()},
        "perplexity": {"llama.cpp F32": round(f32[0], 4), "llama.cpp Q8_0": round(q8[0], 4),
                       **{f"ours {name}": round(r[0], 4) for name, r in ours.items()}},
        "agreement": {"llama.cpp Q8_0 vs llama.cpp F32": agreement(q8[1], f32[1]),
                      "llama.cpp F32 vs ours float32": agreement(f32[1], ours["float32"][1]),
                      "llama.cpp Q8_0 vs ours float32": agreement(q8[1], ours["float32"][1]),
                      "ours int8 vs ours float32": agreement(ours["int8"][1], ours["float32"][1]),
                      "ours int8 x8 vs ours float32": agreement(ours["int8 x8"][1], ours["float32"][1]),
                      **({"ours int8 GPTQ vs ours float32": agreement(ours["int8 GPTQ"][1], ours["float32"][1])}
                         if "int8 GPTQ" in ours else {}),
                      "ours int8 vs llama.cpp Q8_0": agreement(ours["int8"][1], q8[1]),
                      "ours int8 x8 vs llama.cpp Q8_0": agreement(ours["int8 x8"][1], q8[1])},
        "margin_thresholds_nats": list(MARGINS),
        "float32_share_with_margin_below": {"ours": near_ties(ours["float32"][2]), "llama.cpp F32": near_ties(f32[2])},
        "float32_median_margin": {"ours": round(float(ours["float32"][2].median()), 4),
                                  "llama.cpp F32": round(float(f32[2].median()), 4)},
        "flips": {"ours int8 vs ours float32": flips(ours["int8"][1], ours["float32"][1], ours["float32"][2]),
                  "ours int8 x8 vs ours float32": flips(ours["int8 x8"][1], ours["float32"][1], ours["float32"][2]),
                  **({"ours int8 GPTQ vs ours float32": flips(ours["int8 GPTQ"][1], ours["float32"][1],
                                                              ours["float32"][2])} if "int8 GPTQ" in ours else {}),
                  "llama.cpp Q8_0 vs llama.cpp F32": flips(q8[1], f32[1], f32[2])},
        "date": time.strftime("%Y-%m-%d"), "load_1min": round(os.getloadavg()[0], 2)}


def print_reference(ref: dict) -> None:
    print(f"# llama.cpp {ref['llama_cpp']} reference: {ref['tokens']} held-out tokens, windows of {ref['context']}, "
          f"no BOS, f32 KV cache")
    for k, v in ref["perplexity"].items():
        print(f"perplexity {k:<34}{v:>9.3f}")
    for k, v in ref["agreement"].items():
        print(f"agreement  {k:<34}{v:>9.4f}")
    print("share of positions whose float32 top-1 minus top-2 margin is below t nats:",
          ref["float32_share_with_margin_below"])
    for k, v in ref["flips"].items():
        print(f"flips {k}: {v['count']}, share at margin below t: {v['share_with_margin_below']}, "
              f"median margin {v['median_margin']}")


def reference_only(threads: int) -> None:
    """``--only reference``: measure the llama.cpp reference and rewrite that one key of the json,
    leaving every other key (the timings) as it is."""
    dense = load_smollm2("cpu")
    ids = held_out_ids(lambda s: dense.tokenizer.encode(s).ids, 2048)
    models = {"float32": dense.model, "int8": quantize(copy.deepcopy(dense.model), 8),
              "int8 x8": quantize(copy.deepcopy(dense.model), 8, activations="int8")}  # as in the full run
    ours = {name: quality(m, ids, 256) for name, m in models.items()}
    ref = llama_cpp_reference(smollm2_gguf_path(), ours, ids, 256, threads)
    if ref is None:
        print("# benchmarks/results/quantized.json left as it is")
        return
    print_reference(ref)
    path = RESULTS / "quantized.json"
    results = json.loads(path.read_text())
    results["llama_cpp_reference"] = ref
    path.write_text(json.dumps(results, indent=1) + "\n")
    print(f"# wrote llama_cpp_reference in {path.relative_to(RESULTS.parent.parent)}")


def matvec_table(repeat: int) -> dict:
    """Batch-1 products for SmolLM2's shapes: float32 (x @ W^T), then each kernel on every code path
    this CPU runs ("q4_1 avx2", "q4_1 x8 portable", ...), medians taken in turns."""
    g = torch.Generator().manual_seed(0)
    table = {}
    for N, K in [(49152, 576), (1536, 576), (576, 1536), (576, 576), (192, 576)]:
        w = torch.randn(N, K, generator=g) * 0.05
        x = torch.randn(1, K, generator=g)
        runs = {"float32": (lambda: x @ w.T, N * K * 4)}
        for fmt, bits in (("q8_0", 8), ("q4_1", 4)):
            blocks = quantize_blocks(w, bits)
            for activations, tag in (("float32", ""), ("int8", " x8")):
                for path in kernel_paths(activations):
                    runs[f"{fmt}{tag} {path}"] = (
                        lambda b=blocks, f=fmt, a=activations, p=path: matvec(x, b, f, activations=a, path=p),
                        blocks.numel())
        times = {k: [] for k in runs}
        for f, _ in runs.values():
            f()  # warm-up
        for _ in range(repeat):
            for k, (f, _) in runs.items():
                t = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t)
        table[f"{N}x{K}"] = {k: {"us": round(1e6 * statistics.median(times[k]), 1),
                                 "GB_per_s": round(runs[k][1] / statistics.median(times[k]) / 1e9, 2)} for k in runs}
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="16 new tokens, one round, 512 tokens of text")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--skip-transformers", action="store_true",
                    help="leave out the transformers row (a provisional run on a busy machine)")
    ap.add_argument("--only", choices=["reference"],
                    help="reference: only llama.cpp's Q8_0 vs its F32 (rewrites that key of the json, no timing)")
    ap.add_argument("--llama-cpp-child", metavar="JOB", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.llama_cpp_child:
        return _llama_cpp_child(args.llama_cpp_child)
    torch.set_num_threads(args.threads)
    if args.only == "reference":
        return reference_only(args.threads)
    load_before = round(os.getloadavg()[0], 2)
    new_tokens, prompt_len, context = (16 if args.quick else 64), 64, 256
    rounds, text_tokens = (1, 512) if args.quick else (args.rounds, 2048)
    ok, why = kernel_available()
    # the code path "auto" takes, the one every decoding row below runs (the fused step included)
    paths = {a: kernel_paths(a) for a in ("float32", "int8")}
    decoding_path = {a: (p[0] if p else "reference (no kernel)") for a, p in paths.items()}
    print(f"# kernel: {'built' if ok else 'NOT built (' + why + ')'}; paths on this CPU: float x {paths['float32']}, "
          f"int8 x {paths['int8']}; the decoding rows use {decoding_path['float32']} "
          f"(x8 rows: {decoding_path['int8']})")

    dense = load_smollm2("cpu")
    encode = lambda s: dense.tokenizer.encode(s).ids  # noqa: E731
    prompt = encode(TEXT * 4)[:prompt_len]
    file_mixture = gguf_widths()  # the packaged file's own widths per tensor group: the default mixture
    calib = calibration_ids(encode, CALIBRATION_TOKENS, context)
    started = time.perf_counter()
    int8_gptq = quantize(copy.deepcopy(dense.model), 8, calibration=calib)
    gptq_seconds = time.perf_counter() - started
    models = {"float32": dense.model, "int8": quantize(copy.deepcopy(dense.model), 8), "int8 GPTQ": int8_gptq,
              "int4": quantize(copy.deepcopy(dense.model), 4),  # the default mixture: embedding/head at 8 bits
              "int4 uniform": quantize(copy.deepcopy(dense.model), 4, widths={}),  # the head at 4 bits too
              "int4 (file)": load_smollm2_quantized("cpu").model,
              "int8 x8": quantize(copy.deepcopy(dense.model), 8, activations="int8"),
              "int4 (file) x8": load_smollm2_quantized("cpu", activations="int8").model}
    models["int4 (file) modules"] = unfused = load_smollm2_quantized("cpu").model
    unfused.decode_step.enabled = False  # the modules' step: what one C++ call per token saves
    x8 = ("int4 (file) modules",)  # perplexity: the same prefill as "int4 (file)"
    unchanged = requantization_unchanged(dense.model, models["int4"])

    path = smollm2_gguf_path()
    tf_version = None
    if not args.skip_transformers:
        from transformers import AutoModelForCausalLM, __version__ as tf_version
        ref = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    ref_ids = torch.tensor([prompt])
    llama, llama_version = llama_cpp_generator(path, args.threads)

    def ours(model):
        return lambda: generate_ids(model, prompt, new_tokens, temperature=0.0, eos_id=None)

    def reference():
        with torch.no_grad():
            out = ref.generate(ref_ids, attention_mask=torch.ones_like(ref_ids), max_new_tokens=new_tokens,
                               min_new_tokens=new_tokens, do_sample=False, pad_token_id=dense.eos_id)
        return out[0, len(prompt):].tolist()

    runs = {name: ours(m) for name, m in models.items()}
    if not args.skip_transformers:
        runs["transformers"] = reference
    if llama is not None:
        runs["llama.cpp"] = lambda: llama(prompt, new_tokens)
    tokens = {name: run() for name, run in runs.items()}  # warm-up, and the greedy tokens
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(timed(run))
    tok_s = {name: new_tokens / statistics.median(t) for name, t in times.items()}

    # the roofline's two numbers: bandwidth of one float32 matrix-vector product (the tied head,
    # 49,152 x 576 = 113 MB, far larger than the caches) and the kernel on the same matrix; prefill's rate
    from transformer_lib.profiling import median_time
    head = dense.model.embed.weight  # (V, D) float32
    x1 = torch.randn(1, head.shape[1])
    t_head = median_time(lambda: x1 @ head.T, repeat=7)
    gemv = {"float32": {"ms": 1e3 * t_head, "MB": head.numel() * 4 / 1e6}}
    for name in ("int8", "int4 (file)", "int8 x8", "int4 (file) x8"):
        layer = models[name].embed.head
        t = median_time(lambda: layer(x1), repeat=7)
        gemv[name] = {"ms": 1e3 * t, "MB": layer.blocks.numel() / 1e6}
    for g in gemv.values():
        g["GB_per_s"] = g["MB"] / 1e3 / (g["ms"] / 1e3)
    shapes = matvec_table(repeat=3 if args.quick else 15)
    # prefill: one forward pass over a prompt of L tokens (no cache), per L, generators in turns
    prompt_lengths = (16, 64, 256) if args.quick else (16, 32, 64, 128, 256, 512)
    long_ids = encode(TEXT * 40)
    prefill_rows = ("float32", "int8", "int4 (file)", "int8 x8", "int4 (file) x8")
    prefill_times = {name: {L: [] for L in prompt_lengths} for name in prefill_rows}
    with torch.no_grad():
        for name in prefill_times:
            models[name](torch.tensor([long_ids[:16]]))  # warm-up
        for _ in range(1 if args.quick else 3):
            for L in prompt_lengths:
                p = torch.tensor([long_ids[:L]])
                for name in prefill_times:
                    prefill_times[name][L].append(timed(lambda: models[name](p)))
    prefill_by_length = {name: {str(L): round(L / statistics.median(ts), 1) for L, ts in per.items()}
                         for name, per in prefill_times.items()}
    prefill = {name: prefill_by_length[name]["256"] for name in ("float32", "int4 (file)", "int4 (file) x8")}

    ids = held_out_ids(encode, text_tokens)
    read = {name: quality(m, ids, context) for name, m in models.items() if name not in x8}
    ppl = {name: r[0] for name, r in read.items()}
    choice = {name: r[1] for name, r in read.items()}
    forced = {name: float((c == choice["float32"]).float().mean()) for name, c in choice.items()}
    gpt, gpt_tok, _ = load_gpt_checkpoint()
    gpt_ids = torch.tensor(gpt_tok.encode(split_paragraphs(load_corpus())[1]), dtype=torch.long)
    gpt_ctx = min(128, gpt.pos.max_len if hasattr(gpt, "pos") and hasattr(gpt.pos, "max_len") else 128)
    gpt_calib = calibration_ids(gpt_tok.encode, CALIBRATION_TOKENS, gpt_ctx)
    gpt_models = {"float32": lambda g: g, "int8": lambda g: quantize(g, 8), "int4": lambda g: quantize(g, 4),
                  "int4 uniform": lambda g: quantize(g, 4, widths={}),
                  "int8 GPTQ": lambda g: quantize(g, 8, calibration=gpt_calib),
                  "int4 GPTQ": lambda g: quantize(g, 4, calibration=gpt_calib)}
    gpt_q = {name: quality(make(load_gpt_checkpoint()[0]), gpt_ids, gpt_ctx) for name, make in gpt_models.items()}

    # GPTQ's calibration size: the int8 GPTQ row with less and more training text
    by_size = {}
    for n in CALIBRATION_SIZES:
        by_size[str(n)] = versus(read["int8 GPTQ"] if n == CALIBRATION_TOKENS else quality(
            quantize(copy.deepcopy(dense.model), 8, calibration=calibration_ids(encode, n, context)), ids, context),
            read["float32"])
    gptq_calibration = {"text": "the book's training prose (the held-out text is its validation prose)",
                        "tokens": CALIBRATION_TOKENS, "windows_of": context, "seconds": round(gptq_seconds, 1),
                        "int8_by_tokens": by_size}

    # sensitivity: every tensor group at 8 bits except one at 4, per group, on both models
    def sensitivity(load, ids_, ctx, reference):
        out = {}
        for group in TENSOR_GROUPS:
            model = load()
            names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
            present = {"embedding"} | {tensor_group(n) for n in names}  # groups that hold a layer
            if group not in present:
                continue
            out[group] = versus(quality(quantize(model, 8, widths={group: 4}), ids_, ctx), reference)
            del model
        return out

    from transformer_lib.quantization import tensor_group
    sens = {"SmolLM2": sensitivity(lambda: copy.deepcopy(dense.model), ids, context, read["float32"]),
            "book GPT": sensitivity(lambda: load_gpt_checkpoint()[0], gpt_ids, gpt_ctx, gpt_q["float32"])}

    base = tok_s["float32"]
    rows = []
    for name in runs:
        agree = sum(a == b for a, b in zip(tokens[name], tokens["float32"])) / new_tokens
        row = {"generator": name, "tokens_per_s": round(tok_s[name], 2), "vs_float32": round(tok_s[name] / base, 2),
               "greedy_agreement": round(agree, 3)}
        if name in ppl:
            row["weight_MB"] = round(weight_bytes(models[name]) / 1e6, 1)
            row.update(versus(read[name], read["float32"]))
        rows.append(row)
    gpt_rows = [{"weights": k, **versus(r, gpt_q["float32"])} for k, r in gpt_q.items()]

    print(f"# SmolLM2-135M, batch 1, greedy, {new_tokens} new tokens after {prompt_len}; {args.threads} threads; "
          f"transformers {tf_version or 'skipped'}; llama.cpp {llama_version or 'not installed (row skipped)'}")
    print(f"# {describe(machine())}")
    print(f"{'generator':<22}{'tokens/s':>10}{'x fp32':>8}{'greedy':>8}{'MB':>8}{'ppl':>9}{'dppl %':>8}{'forced':>8}")
    for r in rows:
        extra = (f"{r['weight_MB']:>8.1f}{r['perplexity']:>9.3f}{r['perplexity_change_pct']:>+8.2f}"
                 f"{r['teacher_forced_agreement']:>8.3f}" if "perplexity" in r else "")
        print(f"{r['generator']:<22}{r['tokens_per_s']:>10.1f}{r['vs_float32']:>8.2f}{r['greedy_agreement']:>8.2f}{extra}")
    print(f"# perplexity and teacher-forced agreement on {len(ids)} held-out tokens (book validation prose), "
          f"windows of {context}; greedy: share of {new_tokens} greedy tokens equal to float32's")
    print(f"# re-quantizing the file's decoded 4-bit body weights leaves {100 * unchanged:.1f}% of them unchanged")
    print(f"# the book's float32 GPT (chapter 16), {len(gpt_ids)} held-out tokens, windows of {gpt_ctx}:")
    for r in gpt_rows:
        print(f"{r['weights']:<22}{'':>34}{r['perplexity']:>9.3f}{r['perplexity_change_pct']:>+8.2f}"
              f"{r['teacher_forced_agreement']:>8.3f}")
    print(f"# int8 GPTQ by calibration tokens (quantize took {gptq_seconds:.0f} s with {CALIBRATION_TOKENS}): "
          + ", ".join(f"{n}: {v['perplexity_change_pct']:+.2f}% {v['teacher_forced_agreement']:.3f}"
                      for n, v in by_size.items()))
    print("# sensitivity: everything int8 except one tensor group at 4 bits (perplexity change %, forced agreement)")
    for model_name, per in sens.items():
        print(f"{model_name:<10}" + "".join(f"{g:>12}{v['perplexity_change_pct']:>+7.2f}{v['teacher_forced_agreement']:>7.3f}"
                                           for g, v in per.items()))
    print("# one matrix-vector product with the 49,152 x 576 head (batch 1):")
    for name, g in gemv.items():
        print(f"{name:<14}{g['ms']:>8.2f} ms {g['MB']:>7.1f} MB {g['GB_per_s']:>6.1f} GB/s")
    print(f"# one matrix-vector product per SmolLM2 shape, batch 1, {args.threads} threads, medians in turns, per "
          "code path (us; GB/s of weights read):")
    print(f"{'kernel path':<20}" + "".join(f"{shape:>22}" for shape in shapes))
    for kind in next(iter(shapes.values())):
        print(f"{kind:<20}" + "".join(f"{row[kind]['us']:>11.1f}{row[kind]['GB_per_s']:>7.1f}GB/s"
                                      for row in shapes.values()))
    print("# prefill (one forward pass over the prompt), tokens/s by prompt length:")
    print(f"{'':<14}" + "".join(f"{L:>8}" for L in prompt_lengths))
    for name, per in prefill_by_length.items():
        print(f"{name:<14}" + "".join(f"{per[str(L)]:>8.0f}" for L in prompt_lengths))
    best8 = max(("int8", "int8 x8"), key=tok_s.get)
    best4 = max(("int4 (file)", "int4 (file) x8"), key=tok_s.get)
    targets = {"int8_speedup": tok_s[best8] / base, "int4_speedup": tok_s[best4] / base,
               "int4_fused_over_modules": tok_s["int4 (file)"] / tok_s["int4 (file) modules"],
               "int8_weight_only_speedup": tok_s["int8"] / base, "int4_weight_only_speedup": tok_s["int4 (file)"] / base,
               "int8_perplexity_change_pct": 100 * (ppl["int8 GPTQ"] / ppl["float32"] - 1),
               "int8_nearest_perplexity_change_pct": 100 * (ppl["int8"] / ppl["float32"] - 1),
               "int4_perplexity_change_pct": 100 * (ppl["int4"] / ppl["float32"] - 1),
               "int8_teacher_forced_agreement": forced["int8 GPTQ"], "int4_teacher_forced_agreement": forced["int4"],
               "int8_nearest_teacher_forced_agreement": forced["int8"],
               "int8_x8_perplexity_change_pct": 100 * (ppl["int8 x8"] / ppl["float32"] - 1),
               "int8_x8_teacher_forced_agreement": forced["int8 x8"],
               "int4_over_float32_prefill_min": min(prefill_by_length[best4][str(L)] /
                                                    prefill_by_length["float32"][str(L)] for L in prompt_lengths),
               "int4_weight_only_over_float32_prefill_min": min(
                   prefill_by_length["int4 (file)"][str(L)] / prefill_by_length["float32"][str(L)]
                   for L in prompt_lengths)}
    if "llama.cpp" in tok_s:
        targets["llama_cpp_over_int4"] = tok_s["llama.cpp"] / tok_s[best4]
    print("targets: int8 >= 2x: {:.2f}x ({}); int4 >= 3x: {:.2f}x ({}); llama.cpp / int4 <= 1.2: {}".format(
        targets["int8_speedup"], best8, targets["int4_speedup"], best4,
        f"{targets['llama_cpp_over_int4']:.2f}" if "llama_cpp_over_int4" in targets else "n/a"))
    print("targets (int8: GPTQ): perplexity change int8 {:+.2f}% (<= +0.5), int4 {:+.2f}% (<= +1.5); teacher-forced agreement "
          "int8 {:.3f} (>= 0.98), int4 {:.3f} (>= 0.95); int4 / float32 prefill, worst length {:.2f} ({}; >= 1)".format(
              targets["int8_perplexity_change_pct"], targets["int4_perplexity_change_pct"],
              targets["int8_teacher_forced_agreement"], targets["int4_teacher_forced_agreement"],
              targets["int4_over_float32_prefill_min"], best4))
    ref = None if args.quick else llama_cpp_reference(path, read, ids, context, args.threads)
    if ref is not None:
        print_reference(ref)
    if not args.no_write:
        write_results("quantized", {
            "setting": {"model": "SmolLM2-135M-Instruct (packaged Q4_1 GGUF)", "batch": 1, "device": "cpu",
                        "decoding": "greedy", "prompt_tokens": prompt_len, "new_tokens": new_tokens,
                        "threads": args.threads, "rounds": rounds, "transformers": tf_version,
                        "llama_cpp": llama_version, "kernel_built": ok, "avx512_path": simd_available(),
                        "kernel_paths": {a: list(p) for a, p in paths.items()},
                        "decoding_path": {"float32 x": decoding_path["float32"], "int8 x": decoding_path["int8"]},
                        "perplexity_tokens": len(ids), "perplexity_context": context,
                        "calibration_tokens": CALIBRATION_TOKENS,
                        "gpt_perplexity_tokens": len(gpt_ids), "gpt_perplexity_context": gpt_ctx},
            "rows": rows, "book_gpt_rows": gpt_rows,
            "head_gemv": {k: {kk: round(vv, 3) for kk, vv in v.items()} for k, v in gemv.items()},
            "matvec_us": shapes, "load_1min_after": round(os.getloadavg()[0], 2),
            "prefill_tokens": 256, "prefill_tokens_per_s": {k: round(v, 1) for k, v in prefill.items()},
            "prefill_by_length": prefill_by_length, "file_mixture": file_mixture,
            "requantization_unchanged": round(unchanged, 4), "sensitivity": sens,
            "gptq_calibration": gptq_calibration,
            "load_1min_before": load_before, "targets": {k: round(v, 4) for k, v in targets.items()},
            **({"llama_cpp_reference": ref} if ref is not None else {})})


if __name__ == "__main__":
    main()
