"""Appendix A's one-draw statements, repeated over seeds: max_features on the breast-cancer data,
the noise columns, the out-of-bag curve, the noise column's importance, and where the forest's
gap to the logistic regression at 50/50 comes from.

* ``cv``: 5-fold cross-validated accuracy of forests of 50 trees with m = 1, 5, 30 features per
  split, over 5 fold splits (``StratifiedKFold(5, shuffle=True, random_state=s)``, forests
  ``random_state=s``). Split 0 is the appendix's.
* ``noise_columns``: out-of-bag accuracy of 100-tree forests on the 30 real features plus 270
  columns of noise (``default_rng(1 + s)``), forests ``random_state=s``, for the appendix's six
  values of m, over 5 draws. Draw 0 is the appendix's.
* ``oob_curve``: ``forests.oob_error_curve`` of 100-tree forests (``random_state=s``) for m = 1,
  5, 30 at b = 1, 5, 10, 25, 50, 100 trees, over 5 forests. Forest 0 is the appendix's.
* ``noise_importance``: impurity importance of one column of Gaussian noise and one of binary
  noise (``default_rng(2 + s)``: the Gaussian column, then the 0/1 column) beside the 30 real
  features; 70/30 split ``random_state=s``, 100 trees ``random_state=s``; how many real features
  rank below the Gaussian noise. Draw 0 is the appendix's.
* ``boundary``: minority-class F1 of the class-weighted logistic regression (weight chosen by
  5-fold CV, as ``seeds.py``), the default forest (fully grown trees) and the same forest with
  ``min_samples_leaf=10``, at 4% and 50% positives, on ``seeds.py``'s data, forests and folds
  for seeds 0-9, once as drawn (the best boundary a diagonal line) and once rotated by 45
  degrees (the best boundary ``x1 = c``, which one split draws exactly).

    OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/forest_seeds.py   # about 80 s of CPU

Prints progress, asserts nothing, writes benchmarks/results/forest_seeds.json.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_results  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.metrics import f1_score  # noqa: E402
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score, train_test_split  # noqa: E402

from transformer_lib import forests  # noqa: E402

DRAWS, BOUNDARY_SEEDS = list(range(5)), list(range(10))
CV_M, NOISY_M, OOB_M, OOB_AT = (1, 5, 30), (1, 2, 4, 8, 17, 30), (1, 5, 30), (1, 5, 10, 25, 50, 100)
SHARES, LEAF = (0.04, 0.5), 10
WEIGHTS = {"class_weight": [None, {0: 1, 1: 2}, {0: 1, 1: 4}, {0: 1, 1: 8}, "balanced"]}
ROTATE = np.array([[1.0, 1.0], [-1.0, 1.0]]) / math.sqrt(2.0)  # the means' diagonal onto feature 1


def r4(values):
    return [round(float(v), 4) for v in values]


def main() -> int:
    start = time.process_time()
    X, y = load_breast_cancer(return_X_y=True)
    out = {"draws": DRAWS}

    cv = {m: [] for m in CV_M}
    for s in DRAWS:
        folds = StratifiedKFold(5, shuffle=True, random_state=s)
        for m in CV_M:
            forest = RandomForestClassifier(50, max_features=m, random_state=s, n_jobs=1)
            cv[m].append(cross_val_score(forest, X, y, cv=folds).mean())
    out["cv"] = {str(m): r4(v) for m, v in cv.items()}
    print("cv", out["cv"], flush=True)

    noisy = {m: [] for m in NOISY_M}
    for s in DRAWS:
        X_noisy = np.hstack([X, np.random.default_rng(1 + s).standard_normal((len(X), 270))])
        for m in NOISY_M:
            forest = RandomForestClassifier(100, max_features=m, oob_score=True, random_state=s, n_jobs=1)
            noisy[m].append(forest.fit(X_noisy, y).oob_score_)
    out["noise_columns"] = {str(m): r4(v) for m, v in noisy.items()}
    print("noise columns", out["noise_columns"], flush=True)

    curves = {m: [] for m in OOB_M}
    for s in DRAWS:
        for m in OOB_M:
            forest = RandomForestClassifier(100, max_features=m, oob_score=True, random_state=s, n_jobs=1)
            curve = forests.oob_error_curve(forest.fit(X, y), X, y)
            curves[m].append({str(b): round(float(curve[b - 1]), 4) for b in OOB_AT})
    out["oob_curve"] = {str(m): v for m, v in curves.items()}
    print("oob curves done", flush=True)

    imp = {"gaussian_noise": [], "binary_noise": [], "real_below_gaussian_noise": []}
    for s in DRAWS:
        rng = np.random.default_rng(2 + s)
        X_aug = np.hstack([X, rng.standard_normal((len(X), 1)), rng.integers(0, 2, (len(X), 1))])
        X_tr, _, y_tr, _ = train_test_split(X_aug, y, test_size=0.3, stratify=y, random_state=s)
        importance = RandomForestClassifier(100, random_state=s, n_jobs=1).fit(X_tr, y_tr).feature_importances_
        imp["gaussian_noise"].append(importance[30])
        imp["binary_noise"].append(importance[31])
        imp["real_below_gaussian_noise"].append(int((importance[:30] < importance[30]).sum()))
    out["noise_importance"] = {k: (v if k.startswith("real") else r4(v)) for k, v in imp.items()}
    print("importance", out["noise_importance"], flush=True)

    boundary = []
    for share in SHARES:
        for orientation in ("diagonal", "axis-aligned"):
            f1 = {"class-weighted logistic regression": [], "forest": [], f"forest, min_samples_leaf={LEAF}": []}
            for seed in BOUNDARY_SEEDS:
                X_s, y_s = forests.imbalanced_blobs(1000, share, separation=3.0, seed=seed)
                X_t, y_t = forests.imbalanced_blobs(20_000, share, separation=3.0, seed=100 + seed)
                if orientation == "axis-aligned":
                    X_s, X_t = X_s @ ROTATE.T, X_t @ ROTATE.T
                cv5 = StratifiedKFold(5, shuffle=True, random_state=seed)
                models = {
                    "class-weighted logistic regression": GridSearchCV(LogisticRegression(), WEIGHTS, scoring="f1",
                                                                       cv=cv5),
                    "forest": RandomForestClassifier(100, random_state=seed, n_jobs=1),
                    f"forest, min_samples_leaf={LEAF}": RandomForestClassifier(100, min_samples_leaf=LEAF,
                                                                              random_state=seed, n_jobs=1),
                }
                for name, model in models.items():
                    f1[name].append(f1_score(y_t, model.fit(X_s, y_s).predict(X_t)))
            boundary.append({"share": share, "orientation": orientation, "f1": {k: r4(v) for k, v in f1.items()}})
            print("boundary", share, orientation, {k: round(float(np.mean(v)), 3) for k, v in f1.items()}, flush=True)
    out["boundary"] = {"seeds": BOUNDARY_SEEDS, "min_samples_leaf": LEAF, "rows": boundary}
    out["cpu_seconds"] = round(time.process_time() - start, 1)
    write_results("forest_seeds", out)
    print("cpu seconds", out["cpu_seconds"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
