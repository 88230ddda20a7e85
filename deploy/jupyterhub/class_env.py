"""The class server's Python environment: built where every account can read it.

    sudo .venv/bin/python deploy/jupyterhub/class_env.py /srv/course/env

Students' servers and kernels, and the instructor's nbgrader, run as their own Unix users, so they
must never read anything through the repository checkout or its ``.venv``: a clone in a private
(0700) folder, or a Python under ``/root``, is out of their reach. This module builds a separate
virtual environment (``DEST``, normally ``COURSE_ROOT/env``) that holds

- a base Python every account can run: the one that made ``.venv`` if it is readable by all, else
  the system's ``/usr/bin/pythonX.Y`` (or ``/usr/local/bin``) of the same minor version (same ABI);
- the ``.venv``'s installed packages (torch, Jupyter, nbgrader, ...), *hard-linked* file by file
  (``cp -al``; a real copy where the two lie on different file systems). The teaching choice here is
  speed: a fresh ``pip install`` of torch and Jupyter takes minutes, hard links take seconds and
  use no disk. Links are safe because pip replaces files (new inodes) rather than writing into
  them, and because everything is owned by root and not writable by the users;
- the library (``transformer_lib``) and the book machinery nbgrader's course config uses
  (``bookkit``) as plain copies from the checkout, replacing the editable install that points into
  the checkout. Nothing else from the repository: no chapters (their solutions), no tests, no
  ``.git``. Students get their chapters as student copies in their home (``provision.py``).

``build`` is idempotent: a stamp records what it was built from, by content (the package list
with each distribution's ``RECORD``, which holds every installed file's hash; the library's files),
so an unchanged source is not rebuilt, not even from a fresh clone whose files are all new. Where
only the library changed, only its two copies are replaced. A whole build is bound by the file
system's metadata writes, one per file: a link raises its inode's link count, and removing the
old environment's 70,000 links took 36 s on a busy machine where making them took 4 s. So an
environment is removed only when its packages changed, and modes are set only on the files that
need it (``chmod -R`` would rewrite every shared inode).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("transformer_lib", "bookkit")   # what the class gets from the checkout, copied
VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"
INFO = "transformer_lib-0.0.dist-info"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.so")   # not copied from the checkout


def readable_by_all(path: Path) -> bool:
    """True when any account can read (and run) ``path``: o+r on it, o+x on every folder above."""
    path = path.resolve()
    return bool(path.stat().st_mode & 0o004) and all(p.stat().st_mode & 0o001 for p in path.parents)


def base_python() -> Path:
    """A Python of this version every account can run (see the module docstring)."""
    own = Path(sys.base_prefix) / "bin" / VERSION
    for candidate in (own, Path("/usr/bin") / VERSION, Path("/usr/local/bin") / VERSION):
        if candidate.exists() and readable_by_all(candidate):
            return candidate
    raise SystemExit(f"no {VERSION} that every account can run (tried {own}, /usr/bin, /usr/local/bin): "
                     f"install the system's {VERSION}, or build .venv from a Python outside private folders")


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode())
        h.update(b"\0")
    return h.hexdigest()


def _library_files(repo: Path):
    """The files of PACKAGES that are copied (``_IGNORE`` leaves out the rest), sorted."""
    for package in PACKAGES:
        for f in sorted((repo / package).rglob("*")):
            if f.is_file() and not any(_IGNORE("", [part]) for part in f.relative_to(repo).parts):
                yield f


def _fingerprint(source_prefix: Path, repo: Path) -> dict[str, str]:
    """What the environment is built from, by content: ``packages`` (every name in the source
    venv's site-packages and each distribution's RECORD) and ``library`` (the copied files)."""
    site = source_prefix / "lib" / VERSION / "site-packages"
    packages = []
    for entry in sorted(site.iterdir()):
        if _is_editable_of_checkout(entry.name):
            continue                                 # replaced by the copies: part of the library
        packages.append(entry.name)
        if entry.name.endswith(".dist-info") and (entry / "RECORD").is_file():
            packages.append((entry / "RECORD").read_bytes())
    library = []
    for f in _library_files(repo):
        library += [str(f.relative_to(repo)), f.read_bytes()]
    return {"packages": _digest(str(base_python()), *packages), "library": _digest(*library)}


def _link_tree(src: Path, dest: Path) -> None:
    """``dest`` becomes a copy of ``src`` made of hard links (a real copy across file systems)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["cp", "-al", str(src), str(dest)], capture_output=True)
    if done.returncode != 0:
        _remove(dest)
        shutil.copytree(src, dest, symlinks=True)


