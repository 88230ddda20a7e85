"""The widget helper: one call, a live ipywidget and a precomputed static HTML control."""
import re

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from transformer_lib.widgets import Choice, Text, explore

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def show(n=1, label="a", flag=False):
    fig, ax = plt.subplots()
    ax.plot(range(n))
    ax.set_title(f"n={n}")
    plt.show()
    print(f"n={n} label={label} flag={flag}")


def test_one_panel_per_combination_with_default_visible():
    e = explore(show, n=[1, 2, 3], label=["a", "b"], flag=[False, True], title="demo")
    html = e.static_html
    keys = re.findall(r"data-key='([\d-]+)'", html)
    assert len(keys) == 12 and len(set(keys)) == 12
    # default: middle of a slider, first of a dropdown/checkbox -> key 1-0-0 is the visible panel
    visible = re.findall(r"data-key='([\d-]+)'>", html)
    assert visible == ["1-0-0"]
    assert "n=2 label=a flag=False" in html and "n=3 label=b flag=True" in html
    assert html.count("<img") == 12 and "alt=" in html
    assert "type='range'" in html and "<select" in html and "type='checkbox'" in html


def test_mimebundle_has_live_and_static_views():
    bundle = explore(show, n=[1, 2])._repr_mimebundle_()
    assert WIDGET_VIEW in bundle and "text/html" in bundle


def test_static_html_is_deterministic():
    a = explore(show, n=[1, 2]).static_html
    b = explore(show, n=[1, 2]).static_html
    assert a == b


def test_text_control_and_choice_default(monkeypatch):
    e = explore(show, label=Text("hello", presets=["world"]), n=Choice([1, 2, 3], value=3))
    assert "hello" in e.static_html and "world" in e.static_html
    assert re.findall(r"data-key='([\d-]+)'>", e.static_html) == ["0-2"]
    monkeypatch.setenv("TLIB_STATIC_WIDGETS", "0")
    assert explore(show, n=[1, 2]).static_html is None


def test_bad_controls_raise():
    with pytest.raises(ValueError, match="at least one control"):
        explore(show)
    with pytest.raises(ValueError, match="too many"):
        explore(show, n=list(range(10)), label=list("abcdefgh"))
    with pytest.raises(ValueError, match="not one of"):
        Choice([1, 2], value=5)
    with pytest.raises(ValueError, match="list of values"):
        explore(show, n=3)


def _relative_luminance(hex_colour: str) -> float:
    h = hex_colour.lstrip("#")
    h = "".join(c * 2 for c in h) if len(h) == 3 else h
    lin = [(v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4) for v in (int(h[i:i + 2], 16) / 255 for i in (0, 2, 4))]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def test_static_widget_colours_come_from_the_theme():
    """Every colour of the static widget's style is a theme variable (dark mode keeps its contrast;
    tests/bookkit/test_browser.py measures it in the book); a literal colour may only be the last fallback
    inside var(...), and a text fallback has WCAG AA contrast (4.5:1) on white."""
    style = re.search(r"<style>(.*?)</style>", explore(show, n=[1, 2]).static_html, re.S).group(1)
    declarations = re.findall(r"(?<![\w-])(color|background(?:-color)?|border(?:-color)?)\s*:\s*([^;}]+)", style)
    assert declarations, "the widget style sets no colour at all?"
    for prop, value in declarations:
        outside_var = re.sub(r"var\((?:[^()]|\([^()]*\))*\)", "", value)
        assert not re.search(r"#[0-9a-fA-F]{3,8}\b|rgb|hsl", outside_var), f"{prop}: {value} is hard-coded"
        assert "var(--pst-color" in value or not re.search(r"#[0-9a-fA-F]{3,8}", value), f"{prop}: {value}"
        if prop == "color":
            for literal in re.findall(r"#[0-9a-fA-F]{6}\b|#[0-9a-fA-F]{3}\b", value):
                assert (1.05) / (_relative_luminance(literal) + 0.05) >= 4.5, f"{literal} on white < 4.5:1"
