"""JupyterHub for a small class on one machine (the course server).

    sudo .venv/bin/python deploy/jupyterhub/provision.py --root /srv/course \
        --instructor teacher --students alice bob carol      # Unix users, chapters, nbgrader exchange
    sudo COURSE_ROOT=/srv/course COURSE_PASSWORD=... COURSE_ADMIN_PASSWORD=... \
        .venv/bin/jupyterhub -f deploy/jupyterhub/jupyterhub_config.py

Every student is a real Unix user (created by ``provision.py``): nbgrader takes the submitter's
name from the OS user, so one shared account would make every submission look alike. The hub runs
as root and starts each user's Jupyter server *as that user* (``LocalProcessSpawner``), in the
user's home, where ``provision.py`` put the student copies of the chapters (``~/chapters``) and,
for the instructor, the nbgrader course (``~/course``, under the server root so the formgrader
finds it). Only a user who is root itself needs ``--allow-root``, so the flag is added for root
alone.

Settings come from the environment (``provision.py`` prints them):

    COURSE_ROOT            /srv/course: roster.txt, hub state, nbgrader exchange, jupyter config
    COURSE_PASSWORD        the students' shared password (8 characters or more)
    COURSE_ADMIN_PASSWORD  the instructor's password (32 characters or more; admins only)
    COURSE_PORT            the hub's port on 127.0.0.1 (default 8000); COURSE_API_PORT the proxy's
                           API port (default 8001)
    COURSE_PROXY           configurable-http-proxy's executable (default: `make hub-deps`'s copy)

The hub listens on 127.0.0.1 only: put a TLS reverse proxy (nginx, Caddy) in front of it to open
it to the class. With the shared-password authenticator any student can log in as any other
student (never as the instructor, who has their own password): fine for a workshop, not for
marks that count. For those, give every Unix user a password and set
``c.JupyterHub.authenticator_class = "pam"``; nothing else changes.
"""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
COURSE_ROOT = Path(os.environ.get("COURSE_ROOT", "/srv/course"))
VENV_BIN = Path(sys.executable).parent                  # the venv that runs the hub serves the users
if (COURSE_ROOT / "venv" / "bin" / "python").exists():   # ... through provision.py's thin venv when
    VENV_BIN = COURSE_ROOT / "venv" / "bin"              # the hub's Python is out of the users' reach
PROXY = os.environ.get("COURSE_PROXY", str(HERE / "node_modules" / ".bin" / "configurable-http-proxy"))


def read_roster(path: Path) -> tuple[set[str], set[str]]:
    """(students, instructors) from roster.txt: one ``name role`` per line (written by provision.py)."""
    students, instructors = set(), set()
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, role = line.split()
            (instructors if role == "instructor" else students).add(name)
    return students, instructors


students, instructors = read_roster(COURSE_ROOT / "roster.txt")
c = get_config()  # noqa: F821  (defined by JupyterHub when it loads this file)

# -- network: this machine only -----------------------------------------------------------------
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = int(os.environ.get("COURSE_PORT", "8000"))
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ.get("COURSE_HUB_PORT", "8081"))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ.get('COURSE_API_PORT', '8001')}"
c.ConfigurableHTTPProxy.command = [PROXY]
c.ConfigurableHTTPProxy.pid_file = str(COURSE_ROOT / "hub" / "proxy.pid")

# -- state ----------------------------------------------------------------------------------------
c.JupyterHub.db_url = f"sqlite:///{COURSE_ROOT / 'hub' / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(COURSE_ROOT / "hub" / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(COURSE_ROOT / "hub" / "jupyterhub.pid")
c.JupyterHub.cleanup_servers = True                    # stopping the hub stops every user server

# -- who may log in ------------------------------------------------------------------------------
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = os.environ["COURSE_PASSWORD"]
c.SharedPasswordAuthenticator.admin_password = os.environ["COURSE_ADMIN_PASSWORD"]
c.Authenticator.allowed_users = students | instructors
c.Authenticator.admin_users = instructors

# -- each user's server: as that Unix user, in their home ------------------------------------------
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [str(VENV_BIN / "jupyterhub-singleuser")]
c.Spawner.notebook_dir = "~"
c.Spawner.default_url = "/lab/tree/chapters"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.Spawner.environment = {
    # a kernel per student on shared cores: one thread each keeps the machine responsive
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TLIB_DEVICE": "cpu",
    "TLIB_STATIC_WIDGETS": "0",                        # live widgets only: no static precomputation
    "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",  # nbgrader, python from the course venv
    # nbgrader's exchange and course id for every user (written by provision.py)
    "JUPYTER_CONFIG_PATH": str(COURSE_ROOT / "etc" / "jupyter"),
    "NBGRADER_EXCHANGE": str(COURSE_ROOT / "exchange"),  # also read by the course's own config
}


def _allow_root_only_for_root(spawner):
    """A server that runs as root (only when root is on the roster) needs --allow-root."""
    args = [a for a in spawner.args if a != "--allow-root"]
    if spawner.user.name == "root":
        args.append("--allow-root")
    spawner.args = args


c.Spawner.pre_spawn_hook = _allow_root_only_for_root
