"""Grading a student's notebook so that nothing the student's code does can change the grade.

The old autograde ran ``assert check("name", answer)`` in the student's own kernel: whatever the
checker relied on (``Exercise.run``, ``numpy.allclose``, ipykernel's reply) the student's code
could replace a cell earlier. Here the grade is decided in a different process:

- the notebook runs in a **sandboxed kernel** (:func:`sandbox_command`): Debian's ``bwrap`` gives
  it no network, a read-only view of the interpreter and of ``transformer_lib`` only (no course
  directory, no gradebook, no other submission, no repository checkout), its own empty ``/tmp``
  and working directory, the unprivileged uid 65534 with no capabilities, ``PYTHONSAFEPATH=1``,
  an address-space, CPU-time and process-count limit (:mod:`bookkit.process_limit`: a fork
  bomb fails at the cap), and a pid namespace that dies with it (a forked process cannot
  outlive the grading). ZMQ talks to it over ``ipc`` sockets in a folder bound into the
  sandbox: TCP loopback does not cross ``--unshare-net``.
- a **graded cell is never run in the kernel**. :class:`SandboxedExecute` (nbgrader's ``Execute``
  replaced in ``Autograde.autograde_preprocessors``) reads the cell's answer expression, asks the
  kernel what it is (a function or a value), and runs the *trusted* checker
  ``transformer_lib.exercises.get(name)`` in the autograder's own process with a
  :class:`KernelFunction` standing in for the student's function. Each call pickles the
  checker's arguments into the sandbox (trusted to untrusted) and brings the result back as data
  only: a ``torch.load(weights_only=True)`` file of tagged tensors, numbers, strings and
  containers, never an object the kernel chose (:func:`decode`). The cell's outputs are written
  here: a printed verdict, and an error output for NOT YET so that nbgrader scores it 0.

So a student's code can change only what its own function returns. What this does not stop: an
answer that calls the library's own reference function (the registry has no solutions, but
``transformer_lib.attention`` is there to be imported: a human reading the submission sees it), and
whatever the sandbox's kernel is allowed (reading the library and the interpreter's files, using
its CPU share until the time limit).
"""
from __future__ import annotations

import atexit
import io
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbformat import v4
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Bool, Enum, Float, Integer, Unicode

from bookkit.conventions import KERNELSPEC, NoWidgetMimic
from bookkit.process_limit import ProcessGroup, joining_command, pids_root

__all__ = ["NOBODY", "sandbox_command", "SandboxedKernelManager", "KernelFunction", "KernelError",
           "decode", "KERNEL_CALL", "SandboxedExecute", "TrustedCells", "SafeOutputs", "bwrap_available"]

NOBODY = 65534                    # the uid and gid a sandboxed kernel has inside its namespace
RESULT_LIMIT = 64 * 2**20         # bytes: a result file larger than this is refused
HOME_BYTES = 512 * 2**20          # the sandbox's /tmp (its home): a tmpfs of this size
SHM_BYTES = 64 * 2**20            # the sandbox's /dev/shm
FILE_BYTES = 2 * RESULT_LIMIT     # the largest file the kernel may write (prlimit --fsize)
FOLDER_BYTES = 4 * RESULT_LIMIT   # what the kernel's folder on the grader's disk may hold at once
OUTPUT_LIMIT = 2 * 2**20          # bytes of outputs one cell keeps; the rest is dropped as it arrives
MAX_DEPTH = 32                    # nesting of lists/tuples/dicts a result may have


def bwrap_available() -> bool:
    """True when ``bwrap`` is on PATH (``make sandbox-deps`` installs Debian's bubblewrap)."""
    return shutil.which("bwrap") is not None


def _readable_roots() -> list[str]:
    """What a kernel must read: the interpreter (the venv and the Python it points at) and the
    packages an editable install serves from outside it (``transformer_lib`` only: the checkout's
    ``chapters/`` and ``tests/`` hold the solutions)."""
    import transformer_lib
    roots = {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent.parent),
             str(Path(transformer_lib.__file__).resolve().parent)}
    return sorted(r for r in roots if not any(r != o and r.startswith(o + os.sep) for o in roots))


def _hidden_files() -> list[str]:
    """The exercises' data files (expected numbers): the trusted checker reads them, the
    student's kernel sees an empty file in their place."""
    import transformer_lib
    folder = Path(transformer_lib.__file__).resolve().parent / "exercises"
    return sorted(str(p) for p in folder.glob("*") if p.is_file() and p.suffix not in (".py", ".pyc"))


