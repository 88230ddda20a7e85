"""Provision the one-machine course server: accounts, the class environment, chapters, the course.

    sudo .venv/bin/python deploy/jupyterhub/provision.py --root /srv/course \
        --instructor teacher --students alice bob carol [--assignments 01-attention 04-masking]
    # ... start the hub (jupyterhub_config.py), then, once it is up:
    sudo .venv/bin/python deploy/jupyterhub/provision.py --root /srv/course enrol

Run it as root from the repository (again whenever the roster grows: existing users, passwords and
files are kept). ``setup`` (the default)

- creates a Unix user for every name that does not exist yet, with a home that only they can enter
  (0700) and a generated password (PAM checks it at login). The passwords go to
  ``ROOT/hub/passwords.txt`` (root only) and the students' ones to the instructor's
  ``~/student-passwords.txt`` (0600): hand each student theirs;
- builds the class environment ``ROOT/env`` (``class_env.py``: the library, Jupyter, nbgrader,
  readable by every account, nothing read through the checkout);
- gives every student the student copies of the chapters in ``~/chapters`` (no solutions);
- writes the nbgrader course into the instructor's ``~/course`` (``bookkit.course``) and generates
  the assignments as the instructor;
- writes ``ROOT/roster.txt``, the per-role Jupyter config (``ROOT/etc/jupyter-student``: no
  formgrader, no assignment creation; ``ROOT/etc/jupyter-instructor``), the exchange's settings
  (ngshare) and the token of the ``course-setup`` service.

``enrol`` (the hub running) creates the course and its students in ngshare and releases the
generated assignments through it, as the instructor.
"""
from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

NGSHARE_PORT = 10101


def read_roster(path: Path) -> tuple[set[str], set[str]]:
    """(students, instructors) from roster.txt: one ``name role`` per line."""
    students, instructors = set(), set()
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, role = line.split()
            (instructors if role == "instructor" else students).add(name)
    return students, instructors


def read_setup_token(root: Path) -> str:
    return (root / "hub" / "setup_token").read_text().strip()


def ngshare_url(port: int | None = None) -> str:
    port = port or int(os.environ.get("COURSE_NGSHARE_PORT", NGSHARE_PORT))
    return f"http://127.0.0.1:{port}/services/ngshare"


def ensure_user(name: str, home_base: Path | None) -> tuple[pwd.struct_passwd, bool]:
    """The Unix user ``name`` (created when missing) and whether it was created now."""
    try:
        return pwd.getpwnam(name), False
    except KeyError:
        cmd = ["useradd", "--create-home", "--user-group", "--shell", "/bin/bash"]
        if home_base is not None:
            cmd += ["--home-dir", str(home_base / name)]
        subprocess.run(cmd + [name], check=True)
        return pwd.getpwnam(name), True


def set_password(name: str) -> str:
    password = secrets.token_urlsafe(12)
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)
    return password


def chown_tree(path: Path, user: pwd.struct_passwd) -> None:
    for p in [path, *path.rglob("*")]:
        os.chown(p, user.pw_uid, user.pw_gid, follow_symlinks=False)


def user_env(user: pwd.struct_passwd, root: Path, role: str, token: str | None = None) -> dict[str, str]:
    """The environment of a command run as ``user``: what the hub gives their server, in short."""
    env = {"HOME": user.pw_dir, "USER": user.pw_name, "LOGNAME": user.pw_name,
           "PATH": f"{root / 'env' / 'bin'}:/usr/local/bin:/usr/bin:/bin", "OMP_NUM_THREADS": "1",
           "TLIB_DEVICE": "cpu", "TLIB_STATIC_WIDGETS": "0", "PYTHONSAFEPATH": "1",
           "JUPYTER_CONFIG_PATH": str(root / "etc" / f"jupyter-{role}")}
    if token:
        env["JUPYTERHUB_API_TOKEN"] = token
    return env


def run_as(user: pwd.struct_passwd, root: Path, *cmd: str, cwd: Path, role: str = "instructor",
           token: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=cwd, env=user_env(user, root, role, token), user=user.pw_uid,
                          group=user.pw_gid, extra_groups=[], check=True, capture_output=True, text=True)