def _remove(path: Path) -> None:
    """``rm -rf`` (one unlink per file, no Python in between), never across a mount."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True)


def _readable(path: Path) -> None:
    """``chmod -R a+rX,go-w path``, on those entries only whose mode differs from it (``find``
    selects them): a linked file's inode is shared with the source venv, and an unchanged mode
    rewritten is still one metadata write per file."""
    wrong = ["(", "-perm", "/022", "-o", "!", "-perm", "-004", "-o", "-type", "d", "!", "-perm", "-001",
             "-o", "-perm", "/111", "!", "-perm", "-001", ")"]
    subprocess.run(["find", str(path), "!", "-type", "l", *wrong, "-exec", "chmod", "a+rX,go-w", "{}", "+"],
                   check=True)


def _is_editable_of_checkout(name: str) -> bool:
    return name.startswith("__editable__") and "transformer_lib" in name or \
        name.startswith("transformer_lib-") and name.endswith(".dist-info")


def _copy_library(site: Path, repo: Path) -> None:
    """The library and the book machinery as plain copies, with the metadata importlib finds."""
    info = site / INFO                               # importlib.metadata finds the library
    for old in [*(site / package for package in PACKAGES), info]:
        _remove(old)
    for package in PACKAGES:
        shutil.copytree(repo / package, site / package, ignore=_IGNORE)
    info.mkdir()
    version = next((line.split("=", 1)[1].strip().strip("\"'") for line in
                    (repo / "transformer_lib" / "__init__.py").read_text().splitlines()
                    if line.startswith("__version__")), "0")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: transformer_lib\nVersion: {version}\n")
    (info / "top_level.txt").write_text("\n".join(PACKAGES) + "\n")


def _link_packages(dest: Path, python: Path, source_prefix: Path) -> Path:
    """A venv of ``python`` in ``dest`` whose site-packages, Jupyter data and console scripts are
    the source venv's (linked; scripts rewritten onto this venv's Python); returns site-packages."""
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(dest)], check=True)
    src_site = source_prefix / "lib" / VERSION / "site-packages"
    site = dest / "lib" / VERSION / "site-packages"
    site.rmdir()
    _link_tree(src_site, site)
    for entry in list(site.iterdir()):          # the editable install points into the checkout
        if _is_editable_of_checkout(entry.name):
            _remove(entry)
    for shared in ("etc/jupyter", "share/jupyter"):  # server extensions, JupyterLab, kernel specs
        if (source_prefix / shared).exists():
            _link_tree(source_prefix / shared, dest / shared)
    for script in sorted((source_prefix / "bin").iterdir()):  # console scripts, on this Python
        target = dest / "bin" / script.name
        if target.exists() or script.is_symlink() or not script.is_file():
            continue
        with open(script, "rb") as f:
            first = f.readline()
            if not first.startswith(b"#!") or b"python" not in first:
                continue
            body = f.read()
        target.write_bytes(f"#!{dest / 'bin' / 'python'}\n".encode() + body)
        target.chmod(0o755)
    return site


def build(dest: Path, source_prefix: Path = Path(sys.prefix), repo: Path = REPO) -> dict:
    """Build (or keep, when up to date) the class environment in ``dest``; return what was done:
    ``built`` is False (kept), "library" (only the library's copies replaced) or "all"."""
    import time
    start = time.perf_counter()
    dest = dest.resolve()
    if dest.exists() and dest.stat().st_uid != os.geteuid():
        raise SystemExit(f"{dest} belongs to another account: build the class environment in a folder of your own")
    stamp = dest / ".class-env.json"
    python = base_python()
    fingerprint = _fingerprint(source_prefix, repo)
    old = json.loads(stamp.read_text()).get("fingerprint") if stamp.exists() else None
    if old == fingerprint:
        return {"built": False, "seconds": round(time.perf_counter() - start, 2), "path": str(dest)}
    site = dest / "lib" / VERSION / "site-packages"
    if isinstance(old, dict) and old.get("packages") == fingerprint["packages"]:
        built = "library"
        stamp.unlink()                               # a half-replaced library is never taken as whole
        _copy_library(site, repo)
        for part in [*PACKAGES, INFO]:
            _readable(site / part)
    else:
        built = "all"
        _remove(dest)
        site = _link_packages(dest, python, source_prefix)
        _copy_library(site, repo)
        _readable(dest)
    seconds = round(time.perf_counter() - start, 2)
    stamp.write_text(json.dumps({"fingerprint": fingerprint, "python": str(python), "source": str(source_prefix),
                                 "built": built, "build_s": seconds}) + "\n")
    stamp.chmod(0o644)
    return {"built": built, "seconds": seconds, "path": str(dest)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="class_env.py", description=__doc__.split("\n")[0])
    parser.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    print(json.dumps(build(args.dest)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