def sandbox_command(argv: list[str], *, writable: list[str], readonly: list[str] = (),
                    memory_bytes: int = 4 * 2**30, cpu_seconds: int = 900, processes: int = 128,
                    env: dict[str, str] | None = None, home_bytes: int = HOME_BYTES) -> list[str]:
    """``argv`` wrapped in bubblewrap: a new user, pid, net, ipc, uts and cgroup namespace, the
    system's ``/usr`` and ``/etc``, the interpreter and the library read-only, ``writable``
    folders bound at the same paths (so socket paths mean the same on both sides), a private
    ``/tmp`` with an empty home as working directory, only ``env`` in the environment, and
    ``prlimit`` limits on address space (``memory_bytes``), CPU time (``cpu_seconds``), processes
    (``processes``: holds where the grader is not root, see :mod:`bookkit.process_limit`) and the
    size of one file (``FILE_BYTES``). What the kernel can write is bounded: ``/tmp`` is a tmpfs of
    ``home_bytes``, ``/dev/shm`` one of ``SHM_BYTES``, ``/dev`` is read-only, and the ``writable``
    folders are watched by the grader (:class:`SandboxedExecute`, ``FOLDER_BYTES``)."""
    if not isinstance(argv, (list, tuple)) or not argv:
        raise ValueError("argv must be a non-empty list of strings")
    if memory_bytes <= 0 or cpu_seconds <= 0 or processes <= 0 or home_bytes <= 0:
        raise ValueError(f"memory_bytes, cpu_seconds and processes must be positive, got {memory_bytes}, "
                         f"{cpu_seconds}, {processes}")
    cmd = ["bwrap", "--unshare-all", "--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY),
           "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/lib", "/lib32", "/lib64", "/sbin"):
        if os.path.islink(top):
            cmd += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            cmd += ["--ro-bind", top, top]
    # the private /tmp comes before the binds: an interpreter or checkout that lives under /tmp
    # (a CI clone, a pytest folder) is bound on top of it instead of being hidden by it
    cmd += ["--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev",
            "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
            "--size", str(home_bytes), "--tmpfs", "/tmp"]
    for path in _readable_roots():
        cmd += ["--ro-bind", path, path]
    for path in _hidden_files():
        cmd += ["--ro-bind", "/dev/null", path]
    for path in writable:
        cmd += ["--bind", path, path]
    for path in readonly:
        cmd += ["--ro-bind", path, path]
    cmd += ["--dir", "/tmp/home", "--chdir", "/tmp/home", "--clearenv"]
    for key, value in (env or {}).items():
        cmd += ["--setenv", key, value]
    return cmd + ["--", "prlimit", f"--as={memory_bytes}", f"--cpu={cpu_seconds}", f"--nproc={processes}",
                  f"--fsize={FILE_BYTES}", "--core=0", "--",
                  *argv]