def role_config(root: Path, role: str, course_id: str) -> None:
    """``ROOT/etc/jupyter-<role>``: nbgrader's exchange (ngshare) and, for students, no grading tools."""
    etc = root / "etc" / f"jupyter-{role}"
    (etc / "labconfig").mkdir(parents=True, exist_ok=True)
    (etc / "nbgrader_config.py").write_text(
        "import os\n\nfrom ngshare_exchange import configureExchange\n\n"
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.course_id = {course_id!r}\n"
        f"configureExchange(c, os.environ.get('COURSE_NGSHARE_URL', {ngshare_url()!r}))\n")
    # the project's Jupyter settings (no news feed or update checks: no off-machine request)
    shutil.copy(REPO / "deploy" / "jupyter" / "jupyter_server_config.py", etc / "jupyter_server_config.py")
    disabled = {"@jupyterlab/apputils-extension:announcements": True}
    if role == "student":
        off = ["formgrader", "course_list"]
        (etc / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": {"jpserver_extensions": {
            f"nbgrader.server_extensions.{name}": False for name in off}}}, indent=1) + "\n")
        disabled.update({f"@jupyter/nbgrader:{p}": True
                         for p in ("formgrader", "create-assignment", "course-list", "menu")})
    (etc / "labconfig" / "page_config.json").write_text(json.dumps({"disabledExtensions": disabled}, indent=1))


