"""Per-student memory and CPU limits that the kernel enforces: a Linux control group per user.

JupyterHub's ``Spawner.mem_limit`` and ``Spawner.cpu_limit`` are only *hints* for the local process
spawner (it passes them on as ``MEM_LIMIT`` / ``CPU_LIMIT`` and enforces nothing), and these
machines run no systemd (so ``systemdspawner`` is out). ``LimitedSpawner`` makes them real: before
a user's server starts, the hub (root) creates a control group for that user with the limits, and
the server's process joins it in ``preexec_fn`` -- after ``fork``, still as root, before it drops to
the user and ``exec``s. Every kernel and terminal the server starts is its child and stays in the
group; a student cannot leave it (only root may write another group's ``cgroup.procs``) or raise
it (the limit files are root's).

- cgroup v2 (``/sys/fs/cgroup/cgroup.controllers``): ``memory.max``, ``memory.swap.max = 0``,
  ``cpu.max = "quota period"`` in ``/sys/fs/cgroup/jupyterhub-course/<user>``;
- cgroup v1 (separate ``memory`` and ``cpu`` hierarchies, as on this build machine):
  ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where swap is accounted),
  ``cpu.cfs_quota_us / cpu.cfs_period_us``.

Memory over the limit: the kernel's OOM killer kills the largest process of the group (the
student's Python kernel, which JupyterLab then offers to restart), never a classmate's. CPU over
the limit: the group is throttled (``cpu.stat``'s ``nr_throttled`` counts it). Where neither
hierarchy is writable, a spawn with limits set fails with a message (no silent "limit").
"""
from __future__ import annotations

import os
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner

CGROUP = Path("/sys/fs/cgroup")
GROUP = "jupyterhub-course"
PERIOD_US = 100_000


def _write(path: Path, value) -> None:
    path.write_text(f"{value}\n")


def cgroup_version(root: Path = CGROUP) -> int | None:
    """2, 1 or None: which control-group hierarchy this machine lets root create groups in."""
    if (root / "cgroup.controllers").exists():
        controllers = (root / "cgroup.controllers").read_text().split()
        if {"memory", "cpu"} <= set(controllers) and os.access(root, os.W_OK):
            return 2
    if all((root / c).is_dir() and os.access(root / c, os.W_OK) for c in ("memory", "cpu")):
        return 1
    return None


def prepare(user: str, mem_bytes: int, cpu: float, root: Path = CGROUP) -> list[Path]:
    """Create (or update) ``user``'s group with the limits; return the ``cgroup.procs`` files a
    process writes its PID into to join. ``mem_bytes`` 0 or ``cpu`` 0 means no limit of that kind."""
    version = cgroup_version(root)
    if version is None:
        raise RuntimeError(f"cannot enforce per-user limits: no writable cgroup hierarchy under {root} "
                           "(set COURSE_LIMITS=none to run without limits)")
    if version == 2:
        parent = root / GROUP
        parent.mkdir(exist_ok=True)
        _write(root / "cgroup.subtree_control", "+memory +cpu")
        _write(parent / "cgroup.subtree_control", "+memory +cpu")
        group = parent / user
        group.mkdir(exist_ok=True)
        _write(group / "memory.max", mem_bytes or "max")
        if (group / "memory.swap.max").exists():
            _write(group / "memory.swap.max", 0 if mem_bytes else "max")
        _write(group / "cpu.max", f"{int(cpu * PERIOD_US) if cpu else 'max'} {PERIOD_US}")
        return [group / "cgroup.procs"]
    memory = root / "memory" / GROUP / user
    memory.mkdir(parents=True, exist_ok=True)
    _write(memory / "memory.limit_in_bytes", mem_bytes or -1)
    if (memory / "memory.memsw.limit_in_bytes").exists():   # memory + swap: after the memory limit
        _write(memory / "memory.memsw.limit_in_bytes", mem_bytes or -1)
    cpu_group = root / "cpu" / GROUP / user
    cpu_group.mkdir(parents=True, exist_ok=True)
    _write(cpu_group / "cpu.cfs_period_us", PERIOD_US)
    _write(cpu_group / "cpu.cfs_quota_us", int(cpu * PERIOD_US) if cpu else -1)
    return [memory / "cgroup.procs", cpu_group / "cgroup.procs"]


def groups_of(user: str, root: Path = CGROUP) -> dict[str, Path]:
    """The user's group folders by kind (for tests and sizing): {"memory": ..., "cpu": ...}."""
    if cgroup_version(root) == 2:
        return {"memory": root / GROUP / user, "cpu": root / GROUP / user}
    return {"memory": root / "memory" / GROUP / user, "cpu": root / "cpu" / GROUP / user}


class LimitedSpawner(LocalProcessSpawner):
    """``LocalProcessSpawner`` whose server runs inside the user's control group (see the module)."""

    _procs: list[Path] = []

    def make_preexec_fn(self, name):
        drop_to_user = super().make_preexec_fn(name)
        procs = list(self._procs)

        def preexec():                      # in the child, as root, before setuid and exec
            pid = str(os.getpid())
            for path in procs:
                with open(path, "w") as f:
                    f.write(pid)
            drop_to_user()
        return preexec

    async def start(self):
        limited = bool(self.mem_limit or self.cpu_limit)
        if limited and os.environ.get("COURSE_LIMITS", "cgroup") != "none":
            self._procs = prepare(self.user.name, int(self.mem_limit or 0), float(self.cpu_limit or 0))
        else:
            self._procs = []
        return await super().start()
