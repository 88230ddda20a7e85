"""The library's compiled kernels, one way: built on first use, their failure remembered, one warning.

Chapter 8's fused sliding-window kernel and chapter 19's quantized matrix-vector kernel are C++
files built by ``torch.utils.cpp_extension`` (:func:`cpp_ops`); chapter 8's flex kernel is
compiled by ``torch.compile``. Each is a :class:`Kernel`: the first use builds it (seconds), a
build that cannot work here (no C++ compiler, no ninja, a torch without the symbols a kernel
needs, a device flex does not support) is remembered with its reason, one warning says which
readable path the library takes instead, and the build is not tried again on every call.
:meth:`Kernel.available` answers ``(works, reason)``, the question the tests and chapters ask.

A C++ kernel is built in a folder of its own process and then moved, whole, into the cache
(``$TORCH_EXTENSIONS_DIR``, else ``~/.cache/torch_extensions``) under a name that hashes its
sources, flags and torch version: two processes building at once never wait on each other's lock,
a process killed mid-build leaves no lock behind, and a changed source is a new name.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Callable

import torch


class Kernel:
    """One compiled kernel's state: what each build produced, or why it failed, per ``key`` (the
    flex kernel keys on device type and dtype; the C++ kernels have one key)."""

    def __init__(self, kernel: str, fallback: str):
        self.kernel, self.fallback = kernel, fallback  # the reader's words: "the fused ... kernel", "the blocked kernel"
        self.built: dict = {}
        self.errors: dict = {}

    def get(self, build: Callable[[], object], key=None):
        """``build()`` once and return what it returns; RuntimeError with the reason if it cannot
        be built here (now or on an earlier call)."""
        if key in self.errors:
            raise RuntimeError(self.errors[key])
        if key not in self.built:
            try:
                self.built[key] = build()
            except Exception as err:  # no compiler, no ninja, a missing symbol, an unsupported device ...
                self.fail(err, key)
                raise RuntimeError(self.errors[key]) from None
        return self.built[key]

    def fail(self, err: BaseException, key=None, stacklevel: int = 4) -> None:
        """Remember why the kernel does not work for ``key`` and warn once."""
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        self.errors[key] = f"{type(err).__name__}: {first}"
        where = "" if key is None else f" for {' '.join(map(str, key)) if isinstance(key, tuple) else key}"
        warnings.warn(f"the {self.kernel} cannot be built here{where} ({self.errors[key]}); falling back to "
                      f"{self.fallback}", RuntimeWarning, stacklevel=stacklevel)

    def status(self, key=None) -> tuple[bool, str]:
        """(works, reason): False and the remembered reason after a failure, else True and "ok"."""
        return (False, self.errors[key]) if key in self.errors else (True, "ok")

    def available(self, build: Callable[[], object], key=None) -> tuple[bool, str]:
        """Build if needed (slow the first time); return (works, reason)."""
        try:
            self.get(build, key)
        except RuntimeError:
            pass
        return self.status(key)


def extensions_dir() -> Path:
    """Where built kernels are kept: ``$TORCH_EXTENSIONS_DIR`` (torch's own variable), else
    ``~/.cache/torch_extensions``."""
    chosen = os.environ.get("TORCH_EXTENSIONS_DIR")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(chosen) if chosen else cache / "torch_extensions"


def library_path(*, name: str, source: Path, cflags: list[str]) -> Path:
    """Where :func:`cpp_ops` keeps the library built from ``source`` with ``cflags``: a name that
    hashes the torch version, the flags, the source and every other file of its folder."""
    digest = hashlib.sha256(f"{torch.__version__}|{' '.join(cflags)}|{source.name}".encode() + source.read_bytes())
    for path in sorted(source.parent.iterdir()):
        if path.is_file() and path != source:
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return extensions_dir() / f"{name}-{digest.hexdigest()[:16]}.so"


def cpp_ops(*, name: str, source: Path, cflags: list[str], namespace: str):
    """Build ``source`` (a shared library that registers ``torch.ops.<namespace>``; every file of
    its folder counts, headers included), load it and return ``torch.ops.<namespace>``. Reuses
    the cached library of the same sources, flags and torch."""
    library = library_path(name=name, source=source, cflags=cflags)
    if not library.exists():
        if shutil.which("ninja") is None:  # the pip package's binary, when .venv/bin is not on PATH
            import ninja  # noqa: PLC0415 - optional until a build is needed

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
        from torch.utils.cpp_extension import load

        library.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=library.parent) as build:
            # a plain shared library that registers the ops (no Python module, no Python.h);
            # load() also loads it into this process
            load(name=name, sources=[str(source)], extra_cflags=cflags, extra_ldflags=["-fopenmp"],
                 build_directory=build, is_python_module=False, verbose=False)
            # torch names it {name}.so ({name}_v1.so when this process built other sources under the name)
            (built,) = Path(build).glob(f"{name}*.so")
            os.replace(built, library)  # atomic: another process sees all of it or none
    else:
        torch.ops.load_library(str(library))
    return getattr(torch.ops, namespace)
