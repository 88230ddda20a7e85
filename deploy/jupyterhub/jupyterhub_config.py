"""JupyterHub for a class on one machine, keeping students apart (the course server).

    sudo .venv/bin/python deploy/jupyterhub/provision.py --root /srv/course \
        --instructor teacher --students alice bob carol   # users, passwords, class env, chapters, course
    sudo COURSE_ROOT=/srv/course COURSE_SSL_CERT=/etc/ssl/course.pem COURSE_SSL_KEY=/etc/ssl/course.key \
        .venv/bin/jupyterhub -f deploy/jupyterhub/jupyterhub_config.py
    sudo .venv/bin/python deploy/jupyterhub/provision.py --root /srv/course enrol   # the exchange's roster

Who is who. Every student is a real Unix user with their own generated password, checked by PAM
(``provision.py`` sets it and hands the list to the instructor). PAM rather than NativeAuthenticator:
nbgrader and the file permissions below already key everything on the Unix account, so the account's
own password is the one credential that cannot drift from it, and there is no self sign-up in which a
student could claim a classmate's roster name first. Only roster names may log in.

What a student can reach. Each server runs as its student (``LimitedSpawner``), in a 0700 home that
holds the student copies of the chapters (no solutions). The instructor's course (``~/course``:
source with every solution, gradebook) is in the instructor's 0700 home. Servers and kernels run
from ``COURSE_ROOT/env`` (``class_env.py``): the library and Jupyter, never the repository
checkout. The nbgrader exchange is ngshare, a hub service (root-owned storage, 0700): it takes a
user's identity from their hub token, so a student can submit only as themselves and read only their
own submissions. The formgrader and the assignment-creation tools are switched off for students
(their server extensions and JupyterLab plugins); what really keeps them out of the course is the
file permissions above.

Limits and lifetime. Memory and CPU per student are enforced by a control group (``limits.py``);
idle servers are stopped by ``jupyterhub-idle-culler`` (a hub service); ``cleanup_servers`` is off,
so restarting the hub (an upgrade, a config change) leaves every student's server and kernels running.

TLS. With ``COURSE_SSL_CERT`` / ``COURSE_SSL_KEY`` the proxy serves HTTPS itself (JupyterHub's
``ssl_cert`` / ``ssl_key``); the hub's internal API and the user servers stay on 127.0.0.1.

Settings (environment):

    COURSE_ROOT              /srv/course (provision.py's --root)
    COURSE_IP, COURSE_PORT   where the class connects (default 127.0.0.1:8000; 0.0.0.0 to open it)
    COURSE_API_PORT, COURSE_HUB_PORT, COURSE_NGSHARE_PORT   internal ports on 127.0.0.1
    COURSE_SSL_CERT, COURSE_SSL_KEY   PEM certificate chain and key for HTTPS
    COURSE_MEM_LIMIT, COURSE_CPU_LIMIT  per student (default 2G, 1 core); COURSE_LIMITS=none: off
    COURSE_CULL_TIMEOUT, COURSE_CULL_EVERY   idle seconds before a server stops (3600), check period (300)
    COURSE_CULL_USERS        comma-separated users whose idle servers the culler may stop (default: all;
                             the culler's role is narrowed to them, so it does not even see the others)
    COURSE_ACTIVITY_INTERVAL  how often activity is recorded, seconds (300)
    COURSE_PROXY             configurable-http-proxy's executable (default: `make hub-deps`'s copy)
"""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from limits import LimitedSpawner  # noqa: E402
from provision import read_roster, read_setup_token  # noqa: E402

COURSE_ROOT = Path(os.environ.get("COURSE_ROOT", "/srv/course"))
ENV_BIN = COURSE_ROOT / "env" / "bin"                   # provision.py's class environment
PROXY = os.environ.get("COURSE_PROXY", str(HERE / "node_modules" / ".bin" / "configurable-http-proxy"))
HUB_PORT = int(os.environ.get("COURSE_HUB_PORT", "8081"))
NGSHARE_PORT = int(os.environ.get("COURSE_NGSHARE_PORT", "10101"))
ACTIVITY_S = int(os.environ.get("COURSE_ACTIVITY_INTERVAL", "300"))

# the culler's scopes: unfiltered, or one filtered copy of each per listed user
CULL_ONLY = [f"!user={u.strip()}" for u in os.environ.get("COURSE_CULL_USERS", "").split(",") if u.strip()] or [""]

students, instructors = read_roster(COURSE_ROOT / "roster.txt")
c = get_config()  # noqa: F821  (defined by JupyterHub when it loads this file)

