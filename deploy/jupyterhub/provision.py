"""Provision the one-machine course server: Unix users, chapters, the nbgrader course and exchange.

    sudo .venv/bin/python deploy/jupyterhub/provision.py --root /srv/course \
        --instructor teacher --students alice bob carol [--assignments 01-attention 04-masking]

Run it as root from the repository (again whenever the roster grows: existing users and files are
kept). It

- creates a Unix user (with a home and a private group) for every name that does not exist yet;
- gives every student the student copies of the chapters in ``~/chapters`` (no solutions; each
  check prints NOT YET until solved), owned by the student;
- writes the nbgrader course in the instructor's ``~/course`` (``bookkit.course``), generates the
  assignments and releases them to the exchange *as the instructor*, and points the instructor's
  formgrader at the course (``~/.jupyter/nbgrader_config.py``);
- writes ``ROOT/roster.txt`` (read by ``jupyterhub_config.py``), ``ROOT/exchange`` (nbgrader's
  exchange: world-writable, sticky) and ``ROOT/etc/jupyter/nbgrader_config.py`` (exchange and
  course id for everyone; the hub sets ``JUPYTER_CONFIG_PATH`` to it).

The hub itself is started separately (see ``jupyterhub_config.py``).
"""
from __future__ import annotations

import argparse
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bookkit import course  # noqa: E402

VENV_BIN = Path(sys.executable).parent
USERS_BIN = VENV_BIN  # set by users_venv(): the bin folder every user runs from


def readable_by_all(path: Path) -> bool:
    """True when a user other than the owner can run ``path`` (o+x on it and every folder above)."""
    path = path.resolve()
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])


def users_venv(root: Path) -> Path:
    """The bin folder the users' servers and kernels run from.

    Normally the course venv's own (build it in /opt or /srv, readable by all). When its Python is
    out of the users' reach (a pyenv under /root, mode 700), a thin venv in ROOT/venv on the
    system's Python of the same version reads the course venv's packages (a .pth file) and Jupyter
    files (links), and its bin folder gets copies of the course venv's scripts that start that
    Python."""
    if readable_by_all(Path(sys.executable)):
        return VENV_BIN
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system_python = Path("/usr/bin") / version
    if not system_python.exists():
        raise SystemExit(f"{sys.executable} is not readable by other users and {system_python} is missing: "
                         "build the course venv in a folder every user can read")
    venv = root / "venv"
    if not (venv / "bin" / "python").exists():
        subprocess.run([str(system_python), "-m", "venv", "--without-pip", str(venv)], check=True)
    for shared in ("etc/jupyter", "share/jupyter"):  # server extensions, JupyterLab's app, kernels
        link = venv / shared
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(Path(sys.prefix) / shared)
    site = Path(sys.prefix) / "lib" / version / "site-packages"
    (venv / "lib" / version / "site-packages" / "course_venv.pth").write_text(
        f"import site; site.addsitedir({str(site)!r})\n")
    for script in VENV_BIN.iterdir():
        target = venv / "bin" / script.name
        if script.is_file() and not script.is_symlink() and not target.exists():
            with open(script, "rb") as f:
                first = f.readline()
                if not first.startswith(b"#!") or b"python" not in first:
                    continue
                body = f.read()
            target.write_bytes(f"#!{venv / 'bin' / 'python'}\n".encode() + body)
            target.chmod(0o755)
    return venv / "bin"


def ensure_user(name: str, home_base: Path | None) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        cmd = ["useradd", "--create-home", "--user-group", "--shell", "/bin/bash"]
        if home_base is not None:
            cmd += ["--home-dir", str(home_base / name)]
        subprocess.run(cmd + [name], check=True)
        return pwd.getpwnam(name)


def chown_tree(path: Path, user: pwd.struct_passwd) -> None:
    for p in [path, *path.rglob("*")]:
        os.chown(p, user.pw_uid, user.pw_gid, follow_symlinks=False)


