"""The process cap of bookkit/process_limit.py on every real control-group hierarchy this machine
offers: cgroup v1's ``pids`` hierarchy and each cgroup2 mount whose ``cgroup.controllers`` lists
``pids``. The kernel enforces the cap, not our code, so the test is a real fork storm against a
real ``pids.max``: a hierarchy that is not here is skipped with the reason, never faked (the path
logic on a fake tree is in test_grading_limits.py).

A machine binds each controller to one hierarchy: CI's (v1, its pids controller bound there)
runs the v1 case; a current distribution's (unified v2) runs the v2 case. Moving ``pids`` to v2
on the build machine was tried and is not possible there: unmounting v1's hierarchy in this
container leaves it alive in the host's mount namespace, so cgroup2 never gains the controller.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from _submissions import BOUNDED_FORKS
from bookkit import process_limit

CAP = 16


def _hierarchies() -> list:
    """(label, parent folder or None, reason) for v1 and v2, as this machine has them."""
    if os.geteuid() != 0:
        reason = "creating control groups needs root"
        return [pytest.param(None, id=v, marks=pytest.mark.skip(reason=reason)) for v in ("v1", "v2")]
    v1 = process_limit._v1_root(process_limit.CGROUP)
    v2 = next(filter(None, map(process_limit._v2_root, process_limit.cgroup2_mounts())), None)
    return [
        pytest.param(v1, id="v1", marks=pytest.mark.skipif(
            v1 is None, reason="no writable cgroup v1 pids hierarchy under /sys/fs/cgroup")),
        pytest.param(v2, id="v2", marks=pytest.mark.skipif(
            v2 is None, reason="no cgroup2 mount offers the pids controller here "
                               f"(cgroup2 at: {', '.join(map(str, process_limit.cgroup2_mounts())) or 'none'})")),
    ]


@pytest.mark.parametrize("parent", _hierarchies())
def test_cap_holds_on_this_hierarchy(parent: Path):
    """CAP tasks at most (the interpreter and its sleeping children: 200 forks asked for), the
    refusals counted by the kernel in pids.events, and the group removed by close()."""
    group = process_limit.ProcessGroup(parent, CAP)
    try:
        proc = subprocess.run(process_limit.joining_command([sys.executable, "-c", BOUNDED_FORKS], group),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        forked, refused = map(int, proc.stdout.split())
        assert forked + refused == 200
        assert forked <= CAP - 1  # the interpreter is one of the CAP tasks
        assert refused >= 200 - CAP
        assert group.refused_forks() >= refused
    finally:
        group.close()
    assert not group.path.exists()


def test_cgroup2_mounts_reads_the_mount_table(tmp_path):
    table = tmp_path / "mounts"
    table.write_text("proc /proc proc rw 0 0\n"
                     "cgroup /sys/fs/cgroup/pids cgroup rw,pids 0 0\n"
                     "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n")
    assert process_limit.cgroup2_mounts(table) == [Path("/sys/fs/cgroup/unified")]
    assert process_limit.cgroup2_mounts(tmp_path / "missing") == []
