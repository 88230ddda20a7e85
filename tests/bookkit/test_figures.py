"""Every figure carries words: a description given where the figure is made
(``transformer_lib.plotting.show``), stored with the image in the notebook, and turned into the
``alt`` of every ``<img>`` of the book (bookkit.build_book.described_image)."""
import base64
import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from bookkit import build_book as book
from bookkit.conventions import chapter_files
from transformer_lib import plotting
from transformer_lib.widgets import explore

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = chapter_files(ROOT / "chapters")
IMG_TAG = re.compile(r"<img\b[^>]*>", re.I)
ALT = re.compile(r"""\balt\s*=\s*(["'])(.*?)\1""", re.I | re.S)


def _text(x):
    return "".join(x) if isinstance(x, list) else (x or "")


def undescribed_images(nb: dict) -> list[str]:
    """Where a PNG output has no description, or an <img> in an HTML output has an empty alt."""
    problems = []
    for n, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "image/png" in data:
                alt = out.get("metadata", {}).get("image/png", {}).get("alt", "")
                if len(alt.split()) < 4:
                    problems.append(f"cell {n}: a figure without a description (use tl.plotting.show)")
            for tag in IMG_TAG.findall(_text(data.get("text/html"))):
                alt = ALT.search(tag)
                if not alt or not alt.group(2).strip():
                    problems.append(f"cell {n}: <img> without alt text in an HTML output")
    return problems


def _figure():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    return fig


def test_show_stores_the_description_as_alt_text(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    fig = _figure()
    plotting.show("A falling line: y from 1 down to 0 as x goes 0 to 1", fig)
    (image,) = shown
    data, metadata = image._repr_png_()
    assert base64.b64decode(data)[:4] == b"\x89PNG" and metadata == {"alt": "A falling line: y from 1 down to 0 as x goes 0 to 1"}
    assert not plt.fignum_exists(fig.number), "show closes the figure it displayed"


@pytest.mark.parametrize("bad, error", [("", ValueError), ("   ", ValueError), ("a plot", ValueError),
                                        (None, TypeError), (3, TypeError)])
def test_show_needs_a_real_description(bad, error):
    with pytest.raises(error, match="description"):
        plotting.show(bad, _figure())
    plt.close("all")


def test_widget_panels_use_the_figure_description():
    def draw(slope=1):
        _figure()
        plotting.show(f"A straight line of slope {slope} plotted against x")

    static = explore(draw, slope=[1, 2], static=True)._build_static()
    alts = [ALT.search(tag).group(2) for tag in IMG_TAG.findall(static)]
    assert alts == ["A straight line of slope 1 plotted against x (slope = 1)",
                    "A straight line of slope 2 plotted against x (slope = 2)"]


def test_book_copy_gives_each_described_png_an_img_with_alt():
    out = {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo=\n", "text/plain": "<Image>"},
           "metadata": {"image/png": {"alt": 'Loss against "steps" & epochs'}}}
    bare = {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo="}, "metadata": {}}
    book.described_image(out)
    book.described_image(bare)
    assert out["data"]["text/html"] == ('<img class="tlib-figure" src="data:image/png;base64,iVBORw0KGgo=" '
                                        'alt="Loss against &quot;steps&quot; &amp; epochs"/>')
    assert "text/html" not in bare["data"], "only a described image gets the twin"


@pytest.mark.parametrize("ipynb", CHAPTERS, ids=lambda p: p.stem)
def test_every_figure_of_every_chapter_is_described(ipynb):
    problems = undescribed_images(json.loads(ipynb.read_text()))
    assert not problems, f"{ipynb.name}: " + "; ".join(problems[:5])
