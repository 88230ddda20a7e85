"""The one-machine course server keeps students apart: deploy/jupyterhub on 127.0.0.1, real Unix users.

The fixture copies this checkout into a private (0700) folder, its ``.venv`` included (hard links),
and provisions the class from there: an instructor and three students (``provision.py``: accounts,
generated passwords, the class environment, the chapters, the nbgrader course). The hub
(``jupyterhub_config.py``: PAM, cgroup limits, the idle culler, ngshare, HTTPS with a certificate
made here by ``openssl``) is started and the course enrolled. Then, over HTTPS only:

- each account logs in with its own password and not with a classmate's;
- two students at once spawn, fetch the assignment through ngshare, run it in a kernel (the
  library comes from the class environment, not the checkout), try to read the other's home, the
  course source, the gradebook and the hub's and ngshare's state from their kernel and to reach the
  other's server, spawn or tokens through the hub, try to read, list or forge the other's submission
  in ngshare, and submit; the instructor collects and autogrades, and each student has their own score;
- the formgrader serves the instructor and not a student;
- a student's memory and CPU are limited (a child over the memory limit is killed; eight busy loops
  get at most the CPU quota, and are throttled where the machine leaves them that much);
- the idle culler stops the server of the student who did nothing (it logs in and spawns with the
  two who work, so by then it is stopped already; the test's culler has a 20 s timeout and may
  stop that student's server only, ``COURSE_CULL_USERS``, where the class's has an hour for all);
- the hub restarts and the student's server and kernel (with its variables) are still there.

``benchmarks/hub.py`` runs this test to write spawn time and memory per student to
benchmarks/results/hub.json (a plain test run leaves the tree untouched). Needs root (skipped
otherwise, failed under CI), ``make hub-deps`` and a writable cgroup hierarchy. Everything it
starts is stopped by PID; the users (``tlhub`` prefix), their groups and homes are removed.
"""
from __future__ import annotations

import importlib.util
import json
import os
import pwd
import re
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

ROOT = Path(__file__).resolve().parents[2]
HUB = ROOT / "deploy" / "jupyterhub"
PROXY = HUB / "node_modules" / ".bin" / "configurable-http-proxy"
RESULTS = ROOT / "benchmarks" / "results" / "hub.json"
PREFIX = "tlhub"
STUDENTS = ["tlhubstu1", "tlhubstu2", "tlhubstu3"]   # 1 and 2 work at once; 3 logs in and idles
INSTRUCTOR = "tlhubteach"
ASSIGNMENT = "00-how-to-use"
COURSE_ID = "transformers-interactively"
MEM_LIMIT_MB, CPU_LIMIT = 1536, 0.5
# The culler may stop tlhubstu3's server alone (COURSE_CULL_USERS narrows its role), so its timeout
# need not outlast the slow steps of the servers the other tests use; tlhubstu3 idles from the
# start of the class, which takes longer than this on any machine
CULL_TIMEOUT_S = 20
CULL_EVERY_S = 5
IDLE_STUDENT = "tlhubstu3"
DEADLINE_S = 600  # every bounded wait below shares this budget
# the class environment is kept between runs (class_env.py rebuilds it when its sources change):
# removing 70,000 hard links costs a minute on a busy machine, building it two seconds
CLASS_ENV = Path("/var/cache/tlhub-class-env")



def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root: the course server runs every student as a real Unix user"
    for tool in ("useradd", "openssl", "chpasswd"):
        if not shutil.which(tool):
            return f"{tool} is missing"
    if not PROXY.exists():
        return f"{PROXY} is missing: run `make hub-deps`"
    if limits.cgroup_version() is None:
        return "no writable cgroup hierarchy: per-student limits cannot be enforced here"
    if importlib.util.find_spec("ngshare_exchange") is None:   # importing it needs $USER: look only
        return "ngshare_exchange is missing: run `make hub-deps`"
    return None


requests = pytest.importorskip("requests")
websocket = pytest.importorskip("websocket")
pytest.importorskip("jupyterhub")
pytest.importorskip("nbgrader")
sys.path.insert(0, str(HUB))
import limits  # noqa: E402  (deploy/jupyterhub/limits.py: the cgroup folders the test inspects)



def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def user_pids(uids: int | set[int]) -> list[int]:
    uids = {uids} if isinstance(uids, int) else uids
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid in uids:
                    pids.append(int(entry.name))
            except FileNotFoundError:
                pass
    return pids


def rss_mb(uid: int) -> float:
    """Resident memory of every process of a Unix user, in MB (the server, its kernels)."""
    total = 0
    for pid in user_pids(uid):
        try:
            m = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(m.group(1)) if m else 0
    return total / 1024


def kill_user_processes(uids: set[int]) -> None:
    """SIGTERM, up to 5 s for the users' processes to exit (all users' at once), then SIGKILL for
    what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in user_pids(uids):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + 5
        while user_pids(uids) and time.monotonic() < end:
            time.sleep(0.2)


def remove_test_users() -> None:
    """Every user (and its group) whose name starts with the test's prefix: leftovers included."""
    users = [user for user in pwd.getpwall() if user.pw_name.startswith(PREFIX)]
    kill_user_processes({user.pw_uid for user in users})
    for user in users:
        subprocess.run(["userdel", user.pw_name], check=False, capture_output=True)
        subprocess.run(["groupdel", user.pw_name], check=False, capture_output=True)
        for folder in limits.groups_of(user.pw_name).values():
            try:
                folder.rmdir()
            except OSError:
                pass