# -- network --------------------------------------------------------------------------------------
c.JupyterHub.ip = os.environ.get("COURSE_IP", "127.0.0.1")
c.JupyterHub.port = int(os.environ.get("COURSE_PORT", "8000"))
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = HUB_PORT
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ.get('COURSE_API_PORT', '8001')}"
c.ConfigurableHTTPProxy.command = [PROXY]
c.ConfigurableHTTPProxy.pid_file = str(COURSE_ROOT / "hub" / "proxy.pid")
if os.environ.get("COURSE_SSL_CERT"):
    c.JupyterHub.ssl_cert = os.environ["COURSE_SSL_CERT"]
    c.JupyterHub.ssl_key = os.environ["COURSE_SSL_KEY"]
c.JupyterHub.last_activity_interval = ACTIVITY_S

# -- state: root only; servers outlive a hub restart --------------------------------------------------
c.JupyterHub.db_url = f"sqlite:///{COURSE_ROOT / 'hub' / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(COURSE_ROOT / "hub" / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(COURSE_ROOT / "hub" / "jupyterhub.pid")
c.JupyterHub.cleanup_servers = False

# -- who may log in: each Unix account with its own password (PAM) ----------------------------------------
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.open_sessions = False                # no logind/systemd session on this machine
c.Authenticator.allowed_users = students | instructors
c.Authenticator.admin_users = instructors

# -- each user's server: as that Unix user, from the class environment, in a control group ----------------
c.JupyterHub.spawner_class = LimitedSpawner
c.Spawner.cmd = [str(ENV_BIN / "jupyterhub-singleuser")]
c.Spawner.notebook_dir = "~"
c.Spawner.default_url = "/lab/tree/chapters"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.Spawner.mem_limit = os.environ.get("COURSE_MEM_LIMIT", "2G")
c.Spawner.cpu_limit = float(os.environ.get("COURSE_CPU_LIMIT", "1"))
c.Spawner.environment = {
    # a kernel per student on shared cores: one thread each (the CPU limit is about one core)
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TLIB_DEVICE": "cpu",
    "TLIB_STATIC_WIDGETS": "0",                        # live widgets only: no static precomputation
    "PATH": f"{ENV_BIN}:/usr/local/bin:/usr/bin:/bin",
    "PYTHONSAFEPATH": "1",                              # a file beside a notebook cannot shadow a package
    "JUPYTERHUB_ACTIVITY_INTERVAL": str(ACTIVITY_S),
    "COURSE_NGSHARE_URL": f"http://127.0.0.1:{NGSHARE_PORT}/services/ngshare",  # nbgrader's exchange
}


def _per_role(spawner):
    """Students and the instructor get different Jupyter config folders (COURSE_ROOT/etc/...):
    the student one switches the formgrader and assignment creation off. Only root needs
    --allow-root."""
    role = "instructor" if spawner.user.name in instructors else "student"
    spawner.environment = dict(spawner.environment,
                               JUPYTER_CONFIG_PATH=str(COURSE_ROOT / "etc" / f"jupyter-{role}"))
    if role == "instructor":
        spawner.mem_limit = os.environ.get("COURSE_INSTRUCTOR_MEM_LIMIT", spawner.mem_limit)
        spawner.cpu_limit = float(os.environ.get("COURSE_INSTRUCTOR_CPU_LIMIT", spawner.cpu_limit))
    args = [a for a in spawner.args if a != "--allow-root"]
    if spawner.user.name == "root":
        args.append("--allow-root")
    spawner.args = args


c.Spawner.pre_spawn_hook = _per_role

# -- services: the idle culler and the nbgrader exchange (ngshare) --------------------------------------
# the token user servers get may reach ngshare (ngshare asks the hub whose token it is)
c.JupyterHub.load_roles = [
    {"name": "server", "scopes": ["users:activity!user", "access:servers!server",
                                  "access:services!service=ngshare"]},
    {"name": "idle-culler", "services": ["idle-culler"],
     "scopes": [scope + only for scope in ("list:users", "read:users:activity", "read:servers", "delete:servers")
                for only in CULL_ONLY]},
    {"name": "course-setup", "services": ["course-setup"], "scopes": ["access:services!service=ngshare"]},
]
ngshare_dir = COURSE_ROOT / "ngshare"
c.JupyterHub.services = [
    {"name": "idle-culler",
     "command": [sys.executable, "-m", "jupyterhub_idle_culler",
                 f"--timeout={os.environ.get('COURSE_CULL_TIMEOUT', '3600')}",
                 f"--cull-every={os.environ.get('COURSE_CULL_EVERY', '300')}"]},
    {"name": "ngshare", "url": f"http://127.0.0.1:{NGSHARE_PORT}",
     "command": [sys.executable, str(HERE / "ngshare_local.py"),
                 "--admins", "course-setup",           # creates the course; instructors run it
                 "--storage", str(ngshare_dir / "files"),
                 "--database", f"sqlite:///{ngshare_dir / 'ngshare.db'}"]},
    # provision.py's `enrol` creates the course and its students in ngshare with this token
    {"name": "course-setup", "api_token": read_setup_token(COURSE_ROOT)},
]
