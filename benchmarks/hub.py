"""Course-server sizing: spawn time and memory per student, written to benchmarks/results/hub.json.

    sudo .venv/bin/python benchmarks/hub.py

Runs ``tests/deploy/test_hub.py`` (the one-machine JupyterHub over HTTPS, from a private copy of the
checkout: two students working at once, one idle student, an instructor; it needs root to create
Unix users, a writable cgroup hierarchy and ``make hub-deps``) with ``TLIB_HUB_RESULTS=1``, which
makes the test write its figures to the results file that the course guide's sizing section quotes:
spawn time, memory per student (idle server; with a kernel that ran chapter 0), the set-up steps
(checkout copy, provisioning with the class environment, hub start, enrolment), autograde time and
the CPU two busy loops got under the 0.5-core limit. A plain ``make test`` runs the same test
without writing. Run it on a quiet machine: the figures include the load average.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    env = dict(os.environ, TLIB_HUB_RESULTS="1")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                           str(ROOT / "tests" / "deploy" / "test_hub.py")], cwd=ROOT, env=env)
    sys.exit(done.returncode)
