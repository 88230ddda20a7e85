"""Plotting helpers every chapter shares, so every attention map and mask looks the same.

Colormaps are perceptually uniform (viridis for weights, a grey map for masks), every axis is
labelled, and every figure gets a title. Every figure is shown with :func:`show`, which takes a
short description of what the figure shows; that description travels with the image as its alt
text (into the notebook, the web book and the PDF), so a reader who cannot see the picture still
learns what is plotted against what and what the point is.
"""
from __future__ import annotations

import contextlib
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from ._checks.plotting import check_description, check_map_grid, check_mask_map, check_weight_map

__all__ = ["attention_heatmap", "plot_mask", "heatmap_grid", "new_figure", "show", "figure_description"]

_CAPTURING = False  # True while a widget precomputes its static panels (it saves the figures itself)


def show(description: str, fig=None) -> None:
    """Display ``fig`` (default: the current figure) with ``description`` as its alt text.

    Use it instead of ``plt.show()``. The description says what is plotted against what and what
    the reader should see, e.g. ``"Attention weight of each query (rows) on each key (columns):
    each query puts most weight on the key with the same word"``. It is stored in the output's
    metadata (``{"image/png": {"alt": ...}}``), where the book build turns it into the ``alt`` of
    the ``<img>``.
    """
    check_description(description)
    fig = plt.gcf() if fig is None else fig
    fig._tlib_description = " ".join(description.split())
    if _CAPTURING:
        return
    from IPython.core.pylabtools import print_figure
    from IPython.display import Image, display

    display(Image(data=print_figure(fig, "png", bbox_inches="tight"), alt=fig._tlib_description))
    plt.close(fig)


def figure_description(fig) -> str | None:
    """The description given to :func:`show` for ``fig``, or None."""
    return getattr(fig, "_tlib_description", None)


@contextlib.contextmanager
def capturing_figures():
    """While active, :func:`show` and ``plt.show`` only label figures and keep them open (the
    widgets use it to save every figure of each precomputed setting themselves)."""
    global _CAPTURING
    previous, original_show = _CAPTURING, plt.show
    _CAPTURING, plt.show = True, (lambda *a, **k: None)
    try:
        yield
    finally:
        _CAPTURING, plt.show = previous, original_show


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x)


def new_figure(ncols: int = 1, nrows: int = 1, size: float = 3.2, **kwargs):
    """``plt.subplots`` with a size that suits the book's page width."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(size * ncols, size * nrows * 0.95),
                             squeeze=False, **kwargs)
    return fig, axes


def attention_heatmap(weights, x_labels: Sequence[str] | None = None, y_labels: Sequence[str] | None = None,
                      ax=None, title: str | None = None, cmap: str = "viridis", vmax: float | None = 1.0,
                      annotate: bool = False, colorbar: bool = True, xlabel: str = "key",
                      ylabel: str = "query"):
    """Draw a (L_q, L_k) weight matrix: rows are queries, columns keys. Returns the axes."""
    w = _to_numpy(weights)
    check_weight_map(w, x_labels, y_labels)
    if ax is None:
        _, axes = new_figure()
        ax = axes[0, 0]
    im = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
    if x_labels is not None:
        ax.set_xticks(range(len(x_labels)), labels=list(x_labels), rotation=90)
    if y_labels is not None:
        ax.set_yticks(range(len(y_labels)), labels=list(y_labels))
    if annotate:
        for (i, j), value in np.ndenumerate(w):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if value < 0.5 * (vmax or w.max()) else "black")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="weight")
    return ax


def plot_mask(mask, ax=None, title: str | None = None, labels: Sequence[str] | None = None):
    """Draw a boolean (L_q, L_k) mask: dark = may attend, light = blocked."""
    m = _to_numpy(mask)
    check_mask_map(m, labels)
    m = m.astype(float)
    if ax is None:
        _, axes = new_figure()
        ax = axes[0, 0]
    ax.imshow(m, cmap="Greys", vmin=0, vmax=1, aspect="auto")
    if labels is not None:
        ax.set_xticks(range(len(labels)), labels=list(labels), rotation=90)
        ax.set_yticks(range(len(labels)), labels=list(labels))
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_title(title or "mask (dark = may attend)")
    return ax


def heatmap_grid(maps: Sequence, titles: Sequence[str] | None = None, ncols: int = 4,
                 x_labels=None, y_labels=None, size: float = 2.6, suptitle: str | None = None,
                 vmax: float | None = 1.0):
    """Several attention maps side by side (e.g. one per head). Returns the figure."""
    n = check_map_grid(maps, titles, ncols)
    ncols = min(ncols, n)
    nrows = (n + ncols - 1) // ncols
    fig, axes = new_figure(ncols, nrows, size=size)
    for k, ax in enumerate(axes.flat):
        if k >= n:
            ax.axis("off")
            continue
        attention_heatmap(maps[k], x_labels, y_labels, ax=ax, title=titles[k] if titles else None,
                          colorbar=False, vmax=vmax)
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    return fig
