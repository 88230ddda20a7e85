"""The one-machine course server, end to end: deploy/jupyterhub on 127.0.0.1 with real Unix users.

``provision.py`` creates an instructor and three students (homes under a temporary folder),
gives the students the chapters and releases chapter 0 through nbgrader's exchange. The hub
(``jupyterhub_config.py``, configurable-http-proxy from ``make hub-deps``) is started; every
student, concurrently, logs in through the login form, asks for an API token, spawns a server,
fetches the assignment through nbgrader's server extension, writes an answer (two solve it, one
leaves the stub), runs the chapter's cells in a kernel over the kernel websocket and reads the
checker's verdict, then submits. The instructor's server serves the formgrader; the instructor
collects and autogrades, and the gradebook must show each student under their own Unix name with
their own score. Spawn time and memory per student (RSS of all the user's processes) are printed;
``benchmarks/hub.py`` runs this test to write them to benchmarks/results/hub.json, where the course
guide's sizing comes from (a plain test run leaves the tree untouched).

Needs root (it creates Unix users; skipped otherwise, failed under CI) and the proxy from
``make hub-deps``. Everything it starts is stopped by PID; the users and their homes are removed.
"""
from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from _servers import stop

ROOT = Path(__file__).resolve().parents[1]
HUB = ROOT / "deploy" / "jupyterhub"
PROXY = HUB / "node_modules" / ".bin" / "configurable-http-proxy"
RESULTS = ROOT / "benchmarks" / "results" / "hub.json"
STUDENTS = ["tlhubstu1", "tlhubstu2", "tlhubstu3"]
SOLVES = {"tlhubstu1": True, "tlhubstu2": True, "tlhubstu3": False}  # who writes the answer
INSTRUCTOR = "tlhubteach"
ASSIGNMENT = "00-how-to-use"
COURSE_ID = "transformers-interactively"
DEADLINE_S = 600  # every bounded wait below shares this budget


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root: the course server runs every student as a real Unix user"
    if not shutil.which("useradd"):
        return "useradd is missing"
    if not PROXY.exists():
        return f"{PROXY} is missing: run `make hub-deps`"
    return None


if _missing():
    if os.environ.get("CI"):
        pytest.fail(_missing(), pytrace=False)
    pytest.skip(_missing(), allow_module_level=True)
