"""transformer_lib._extensions: one state machine for the compiled kernels (a failure remembered and
warned about once, the reason a reader sees), and the C++ build that shares no lock with other
processes and reuses the cached library of the same sources."""
import os
import shutil
import subprocess
import sys
import warnings

import pytest
import torch

import torch.utils.cpp_extension

from transformer_lib._extensions import Kernel, cpp_ops, library_path

# the op library's headers and the one ATen op it calls, not all of ATen/ATen.h: each of the test's two
# builds compiles in ~8 s of CPU instead of ~14 (the library's real kernels are built by their own tests)
SOURCE = """
#include <torch/library.h>
#include <ATen/ops/mul.h>

at::Tensor twice(const at::Tensor& x) { return at::mul(x, 2); }

TORCH_LIBRARY(tlib_test_twice, m) { m.def("twice(Tensor x) -> Tensor", twice); }
"""


def test_a_build_runs_once_and_its_result_is_kept():
    calls = []
    kernel = Kernel("test kernel", "the readable path")
    assert kernel.get(lambda: calls.append(1) or "ops") == "ops"
    assert kernel.get(lambda: calls.append(1) or "other") == "ops"
    assert calls == [1] and kernel.available(lambda: None) == (True, "ok")


def test_a_failed_build_warns_once_names_the_fallback_and_is_not_retried():
    calls = []

    def broken():
        calls.append(1)
        raise OSError("no C++ compiler found\nsecond line")

    kernel = Kernel("test kernel", "the readable path")
    with pytest.warns(RuntimeWarning, match=r"the test kernel cannot be built here \(OSError: no C\+\+ compiler "
                                            r"found\); falling back to the readable path"):
        with pytest.raises(RuntimeError, match="OSError: no C\\+\\+ compiler found$"):
            kernel.get(broken)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # remembered: no second warning, no second build
        assert kernel.available(broken) == (False, "OSError: no C++ compiler found")
    assert calls == [1]


def test_failures_are_kept_per_key():
    kernel = Kernel("test kernel", "the readable path")
    with pytest.warns(RuntimeWarning, match="for mps torch.float32"):
        kernel.fail(RuntimeError("unsupported"), ("mps", torch.float32))
    assert kernel.status(("mps", torch.float32)) == (False, "RuntimeError: unsupported")
    assert kernel.status(("cpu", torch.float32)) == (True, "ok")


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="no C++ compiler")
def test_cpp_ops_build_once_into_the_cache_without_a_lock_and_load_from_it(tmp_path, monkeypatch):
    source = tmp_path / "src" / "twice.cpp"
    source.parent.mkdir()
    source.write_text(SOURCE)
    cache = tmp_path / "cache"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(cache))
    ops = cpp_ops(name="tlib_test_twice", source=source, cflags=["-O1"], namespace="tlib_test_twice")
    assert torch.equal(ops.twice(torch.arange(3.0)), torch.tensor([0.0, 2.0, 4.0]))
    # one library, named by its sources; no lock file and no build folder left behind
    (library,) = list(cache.iterdir())
    assert library.name.startswith("tlib_test_twice-") and library.suffix == ".so"
    # another process loads the cached library: its build would fail (load is replaced), so it must not build
    program = (
        "import sys, torch, torch.utils.cpp_extension as ce\n"
        "def no_build(*a, **k): raise AssertionError('built again')\n"
        "ce.load = no_build\n"
        "from pathlib import Path\n"
        "from transformer_lib._extensions import cpp_ops\n"
        f"ops = cpp_ops(name='tlib_test_twice', source=Path({str(source)!r}), cflags=['-O1'], namespace='tlib_test_twice')\n"
        "print(ops.twice(torch.ones(2)).tolist())\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TORCH_EXTENSIONS_DIR": str(cache)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[2.0, 2.0]"
    # a changed source, a new header beside it or other flags name another library, which is built,
    # not the old one reused (the build itself is the one above: here it is stopped at its start)
    assert library_path(name="tlib_test_twice", source=source, cflags=["-O1"]) == library
    (source.parent / "twice.h").write_text("// a header beside the source counts too\n")
    with_header = library_path(name="tlib_test_twice", source=source, cflags=["-O1"])
    source.write_text(SOURCE.replace("at::mul(x, 2)", "at::mul(x, 3)"))
    changed = library_path(name="tlib_test_twice", source=source, cflags=["-O1"])
    other_flags = library_path(name="tlib_test_twice", source=source, cflags=["-O2"])
    assert len({library, with_header, changed, other_flags}) == 4
    assert all(p.parent == cache and p.name.startswith("tlib_test_twice-") for p in (with_header, changed, other_flags))

    class Built(Exception):
        pass

    def build(**kwargs):
        raise Built(kwargs["sources"])

    monkeypatch.setattr(torch.utils.cpp_extension, "load", build)
    with pytest.raises(Built, match="twice.cpp"):
        cpp_ops(name="tlib_test_twice", source=source, cflags=["-O1"], namespace="tlib_test_twice")
    assert list(cache.iterdir()) == [library]  # the stopped build left no folder behind