def kernel_environment() -> dict[str, str]:
    """The sandboxed kernel's whole environment: no inherited secrets, the book's CPU settings,
    one thread (parallel autogrades do not oversubscribe the cores) and ``PYTHONSAFEPATH=1`` (no
    folder of the working directory shadows a package)."""
    env = {"HOME": "/tmp/home", "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
           "LANG": "C.UTF-8", "PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "MPLCONFIGDIR": "/tmp/home/.matplotlib",
           "TLIB_DEVICE": "cpu", "TLIB_STATIC_WIDGETS": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.update({k: v for k, v in os.environ.items() if k.startswith("TLIB_") and k != "TLIB_DEVICE"})
    # the kernel imports the library the checkers come from (the folder bound into the sandbox),
    # not whatever another checkout the interpreter's editable install points at
    import transformer_lib
    env["PYTHONPATH"] = str(Path(transformer_lib.__file__).resolve().parent.parent)
    return env


PRELOAD = "import numpy, torch, matplotlib, transformer_lib"


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel started inside :func:`sandbox_command`, reached over ``ipc`` sockets in
    ``sandbox_dir/kernel`` (bound into the sandbox at the same path), in a control group of its
    own with at most ``max_processes`` tasks where the machine allows one. Interrupts go as
    messages (a signal would reach bwrap, not the kernel). ``preload`` runs as the kernel starts,
    before any cell (the grader's own imports: a kernel started ahead of its submission has paid
    for them before the submission's first cell)."""

    sandbox_dir = Unicode("", help="a private folder (0700) for the sockets and the calls' files")
    memory_bytes = Integer(4 * 2**30, help="address-space limit of the kernel process")
    cpu_seconds = Integer(900, help="CPU-time limit of the kernel process")
    max_processes = Integer(128, help="processes and threads the kernel may have at once")
    preload = Unicode(PRELOAD, help="Python run as the kernel starts, before any cell")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if not self.sandbox_dir:
            raise ValueError("SandboxedKernelManager needs sandbox_dir")
        self.transport = "ipc"
        self.connection_file = os.path.join(self.kernel_folder, "kernel.json")
        self.process_group: ProcessGroup | None = None

    @property
    def kernel_folder(self) -> str:
        return os.path.join(self.sandbox_dir, "kernel")

    @property
    def inbox(self) -> str:
        return os.path.join(self.sandbox_dir, "in")

    async def _async_pre_start_kernel(self, **kw):
        cmd, kw = await super()._async_pre_start_kernel(**kw)
        self.kernel_spec.interrupt_mode = "message"
        return cmd, kw

    def format_kernel_cmd(self, extra_arguments=None):
        argv = super().format_kernel_cmd(extra_arguments)
        if self.preload:
            argv = [*argv, f"--IPKernelApp.exec_lines={self.preload}"]
        cmd = sandbox_command(argv, writable=[self.kernel_folder], readonly=[self.inbox],
                              memory_bytes=self.memory_bytes, cpu_seconds=self.cpu_seconds,
                              processes=self.max_processes, env=kernel_environment())
        parent = pids_root()
        if parent is None:
            if os.geteuid() == 0:
                self.log.warning("no control group with a pids controller can be made here: a fork bomb "
                                 "is bounded only by the pid namespace and the machine's own limits")
            return cmd
        self.process_group = ProcessGroup(parent, self.max_processes)
        self.log.info("the kernel's control group: %s", self.process_group.path.name)
        return joining_command(cmd, self.process_group)

    def kill_now(self) -> int:
        """End the kernel (SIGKILL to bwrap; the pid namespace takes everything in it along),
        then everything left in its control group, and remove its folder; returns :meth:`release`'s count."""
        process = getattr(self.provisioner, "process", None) if self.provisioner else None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        return self.release()

    def release(self) -> int:
        """Remove the control group and the sandbox folder; returns how many forks the cap refused."""
        refused = 0
        if self.process_group is not None:
            refused = self.process_group.refused_forks()
            self.process_group.close()
            self.process_group = None
        shutil.rmtree(self.sandbox_dir, ignore_errors=True)
        return refused


# Kernels started ahead for the next submissions of this autograde process, by configuration:
# each was started for no one, and each is used by one submission only.
_SPARES: dict[tuple, list[SandboxedKernelManager]] = {}
_USED: dict[tuple, int] = {}  # kernels handed to submissions so far, by the same configuration


def _new_sandbox() -> str:
    folder = tempfile.mkdtemp(prefix="tlib-grade-")
    os.mkdir(os.path.join(folder, "kernel"), 0o700)
    os.mkdir(os.path.join(folder, "in"), 0o700)
    return folder


@atexit.register
def _end_spares() -> None:
    for spares in _SPARES.values():
        while spares:
            spares.pop().kill_now()


# -- what runs in the kernel ------------------------------------------------------------------------

# One call into the sandbox: evaluate the answer expression in the student's namespace, call it
# with the pickled arguments (or describe it when there are none), write the outcome as tagged
# data. Defined afresh for every call; a student who replaces it only breaks their own answer.
KERNEL_CALL = r'''
def __tlib_grading_call(namespace, expression, args_path, out_path):
    import os, pickle
    import numpy, torch

    def encode(x, depth=0):
        if depth > %(depth)d:
            raise TypeError("the result nests too deeply")
        if x is None:
            return ["none"]
        if x is Ellipsis:
            return ["ellipsis"]
        if isinstance(x, bool):
            return ["bool", bool(x)]
        if isinstance(x, int):
            return ["int", int(x)]
        if isinstance(x, float):
            return ["float", float(x)]
        if isinstance(x, str):
            return ["str", str(x)]
        if isinstance(x, bytes):
            return ["bytes", bytes(x)]
        if isinstance(x, torch.Tensor):
            return ["tensor", x.detach().cpu().contiguous().clone()]
        if isinstance(x, numpy.ndarray):
            return ["ndarray", torch.from_numpy(numpy.ascontiguousarray(x).copy())]
        if isinstance(x, numpy.generic):
            return ["npscalar", torch.from_numpy(numpy.asarray(x).reshape(1).copy())]
        if isinstance(x, tuple):
            return ["tuple", [encode(i, depth + 1) for i in x]]
        if isinstance(x, list):
            return ["list", [encode(i, depth + 1) for i in x]]
        if isinstance(x, (set, frozenset)):
            return ["set", [encode(i, depth + 1) for i in x]]
        if isinstance(x, dict):
            return ["dict", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in x.items()]]
        raise TypeError(f"the grader takes tensors, arrays, numbers, strings, lists, tuples and dicts, "
                        f"not {type(x).__name__}")

    try:
        value = eval(expression, namespace)
        if args_path is None:
            is_function = callable(value) and not isinstance(value, (torch.Tensor, numpy.ndarray))
            out = ["ok", ["function"] if is_function else encode(value)]
        else:
            with open(args_path, "rb") as f:
                args, kwargs = pickle.load(f)
            out = ["ok", encode(value(*args, **kwargs))]
    except BaseException as err:
        out = ["raise", type(err).__name__, str(err)[:500]]
    torch.save(out, out_path + ".part")
    os.replace(out_path + ".part", out_path)
'''.replace("%(depth)d", str(MAX_DEPTH))


class KernelError(Exception):
    """The student's code raised in the sandbox; the message names its type and says what it said."""


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z_0-9]{0,59}\Z")


def _raised(ename, evalue) -> Exception:
    """The exception a checker sees for an error in the kernel (names and text only)."""
    ename = ename if isinstance(ename, str) and _IDENTIFIER.match(ename) else "Error"
    evalue = evalue[:500] if isinstance(evalue, str) else ""
    if ename == "NotImplementedError":
        return NotImplementedError(evalue)
    return type(ename, (KernelError,), {})(evalue)  # the checker says "your answer raised ValueError: ..."


def decode(node, depth: int = 0, *, top: bool = False):
    """The value a tagged result tree stands for, checked node by node: only tensors, NumPy
    arrays and scalars, Python numbers, strings, bytes and containers of them come out (a
    ``["function"]`` node only at the top, where it describes the answer itself). Anything else
    raises :class:`KernelError`: an object that compares equal to everything cannot be sent."""
    import numpy as np
    import torch
    if depth > MAX_DEPTH + 1:
        raise KernelError("the result nests too deeply")
    if not isinstance(node, list) or not node or not isinstance(node[0], str):
        raise KernelError("the kernel sent a malformed result")
    tag, rest = node[0], node[1:]
    scalars = {"bool": bool, "int": int, "float": float, "str": str, "bytes": bytes}
    if tag in ("none", "ellipsis", "function") and not rest:
        if tag == "function":
            if not top:
                raise KernelError("a result may not hold a function")
            return KernelFunction
        return None if tag == "none" else Ellipsis
    if tag in scalars and len(rest) == 1 and type(rest[0]) is scalars[tag]:
        return rest[0]
    if tag in ("tensor", "ndarray", "npscalar") and len(rest) == 1 and type(rest[0]) is torch.Tensor:
        t = rest[0]
        if tag == "tensor":
            return t
        if tag == "ndarray":
            return t.numpy()
        if t.numel() == 1:
            return t.numpy().reshape(())[()]
    if tag in ("tuple", "list", "set") and len(rest) == 1 and type(rest[0]) is list:
        items = [decode(item, depth + 1) for item in rest[0]]
        return {"tuple": tuple, "list": list, "set": set}[tag](items)
    if tag == "dict" and len(rest) == 1 and type(rest[0]) is list:
        pairs = rest[0]
        if not all(type(p) is list and len(p) == 2 for p in pairs):
            raise KernelError("the kernel sent a malformed dict")
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in pairs}
    raise KernelError(f"the kernel sent a malformed {tag!r} node")


