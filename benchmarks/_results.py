"""One place for what every benchmark writes: ``benchmarks/results/<name>.json`` with the
machine it ran on, so a chapter can print measured numbers (never numbers from memory).

    from _results import write_results          # inside a script in benchmarks/
    write_results("sparse", {"rows": [...]})

A chapter reads the file with ``json.loads(Path("../benchmarks/results/sparse.json").read_text())``
and prints ``result["machine"]`` next to the numbers.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    """The facts a reader needs to compare a number with their own (``profiling.machine_info``,
    the library's one description of a machine), under the short keys the chapters print."""
    from transformer_lib.profiling import machine_info

    info = machine_info()
    out = {"cpu": info["cpu"], "cores": info["cpu_count"], "torch_threads": info["torch_threads"],
           "torch": info["torch"], "python": info["python"], "date": time.strftime("%Y-%m-%d")}
    if info["load_average_1min"] is not None:
        out["load_1min"] = info["load_average_1min"]
    if info["gpu"]:
        out["gpu"] = info["gpu"]
    return out


def describe(info: dict) -> str:
    """One line for a table's caption: 'Intel Xeon ..., 2 cores, torch 2.13.0, load 0.4, 2026-11-30'."""
    gpu = f", {info['gpu']}" if info.get("gpu") else ""
    load = f", load {info['load_1min']}" if "load_1min" in info else ""
    return f"{info['cpu']}, {info['cores']} cores{gpu}, torch {info['torch']}{load}, {info['date']}"


def seed_sweep(doc: str, argv=None, seeds: int = 5):
    """What every seed sweep starts with: ``--seeds N`` from the command line (``doc`` is its
    help), one intra-op thread (as the chapters run) and a clock. Returns ``(args, elapsed)``;
    ``elapsed()`` is ``{"seconds": wall, "cpu_seconds": process CPU}`` since the call."""
    import argparse

    import torch

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=seeds)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start, start_cpu = time.perf_counter(), time.process_time()
    return args, lambda: {"seconds": round(time.perf_counter() - start, 1),
                          "cpu_seconds": round(time.process_time() - start_cpu, 1)}


def write_results(name: str, payload: dict) -> Path:
    """Write ``payload`` plus the machine description to ``benchmarks/results/<name>.json``."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=1) + "\n")
    print(f"# wrote {path.relative_to(RESULTS.parent.parent)}")
    return path


def runs_in_workers(name: str, run, jobs: list, settings: dict, elapsed, workers: int = 2) -> list:
    """``run(job)`` for every job in ``workers`` processes (each run returns a dict with its own
    ``train_cpu_seconds``), the results file ``<name>.json`` rewritten after every finished run, so
    a cut sweep keeps what it finished. ``settings`` is stored as given; ``elapsed`` is
    :func:`seed_sweep`'s clock (wall seconds: the work is in the workers)."""
    from multiprocessing import Pool

    runs = []
    with Pool(workers) as pool:
        for row in pool.imap(run, jobs):
            runs.append(row)
            write_results(name, {"settings": settings, "runs": runs, "seconds": elapsed()["seconds"],
                                 "train_cpu_seconds_all_runs": round(sum(r["train_cpu_seconds"] for r in runs), 1)})
    return runs
