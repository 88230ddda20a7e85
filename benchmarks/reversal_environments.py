"""How far does chapter 12's seed-0 training run move when only the arithmetic's rounding changes?

    nice -n 19 .venv/bin/python benchmarks/reversal_environments.py   # ~1.5 CPU-min

The chapter trains its small encoder-decoder once, with seed 0, and says the run is chaotic: a
different rounding of a few float32 sums early in training gives a different trained model. This
script measures that. It runs exactly the chapter's experiment for seed 0 (``reversal_seeds.run``)
in three numerical environments, each a fresh process with one intra-op thread:

* ``avx2``: ATen's AVX2 kernels and MKL's AVX2 code path (the environment ``make test`` compares
  in, and the one ``reversal_seeds.py`` runs in on an AVX2 machine);
* ``aten-default``: ATen's portable default kernels (the environment ``make chapters`` stores the
  chapter in, there with MKL pinned to AVX2, which gives the same run);
* ``mkl-compatible``: MKL's conditional-numerical-reproducibility mode ``COMPATIBLE``.

Same initial weights, same training data; only the rounding differs. Results, in the same per-run
form as ``reversal_seeds.json`` (whose five seeds give the seed-to-seed spread to compare with):
``benchmarks/results/reversal_environments.json``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _results import write_results  # noqa: E402

ENVIRONMENTS = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "aten-default": {"ATEN_CPU_CAPABILITY": "default"},
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},
}
ONE_RUN = ("import json, sys, torch; sys.path.insert(0, sys.argv[1]); torch.set_num_threads(1); "
           "from reversal_seeds import run; print(json.dumps(run(0)))")


def main() -> None:
    start = time.perf_counter()
    runs, cpu = [], 0.0
    for name, settings in ENVIRONMENTS.items():
        env = {k: v for k, v in os.environ.items()
               if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
        env.update(settings, OMP_NUM_THREADS="1", TLIB_DEVICE="cpu")
        before = os.times()
        out = subprocess.run([sys.executable, "-c", ONE_RUN, str(HERE)], env=env, check=True,
                             capture_output=True, text=True).stdout
        after = os.times()
        cpu += (after.children_user - before.children_user) + (after.children_system - before.children_system)
        run = json.loads(out.strip().splitlines()[-1])
        runs.append({"environment": name, "settings": settings, **run})
        print(name, runs[-1], flush=True)
    write_results("reversal_environments", {"steps": 400, "seed": 0, "runs": runs,
                                            "seconds": round(time.perf_counter() - start, 1),
                                            "cpu_seconds": round(cpu, 1)})


if __name__ == "__main__":
    main()