def read_result(path: str):
    """Load a result file the kernel wrote: a regular file (no link, no FIFO), at most
    ``RESULT_LIMIT`` bytes, through ``torch.load(weights_only=True)`` (no object is unpickled)."""
    import torch
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        raise KernelError("the kernel wrote no result (did the code stop the grader's call?)") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > RESULT_LIMIT:
            raise KernelError("the kernel's result is not a plain file of a sensible size")
        data = f.read(RESULT_LIMIT + 1)
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except Exception as err:  # an object the safe loader refuses
        raise KernelError(f"the result cannot be read as data ({type(err).__name__})") from None


def _folder_bytes(folder: str, limit: int) -> int:
    """Bytes the files under ``folder`` take on disk (a count past ``limit`` stops early; every
    entry counts 4 KiB at least, so a million empty files count too)."""
    total, stack = 0, [folder]
    while stack and total <= limit:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    info = entry.stat(follow_symlinks=False)
                    total += max(info.st_blocks * 512, 4096)
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            pass
    return total


def _dead_kernel_output():
    return v4.new_output("error", ename="DeadKernelError", evalue="the kernel had stopped",
                         traceback=["DeadKernelError: the kernel had stopped (an earlier cell ended it or hung)"])


class KernelFunction:
    """The student's function as the trusted checker sees it: calling it runs the function in
    the sandboxed kernel on the (pickled) arguments and returns the result as data."""

    def __init__(self, grader: "SandboxedExecute", expression: str):
        self._grader, self._expression = grader, expression

    def __call__(self, *args, **kwargs):
        return self._grader.kernel_call(self._expression, (args, kwargs))

    def __repr__(self) -> str:
        return f"<the student's {self._expression} (in the sandbox)>"