def wait_for(predicate, what: str, timeout: float, every: float = 0.5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def private_checkout(base: Path) -> Path:
    """This checkout's files (tracked and untracked, not ignored) in a folder only root can enter,
    as a clone into a 0750 home would be for the students, with its ``.venv`` (a link to this one:
    every path the hub and provisioning take from it lies under the private folder)."""
    private = base / "private"
    private.mkdir(mode=0o700)
    repo = private / "repo"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src, dest = ROOT / name, repo / name
        if src.is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    (repo / ".venv").symlink_to(Path(sys.prefix))  # its packages are reached only through private/
    return repo


class Hub:
    """The hub process of the test: started, stopped and restarted with one set of settings."""

    def __init__(self, repo: Path, base: Path, env: dict):
        self.repo, self.base, self.env, self.process = repo, base, env, None
        self.url = f"https://127.0.0.1:{env['COURSE_PORT']}"
        self.cert = env["COURSE_SSL_CERT"]

    def start(self):
        log = open(self.base / "hub.log", "a")
        self.process = subprocess.Popen(
            [str(self.repo / ".venv" / "bin" / "python"), "-m", "jupyterhub",
             "-f", str(self.repo / "deploy" / "jupyterhub" / "jupyterhub_config.py")],
            cwd=self.base, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()

        def up():
            assert self.process.poll() is None, (self.base / "hub.log").read_text()[-4000:]
            try:
                return requests.get(f"{self.url}/hub/api", timeout=5, verify=self.cert).status_code == 200
            except requests.ConnectionError:
                return False
        wait_for(up, "the hub", 120)

    def stop(self):
        stop(self.process, 60)  # SIGTERM: the hub stops its proxy and services, not the user servers


@pytest.fixture(scope="module")
def hub():
    if _missing():
        if os.environ.get("CI"):
            pytest.fail(_missing(), pytrace=False)
        pytest.skip(_missing())
    remove_test_users()
    base = Path(tempfile.mkdtemp(prefix="tlhub-", dir="/tmp"))
    base.chmod(0o755)
    (base / "home").mkdir()
    course_root = base / "srv"
    try:
        t = time.perf_counter()
        repo = private_checkout(base)
        copy_s = time.perf_counter() - t
        cert, key = base / "hub.pem", base / "hub.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
        python = str(repo / ".venv" / "bin" / "python")
        ports = {k: str(free_port()) for k in ("COURSE_PORT", "COURSE_API_PORT", "COURSE_HUB_PORT",
                                               "COURSE_NGSHARE_PORT")}
        env = dict(os.environ, COURSE_ROOT=str(course_root), COURSE_SSL_CERT=str(cert), COURSE_SSL_KEY=str(key),
                   COURSE_PROXY=str(PROXY), COURSE_MEM_LIMIT=f"{MEM_LIMIT_MB}M", COURSE_CPU_LIMIT=str(CPU_LIMIT),
                   COURSE_INSTRUCTOR_MEM_LIMIT="3G", COURSE_INSTRUCTOR_CPU_LIMIT="2",
                   COURSE_CULL_TIMEOUT=str(CULL_TIMEOUT_S), COURSE_CULL_EVERY=str(CULL_EVERY_S),
                   COURSE_CULL_USERS=IDLE_STUDENT,
                   COURSE_ACTIVITY_INTERVAL="5", **ports)
        t = time.perf_counter()
        done = subprocess.run([python, str(repo / "deploy" / "jupyterhub" / "provision.py"), "--root",
                               str(course_root), "--home-base", str(base / "home"), "--instructor", INSTRUCTOR,
                               "--students", *STUDENTS, "--assignments", ASSIGNMENT, "--env", str(CLASS_ENV)],
                              env=env, capture_output=True, text=True, timeout=DEADLINE_S)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        provision_s = time.perf_counter() - t
        provision_steps = json.loads(done.stdout.strip().splitlines()[-1])["seconds"]
        server = Hub(repo, base, env)
        t = time.perf_counter()
        server.start()
        hub_start_s = time.perf_counter() - t
        t = time.perf_counter()
        done = subprocess.run([python, str(repo / "deploy" / "jupyterhub" / "provision.py"), "--root",
                               str(course_root), "enrol"], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        enrol_s = time.perf_counter() - t
        print(f"\ncopy {copy_s:.1f} s, provision {provision_s:.1f} s {provision_steps}, "
              f"hub start {hub_start_s:.1f} s, enrol {enrol_s:.1f} s")
        passwords = dict(line.split() for line in (course_root / "hub" / "passwords.txt").read_text().splitlines())
        yield {"hub": server, "url": server.url, "cert": str(cert), "base": base, "repo": repo,
               "course_root": course_root, "passwords": passwords, "port": ports["COURSE_PORT"],
               "figures": {"checkout_copy_s": round(copy_s, 1), "provision_s": round(provision_s, 1),
                           "provision_steps_s": provision_steps,
                           "hub_start_s": round(hub_start_s, 1), "enrol_s": round(enrol_s, 1),
                           "class_env": {k: v for k, v in json.loads((course_root / "env" / ".class-env.json")
                                                                     .read_text()).items() if k != "fingerprint"}}}
    finally:
        t = time.perf_counter()
        if "server" in locals() and server.process is not None:
            server.stop()
        pid_file = course_root / "hub" / "proxy.pid"
        if pid_file.exists():  # the proxy the hub started, if it outlived the hub
            try:
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
        if (base / "hub.log").exists():   # for a look after a failure (outside the tree)
            shutil.copy(base / "hub.log", Path(tempfile.gettempdir()) / "tlhub-last.log")
        stopped = time.perf_counter()
        remove_test_users()   # the user servers outlive the hub (cleanup_servers=False): stopped by uid
        removed = time.perf_counter()
        subprocess.run(["rm", "-rf", "--one-file-system", str(base)], check=False)  # faster than rmtree
        print(f"\nteardown: hub {stopped - t:.1f} s, users {removed - stopped:.1f} s, "
              f"files {time.perf_counter() - removed:.1f} s")


# -- one user, through the hub's and the server's REST APIs -------------------------------------------

class _Session(requests.Session):
    """Every request trusts the test's certificate (a Session's own ``verify`` loses to
    REQUESTS_CA_BUNDLE in the environment)."""

    def __init__(self, cert: str):
        super().__init__()
        self.ca = cert

    def request(self, *args, **kwargs):
        kwargs["verify"] = self.ca
        return super().request(*args, **kwargs)


def session(hub):
    return _Session(hub["cert"])


def try_login(hub, name: str, password: str):
    s = session(hub)
    s.get(f"{hub['url']}/hub/login", timeout=30)
    r = s.post(f"{hub['url']}/hub/login", data={"username": name, "password": password,
                                               "_xsrf": s.cookies.get("_xsrf", "")},
               allow_redirects=False, timeout=60)
    return s, r


def login(hub, name: str) -> tuple:
    """Log in through the form with the user's own password; return (session, API token)."""
    s, r = try_login(hub, name, hub["passwords"][name])
    assert r.status_code == 302, f"login of {name}: HTTP {r.status_code}"
    r = s.post(f"{hub['url']}/hub/api/users/{name}/tokens", json={"note": "test_hub", "expires_in": 3600},
               headers={"X-XSRFToken": s.cookies.get("_xsrf", "")}, timeout=30)
    assert r.status_code in (200, 201), r.text
    return s, r.json()["token"]


def api(hub, token: str):
    s = session(hub)
    s.headers["Authorization"] = f"token {token}"
    return s


def spawn(hub, name: str, token: str) -> float:
    """Start the user's server; return the seconds until the hub reports it ready."""
    s = api(hub, token)
    start = time.perf_counter()
    r = s.post(f"{hub['url']}/hub/api/users/{name}/server", timeout=180)
    assert r.status_code in (201, 202), r.text
    wait_for(lambda: s.get(f"{hub['url']}/hub/api/users/{name}", timeout=30).json()["servers"]
             .get("", {}).get("ready"), f"{name}'s server", 240)
    return time.perf_counter() - start


def ensure_running(hub, name: str, token: str) -> None:
    """Start the user's server again if the culler stopped it while the test was busy elsewhere."""
    model = api(hub, token).get(f"{hub['url']}/hub/api/users/{name}", timeout=30).json()
    if not model["servers"].get("", {}).get("ready"):
        spawn(hub, name, token)


class Kernel:
    """A kernel of the user's server, driven over its websocket (wss through the proxy)."""

    def __init__(self, hub, name: str, token: str, path: str = "scratch.ipynb", kernel_id: str | None = None):
        self.hub, self.name, self.token = hub, name, token
        self.http = api(hub, token)
        self.base = f"{hub['url']}/user/{name}/api"
        self.session_id = None
        if kernel_id is None:
            r = self.http.post(f"{self.base}/sessions", timeout=120, json={
                "path": path, "type": "notebook", "name": Path(path).name, "kernel": {"name": "python3"}})
            assert r.status_code == 201, r.text
            self.session_id, kernel_id = r.json()["id"], r.json()["kernel"]["id"]
        self.id = kernel_id
        self.ws = websocket.create_connection(
            f"wss://127.0.0.1:{hub['port']}/user/{name}/api/kernels/{kernel_id}/channels",
            header=[f"Authorization: token {token}"], timeout=300, sslopt={"ca_certs": hub["cert"]})

    def run(self, code: str) -> str:
        """Run one cell; return its stdout and error lines."""
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({"channel": "shell", "buffers": [], "metadata": {}, "parent_header": {},
                                 "header": {"msg_id": msg_id, "msg_type": "execute_request",
                                            "session": uuid.uuid4().hex, "username": self.name, "version": "5.3"},
                                 "content": {"code": code, "silent": False, "store_history": True,
                                             "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
        text = []
        end = time.monotonic() + 300
        while time.monotonic() < end:
            msg = json.loads(self.ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id or msg["channel"] != "iopub":
                continue
            kind, content = msg["header"]["msg_type"], msg["content"]
            if kind == "stream":
                text.append(content["text"])
            elif kind == "error":
                text.append(f"{content['ename']}: {content['evalue']}")
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(text)
        raise AssertionError(f"cell did not finish in {self.name}'s kernel: {code[:200]}")

    def close(self, shutdown: bool = True):
        self.ws.close()
        if shutdown and self.session_id:
            self.http.delete(f"{self.base}/sessions/{self.session_id}", timeout=60)


PROBE = """
import os, json
def probe(path):
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, 'rb').read(1)
        return 'READ'
    except PermissionError:
        return 'DENIED'
    except FileNotFoundError:
        return 'MISSING'
print(json.dumps({p: probe(p) for p in %r}))
"""


def refused(r) -> bool:
    """ngshare (or the hub in front of it) gave nothing: any answer but a JSON success."""
    try:
        body = r.json()
    except ValueError:
        body = {}
    return r.status_code != 200 or body.get("success") is not True


def student_works(hub, name: str, other: str, solve: bool) -> dict:
    """One student's session: log in, spawn, fetch, try the classmate's and teacher's files and
    accounts, answer, run, submit."""
    _, token = login(hub, name)
    seconds = spawn(hub, name, token)
    uid = pwd.getpwnam(name).pw_uid
    idle = rss_mb(uid)
    http = api(hub, token)
    url = f"{hub['url']}/user/{name}"
    assert http.get(f"{url}/api/contents/chapters", timeout=60).status_code == 200
    r = http.post(f"{url}/assignments/fetch", timeout=120, json={"course_id": COURSE_ID, "assignment_id": ASSIGNMENT})
    assert r.status_code == 200 and '"success": false' not in r.text, r.text
    path = f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
    nb = nbformat.from_dict(http.get(f"{url}/api/contents/{path}", timeout=60).json()["content"])
    answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert answers and all("raise NotImplementedError()" in c.source for c in answers)
    if solve:
        answers[0].source = hub["solution"]
    code = [c for c in nb.cells if c.cell_type == "code"]

    teacher = Path(pwd.getpwnam(INSTRUCTOR).pw_dir)
    targets = [pwd.getpwnam(other).pw_dir, str(Path(pwd.getpwnam(other).pw_dir) / "chapters"),
               str(teacher), str(teacher / "course" / "source"), str(teacher / "course" / "gradebook.db"),
               str(teacher / "student-passwords.txt"), str(hub["course_root"] / "hub"),
               str(hub["course_root"] / "ngshare"), str(hub["repo"])]
    kernel = Kernel(hub, name, token, path)
    try:
        where = kernel.run("import transformer_lib, sys; print(transformer_lib.__file__); print(sys.prefix)")
        reach = json.loads(kernel.run(PROBE % (targets,)).strip().splitlines()[-1])
        outputs = [kernel.run(cell.source) for cell in code]
        with_kernel = rss_mb(uid)
    finally:
        kernel.close()
    for cell, text in zip(code, outputs):
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)] if text else []
    r = http.put(f"{url}/api/contents/{path}", timeout=60, json={"type": "notebook", "format": "json", "content": nb})
    assert r.status_code == 200, r.text
    r = http.post(f"{url}/assignments/submit", timeout=120, json={"course_id": COURSE_ID, "assignment_id": ASSIGNMENT})
    assert r.status_code == 200 and '"success": false' not in r.text, r.text

    # through the hub, with this student's own token: nothing of the classmate's
    hub_api = f"{hub['url']}/hub/api"
    through_hub = {
        "their server's files": http.get(f"{hub['url']}/user/{other}/api/contents", timeout=60,
                                         allow_redirects=False).status_code,
        "start their server": http.post(f"{hub_api}/users/{other}/server", timeout=60).status_code,
        "make their token": http.post(f"{hub_api}/users/{other}/tokens", json={}, timeout=60).status_code,
        "read their model": http.get(f"{hub_api}/users/{other}", timeout=60).status_code,
    }
    return {"spawn_s": seconds, "rss_idle_mb": idle, "rss_kernel_mb": with_kernel, "outputs": "\n".join(outputs),
            "where": where, "reach": reach, "through_hub": through_hub, "token": token}


def student_idles(hub, name: str) -> None:
    """Log in, start a server, then do nothing (the idle culler's case)."""
    _, token = login(hub, name)
    STATE["idle_spawn_s"] = spawn(hub, name, token)
    STATE["idle_token"], STATE["idle_since"] = token, time.monotonic()


# -- the tests, in order (they share one hub) ------------------------------------------------------

STATE: dict = {}


def test_the_class_environment_is_not_the_checkout(hub):
    env = hub["course_root"] / "env"
    assert env.stat().st_mode & 0o005 == 0o005            # every account can enter and read it
    site = env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert (site / "transformer_lib" / "__init__.py").is_file()
    for pth in list(site.glob("*.pth")) + list(site.glob("__editable__*")):
        text = pth.read_text()
        assert str(ROOT) not in text and str(hub["repo"]) not in text, pth
    chapters = {p.name for p in (ROOT / "chapters").glob("*.ipynb")}
    assert chapters and not [p for p in env.rglob("*.ipynb") if p.name in chapters], "a chapter in the env"
    assert hub["repo"].parent.stat().st_mode & 0o777 == 0o700   # the checkout really is private


def test_https_only_with_the_shipped_certificate(hub):
    r = requests.get(f"{hub['url']}/hub/api", verify=hub["cert"], timeout=30)
    assert r.status_code == 200 and r.url.startswith("https://")
    with pytest.raises(requests.exceptions.SSLError):   # a client that does not trust it refuses it
        requests.get(f"{hub['url']}/hub/api", timeout=30)
    with pytest.raises(requests.ConnectionError):       # no plain HTTP on the class's port
        requests.get(f"http://127.0.0.1:{hub['port']}/hub/api", timeout=30)


def test_each_account_has_its_own_password(hub):
    p = hub["passwords"]
    assert len(set(p.values())) == len(p) == len(STUDENTS) + 1
    wrong = {"tlhubstu1 with tlhubstu2's password": ("tlhubstu1", p["tlhubstu2"]),
             "the instructor with a student's password": (INSTRUCTOR, p["tlhubstu1"]),
             "nobody, a Unix account off the roster": ("nobody", p["tlhubstu1"])}
    with ThreadPoolExecutor(len(wrong)) as pool:   # at once: PAM waits ~2 s after each failure
        tries = {what: pool.submit(try_login, hub, *who) for what, who in wrong.items()}
        for what, attempt in tries.items():
            assert attempt.result(timeout=180)[1].status_code != 302, f"logged in as {what}"
    handout = Path(pwd.getpwnam(INSTRUCTOR).pw_dir) / "student-passwords.txt"
    assert handout.stat().st_mode & 0o777 == 0o600 and handout.stat().st_uid == pwd.getpwnam(INSTRUCTOR).pw_uid
    assert set(line.split()[0] for line in handout.read_text().splitlines()) == set(STUDENTS)


def test_two_students_at_once_are_kept_apart(hub):
    teacher = pwd.getpwnam(INSTRUCTOR)
    course_dir = Path(teacher.pw_dir) / "course"
    source = nbformat.read(str(course_dir / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"), as_version=4)
    solution = next(c.source for c in source.cells if c.metadata.get("nbgrader", {}).get("solution"))
    hub["solution"] = re.sub(r"^\s*### (BEGIN|END) SOLUTION\n?", "", solution, flags=re.M)
    for name in STUDENTS + [INSTRUCTOR]:
        assert Path(pwd.getpwnam(name).pw_dir).stat().st_mode & 0o777 == 0o700

    start = time.perf_counter()
    with ThreadPoolExecutor(3) as pool:
        idle = pool.submit(student_idles, hub, IDLE_STUDENT)
        one = pool.submit(student_works, hub, "tlhubstu1", "tlhubstu2", True)
        two = pool.submit(student_works, hub, "tlhubstu2", "tlhubstu1", False)
        results = {"tlhubstu1": one.result(timeout=DEADLINE_S), "tlhubstu2": two.result(timeout=DEADLINE_S)}
        idle.result(timeout=DEADLINE_S)
    STATE["class_wall_s"] = time.perf_counter() - start
    STATE["results"] = results
    env = str((hub["course_root"] / "env").resolve())
    for name, result in results.items():
        verdict = "PASS" if name == "tlhubstu1" else "NOT YET"
        assert f"{verdict} [intro.mean_of_squares]" in result["outputs"], (name, result["outputs"][-2000:])
        assert result["where"].split()[0].startswith(env) and result["where"].split()[1] == env, result["where"]
        assert set(result["reach"].values()) == {"DENIED"}, (name, result["reach"])
        assert all(code in (403, 404) for code in result["through_hub"].values()), (name, result["through_hub"])

    # the exchange: a student reads, lists or forges no one else's submission
    ngshare = f"http://127.0.0.1:{hub['hub'].env['COURSE_NGSHARE_PORT']}/services/ngshare"
    thief = {"Authorization": f"token {results['tlhubstu2']['token']}"}
    attempts = {
        "download theirs": requests.get(f"{ngshare}/submission/{COURSE_ID}/{ASSIGNMENT}/tlhubstu1", headers=thief, timeout=30),
        "list all": requests.get(f"{ngshare}/submissions/{COURSE_ID}/{ASSIGNMENT}", headers=thief, timeout=30),
        "list theirs": requests.get(f"{ngshare}/submissions/{COURSE_ID}/{ASSIGNMENT}/tlhubstu1", headers=thief, timeout=30),
        "add a student": requests.post(f"{ngshare}/student/{COURSE_ID}/tlhubstu9", headers=thief, timeout=30,
                                       data={"first_name": "x", "last_name": "x", "email": "x"}),
        "make themselves instructor": requests.post(f"{ngshare}/instructor/{COURSE_ID}/tlhubstu2", headers=thief,
                                                    timeout=30, data={"first_name": "x", "last_name": "x", "email": "x"}),
        "no token": requests.get(f"{ngshare}/submissions/{COURSE_ID}/{ASSIGNMENT}/tlhubstu1", timeout=30),
    }
    for what, r in attempts.items():
        assert refused(r), (what, r.status_code, r.text[:300])

    # the instructor collects and autogrades, as their own Unix user, in their course folder
    sys.path.insert(0, str(HUB))
    import provision
    _, teacher_token = login(hub, INSTRUCTOR)
    STATE["teacher_token"] = teacher_token
    provision.run_as(teacher, hub["course_root"], "nbgrader", "collect", ASSIGNMENT, "--update", cwd=course_dir,
                     token=teacher_token)
    t = time.perf_counter()
    # two submissions: no kernel is started ahead for a third (what bookkit.grading.autograde_class sets)
    provision.run_as(teacher, hub["course_root"], "nbgrader", "autograde", ASSIGNMENT,
                     "--SandboxedExecute.kernels_needed=2", cwd=course_dir, token=teacher_token)
    STATE["autograde_s_per_submission"] = (time.perf_counter() - t) / 2
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}", COURSE_ID) as gb:
        rows = {sub.student_id: sub.score for sub in gb.find_assignment(ASSIGNMENT).submissions}
    assert rows == {"tlhubstu1": 1.0, "tlhubstu2": 0.0}, rows

    # a forged submission (tlhubstu2 posts one naming tlhubstu1) is recorded as tlhubstu2's own
    requests.post(f"{ngshare}/submission/{COURSE_ID}/{ASSIGNMENT}", headers=thief, timeout=30,
                  data={"student_id": "tlhubstu1", "files": "[]"})
    teacher_headers = {"Authorization": f"token {teacher_token}"}
    for path in (f"submission/{COURSE_ID}/{ASSIGNMENT}/tlhubstu1", f"submissions/{COURSE_ID}/{ASSIGNMENT}"):
        r = requests.get(f"{ngshare}/{path}", headers=teacher_headers, timeout=30)   # the same URLs work
        assert r.status_code == 200 and r.json()["success"], (path, r.text[:300])     # for the instructor
    counts = {n: len(requests.get(f"{ngshare}/submissions/{COURSE_ID}/{ASSIGNMENT}/{n}", headers=teacher_headers,
                                  timeout=30).json()["submissions"]) for n in ("tlhubstu1", "tlhubstu2")}
    assert counts == {"tlhubstu1": 1, "tlhubstu2": 2}, counts


def test_the_formgrader_is_the_instructors_alone(hub):
    token = STATE["teacher_token"]
    STATE["instructor_spawn_s"] = spawn(hub, INSTRUCTOR, token)
    r = api(hub, token).get(f"{hub['url']}/user/{INSTRUCTOR}/formgrader/api/assignments", timeout=120)
    assert r.status_code == 200 and ASSIGNMENT in r.text, r.text[:500]
    ensure_running(hub, "tlhubstu1", STATE["results"]["tlhubstu1"]["token"])
    student = api(hub, STATE["results"]["tlhubstu1"]["token"])
    r = student.get(f"{hub['url']}/user/tlhubstu1/formgrader/api/assignments", timeout=60)
    assert r.status_code == 404, (r.status_code, r.text[:300])
    page = student.get(f"{hub['url']}/user/tlhubstu1/lab", timeout=60).text
    config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                  page, re.S).group(1))
    for plugin in ("formgrader", "create-assignment", "course-list"):
        assert f"@jupyter/nbgrader:{plugin}" in config["disabledExtensions"], config["disabledExtensions"]


def test_memory_and_cpu_are_limited_per_student(hub):
    name, token = "tlhubstu1", STATE["results"]["tlhubstu1"]["token"]
    groups = limits.groups_of(name)
    ensure_running(hub, name, token)
    kernel = Kernel(hub, name, token)
    try:
        inside = kernel.run("print(open('/proc/self/cgroup').read())")
        assert f"{limits.GROUP}/{name}" in inside, inside
        over, under = (MEM_LIMIT_MB + 512) * 2**20, 200 * 2**20
        code = ("import subprocess, sys\n"
                "def grab(n):\n"
                "    return subprocess.run([sys.executable, '-c', f'x = bytearray(b\"1\") * {n}']).returncode\n"
                f"print('under', grab({under})); print('over', grab({over}))")
        out = kernel.run(code)
        assert "under 0" in out and "over -9" in out, out   # the child over the limit is OOM-killed
        before = throttled(groups["cpu"])
        burn = ("import resource, subprocess, sys, time\n"
                "def used():\n"
                "    r = resource.getrusage(resource.RUSAGE_CHILDREN); return r.ru_utime + r.ru_stime\n"
                "c, t = used(), time.time(); loop = 'import time\\nend = time.time() + 4\\nwhile time.time() < end: pass'\n"
                "ps = [subprocess.Popen([sys.executable, '-c', loop]) for _ in range(8)]\n"
                "[p.wait() for p in ps]; print('cpu', used() - c, time.time() - t)")
        out = kernel.run(burn)
        cpu, wall = map(float, re.search(r"cpu (\S+) (\S+)", out).groups())
        assert cpu <= CPU_LIMIT * wall * 1.25 + 0.3, (cpu, wall)   # eight loops got at most the quota
        # where the loops got near the quota (not starved by a busy machine), the group was throttled
        if cpu >= 0.8 * CPU_LIMIT * wall:
            assert throttled(groups["cpu"]) > before, "the CPU quota never throttled eight busy loops"
        STATE["cpu_burn"] = {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2)}
    finally:
        kernel.close()


def throttled(cpu_group: Path) -> int:
    stat = dict(line.split() for line in (cpu_group / "cpu.stat").read_text().splitlines())
    return int(stat["nr_throttled"])


def test_the_idle_culler_stops_an_idle_server(hub):
    """tlhubstu3 has been idle since its spawn, while the tests above ran (more than the timeout on
    any machine: the culler has stopped it already). Before the restart test: a restarted hub's new
    proxy adds every route again, which counts as activity and restarts the clock."""
    http = api(hub, STATE["idle_token"])
    t = time.perf_counter()
    deadline = STATE["idle_since"] + CULL_TIMEOUT_S + CULL_EVERY_S + 120 - time.monotonic()
    wait_for(lambda: "" not in http.get(f"{hub['url']}/hub/api/users/{IDLE_STUDENT}", timeout=30).json()["servers"],
             "the culler to stop the idle server", max(deadline, 30), every=1)
    assert not user_pids(pwd.getpwnam(IDLE_STUDENT).pw_uid)
    # the culler's own line in the hub's log: it stopped the server for being idle, not earlier
    log = (hub["base"] / "hub.log").read_text()
    culled = re.findall(rf"Culling server {IDLE_STUDENT} \(inactive for (\d+):(\d+):(\d+)\)", log)
    # COURSE_CULL_USERS: the culler saw no other server (idle ones included) and stopped none
    assert set(re.findall(r"Culling server (\S+) ", log)) <= {IDLE_STUDENT}, re.findall(r"Culling server .*", log)
    assert culled, "the server went away, but not through the idle culler"
    h, m, sec = map(int, culled[0])
    assert 3600 * h + 60 * m + sec >= CULL_TIMEOUT_S, culled
    STATE["cull_wait_s"] = time.perf_counter() - t
    write_figures(hub)


def test_servers_and_kernels_survive_a_hub_restart(hub):
    name, token = "tlhubstu1", STATE["results"]["tlhubstu1"]["token"]
    ensure_running(hub, name, token)
    kernel = Kernel(hub, name, token)
    marker = uuid.uuid4().hex
    kernel.run(f"marker = {marker!r}")
    kernel.close(shutdown=False)
    server_pids = user_pids(pwd.getpwnam(name).pw_uid)
    hub["hub"].stop()
    assert all(Path(f"/proc/{pid}").exists() for pid in server_pids), "a user process died with the hub"
    hub["hub"].start()
    wait_for(lambda: api(hub, token).get(f"{hub['url']}/hub/api/users/{name}", timeout=30).json()["servers"]
             .get("", {}).get("ready"), f"{name}'s server after the restart", 60)
    kernels = api(hub, token).get(f"{hub['url']}/user/{name}/api/kernels", timeout=60).json()
    assert kernel.id in [k["id"] for k in kernels], kernels
    again = Kernel(hub, name, token, kernel_id=kernel.id)
    try:
        assert again.run("print(marker)").strip() == marker
    finally:
        again.close(shutdown=False)


def write_figures(hub) -> None:
    results = STATE["results"]
    figures = {
        "students_concurrent": len(results), "assignment": ASSIGNMENT,
        "spawn_s": {n: round(r["spawn_s"], 2) for n, r in results.items()} | {"tlhubstu3": round(STATE["idle_spawn_s"], 2)},
        "rss_idle_server_mb": {n: round(r["rss_idle_mb"]) for n, r in results.items()},
        "rss_with_kernel_mb": {n: round(r["rss_kernel_mb"]) for n, r in results.items()},
        "instructor_spawn_s": round(STATE["instructor_spawn_s"], 2),
        "class_wall_s": round(STATE["class_wall_s"], 1),
        "autograde_s_per_submission": round(STATE["autograde_s_per_submission"], 1),
        "limits": {"mem_mb": MEM_LIMIT_MB, "cpu": CPU_LIMIT, "cpu_burn_eight_loops": STATE.get("cpu_burn")},
        **hub["figures"],
        "machine": {"cpu_cores": os.cpu_count(), "load_avg_1min": round(os.getloadavg()[0], 2),
                    "mem_total_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)},
        "note": "two students concurrently (login, spawn, fetch through ngshare, run chapter 0, submit) over "
                "HTTPS, the idle tlhubstu3 logging in and spawning beside them (three spawns at once); the "
                "instructor's spawn is the one alone; RSS sums every process of the student's Unix user; "
                "OMP_NUM_THREADS=1 per kernel",
    }
    print("\n" + json.dumps(figures, indent=1))
    if os.environ.get("TLIB_HUB_RESULTS"):  # benchmarks/hub.py: a measurement run, not a test run
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(figures, indent=1) + "\n")


# -- Kubernetes: cannot run here; the values are checked against the chart's schema and a checklist -----

Z2JH = HUB / "z2jh"


def _values() -> dict:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load((Z2JH / "config.yaml").read_text())


def helm_merge(defaults, ours):
    """Helm's merge of a values file onto the chart's defaults: maps merge, anything else replaces,
    null deletes a default."""
    if not (isinstance(defaults, dict) and isinstance(ours, dict)):
        return ours
    merged = dict(defaults)
    for key, value in ours.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = helm_merge(defaults.get(key), value)
    return merged


def test_z2jh_values_match_the_charts_schema():
    jsonschema = pytest.importorskip("jsonschema")
    yaml = pytest.importorskip("yaml")
    schema = json.loads((Z2JH / "values.schema.json").read_text())
    defaults = yaml.safe_load((Z2JH / "chart-values.yaml").read_text())
    jsonschema.validate(defaults, schema)                 # the vendored pair agrees
    values = helm_merge(defaults, _values())
    jsonschema.validate(values, schema)
    for where, key in (("proxy.https", "hostz"), ("singleuser", "memoryLimit"), ("cull", "timout")):
        bad = json.loads(json.dumps(values))          # a misspelt key is caught: the schema has teeth
        node = bad
        for part in where.split("."):
            node = node[part]
        node[key] = 1
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


class _Spawner:
    """What the instructor hook touches on a KubeSpawner: a user name, volumes, mounts, environment."""

    def __init__(self, name):
        self.user = type("User", (), {"name": name})()
        self.volumes, self.volume_mounts, self.environment = [], [], {"JUPYTER_CONFIG_PATH": "/etc/course/student"}


def test_z2jh_values_keep_students_apart(tmp_path):
    v = _values()
    https = v["proxy"]["https"]
    assert https["enabled"] is True and https["hosts"] and https["type"] in ("secret", "letsencrypt", "manual")
    assert v["singleuser"]["memory"]["limit"] and v["singleuser"]["cpu"]["limit"]
    assert v["cull"]["enabled"] is True and v["cull"]["timeout"] > 0
    config = v["hub"]["config"]
    assert config["JupyterHub"]["authenticator_class"] not in ("shared-password", "dummy")
    assert config["NativeAuthenticator"]["open_signup"] is False
    # the exchange is ngshare, reached by every pod's nbgrader at the service's URL; no shared volume
    url = v["hub"]["services"]["ngshare"]["url"]
    assert "access:services!service=ngshare" in v["hub"]["loadRoles"]["server"]["scopes"]
    files = v["singleuser"]["extraFiles"]
    for name in ("student-nbgrader", "instructor-nbgrader"):
        assert f'configureExchange(c, "{url}/services/ngshare")' in files[name]["stringData"]
    assert not v["singleuser"].get("storage", {}).get("extraVolumes"), "no shared exchange volume"
    # students get the same switched-off grading tools as on the one-machine server
    import provision
    provision.role_config(tmp_path, "student", COURSE_ID)
    one_machine = json.loads((tmp_path / "etc" / "jupyter-student" / "labconfig" / "page_config.json").read_text())
    nbgrader_off = {k for k in one_machine["disabledExtensions"] if k.startswith("@jupyter/nbgrader")}
    assert nbgrader_off == set(files["student-lab"]["data"]["disabledExtensions"])
    server = json.loads((tmp_path / "etc" / "jupyter-student" / "jupyter_server_config.json").read_text())
    assert server == files["student-server"]["data"]
    # the course volume and the instructor's config go to the instructor's pod alone
    c = type("Config", (), {})()
    c.KubeSpawner = type("KubeSpawner", (), {})()
    exec(v["hub"]["extraConfig"]["course"], {"c": c})
    teacher, student = _Spawner(v["hub"]["config"]["Authenticator"]["admin_users"][0]), _Spawner("alice")
    c.KubeSpawner.pre_spawn_hook(teacher)
    c.KubeSpawner.pre_spawn_hook(student)
    assert [m["mountPath"] for m in teacher.volume_mounts] == ["/home/jovyan/course"]
    assert teacher.environment["JUPYTER_CONFIG_PATH"] == "/etc/course/instructor"
    assert student.volumes == [] and student.volume_mounts == []
    assert student.environment["JUPYTER_CONFIG_PATH"] == "/etc/course/student"
    assert v["singleuser"]["extraEnv"]["JUPYTER_CONFIG_PATH"] == "/etc/course/student"


def test_ngshare_saves_releases_and_submissions_under_sqlalchemy_2():
    """ngshare 0.6 relied on SQLAlchemy 1.x's cascade backrefs; ngshare_local.patch_database() restores the
    saving of a new assignment and submission (without it both counts are 0)."""
    pytest.importorskip("ngshare")
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker
    import ngshare_local
    ngshare_local.patch_database()
    from ngshare.database.database import Assignment, Base, Course, Submission, User
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    db = sessionmaker(bind=engine)()
    teacher, student = User("t"), User("s")
    db.add_all([teacher, student])
    course = Course("c", [teacher])
    db.add(course)
    db.commit()
    assignment = Assignment("a1", course)
    db.commit()
    Submission(student, assignment)
    db.commit()
    assert db.query(Assignment).count() == 1
    assert [(s.student.id, s.assignment.id) for s in db.query(Submission)] == [("s", "a1")]
