"""Appendix A's threshold-tuned forest over ten seeds, beside the plain forest, at 4% positives.

The appendix's table (one draw) puts the forest with its decision threshold tuned for F1
(``TunedThresholdClassifierCV``, 5-fold) at the plain forest's F1. ``benchmarks/seeds.py`` repeats
the other contenders over ten seeds; this script does the same for the tuned forest, with the
same data, forests and folds per seed: seed ``s`` draws the training set
``imbalanced_blobs(1000, 0.04, seed=s)``, the test set ``imbalanced_blobs(20_000, 0.04,
seed=100 + s)``, forests with ``random_state=s`` and ``StratifiedKFold(5, shuffle=True,
random_state=s)``. The plain forest is refitted too, so that its F1 can be compared with
``seeds.json``'s (the pairing check).

    OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/forest_threshold.py   # about 30-45 s of CPU

Prints one line per seed, asserts nothing, writes benchmarks/results/forest_threshold.json.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_results  # noqa: E402

from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.metrics import f1_score, precision_score, recall_score  # noqa: E402
from sklearn.model_selection import StratifiedKFold, TunedThresholdClassifierCV  # noqa: E402

from transformer_lib import forests  # noqa: E402

SHARE, SEEDS = 0.04, list(range(10))


def main() -> int:
    start = time.process_time()
    rows = {"forest": [], "forest, threshold tuned for F1": []}
    extra = {"precision": [], "recall": [], "threshold": []}
    plain_pr = {"precision": [], "recall": []}
    for seed in SEEDS:
        X, y = forests.imbalanced_blobs(1000, SHARE, separation=3.0, seed=seed)
        X_test, y_test = forests.imbalanced_blobs(20_000, SHARE, separation=3.0, seed=100 + seed)
        cv5 = StratifiedKFold(5, shuffle=True, random_state=seed)
        plain = RandomForestClassifier(100, random_state=seed, n_jobs=1).fit(X, y)
        tuned = TunedThresholdClassifierCV(RandomForestClassifier(100, random_state=seed, n_jobs=1),
                                           scoring="f1", cv=cv5).fit(X, y)
        pred, plain_pred = tuned.predict(X_test), plain.predict(X_test)
        rows["forest"].append(float(f1_score(y_test, plain_pred)))
        plain_pr["precision"].append(float(precision_score(y_test, plain_pred)))
        plain_pr["recall"].append(float(recall_score(y_test, plain_pred)))
        rows["forest, threshold tuned for F1"].append(float(f1_score(y_test, pred)))
        extra["precision"].append(float(precision_score(y_test, pred)))
        extra["recall"].append(float(recall_score(y_test, pred)))
        extra["threshold"].append(float(tuned.best_threshold_))
        print(f"seed {seed}: forest {rows['forest'][-1]:.3f}, tuned threshold {tuned.best_threshold_:.2f}:"
              f" {rows['forest, threshold tuned for F1'][-1]:.3f}", flush=True)
    write_results("forest_threshold", {"share": SHARE, "seeds": SEEDS, "f1": rows, "tuned": extra,
                                       "plain": plain_pr,
                                       "cpu_seconds": round(time.process_time() - start, 1)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