class SandboxedExecute(NoWidgetMimic, Execute):
    """nbgrader's ``Execute`` with the kernel in a sandbox and the graded cells decided here.

    Non-graded cells run in the sandboxed kernel as usual. A graded cell (``assert check("name",
    answer)``, restored from the gradebook by nbgrader before this runs) is not executed: the
    checker runs in this process against a :class:`KernelFunction` or the answer's value, and the
    cell gets the verdict as its output (an ``AssertionError`` output when NOT YET)."""

    call_timeout = Integer(60, help="seconds one call of the student's function may take").tag(config=True)
    memory_bytes = Integer(4 * 2**30, help="address-space limit of the sandboxed kernel").tag(config=True)
    cpu_seconds = Integer(900, help="CPU-time limit of the sandboxed kernel").tag(config=True)
    require_sandbox = Bool(True, help="refuse to grade when bwrap is missing").tag(config=True)
    notebook_timeout = Integer(1200, help="seconds a whole submission may take, its cells and its checks, counted "
                                          "from the moment its kernel answers: "
                                          "later cells are skipped, later checks score 0").tag(config=True)
    output_limit = Integer(OUTPUT_LIMIT, help="bytes of outputs one cell keeps").tag(config=True)
    folder_bytes = Integer(FOLDER_BYTES, help="bytes the kernel may keep in its folder on the grader's "
                                              "disk (the kernel is killed past it)").tag(config=True)
    probe_timeout = Float(10.0, help="seconds a kernel may take to answer after a timed-out call").tag(config=True)
    max_processes = Integer(128, help="processes and threads a submission's kernel may have at once "
                                      "(a fork bomb fails at this cap)").tag(config=True)
    # a kernel's start (bwrap, the interpreter, the library's imports) started ahead runs on the
    # second core while this submission's cells run on the first. Each spare is a fresh sandbox,
    # used by one submission only.
    prestart = Integer(1, help="kernels started ahead for the next submissions of this process: their "
                               "start and imports overlap this submission's cells").tag(config=True)
    # without it the last submission of a process starts a spare that no one uses (a whole kernel
    # start and its imports, about 3 CPU-s)
    kernels_needed = Integer(0, help="submissions this process grades in all (autograde_class sets it): "
                                     "no kernel is started ahead past that many; 0: unknown").tag(config=True)
    # the outputs are collected when the last cell ends: a graceful shutdown would only wait for
    # the kernel's interpreter to tear itself down (about 3 s a submission, measured)
    shutdown_kernel = Enum(["graceful", "immediate"], default_value="immediate").tag(config=True)

    # No widget state is kept and no Output widget is mimicked. nbclient's mimic (its
    # ``OutputWidget``) answers every output the kernel sends into an ``ipywidgets.Output`` (the
    # book's ``explore`` draws into one) by *sending* the widget's whole state, figures included,
    # back to the kernel on the shell socket, from the task that reads iopub, while the task that
    # waits for the cell's ``execute_reply`` polls that same socket. That is the one cell kind in
    # the book where the grader writes to the kernel mid-cell, and the one cell where a reply was
    # seen lost (chapter 1's ``explore`` cells, twice in 30-submission runs; nbclient issue #312
    # reports execute_cell blocking with ipywidgets in the same way). 60 runs of those two cells in
    # one sandboxed kernel did not lose a reply here, so this removes the mechanism; it is not a
    # failure reproduced on demand. The grade needs neither: a widget's outputs become the
    # cell's own, and nothing is sent to the kernel during a cell (test_course.py checks that).
    store_widget_state = Bool(False).tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        if self.require_sandbox and not bwrap_available():
            raise RuntimeError("bwrap is not installed: run `make sandbox-deps` (Debian's bubblewrap)")
        self._manager = None
        self._calls, self._unresponsive, self._disk_exceeded = 0, False, False
        self._output_bytes, self._sandbox = {}, None
        self.timings = {"kernel_start": None, "cells": 0.0, "checks": 0.0}
        self._start = time.perf_counter()
        stop = threading.Event()
        watcher = threading.Thread(target=self._watch_folder, args=(stop,), daemon=True)
        watcher.start()
        try:
            return super().preprocess(nb, resources, km)
        finally:
            stop.set()
            watcher.join(5)
            refused = self._manager.kill_now() if self._manager is not None else 0
            if refused:
                self.log.warning("the submission's kernel was refused %d forks at its cap of %d processes",
                                 refused, self.max_processes)
            t = self.timings
            self.log.info("sandboxed grading: kernel start %.2f s, notebook cells %.2f s, checks %.2f s "
                          "(%d calls into the kernel)", t["kernel_start"] or 0.0, t["cells"], t["checks"], self._calls)

    def _kernel_key(self) -> tuple:
        return (self.kernel_name, self.memory_bytes, self.cpu_seconds, self.max_processes,
                tuple(self._kernel_arguments()))

    def _kernel_arguments(self) -> list[str]:
        """What nbclient passes to a kernel it starts (``async_start_new_kernel``)."""
        history = any(a.startswith("--HistoryManager.hist_file") for a in self.extra_arguments)
        return [*self.extra_arguments] + ([] if history else [f"--HistoryManager.hist_file={self.ipython_hist_file}"])

    def _new_manager(self) -> SandboxedKernelManager:
        return SandboxedKernelManager(kernel_name=self.kernel_name, config=self.config, sandbox_dir=_new_sandbox(),
                                      memory_bytes=self.memory_bytes, cpu_seconds=self.cpu_seconds,
                                      max_processes=self.max_processes)

    def create_kernel_manager(self):
        """A kernel started ahead (already importing, never used) when one is waiting, else a new
        manager that nbclient starts."""
        if not self.kernel_name:
            self.kernel_name = self.nb.metadata.get("kernelspec", {}).get("name") or "python3"
        spares = _SPARES.get(self._kernel_key(), [])
        km = None
        while spares and km is None:
            km = spares.pop(0)
            if km.provisioner is None or km.provisioner.process is None or km.provisioner.process.poll() is not None:
                km.kill_now()  # it died waiting (killed from outside): start another
                km = None
        if km is not None:
            self.log.info("a kernel started %.1f s ahead", time.perf_counter() - km.started)
        _USED[self._kernel_key()] = _USED.get(self._kernel_key(), 0) + 1
        self.km = self._manager = km or self._new_manager()
        self._sandbox = self.km.sandbox_dir
        return self.km

    async def async_start_new_kernel_client(self):
        """The client of this submission's kernel; once it answers, the next submissions'
        kernels are started (they boot while this one runs)."""
        kc = await super().async_start_new_kernel_client()
        key = self._kernel_key()
        spares = _SPARES.setdefault(key, [])
        while len(spares) < self.prestart and (not self.kernels_needed
                                               or _USED.get(key, 0) + len(spares) < self.kernels_needed):
            km = self._new_manager()
            await km.start_kernel(extra_arguments=self._kernel_arguments())
            km.started = time.perf_counter()
            spares.append(km)
        return kc

    start_new_kernel_client = run_sync(async_start_new_kernel_client)  # nbclient binds its own otherwise

    def preprocess_cell(self, cell, resources, index):
        if self.timings["kernel_start"] is None:  # the kernel is up and has answered kernel_info
            self.timings["kernel_start"] = time.perf_counter() - self._start
            # the submission's time starts now: a grader slow to start its kernel (a busy machine)
            # must not spend what the student's cells and checks are given
            self._start = time.perf_counter()
        start = time.perf_counter()
        try:
            return self._preprocess_cell(cell, resources, index)
        finally:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            self.timings["checks" if meta.get("grade") else "cells"] += time.perf_counter() - start

    def _preprocess_cell(self, cell, resources, index):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade"):
            self._index = index
            self._grade_cell(cell)
            self.nb.cells[index] = cell  # nbclient stored the grader's own calls at this index
            return cell, self.resources
        if cell.cell_type != "code":
            return cell, self.resources
        if self._unresponsive:
            cell.outputs = [_dead_kernel_output()]
            return cell, self.resources
        left = self.notebook_timeout - (time.perf_counter() - self._start)
        if left <= 0 or self._disk_exceeded:
            self._unresponsive = True
            cell.outputs = [_dead_kernel_output()]
            return cell, self.resources
        saved = self.timeout  # a cell gets what is left of the submission's time, at most
        self.timeout = int(max(1, min(saved or left, left)))
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
            if any(o.get("ename") == "CellTimeoutError" for o in cell.get("outputs", [])):
                self._index = index
                if not self._execute_quietly("pass", self.probe_timeout):  # interrupted, or hung for good?
                    self._unresponsive = True
                self.nb.cells[index] = cell
            return cell, resources
        except Exception as err:  # the student's code ended or broke its kernel: the rest scores nothing
            self.log.warning("the kernel stopped answering at cell %d (%s): no further cell runs",
                             index, type(err).__name__)
            self._unresponsive = True
            cell.outputs = [_dead_kernel_output()]
            return cell, self.resources
        finally:
            self.timeout = saved

    def output(self, outs, msg, display_id, cell_index):
        """nbclient's handler of one output message, with at most ``OUTPUT_LIMIT`` bytes kept per
        cell: a submission that prints gigabytes costs the grader the time to read them, never the
        memory to keep them (nor the gradebook, the feedback page or the formgrader the space)."""
        content = msg.get("content", {})
        size = len(content.get("text", "") or "") + sum(len(v) if isinstance(v, str) else len(repr(v))
                                                        for v in (content.get("data") or {}).values())
        size += sum(len(line) for line in content.get("traceback", []) or [])
        kept = self._output_bytes.get(cell_index, 0)
        self._output_bytes[cell_index] = kept + size
        if kept + size <= self.output_limit:
            return super().output(outs, msg, display_id, cell_index)
        if kept <= self.output_limit:  # the first message past the limit: say so, once
            outs.append(v4.new_output("stream", name="stderr",
                                      text=f"\n[the grader kept the first {self.output_limit} bytes of this "
                                           f"cell's output and dropped the rest]\n"))
        return None

    def _watch_folder(self, stop) -> None:
        """Kill the kernel when its folder on the grader's disk holds more than ``folder_bytes``
        (the one place outside its tmpfs where it can write); checked every 0.2 s."""
        while not stop.wait(0.2):
            folder = os.path.join(self._sandbox, "kernel") if self._sandbox else None
            if folder and _folder_bytes(folder, self.folder_bytes) > self.folder_bytes:
                self.log.warning("the submission's kernel wrote more than %d bytes to its folder: killed",
                                 self.folder_bytes)
                self._disk_exceeded = self._unresponsive = True
                manager = self._manager
                if manager is not None:
                    manager.kill_now()
                return

    # -- one graded cell ---------------------------------------------------------------------------

    def _grade_cell(self, cell) -> None:
        from bookkit.course import check_call
        from transformer_lib.exercises import Result, get
        try:
            name, expression = check_call(cell.source.replace("assert check(", "check(", 1))
            exercise = get(name)
        except ValueError as err:  # not a check cell this course wrote: no automatic points
            result = Result("?", False, f"this graded cell is not a check the grader knows ({err})")
        else:
            try:
                answer = self._describe(expression)
            except Exception as err:
                result = Result(name, False, f"your answer raised {type(err).__name__}: {err}")
            else:
                result = exercise.run(answer)
        cell.execution_count = None
        cell.outputs = [v4.new_output("stream", name="stdout", text=f"{result}\n")]
        if not result.passed:
            cell.outputs.append(v4.new_output("error", ename="AssertionError", evalue=str(result),
                                              traceback=[f"AssertionError: {result}"]))

    def _describe(self, expression: str):
        value = self._run_in_kernel(expression, None)
        return KernelFunction(self, expression) if value is KernelFunction else value

    def kernel_call(self, expression: str, arguments: tuple):
        return self._run_in_kernel(expression, arguments)

    def _run_in_kernel(self, expression: str, arguments):
        import pickle
        if self._unresponsive:
            raise _raised("TimeoutError", "the kernel stopped answering after an earlier call")
        left = self.notebook_timeout - (time.perf_counter() - self._start)
        if left <= 0:  # the checks share the submission's time with its cells
            self._unresponsive = True
            raise _raised("TimeoutError", f"the submission used all of its {self.notebook_timeout} s")
        self._calls += 1
        args_path = None
        if arguments is not None:
            args_path = os.path.join(self._sandbox, "in", f"args-{self._calls}.pkl")
            fd = os.open(args_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                pickle.dump(arguments, f)
        out_path = os.path.join(self._sandbox, "kernel", f"result-{self._calls}.pt")
        code = KERNEL_CALL + (f"__tlib_grading_call(globals(), {expression!r}, {args_path!r}, {out_path!r})\n"
                              "del __tlib_grading_call\n")
        timed_out = not self._execute_quietly(code, min(self.call_timeout, left))
        try:
            if timed_out:
                if not self._execute_quietly("pass", self.probe_timeout):
                    self._unresponsive = True
                raise _raised("TimeoutError", f"the call took longer than {int(min(self.call_timeout, left))} s")
            outcome = read_result(out_path)
        finally:
            for path in (args_path, out_path):
                if path and os.path.lexists(path):
                    os.unlink(path)
        if not isinstance(outcome, list) or not outcome or outcome[0] not in ("ok", "raise"):
            raise KernelError("the kernel sent a malformed result")
        if outcome[0] == "raise":
            raise _raised(*(outcome[1:3] if len(outcome) == 3 else ("Error", "")))
        if len(outcome) != 2:
            raise KernelError("the kernel sent a malformed result")
        return decode(outcome[1], top=arguments is None)

    def _execute_quietly(self, code: str, timeout: float) -> bool:
        """Run ``code`` in the kernel as a cell of its own (outputs dropped); False on a timeout."""
        cell = v4.new_code_cell(code)
        saved = self.timeout
        self.timeout = int(max(1, timeout))
        try:
            self.execute_cell(cell, self._index, store_history=False)
        except Exception:  # a dead kernel, or one whose messages no longer make sense
            self._unresponsive = True
            return False
        finally:
            self.timeout = saved
        return not any(o.get("output_type") == "error" and o.get("ename") == "CellTimeoutError"
                       for o in cell.outputs)


# -- what nbgrader keeps of a submission ------------------------------------------------------------

_TAG = re.compile(r"[A-Za-z0-9_.:-]{1,64}\Z")
_CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")


def _plain_source(source) -> str:
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        return "".join(source)
    return ""


class TrustedCells(NbGraderPreprocessor):
    """The first step of autograde's sanitizing: every cell rebuilt from its type and source,
    its ``nbgrader`` metadata taken from the gradebook, never from the submission.

    nbgrader's ``OverwriteCells`` restores a known cell's source, type, ``locked`` and
    ``points``, but it believes the submission about the rest: a cell whose ``grade_id`` the
    gradebook does not know, or a solution cell marked ``grade``, stops the student's whole
    autograde with an exception; a check cell marked ``grade: false`` is run as the student's
    code and never graded. Here a cell whose ``grade_id`` the gradebook knows gets exactly the
    source notebook's flags and points; any other cell loses its ``nbgrader`` metadata (it is
    the student's own cell: it runs, it scores nothing). Other cell metadata is dropped except
    well-formed ``tags`` (a tag is written into the HTML pages' class names), outputs and
    attachments are dropped, and the notebook's metadata is reduced to its kernelspec (set again
    from the gradebook by ``OverwriteKernelspec``) and language: no widget state, no title, no
    field a page could render. Deleted graded cells are put back by ``OverwriteCells``
    (``add_missing_cells``), so they are graded as the instructor wrote them."""

    def preprocess(self, nb, resources):
        from nbgrader.api import Gradebook
        info = resources["nbgrader"]
        folder = resources.get("metadata", {}).get("path") or "."
        linked = [p for p in (os.path.join(folder, info["notebook"] + ".ipynb"), folder, os.path.dirname(folder))
                  if os.path.islink(p)]
        if linked:  # a notebook reached through a link is someone else's file: nothing of it is graded
            self.log.warning("the submission's notebook is reached through a link (%s): graded as empty", linked[0])
            nb["cells"] = []
        with Gradebook(info["db_url"]) as gb:
            source = gb.find_notebook(info["notebook"], info["assignment"])
            known = {c.name: (c.cell_type, bool(c.locked)) for c in source.source_cells}
            texts = {c.name: c.source for c in source.source_cells}
            points = {c.name: float(c.max_score) for c in source.grade_cells}
            solutions = {c.name for c in source.solution_cells}
        cells, ids, last = [], set(), {}
        given = [c for c in (nb.get("cells") if isinstance(nb.get("cells"), list) else []) if isinstance(c, dict)]
        marked = []
        for n, old in enumerate(given):
            meta = old.get("metadata") if isinstance(old.get("metadata"), dict) else {}
            marks = meta.get("nbgrader") if isinstance(meta.get("nbgrader"), dict) else {}
            marked.append(marks.get("grade_id") if isinstance(marks.get("grade_id"), str) else None)
            last[marked[-1]] = n
        for n, old in enumerate(given):
            meta = old.get("metadata") if isinstance(old.get("metadata"), dict) else {}
            # a grade_id given twice counts at its last cell (as nbgrader's DeduplicateIds, which
            # would leave an empty nbgrader dict on the others that stops the student's autograde)
            gid = marked[n] if last.get(marked[n]) == n else None
            kind = old.get("cell_type") if old.get("cell_type") in ("code", "markdown", "raw") else "markdown"
            if gid in known:
                kind = known[gid][0]
            text = _plain_source(old.get("source"))
            cell = {"code": v4.new_code_cell, "markdown": v4.new_markdown_cell, "raw": v4.new_raw_cell}[kind](text)
            cid = old.get("id")
            if isinstance(cid, str) and _CELL_ID.match(cid) and cid not in ids:
                cell["id"] = cid
            ids.add(cell["id"])
            tags = meta.get("tags")
            if isinstance(tags, list) and tags and all(isinstance(t, str) and _TAG.match(t) for t in tags):
                cell.metadata["tags"] = list(tags)
            if gid in known:
                trusted = {"grade": gid in points, "grade_id": gid, "locked": known[gid][1],
                           "schema_version": 3, "solution": gid in solutions, "task": False}
                if gid in points:
                    trusted["points"] = points[gid]
                cell.metadata["nbgrader"] = trusted
            cells.append(cell)
        present = {c.metadata.get("nbgrader", {}).get("grade_id") for c in cells}
        for gid in [g for g in known if g in points and g not in present]:  # a deleted graded cell
            self.log.warning("graded cell %s was missing: the instructor's cell is graded at the end", gid)
            cell = v4.new_code_cell(texts[gid]) if known[gid][0] == "code" else v4.new_markdown_cell(texts[gid])
            cell.metadata["nbgrader"] = {"grade": True, "grade_id": gid, "locked": known[gid][1], "points": points[gid],
                                         "schema_version": 3, "solution": gid in solutions, "task": False}
            cells.append(cell)
        nb["cells"] = cells
        nb["metadata"] = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}}
        nb["nbformat"], nb["nbformat_minor"] = 4, 5
        return nb, resources