def user_env(user: pwd.struct_passwd, root: Path) -> dict[str, str]:
    """The environment of a command run as ``user``: the hub's Spawner.environment, in short."""
    return {"HOME": user.pw_dir, "USER": user.pw_name, "LOGNAME": user.pw_name,
            "PATH": f"{USERS_BIN}:/usr/local/bin:/usr/bin:/bin", "OMP_NUM_THREADS": "1",
            "TLIB_DEVICE": "cpu", "TLIB_STATIC_WIDGETS": "0",
            "JUPYTER_CONFIG_PATH": str(root / "etc" / "jupyter"), "NBGRADER_EXCHANGE": str(root / "exchange")}


def run_as(user: pwd.struct_passwd, root: Path, *cmd: str, cwd: Path) -> None:
    subprocess.run(list(cmd), cwd=cwd, env=user_env(user, root), user=user.pw_uid, group=user.pw_gid,
                   extra_groups=[], check=True)


def shared_files(root: Path, instructor: str, students: list[str], course_id: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    (root / "hub").mkdir(exist_ok=True)
    (root / "hub").chmod(0o700)                       # hub database and cookie secret: root only
    exchange = root / "exchange"
    exchange.mkdir(exist_ok=True)
    exchange.chmod(0o1777)                            # everyone submits; nobody removes others' files
    etc = root / "etc" / "jupyter"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "nbgrader_config.py").write_text(
        "import os\n\nc = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.course_id = {course_id!r}\n"
        f"c.Exchange.root = os.environ.get('NBGRADER_EXCHANGE', {str(exchange)!r})\n")
    lines = [f"{instructor} instructor"] + [f"{s} student" for s in students]
    (root / "roster.txt").write_text("# name role (written by deploy/jupyterhub/provision.py)\n"
                                     + "\n".join(lines) + "\n")


def give_chapters(student: pwd.struct_passwd, chapters: Path) -> None:
    from bookkit.copies import write_student
    dest = Path(student.pw_dir) / "chapters"
    if dest.exists():
        return  # a student's own work is never overwritten
    write_student(chapters, dest)
    chown_tree(dest, student)


def set_up_course(instructor: pwd.struct_passwd, root: Path, chapters: Path, assignments: list[str] | None,
                  course_id: str) -> list[str]:
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
    names = [p.stem for p in written]
    for name in names:
        run_as(instructor, root, "nbgrader", "generate_assignment", name, "--force", cwd=course_dir)
        run_as(instructor, root, "nbgrader", "release_assignment", name, "--force", cwd=course_dir)
    return names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="provision.py", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path("/srv/course"))
    parser.add_argument("--instructor", required=True)
    parser.add_argument("--students", nargs="+", required=True)
    parser.add_argument("--assignments", nargs="*", help="chapter stems to release (default: all)")
    parser.add_argument("--chapters", type=Path, default=REPO / "chapters")
    parser.add_argument("--home-base", type=Path, help="where new homes go (default: useradd's, /home)")
    parser.add_argument("--course-id", default=course.COURSE_ID)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("run as root: it creates Unix users")
    if not shutil.which("useradd"):
        parser.error("useradd is missing")
    root = args.root.resolve()
    shared_files(root, args.instructor, args.students, args.course_id)
    global USERS_BIN
    USERS_BIN = users_venv(root)
    instructor = ensure_user(args.instructor, args.home_base)
    for name in args.students:
        give_chapters(ensure_user(name, args.home_base), args.chapters)
    released = set_up_course(instructor, root, args.chapters, args.assignments, args.course_id)
    print(f"provisioned {len(args.students)} students and {args.instructor}; released {', '.join(released)}")
    print(f"start the hub:  COURSE_ROOT={root} COURSE_PASSWORD=... COURSE_ADMIN_PASSWORD=... "
          f"{sys.executable} -m jupyterhub -f {Path(__file__).with_name('jupyterhub_config.py')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
