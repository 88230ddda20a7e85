"""transformer_lib.plotting: figures carry their description, draw what they are given, refuse bad input."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lib import plotting  # noqa: E402

DESCRIPTION = "Attention weight of each query on each key: the diagonal is bright"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_show_displays_a_png_with_the_description_as_alt_text_and_closes_it(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    fig, axes = plotting.new_figure()
    axes[0, 0].plot([0, 1], [1, 0])
    plotting.show(f"  {DESCRIPTION}  ", fig)
    (image,) = shown
    assert image.data[:8] == b"\x89PNG\r\n\x1a\n"
    assert image.alt == DESCRIPTION == plotting.figure_description(fig)  # whitespace normalised
    assert not plt.fignum_exists(fig.number)


def test_while_capturing_show_only_labels_and_plt_show_is_restored(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    original = plt.show
    fig, _ = plotting.new_figure()
    with plotting.capturing_figures():
        plotting.show(DESCRIPTION, fig)
        assert plt.show is not original
    assert shown == [] and plt.fignum_exists(fig.number)
    assert plotting.figure_description(fig) == DESCRIPTION
    assert plt.show is original
    assert plotting.figure_description(plt.figure()) is None


def test_show_needs_a_sentence():
    with pytest.raises(TypeError, match="description"):
        plotting.show(None)
    with pytest.raises(ValueError, match="description"):
        plotting.show("a heatmap")


def test_new_figure_sizes_for_the_page():
    fig, axes = plotting.new_figure(3, 2, size=2.0)
    assert axes.shape == (2, 3)
    assert np.allclose(fig.get_size_inches(), (6.0, 2 * 2.0 * 0.95))


def test_attention_heatmap_draws_the_weights_with_labels():
    w = torch.softmax(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), -1)
    ax = plotting.attention_heatmap(w, x_labels=list("abcd"), y_labels=list("xyz"), title="t", annotate=True)
    (image,) = ax.get_images()
    assert np.allclose(image.get_array(), w.numpy())
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcd")
    assert ax.get_title() == "t" and ax.get_xlabel() == "key" and ax.get_ylabel() == "query"
    assert len(ax.texts) == 12  # one number per cell


@pytest.mark.parametrize("kwargs, error, name", [
    (dict(weights=torch.ones(2, 3, 4)), ValueError, "weights"),
    (dict(weights=torch.ones(0, 3)), ValueError, "weights"),
    (dict(weights=np.array([["a", "b"]])), ValueError, "weights"),
    (dict(x_labels=["a"]), ValueError, "x_labels"),
    (dict(y_labels="ab"), TypeError, "y_labels"),
])
def test_attention_heatmap_bad_input(kwargs, error, name):
    args = dict(weights=torch.ones(2, 2)) | kwargs
    with pytest.raises(error, match=name):
        plotting.attention_heatmap(**args)


def test_plot_mask_draws_dark_where_attention_is_allowed():
    mask = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    ax = plotting.plot_mask(mask, labels=["a", "b", "c"])
    assert np.array_equal(ax.get_images()[0].get_array(), mask.numpy().astype(float))
    assert ax.get_title() == "mask (dark = may attend)"
    with pytest.raises(ValueError, match="mask"):
        plotting.plot_mask(torch.full((2, 2), 0.5))
    with pytest.raises(ValueError, match="square"):
        plotting.plot_mask(torch.ones(2, 3, dtype=torch.bool), labels=["a", "b", "c"])
    with pytest.raises(ValueError, match="mask"):
        plotting.plot_mask(torch.ones(4, dtype=torch.bool))


def test_heatmap_grid_has_one_panel_per_map_and_hides_the_rest():
    maps = [torch.eye(3) * k for k in range(5)]
    fig = plotting.heatmap_grid(maps, titles=[f"head {k}" for k in range(5)], ncols=3, suptitle="heads")
    drawn = [ax for ax in fig.axes if ax.get_images()]
    assert len(fig.axes) == 6 and len(drawn) == 5
    assert [ax.get_title() for ax in drawn] == [f"head {k}" for k in range(5)]
    assert np.allclose(drawn[4].get_images()[0].get_array(), maps[4].numpy())


@pytest.mark.parametrize("kwargs, error, name", [
    (dict(maps="not maps"), TypeError, "maps"), (dict(maps=[]), ValueError, "maps"),
    (dict(ncols=0), ValueError, "ncols"), (dict(ncols=True), ValueError, "ncols"),
    (dict(titles=["only one"]), ValueError, "titles"),
])
def test_heatmap_grid_bad_input(kwargs, error, name):
    args = dict(maps=[torch.eye(2), torch.eye(2)]) | kwargs
    with pytest.raises(error, match=name):
        plotting.heatmap_grid(**args)
