"""One widget helper for the whole book: :func:`explore`.

``explore(fn, name=choices, ...)`` shows controls for the keyword arguments of ``fn`` and re-runs
``fn`` whenever a control moves. ``fn`` draws matplotlib figures and/or prints text (or returns a
string or an object with ``_repr_html_``).

It produces *two* renderings of the same explorer in one output:

* in JupyterLab with a kernel, a live ipywidget (``application/vnd.jupyter.widget-view+json``);
* for the static book, a self-contained HTML control (``text/html``): ``fn`` is run once for each
  combination of the (small) grid of choices when the cell executes, and a few lines of inline
  JavaScript switch between the precomputed outputs. No kernel, no CDN, no widget manager.

The book's config prefers the HTML rendering; JupyterLab prefers the live one. Keep grids small
(the product of the choice counts is the number of runs: aim for <= 24).

Controls:

* a list/tuple of numbers -> a slider over exactly those values;
* a list/tuple of strings (or anything else) -> a dropdown;
* ``[False, True]`` -> a checkbox;
* :class:`Text` -> a free text box live, a dropdown of its presets in the static book;
* :class:`Choice` -> any of the above with an explicit default value and label.

Set the environment variable ``TLIB_STATIC_WIDGETS=0`` to skip the static precomputation.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import html
import io
import itertools
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ._checks.widgets import check_choice_values, check_control, check_controls, check_static_combinations

__all__ = ["explore", "Choice", "Text", "Explorer", "MAX_STATIC_COMBINATIONS"]

MAX_STATIC_COMBINATIONS = 64
_FIG_DPI = 72


@dataclass
class Choice:
    """A control over a fixed list of values, with an optional default and label."""
    values: Sequence[Any]
    value: Any = None
    label: str | None = None

    def __post_init__(self):
        self.values = list(self.values)
        check_choice_values(self.values)
        if self.value is None:
            self.value = self.values[len(self.values) // 2] if self.kind == "slider" else self.values[0]
        check_choice_values(self.values, self.value)

    @property
    def kind(self) -> str:
        if all(isinstance(v, bool) for v in self.values):
            return "checkbox"
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values):
            return "slider"
        return "dropdown"


@dataclass
class Text:
    """A free text box in JupyterLab; in the static book a dropdown over ``presets``."""
    value: str
    presets: Sequence[str] = field(default_factory=list)
    label: str | None = None

    def __post_init__(self):
        self.presets = list(dict.fromkeys([self.value, *self.presets]))

    @property
    def values(self):
        return self.presets

    @property
    def kind(self) -> str:
        return "text"


def _as_control(spec) -> Choice | Text:
    check_control(spec, (Choice, Text))
    return spec if isinstance(spec, (Choice, Text)) else Choice(list(spec))


def _label(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _run_captured(fn: Callable, kwargs: dict) -> str:
    """Run ``fn(**kwargs)`` and return its printed text, figures and return value as HTML."""
    import matplotlib.pyplot as plt

    from .plotting import capturing_figures, figure_description

    plt.close("all")
    buffer = io.StringIO()
    with capturing_figures(), contextlib.redirect_stdout(buffer):  # figures stay open: saved below
        result = fn(**kwargs)
    parts = []
    text = buffer.getvalue()
    if text:
        parts.append(f"<pre class='tlib-text'>{html.escape(text)}</pre>")
    settings = ", ".join(f"{k} = {_label(v)}" for k, v in kwargs.items())
    for num in plt.get_fignums():
        fig = plt.figure(num)
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=_FIG_DPI, bbox_inches="tight", metadata={"Software": None})
        title = fig._suptitle.get_text() if fig._suptitle is not None else ""
        if not title and fig.axes:
            title = fig.axes[0].get_title()
        alt = html.escape(f"{figure_description(fig) or title or 'figure'} ({settings})", quote=True)
        data = base64.b64encode(png.getvalue()).decode("ascii")
        parts.append(f"<img class='tlib-figure' alt=\"{alt}\" src='data:image/png;base64,{data}'/>")
    plt.close("all")
    if result is not None:
        if hasattr(result, "_repr_html_"):
            parts.append(result._repr_html_())
        else:
            parts.append(f"<pre class='tlib-text'>{html.escape(str(result))}</pre>")
    return "\n".join(parts)


# The static control's whole behaviour: read every control's index, show the matching panel.
_SWITCH_JS = (
    "var w=this.closest('.tlib-widget');var key=[];"
    "w.querySelectorAll('[data-tlib-control]').forEach(function(c){"
    "var i=c.type==='checkbox'?(c.checked?1:0):parseInt(c.value);key.push(i);"
    "var o=w.querySelector('output[data-for=\\''+c.dataset.tlibControl+'\\']');"
    "if(o){o.textContent=JSON.parse(c.dataset.labels)[i];}});"
    "key=key.join('-');"
    "w.querySelectorAll('.tlib-panel').forEach(function(p){p.style.display=(p.dataset.key===key)?'':'none';});"
)

# Colours are the book theme's CSS variables (sphinx-book-theme: light and dark mode), then
# JupyterLab's, then a light-mode fallback with WCAG AA contrast; book/_assets/css/book.css sets the
# same in the book. No colour is fixed here, so dark mode keeps its contrast.
_STYLE = ("<style>.tlib-widget{border:1px solid var(--pst-color-border,var(--jp-border-color1,#bbb));"
          "border-radius:6px;padding:8px;margin:8px 0;color:var(--pst-color-text-base,var(--jp-ui-font-color1,inherit))}"
          ".tlib-controls label{display:inline-block;margin:0 16px 6px 0;font-family:sans-serif;font-size:90%}"
          ".tlib-controls output{font-family:monospace;margin-left:4px}"
          ".tlib-figure{max-width:100%}.tlib-note{color:var(--pst-color-text-muted,var(--jp-ui-font-color2,#555));"
          "font-size:80%;font-family:sans-serif}</style>")


class Explorer:
    """What :func:`explore` returns: displays as a live widget in Jupyter and as static HTML in
    the book. ``.static_html`` and ``.widget`` are the two renderings."""

    def __init__(self, fn: Callable, controls: dict[str, Choice | Text], title: str | None,
                 static: bool):
        self.fn, self.controls, self.title = fn, controls, title
        self.widget = self._build_widget()
        self.static_html = self._build_static() if static else None

    # -- live -------------------------------------------------------------------------------
    def _build_widget(self):
        import ipywidgets as W

        style = {"description_width": "initial"}
        layout = W.Layout(width="auto")
        boxes = {}
        for name, c in self.controls.items():
            desc = c.label or name
            if c.kind == "slider":
                boxes[name] = W.SelectionSlider(options=[(_label(v), v) for v in c.values], value=c.value,
                                                description=desc, style=style, continuous_update=False)
            elif c.kind == "checkbox":
                boxes[name] = W.Checkbox(value=c.value, description=desc, style=style, layout=layout)
            elif c.kind == "text":
                boxes[name] = W.Text(value=c.value, description=desc, style=style, continuous_update=False,
                                     layout=W.Layout(width="60%"))
            else:
                boxes[name] = W.Dropdown(options=[(_label(v), v) for v in c.values], value=c.value,
                                         description=desc, style=style)
        out = W.interactive_output(self.fn, boxes)
        children = ([W.HTML(f"<b>{html.escape(self.title)}</b>")] if self.title else [])
        children += [W.HBox(list(boxes.values()), layout=W.Layout(flex_flow="row wrap")), out]
        return W.VBox(children)

    # -- static ------------------------------------------------------------------------------
    def _build_static(self) -> str:
        names = list(self.controls)
        grids = [list(range(len(self.controls[n].values))) for n in names]
        combos = list(itertools.product(*grids))
        check_static_combinations(len(combos), MAX_STATIC_COMBINATIONS)
        uid = hashlib.sha1(("|".join([getattr(self.fn, "__qualname__", "fn"), *names, self.title or ""]
                                     + [repr(self.controls[n].values) for n in names])).encode()).hexdigest()[:10]
        default = tuple(self.controls[n].values.index(self.controls[n].value) for n in names)
        js = html.escape(_SWITCH_JS, quote=True)
        controls_html = []
        for n, idx in zip(names, default):
            c = self.controls[n]
            labels = [_label(v) for v in c.values]
            data = f"data-tlib-control='{n}' data-labels=\"{html.escape(json.dumps(labels), quote=True)}\""
            desc = html.escape(c.label or n)
            if c.kind == "slider":
                ctl = (f"<input type='range' min='0' max='{len(labels) - 1}' step='1' value='{idx}' {data} "
                       f"oninput=\"{js}\"/><output data-for='{n}'>{html.escape(labels[idx])}</output>")
            elif c.kind == "checkbox" and c.values == [False, True]:
                checked = " checked" if idx == 1 else ""
                ctl = f"<input type='checkbox'{checked} {data} onchange=\"{js}\"/>"
            else:
                options = "".join(f"<option value='{i}'{' selected' if i == idx else ''}>{html.escape(l)}</option>"
                                  for i, l in enumerate(labels))
                ctl = f"<select {data} onchange=\"{js}\">{options}</select>"
            controls_html.append(f"<label>{desc} {ctl}</label>")
        panels = []
        for combo in combos:
            kwargs = {n: self.controls[n].values[i] for n, i in zip(names, combo)}
            body = _run_captured(self.fn, kwargs)
            key = "-".join(map(str, combo))
            hidden = "" if combo == default else " style='display:none'"
            panels.append(f"<div class='tlib-panel' data-key='{key}'{hidden}>{body}</div>")
        title = f"<div><b>{html.escape(self.title)}</b></div>" if self.title else ""
        note = (f"<div class='tlib-note'>Static version: {len(combos)} precomputed settings. "
                "Run the notebook in JupyterLab for the live widget.</div>")
        return (f"{_STYLE}<div class='tlib-widget' id='tlib-{uid}'>{title}"
                f"<div class='tlib-controls'>{''.join(controls_html)}</div>{''.join(panels)}{note}</div>")

    # -- display ------------------------------------------------------------------------------
    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude) or {}
        if isinstance(bundle, tuple):
            bundle = bundle[0]
        bundle = dict(bundle)
        if self.static_html is not None:
            bundle["text/html"] = self.static_html
        bundle["text/plain"] = f"Explorer({', '.join(self.controls)})"
        return bundle


def explore(fn: Callable, *, title: str | None = None, static: bool | None = None, **controls) -> Explorer:
    """Interactive explorer of ``fn(**controls)``; see the module docstring.

    Example::

        explore(plot_softmax, d_k=[4, 16, 64, 256], temperature=[0.5, 1.0, 2.0],
                title="Softmax saturation")
    """
    check_controls(controls)
    parsed = {name: _as_control(spec) for name, spec in controls.items()}
    if static is None:
        static = os.environ.get("TLIB_STATIC_WIDGETS", "1") != "0"
    return Explorer(fn, parsed, title, static)
