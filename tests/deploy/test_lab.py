"""The learner's path in a real browser: `make lab`'s JupyterLab driven by Playwright and Chromium.

JupyterLab starts on 127.0.0.1 with a token and the project's Jupyter settings
(``deploy/jupyter``, the folder `make lab` adds to JUPYTER_CONFIG_PATH) over a temporary copy of
chapter 0 (so running it never touches ``chapters/``). Debian's Chromium opens the notebook, runs
all cells, moves the live widget's slider and waits for its printed output to change, and reads
the check cell's ``PASS``.

Nothing may leave the machine. In the browser every request and websocket to another host is
recorded and aborted. In the server and its kernel a ``sitecustomize`` (on PYTHONPATH) records
every DNS lookup of another host and refuses every connection to one; without the project's
settings the lab asks the reader (a popup) whether to fetch news from jupyterlab.github.io, and its
news and update endpoints (called by the test too) reach out to jupyterlab.github.io and pypi.org.
Both records must stay empty.

Chromium comes from `make browser-deps`; without it this module skips locally and fails under CI.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
from _servers import stop

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = "00-how-to-use"
CONFIG = ROOT / "deploy" / "jupyter"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
LOCAL = {"127.0.0.1", "localhost", "::1"}

if not CHROMIUM.exists():
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is missing: `make browser-deps` installs it", pytrace=False)
    pytest.skip(f"{CHROMIUM} is missing: run `make browser-deps`", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")
pytest.importorskip("jupyterlab")

# loaded by every Python process of the lab (server, kernel): records off-machine attempts
GUARD = '''
import os, socket
_LOG = os.environ["TLIB_NET_LOG"]
_LOCAL = ("127.", "::1", "localhost", "0.0.0.0")


def _record(what):
    with open(_LOG, "a") as f:
        f.write(what + "\\n")


def _is_local(host):
    return host is None or host == "" or str(host).startswith(_LOCAL)


_getaddrinfo = socket.getaddrinfo


def getaddrinfo(host, *args, **kwargs):
    if not _is_local(host if not isinstance(host, bytes) else host.decode()):
        _record(f"lookup {host}")
    return _getaddrinfo(host, *args, **kwargs)


def _guarded(original):
    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            _record(f"connect {address}")
            raise OSError("off-machine connection refused by the test")
        return original(self, address)
    return connect


socket.getaddrinfo = getaddrinfo
socket.socket.connect = _guarded(socket.socket.connect)
socket.socket.connect_ex = _guarded(socket.socket.connect_ex)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_lab_uses_the_project_settings():
    recipe = re.search(r"^lab:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe and "JUPYTER_CONFIG_PATH=$(CURDIR)/deploy/jupyter" in recipe.group(1)
    page_config = json.loads((CONFIG / "labconfig" / "page_config.json").read_text())
    assert page_config["disabledExtensions"]["@jupyterlab/apputils-extension:announcements"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab")
    notebooks, guard, home = tmp / "notebooks", tmp / "guard", tmp / "home"
    for d in (notebooks, guard, home):
        d.mkdir()
    shutil.copy2(ROOT / "chapters" / f"{CHAPTER}.ipynb", notebooks)
    from bookkit.notebooks import fold_solutions_in_file
    fold_solutions_in_file(notebooks / f"{CHAPTER}.ipynb")  # as `make chapters` writes it (a no-op then)
    (guard / "sitecustomize.py").write_text(GUARD)
    net_log = tmp / "net.log"
    net_log.touch()
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_PATH=str(CONFIG), JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
               JUPYTER_DATA_DIR=str(home / "data"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               HOME=str(home), PYTHONPATH=os.pathsep.join([str(guard), str(ROOT)]),
               TLIB_NET_LOG=str(net_log), TLIB_STATIC_WIDGETS="0", TLIB_DEVICE="cpu")
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}",
           f"--notebook-dir={notebooks}", f"--IdentityProvider.token={token}",
           "--LabApp.expose_app_in_browser=True"]  # lets the test call JupyterLab's commands
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(tmp / "lab.log", "w")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=notebooks)
    url = f"http://127.0.0.1:{port}"
    try:
        import urllib.request
        end = time.monotonic() + 120
        while True:
            assert server.poll() is None, (tmp / "lab.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5)
                break
            except OSError:
                assert time.monotonic() < end, "JupyterLab did not start in 120 s"
                time.sleep(0.5)
        yield {"url": url, "token": token, "net_log": net_log, "log": tmp / "lab.log"}
    finally:
        stop(server, 30)  # SIGTERM: the server shuts its kernels down
        log.close()


def test_a_learner_runs_a_chapter_moves_a_widget_and_passes_a_check(lab):
    off_machine: list[str] = []

    def guard(route):
        if urlparse(route.request.url).hostname not in LOCAL:
            off_machine.append(route.request.url)
            return route.abort()
        return route.continue_()

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.route("**/*", guard)
            page = context.new_page()
            page.on("websocket", lambda ws: urlparse(ws.url).hostname not in LOCAL and off_machine.append(ws.url))
            page.goto(f"{lab['url']}/lab/tree/{CHAPTER}.ipynb?token={lab['token']}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                                   " && window.jupyterapp.shell.currentWidget.sessionContext"
                                   " && window.jupyterapp.shell.currentWidget.sessionContext.session"
                                   " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel",
                                   timeout=120_000)
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            # every cell has run: no busy prompt left and the last code cell has an execution count
            page.wait_for_function("""() => {
                const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent);
                return prompts.length && !prompts.some(t => t.includes('*')) && /\\[\\d+\\]/.test(prompts[prompts.length - 1]);
            }""", timeout=300_000, polling=500)

            # the check cell's verdict, printed by the library's checker
            # (JupyterLab renders only the cells near the viewport: bring the check cell into view)
            check = page.locator(".jp-CodeCell", has_text='check("intro.mean_of_squares"')
            check.scroll_into_view_if_needed()
            sync_api.expect(check.locator(".jp-OutputArea")).to_contain_text("PASS [intro.mean_of_squares]",
                                                                           timeout=30_000)

            # the live widget: move its slider with the keyboard and wait for a new output
            widget = page.locator(".jp-OutputArea-output", has=page.locator(".widget-slider")).first
            widget.scroll_into_view_if_needed()
            output = widget.locator(".widget-output")
            page.wait_for_function("el => el.innerText.includes('weights:')", arg=output.element_handle(),
                                   timeout=60_000)
            before = output.inner_text()
            readout = widget.locator(".widget-readout").inner_text()
            handle = widget.locator(".noUi-handle").first
            handle.focus()
            page.keyboard.press("ArrowRight")
            page.wait_for_function("([el, old]) => el.innerText.includes('weights:') && el.innerText !== old",
                                   arg=[output.element_handle(), before], timeout=60_000)
            after = output.inner_text()
            assert widget.locator(".widget-readout").inner_text() != readout
            assert re.search(r"weights: \[[\d., ]+\]", after) and after != before
            assert page.locator("text=official Jupyter news").count() == 0  # no news popup
        finally:
            browser.close()
    assert not off_machine, f"the browser tried to leave the machine: {off_machine}"
    # what the news and update notifications would ask the server for, had a reader said yes
    import urllib.request
    for api in ("news", "update"):
        with urllib.request.urlopen(f"{lab['url']}/lab/api/{api}?token={lab['token']}", timeout=60) as r:
            assert r.status == 200
    attempts = lab["net_log"].read_text().split("\n")
    assert not [a for a in attempts if a], f"the lab server or kernel tried to leave the machine: {attempts}"


def test_a_solution_opens_folded_and_one_click_shows_it(lab):
    """JupyterLab shows a solution cell (tag ``solution``, ``jupyter.source_hidden``) as a folded
    bar: its code is not on the page until the learner clicks the bar once."""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{lab['url']}/lab/tree/{CHAPTER}.ipynb?token={lab['token']}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            page.wait_for_timeout(1000)
            body = "x.pow(2).mean(dim=-1, keepdim=True)"
            exercise = page.locator(".jp-CodeCell", has_text="def mean_of_squares(x):").first
            # JupyterLab renders only the cells near the viewport: bring the exercise into view first
            exercise.scroll_into_view_if_needed()
            sync_api.expect(exercise).to_contain_text("YOUR CODE HERE", timeout=30_000)  # the stub is shown
            assert page.get_by_text(body).count() == 0 or not page.get_by_text(body).first.is_visible(), \
                "the solution's code is visible on load"
            folded = page.locator(".jp-Cell .jp-InputPlaceholder")
            assert folded.count() >= 1, "no folded input bar"
            folded.first.scroll_into_view_if_needed()
            folded.first.click()
            page.wait_for_function(
                "t => [...document.querySelectorAll('.jp-CodeCell .jp-InputArea')]"
                ".some(a => a.offsetParent !== null && a.innerText.includes(t))", arg=body, timeout=30_000)
        finally:
            browser.close()
