"""Stopping a server a test started, by its process: the one rule every server test follows."""
from __future__ import annotations

import signal
import subprocess


def stop(process: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM (a Jupyter server or hub then stops its kernels, user servers and proxy), up to
    ``grace_s`` seconds for it to exit, then SIGKILL; never returns while the process is alive."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
