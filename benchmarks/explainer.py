"""explainer.html in Chromium: page weight, load time and edit-to-candidates latency.

    nice .venv/bin/python benchmarks/explainer.py [--loads 5] [--edits 40]

Builds only the explainer (bookkit.explainer.build.write_explainer) into a temporary folder,
serves it from 127.0.0.1 and drives Debian's Chromium (bookkit.browser), as
tests/bookkit/test_explainer.py does. Measures:

* page weight: the bytes of every file the page loads (and gzip -6 of each, what a static host
  that compresses would send);
* load time: from navigation to the first candidates on screen (``explainer.ready``), each in a
  fresh browser context (no cache), the median of ``--loads``;
* update latency: from an edit's input event to the new candidates in ``#explainer-next``, over
  ``--edits`` edits at short prompts and at the full 64-token context.

Prints a table and writes benchmarks/results/explainer.json. Timings depend on the machine's
load: the file records the load average (re-run on an idle machine for the book's numbers).
"""
from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_results  # noqa: E402

from bookkit.browser import chromium, serve  # noqa: E402
from bookkit.explainer import EDITS_JS  # noqa: E402
from bookkit.explainer.build import write_explainer  # noqa: E402



def quantiles(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"median_ms": round(statistics.median(xs), 2), "p90_ms": round(xs[int(0.9 * (len(xs) - 1))], 2),
            "max_ms": round(xs[-1], 2), "n": len(xs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--edits", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, chromium() as browser:
        write_explainer(folder)
        with serve(folder) as url:
            loads, files = [], {}
            for _ in range(args.loads):
                ctx = browser.new_context()
                page = ctx.new_page()
                requested = []
                page.on("request", lambda r: requested.append(r.url))
                page.goto(f"{url}/explainer.html", wait_until="load")
                loads.append(page.evaluate("""async () => { await window.explainer.ready;
                                               return performance.now(); }"""))
                for u in requested:
                    path = Path(folder) / urlparse(u).path.lstrip("/")
                    if path.is_file():
                        data = path.read_bytes()
                        files[path.relative_to(folder).as_posix()] = (len(data), len(gzip.compress(data, 6)))
                if len(loads) == args.loads:
                    short, n_short = page.evaluate(EDITS_JS, [args.edits, False])
                    long, n_long = page.evaluate(EDITS_JS, [args.edits, True])
                ctx.close()
    weight = sum(b for b, _ in files.values())
    weight_gz = sum(g for _, g in files.values())
    rows = [{"file": f, "bytes": b, "gzip_bytes": g} for f, (b, g) in sorted(files.items(), key=lambda x: -x[1][0])]
    result = {"page_weight_bytes": weight, "page_weight_gzip_bytes": weight_gz, "files": rows,
              "load_ms": quantiles(loads), "update_short": {**quantiles(short), "tokens": n_short},
              "update_context": {**quantiles(long), "tokens": n_long}}
    print(f"{'file':45s} {'bytes':>12s} {'gzip':>12s}")
    for r in rows:
        print(f"{r['file']:45s} {r['bytes']:12,d} {r['gzip_bytes']:12,d}")
    print(f"{'total':45s} {weight:12,d} {weight_gz:12,d}")
    print(f"load to first candidates: median {result['load_ms']['median_ms']:.0f} ms over {args.loads} cold loads")
    for key in ("update_short", "update_context"):
        q = result[key]
        print(f"edit -> candidates at {q['tokens']} tokens: median {q['median_ms']:.1f} ms, p90 {q['p90_ms']:.1f} ms, "
              f"max {q['max_ms']:.1f} ms ({q['n']} edits; target < 100 ms)")
    write_results("explainer", result)


if __name__ == "__main__":
    main()