def shared_files(root: Path, instructor: str, students: list[str], course_id: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    for private in ("hub", "ngshare"):                # hub database, passwords, tokens, submissions
        (root / private).mkdir(exist_ok=True)
        (root / private).chmod(0o700)
    (root / "ngshare" / "files").mkdir(exist_ok=True)
    token = root / "hub" / "setup_token"
    if not token.exists():
        token.write_text(secrets.token_hex(32) + "\n")
        token.chmod(0o600)
    for role in ("student", "instructor"):
        role_config(root, role, course_id)
    lines = [f"{instructor} instructor"] + [f"{s} student" for s in students]
    (root / "roster.txt").write_text("# name role (written by deploy/jupyterhub/provision.py)\n"
                                     + "\n".join(lines) + "\n")


def give_chapters(student: pwd.struct_passwd, copies: Path) -> None:
    """The student copies (``copies``, written once for the class) into the student's ``~/chapters``."""
    dest = Path(student.pw_dir) / "chapters"
    if dest.exists():
        return  # a student's own work is never overwritten
    shutil.copytree(copies, dest)
    chown_tree(dest, student)


def set_up_course(instructor: pwd.struct_passwd, root: Path, chapters: Path, assignments: list[str] | None,
                  course_id: str) -> list[str]:
    from bookkit import course
    home = Path(instructor.pw_dir)
    course_dir = home / "course"
    written = course.write_course(chapters, course_dir, course_id=course_id, only=assignments)
    jupyter = home / ".jupyter"
    jupyter.mkdir(exist_ok=True)
    # the formgrader reads this: the course lies under the instructor's server root (~)
    (jupyter / "nbgrader_config.py").write_text(
        f"c = get_config()  # noqa: F821\nc.CourseDirectory.root = {str(course_dir)!r}\n"
        f"c.CourseDirectory.course_id = {course_id!r}\n")
    chown_tree(course_dir, instructor)
    chown_tree(jupyter, instructor)
    course_dir.chmod(0o700)
    names = [p.stem for p in written]
    for name in names:
        run_as(instructor, root, "nbgrader", "generate_assignment", name, "--force", cwd=course_dir)
    (root / "hub" / "assignments.txt").write_text("\n".join(names) + "\n")
    return names


def setup(args) -> int:
    import time
    root, seconds, mark = args.root, {}, [time.perf_counter()]

    def step(name: str) -> None:                     # the wall seconds since the previous step
        now = time.perf_counter()
        seconds[name], mark[0] = round(now - mark[0], 1), now
    shared_files(root, args.instructor, args.students, args.course_id)
    sys.path.insert(0, str(HERE))
    import class_env
    env = (args.env or root / "env").resolve()
    built = class_env.build(env)
    if env != root / "env":                          # kept elsewhere (reused across set-ups): linked
        if (root / "env").is_symlink():
            (root / "env").unlink()
        (root / "env").symlink_to(env)
    step("class_env")
    passwords = {}
    for name in [args.instructor, *args.students]:
        user, created = ensure_user(name, args.home_base)
        Path(user.pw_dir).chmod(0o700)                 # useradd makes 0755 homes: classmates could read
        if created or args.reset_passwords:
            passwords[name] = set_password(name)
    listing = root / "hub" / "passwords.txt"
    old = dict(line.split(" ", 1) for line in listing.read_text().splitlines() if line) if listing.exists() else {}
    old.update(passwords)
    listing.write_text("".join(f"{n} {p}\n" for n, p in sorted(old.items())))
    listing.chmod(0o600)
    teacher = pwd.getpwnam(args.instructor)
    handout = Path(teacher.pw_dir) / "student-passwords.txt"
    handout.write_text("".join(f"{n} {old[n]}\n" for n in args.students if n in old))
    os.chown(handout, teacher.pw_uid, teacher.pw_gid)
    handout.chmod(0o600)
    step("accounts")
    from bookkit.copies import write_student
    copies = root / "hub" / "student-copies"          # root only; each student gets their own copy
    shutil.rmtree(copies, ignore_errors=True)
    write_student(args.chapters, copies)
    for name in args.students:
        give_chapters(pwd.getpwnam(name), copies)
    step("chapters")
    generated = set_up_course(teacher, root, args.chapters, args.assignments, args.course_id)
    step("course")
    print(json.dumps({"students": len(args.students), "instructor": args.instructor, "generated": generated,
                      "class_env": built, "seconds": seconds}))
    return 0


def enrol(args) -> int:
    """Create the course and its students in ngshare, then release the generated assignments."""
    import requests
    root = args.root
    students, instructors = read_roster(root / "roster.txt")
    token = read_setup_token(root)
    url = ngshare_url()
    headers = {"Authorization": f"token {token}"}

    def post(path, **data):
        r = requests.post(f"{url}/{path}", data=data, headers=headers, timeout=60)
        body = r.json()
        if not body.get("success") and "already exists" not in body.get("message", ""):
            raise SystemExit(f"ngshare {path}: HTTP {r.status_code} {body}")
    post(f"course/{args.course_id}", instructors=json.dumps(sorted(instructors)))
    for name in sorted(instructors):
        post(f"instructor/{args.course_id}/{name}", first_name=name, last_name="-", email=f"{name}@localhost")
    for name in sorted(students):
        post(f"student/{args.course_id}/{name}", first_name=name, last_name="-", email=f"{name}@localhost")
    released = []
    for instructor in sorted(instructors):
        teacher = pwd.getpwnam(instructor)
        course_dir = Path(teacher.pw_dir) / "course"
        for name in (root / "hub" / "assignments.txt").read_text().split():
            done = run_as(teacher, root, "nbgrader", "release_assignment", name, "--force", cwd=course_dir,
                          token=token)
            released.append(name)
    listed = requests.get(f"{url}/assignments/{args.course_id}", headers=headers, timeout=60).json()
    if set(released) - set(listed.get("assignments", [])):   # ngshare_exchange logs errors, exits 0
        raise SystemExit(f"release failed: ngshare lists {listed}\n{done.stdout}\n{done.stderr}")
    print(json.dumps({"course": args.course_id, "students": sorted(students), "released": released}))
    return 0


def main(argv=None) -> int:
    sys.path.insert(0, str(REPO))
    from bookkit.course import COURSE_ID
    parser = argparse.ArgumentParser(prog="provision.py", description=__doc__.split("\n")[0])
    parser.add_argument("action", nargs="?", choices=["setup", "enrol"], default="setup")
    parser.add_argument("--root", type=Path, default=Path("/srv/course"))
    parser.add_argument("--instructor")
    parser.add_argument("--students", nargs="+")
    parser.add_argument("--assignments", nargs="*", help="chapter stems to release (default: all)")
    parser.add_argument("--chapters", type=Path, default=REPO / "chapters")
    parser.add_argument("--home-base", type=Path, help="where new homes go (default: useradd's, /home)")
    parser.add_argument("--course-id", default=COURSE_ID)
    parser.add_argument("--env", type=Path, help="where the class environment is built (default ROOT/env; "
                        "elsewhere, ROOT/env links to it); every account must be able to read it")
    parser.add_argument("--reset-passwords", action="store_true", help="new passwords for existing users too")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("run as root: it creates Unix users")
    args.root = args.root.resolve()
    if args.action == "enrol":
        return enrol(args)
    if not (args.instructor and args.students):
        parser.error("setup needs --instructor and --students")
    if not shutil.which("useradd"):
        parser.error("useradd is missing")
    return setup(args)


if __name__ == "__main__":
    sys.exit(main())