# what a page may show of a student's outputs: pictures as data, text as text
SAFE_OUTPUT_KEYS = ("text/plain", "image/png", "image/jpeg")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*\Z")  # a picture is written into an <img src="data:..."> attribute


def _clean_html(text: str) -> str:
    import bleach
    return bleach.clean(text, tags={"a", "abbr", "b", "blockquote", "br", "code", "div", "em", "h1", "h2",
                                    "h3", "h4", "h5", "h6", "hr", "i", "li", "ol", "p", "pre", "span", "strong",
                                    "sub", "sup", "table", "tbody", "td", "th", "thead", "tr", "ul"},
                        attributes={"a": ["href", "title"], "*": ["class"]},
                        protocols={"http", "https", "mailto"}, strip=False, strip_comments=True)


class SafeOutputs(NbGraderPreprocessor):
    """No script from a student's notebook reaches a page the instructor opens.

    The formgrader and ``generate_feedback`` render the autograded notebook with nbconvert,
    which passes raw HTML in markdown cells and ``text/html``, ``image/svg+xml`` and
    ``application/javascript`` outputs into the page as they are: a ``<script>`` or an
    ``onerror=`` there runs in the instructor's browser, on the origin of their Jupyter server.
    This keeps of every output only plain text and PNG/JPEG data (a figure's picture, a widget's
    text), and passes every markdown cell through an allowlist HTML cleaner (bleach): tags
    outside a small set of formatting tags are escaped to text, attributes other than a link's
    ``href`` (http, https, mailto) and ``class`` are dropped. Run in autograde (so the
    autograded notebook the formgrader shows is clean) and again in feedback. The instructor's
    own markdown loses its figures' HTML in these pages; the grades do not change."""

    def preprocess_cell(self, cell, resources, index):
        if cell.get("cell_type") == "markdown":
            cell["source"] = _clean_html(_plain_source(cell.get("source")))
            cell.pop("attachments", None)
        if cell.get("cell_type") == "raw":
            cell["metadata"].pop("format", None)
            cell["metadata"].pop("raw_mimetype", None)
        for out in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            if "data" in out:
                data = {k: _plain_source(v) for k, v in out["data"].items() if k in SAFE_OUTPUT_KEYS}
                data = {k: v for k, v in data.items() if k == "text/plain" or _BASE64.match(v)}
                out["data"] = data or {"text/plain": "[an output the grader does not show]"}
                out["metadata"] = {}
        return cell, resources


