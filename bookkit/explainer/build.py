"""Write the explainer page into a built book: ``explainer.html`` and its ``explainer/`` folder.

    python -m bookkit.explainer.build OUT_DIR     # e.g. book/_build/html (build_book calls write_explainer)

What lands in OUT_DIR:

* ``explainer.html`` (from ``explainer.html`` here), ``explainer/explainer.js``, ``bpe.js``,
  ``explainer.css``;
* ``explainer/book_gpt.onnx``: chapter 16's GPT (``transformer_lib.data.load_gpt_checkpoint``)
  exported by :func:`transformer_lib.export.export_onnx`, which carries its tokenizer's merges;
  exported once and kept under ``bookkit/explainer/cache/`` (git-ignored), keyed by the
  checkpoint's and the exporter's bytes and the source files of the model's own classes (the
  export's node names carry their qualified names, ``transformer_lib.layers.TransformerBlock``);
* ``explainer/tokenizer.json``: the same merges, readable (the page itself reads the model's);
* ``explainer/classes.json``: the code-point ranges of ``\\p{L}``, ``\\p{N}`` and ``\\s`` as the
  ``regex`` module of the Python tokenizer sees them (see bpe.js: browsers differ);
* ``explainer/offline.js``: the model, ``classes.json`` and the runtime's .wasm again, in one
  script (base64), which the page loads only when opened from disk (file://, the offline
  bundle of `make dist`), where a browser refuses ``fetch`` of the files beside it;
* ``explainer/ort/``: onnxruntime-web's WebAssembly build, installed from npm with ``npm ci``
  from the committed package.json and package-lock.json (pinned; nothing from a CDN). The page
  runs one thread (threads need cross-origin isolation, which a static host rarely gives), so it
  ships the smallest build that does: ``ort.wasm-core.min.js`` (the WebAssembly backend without
  the thread pool or the worker proxy) and the single-threaded SIMD ``ort-wasm-simd.wasm``. 1.18
  is the last onnxruntime-web release with single-threaded builds (later ones ship only the
  threaded .wasm, 14 MB, which a single-threaded page must still fetch); it runs ONNX opsets up to
  21, and ``export_onnx`` writes 18.
"""
from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["HERE", "ORT_VERSION", "ORT_FILES", "unicode_classes", "ensure_onnxruntime_web", "book_model",
           "write_explainer"]

HERE = Path(__file__).resolve().parent
ORT_VERSION = json.loads((HERE / "package.json").read_text())["dependencies"]["onnxruntime-web"]
# onnxruntime-web's single-threaded WebAssembly backend: the script (global `ort`) and the SIMD .wasm
ORT_FILES = ["ort.wasm-core.min.js", "ort-wasm-simd.wasm"]
PAGE_FILES = ["explainer.js", "bpe.js", "explainer.css"]
CACHE = HERE / "cache"


def unicode_classes() -> dict[str, list[list[int]]]:
    """``{"L": ranges, "N": ranges, "S": ranges}``: every code point that the ``regex`` module
    matches with ``\\p{L}``, ``\\p{N}`` and ``\\s``, as inclusive ``[lo, hi]`` ranges."""
    import regex

    out = {}
    for name, pattern in (("L", r"\p{L}"), ("N", r"\p{N}"), ("S", r"\s")):
        rx, ranges, start = regex.compile(pattern), [], None
        for c in range(0x110000 + 1):
            inside = c < 0x110000 and not 0xD800 <= c < 0xE000 and rx.match(chr(c)) is not None
            if inside and start is None:
                start = c
            elif not inside and start is not None:
                ranges.append([start, c - 1])
                start = None
        out[name] = ranges
    return out


def ensure_onnxruntime_web() -> Path:
    """onnxruntime-web's dist folder, installed with ``npm ci`` (the lock file's exact version) if
    it is missing or another version."""
    pkg = HERE / "node_modules" / "onnxruntime-web"
    installed = json.loads((pkg / "package.json").read_text())["version"] if (pkg / "package.json").exists() else None
    if installed != ORT_VERSION or not all((pkg / "dist" / f).exists() for f in ORT_FILES):
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is needed once, to install onnxruntime-web (Debian: apt-get install npm)")
        print(f"installing onnxruntime-web@{ORT_VERSION} from npm into {HERE}/node_modules", flush=True)
        subprocess.run([npm, "ci", "--prefix", str(HERE), "--no-audit", "--no-fund", "--ignore-scripts"],
                       check=True, cwd=HERE)
    return pkg / "dist"


def _digest(*paths: Path) -> str:
    h = hashlib.sha1()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def book_model() -> Path:
    """Chapter 16's GPT as ONNX, exported once per checkpoint, exporter and model source."""
    import inspect

    import transformer_lib.export as export
    from transformer_lib.data import GPT_CHECKPOINT, load_gpt_checkpoint

    model, tokenizer, _ = load_gpt_checkpoint()
    # the library's classes in the model (a renamed or edited block changes the export's nodes)
    sources = sorted({Path(inspect.getsourcefile(type(m))) for m in model.modules()
                      if type(m).__module__.startswith("transformer_lib.")})
    target = CACHE / f"book_gpt-{_digest(GPT_CHECKPOINT, Path(export.__file__), *sources)}.onnx"
    if not target.exists():
        CACHE.mkdir(exist_ok=True)
        for old in CACHE.glob("book_gpt-*.onnx"):
            old.unlink()
        partial = target.with_name("partial.onnx")
        export.export_onnx(model, partial, tokenizer)
        partial.replace(target)
    return target


def write_explainer(out_dir: str | Path) -> Path:
    """Write the page and everything it loads into ``out_dir``; returns the page's path."""
    if not isinstance(out_dir, (str, Path)):
        raise TypeError(f"out_dir must be a path, got {type(out_dir).__name__}")
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise ValueError(f"out_dir must be an existing folder, got {str(out_dir)!r}")
    from transformer_lib.export import read_config

    assets = out_dir / "explainer"
    (assets / "ort").mkdir(parents=True, exist_ok=True)
    for name in PAGE_FILES:
        shutil.copyfile(HERE / name, assets / name)
    dist = ensure_onnxruntime_web()
    for name in ORT_FILES:
        shutil.copyfile(dist / name, assets / "ort" / name)
    model = book_model()
    shutil.copyfile(model, assets / "book_gpt.onnx")
    (assets / "tokenizer.json").write_text(json.dumps(read_config(model)["tokenizer"], ensure_ascii=False),
                                           encoding="utf-8")
    classes = unicode_classes()
    (assets / "classes.json").write_text(json.dumps(classes, separators=(",", ":")))
    offline = {"classes": classes, "wasmName": ORT_FILES[1],
               "model": base64.b64encode(model.read_bytes()).decode(),
               "wasm": base64.b64encode((dist / ORT_FILES[1]).read_bytes()).decode()}
    (assets / "offline.js").write_text("window.EXPLAINER_OFFLINE = " + json.dumps(offline, separators=(",", ":")) + ";\n")
    page = out_dir / "explainer.html"
    shutil.copyfile(HERE / "explainer.html", page)
    return page


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(write_explainer(sys.argv[1]))
