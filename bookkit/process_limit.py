"""How many processes a sandboxed kernel may have: a fork bomb in a submission fails at a cap.

bubblewrap's pid namespace ends every process a submission started when its grading ends, but
while it runs nothing stops ``while True: os.fork()`` from filling the machine's process table
(and the other submission's kernel, and the grader, with it). ``prlimit --nproc`` is the classic
cap, and the sandbox sets it, but Linux does not apply ``RLIMIT_NPROC`` to processes whose real
user is root: a grader run as root (a CI container, the class server's instructor service)
maps the sandbox's uid 65534 onto root and the cap is ignored (tested: 200 forks under
``--nproc=50`` all succeed). So where root may create control groups, each kernel gets its own
group with ``pids.max`` (the kernel counts threads as well as processes there, and a task in
the group can neither leave it nor raise the cap):

- cgroup v2 (the cgroup2 mount's ``cgroup.controllers`` lists ``pids``): the group
  ``<mount>/tlib-grading/<kernel>``, where the mount is ``/sys/fs/cgroup`` on a unified machine
  (most current distributions) and ``/sys/fs/cgroup/unified`` on a "hybrid" one, which is read
  from ``/proc/self/mounts``;
- cgroup v1 (a ``pids`` hierarchy at ``/sys/fs/cgroup/pids``, as on this build machine):
  ``/sys/fs/cgroup/pids/tlib-grading/<kernel>``;
- neither writable: only ``prlimit --nproc``, which holds for a grader that is not root (the
  count is kept per user namespace, so it counts the sandbox's processes only), and
  :func:`pids_root` returns None so that the grader can say so in its log.

The kernel's command joins the group before ``exec`` (:func:`joining_command`), so bwrap, the
kernel and everything they start are in it from their first instruction.
"""
from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

__all__ = ["GROUP", "cgroup2_mounts", "pids_root", "ProcessGroup", "joining_command"]

GROUP = "tlib-grading"
CGROUP = Path("/sys/fs/cgroup")


def _v2_root(root: Path) -> Path | None:
    controllers = root / "cgroup.controllers"
    if not controllers.exists() or "pids" not in controllers.read_text().split():
        return None
    parent = root / GROUP
    try:
        if "pids" not in (root / "cgroup.subtree_control").read_text().split():
            (root / "cgroup.subtree_control").write_text("+pids\n")
        parent.mkdir(exist_ok=True)
        if "pids" not in (parent / "cgroup.subtree_control").read_text().split():
            (parent / "cgroup.subtree_control").write_text("+pids\n")
    except OSError:
        return None
    return parent


def _v1_root(root: Path) -> Path | None:
    hierarchy = root / "pids"
    if not (hierarchy / "cgroup.procs").exists() or not os.access(hierarchy, os.W_OK):
        return None
    parent = hierarchy / GROUP
    try:
        parent.mkdir(exist_ok=True)
    except OSError:
        return None
    return parent


def cgroup2_mounts(mounts: Path = Path("/proc/self/mounts")) -> list[Path]:
    """Where cgroup v2 is mounted (``/sys/fs/cgroup``, or ``/sys/fs/cgroup/unified`` beside v1's
    hierarchies), as this process sees it; empty where it is not."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return []
    return [Path(f[1]) for f in (line.split() for line in lines) if len(f) > 2 and f[2] == "cgroup2"]


def pids_root(root: Path | None = None) -> Path | None:
    """The folder under which one group per kernel can be made, or None where this process may
    not create control groups with a ``pids`` controller. With no ``root``: cgroup v2 at each of
    its mounts that offers ``pids`` first, then v1's hierarchy under ``/sys/fs/cgroup``; with a
    ``root``, v2 or v1 under that folder only."""
    if root is not None:
        return _v2_root(Path(root)) or _v1_root(Path(root))
    for mount in cgroup2_mounts():
        found = _v2_root(mount)
        if found is not None:
            return found
    return _v1_root(CGROUP)


class ProcessGroup:
    """One kernel's control group: ``pids.max = limit``. :meth:`close` ends what is left in it
    (only processes of this group, which the grader's own kernel started) and removes it."""

    def __init__(self, parent: Path, limit: int):
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 8:
            raise ValueError(f"limit must be an integer >= 8 (a kernel has a dozen threads), got {limit!r}")
        self.path = Path(parent) / f"kernel-{uuid.uuid4().hex[:12]}"
        self.path.mkdir()
        (self.path / "pids.max").write_text(f"{limit}\n")
        self.limit = limit

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def refused_forks(self) -> int:
        """How many times a fork or thread was refused at the cap (``pids.events``' ``max``)."""
        try:
            for line in (self.path / "pids.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "max":
                    return int(value)
        except OSError:
            pass
        return 0

    def members(self) -> list[int]:
        try:
            return [int(p) for p in self.procs.read_text().split()]
        except OSError:
            return []

    def close(self, timeout: float = 10.0) -> None:
        """SIGKILL every process still in the group (bounded retries), then remove it."""
        deadline = time.monotonic() + timeout
        while self.path.exists() and time.monotonic() < deadline:
            for pid in self.members():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.path.rmdir()
                return
            except OSError:  # members still exiting
                time.sleep(0.05)


def joining_command(argv: list[str], group: ProcessGroup) -> list[str]:
    """``argv`` started by a shell that first moves itself into ``group`` and then ``exec``s
    (so ``argv`` and everything it starts belong to the group)."""
    return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group.procs), *argv]