requests = pytest.importorskip("requests")
websocket = pytest.importorskip("websocket")
pytest.importorskip("jupyterhub")
pytest.importorskip("nbgrader")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def user_pids(uid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
            except FileNotFoundError:
                pass
    return pids


def rss_mb(uid: int) -> float:
    """Resident memory of every process of a Unix user, in MB (the server, its kernels)."""
    total = 0
    for pid in user_pids(uid):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
        total += int(m.group(1)) if m else 0
    return total / 1024


def cpu_s(uid: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of a Unix user."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in user_pids(uid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / ticks


def kill_user_processes(uid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in user_pids(uid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(1)


def remove_user(name: str) -> None:
    try:
        user = pwd.getpwnam(name)
    except KeyError:
        return
    kill_user_processes(user.pw_uid)
    subprocess.run(["userdel", name], check=False, capture_output=True)
    subprocess.run(["groupdel", name], check=False, capture_output=True)


def wait_for(predicate, what: str, timeout: float, every: float = 0.5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def hub():
    for name in STUDENTS + [INSTRUCTOR]:
        remove_user(name)  # leftovers of an interrupted run
    base = Path(tempfile.mkdtemp(prefix="tlhub-", dir="/tmp"))
    base.chmod(0o755)
    (base / "home").mkdir()
    course_root = base / "srv"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run([sys.executable, str(HUB / "provision.py"), "--root", str(course_root),
                           "--home-base", str(base / "home"), "--instructor", INSTRUCTOR,
                           "--students", *STUDENTS, "--assignments", ASSIGNMENT],
                          env=env, capture_output=True, text=True, timeout=DEADLINE_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    port = free_port()
    settings = {"COURSE_ROOT": str(course_root), "COURSE_PORT": str(port),
                "COURSE_API_PORT": str(free_port()), "COURSE_HUB_PORT": str(free_port()),
                "COURSE_PASSWORD": secrets.token_hex(8), "COURSE_ADMIN_PASSWORD": secrets.token_hex(20)}
    log = open(base / "hub.log", "w")
    started = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(HUB / "jupyterhub_config.py")],
                               cwd=base, env=dict(env, **settings), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        def up():
            assert started.poll() is None, (base / "hub.log").read_text()[-3000:]
            try:
                return requests.get(f"{url}/hub/api", timeout=5).status_code == 200
            except requests.ConnectionError:
                return False
        wait_for(up, "the hub", 120)
        yield {"url": url, "base": base, "course_root": course_root, **settings}
    finally:
        stop(started, 60)  # SIGTERM: the hub stops the user servers and its proxy
        log.close()
        pid_file = course_root / "hub" / "proxy.pid"
        if pid_file.exists():  # the proxy the hub started, if it outlived the hub
            try:
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
        for name in STUDENTS + [INSTRUCTOR]:
            remove_user(name)
        shutil.rmtree(base, ignore_errors=True)


# -- one user, through the hub's and the server's REST APIs -----------------------------------------

def login(hub, name: str, password: str):
    """Log in through the form; return (session, API token)."""
    s = requests.Session()
    s.get(f"{hub['url']}/hub/login", timeout=30)
    r = s.post(f"{hub['url']}/hub/login", data={"username": name, "password": password,
                                               "_xsrf": s.cookies.get("_xsrf", "")},
               allow_redirects=False, timeout=60)
    assert r.status_code == 302, f"login of {name}: HTTP {r.status_code}"
    r = s.post(f"{hub['url']}/hub/api/users/{name}/tokens", json={"note": "test_hub", "expires_in": 3600},
               headers={"X-XSRFToken": s.cookies.get("_xsrf", "")}, timeout=30)
    assert r.status_code in (200, 201), r.text
    return s, r.json()["token"]


def spawn(hub, name: str, token: str) -> float:
    """Start the user's server; return the seconds until the hub reports it ready."""
    headers = {"Authorization": f"token {token}"}
    start = time.perf_counter()
    r = requests.post(f"{hub['url']}/hub/api/users/{name}/server", headers=headers, timeout=180)
    assert r.status_code in (201, 202), r.text

    def ready():
        servers = requests.get(f"{hub['url']}/hub/api/users/{name}", headers=headers, timeout=30).json()["servers"]
        return servers.get("", {}).get("ready")
    wait_for(ready, f"{name}'s server", 240)
    return time.perf_counter() - start


def run_cells(hub, name: str, token: str, path: str, cells: list) -> tuple[list[str], float, float]:
    """Run code cells in a fresh kernel of the user's server; return each cell's stdout (+ errors),
    the memory of all the user's processes (MB) once the last cell has run (kernel still up) and
    the kernel's CPU seconds."""
    api = f"{hub['url']}/user/{name}/api"
    headers = {"Authorization": f"token {token}"}
    cpu_before = cpu_s(pwd.getpwnam(name).pw_uid)  # the server's own CPU time so far
    r = requests.post(f"{api}/sessions", headers=headers, timeout=120,
                      json={"path": path, "type": "notebook", "name": Path(path).name, "kernel": {"name": "python3"}})
    assert r.status_code == 201, r.text
    session = r.json()
    ws = websocket.create_connection(f"ws://127.0.0.1:{hub['COURSE_PORT']}/user/{name}/api/kernels/"
                                     f"{session['kernel']['id']}/channels",
                                     header=[f"Authorization: token {token}"], timeout=300)
    outputs = []
    try:
        for cell in cells:
            msg_id = uuid.uuid4().hex
            ws.send(json.dumps({"channel": "shell", "buffers": [], "metadata": {}, "parent_header": {},
                                "header": {"msg_id": msg_id, "msg_type": "execute_request", "session": uuid.uuid4().hex,
                                           "username": name, "version": "5.3"},
                                "content": {"code": cell.source, "silent": False, "store_history": True,
                                            "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
            text = []
            while True:
                msg = json.loads(ws.recv())
                if msg.get("parent_header", {}).get("msg_id") != msg_id or msg["channel"] != "iopub":
                    continue
                kind, content = msg["header"]["msg_type"], msg["content"]
                if kind == "stream":
                    text.append(content["text"])
                elif kind == "error":
                    text.append(f"{content['ename']}: {content['evalue']}")
                elif kind == "status" and content["execution_state"] == "idle":
                    break
            outputs.append("".join(text))
        memory = rss_mb(pwd.getpwnam(name).pw_uid)
        kernel_cpu = cpu_s(pwd.getpwnam(name).pw_uid) - cpu_before
    finally:
        ws.close()
        requests.delete(f"{api}/sessions/{session['id']}", headers=headers, timeout=60)
    return outputs, memory, kernel_cpu


def student_works(hub, name: str, answer: str | None) -> dict:
    _, token = login(hub, name, hub["COURSE_PASSWORD"])
    seconds = spawn(hub, name, token)
    uid = pwd.getpwnam(name).pw_uid
    idle = rss_mb(uid)
    base = f"{hub['url']}/user/{name}"
    headers = {"Authorization": f"token {token}"}
    assert requests.get(f"{base}/api/contents/chapters", headers=headers, timeout=60).status_code == 200
    r = requests.post(f"{base}/assignments/fetch", headers=headers, timeout=120,
                      json={"course_id": COURSE_ID, "assignment_id": ASSIGNMENT})
    assert r.status_code == 200, r.text
    path = f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
    model = requests.get(f"{base}/api/contents/{path}", headers=headers, timeout=60).json()
    nb = nbformat.from_dict(model["content"])
    answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert answers and all("raise NotImplementedError()" in c.source for c in answers)
    if answer is not None:
        answers[0].source = answer
    code = [c for c in nb.cells if c.cell_type == "code"]
    outputs, with_kernel, kernel_cpu = run_cells(hub, name, token, path, code)
    for cell, text in zip(code, outputs):
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)] if text else []
    r = requests.put(f"{base}/api/contents/{path}", headers=headers, timeout=60,
                     json={"type": "notebook", "format": "json", "content": nb})
    assert r.status_code == 200, r.text
    r = requests.post(f"{base}/assignments/submit", headers=headers, timeout=120,
                      json={"course_id": COURSE_ID, "assignment_id": ASSIGNMENT})
    assert r.status_code == 200 and '"success": false' not in r.text, r.text
    return {"spawn_s": seconds, "rss_idle_mb": idle, "rss_kernel_mb": with_kernel, "cpu_s": kernel_cpu,
            "outputs": "\n".join(outputs)}


def instructor_formgrader(hub) -> dict:
    _, token = login(hub, INSTRUCTOR, hub["COURSE_ADMIN_PASSWORD"])
    seconds = spawn(hub, INSTRUCTOR, token)
    r = requests.get(f"{hub['url']}/user/{INSTRUCTOR}/formgrader/api/assignments",
                     headers={"Authorization": f"token {token}"}, timeout=120)
    return {"spawn_s": seconds, "status": r.status_code, "assignments": r.text}


# -- the test -----------------------------------------------------------------------------------------

def test_a_class_works_on_the_course_server(hub):
    teacher = pwd.getpwnam(INSTRUCTOR)
    course_dir = Path(teacher.pw_dir) / "course"
    source = nbformat.read(str(course_dir / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"), as_version=4)
    solution = next(c.source for c in source.cells if c.metadata.get("nbgrader", {}).get("solution"))
    solution = re.sub(r"^\s*### (BEGIN|END) SOLUTION\n?", "", solution, flags=re.M)

    start = time.perf_counter()
    with ThreadPoolExecutor(len(STUDENTS) + 1) as pool:  # every student at once, plus the instructor
        futures = {name: pool.submit(student_works, hub, name, solution if SOLVES[name] else None)
                   for name in STUDENTS}
        grader = pool.submit(instructor_formgrader, hub)
        results = {name: f.result(timeout=DEADLINE_S) for name, f in futures.items()}
        formgrader = grader.result(timeout=DEADLINE_S)
    class_s = time.perf_counter() - start

    for name, result in results.items():
        verdict = "PASS" if SOLVES[name] else "NOT YET"
        assert f"{verdict} [intro.mean_of_squares]" in result["outputs"], (name, result["outputs"][-2000:])
    assert formgrader["status"] == 200 and ASSIGNMENT in formgrader["assignments"], formgrader

    # the instructor collects and autogrades, as their own Unix user, in their course folder
    sys.path.insert(0, str(HUB))
    import provision
    provision.USERS_BIN = (hub["course_root"] / "venv" / "bin") if (hub["course_root"] / "venv").exists() \
        else Path(sys.executable).parent
    provision.run_as(teacher, hub["course_root"], "nbgrader", "collect", ASSIGNMENT, cwd=course_dir)
    t = time.perf_counter()
    provision.run_as(teacher, hub["course_root"], "nbgrader", "autograde", ASSIGNMENT, cwd=course_dir)
    autograde_s = (time.perf_counter() - t) / len(STUDENTS)
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}", COURSE_ID) as gb:
        rows = [(sub.student_id, sub.score) for sub in gb.find_assignment(ASSIGNMENT).submissions]
    assert dict(rows) == {name: (1.0 if SOLVES[name] else 0.0) for name in STUDENTS}

    figures = {
        "students": len(STUDENTS), "assignment": ASSIGNMENT,
        "spawn_s": {n: round(r["spawn_s"], 2) for n, r in results.items()},
        "rss_idle_server_mb": {n: round(r["rss_idle_mb"]) for n, r in results.items()},
        "rss_with_kernel_mb": {n: round(r["rss_kernel_mb"]) for n, r in results.items()},
        "chapter_run_cpu_s": {n: round(r["cpu_s"], 1) for n, r in results.items()},
        "instructor_spawn_s": round(formgrader["spawn_s"], 2),
        "class_wall_s": round(class_s, 1),
        "autograde_s_per_submission": round(autograde_s, 1),
        "machine": {"cpu_cores": os.cpu_count(), "load_avg_1min": round(os.getloadavg()[0], 2),
                    "mem_total_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)},
        "note": "servers spawned concurrently (login, spawn, fetch, run chapter 0, submit); RSS sums every "
                "process of the student's Unix user; OMP_NUM_THREADS=1 per kernel",
    }
    print("\n" + json.dumps(figures, indent=1))
    if os.environ.get("TLIB_HUB_RESULTS"):  # benchmarks/hub.py: a measurement run, not a test run
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(figures, indent=1) + "\n")
