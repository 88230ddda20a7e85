"""Building the library's compiled kernels: one C++ file each, registered as ``torch.ops.<namespace>``.

Chapter 8's fused sliding-window kernel and chapter 19's quantized matrix-vector kernel are built
the same way, on first use, by ``torch.utils.cpp_extension`` (a few seconds, then cached on disk).
Where no build is possible (no C++ compiler, no ninja, a torch without the symbols a kernel needs)
the reason is remembered, one warning says which readable path is used instead, and the build is
not tried again on every call.
"""
from __future__ import annotations

import os
import shutil
import time
import warnings
from pathlib import Path

import torch


# torch's build lock: a process killed while it held it (a test timeout, ^C) leaves the file, and
# every later load of the kernel waits on it for ever. No build here takes ten minutes.
_STALE_LOCK_S = 600


def _drop_stale_lock(name: str) -> None:
    from torch.utils.cpp_extension import _get_build_directory

    lock = Path(_get_build_directory(f"{name}_{torch.__version__.split('+')[0].replace('.', '_')}", False)) / "lock"
    try:
        if time.time() - lock.stat().st_mtime > _STALE_LOCK_S:
            lock.unlink()
            warnings.warn(f"removed a stale build lock left by a killed process: {lock}", UserWarning, stacklevel=4)
    except FileNotFoundError:
        pass


def build_ops(state: dict, key: str, *, name: str, source: Path, cflags: list[str], namespace: str,
              kernel: str, fallback: str):
    """Build ``source`` once and return ``torch.ops.<namespace>``; raise RuntimeError with the reason
    where it cannot be built. ``state`` is the caller's memory: ``state[key]`` holds the ops,
    ``state["error"]`` the reason of a failed build (both None before the first try)."""
    if state[key] is None and state["error"] is None:
        try:
            if shutil.which("ninja") is None:  # the pip package's binary, when .venv/bin is not on PATH
                import ninja  # noqa: PLC0415 - optional until a build is needed

                os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
            from torch.utils.cpp_extension import load

            _drop_stale_lock(name)
            # a plain shared library that registers the ops (no Python module, no Python.h)
            load(name=f"{name}_{torch.__version__.split('+')[0].replace('.', '_')}", sources=[str(source)],
                 extra_cflags=cflags, extra_ldflags=["-fopenmp"], is_python_module=False, verbose=False)
            state[key] = getattr(torch.ops, namespace)
        except Exception as err:  # no compiler, no ninja, a missing symbol, ...
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            state["error"] = f"{type(err).__name__}: {first}"
            warnings.warn(f"the {kernel} cannot be built here ({state['error']}); falling back to {fallback}",
                          RuntimeWarning, stacklevel=5)
    if state["error"] is not None:
        raise RuntimeError(state["error"])
    return state[key]
