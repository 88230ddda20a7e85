"""A built site served from 127.0.0.1 and Debian's Chromium driven by Playwright.

Shared by the PDF build (``bookkit.pdf`` prints the one-page book) and tests/bookkit/test_browser.py
(which checks every page). Chromium is /usr/bin/chromium (`make browser-deps`); Playwright only
drives it, so no browser download is ever needed.
"""
from __future__ import annotations

import functools
import http.server
import threading
from contextlib import contextmanager
from pathlib import Path

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "serve", "chromium", "wait_for_mathjax"]

CHROMIUM = Path("/usr/bin/chromium")
# as root on a machine without outside network: no sandbox, no GPU, no background connections
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the callers' output clean
        pass


@contextmanager
def serve(folder: str | Path):
    """Serve ``folder`` over HTTP on a free local port; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def chromium():
    """A headless Chromium browser (Playwright's sync API); raises if /usr/bin/chromium is missing."""
    from playwright.sync_api import sync_playwright
    if not CHROMIUM.exists():
        raise FileNotFoundError(f"{CHROMIUM} is missing: `make browser-deps` installs it")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def wait_for_mathjax(page) -> None:
    """MathJax 3 typesets asynchronously: wait for its startup promise where the page loads it."""
    page.wait_for_function("() => !document.querySelector('script[src*=\"mathjax/tex-chtml\"]')"
                           " || (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise)")
    page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
