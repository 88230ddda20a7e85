"""Course-server sizing: spawn time and memory per student, written to benchmarks/results/hub.json.

    sudo .venv/bin/python benchmarks/hub.py

Runs ``tests/test_hub.py`` (the one-machine JupyterHub, three students and an instructor, end to
end; it needs root to create Unix users and ``make hub-deps`` for the proxy) with
``TLIB_HUB_RESULTS=1``, which makes the test write its figures to the results file that the
course guide's sizing section quotes. A plain ``make test`` runs the same test without writing.
Run it on a quiet machine: the figures include the load average.
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
                           str(ROOT / "tests" / "test_hub.py")], cwd=ROOT, env=env)
    sys.exit(done.returncode)