# -- a class at once ----------------------------------------------------------------------------------

def autograde_class(course: str | Path, assignment: str, jobs: int = 1, students: list[str] | None = None,
                    extra: list[str] = (), retries: int = 1, timeout: float | None = None) -> dict[str, dict]:
    """Autograde every submission of ``assignment``: by default one ``nbgrader autograde`` process.

    Where a class's grading time went (measured, :mod:`benchmarks.grading`): a process's start
    (importing nbgrader, torch and the checkers, ~5 CPU-s), each kernel's start and imports, the
    chapter's cells, and ~3 s a submission waiting for a kernel to shut down gracefully; and with
    two processes, the shared SQLite gradebook: two writers can make SQLite refuse a lock at once
    (it returns "database is locked" rather than wait where waiting could deadlock), nbgrader
    stops the whole process on that error, and each of its remaining submissions is then graded
    again in a process of its own (a new start each). So one process grades the
    class (one import, one gradebook writer) and :class:`SandboxedExecute` kills a finished
    kernel instead of waiting for it, and starts the next submission's kernel while this one
    runs (``prestart = 1``: the second core does the next kernel's imports). ``jobs > 1`` deals
    the class into that many processes (``--CourseDirectory.student_id_exclude``). A
    submission whose grading failed is graded again alone, ``retries`` times. ``timeout``: seconds
    a process may take (then it is killed, and its kernels with it). Returns
    ``{student: {"seconds": its share of its process's wall time, "log": nbgrader's log for it}}``."""
    import subprocess
    import time
    from concurrent.futures import ThreadPoolExecutor
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    course = Path(course)
    everyone = sorted(p.parent.name for p in (course / "submitted").glob(f"*/{assignment}"))
    students = everyone if students is None else list(students)
    if not students or not set(students) <= set(everyone):
        raise ValueError(f"students must be submitters of {assignment!r} under {course / 'submitted'}, "
                         f"got {sorted(set(students) - set(everyone)) or 'none'}")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")

    def run(group: list[str]) -> dict[str, dict]:
        others = ",".join(s for s in everyone if s not in group)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", assignment, "--force",
                               f"--CourseDirectory.student_id_exclude={others}",
                               f"--SandboxedExecute.kernels_needed={len(group)}", *extra],
                              cwd=course, env=env, capture_output=True, text=True, timeout=timeout)
        seconds = (time.perf_counter() - start) / len(group)
        logs = _split_log(proc.stdout + proc.stderr, course / "submitted", assignment)
        failed = ("Removing failed assignment", "There was an error processing assignment")
        return {s: {"seconds": seconds, "log": logs.get(s, ""),
                    "ok": s in logs and not any(f in logs[s] for f in failed)} for s in group}

    groups = [students[i::jobs] for i in range(jobs) if students[i::jobs]]
    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        graded = {s: r for part in pool.map(run, groups) for s, r in part.items()}
    for student in [s for s in students if not graded[s]["ok"]]:
        for _ in range(retries):
            graded[student] = run([student])[student]
            if graded[student]["ok"]:
                break
        else:
            raise RuntimeError(f"autograde of {student} failed:\n{graded[student]['log'][-3000:]}")
    return {s: {"seconds": graded[s]["seconds"], "log": graded[s]["log"]} for s in students}


def _split_log(log: str, submitted: Path, assignment: str) -> dict[str, str]:
    """nbgrader's log of several students, cut where each one's grading starts."""
    parts, student = {}, None
    for line in log.splitlines(keepends=True):
        match = re.search(r"Sanitizing .*?submitted[/\\]([^/\\]+)[/\\]" + re.escape(assignment), line)
        if match:
            student = match.group(1)
        if student is not None:
            parts[student] = parts.get(student, "") + line
    return parts


def main(argv=None) -> int:
    import argparse
    import time
    parser = argparse.ArgumentParser(prog="python -m bookkit.grading",
                                     description="autograde every submission of an assignment "
                                                 "(one nbgrader process by default)")
    parser.add_argument("assignment")
    parser.add_argument("--course", default=".", help="the course directory (with nbgrader_config.py)")
    parser.add_argument("--jobs", type=int, default=1, help="nbgrader processes side by side (default 1)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    graded = autograde_class(args.course, args.assignment, args.jobs)
    print(f"autograded {len(graded)} submissions of {args.assignment} in {time.perf_counter() - start:.1f} s "
          f"({args.jobs} process{'es' if args.jobs > 1 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
